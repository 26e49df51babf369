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
same inside one kernel). Both passes visit the same tiles as
:func:`attnbook.online_softmax.tiled_attention`: query tiles by key tiles, fully masked pairs
skipped, grouped-query heads folded into the rows of their key/value head (so ``dK`` and
``dV`` sum over the group).
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from attnbook._checks import require_bool, require_positive_int, require_qkv, require_real
from attnbook.attention import _working_dtype
from attnbook.online_softmax import (
    SoftmaxState,
    _allowed,
    _fold,
    _layout,
    _require_mask,
    _tiles,
    block_state,
    merge,
    tiled_attention,
)

__all__ = ["TiledAttention", "recomputing_attention"]

_NEG_INF = float("-inf")


def _scores(q_tile, k_blk, scale, causal_tile, mask_tile, group):  # -inf where forbidden
    scores = (q_tile @ k_blk.transpose(-2, -1)) * scale  # (..., rows, Tb)
    allowed = _allowed(causal_tile, mask_tile, group)
    return scores if allowed is None else scores.masked_fill(~allowed, _NEG_INF)


class TiledAttention(torch.autograd.Function):
    """Autograd function: ``apply(q, k, v, block_size, causal, scale, mask=None,
    query_block_size=None)``.

    Use :func:`recomputing_attention`, which fills in ``scale`` and computes 16-bit inputs in
    float32. ``apply`` itself checks its arguments as that function does (``scale`` is
    required) and computes in the inputs' dtype. Saves ``q, k, v`` and ``mask`` (the caller's
    tensors, no new memory), the output and the log-sum-exp; first derivatives only
    (``once_differentiable``).

    Raises:
        TypeError, ValueError: as :func:`recomputing_attention`, and for ``scale=None``.
    """

    @staticmethod
    def forward(ctx, q, k, v, block_size, causal, scale, mask=None, query_block_size=None):
        q, k, v = require_qkv(q, k, v)
        block_size = require_positive_int("block_size", block_size)
        if query_block_size is not None:
            query_block_size = require_positive_int("query_block_size", query_block_size)
        causal = require_bool("causal", causal)
        scale = require_real("scale", scale)
        if mask is not None:
            mask = _require_mask(mask, q, k)
        if q.dim() >= 3 and q.shape[-3] == 0 and k.shape[-3] != 0:
            raise ValueError(
                "TiledAttention.apply needs Hq >= 1; recomputing_attention takes Hq = 0"
            )
        t_q, t_k = q.shape[-2], k.shape[-2]
        q_block = max(t_q if query_block_size is None else query_block_size, 1)
        lay = _layout(q, k, mask)
        outs, lses = [], []
        for qs, qe, pairs in _tiles(t_q, t_k, q_block, block_size, causal, lay.mask, q.device):
            q_tile = _fold(lay.q[..., qs:qe, :], lay.group)  # (..., rows, dk)
            state = SoftmaxState(  # the empty set of keys
                m=q_tile.new_full(q_tile.shape[:-1], _NEG_INF),  # (..., rows)
                l=q_tile.new_zeros(q_tile.shape[:-1]),  # (..., rows)
                u=q_tile.new_zeros((*q_tile.shape[:-1], v.shape[-1])),  # (..., rows, dv)
            )
            for ks, ke, causal_tile, mask_tile in pairs:
                scores = _scores(q_tile, k[..., ks:ke, :], scale, causal_tile, mask_tile, lay.group)
                state = merge(state, block_state(scores, v[..., ks:ke, :]))
            empty = state.l == 0  # rows with no allowed key: output 0, log-sum-exp -inf
            out = state.u / state.l.masked_fill(empty, 1.0).unsqueeze(-1)  # (..., rows, dv)
            lse = (state.m + torch.log(state.l)).masked_fill(empty, _NEG_INF)  # (..., rows)
            outs.append(out.unflatten(-2, (lay.group, qe - qs)) if lay.group else out)
            lses.append(lse.unflatten(-1, (lay.group, qe - qs)) if lay.group else lse)
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)
        lse = lses[0] if len(lses) == 1 else torch.cat(lses, dim=-1)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.block_size, ctx.q_block, ctx.causal, ctx.scale = block_size, q_block, causal, scale
        return out.flatten(-4, -3) if lay.group else out  # (..., Hq, Tq, dv)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse, mask = ctx.saved_tensors  # out, lse in the grouped layout if GQA
        scale, t_q, t_k = ctx.scale, q.shape[-2], k.shape[-2]
        lay = _layout(q, k, mask)
        if lay.group:
            d_out = d_out.unflatten(-3, (k.shape[-3], lay.group))  # (..., Hkv, G, Tq, dv)
        row_dot = (d_out * out).sum(-1, keepdim=True)  # (..., Tq, 1): D_i = dO_i . O_i
        shift = lse.masked_fill(lse == _NEG_INF, 0.0).unsqueeze(-1)  # empty rows: P = 0
        d_q = torch.zeros_like(lay.q)  # (..., [Hkv, G,] Tq, dk)
        d_k, d_v = torch.zeros_like(k), torch.zeros_like(v)
        tiles = _tiles(t_q, t_k, ctx.q_block, ctx.block_size, ctx.causal, lay.mask, q.device)
        for qs, qe, pairs in tiles:
            q_tile = _fold(lay.q[..., qs:qe, :], lay.group)  # (..., rows, dk)
            d_o = _fold(d_out[..., qs:qe, :], lay.group)  # (..., rows, dv)
            row = _fold(row_dot[..., qs:qe, :], lay.group)  # (..., rows, 1)
            sh = _fold(shift[..., qs:qe, :], lay.group)  # (..., rows, 1)
            d_q_tile = d_q[..., qs:qe, :]  # a view: each key tile adds into it in place
            for ks, ke, causal_tile, mask_tile in pairs:
                k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]
                p = torch.exp(_scores(q_tile, k_blk, scale, causal_tile, mask_tile, lay.group) - sh)
                d_v[..., ks:ke, :] += p.transpose(-2, -1) @ d_o  # (..., Hkv, Tb, dv)
                d_s = p * (d_o @ v_blk.transpose(-2, -1) - row)  # (..., rows, Tb)
                # (..., rows, dk), added in place and freed at once (a name would keep it alive)
                if lay.group:
                    d_q_tile += ((d_s @ k_blk) * scale).unflatten(-2, (lay.group, qe - qs))
                else:
                    d_q_tile += (d_s @ k_blk) * scale
                d_k[..., ks:ke, :] += (d_s.transpose(-2, -1) @ q_tile) * scale  # (..., Tb, dk)
        d_q = d_q.flatten(-4, -3) if lay.group else d_q
        return d_q, d_k, d_v, None, None, None, None, None


