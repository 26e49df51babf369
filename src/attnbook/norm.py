"""RMSNorm: rescale each feature vector to unit root-mean-square, then by a learned gain.

``rms_norm(x) = x / sqrt(mean(x**2) + eps) * weight``, over the last axis. Unlike LayerNorm it
subtracts no mean and adds no bias: one reduction instead of two, and ``d`` weights instead of
``2 d``. Llama-family models use it in every pre-norm block; it matches ``torch.nn.RMSNorm``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnbook._checks import require_positive_int, require_real, require_tensor, too_large

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last axis with a learned per-feature gain.

    Args:
        d: feature width ``d``, a positive int.
        eps: added to the mean square before the square root (> 0), so an all-zero vector
            maps to zeros instead of NaN.

    Shape:
        ``x`` is a floating tensor ``(..., d)``; the output has the shape and dtype of ``x``.
        The gain ``weight`` starts at ones, so a fresh norm only rescales.

    A vector whose largest magnitude exceeds 1 is divided by it before it is squared (the
    result is the same in exact arithmetic), so no input whose norm overflows when squared,
    such as ``1e20`` in float32 or ``300`` in float16, turns into zeros; a smaller vector is
    squared as it is, so a tiny one such as ``1e-30`` keeps its exact ``x / sqrt(eps)``
    instead of an overflowing ``eps / s**2``. A row holding ``inf`` or NaN is not rescaled,
    so it gives what ``torch.nn.RMSNorm`` gives. 16-bit inputs are computed in float32.

    Raises:
        TypeError: a non-int ``d``, a non-real ``eps`` or a non-floating ``x``.
        ValueError: ``d < 1`` or too large to allocate, ``eps <= 0``, ``x`` whose last axis
            is not ``d``, or ``x`` on another device than ``weight`` (a ``meta`` tensor, say).
    """

    def __init__(self, d: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.d = require_positive_int("d", d)
        self.eps = require_real("eps", eps, positive=True)
        with too_large(f"d={self.d}"):
            self.weight = nn.Parameter(torch.ones(self.d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = require_tensor("x", x, min_rank=1, dtype="floating", shape_hint="(..., d)")
        if x.shape[-1] != self.d:
            raise ValueError(f"x must end in d={self.d} features, got shape {tuple(x.shape)}")
        if x.device != self.weight.device:
            raise ValueError(f"x is on {x.device} but the norm's weight is on {self.weight.device}")
        wide = x.float() if x.element_size() < 4 else x  # float16/bfloat16 -> float32
        # x / sqrt(mean(x^2) + eps) == u / sqrt(mean(u^2) + eps / s^2) with u = x / s for any
        # s > 0; s = max(max |x|, 1) keeps the squares finite and eps / s^2 <= eps (a smaller
        # s would overflow eps / s^2 for tiny x). The output does not depend on s, so s
        # carries no gradient. An all-zero row has u = 0 and stays 0.
        s = wide.detach().abs().amax(-1, keepdim=True).clamp_min(1.0)
        # A row holding inf or NaN is not rescaled, so it gives what torch.nn.RMSNorm gives
        # (NaN where x is inf, 0 for its finite entries) instead of an all-NaN row.
        s = s.nan_to_num(nan=1.0, posinf=1.0)
        u = wide / s  # (..., d), entries in [-1, 1]
        mean_square = u.pow(2).mean(-1, keepdim=True)  # (..., 1)
        normed = u * torch.rsqrt(mean_square + self.eps / s.pow(2))  # (..., d)
        return (normed * self.weight).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
