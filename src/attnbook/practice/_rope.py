"""Exercise of chapter 5: apply rotary position embeddings.

``apply_rope(x, positions)``
    x ``(..., T, d)`` floating with ``d`` even, positions ``(T,)`` integer (each token's
    absolute position). Returns a tensor like ``x`` (same shape and dtype) in which pair
    ``(p, p + d/2)`` of the token at position ``m`` is turned by the angle ``m * 10000**(-2p/d)``
    counter-clockwise (the rotate-half layout; ``attnbook.rope.apply_rope``'s default).
    ``x`` may be a non-contiguous view (heads from ``split_heads``). The cases include
    positions up to 4000 in float16 and bfloat16 inputs: there the angles must be computed
    in float32 or wider (position times frequency in 16 bits is off by radians), and only
    the final cos/sin or the result cast to ``x.dtype``.
"""

from __future__ import annotations

import torch

from attnbook.heads import split_heads as _split_heads
from attnbook.practice._exercise import Case, Exercise, Family, Mistake, from_families, pick, randn
from attnbook.rope import apply_rope as _apply_rope


def apply_rope(x, positions):
    return _apply_rope(x, positions)


def _frequencies16(d, h, form):
    """The frequencies as a reader computes them in dtype ``h`` (``pow``: ``10000 **
    (-2p/d)``; ``inv``: ``1 / 10000 ** (2p/d)``); each rounds in its own way in 16 bits."""
    two_p = torch.arange(0, d, 2, dtype=h)
    return 10000.0 ** (-two_p / d) if form == "pow" else 1.0 / (10000 ** (two_p / d))


def angles_as(positions, d, dtype, recipe=None, *, sign=1.0, exponent=2.0):
    """The angles ``(T, d/2)`` in float64, as a reader's recipe holds them.

    ``recipe`` None is the reference (float64 throughout). The others are the 16-bit slips,
    run in ``dtype`` (the input's; a wide dtype makes them right, as the reader's code is):
    ``"all"`` / ``"all_inv"`` positions and frequencies in ``dtype`` and multiplied there;
    ``"freq"`` / ``"freq_inv"`` frequencies in ``dtype``, multiplied in float32; ``"scalar"``
    / ``"scalar_inv"`` the exact position times frequencies in ``dtype``, rounded to it (a
    Python int times a 16-bit tensor); ``"cast"`` float32 angles cast to ``dtype`` before
    cos and sin; ``"positions"`` / ``"positions_half"`` only the positions cast (to ``dtype``,
    or to float16 whatever the input), the rest in float64.
    """
    p = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-exponent * p / d)  # (d/2,)
    if recipe is None:
        return sign * positions.double()[:, None] * theta
    h = dtype
    form = "inv" if recipe.endswith("_inv") else "pow"
    if recipe in ("all", "all_inv"):
        angles = positions.to(h)[:, None] * _frequencies16(d, h, form)
    elif recipe in ("freq", "freq_inv"):
        angles = positions.float()[:, None] * _frequencies16(d, h, form).float()
    elif recipe in ("scalar", "scalar_inv"):
        angles = (positions.float()[:, None] * _frequencies16(d, h, form).float()).to(h)
    elif recipe == "cast":
        angles = (positions.float()[:, None] * theta.float()).to(h)
    elif recipe in ("positions", "positions_half"):
        angles = positions.to(h if recipe == "positions" else torch.float16).double()[:, None]
        angles = angles * theta
    else:
        raise ValueError(f"unknown recipe {recipe!r}")
    return sign * angles.double()


