"""Claims about trained or sampled quantities, with thresholds a seed sweep has checked.

A trained number is a random variable: another seed, another CPU code path (AVX-512, AVX2 or
none) or another PyTorch build moves it. So a chapter never asserts such a number with a plain
``assert`` on this machine's digits; it states a bound with :func:`claim`, and the robustness
sweep (``benchmarks/sweep.py``) re-runs the chapter on other seeds and CPU code paths,
collects every claim's value and writes the table ``benchmarks/SWEEP.md``: for each claim the
smallest and largest value over the sweep, its bound and the margin left. The test suite fails
if a chapter's claims and the sweep's table disagree (a bound changed, a claim added without
being swept, or the code the sweep ran has changed since).

In a chapter :func:`claim` behaves like ``assert``: it raises ``AssertionError`` when the value
is outside the bound. Under the sweep (environment variable ``ATTNBOOK_CLAIMS`` naming a file)
it records the claim instead of raising, so that one run reports every claim.
"""

from __future__ import annotations

import json
import math
import numbers
import os

__all__ = ["CLAIMS_LOG", "claim"]

CLAIMS_LOG = "ATTNBOOK_CLAIMS"  # environment variable: the sweep's record file (JSON lines)


def _extremes(name: str, value: object) -> tuple[float, float]:
    """The smallest and largest element of a number, a sequence of numbers or a tensor."""
    try:
        import torch

        if isinstance(value, torch.Tensor):
            if value.numel() == 0:
                raise ValueError(f"claim {name!r}: value is an empty tensor; nothing to test")
            if value.is_complex() or value.dtype == torch.bool:
                raise TypeError(f"claim {name!r}: value must be real numbers, got {value.dtype}")
            if value.is_meta:
                raise ValueError(f"claim {name!r}: value is a meta tensor, with no values to test")
            flat = value.detach().to("cpu", torch.float64).flatten()
            if flat.isnan().any():
                return math.nan, math.nan
            return float(flat.min()), float(flat.max())
    except ImportError:  # pragma: no cover - torch is a dependency of every chapter
        pass
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"claim {name!r}: value is an empty sequence; nothing to test")
    found = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            raise TypeError(
                f"claim {name!r}: value must be a number, a sequence of numbers or a tensor, "
                f"got {type(item).__name__}"
            )
        try:
            found.append(float(item))
        except OverflowError:
            raise ValueError(f"claim {name!r}: value {item!r} is too large for a float") from None
    if any(math.isnan(x) for x in found):
        return math.nan, math.nan
    return min(found), max(found)


def claim(
    name: str, value: object, *, above: float | None = None, below: float | None = None
) -> None:
    """Assert that every element of ``value`` lies strictly between ``above`` and ``below``.

    Args:
        name: what the value is, unique within its chapter (the sweep's table is keyed by it).
        value: a number, a list or tuple of numbers, or a real tensor of any shape (every
            element is tested: ``claim("accuracy per seed", acc, above=0.95)``).
        above: the value must be greater than this (``None``: no lower bound).
        below: the value must be less than this (``None``: no upper bound).

    Raises:
        ValueError: no bound given, ``above >= below``, a bound that is not finite, an empty
            ``name`` or an empty value (a claim must test something).
        TypeError: ``name`` not a string, or ``value`` not real numbers.
        AssertionError: an element is outside the bounds, or any element is NaN or infinite
            (never a pass: a diverged value is no evidence).
            Under the sweep (``ATTNBOOK_CLAIMS`` set) the claim is recorded instead.
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    if above is None and below is None:
        raise ValueError(f"claim {name!r}: give above=, below= or both; a claim needs a bound")
    for label, bound in (("above", above), ("below", below)):
        if bound is None:
            continue
        try:
            finite = (
                not isinstance(bound, bool)
                and isinstance(bound, numbers.Real)
                and math.isfinite(float(bound))
            )
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError(f"claim {name!r}: {label} must be a finite number, got {bound!r}")
    if above is not None and below is not None and not above < below:
        raise ValueError(f"claim {name!r}: above={above} must be less than below={below}")
    lo, hi = _extremes(name, value)
    # NaN and infinities never hold: a diverged value is no evidence for any bound.
    held = (
        math.isfinite(lo)
        and math.isfinite(hi)
        and (above is None or lo > above)
        and (below is None or hi < below)
    )
    log = os.environ.get(CLAIMS_LOG)
    if log:
        record = {"name": name, "min": lo, "max": hi, "above": above, "below": below}
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(record | {"held": held}) + "\n")
        except OSError as error:
            raise ValueError(f"{CLAIMS_LOG}={log!r} cannot be appended to: {error}") from None
        return
    if not held:
        bounds = " and ".join(
            f"{word} {bound}"
            for word, bound in (("above", above), ("below", below))
            if bound is not None
        )
        shown = f"{lo:.6g}" if lo == hi or math.isnan(lo) else f"{lo:.6g} to {hi:.6g}"
        raise AssertionError(
            f"{name}: measured {shown}, claimed {bounds} (benchmarks/SWEEP.md has the sweep)"
        )
