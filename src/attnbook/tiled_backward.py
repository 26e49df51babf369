"""Tiled attention whose backward pass recomputes the scores instead of saving them.

:func:`attnbook.online_softmax.tiled_attention` never holds more than one block of scores in
its forward pass, but under autograd every block it creates is saved for the backward pass,
so the memory it keeps for training is again quadratic in the sequence length. The
:class:`TiledAttention` function below saves only the output ``O`` and the per-row
log-sum-exp ``L = m + log(l)`` of the scores, and in the backward pass rebuilds each block of
weights from them, ``P = exp(S - L)``, one key block at a time. With ``dO`` the incoming
gradient and ``D_i = dO_i . O_i`` (a row sum), the gradients of one block are

* ``dV_blk = P^T dO``,
* ``dS = P * (dO V_blk^T - D)``,
* ``dQ += scale * dS K_blk`` and ``dK_blk = scale * dS^T Q``,

so besides the inputs the memory kept between the passes is ``O(Tq * dv)`` (Rabe and Staats,
2021, "Self-attention does not need O(n^2) memory"; FlashAttention's backward pass does the
same inside one kernel).
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from attnbook._checks import require_bool, require_positive_int, require_qkv, require_real
from attnbook.attention import _working_dtype
from attnbook.masks import causal_mask
from attnbook.online_softmax import SoftmaxState, block_state, merge

__all__ = ["TiledAttention", "recomputing_attention"]

_NEG_INF = float("-inf")


def _scores(q, k_blk, start, t_k, scale, causal):  # (..., H, Tq, Tb), -inf where forbidden
    scores = (q @ k_blk.transpose(-2, -1)) * scale
    t_q = q.shape[-2]
    if causal and t_q > 0:
        # Key j of this block sits at absolute position start + j, query i at t_k - t_q + i.
        allowed = causal_mask(t_q, k_blk.shape[-2], offset=t_k - t_q - start, device=q.device)
        scores = scores.masked_fill(~allowed, _NEG_INF)
    return scores


class TiledAttention(torch.autograd.Function):
    """Autograd function: ``apply(q, k, v, block_size, causal, scale)``.

    Use :func:`recomputing_attention`, which fills in ``scale`` and computes 16-bit inputs in
    float32. ``apply`` itself checks its arguments as that function does (``scale`` is
    required) and computes in the inputs' dtype. Saves ``q, k, v`` (the caller's tensors, no
    new memory), the output and the log-sum-exp; first derivatives only
    (``once_differentiable``).

    Raises:
        TypeError, ValueError: as :func:`recomputing_attention`, and for ``scale=None``.
    """

    @staticmethod
    def forward(ctx, q, k, v, block_size, causal, scale):
        q, k, v = require_qkv(q, k, v, allow_gqa=False)
        block_size = require_positive_int("block_size", block_size)
        causal = require_bool("causal", causal)
        scale = require_real("scale", scale)
        t_k = k.shape[-2]
        state = SoftmaxState(  # the empty set of keys
            m=q.new_full(q.shape[:-1], _NEG_INF),  # (..., H, Tq)
            l=q.new_zeros(q.shape[:-1]),  # (..., H, Tq)
            u=q.new_zeros((*q.shape[:-1], v.shape[-1])),  # (..., H, Tq, dv)
        )
        for start in range(0, t_k, block_size):
            k_blk = k[..., start : start + block_size, :]  # (..., H, Tb, dk)
            v_blk = v[..., start : start + block_size, :]  # (..., H, Tb, dv)
            scores = _scores(q, k_blk, start, t_k, scale, causal)
            state = merge(state, block_state(scores, v_blk))
        empty = state.l == 0  # rows with no allowed key: output 0, log-sum-exp -inf
        out = state.u / state.l.masked_fill(empty, 1.0).unsqueeze(-1)  # (..., H, Tq, dv)
        lse = (state.m + torch.log(state.l)).masked_fill(empty, _NEG_INF)  # (..., H, Tq)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.block_size, ctx.causal, ctx.scale = block_size, causal, scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        block_size, causal, scale = ctx.block_size, ctx.causal, ctx.scale
        t_k = k.shape[-2]
        row_dot = (d_out * out).sum(-1, keepdim=True)  # (..., H, Tq, 1): D_i = dO_i . O_i
        shift = lse.masked_fill(lse == _NEG_INF, 0.0).unsqueeze(-1)  # empty rows: P = 0
        d_q, d_k, d_v = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
        for start in range(0, t_k, block_size):
            stop = min(start + block_size, t_k)
            k_blk, v_blk = k[..., start:stop, :], v[..., start:stop, :]
            p = torch.exp(_scores(q, k_blk, start, t_k, scale, causal) - shift)  # (..., Tq, Tb)
            d_v[..., start:stop, :] = p.transpose(-2, -1) @ d_out  # (..., H, Tb, dv)
            d_s = p * (d_out @ v_blk.transpose(-2, -1) - row_dot)  # (..., H, Tq, Tb)
            d_q += (d_s @ k_blk) * scale
            d_k[..., start:stop, :] = (d_s.transpose(-2, -1) @ q) * scale  # (..., H, Tb, dk)
        return d_q, d_k, d_v, None, None, None


def recomputing_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Tiled attention that keeps only ``O(Tq)`` memory for its backward pass.

    The forward pass is :func:`attnbook.online_softmax.tiled_attention`'s; the backward pass
    recomputes each block of scores from the saved output and per-row log-sum-exp (see the
    module docstring). Equal, value and gradients, up to rounding, to
    ``attention(q, k, v, causal_mask(Tq, Tk) if causal else None)``.

    Args:
        q: queries ``(..., H, Tq, dk)``; rank 2 counts as one head.
        k: keys ``(..., H, Tk, dk)`` (same number of heads as ``q``: no GQA).
        v: values ``(..., H, Tk, dv)``.
        block_size: keys per block, in both passes; need not divide ``Tk``.
        causal: apply :func:`attnbook.masks.causal_mask` with its default offset (bottom-right
            aligned: when ``Tq != Tk`` the queries are the newest ``Tq`` positions). Other
            masks are not supported; use :func:`attnbook.attention.attention` for them.
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.

    float16 and bfloat16 inputs are computed in float32 (their scores overflow 16 bits
    otherwise) and the output and gradients cast back; the float32 copies of ``q, k, v`` are
    then what the backward pass keeps.

    Returns:
        ``(..., H, Tq, dv)``. A query with no allowed key (``causal`` with ``Tq > Tk``, or
        ``Tk == 0``) gets a zero row, and zero gradients flow through it.

    Raises:
        TypeError: non-tensor or non-floating ``q, k, v``, differing dtypes, a non-bool
            ``causal`` or a non-real ``scale``.
        ValueError: shapes that do not fit (as in ``tiled_attention``), ``block_size < 1``.
    """
    q, k, v = require_qkv(q, k, v, allow_gqa=False)
    block_size = require_positive_int("block_size", block_size)
    causal = require_bool("causal", causal)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_real("scale", scale)
    work = _working_dtype(q.dtype)
    if work != q.dtype:  # 16-bit inputs: scores and sums in float32, the output cast back
        out = TiledAttention.apply(q.to(work), k.to(work), v.to(work), block_size, causal, scale)
        return out.to(q.dtype)
    return TiledAttention.apply(q, k, v, block_size, causal, scale)