def rotate(x, positions, *, sign=1.0, exponent=2.0, layout="half", cos_only=False,
           angles=None):  # fmt: skip
    """RoPE in float64, the result in ``x``'s dtype, with the knobs of the RoPE mistakes:
    ``sign`` -1 turns clockwise, ``exponent`` the 2 of ``10000**(-2p/d)``, ``layout``
    ``"interleaved"`` pairs (2p, 2p + 1), ``cos_only`` drops the sine terms, ``angles`` a
    16-bit recipe of :func:`angles_as`."""
    d = x.shape[-1]
    a64 = angles_as(positions, d, x.dtype, angles, sign=sign, exponent=exponent)  # (T, d/2)
    cos, sin = a64.cos(), (0 * a64 if cos_only else a64.sin())
    x64 = x.double()
    if layout == "half":
        a, b = x64[..., : d // 2], x64[..., d // 2 :]
        out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    else:
        a, b = x64[..., 0::2], x64[..., 1::2]
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)


_SIXTEEN = (
    "the angles (position × frequency), or the frequencies they are made of, are computed in "
    "the inputs' 16-bit dtype: float16 keeps about 3 significant digits and bfloat16 about "
    "2, so at position 4000 an angle is off by radians."
)
_SIXTEEN_HINT = (
    "Compute the frequencies and the angles in float32 or float64 (torch.arange(..., "
    "dtype=torch.float32), positions.float()), and cast only cos and sin, or the result, to "
    "x.dtype."
)

# The slips of the rotation, shared by every exercise that turns tokens (knobs of rotate()).
ROPE_FAMILIES = (
    Family(
        "rotates_backwards",
        "each pair turns clockwise (by -m·θ): the sine terms have the wrong signs.",
        "R(α) maps (a, b) to (a cos α - b sin α, a sin α + b cos α). Check it on (1, 0) "
        "turned by a quarter turn.",
        "ch-positions, R(α)",
        ({"sign": -1.0},),
    ),
    Family(
        "frequency_exponent_halved",
        "the frequencies are 10000**(-p/d) instead of 10000**(-2p/d), so the slow pairs turn "
        "too fast.",
        "Pair p's exponent is 2p/d: the last pair should turn by about 1/10000 radian per "
        "position.",
        "ch-positions, θ_p = b^(-2p/d)",
        ({"exponent": 1.0},),
    ),
    Family(
        "frequency_not_inverted",
        "the frequencies are 10000**(+2p/d): later pairs turn faster instead of slower.",
        "Pair 0 turns one radian per position and every later pair turns more slowly.",
        "ch-positions",
        ({"exponent": -2.0},),
    ),
    Family(
        "missing_sine_term",
        "only the cosine term is applied, so a pair's two features are never mixed and the "
        "vector shrinks.",
        "A rotation keeps the length: compare the norm of a token before and after.",
        "ch-positions",
        ({"cos_only": True},),
    ),
    Family(
        "angles_in_16_bit",
        _SIXTEEN,
        _SIXTEEN_HINT,
        "ch-positions; Hugging Face's rotary embeddings compute the angles in float32, with "
        "autocast turned off",
        tuple({"angles": r} for r in ("all", "all_inv", "freq", "freq_inv", "cast")),
    ),
    Family(
        "positions_in_16_bit",
        "the positions are cast to a 16-bit float before the angles are computed: float16 "
        "holds whole numbers exactly only up to 2048 and bfloat16 only up to 256, so a larger "
        "position is rounded to a neighbour.",
        "Convert the positions to float32 or float64 (positions.float()), never to x.dtype or "
        ".half().",
        "float16 has an 11-bit significand, bfloat16 an 8-bit one",
        ({"angles": "positions"}, {"angles": "positions_half"}),
    ),
)

_HALF_HINT_ROPE = (
    "Here that is the angles: compute positions, frequencies and angles in float32 or wider, "
    "and cast only cos and sin (or the result) to x.dtype."
)


def _case(shape, positions, seed, dtype=torch.float64):
    return lambda: {"x": randn(*shape, seed=seed, dtype=dtype), "positions": positions.clone()}


ARANGE = torch.arange


def _rope_like(**knobs):
    return lambda x, positions: rotate(x, positions, **knobs)


