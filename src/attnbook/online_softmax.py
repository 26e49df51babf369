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


def _require_mask(mask: object, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``mask`` checked as :func:`attnbook.attention.attention` checks it: a bool tensor on
    ``q``'s device that broadcasts to the scores ``(..., Hq, Tq, Tk)``."""
    mask = require_tensor("mask", mask, dtype="bool", shape_hint="(..., Hq, Tq, Tk)")
    if mask.device != q.device:
        raise ValueError(f"mask is on {mask.device} but q, k and v are on {q.device}")
    scores_shape = (*q.shape[:-1], k.shape[-2])  # (..., Hq, Tq, Tk)
    try:
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
            f"(..., Hq, Tq, Tk) = {scores_shape}"
        )
    return mask


class _Layout(NamedTuple):
    """Grouped-query attention as plain attention: the ``G = Hq / Hkv`` query heads that
    share a key/value head are folded into its rows, ``q (..., Hkv, G, Tq, dk)``, and a query
    tile becomes ``(..., Hkv, G * Tqb, dk)``, so every product is an ordinary batched matmul
    against ``k (..., Hkv, Tk, dk)``. With ``G == 1`` (or rank-2 inputs) nothing is reshaped."""

    q: torch.Tensor
    mask: torch.Tensor | None
    group: int  # 0 when not grouped


def _without_query_heads(q, k, v):
    """With ``Hq == 0`` (allowed: 0 is a multiple of every ``Hkv``) no key/value head is read;
    keep none of them, so the shapes meet as ordinary attention with no heads."""
    if q.dim() >= 3 and q.shape[-3] == 0 and k.shape[-3] != 0:
        return q, k[..., :0, :, :], v[..., :0, :, :]
    return q, k, v


def _layout(q, k, mask) -> _Layout:
    if q.dim() < 3 or q.shape[-3] == k.shape[-3]:
        return _Layout(q, mask, 0)
    h_kv = k.shape[-3]
    group = q.shape[-3] // h_kv
    if mask is not None:  # broadcast to (..., Hq, Tq, Tk) and split the head axis (a view)
        full = mask.expand(*q.shape[:-1], k.shape[-2])  # (..., Hq, Tq, Tk)
        try:
            mask = full.unflatten(-3, (h_kv, group))  # (..., Hkv, G, Tq, Tk)
        except RuntimeError:  # strides that no view can split: copy (bools, Hq Tq Tk bytes)
            mask = full.contiguous().unflatten(-3, (h_kv, group))
    return _Layout(q.unflatten(-3, (h_kv, group)), mask, group)


def _fold(x: torch.Tensor, group: int) -> torch.Tensor:
    """``(..., Hkv, G, Tqb, w)`` to ``(..., Hkv, G * Tqb, w)`` when grouped, else ``x``."""
    return x.flatten(-3, -2) if group else x


def _allowed(causal_tile, mask_tile, group):
    """The bool tile of allowed pairs in the (folded) layout, or ``None`` if all are."""
    if causal_tile is not None and group:
        causal_tile = causal_tile.repeat(group, 1)  # the same positions for each head
    if mask_tile is not None:
        mask_tile = _fold(mask_tile, group)
        return mask_tile if causal_tile is None else causal_tile & mask_tile
    return causal_tile


