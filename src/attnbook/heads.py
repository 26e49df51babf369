"""Split a model-width tensor into heads and merge heads back: the reshapes around attention.

Projections work on ``(..., T, d)``; attention works per head on ``(..., H, T, d/H)``, the
layout of PyTorch's ``scaled_dot_product_attention``. These two functions are exact inverses
(pure reshapes and transposes, no arithmetic), so they can never change a number.
"""

from __future__ import annotations

import torch

from attnbook._checks import require_positive_int, require_tensor

__all__ = ["merge_heads", "split_heads"]


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Split the feature axis into ``heads`` heads of equal width.

    Args:
        x: ``(..., T, d)`` with ``d`` divisible by ``heads``.
        heads: number of heads ``H``.

    Returns:
        ``(..., H, T, d / H)``; head ``h`` holds features ``h * d/H`` to ``(h + 1) * d/H - 1``.
    """
    x = require_tensor("x", x, min_rank=2, shape_hint="(..., T, d)")
    heads = require_positive_int("heads", heads)
    if x.shape[-1] % heads:
        raise ValueError(
            f"x has d={x.shape[-1]} features (shape {tuple(x.shape)}), which {heads} heads "
            f"cannot share equally (d % heads == {x.shape[-1] % heads})"
        )
    return x.unflatten(-1, (heads, -1)).transpose(-3, -2)  # (..., H, T, d/H)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads back along the feature axis (inverse of :func:`split_heads`).

    Args:
        x: ``(..., H, T, dh)``.

    Returns:
        ``(..., T, H * dh)``.
    """
    x = require_tensor("x", x, min_rank=3, shape_hint="(..., H, T, dh)")
    return x.transpose(-3, -2).flatten(-2)  # (..., T, H * dh)
