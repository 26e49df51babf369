"""Private argument checks shared by the public modules.

Every check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for a value
of the right kind but the wrong size, and the message always names the argument and shows
the offending shape or value, so a reader can fix the call without opening this file.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

# torch is imported inside the tensor checks, not here, so that attnbook.costs (pure integer
# arithmetic) loads without it.
if TYPE_CHECKING:
    import torch

__all__ = [
    "require_bool",
    "require_broadcastable",
    "require_callable",
    "require_device",
    "require_instance",
    "require_int",
    "require_integral",
    "require_nonempty",
    "require_positive_int",
    "require_qkv",
    "require_real",
    "require_same_shape",
    "require_scalar",
    "require_seed",
    "require_tensor",
    "require_values",
    "tolerance_for",
    "too_large",
]

DtypeKind = Literal["floating", "integer", "bool"]


def require_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` as a Python ``int``, or raise unless it is an integer in
    ``[minimum, maximum]`` (either bound may be left open).

    ``bool`` is rejected even though it subclasses ``int``: ``layers=True`` is a bug, not 1.
    NumPy integers are accepted and converted, so later arithmetic cannot overflow int64.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


# torch.manual_seed and torch.Generator.manual_seed take seeds in [0, 2**64 - 1].
_MAX_TORCH_SEED = 2**64 - 1


def require_seed(name: str, value: object, *, offset: int = 0) -> int:
    """Return ``value`` as an ``int`` seed, or raise unless ``value + offset`` (the largest seed
    the caller derives from it, e.g. ``seed + 1`` for a second generator) is a torch seed,
    ``0 <= seed + offset <= 2**64 - 1``."""
    return require_int(name, value, minimum=0, maximum=_MAX_TORCH_SEED - offset)


def require_positive_int(name: str, value: object) -> int:
    """Return ``value`` as a Python ``int``, or raise unless it is an integer ``>= 1``."""
    return require_int(name, value, minimum=1)


# Above 2**53 a float cannot hold every whole number (1e23 is stored as 99999999999999991611392),
# so a float there may not be the number the reader wrote: ask for an int instead.
_EXACT_FLOAT_LIMIT = 2**53


def require_integral(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python ``int``, accepting floats that are whole numbers.

    Parameter and token counts are written ``70e9`` or ``1.4e12``; those floats are exact whole
    numbers and convert exactly (``70e9 -> 70_000_000_000``). A float with a fractional part
    (``70.5``), a non-finite float, or a float above ``2**53`` (where floats skip integers, so
    ``1e23`` is not ``10**23``) is rejected with a message naming ``name``. Ints (Python or
    NumPy) are accepted as in :func:`require_int`; ``bool`` and strings are rejected.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a whole number (an int, or a float such as 70e9), "
            f"got {value!r} of type {type(value).__name__}"
        )
    if not isinstance(value, numbers.Integral):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be a finite whole number, got {value!r}")
        if int(value) != value:
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        if abs(as_float) > _EXACT_FLOAT_LIMIT:
            raise ValueError(
                f"{name}={value!r} is a float above 2**53, where floats cannot hold every "
                "whole number; pass an int instead (10**23 rather than 1e23)"
            )
    return require_int(name, int(value), minimum=minimum)


def require_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (Python or NumPy), else raise ``TypeError``.

    Without this check ``gated="no"`` would be truthy and silently count a gated FFN.
    """
    if isinstance(value, bool):
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} of type {kind.__name__}")


def require_real(name: str, value: object, *, positive: bool = False) -> float:
    """Return ``value`` as a finite ``float``, or raise (``bool`` is rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def require_callable(name: str, value: object) -> object:
    """Return ``value`` if it can be called, else raise ``TypeError`` naming its type."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


def require_instance(name: str, value: object, cls: type) -> object:
    """Return ``value`` if it is an instance of ``cls``, else raise ``TypeError``."""
    if not isinstance(value, cls):
        article = "an" if cls.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"{name} must be {article} {cls.__name__}, got {type(value).__name__}")
    return value