def _tiles(t_q, t_k, q_block, k_block, causal, mask, device):
    """The tile pairs that hold at least one allowed (query, key) pair.

    Yields ``(qs, qe, pairs)`` for each query tile, where ``pairs`` lists
    ``(ks, ke, causal_tile, mask_tile)``: the causal tile ``(Tqb, Tb)`` (``None`` when the
    causal mask allows the whole tile) and the slice of ``mask`` (``None`` without one). A key
    tile that no query of the tile may read is left out: causally, one that starts after the
    tile's last query position; with a ``mask`` (on a device with values), one whose slice
    holds no ``True``. A query tile with no pair left still gets one empty key tile, so that its
    output stays attached to autograd (zero rows, zero gradients).
    """
    offset = t_k - t_q  # query i sits at absolute position offset + i (bottom-right aligned)
    for qs in range(0, max(t_q, 1), q_block):
        qe = min(qs + q_block, t_q)
        pairs = []
        for ks in range(0, t_k, k_block):
            ke = min(ks + k_block, t_k)
            if causal and ks > offset + qe - 1:  # every key after every query of the tile
                break
            causal_tile = mask_tile = None
            if causal and ke - 1 > offset + qs:  # some pair of the tile is above the diagonal
                causal_tile = causal_mask(qe - qs, ke - ks, offset=offset + qs - ks, device=device)
            if mask is not None:
                mask_tile = mask[..., qs:qe, ks:ke]
                if mask_tile.device.type != "meta":
                    allowed = mask_tile if causal_tile is None else mask_tile & causal_tile
                    if not bool(allowed.any()):
                        continue  # no query of the tile may read any of its keys: skipped
            pairs.append((ks, ke, causal_tile, mask_tile))
        yield qs, qe, pairs or [(0, 0, None, None)]


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    block_size: int = 128,
    query_block_size: int | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention computed one tile of scores at a time with the online softmax.

    Equal (up to rounding) to ``attention(q, k, v, m)`` with ``m`` the ``mask`` and, if
    ``causal``, :func:`attnbook.masks.causal_mask` (both when both are given), but only one
    ``(query tile, key tile)`` block of scores per head exists at any time. The queries are
    cut into tiles of ``query_block_size`` (default: one tile of all ``Tq``), the keys into
    tiles of ``block_size``; a tile pair in which no query may read any key is skipped, not
    computed and then masked. With ``causal`` and square tiles of ``b`` over ``t = n / b``
    tiles per side, ``t (t + 1) / 2`` of the ``t^2`` pairs remain, so the matmul FLOPs are
    ``(t + 1) / (2 t)`` of the dense count. (FlashAttention keeps each tile in on-chip
    memory; the arithmetic is the same.)

    Args:
        q: queries ``(..., Hq, Tq, dk)``; rank 2 counts as one head.
        k: keys ``(..., Hkv, Tk, dk)``; ``Hq`` a multiple of ``Hkv``: query head ``h`` reads
            key/value head ``h // (Hq // Hkv)`` (grouped-query attention, as in
            :func:`attnbook.attention.attention` and SDPA's ``enable_gqa=True``).
        v: values ``(..., Hkv, Tk, dv)``.
        mask: optional bool tensor broadcastable to ``(..., Hq, Tq, Tk)``; ``True`` = may
            attend. Tiles it forbids entirely are skipped (on meta tensors, which hold no
            values, they are computed and masked).
        block_size: keys per tile, an int >= 1; need not divide ``Tk``.
        query_block_size: queries per tile, an int >= 1, or ``None`` for one tile.
        causal: a ``bool``: apply :func:`attnbook.masks.causal_mask` with its default offset,
            so when ``Tq != Tk`` the queries are the newest ``Tq`` positions.
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.

    float16 and bfloat16 inputs are computed in float32 and the output cast back, as in
    :func:`attnbook.attention.attention`.

    Returns:
        ``(..., Hq, Tq, dv)``; a query with no allowed key gets a zero row (and with
        ``Tk == 0`` every row is zero, with zero gradients, as in SDPA).

    Raises:
        TypeError, ValueError: as :func:`attnbook.attention.attention` for ``q, k, v``,
            ``mask`` and ``scale``; a non-int ``block_size`` or ``query_block_size`` below 1,
            or a non-bool ``causal``.
    """
    q, k, v = require_qkv(q, k, v)
    block_size = require_positive_int("block_size", block_size)
    if query_block_size is not None:
        query_block_size = require_positive_int("query_block_size", query_block_size)
    causal = require_bool("causal", causal)
    if mask is not None:
        mask = _require_mask(mask, q, k)
    q, k, v = _without_query_heads(q, k, v)
    t_q, t_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_real("scale", scale)
    dtype, work = q.dtype, _working_dtype(q.dtype)
    if work != dtype:  # 16-bit inputs: accumulate in float32, return in the inputs' dtype
        out = tiled_attention(
            q.to(work), k.to(work), v.to(work), mask, block_size=block_size,
            query_block_size=query_block_size, causal=causal, scale=scale,
        )  # fmt: skip
        return out.to(dtype)

    lay = _layout(q, k, mask)
    q_block = max(t_q if query_block_size is None else query_block_size, 1)
    outputs = []
    for qs, qe, pairs in _tiles(t_q, t_k, q_block, block_size, causal, lay.mask, q.device):
        q_tile = _fold(lay.q[..., qs:qe, :], lay.group)  # (..., rows, dk): H x Tqb or Hkv x G Tqb
        state = SoftmaxState(  # the empty set of keys, which merge treats as the identity
            m=q_tile.new_full(q_tile.shape[:-1], _NEG_INF),  # (..., rows)
            l=q_tile.new_zeros(q_tile.shape[:-1]),  # (..., rows)
            u=q_tile.new_zeros((*q_tile.shape[:-1], v.shape[-1])),  # (..., rows, dv)
        )
        for ks, ke, causal_tile, mask_tile in pairs:
            k_blk = k[..., ks:ke, :]  # (..., Hkv, Tb, dk)
            v_blk = v[..., ks:ke, :]  # (..., Hkv, Tb, dv)
            scores = (q_tile @ k_blk.transpose(-2, -1)) * scale  # (..., rows, Tb)
            allowed = _allowed(causal_tile, mask_tile, lay.group)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, _NEG_INF)
            state = merge(state, block_state(scores, v_blk))
        out = finalize(state)  # (..., rows, dv)
        outputs.append(out.unflatten(-2, (lay.group, qe - qs)) if lay.group else out)
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
    return out.flatten(-4, -3) if lay.group else out  # (..., Hq, Tq, dv)
