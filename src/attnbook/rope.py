"""Rotary position embedding (RoPE): turn each feature pair by an angle proportional to position.

For a feature vector of even width ``d`` (the head width, ``d_k`` in the book's notation, or
``rotary_dim`` under partial rotary), pair ``p`` (``p = 0 .. d/2 - 1``) at position ``m``
turns by ``m * base**(-2p/d)``. A query at position ``m`` and a key at ``n`` then score
``q . R(n - m) k``: the score depends on the positions only through their offset.

Two layouts of the pairs exist in the wild and checkpoints are not interchangeable:

* ``"half"``: coordinate ``p`` pairs with ``p + d/2`` (rotate-half; Llama-family checkpoints
  in Hugging Face ``transformers``, GPT-NeoX).
* ``"interleaved"``: coordinate ``2p`` pairs with ``2p + 1`` (RoFormer, GPT-J, the original
  Meta Llama code, which views each pair as one complex number).

Real checkpoints add two options, both expressed here as Hugging Face ``transformers`` spells
them, so a config's ``rope_parameters`` (``rope_scaling`` in 4.x files) dict can be passed as
``scaling=`` unchanged: its ``rope_theta`` is accepted when it equals ``base=``, and
``partial_rotary_factor`` is refused with a pointer to ``rotary_dim=``:

* ``scaling``: the ``rope_scaling`` (``rope_parameters``) rules that change the frequencies to
  stretch a context: ``"linear"`` (position interpolation), ``"yarn"`` (with its attention
  temperature) and ``"llama3"`` (Llama 3.1). ``"dynamic"`` and ``"longrope"`` are not offered:
  their frequencies depend on the sequence length seen so far.
* ``rotary_dim``: partial rotary, only the first ``rotary_dim`` features of each head turn
  (GPT-J's ``rotary_dim``; GPT-NeoX's ``rotary_pct`` is ``rotary_dim = int(d * rotary_pct)``,
  Hugging Face's ``partial_rotary_factor``); the frequencies are those of a ``rotary_dim``-wide
  head, and the remaining features pass through unchanged.

``tests/test_rope_transformers.py`` checks every option against ``transformers``' own modules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch

from attnbook._checks import (
    require_bool,
    require_positive_int,
    require_real,
    require_tensor,
    too_large,
)

__all__ = [
    "apply_rope",
    "rope_angles",
    "rope_attention_factor",
    "rope_frequencies",
    "rope_softmax_factor",
]

Layout = Literal["half", "interleaved"]

# Keys each scaling type reads (Hugging Face's names), the required ones first.
_SCALING_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "linear": (("factor",), ()),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    ),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        (),
    ),
}
# Keys a Hugging Face rope_parameters dict may carry that this module takes as arguments.
_MOVED_KEYS = {"partial_rotary_factor": "rotary_dim= (int(d * factor))"}


def _require_even_width(d: object, name: str = "d") -> int:
    d = require_positive_int(name, d)
    if d % 2:
        raise ValueError(f"{name} must be even (RoPE turns feature pairs), got {name}={d}")
    return d


def _scaling_rule(
    scaling: object, base: float | None = None
) -> tuple[str, dict[str, object]] | None:
    """Validate ``scaling`` and return ``(rope_type, parameters)``, or ``None`` for none.

    ``base`` is the caller's ``base=``: a ``rope_theta`` key must equal it (``None``: the
    caller does not use the base, any finite positive ``rope_theta`` is accepted).
    """
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise TypeError(
            "scaling must be None or a dict such as {'rope_type': 'linear', 'factor': 4.0}, "
            f"got {type(scaling).__name__}"
        )
    params = dict(scaling)
    kind = params.pop("rope_type", None)
    legacy = params.pop("type", None)  # older config.json files spell it "type"
    if kind is None:
        kind = legacy
    elif legacy is not None and legacy != kind:
        raise ValueError(f"scaling gives rope_type={kind!r} and type={legacy!r}; keep one")
    theta = params.pop("rope_theta", None)  # transformers 5.x always writes it
    if theta is not None:
        theta = require_real("scaling['rope_theta']", theta, positive=True)
        if base is not None and theta != base:
            raise ValueError(
                f"scaling['rope_theta'] = {theta} differs from base={base}: pass "
                f"base={theta} (or drop rope_theta from scaling)"
            )
    for key in params:
        if key in _MOVED_KEYS:
            raise ValueError(f"scaling[{key!r}] is an argument here: pass {_MOVED_KEYS[key]}")
    if kind in (None, "default"):
        if params:
            named = "rope_type 'default'" if kind else "no 'rope_type'"
            raise ValueError(f"scaling with {named} reads no keys but sets {sorted(params)}")
        return None
    if kind not in _SCALING_KEYS:
        raise ValueError(
            f"scaling['rope_type'] must be one of {sorted(_SCALING_KEYS)}, got {kind!r}"
        )
    required, optional = _SCALING_KEYS[kind]
    for key in params:
        if key not in required + optional:
            raise ValueError(
                f"scaling[{key!r}] is not read by rope_type {kind!r} (it reads "
                f"{', '.join(required + optional)})"
            )
    missing = [key for key in required if params.get(key) is None]
    if missing:
        raise ValueError(f"scaling with rope_type {kind!r} needs {', '.join(missing)}")
    out: dict[str, object] = {}
    for key, value in params.items():
        name = f"scaling[{key!r}]"
        if value is None:
            continue  # Hugging Face writes unset optional keys as null
        if key == "truncate":
            out[key] = require_bool(name, value)
        elif key == "original_max_position_embeddings":
            out[key] = require_positive_int(name, value)
        elif key in ("mscale", "mscale_all_dim"):
            out[key] = require_real(name, value)
        else:
            out[key] = require_real(name, value, positive=True)
    if out["factor"] < 1:
        raise ValueError(
            f"scaling['factor'] must be >= 1 (it stretches the context), got {out['factor']}"
        )
    if kind == "yarn" and out.get("beta_fast", 32.0) < out.get("beta_slow", 1.0):
        raise ValueError(
            "scaling['beta_fast'] must be >= scaling['beta_slow'] (turns at the fast and slow "
            f"ends of the ramp), got {out.get('beta_fast', 32.0)} and {out.get('beta_slow', 1.0)}"
        )
    if kind == "llama3" and not out["high_freq_factor"] > out["low_freq_factor"]:
        raise ValueError(
            "scaling['high_freq_factor'] must exceed scaling['low_freq_factor'], got "
            f"{out['high_freq_factor']} and {out['low_freq_factor']}"
        )
    return kind, out


def _yarn_ramp(d: int, base: float, params: dict[str, object]) -> torch.Tensor:
    """Hugging Face's YaRN blend per pair: 0 keeps the frequency, 1 divides it by ``factor``.

    The ramp is linear in the pair *index* between the (floored, ceiled) pair indices where a
    pair makes ``beta_fast`` and ``beta_slow`` turns within the original context; the paper's
    equations ramp linearly in the number of turns instead.
    """
    context = params["original_max_position_embeddings"]

    def pair_with_turns(turns: float) -> float:  # fractional pair index making `turns` turns
        return d * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = pair_with_turns(params.get("beta_fast", 32.0))
    high = pair_with_turns(params.get("beta_slow", 1.0))
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as transformers does, to avoid dividing by zero
    pairs = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    return ((pairs - low) / (high - low)).clamp(0.0, 1.0)


def rope_frequencies(
    d: int, *, base: float = 10000.0, scaling: Mapping[str, object] | None = None
) -> torch.Tensor:
    """Angle per position step for each feature pair.

    Args:
        d: feature width that rotates, a positive even int (the head width, or ``rotary_dim``
            under partial rotary).
        base: wavelength scale; larger bases turn the slow pairs more slowly
            (``rope_theta`` in Hugging Face configs).
        scaling: ``None``, or a context-extension rule as in a Hugging Face config's
            ``rope_scaling``: ``{"rope_type": "linear", "factor": s}`` divides every
            frequency by ``s``; ``"yarn"`` (keys ``factor``, ``original_max_position_embeddings``
            and optionally ``beta_fast`` = 32, ``beta_slow`` = 1, ``truncate`` = True,
            ``attention_factor``, ``mscale``, ``mscale_all_dim``) divides the slow pairs by
            ``factor``, keeps the fast ones and ramps linearly in the pair index in between;
            ``"llama3"`` (keys ``factor``, ``low_freq_factor``, ``high_freq_factor``,
            ``original_max_position_embeddings``) does the same with a ramp in
            ``context / wavelength``.

    Returns:
        Float64 tensor ``(d/2,)``. Without scaling it holds ``base**(-2p/d)`` for
        ``p = 0 .. d/2 - 1``: pair 0 turns one radian per position, later pairs ever more
        slowly. The values follow ``transformers.modeling_rope_utils`` (5.23) computed in
        float64 rather than float32.
    """
    d = _require_even_width(d)
    base = require_real("base", base, positive=True)
    if base <= 1:
        raise ValueError(
            f"base must be > 1 (base**(-2p/d) must fall with the pair index p), got {base}"
        )
    rule = _scaling_rule(scaling, base)
    with too_large(f"d={d}"):
        exponents = torch.arange(0, d, 2, dtype=torch.float64) / d  # (d/2,)
    theta = base**-exponents  # (d/2,)
    if rule is None:
        return theta
    kind, params = rule
    factor = params["factor"]
    if kind == "linear":
        return theta / factor
    if kind == "yarn":
        ramp = _yarn_ramp(d, base, params)  # (d/2,) 0 keeps, 1 interpolates
        return theta / factor * ramp + theta * (1 - ramp)
    context = params["original_max_position_embeddings"]  # llama3
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    wavelength = 2 * math.pi / theta  # (d/2,)
    slow = torch.where(wavelength > context / low, theta / factor, theta)
    smooth = (context / wavelength - low) / (high - low)  # (d/2,) 0 at the slow end, 1 at fast
    middle = (wavelength >= context / high) & (wavelength <= context / low)
    return torch.where(middle, (1 - smooth) * slow / factor + smooth * slow, slow)


def rope_attention_factor(scaling: Mapping[str, object] | None = None) -> float:
    """Factor by which :func:`apply_rope` multiplies the turned features (cos and sin).

    Args:
        scaling: as in :func:`rope_frequencies`.

    Returns:
        ``1.0`` except for ``"yarn"``: its ``attention_factor`` if given, else
        ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` when both are given and
        non-zero, else ``mscale(factor) = 0.1 ln(factor) + 1`` (``1`` for ``factor <= 1``).
        Queries and keys both carry it, so the logits grow by its square: YaRN's temperature,
        except in DeepSeek's form (both ``mscale`` and ``mscale_all_dim`` given), where
        DeepSeek's attention multiplies the softmax scale by :func:`rope_softmax_factor` as
        well. With DeepSeek-V3's values (``mscale = mscale_all_dim = 1``, ``factor = 40``) this
        function returns ``1.0`` while the logits grow by ``rope_softmax_factor`` = 1.87.
    """
    rule = _scaling_rule(scaling)
    if rule is None or rule[0] != "yarn":
        return 1.0
    params = rule[1]
    if "attention_factor" in params:
        return float(params["attention_factor"])

    def mscale(s: float, m: float = 1.0) -> float:
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    factor = params["factor"]
    if params.get("mscale") and params.get("mscale_all_dim"):
        return mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
    return mscale(factor)


def rope_softmax_factor(scaling: Mapping[str, object] | None = None) -> float:
    """Extra factor on the softmax scale ``1/sqrt(d_k)`` that DeepSeek's YaRN form needs.

    DeepSeek-V2 and V3 split YaRN's temperature in two: :func:`rope_attention_factor` (the
    ratio of two ``mscale`` values, ``1.0`` when they are equal) on cos and sin, and this factor
    on the scores, ``mscale(factor, mscale_all_dim)**2``, which ``transformers`` applies inside
    those models' attention (``modeling_deepseek_v3.py``), not in its RoPE code. The logits of
    such a model grow by ``rope_attention_factor(s)**2 * rope_softmax_factor(s)`` in all.
    :func:`apply_rope` does not apply this factor: multiply the attention's scale by it.

    Args:
        scaling: as in :func:`rope_frequencies`.

    Returns:
        ``mscale(factor, mscale_all_dim)**2`` with ``mscale(s, m) = 0.1 m ln(s) + 1`` for a
        ``"yarn"`` rule that sets a non-zero ``mscale_all_dim``; ``1.0`` otherwise.
    """
    rule = _scaling_rule(scaling)
    if rule is None or rule[0] != "yarn" or not rule[1].get("mscale_all_dim"):
        return 1.0
    factor, m = rule[1]["factor"], rule[1]["mscale_all_dim"]
    return 1.0 if factor <= 1 else (0.1 * m * math.log(factor) + 1.0) ** 2


def rope_angles(
    positions: torch.Tensor,
    d: int,
    *,
    base: float = 10000.0,
    scaling: Mapping[str, object] | None = None,
) -> torch.Tensor:
    """Rotation angle of every feature pair at every position.

    Args:
        positions: integer tensor of any shape ``(...)``, e.g. ``(T,)``.
        d: feature width that rotates, a positive even int.
        base, scaling: as in :func:`rope_frequencies`.

    Returns:
        Float64 tensor ``(..., d/2)`` on the device of ``positions``. At large positions the
        precision shows: float32 numbers near ``1e6`` are ``0.0625`` apart, so float64 angles
        there can differ from float32 ones by about ``0.03`` radians. ``transformers``
        computes them in float32 and checkpoints were trained with those numbers: this
        module's float64 angles are closer to ``m * theta_p`` but differ from the
        reference numerics.
    """
    positions = require_tensor("positions", positions, dtype="integer", shape_hint="(..., T)")
    freqs = rope_frequencies(d, base=base, scaling=scaling).to(positions.device)  # (d/2,)
    return positions.to(torch.float64).unsqueeze(-1) * freqs  # (..., d/2)


def _positions_for(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``positions`` shaped to broadcast to ``x.shape[:-1]``, or a ValueError saying why not."""
    rank, k, given = x.ndim, positions.ndim, tuple(positions.shape)
    if k == 0 or given[-1] != x.shape[-2]:
        raise ValueError(
            f"positions of shape {given} must end in T = x.shape[-2] = {x.shape[-2]} (one "
            f"position per token of x, shape {tuple(x.shape)}); only leading dims broadcast"
        )
    position_ids = rank == 4 and k == 2  # Hugging Face's (B, T) for x (B, H, T, d)
    if position_ids:
        positions = positions.unsqueeze(1)  # (B, 1, T): one row per sequence, for every head
    elif 2 <= k < rank - 1:
        raise ValueError(
            f"positions of shape {given} is ambiguous for x of shape {tuple(x.shape)}: give "
            f"positions (T,), or {rank - 1} dims that broadcast to x.shape[:-1] = "
            f"{tuple(x.shape[:-1])} (insert the size-1 dims yourself)"
        )
    try:
        fits = torch.broadcast_shapes(positions.shape, x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        fits = False
    if not fits:
        hint = ""
        if position_ids:
            hint = (
                "; a 2-D positions for 4-D x is read as position_ids (B, T), shared by all "
                "heads (per-head positions need shape (B, H, T) or (1, H, T))"
            )
        raise ValueError(
            f"positions of shape {given} does not broadcast to x.shape[:-1] = "
            f"{tuple(x.shape[:-1])}{hint}"
        )
    return positions


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    layout: Layout = "half",
    scaling: Mapping[str, object] | None = None,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Rotate the feature pairs of ``x`` by their position's angles.

    Apply it to queries and keys (never values) after the head split and before the scores.

    Args:
        x: floating tensor ``(..., T, d_k)``, e.g. queries ``(B, H, T, d_k)`` (``d_k`` the
            head width, ``d`` in the formulas of this module). The token axis must be the
            second to last: GPT-J-style ``(B, T, H, d_k)`` tensors are misread (silently when
            ``T == H``); transpose them to ``(B, H, T, d_k)`` first.
        positions: integer tensor of each token's absolute position; its last dim is T
            (``positions.shape[-1] == x.shape[-2]``, so a one-token decode step gives
            ``torch.tensor([t])`` for ``x (..., 1, d_k)``; a size-1 positions is never spread
            over T tokens). ``(T,)`` is shared by every sequence and head
            (``torch.arange(T)``, or ``cache_len + arange(T)`` when decoding with a KV cache).
            Otherwise it has ``x.ndim - 1`` dims whose leading ones broadcast against
            ``x.shape[:-2]``, e.g. ``(B, 1, T)``, with one exception: for 4-D
            ``x (B, H, T, d_k)`` a 2-D ``(B, T)`` is Hugging Face's ``position_ids``, one row
            per sequence shared by all heads (left padding, packed sequences). Other ranks
            between are rejected as ambiguous rather than broadcast against the wrong dims.
        base: as in :func:`rope_frequencies`.
        layout: which coordinates form a pair, ``"half"`` or ``"interleaved"`` (see module
            docstring); under partial rotary, within the first ``rotary_dim`` features.
        scaling: a context-extension rule as in :func:`rope_frequencies`; ``"yarn"`` also
            multiplies the turned features by :func:`rope_attention_factor`.
        rotary_dim: how many leading features turn, a positive even int ``<= d``; default
            ``d`` (all). Pairs use the frequencies of a ``rotary_dim``-wide head.

    Returns:
        Tensor of the same shape and dtype as ``x``. Each pair keeps its length (times the
        YaRN factor), so vector norms are preserved without YaRN. Angles are computed in
        float64 and cast to ``x.dtype`` at the end.
    """
    x = require_tensor("x", x, min_rank=2, dtype="floating", shape_hint="(..., T, d)")
    positions = require_tensor("positions", positions, dtype="integer", shape_hint="(..., T)")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    d = x.shape[-1]
    if d % 2 or d == 0:
        raise ValueError(f"x must have an even feature width d >= 2, got shape {tuple(x.shape)}")
    if rotary_dim is not None:
        rotary_dim = _require_even_width(rotary_dim, "rotary_dim")
        if rotary_dim > d:
            raise ValueError(
                f"rotary_dim must be <= the feature width d={d} of x, got rotary_dim={rotary_dim}"
            )
        if rotary_dim < d:
            turned = apply_rope(
                x[..., :rotary_dim], positions, base=base, layout=layout, scaling=scaling
            )
            return torch.cat((turned, x[..., rotary_dim:]), dim=-1)  # (..., T, d)
    positions = _positions_for(x, positions)
    scale = rope_attention_factor(scaling)

    if positions.is_meta and not x.is_meta:
        raise ValueError(
            f"positions is a meta tensor (no values) but x is on {x.device}; the angles need "
            "the positions' values"
        )
    if x.is_meta:  # shapes only: follow x onto the meta device
        positions = positions.to("meta")
    # MPS has no float64; compute the angles on the CPU there and move only cos/sin.
    on_mps = positions.device.type == "mps"
    angles = rope_angles(positions.cpu() if on_mps else positions, d, base=base, scaling=scaling)
    cos, sin = angles.cos(), angles.sin()  # (..., T, d/2) float64
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    cos = cos.to(device=x.device, dtype=x.dtype)
    sin = sin.to(device=x.device, dtype=x.dtype)

    if layout == "half":
        a, b = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    turned = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d/2, 2)
    return turned.flatten(-2)  # (..., T, d)