def solution_apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, d/2), never in 16 bits
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2 :]  # the two coordinates of every pair
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


APPLY_ROPE = Exercise(
    name="apply_rope",
    chapter="ch-positions",
    signature="apply_rope(x, positions)",
    reference=apply_rope,
    solution=solution_apply_rope,
    hint="Check one pair by hand: with d = 4, the token at position 1 turns pair 0, made of "
    "features 0 and 2, by 1 radian, and pair 1 (features 1 and 3) by 0.01 radian.",
    cases=(
        Case("hand case: 3 tokens at positions 0, 1, 2, d = 4", "hand", lambda: {
            "x": torch.tensor([[1.0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 1]]),
            "positions": ARANGE(3)}),
        Case("random case: 2 x 3 heads, 6 tokens, d = 16", "random",
             _case((2, 3, 6, 16), ARANGE(6), 81, torch.float32)),
        Case("random case: a chunk of 4 tokens at positions 100 to 103, d = 8", "random",
             _case((4, 8), 100 + ARANGE(4), 82)),
        Case("random case: heads from split_heads (non-contiguous), 5 tokens, d = 8", "random",
             lambda: {"x": _split_heads(randn(1, 5, 16, seed=87), 2), "positions": ARANGE(5)}),
        Case("edge case: one new token at position 37 (decoding with a cache)", "edge",
             _case((1, 2, 1, 8), torch.tensor([37]), 83)),
        Case("edge case: positions out of order, 5 2 9", "edge",
             _case((3, 6), torch.tensor([5, 2, 9]), 84)),
        Case("edge case: d = 2 (a single pair)", "edge", _case((4, 2), ARANGE(4) * 3, 85)),
        Case("edge case: float16", "edge", _case((2, 4, 8), ARANGE(4), 86, torch.float16)),
        Case("edge case: float16, d = 64, positions 1000 to 4000", "edge",
             _case((2, 4, 64), torch.tensor([1001, 1777, 2901, 3999]), 88,  # odd > 2048: not fp16
             torch.float16)),
        Case("edge case: bfloat16, positions 300 to 303, d = 16", "edge",
             _case((3, 4, 16), 300 + ARANGE(4), 89, torch.bfloat16)),
        # Large positions in float32: a mistake in how positions are held (an int8 that wraps
        # above 127, a table too short) shows here too, so it is not read as 16-bit angles.
        # Up to 1001 only: float32 angles of a correct solution stay well inside tolerance.
        Case("edge case: float32, d = 64, positions 130 to 1001", "edge",
             _case((2, 4, 64), torch.tensor([130, 255, 700, 1001]), 90, torch.float32)),
    ),
    half_hint=_HALF_HINT_ROPE,
    mistakes=(
        pick(ROPE_FAMILIES, "rotates_backwards").mistake(_rope_like),
        Mistake("interleaved_pairs", "the pairs are (2p, 2p + 1) (interleaved layout) "
                "instead of (p, p + d/2).", "Chapter 5, two layouts: this exercise uses "
                "rotate-half, where feature p pairs with feature p + d/2.",
                "ch-positions, two layouts",
                lambda x, positions: rotate(x, positions, layout="interleaved")),
        pick(ROPE_FAMILIES, "frequency_exponent_halved").mistake(_rope_like),
        pick(ROPE_FAMILIES, "frequency_not_inverted").mistake(_rope_like),
        Mistake("ignores_positions", "the positions argument is ignored and tokens are "
                "numbered 0, 1, 2, ... within the call.", "Chapter 5, cached decoding: a new "
                "token must be turned by its absolute position, not its index in the chunk.",
                "ch-positions, cached decoding",
                lambda x, positions: rotate(x, torch.arange(x.shape[-2]))),
        *from_families(ROPE_FAMILIES, _rope_like, "missing_sine_term", "angles_in_16_bit",
                       "positions_in_16_bit"),
    ),
)  # fmt: skip