def _dtype_matches(x: torch.Tensor, dtype: torch.dtype | DtypeKind) -> bool:
    import torch

    if dtype == "floating":
        return x.is_floating_point()
    if dtype == "integer":
        return not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    if dtype == "bool":
        return x.dtype == torch.bool
    return x.dtype == dtype


def require_tensor(
    name: str,
    x: object,
    *,
    min_rank: int = 0,
    rank: int | None = None,
    dtype: torch.dtype | DtypeKind | None = None,
    shape_hint: str = "",
) -> torch.Tensor:
    """Return ``x`` if it is a tensor of the required rank and dtype, else raise.

    ``shape_hint`` (e.g. ``"(..., T, d)"``) is quoted in the message to show the expected layout.
    """
    import torch

    hint = f" {shape_hint}" if shape_hint else ""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{hint}, got {type(x).__name__}")
    if dtype is not None and not _dtype_matches(x, dtype):
        wanted = f"a {dtype} dtype" if isinstance(dtype, str) else str(dtype)
        raise TypeError(f"{name} must have {wanted}, got {x.dtype} (shape {tuple(x.shape)})")
    if rank is not None and x.dim() != rank:
        raise ValueError(f"{name} must have rank {rank}{hint}, got shape {tuple(x.shape)}")
    if x.dim() < min_rank:
        raise ValueError(f"{name} must have rank >= {min_rank}{hint}, got shape {tuple(x.shape)}")
    return x