def recomputing_attention(
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
    """Tiled attention that keeps only ``O(Tq)`` memory for its backward pass.

    The forward pass is :func:`attnbook.online_softmax.tiled_attention`'s; the backward pass
    recomputes each tile of scores from the saved output and per-row log-sum-exp (see the
    module docstring). Equal, value and gradients, up to rounding, to
    ``attention(q, k, v, m)`` with ``m`` the ``mask`` and, if ``causal``, the causal mask.

    Args:
        q: queries ``(..., Hq, Tq, dk)``; rank 2 counts as one head.
        k: keys ``(..., Hkv, Tk, dk)``; ``Hq`` a multiple of ``Hkv`` (grouped-query attention:
            query head ``h`` reads key/value head ``h // (Hq // Hkv)``).
        v: values ``(..., Hkv, Tk, dv)``.
        mask: optional bool tensor broadcastable to ``(..., Hq, Tq, Tk)``, ``True`` = may
            attend; fully masked tiles are skipped in both passes.
        block_size: keys per tile, in both passes; need not divide ``Tk``.
        query_block_size: queries per tile, or ``None`` for one tile of all ``Tq``.
        causal: apply :func:`attnbook.masks.causal_mask` with its default offset (bottom-right
            aligned: when ``Tq != Tk`` the queries are the newest ``Tq`` positions), together
            with ``mask`` if both are given.
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.

    float16 and bfloat16 inputs are computed in float32 (their scores overflow 16 bits
    otherwise) and the output and gradients cast back; the float32 copies of ``q, k, v`` are
    then what the backward pass keeps.

    Returns:
        ``(..., Hq, Tq, dv)``. A query with no allowed key (a fully masked row, ``causal``
        with ``Tq > Tk``, or ``Tk == 0``) gets a zero row, and zero gradients flow through it.

    Raises:
        TypeError: non-tensor or non-floating ``q, k, v``, differing dtypes, a non-bool
            ``mask`` or ``causal`` or a non-real ``scale``.
        ValueError: shapes that do not fit (as in ``tiled_attention``), a ``mask`` that does
            not broadcast, ``block_size`` or ``query_block_size`` < 1.
    """
    q, k, v = require_qkv(q, k, v)
    block_size = require_positive_int("block_size", block_size)
    if query_block_size is not None:
        query_block_size = require_positive_int("query_block_size", query_block_size)
    causal = require_bool("causal", causal)
    if mask is not None:
        mask = _require_mask(mask, q, k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_real("scale", scale)
    if q.dim() >= 3 and q.shape[-3] == 0:  # no query heads: an empty output, nothing to save
        return tiled_attention(q, k, v, mask, block_size=block_size, causal=causal, scale=scale)
    work = _working_dtype(q.dtype)
    args = (block_size, causal, scale, mask, query_block_size)
    if work != q.dtype:  # 16-bit inputs: scores and sums in float32, the output cast back
        return TiledAttention.apply(q.to(work), k.to(work), v.to(work), *args).to(q.dtype)
    return TiledAttention.apply(q, k, v, *args)
