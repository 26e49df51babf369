"""Scaled dot-product attention, written out step by step: the book's reference implementation.

Shapes use the legend in :mod:`attnbook`; masks are ``torch.bool`` with ``True`` = may attend.
"""

from __future__ import annotations

import math
from typing import Literal, overload

import torch

from attnbook._checks import require_bool, require_int, require_qkv, require_real, require_tensor

__all__ = ["attention", "softmax"]


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for 16-bit (and narrower) floats, else ``dtype`` itself.

    float16 overflows above 65504, so ``q @ k^T`` of fp16 inputs with entries near 300 is
    already ``inf``; and a float16 or bfloat16 softmax sums to 1 only roughly. SDPA's kernels
    accumulate such inputs in float32, and so do the functions here, casting the result back.
    """
    return torch.float32 if torch.finfo(dtype).bits < 32 else dtype


def _require_dim(dim: object, x: torch.Tensor) -> int:
    dim = require_int("dim", dim)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(
            f"dim={dim} is out of range for scores of shape {tuple(x.shape)}; "
            f"use a dim in [{-x.dim()}, {x.dim() - 1}]"
        )
    return dim


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax that maps a row of all ``-inf`` to a row of zeros.

    ``torch.softmax`` returns NaN for such a row (it computes ``0 / 0``); in attention that
    row is a query with no allowed key, and the book's convention is that it reads nothing.

    Args:
        scores: floating tensor of rank >= 1; ``-inf`` marks a forbidden entry. float16 and
            bfloat16 scores are normalised in float32 and the result cast back.
        dim: the axis to normalise over, an int in ``[-scores.dim(), scores.dim())``.

    Returns:
        A tensor shaped like ``scores`` whose slices along ``dim`` sum to 1, or are all 0 when
        every entry was ``-inf`` (or the axis is empty). A slice holding NaN or ``+inf`` gives
        NaN, as in ``torch.softmax``.

    Raises:
        TypeError: ``scores`` not a floating tensor, or ``dim`` not an int.
        ValueError: ``scores`` of rank 0, or ``dim`` out of range.
    """
    scores = require_tensor("scores", scores, min_rank=1, dtype="floating", shape_hint="(..., T)")
    dim = _require_dim(dim, scores)
    if scores.shape[dim] == 0:
        return scores * 0  # no entries; multiplying (not zeros_like) keeps autograd's graph
    work = _working_dtype(scores.dtype)
    if work != scores.dtype:
        return softmax(scores.to(work), dim).to(scores.dtype)
    row_max = scores.amax(dim=dim, keepdim=True)
    # Subtracting the row max keeps exp() <= 1, so it cannot overflow. An all -inf row has
    # max -inf, and -inf - (-inf) is NaN: shift such rows by 0 instead, so exp() gives 0.
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    exp = torch.exp(scores - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / total.masked_fill(total == 0, 1.0)


@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = ...,
    *,
    scale: float | None = ...,
    return_weights: Literal[False] = ...,
) -> torch.Tensor: ...


@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = ...,
    *,
    scale: float | None = ...,
    return_weights: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Compute ``softmax(q @ k^T * scale, masked) @ v`` for every head.

    Matches ``torch.nn.functional.scaled_dot_product_attention`` with a boolean ``attn_mask``
    (and ``enable_gqa=True`` when ``Hq != Hkv``), without dropout, and can return the weights.

    Args:
        q: queries ``(..., Hq, Tq, dk)``.
        k: keys ``(..., Hkv, Tk, dk)``. ``Hq`` must be a multiple of ``Hkv``; query head ``h``
            reads key/value head ``h // (Hq // Hkv)`` (grouped-query attention).
        v: values ``(..., Hkv, Tk, dv)``.
        mask: optional tensor broadcastable to ``(..., Hq, Tq, Tk)``, as SDPA's ``attn_mask``.
            A bool mask: ``True`` = may attend (see :mod:`attnbook.masks` for causal, padding
            and segment masks). A floating mask is *added* to the scaled scores before the
            softmax: ALiBi's distance penalties, or Hugging Face's eager masks (0 where allowed,
            ``-inf`` or ``torch.finfo(dtype).min`` where not). ``-inf`` entries forbid a key
            exactly like ``False``; a large finite negative only down-weights it, so a row
            whose every entry is ``finfo.min`` still averages its keys (what HF's eager path
            returns), while an all-``False`` or all-``-inf`` row gives zeros. Broadcasting
            follows PyTorch's trailing-axes rule: a 2-D ``(B, Tk)`` mask aligns ``B`` with
            ``Tq`` (see the warning in :func:`attnbook.masks.padding_mask`).
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.
        return_weights: also return the attention weights (a ``bool``).

    float16 and bfloat16 inputs are computed in float32 (as SDPA's kernels accumulate them)
    and the results cast back, so fp16 scores beyond 65504 do not overflow. Non-finite inputs
    give NaN where they are read, as in SDPA.

    Returns:
        ``out`` of shape ``(..., Hq, Tq, dv)``, or ``(out, weights)`` with weights
        ``(..., Hq, Tq, Tk)`` when ``return_weights`` is true. Each row of weights sums to 1,
        and forbidden entries are exactly 0. A query with no allowed key (including
        ``Tk == 0``) gets a zero output row and zero weights, never NaN.

    Raises:
        TypeError: non-tensor or non-floating ``q``/``k``/``v``, mixed dtypes, a ``mask``
            neither bool nor floating, a non-real ``scale`` or a non-bool ``return_weights``.
        ValueError: ranks, batch dims, ``dk``, ``Tk`` or heads that do not fit together, or
            a ``mask`` that does not broadcast to the scores.

    Rank-2 inputs ``(T, d)`` are treated as a single head of a single sequence.
    """
    q, k, v = require_qkv(q, k, v)
    dk = q.shape[-1]
    scale = 1.0 / math.sqrt(dk) if scale is None else require_real("scale", scale)
    return_weights = require_bool("return_weights", return_weights)
    scores_shape = (*q.shape[:-1], k.shape[-2])  # (..., Hq, Tq, Tk)
    if mask is not None:
        mask = require_tensor("mask", mask, shape_hint="(..., Hq, Tq, Tk)")
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise TypeError(
                f"mask must have a bool dtype (True = may attend) or a floating dtype (added "
                f"to the scores), got {mask.dtype} (shape {tuple(mask.shape)})"
            )
        if mask.device != q.device:
            raise ValueError(f"mask is on {mask.device} but q, k and v are on {q.device}")
        try:
            fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                f"(..., Hq, Tq, Tk) = {scores_shape}"
            )

    dtype = q.dtype
    work = _working_dtype(dtype)
    if work != dtype:  # 16-bit inputs: compute in float32, return in the inputs' dtype
        q, k, v = q.to(work), k.to(work), v.to(work)
        out, weights = attention(q, k, v, mask, scale=scale, return_weights=True)
        out, weights = out.to(dtype), weights.to(dtype)
        return (out, weights) if return_weights else out

    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        # Grouped-query attention: each kv head serves a contiguous group of query heads.
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)  # (..., Hq, Tk, dk)
        v = v.repeat_interleave(group, dim=-3)  # (..., Hq, Tk, dv)

    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Hq, Tq, Tk)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:  # additive: ALiBi biases, HF eager masks (computed in `work`)
        scores = scores + mask.to(scores.dtype)

    weights = softmax(scores, dim=-1)  # (..., Hq, Tq, Tk)
    out = weights @ v  # (..., Hq, Tq, dv)
    return (out, weights) if return_weights else out