def require_qkv(
    q: object, k: object, v: object, *, allow_gqa: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check the ``(..., heads, tokens, features)`` contract shared by the attention functions.

    Rank-2 inputs count as a single head. With ``allow_gqa`` the query heads need only be a
    multiple of the key/value heads; without it they must be equal.
    """
    q = require_tensor("q", q, min_rank=2, dtype="floating", shape_hint="(..., Hq, Tq, dk)")
    k = require_tensor("k", k, min_rank=2, dtype="floating", shape_hint="(..., Hkv, Tk, dk)")
    v = require_tensor("v", v, min_rank=2, dtype="floating", shape_hint="(..., Hkv, Tk, dv)")
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.dim() == k.dim() == v.dim():
        raise ValueError(f"q, k and v must have the same rank, got {shapes}")
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-3] != v.shape[:-3]:
        raise ValueError(f"q, k and v must have the same batch dims (...), got {shapes}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has dk={q.shape[-1]} but k has dk={k.shape[-1]}; got {shapes}")
    if q.shape[-1] == 0:
        raise ValueError(f"q and k need dk >= 1 features, got {shapes}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k has Tk={k.shape[-2]} tokens but v has {v.shape[-2]}; got {shapes}")
    if not q.device == k.device == v.device:
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    if q.dim() >= 3:
        hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
        if hk != hv:
            raise ValueError(f"k has {hk} heads but v has {hv}; got {shapes}")
        if not allow_gqa and hq != hk:
            raise ValueError(f"q has {hq} heads but k has {hk}; they must be equal; got {shapes}")
        if hk == 0 or hq % hk != 0:
            raise ValueError(
                f"q has {hq} heads but k has {hk}; heads must divide (Hq % Hkv == 0); got {shapes}"
            )
    return q, k, v


def require_nonempty(name: str, x: torch.Tensor, dims: str) -> torch.Tensor:
    """Return ``x`` unless it has a zero-size dim; ``dims`` names them, e.g. ``"B, T"``."""
    if x.numel() == 0:
        wanted = " and ".join(f"{dim} >= 1" for dim in dims.split(", "))
        raise ValueError(f"{name} must have {wanted}, got shape {tuple(x.shape)}")
    return x


def require_same_shape(name: str, x: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    """Raise unless the tensors called ``name`` and ``other_name`` have the same shape."""
    if x.shape != other.shape:
        raise ValueError(
            f"{name} {tuple(x.shape)} and {other_name} {tuple(other.shape)} differ; "
            "they need equal shapes"
        )


def require_scalar(name: str, x: object) -> torch.Tensor:
    """Return ``x`` if it is a one-element tensor (a loss, say), else raise naming its shape."""
    x = require_tensor(name, x)
    if x.numel() != 1:
        raise ValueError(f"{name} must be a scalar tensor, got shape {tuple(x.shape)}")
    return x


def require_broadcastable(
    name: str, x: torch.Tensor, target: str, shape: tuple[int, ...]
) -> torch.Tensor:
    """Return ``x`` expanded to ``shape`` (the shape of the tensor called ``target``), or raise."""
    import torch

    try:
        fits = torch.broadcast_shapes(x.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} does not broadcast to {target} {tuple(shape)}"
        )
    return x.expand(shape)


def require_values(name: str, x: torch.Tensor) -> torch.Tensor:
    """Return ``x`` unless it is a ``meta`` tensor, which has a shape but no numbers to check."""
    if x.is_meta:
        raise ValueError(
            f"{name} is a meta tensor (shape {tuple(x.shape)}, no values); this function "
            "inspects values, so pass a tensor on a real device"
        )
    return x


def require_device(name: str, device: object) -> torch.device | None:
    """Return ``device`` as a ``torch.device`` (``None`` stays ``None``), or raise naming it.

    Accepts what torch accepts: a ``torch.device``, a string (``"cpu"``, ``"cuda:1"``) or an
    accelerator index (``0``).
    """
    import torch

    if device is None:
        return device
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, numbers.Integral)):
        raise TypeError(
            f"{name} must be a torch.device, a string such as 'cpu' or 'cuda', an index, or "
            f"None, got {device!r} of type {type(device).__name__}"
        )
    try:
        parsed = torch.device(int(device) if isinstance(device, numbers.Integral) else device)
        torch.empty(0, device=parsed)  # an unavailable device (no CUDA build, say) fails here
        return parsed
    except (RuntimeError, AssertionError) as error:
        raise ValueError(
            f"{name}={device!r} is not a usable device ({error}); use e.g. 'cpu' or 'cuda'"
        ) from None


# Tolerances written for float32 scale with the dtype's resolution (its machine epsilon) for
# 16-bit types: a float16 attention row sums to 1 only within ~5e-4, and bfloat16 to ~4e-3.
_FLOAT32_EPS = 2.0**-23


def tolerance_for(atol_float32: float, *dtypes: torch.dtype) -> float:
    """The float32 tolerance ``atol_float32``, widened for the coarsest of ``dtypes``.

    float32 and float64 keep ``atol_float32``; float16 multiplies it by 8192 and bfloat16 by
    65536 (the ratio of their machine epsilons to float32's).
    """
    import torch

    eps = max((torch.finfo(d).eps for d in dtypes if d.is_floating_point), default=_FLOAT32_EPS)
    return atol_float32 * max(1.0, eps / _FLOAT32_EPS)


@contextmanager
def too_large(what: str) -> Iterator[None]:
    """Turn torch's allocation failures inside the block into a ``ValueError`` naming ``what``.

    ``what`` names the arguments that set the size, e.g. ``"t_q=10**12, t_k=10**12"``; torch's
    own message (an overflowed size, or an allocator that cannot find the bytes) follows it.
    A size beyond int64 reaches torch's argument parser, which raises ``TypeError`` ("failed
    to unpack ... Overflow"); that one is turned into the same ``ValueError``.
    """
    try:
        yield
    except OverflowError as error:
        raise ValueError(f"{what} is too large ({error})") from None
    except TypeError as error:
        if "overflow" not in str(error).lower():
            raise
        first = str(error).splitlines()[0]
        raise ValueError(f"{what} is too large ({first[:160]})") from None
    except RuntimeError as error:
        text = str(error)
        if "allocate" not in text and "overflow" not in text.lower():
            raise
        first = text.splitlines()[0] if text else type(error).__name__
        raise ValueError(f"{what} is too large to allocate ({first[:160]})") from None
