"""Rotary position embedding (RoPE): turn each feature pair by an angle proportional to position.

For a feature vector of even width ``d``, pair ``p`` (``p = 0 .. d/2 - 1``) at position ``m``
turns by ``m * base**(-2p/d)``. A query at position ``m`` and a key at ``n`` then score
``q . R(n - m) k``: the score depends on the positions only through their offset.

Two layouts of the pairs exist in the wild and checkpoints are not interchangeable:

* ``"half"``: coordinate ``p`` pairs with ``p + d/2`` (rotate-half; Llama-family checkpoints
  in Hugging Face ``transformers``, GPT-NeoX).
* ``"interleaved"``: coordinate ``2p`` pairs with ``2p + 1`` (RoFormer, the original
  Meta Llama code, which views each pair as one complex number).
"""

from __future__ import annotations

from typing import Literal

import torch

from attnbook._checks import require_positive_int, require_real, require_tensor, too_large

__all__ = ["apply_rope", "rope_angles", "rope_frequencies"]

Layout = Literal["half", "interleaved"]


def _require_even_width(d: object) -> int:
    d = require_positive_int("d", d)
    if d % 2:
        raise ValueError(f"d must be even (RoPE turns feature pairs), got d={d}")
    return d


def rope_frequencies(d: int, *, base: float = 10000.0) -> torch.Tensor:
    """Angle per position step for each feature pair.

    Args:
        d: feature width, a positive even int.
        base: wavelength scale; larger bases turn the slow pairs more slowly.

    Returns:
        Float64 tensor ``(d/2,)`` holding ``base**(-2p/d)`` for ``p = 0 .. d/2 - 1``: pair 0
        turns one radian per position, later pairs ever more slowly.
    """
    d = _require_even_width(d)
    base = require_real("base", base, positive=True)
    with too_large(f"d={d}"):
        exponents = torch.arange(0, d, 2, dtype=torch.float64) / d  # (d/2,)
    return base**-exponents


def rope_angles(positions: torch.Tensor, d: int, *, base: float = 10000.0) -> torch.Tensor:
    """Rotation angle of every feature pair at every position.

    Args:
        positions: integer tensor of any shape ``(...)``, e.g. ``(T,)``.
        d: feature width, a positive even int.
        base: as in :func:`rope_frequencies`.

    Returns:
        Float64 tensor ``(..., d/2)`` on the device of ``positions``. Float64 matters at large
        positions: float32 numbers near ``1e6`` are ``0.0625`` apart, so a float32 angle there
        could be off by about ``0.03`` radians.
    """
    positions = require_tensor("positions", positions, dtype="integer", shape_hint="(..., T)")
    freqs = rope_frequencies(d, base=base).to(positions.device)  # (d/2,)
    return positions.to(torch.float64).unsqueeze(-1) * freqs  # (..., d/2)


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    layout: Layout = "half",
) -> torch.Tensor:
    """Rotate the feature pairs of ``x`` by their position's angles.

    Apply it to queries and keys (never values) after the head split and before the scores.

    Args:
        x: floating tensor ``(..., T, d)`` with ``d`` even, e.g. queries ``(B, H, T, dk)``.
        positions: integer tensor broadcastable to ``x.shape[:-1]``; usually ``(T,)`` holding
            each token's absolute position (``torch.arange(T)``, or ``cache_len + arange(T)``
            when decoding with a KV cache).
        base: as in :func:`rope_frequencies`.
        layout: which coordinates form a pair, ``"half"`` or ``"interleaved"`` (see module
            docstring).

    Returns:
        Tensor of the same shape and dtype as ``x``. Each pair keeps its length, so vector
        norms are preserved. Angles are computed in float64 and cast to ``x.dtype`` at the end.
    """
    x = require_tensor("x", x, min_rank=2, dtype="floating", shape_hint="(..., T, d)")
    positions = require_tensor("positions", positions, dtype="integer", shape_hint="(..., T)")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    d = x.shape[-1]
    if d % 2 or d == 0:
        raise ValueError(f"x must have an even feature width d >= 2, got shape {tuple(x.shape)}")
    try:
        fits = torch.broadcast_shapes(positions.shape, x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} does not broadcast to "
            f"x.shape[:-1] = {tuple(x.shape[:-1])}"
        )

    if positions.is_meta and not x.is_meta:
        raise ValueError(
            f"positions is a meta tensor (no values) but x is on {x.device}; the angles need "
            "the positions' values"
        )
    if x.is_meta:  # shapes only: follow x onto the meta device
        positions = positions.to("meta")
    # MPS has no float64; compute the angles on the CPU there and move only cos/sin.
    on_mps = positions.device.type == "mps"
    angles = rope_angles(positions.cpu() if on_mps else positions, d, base=base)  # (..., T, d/2)
    cos = angles.cos().to(device=x.device, dtype=x.dtype)
    sin = angles.sin().to(device=x.device, dtype=x.dtype)

    if layout == "half":
        a, b = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    turned = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d/2, 2)
    return turned.flatten(-2)  # (..., T, d)
