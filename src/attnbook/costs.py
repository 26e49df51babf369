"""Back-of-the-envelope costs of a transformer, in exact integer arithmetic.

Conventions: ``n`` tokens, model width ``d``, FFN width ``hidden``. One multiply-add counts
as 2 FLOPs, as in ``torch.utils.flop_counter.FlopCounterMode``, so a ``(n, a) @ (a, b)``
matmul costs ``2 * n * a * b``. Only matmuls are counted: softmax, norms and activations are
cheap by comparison. Parameter counts leave out biases, norms and embeddings.

Sizes are positive whole numbers, written as ints or as floats that are whole numbers, the
way parameter and token counts are usually written (``70e9``, ``1.4e12``); such floats
convert exactly. A fractional float (``70.5``), a float above ``2**53`` (where floats skip
integers: pass ``10**23``, not ``1e23``), a ``bool`` or a string is rejected with a message
naming the argument, and every result is an exact ``int``. (Two exceptions, each documented
where it applies: ``kv_cache_bytes`` takes ``positions=0`` and a fractional
``bytes_per_element`` such as 0.5 for a 4-bit cache.)
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from attnbook._checks import require_bool, require_integral, require_real


def require_positive_int(name: str, value: object) -> int:
    """A size: an int, or a whole-number float such as ``70e9``, that is ``>= 1``."""
    return require_integral(name, value, minimum=1)


__all__ = [
    "attention_flops",
    "block_params",
    "chinchilla_tokens",
    "ffn_flops",
    "kv_cache_bytes",
    "projection_flops",
    "swiglu_hidden",
    "training_flops",
    "vit_tokens",
]


def _bytes_per_element(value: object) -> Fraction:
    """A storage size per number: a positive int, or a positive float such as ``0.5`` (4-bit)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            "bytes_per_element must be a positive number (2 for bf16, 0.5 for 4-bit), "
            f"got {value!r} of type {type(value).__name__}"
        )
    if isinstance(value, numbers.Integral):
        exact = Fraction(int(value))
    else:
        if not math.isfinite(float(value)):
            raise ValueError(f"bytes_per_element must be finite, got {value!r}")
        exact = Fraction(float(value))  # 0.5, 0.25, 0.375 are exact binary fractions
    if exact <= 0:
        raise ValueError(f"bytes_per_element must be > 0, got {value!r}")
    return exact


def kv_cache_bytes(
    *,
    layers: int,
    positions: int,
    kv_heads: int,
    head_dim: int,
    bytes_per_element: float,
    batch: int = 1,
    value_dim: int | None = None,
    window: int | None = None,
) -> int:
    """Memory for the keys and values cached by every layer during decoding.

    Each layer stores, per sequence and position, ``kv_heads`` keys of ``head_dim`` numbers and
    ``kv_heads`` values of ``value_dim`` numbers (``value_dim`` defaults to ``head_dim``).

    Args:
        layers, kv_heads, head_dim, batch, value_dim: sizes ``>= 1``.
        positions: tokens held so far, ``>= 0`` (0: an empty cache, 0 bytes).
        bytes_per_element: storage per number: 2 for bf16/fp16, 1 for int8/fp8, and fractions
            for packed caches: 0.5 for 4-bit, 0.25 for 2-bit. Only the packed numbers are
            counted, not the scales and zero points a quantized cache also keeps.
        window: a sliding-window model (Mistral-7B: 4096) attends to at most the ``window``
            newest positions, counting the query's own (as in
            :func:`attnbook.masks.sliding_window_mask`), so a rolling buffer needs only
            ``min(positions, window)`` of them; ``None`` (the default) caches every position.
            Count ``positions`` as the tokens held while a step attends, the new one included:
            Mistral's reference code writes the new token into its ``window``-slot buffer
            first, while ``transformers``' ``DynamicCache`` keeps ``window - 1`` between steps
            and concatenates the new token on top.

    Returns:
        ``batch * layers * min(positions, window) * kv_heads * (head_dim + value_dim) *
        bytes_per_element``, rounded up to whole bytes when ``bytes_per_element`` is a
        fraction; e.g. 512 MiB for 32 layers, 4096 positions, 8 kv heads of 128 in 16-bit.
    """
    layers = require_positive_int("layers", layers)
    positions = require_integral("positions", positions, minimum=0)
    kv_heads = require_positive_int("kv_heads", kv_heads)
    head_dim = require_positive_int("head_dim", head_dim)
    per_element = _bytes_per_element(bytes_per_element)
    batch = require_positive_int("batch", batch)
    value_dim = head_dim if value_dim is None else require_positive_int("value_dim", value_dim)
    if window is not None:
        positions = min(positions, require_positive_int("window", window))
    elements = batch * layers * positions * kv_heads * (head_dim + value_dim)
    return math.ceil(elements * per_element)  # exact: Fraction arithmetic, one rounding


def attention_flops(n: int, d: int) -> int:
    """FLOPs of the two attention matmuls for ``n`` tokens of total head width ``d``.

    The scores ``q @ k^T`` and the weighted sum ``weights @ v`` each cost ``2 * n * n * d``
    (summed over heads, since the heads split ``d``). This is the part that grows as ``n**2``.

    Returns:
        ``4 * n**2 * d``.
    """
    n = require_positive_int("n", n)
    d = require_positive_int("d", d)
    return 4 * n * n * d


