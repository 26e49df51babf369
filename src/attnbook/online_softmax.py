"""Online softmax: attention over key blocks without ever holding the full score matrix.

The idea behind FlashAttention. For one query row with scores ``s_j`` and values ``v_j``,
keep three running quantities over the keys seen so far:

* ``m`` the largest score,
* ``l = sum_j exp(s_j - m)``,
* ``u = sum_j exp(s_j - m) * v_j``.

Two such states over disjoint sets of keys combine exactly by rescaling both to the larger
max (:func:`merge`), and the attention output is ``u / l`` (:func:`finalize`). Because merge
is associative and commutative, the keys can be split, ordered and grouped in any way.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from attnbook._checks import (
    require_bool,
    require_positive_int,
    require_qkv,
    require_real,
    require_tensor,
)
from attnbook.attention import _working_dtype
from attnbook.masks import causal_mask

__all__ = ["SoftmaxState", "block_state", "finalize", "merge", "tiled_attention"]

_NEG_INF = float("-inf")


class SoftmaxState(NamedTuple):
    """Running softmax statistics over a set of keys, for each query row.

    Attributes:
        m: running max of the scores ``(..., Tq)``; ``-inf`` while no key is allowed.
        l: sum of ``exp(score - m)`` ``(..., Tq)``.
        u: sum of ``exp(score - m) * value`` ``(..., Tq, dv)``.
    """

    m: torch.Tensor
    l: torch.Tensor  # noqa: E741 (the letter the literature uses)
    u: torch.Tensor


def _finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    # A row that has seen no allowed key has m = -inf, and exp(-inf - (-inf)) is NaN. Such a
    # row holds only zeros, so any finite shift is correct; 0 keeps exp(-inf - 0) = 0.
    return m.masked_fill(m == _NEG_INF, 0.0)


def block_state(scores: torch.Tensor, values: torch.Tensor) -> SoftmaxState:
    """Softmax statistics of one block of keys.

    Args:
        scores: floating ``(..., Tq, Tb)``, already scaled; ``-inf`` marks a forbidden key.
        values: ``(..., Tb, dv)`` with the same leading dims ``(...)``.

    Returns:
        :class:`SoftmaxState` with ``m, l`` of shape ``(..., Tq)`` and ``u`` of shape
        ``(..., Tq, dv)``. A row whose keys are all forbidden (or ``Tb == 0``) gets
        ``m = -inf, l = 0, u = 0``, the state of the empty set, which merges as a no-op.
    """
    scores = require_tensor("scores", scores, min_rank=2, dtype="floating")
    values = require_tensor("values", values, min_rank=2, dtype="floating")
    if scores.dtype != values.dtype:
        raise TypeError(f"scores and values must share a dtype, got {scores.dtype}, {values.dtype}")
    if scores.shape[:-2] != values.shape[:-2] or scores.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"scores (..., Tq, Tb) and values (..., Tb, dv) do not fit: "
            f"got scores {tuple(scores.shape)}, values {tuple(values.shape)}"
        )
    if scores.shape[-1] == 0:
        m = scores.new_full(scores.shape[:-1], _NEG_INF)  # (..., Tq)
    else:
        m = scores.amax(dim=-1)  # (..., Tq)
    p = torch.exp(scores - _finite_or_zero(m).unsqueeze(-1))  # (..., Tq, Tb)
    return SoftmaxState(m, p.sum(dim=-1), p @ values)


def _require_state(name: str, state: object) -> SoftmaxState:
    if not isinstance(state, SoftmaxState):
        raise TypeError(f"{name} must be a SoftmaxState, got {type(state).__name__}")
    for field, x in zip(SoftmaxState._fields, state, strict=True):
        require_tensor(f"{name}.{field}", x, dtype="floating")
    if not state.m.dtype == state.l.dtype == state.u.dtype:
        raise TypeError(
            f"{name}'s fields must share a dtype, got m {state.m.dtype}, l {state.l.dtype}, "
            f"u {state.u.dtype}"
        )
    m_shape, l_shape, u_shape = (tuple(x.shape) for x in state)
    if l_shape != m_shape or u_shape[:-1] != m_shape:
        raise ValueError(
            f"{name} has inconsistent shapes: m {m_shape}, l {l_shape}, u {u_shape}; "
            f"expected m and l (..., Tq) and u (..., Tq, dv)"
        )
    return state


def merge(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    """Combine the statistics of two disjoint sets of keys into those of their union.

    Exact up to rounding for any split of the keys, in any order or grouping. An empty or
    fully masked side (``m = -inf``) contributes nothing, and no NaN is produced.

    Args:
        a, b: states with equal shapes: ``m, l`` ``(..., Tq)`` and ``u`` ``(..., Tq, dv)``.

    Returns:
        The merged :class:`SoftmaxState`, same shapes.
    """
    a, b = _require_state("a", a), _require_state("b", b)
    if a.m.dtype != b.m.dtype:
        raise TypeError(f"a and b must share a dtype, got {a.m.dtype} and {b.m.dtype}")
    if a.m.shape != b.m.shape or a.u.shape != b.u.shape:
        raise ValueError(
            f"cannot merge states of different shapes: a.u {tuple(a.u.shape)}, "
            f"b.u {tuple(b.u.shape)}"
        )
    m = torch.maximum(a.m, b.m)  # (..., Tq)
    shift = _finite_or_zero(m)
    # Rescale each side from its own max to the common max; both factors are <= 1.
    ca, cb = torch.exp(a.m - shift), torch.exp(b.m - shift)  # (..., Tq) each
    return SoftmaxState(
        m=m,
        l=ca * a.l + cb * b.l,  # (..., Tq)
        u=ca.unsqueeze(-1) * a.u + cb.unsqueeze(-1) * b.u,  # (..., Tq, dv)
    )


def finalize(state: SoftmaxState) -> torch.Tensor:
    """Turn statistics into attention output: ``u / l``, with zero rows where ``l == 0``.

    Returns:
        ``(..., Tq, dv)``; rows that saw no allowed key are 0, as in
        :func:`attnbook.attention.attention`.
    """
    state = _require_state("state", state)
    l_safe = state.l.masked_fill(state.l == 0, 1.0)  # l == 0 only where u == 0 as well
    return state.u / l_safe.unsqueeze(-1)  # (..., Tq, dv)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention computed one key block at a time with the online softmax.

    Equal (up to rounding) to ``attention(q, k, v, causal_mask(Tq, Tk) if causal else None)``,
    but only one ``(Tq, block_size)`` block of scores per head exists at any time, so memory
    grows linearly in ``Tk``. (FlashAttention also tiles the queries and keeps the blocks
    in on-chip memory; the arithmetic is the same.)

    Args:
        q: queries ``(..., H, Tq, dk)``.
        k: keys ``(..., H, Tk, dk)`` (same number of heads as ``q``).
        v: values ``(..., H, Tk, dv)``.
        block_size: keys per block, an int >= 1; need not divide ``Tk`` (the last block is
            shorter).
        causal: a ``bool``: apply :func:`attnbook.masks.causal_mask` with its default offset,
            so when ``Tq != Tk`` the queries are the newest ``Tq`` positions.
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.

    float16 and bfloat16 inputs are computed in float32 and the output cast back, as in
    :func:`attnbook.attention.attention`.

    Returns:
        ``(..., H, Tq, dv)``; a query with no allowed key gets a zero row (and with ``Tk == 0``
        every row is zero, with zero gradients, as in SDPA).

    Raises:
        TypeError, ValueError: as :func:`attnbook.attention.attention` for ``q, k, v`` and
            ``scale`` (here the head counts must be equal); a non-int ``block_size`` or a
            non-bool ``causal``.
    """
    q, k, v = require_qkv(q, k, v, allow_gqa=False)
    block_size = require_positive_int("block_size", block_size)
    causal = require_bool("causal", causal)
    t_q, t_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_real("scale", scale)
    dtype, work = q.dtype, _working_dtype(q.dtype)
    if work != dtype:  # 16-bit inputs: accumulate in float32, return in the inputs' dtype
        out = tiled_attention(
            q.to(work), k.to(work), v.to(work), block_size=block_size, causal=causal, scale=scale
        )
        return out.to(dtype)

    state = SoftmaxState(  # the empty set of keys, which merge treats as the identity
        m=q.new_full(q.shape[:-1], _NEG_INF),  # (..., H, Tq)
        l=q.new_zeros(q.shape[:-1]),  # (..., H, Tq)
        u=q.new_zeros((*q.shape[:-1], v.shape[-1])),  # (..., H, Tq, dv)
    )
    # With Tk == 0 one empty block still runs, so the output stays attached to q, k and v
    # (autograd then gives zero gradients, as SDPA does, instead of none at all).
    for start in range(0, max(t_k, 1), block_size):
        k_blk = k[..., start : start + block_size, :]  # (..., H, Tb, dk)
        v_blk = v[..., start : start + block_size, :]  # (..., H, Tb, dv)
        scores = (q @ k_blk.transpose(-2, -1)) * scale  # (..., H, Tq, Tb)
        if causal and t_q > 0 and t_k > 0:  # with no queries or no keys nothing is masked
            # Key j of this block sits at absolute position start + j, query i at t_k - t_q + i.
            allowed = causal_mask(t_q, k_blk.shape[-2], offset=t_k - t_q - start, device=q.device)
            scores = scores.masked_fill(~allowed, _NEG_INF)
        state = merge(state, block_state(scores, v_blk))
    return finalize(state)
