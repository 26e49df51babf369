"""Running a function on a case without letting it crash the checker, and comparing results.

Tolerances follow the dtype of the reference output (float16 is loose, float64 is not tight
either: a correct solution may compute angles or sums in float32). NaN is never equal to a
reference number; when two *wrong* answers are compared (the reader's and a catalogued
variant's), every non-finite entry counts as the same failure.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# (rtol, atol) per dtype. Catalogued mistakes miss by far more than this on some case (a test
# checks it), so a loose tolerance costs no recognition and never fails a correct solution.
TOLERANCE = {
    torch.float64: (1e-4, 1e-4),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


@dataclass(frozen=True)
class Outcome:
    """What one call did: returned ``value``, or raised ``error``; ``mutated`` names an input
    the call changed in place."""

    value: Any = None
    error: Exception | None = None
    mutated: str | None = None


def _same_input(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def call(fn: Callable[..., Any], inputs: dict[str, Any], *, keyword: bool) -> Outcome:
    """Call ``fn`` on copies of ``inputs``; never raise, whatever ``fn`` does."""
    args = copy.deepcopy(inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = fn(**args) if keyword else fn(*args.values())
    except Exception as error:  # the reader's code may raise anything; report it, never crash
        return Outcome(error=error)
    for name, original in inputs.items():
        if not _same_input(args[name], original):
            return Outcome(value=value, mutated=name)
    return Outcome(value=value)


def _at(t: torch.Tensor, flat: int) -> str:
    """Index of the ``flat``-th element of ``t``, written ``[i, j, ...]``."""
    idx = []
    for size in reversed(t.shape):
        flat, i = divmod(flat, size)
        idx.append(i)
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _tensor_difference(expected: torch.Tensor, got: Any) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"is a {type(got).__name__}, not a torch.Tensor"
    if got.shape != expected.shape:
        return f"has shape {tuple(got.shape)}; expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"has dtype {got.dtype}; expected {expected.dtype}"
    if expected.numel() == 0:
        return None
    e, g = expected.flatten(), got.detach().flatten()
    if expected.dtype == torch.bool:
        wrong = (e != g).nonzero().flatten()
        if len(wrong) == 0:
            return None
        i = int(wrong[0])
        return (
            f"is {bool(g[i])} at {_at(expected, i)} where it should be {bool(e[i])} "
            f"({len(wrong)} of {e.numel()} entries differ)"
        )
    if not expected.is_floating_point():
        wrong = (e != g).nonzero().flatten()
        if len(wrong) == 0:
            return None
        i = int(wrong[0])
        return f"is {g[i].item()} at {_at(expected, i)} instead of {e[i].item()}"
    nan = torch.isnan(g) & ~torch.isnan(e)
    if nan.any():
        i = int(nan.nonzero()[0])
        return f"contains NaN ({int(nan.sum())} entries, the first at {_at(expected, i)})"
    e64, g64 = e.double(), g.double()
    inf = torch.isinf(g64) & (g64 != e64)
    if inf.any():
        i = int(inf.nonzero()[0])
        return f"is {g[i].item()} at {_at(expected, i)} where {e[i].item():.4g} was expected"
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-4, 1e-4))
    bad = ~torch.isclose(g64, e64, rtol=rtol, atol=atol)
    if not bad.any():
        return None
    err = (g64 - e64).abs().masked_fill(~bad, 0)
    i = int(err.argmax())
    return (
        f"differs from the reference by up to {err[i].item():.3g} "
        f"(at {_at(expected, i)}: {g[i].item():.4g} instead of {e[i].item():.4g}; "
        f"{int(bad.sum())} of {e.numel()} entries are off)"
    )


def _number_difference(expected: int | float, got: Any) -> str | None:
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, int | float):
        return f"is a {type(got).__name__}, not a number"
    if got == expected:
        return None
    ratio = f" ({got / expected:.4g} times the reference)" if expected else ""
    return f"is {got:,} instead of {expected:,}{ratio}"


def difference(expected: Any, got: Any, names: tuple[str, ...] = ()) -> str | None:
    """Say how ``got`` differs from the reference output ``expected``; None if it does not."""
    if isinstance(expected, torch.Tensor):
        return _tensor_difference(expected, got)
    if isinstance(expected, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(expected):
            return f"is not a tuple of {len(expected)} ({', '.join(names)})"
        for name, e, g in zip(names, expected, got, strict=True):
            why = _tensor_difference(e, g)
            if why:
                return f"has {name} that {why}"
        return None
    return _number_difference(expected, got)


def _finite_parts_agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    a64, b64 = a.detach().double(), b.detach().double()
    fa, fb = torch.isfinite(a64), torch.isfinite(b64)
    if not torch.equal(fa, fb):
        return False
    rtol, atol = TOLERANCE.get(a.dtype, (1e-4, 1e-4))
    return bool(torch.isclose(a64[fa], b64[fb], rtol=rtol, atol=atol).all())


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and _finite_parts_agree(a, b)
        )
    if isinstance(a, tuple | list):
        return (
            isinstance(b, tuple | list)
            and len(a) == len(b)
            and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    return False


def _gist(error: Exception) -> str:
    """The error's kind and wording without the op's name and the numbers, so that
    ``amax(): ... dim -1 ...`` and ``max(): ... dim 2 ...`` read as the same failure."""
    text = re.sub(r"^[\w.]+\(\):\s*", "", str(error).strip())
    return f"{type(error).__name__}: {re.sub(r'-?[0-9]+', '#', text)[:40]}"


def same_behaviour(a: Outcome, b: Outcome) -> bool:
    """Two calls behaved alike: both raised the same kind of error, or returned equal values
    (any non-finite entry matching any other)."""
    if a.error is not None or b.error is not None:
        return a.error is not None and b.error is not None and _gist(a.error) == _gist(b.error)
    return _same_value(a.value, b.value)