def projection_flops(n: int, d: int) -> int:
    """FLOPs of the four ``d x d`` projections (query, key, value, output) for ``n`` tokens.

    Returns:
        ``8 * n * d**2``.
    """
    n = require_positive_int("n", n)
    d = require_positive_int("d", d)
    return 8 * n * d * d


def swiglu_hidden(d: int, multiple_of: int = 1, *, ffn_dim_multiplier: float | None = None) -> int:
    """FFN width of a gated (SwiGLU) block with the parameters of a ``4 d`` plain FFN.

    A gated FFN has three ``d x hidden`` matrices instead of two, so ``hidden = 2/3 * 4d``
    keeps the count; Llama then scales it by ``ffn_dim_multiplier`` (Llama 2 70B and Llama 3
    use 1.3) and rounds up to a hardware-friendly ``multiple_of``. The steps are those of
    Meta's reference ``FeedForward``: ``int(2 * 4d / 3)``, then ``int(ffn_dim_multiplier *
    hidden)`` (a float product truncated, as there), then the round-up.

    Args:
        d: model width.
        multiple_of: round the width up to a multiple of this (Llama 2: 256; Llama 2 70B:
            4096; Llama 3 8B: 1024).
        ffn_dim_multiplier: optional positive real scale applied before rounding; ``None``
            (the default) applies none.

    Returns:
        The width, an int; e.g. ``swiglu_hidden(4096, multiple_of=256) == 11008`` (Llama-7B),
        ``swiglu_hidden(4096, 1024, ffn_dim_multiplier=1.3) == 14336`` (Llama-3-8B) and
        ``swiglu_hidden(8192, 4096, ffn_dim_multiplier=1.3) == 28672`` (Llama-2-70B).
    """
    d = require_positive_int("d", d)
    multiple_of = require_positive_int("multiple_of", multiple_of)
    hidden = 8 * d // 3
    if ffn_dim_multiplier is not None:
        scale = require_real("ffn_dim_multiplier", ffn_dim_multiplier, positive=True)
        hidden = max(1, int(scale * hidden))
    return -(-hidden // multiple_of) * multiple_of  # ceiling division, still exact


def _ffn_width(d: int, hidden: int | None, gated: bool) -> int:
    if hidden is not None:
        return require_positive_int("hidden", hidden)
    return swiglu_hidden(d) if gated else 4 * d


def ffn_flops(n: int, d: int, hidden: int | None = None, *, gated: bool = False) -> int:
    """FLOPs of the feed-forward block for ``n`` tokens.

    Args:
        n: tokens.
        d: model width.
        hidden: FFN width; defaults to ``4 * d``, or to ``swiglu_hidden(d)`` when gated.
        gated: a ``bool``: a SwiGLU-style FFN with three matrices (gate, up, down) instead
            of two.

    Returns:
        ``2 * (3 if gated else 2) * n * d * hidden``.
    """
    n = require_positive_int("n", n)
    d = require_positive_int("d", d)
    gated = require_bool("gated", gated)
    hidden = _ffn_width(d, hidden, gated)
    return 2 * (3 if gated else 2) * n * d * hidden


def block_params(d: int, *, hidden: int | None = None, gated: bool = False) -> int:
    """Weights of one transformer block: four attention projections plus the FFN.

    Args:
        d: model width.
        hidden, gated: as in :func:`ffn_flops`.

    Returns:
        ``4 * d**2 + (3 if gated else 2) * d * hidden`` (``12 * d**2`` for the default plain
        FFN). Biases and norms are left out; they add ``O(d)`` per block.
    """
    d = require_positive_int("d", d)
    gated = require_bool("gated", gated)
    hidden = _ffn_width(d, hidden, gated)
    return 4 * d * d + (3 if gated else 2) * d * hidden


def training_flops(params: int, tokens: int) -> int:
    """Approximate training compute: ``6 * params * tokens``.

    Each token costs ``2 * params`` FLOPs forward (one multiply-add per weight) and about
    twice that backward (gradients for activations and for weights).
    """
    params = require_positive_int("params", params)
    tokens = require_positive_int("tokens", tokens)
    return 6 * params * tokens


def chinchilla_tokens(params: int, tokens_per_param: int = 20) -> int:
    """Compute-optimal training tokens by the Chinchilla rule of thumb (about 20 per parameter).

    Returns:
        ``params * tokens_per_param``; e.g. 1.4 trillion tokens for 70 billion parameters.
    """
    params = require_positive_int("params", params)
    tokens_per_param = require_positive_int("tokens_per_param", tokens_per_param)
    return params * tokens_per_param


def vit_tokens(height: int, width: int, patch: int, channels: int = 3) -> tuple[int, int]:
    """Token count and token size when a ViT cuts an image into square patches.

    Args:
        height, width: image size in pixels; each must be a multiple of ``patch``.
        patch: side of a square patch in pixels.
        channels: values per pixel.

    Returns:
        ``(tokens, values_per_token)`` = ``((height // patch) * (width // patch),
        patch * patch * channels)``; e.g. ``(196, 768)`` for 224 x 224 RGB and 16-pixel
        patches (the class token is not counted).
    """
    height = require_positive_int("height", height)
    width = require_positive_int("width", width)
    patch = require_positive_int("patch", patch)
    channels = require_positive_int("channels", channels)
    for name, side in (("height", height), ("width", width)):
        if side % patch:
            raise ValueError(f"{name}={side} is not a multiple of patch={patch}")
    return (height // patch) * (width // patch), patch * patch * channels
