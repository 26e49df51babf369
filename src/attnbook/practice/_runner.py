"""The checking loop: run the reader's function on every case, then name the mistake.

Order of questions: is it a stub (raises ``NotImplementedError`` on every case)? Does it agree
with the reference everywhere? If not, does it behave exactly like one of the catalogued
wrong variants on every case (then the verdict names it), or on most of the failing cases
(then the verdict says on how many, and does not name it as *the* mistake)? The message
names the first case that fails, lists every case with what happened there, and picks a hint
that fits the kind of failure (an exception, a shape, a dtype, NaN, a change in place, one
constant ratio, a count wrapped around 32 bits or rounded to float32, failures on the 16-bit
cases only, failures on some cases only). What the function printed is quoted in a note
before the hint (the first lines, and how many there were), never shown as it ran.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import torch

from attnbook.practice._compare import (
    TIME_LIMIT_S,
    TOTAL_LIMIT_S,
    Outcome,
    _restore,
    _snapshot,
    as_count,
    call,
    difference,
    ratio,
    same_behaviour,
)
from attnbook.practice._exercise import Exercise, Mistake
from attnbook.practice._result import Result


@cache
def _prepared(exercise: Exercise) -> tuple[tuple[dict[str, Any], Any], ...]:
    """Inputs and reference output of every case, computed once per session."""
    rows = []
    for case in exercise.cases:
        with torch.inference_mode(False), torch.enable_grad():  # whatever mode the reader is in
            inputs = case.make()
            expected = call(exercise.reference, inputs, keyword=exercise.keyword_call)
        if expected.error is not None:  # a bug in the book, not in the reader's code
            raise RuntimeError(f"{exercise.name}: reference fails on {case.label}") from (
                expected.error
            )
        rows.append((inputs, expected.value))
    return tuple(rows)


@cache
def _variant_wrong(exercise: Exercise, variant: Callable[..., Any]) -> tuple[bool, ...]:
    """On which cases a catalogued variant differs from the reference."""
    return tuple(
        _failure(exercise, outcome, expected) is not None
        for outcome, (_, expected) in zip(
            _variant_outcomes(exercise, variant), _prepared(exercise), strict=True
        )
    )


@cache
def _variant_outcomes(exercise: Exercise, variant: Callable[..., Any]) -> tuple[Outcome, ...]:
    rows = _prepared(exercise)
    with torch.inference_mode(False), torch.enable_grad():
        return tuple(call(variant, inputs, keyword=exercise.keyword_call) for inputs, _ in rows)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        text = f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
        if value.numel() > 1 and 0 in value.stride():
            text += " expanded"
        elif not value.is_contiguous():
            text += " non-contiguous"
        return text
    if isinstance(value, tuple | list) and all(isinstance(v, torch.Tensor) for v in value):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.dtype):
        return str(value)
    return repr(value)


def describe_inputs(inputs: dict[str, Any]) -> str:
    """``q (3, 4) float64, k (3, 4) float64`` or ``t_q=2, t_k=5``."""
    parts = []
    for name, value in inputs.items():
        sep = " " if isinstance(value, torch.Tensor) else "="
        parts.append(f"{name}{sep}{_describe(value)}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Failure:
    """What went wrong on one case: ``kind`` and a phrase that completes "On the case: ..."."""

    kind: str  # exception, not_implemented, timeout, not_run, mutated, or a Difference kind
    text: str
    short: str = ""


def _first_line(error: BaseException) -> str:
    try:
        return (str(error).strip().splitlines() or [""])[0][:200].rstrip(".")
    except Exception:
        return ""


def _failure(exercise: Exercise, outcome: Outcome | None, expected: Any) -> Failure | None:
    if outcome is None:
        return Failure("not_run", "not run (an earlier call hit the time limit)", "not run")
    if outcome.timed_out:
        if outcome.attempts > 1:
            return Failure(
                "timeout",
                f"your function did not return within {TIME_LIMIT_S:g} s, on either of two "
                "tries (the checker's limit per call; a first time-out is tried once more, in "
                "case that call was importing a library), so this case alone kept the check "
                f"waiting about {outcome.waited:g} s",
                f"did not return within {TIME_LIMIT_S:g} s (tried twice)",
            )
        return Failure("timeout", f"your function did not return within {TIME_LIMIT_S:g} s "
                                  "(the checker's limit per call)",
                       f"did not return within {TIME_LIMIT_S:g} s")  # fmt: skip
    if outcome.error is not None:
        error = outcome.error
        first = _first_line(error)
        text = f"your function raised {type(error).__name__}" + (f": {first}" if first else "")
        short = text.removeprefix("your function ")[:120]
        if outcome.bad_call:  # the call itself, not a line of the function's body
            text += f" (the checker calls {exercise.signature})"
        elif outcome.raised_at:
            text += f" (at {outcome.raised_at})"
        kind = "not_implemented" if isinstance(error, NotImplementedError) else "exception"
        return Failure(kind, text, short)
    if outcome.mutated is not None:
        return Failure(
            "mutated",
            f"your function changed its input {outcome.mutated} in place",
            f"changed {outcome.mutated} in place",
        )
    why = difference(expected, outcome.value, exercise.output_names)
    return Failure(why.kind, f"your result {why.text}", why.short) if why else None


def _ratios(expected: Any, got: Any) -> list[float] | None:
    if isinstance(expected, tuple):  # every output of a tuple answer, together
        if not isinstance(got, tuple | list) or len(got) != len(expected):
            return None
        parts = [_ratios(e, g) for e, g in zip(expected, got, strict=True)]
        return None if any(p is None for p in parts) else [r for p in parts for r in p]  # type: ignore[union-attr]
    if isinstance(expected, int):
        value, _ = as_count(got)
        r = ratio(value, expected) if value is not None and expected else None
        return None if r is None else [r]
    if (
        isinstance(expected, torch.Tensor)
        and isinstance(got, torch.Tensor)
        and got.shape == expected.shape
        and expected.is_floating_point()
        and got.is_floating_point()
    ):
        e, g = expected.double().flatten(), got.detach().double().flatten()
        big = e.abs() > 1e-3
        if big.any() and torch.isfinite(g).all():
            return (g[big] / e[big]).tolist()
        return []
    return None


def _digits(x: float) -> str:
    """x with enough significant digits that a value near 1 does not print as 1."""
    near = abs(abs(x) - 1)
    digits = 4 if near >= 1e-3 or near == 0 else 4 + math.ceil(-math.log10(near))
    return f"{x:.{min(digits, 15)}g}"


def _count_step(exercise: Exercise, outcomes: list[Outcome | None]) -> int | None:
    """For a count exercise: the one nonzero difference (reader - reference) every case has,
    if there is one (an off-by-one), else None."""
    steps = set()
    for (_, expected), outcome in zip(_prepared(exercise), outcomes, strict=True):
        if not isinstance(expected, int) or outcome is None or outcome.error is not None:
            return None
        if outcome.timed_out:
            return None
        value, _ = as_count(outcome.value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # a float count (float64 holds every count here exactly)
        if not isinstance(value, int):
            return None
        steps.add(value - expected)
    return steps.pop() if len(steps) == 1 and 0 not in steps else None


def _constant_factor(exercise: Exercise, outcomes: list[Outcome | None]) -> float | None:
    """The one ratio reader/reference shared by every case, if there is one (not 1)."""
    ratios: list[float] = []
    for (_, expected), outcome in zip(_prepared(exercise), outcomes, strict=True):
        if outcome is None or outcome.error is not None or outcome.timed_out:
            return None
        found = _ratios(expected, outcome.value)
        if found is None:
            return None
        ratios.extend(found)
    if not ratios or all(abs(r - 1) < 1e-3 for r in ratios):
        return None
    first = ratios[0]
    if abs(first) < 1e-15:
        return None  # all zeros: no factor to speak of
    return first if all(abs(r - first) <= 1e-3 * abs(first) for r in ratios) else None


def _failing_pairs(
    exercise: Exercise, outcomes: list[Outcome | None], failures: list[Failure | None]
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(reference, result, relative tolerance of the dtype) float tensor pairs of equal
    shape that differ, on every failing case that returned; empty when one of them has no
    such pair (another shape, a count)."""
    pairs = []
    for (_, expected), outcome, failure in zip(
        _prepared(exercise), outcomes, failures, strict=True
    ):
        if failure is None:
            continue
        if outcome is None or outcome.timed_out:
            return []
        if outcome.error is not None:
            continue  # a case that raises is its own symptom (listed per case)
        got = outcome.value
        es = expected if isinstance(expected, tuple) else (expected,)
        gs = tuple(got) if isinstance(got, tuple | list) else (got,)
        if len(es) != len(gs):
            return []
        found = [
            (e.double(), g.detach().double(), 2e-2 if e.dtype.itemsize <= 2 else 1e-4)
            for e, g in zip(es, gs, strict=True)
            if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)
            and e.is_floating_point() and g.is_floating_point() and e.shape == g.shape
            and e.numel() > 1 and torch.isfinite(e).all() and torch.isfinite(g).all()
            and difference(e, g) is not None
        ]  # fmt: skip
        if not found:
            return []
        pairs.extend(found)
    return pairs


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    return bool(torch.allclose(a, b, rtol=rtol, atol=rtol / 10))


def _structure(pairs: list[tuple[torch.Tensor, torch.Tensor, float]]) -> tuple[str, str] | None:
    """What every failing result has in common with its reference, when one relation holds
    on all of them: an observation about the numbers, never a named mistake."""
    if not pairs:
        return None
    if all(e.ndim >= 2 and e.shape[-1] == e.shape[-2] and _close(g, e.mT, r) for e, g, r in pairs):
        return "transposed", (
            "Your result is the reference's transpose (last two dims swapped) on every failing "
            "case: a .transpose(-2, -1) or .mT is on the wrong operand, or missing."
        )
    offsets = [((g - e).flatten(), r) for e, g, r in pairs]
    if all(_close(o, o[0].expand_as(o), r) for o, r in offsets):
        return "offset", (
            f"Your numbers are the reference's plus one constant on each failing case "
            f"({offsets[0][0][0].item():+.4g} on the first): a term added or subtracted once, "
            "is out of place (a shift the reference does not make, or one made twice)."
        )

    def factors(e: torch.Tensor, g: torch.Tensor, rtol: float) -> torch.Tensor | None:
        """One factor per row of the last dim (result = factor * reference), or None."""
        if e.ndim < 1 or e.shape[-1] < 2:
            return None
        e, g = e.reshape(-1, e.shape[-1]), g.reshape(-1, g.shape[-1])  # (rows, n)
        big = e.abs() > 1e-6 * e.abs().max().clamp_min(1e-300)
        out = []
        for row_e, row_g, keep in zip(e, g, big, strict=True):
            if not _close(row_g[~keep], torch.zeros_like(row_g[~keep]), rtol):
                return None
            if keep.any():
                r = row_g[keep] / row_e[keep]
                if not torch.allclose(r, r[:1].expand_as(r), rtol=rtol):
                    return None
                if not bool(torch.isfinite(r[0])) or abs(float(r[0])) < 1e-6:
                    return None  # a row of zeros or of inf is a lost row, not a normalisation
                out.append(r[0])
        return torch.stack(out) if out else None

    found = [(factors(e, g, r), r) for e, g, r in pairs]
    # Rows of one case with factors of their own: one factor per case that changes from case
    # to case is a wrong constant (a scale), not a missing normalisation.
    per_row = all(f is not None for f, _ in found) and any(
        not torch.allclose(f, f[:1].expand_as(f), rtol=r)  # type: ignore[union-attr]
        for f, r in found
    )
    if per_row:
        return "row_scale", (
            "Each row of your result is the reference's row times a factor of its own "
            "(the factors differ from row to row): a per-row normalisation (a softmax's "
            "sum, a row's length or count) is missing, doubled or taken over the wrong dim."
        )
    if all(_close(g.flatten().sort().values, e.flatten().sort().values, r) for e, g, r in pairs):
        return "rearranged", (
            "Your result holds exactly the reference's numbers, in other places: an axis "
            "order, a reshape that splits the wrong dim, or heads, groups or positions taken "
            "in the wrong order."
        )
    worst = max(((g - e).abs().max() / e.abs().max().clamp_min(1e-12)).item() for e, g, _ in pairs)
    if worst < 1e-2:
        return "precision", (
            f"Close, but not within tolerance: at most {worst:.1e} of the largest value off. "
            "Look for a step done in 16-bit precision, a constant rounded by hand (0.125 for "
            "1/8 is fine, 0.33 for 1/3 is not) or an epsilon added where the reference has none."
        )
    return None


def _summary(exercise: Exercise) -> str:
    kinds = [case.kind for case in exercise.cases]
    edges = "; ".join(
        c.label.removeprefix("edge case: ") for c in exercise.cases if c.kind == "edge"
    )
    return (
        f"It agrees with the reference on all {len(kinds)} cases: {kinds.count('hand')} "
        f"written out by hand, {kinds.count('random')} random, {kinds.count('edge')} edge "
        f"cases ({edges})."
    )


def _best_partial(
    exercise: Exercise, outcomes: list[Outcome | None], failing: list[int]
) -> tuple[Mistake, int] | None:
    """The catalogued mistake the reader's outputs equal on most failing cases (at least
    half of them, and at least one), counting only cases where that mistake is wrong too.

    A mistake is named only when the behaviour singles it out: either the reader is wrong
    wherever the mistake shows (the mistake plus another one), or the reader behaves like
    the mistake on every failing case (a mistake made on some inputs only, such as a scale
    dropped only when dk > 4). A mistake that shows on a case the reader gets right, and that
    the reader differs from on a failing case, is a coincidence, not the reader's
    (``kv_cache_bytes`` with the dtype ignored, 2 bytes always, is half the count on float32
    cases like ``keys_only``, twice it on float8, and right on bfloat16, where ``keys_only``
    is not). Raising the same error is weak evidence: when the mistake also shows where the
    reader is right, a match made of shared errors alone is a coincidence too (a float16 fill
    that overflows raises in the reader's function and in a catalogued variant alike)."""
    best: tuple[Mistake, int] | None = None
    ran = [i for i, o in enumerate(outcomes) if o is not None]
    failing = [i for i in failing if outcomes[i] is not None]
    wrong_here = set(failing)
    for mistake in exercise.mistakes:
        for variant in mistake.variants:
            theirs = _variant_outcomes(exercise, variant)
            wrong = _variant_wrong(exercise, variant)
            alike = [i for i in failing if wrong[i] and same_behaviour(theirs[i], outcomes[i])]
            k = len(alike)
            if any(wrong[i] and i not in wrong_here for i in ran) and (
                k < len(failing) or all(_weak(outcomes[i]) for i in alike)  # type: ignore[arg-type]
            ):
                continue  # shows where the reader is right, and differs where the reader fails
                # or agrees only by raising the same error or by returning nothing finite
                # (an overflow both hit, not a cause)
            if k and (best is None or k > best[1]):
                best = (mistake, k)
    if best is not None and 2 * best[1] >= len(failing):
        return best
    return None


def _no_finite(value: Any) -> bool:
    """Whether a returned value holds no finite number at all (all NaN or inf)."""
    if isinstance(value, torch.Tensor):
        return (
            value.is_floating_point()
            and value.numel() > 0
            and not bool(torch.isfinite(value.detach()).any())
        )
    if isinstance(value, tuple | list):
        return bool(value) and all(_no_finite(v) for v in value)
    number, _ = as_count(value)
    return isinstance(number, float) and not math.isfinite(number)


def _weak(outcome: Outcome) -> bool:
    """An outcome that says little about its cause when it matches a wrong variant's: an
    error, or a result with no finite number in it (any two such results look alike)."""
    return outcome.error is not None or _no_finite(outcome.value)


def _full_match(exercise: Exercise, outcomes: list[Outcome | None]) -> Mistake | None:
    """The first catalogued mistake whose variant behaves like the reader's function on every
    case; failing that, the first whose variant agrees with it wherever the variant gives
    numbers (a guarded version of the same mistake: NaN or inf in the variant, numbers in the
    reader's), when at least one case where the variant is wrong agrees exactly, with finite
    numbers (the evidence)."""
    if any(o is None for o in outcomes):
        return None
    for mistake in exercise.mistakes:
        for variant in mistake.variants:
            theirs = _variant_outcomes(exercise, variant)
            if all(map(same_behaviour, theirs, outcomes)):
                return mistake
    for mistake in exercise.mistakes:
        for variant in mistake.variants:
            theirs, wrong = _variant_outcomes(exercise, variant), _variant_wrong(exercise, variant)
            if all(
                same_behaviour(t, o, lenient=True) for t, o in zip(theirs, outcomes, strict=True)
            ) and any(
                wrong[i] and not _weak(o) and same_behaviour(theirs[i], o)  # type: ignore[arg-type]
                for i, o in enumerate(outcomes)
            ):
                return mistake
    return None


def _labels(exercise: Exercise, indices: list[int]) -> str:
    return "; ".join(exercise.cases[i].label for i in indices)


_VIEW_WORDS = ("view size is not compatible", "use .reshape", "not contiguous")


def _outputs_in_another_order(
    exercise: Exercise, outcomes: list[Outcome | None]
) -> tuple[str, ...] | None:
    """For a tuple answer: the order of the reference's output names in which the reader's
    outputs agree with the reference on every case, when it is not the contract's order."""
    names = exercise.output_names
    if not names or len(names) > 4:
        return None
    rows = list(zip(_prepared(exercise), outcomes, strict=True))
    if any(o is None or o.error is not None or o.timed_out for _, o in rows):
        return None
    if any(not isinstance(o.value, tuple | list) or len(o.value) != len(names) for _, o in rows):  # type: ignore[union-attr]
        return None
    for order in itertools.permutations(range(len(names))):
        if order == tuple(range(len(names))):
            continue
        if all(
            difference(expected[j], outcome.value[i]) is None  # type: ignore[union-attr]
            for (_, expected), outcome in rows
            for i, j in enumerate(order)
        ):
            return tuple(names[j] for j in order)
    return None


def _parts_right_everywhere(exercise: Exercise, outcomes: list[Outcome | None]) -> list[str]:
    """For a tuple answer: the outputs that agree with the reference on every case (empty
    when the answer is not a tuple of the right length on every case, or none agree)."""
    names = exercise.output_names
    if not names:
        return []
    right = set(names)
    for (_, expected), outcome in zip(_prepared(exercise), outcomes, strict=True):
        if outcome is None or outcome.error is not None or outcome.timed_out:
            return []
        got = outcome.value
        if not isinstance(got, tuple | list) or len(got) != len(names):
            return []
        for name, e, g in zip(names, expected, got, strict=True):
            if difference(e, g) is not None:
                right.discard(name)
    return [n for n in names if n in right]


def _kind_hint(
    exercise: Exercise,
    failures: list[Failure | None],
    factor: float | None,
    outcomes: list[Outcome | None] | None = None,
) -> tuple[str, str]:
    """A hint that fits how the function failed, and the name of that kind."""
    failing = [i for i, f in enumerate(failures) if f is not None]
    passing = [i for i, f in enumerate(failures) if f is None]
    kinds = {failures[i].kind for i in failing}  # type: ignore[union-attr]
    first = failures[failing[0]]
    assert first is not None
    if "timeout" in kinds:
        hung = [i for i in failing if failures[i].kind == "timeout"]  # type: ignore[union-attr]
        twice = outcomes is not None and any(
            outcomes[i] is not None and outcomes[i].attempts > 1  # type: ignore[union-attr]
            for i in hung
        )
        return "timeout", (
            f"Your function did not return within {TIME_LIMIT_S:g} s on the "
            f"{_labels(exercise, hung)}"
            f"{' (tried twice, since a first call may be importing)' if twice else ''}. "
            "Look for a loop whose condition never changes, or a Python loop over a number "
            "that grows much faster than the inputs; every case is small."
        )
    if "mutated" in kinds:
        return "mutated", (
            "Work on new tensors (x = x / 2, not x /= 2; torch.cat, not writing into a slice "
            "of an input) so the caller's data stays as it was."
        )
    if kinds <= {"not_implemented", "exception"} and "not_implemented" in kinds:
        cases = [i for i in failing if failures[i].kind == "not_implemented"]  # type: ignore[union-attr]
        return "not_implemented", (
            f"Some cases still reach `raise NotImplementedError` ({_labels(exercise, cases)}): "
            "a branch of your function is not written yet."
        )
    raised = [i for i in failing if failures[i].kind == "exception"]  # type: ignore[union-attr]
    if raised:  # an error comes first: the other symptoms may be the same bug's
        text = failures[raised[0]].text  # type: ignore[union-attr]
        if any(word in text for word in _VIEW_WORDS):
            return "view", (
                "view() needs memory laid out to match; the checker also passes non-contiguous "
                "inputs (the output of split_heads, a slice of a fused projection). Use "
                "reshape(), or call .contiguous() first."
            )
        if "the checker calls" in text:
            return "signature", f"Define your function with the signature {exercise.signature}."
        outcome = outcomes[raised[0]] if outcomes else None
        error = outcome.error if outcome is not None else None
        at = (  # the line number only: the message above quotes the line
            f" (at {outcome.raised_at.split(':', 1)[0]})"
            if outcome is not None and outcome.raised_at
            else ""
        )
        why = ""
        if isinstance(error, TypeError):
            why = (
                f" The TypeError comes from inside your function{at}, not from its "
                f"signature (which fits {exercise.signature}): a call on that line "
                "got arguments it does not take, such as a dim left out (softmax(x) needs "
                "dim=-1), a float where an int is needed (d / h is a float, d // h an int) or "
                "a helper called with too few arguments."
            )
        elif at:
            why = f" It was raised{at}."
        short = failures[raised[0]].short  # type: ignore[union-attr]
        others = [i for i in failing if i not in raised]
        if others:
            shape = _structure(_failing_pairs(exercise, outcomes, failures)) if outcomes else None
            seen = f" On the cases that return: {shape[1]}" if shape is not None else ""
            return "exception", (
                f"It raises on {len(raised)} case{'s' if len(raised) > 1 else ''} "
                f"({_labels(exercise, raised)}: {short}) and returns wrong results on "
                f"{len(others)} other{'s' if len(others) > 1 else ''} "
                f"({_labels(exercise, others)})."
                f"{why} Fix the error first: the wrong numbers may come from the same step."
                f"{seen}"
            )
        if passing:
            return "some_cases", (
                f"It raises only on these cases: {_labels(exercise, raised)}.{why} Your "
                "function works elsewhere, so the cause is what these inputs have in common; "
                f"describe({exercise.name!r}) says what the contract asks there."
            )
        return "exception", (f"{why.strip()} " if why else "") + (
            "Run your function on the hand case yourself and read the traceback; "
            f"describe({exercise.name!r}) gives the shapes of every input."
        )
    order = _outputs_in_another_order(exercise, outcomes) if outcomes else None
    if order is not None:
        return "order", (
            f"Every output is right, in the wrong order: you return ({', '.join(order)}); the "
            f"contract is ({', '.join(exercise.output_names)})."
        )
    if "shape" in kinds:
        shape = next(f for f in failures if f is not None and f.kind == "shape")
        return "shape", (
            f"The output's shape is wrong ({shape.short} on the first such case). Print the "
            "shape after every step; the contract, "
            f"describe({exercise.name!r}), gives the shape the result must have."
        )
    if "dtype" in kinds and all(
        e.dtype == torch.bool for e in _expected_tensors(exercise) if e is not None
    ):
        return "dtype", (
            "The contract asks for a torch.bool tensor (True = may attend), whatever the "
            "inputs are: build it from a comparison (j <= i, arange < length) or end with "
            ".bool(); 0/1 integers or floats are another convention."
        )
    if "dtype" in kinds:
        return "dtype", (
            "The dtype is part of the contract: return the dtype the reference has (that of "
            "the input tensors; see describe()). Compute in float64 if you like, then cast "
            "back with .to(x.dtype)."
        )
    if "type" in kinds:
        return "type", (
            f"Return what {exercise.signature} promises (describe({exercise.name!r})): a "
            "tensor, a tuple of tensors or a number, not a list, None or a string."
        )
    where = f"{len(failing)} case{'s' if len(failing) > 1 else ''} ({_labels(exercise, failing)})"
    are = "s are" if len(failing) > 1 else " is"
    if kinds <= {"int32", "uint32"}:
        return "overflow", (
            f"Your count is the exact one wrapped around 32 bits on {where}, whose count{are} too "
            "large for 32 bits, and right on every other case: it was computed in a 32-bit integer "
            "(a torch.int32 tensor, numpy.int32, or NumPy's default integer on Windows), which "
            "overflows silently above 2,147,483,647. Multiply Python ints (or int64) and "
            "return an int."
        )
    if kinds == {"float32"}:
        return "float32", (
            f"Your count is the exact one rounded to float32 on {where}, whose count{are} more "
            "than float32 holds exactly, and right on every other case: the arithmetic ran in "
            "float32 (a torch.tensor(2.0) in the product, a float32 array), which holds whole "
            "numbers exactly only up to 2**24 = 16,777,216. Multiply Python ints and return an "
            "int."
        )
    if kinds & {"nan", "inf"} and not kinds <= {"nan", "inf"}:
        # Finite but wrong numbers on some cases, non-finite ones on others: the formula is
        # off, and the NaN or inf is one more symptom of it, not the cause (a merge with a
        # wrong running max gives wrong numbers everywhere and inf where a side is empty).
        bad = [i for i in failing if failures[i].kind not in ("nan", "inf")]  # type: ignore[union-attr]
        odd = [i for i in failing if failures[i].kind in ("nan", "inf")]  # type: ignore[union-attr]
        return "values", (
            f"The numbers are wrong on {len(bad)} cases whose inputs are finite (the first: "
            f"{exercise.cases[bad[0]].label}), so the formula itself is off, not only its "
            "handling of infinities; the non-finite entries on the other "
            f"{len(odd)} ({_labels(exercise, odd)}) may go with it. {exercise.hint}"
        )
    if kinds <= {"nan", "inf"}:
        return "nan", (
            "Non-finite numbers appear where the reference has numbers. Usual causes: exp() "
            "of a large score (inf above about 88 in float32, 11 in float16), 0 / 0 on an "
            "empty or fully masked row, -inf - (-inf). They appear on: "
            f"{_labels(exercise, failing)}."
        )
    sixteen = [i for i in range(len(failures)) if _sixteen_bit(exercise, i)]
    if (
        kinds == {"value"}
        and set(failing) <= set(sixteen)
        and any(i not in sixteen for i in passing)
    ):
        return "half_precision", (
            "It is right on every float32 and float64 case and wrong only on the 16-bit ones "
            f"({_labels(exercise, failing)}): a step runs in float16 or bfloat16 where the "
            "reference keeps float32 or wider. "
            + (
                exercise.half_hint
                or "Compute that step in float32 and cast the result back to the inputs' dtype."
            )
        )
    right_parts = _parts_right_everywhere(exercise, outcomes) if outcomes else []
    if right_parts:
        wrong_parts = [n for n in exercise.output_names if n not in right_parts]
        return "some_outputs", (
            f"Only {' and '.join(wrong_parts)} {'is' if len(wrong_parts) == 1 else 'are'} "
            f"wrong: {' and '.join(right_parts)} agree{'s' if len(right_parts) == 1 else ''} "
            "with the reference on every case, so look at the step that makes "
            f"{' and '.join(wrong_parts)} alone. {exercise.hint}"
        )
    step = _count_step(exercise, outcomes) if outcomes else None
    if step is not None:
        return "count_offset", (
            f"On every case your count is the reference's {step:+d}: the shape of the formula "
            "is right and a term is added or dropped once (a fencepost: counting positions "
            f"or boundaries instead of items, a range that starts at 1). {exercise.hint}"
        )
    if factor is not None:
        if abs(factor - 1) < 1e-2:  # print enough digits that it does not read as 1
            return "factor", (
                f"On every case your numbers are the reference's times {_digits(factor)}, "
                f"{abs(factor - 1):.1e} off: a constant rounded by hand or an epsilon added "
                "where the reference has none, not a missing factor."
            )
        if abs(factor + 1) < 1e-9:
            return "factor", (
                "On every case your numbers are the reference's with the opposite sign: one "
                "sign is flipped (a difference taken the other way round, a minus dropped or "
                "doubled)."
            )
        return "factor", (
            f"On every case your numbers are {_digits(factor)} times the reference's: one "
            "factor is missing, extra or inverted. Which part of the formula is worth "
            f"{_digits(factor)} (or {_digits(1 / factor)}) on these cases?"
        )
    shape = _structure(_failing_pairs(exercise, outcomes or [], failures)) if outcomes else None
    if shape is not None:
        also = f" It is right on {_labels(exercise, passing)}." if passing else ""
        return shape[0], f"{shape[1]}{also} {exercise.hint}"
    if passing and len(passing) < len(failing):
        return "some_cases", (
            f"It is right only on {_labels(exercise, passing)}, and wrong on the other "
            f"{len(failing)} cases. What does {'that case' if len(passing) == 1 else 'each'} "
            "have that hides the mistake (one key, equal sizes, a zero, for instance)? "
            f"{exercise.hint}"
        )
    if passing:
        return "some_cases", (
            f"It is right on {len(passing)} of {len(failures)} cases and wrong only on: "
            f"{_labels(exercise, failing)}. What do these cases have that the others lack? "
            f"{exercise.hint}"
        )
    return "generic", exercise.hint


def _sixteen_bit(exercise: Exercise, i: int) -> bool:
    """Whether case ``i``'s answer holds a float16 or bfloat16 tensor."""
    _, expected = _prepared(exercise)[i]
    return any(
        isinstance(e, torch.Tensor) and e.dtype in (torch.float16, torch.bfloat16)
        for e in (expected if isinstance(expected, tuple) else (expected,))
    )


def _expected_tensors(exercise: Exercise) -> list[torch.Tensor | None]:
    """The reference's tensor outputs over the cases (tuples flattened)."""
    out: list[torch.Tensor | None] = []
    for _, expected in _prepared(exercise):
        for e in expected if isinstance(expected, tuple) else (expected,):
            out.append(e if isinstance(e, torch.Tensor) else None)
    return out


def _case_lines(exercise: Exercise, failures: list[Failure | None]) -> tuple[str, ...]:
    lines = []
    for case, failure in zip(exercise.cases, failures, strict=True):
        if failure is None:
            lines.append(f"✓ {case.label}")
        elif failure.kind == "not_run":
            lines.append(f"· {case.label}: {failure.short}")
        else:
            lines.append(f"✗ {case.label}: {failure.short}")
    return tuple(lines)


def _printed_note(exercise: Exercise, outcomes: list[Outcome | None]) -> tuple[str, int]:
    """What the function printed during the check (captured, so that it does not flood the
    notebook): a note quoting the first lines of the first case that printed, and the number
    of lines in all; ``("", 0)`` when it printed nothing."""
    total = sum(o.printed_lines for o in outcomes if o is not None)
    first = next((i for i, o in enumerate(outcomes) if o is not None and o.printed), None)
    if not total or first is None:
        return "", total
    kept = outcomes[first].printed  # type: ignore[union-attr]
    lines = "line" if total == 1 else "lines"
    note = (
        f"Your function printed {total:,} {lines} during the check (kept out of the notebook), "
        f"starting on the {exercise.cases[first].label}:"
    )
    note += "".join(f"\n    | {line}" for line in kept)
    if total > len(kept):
        note += f"\n    ... {total - len(kept):,} more {lines} printed by your function"
    return note, total


def _with_note(result: Result, note: str, printed: int) -> Result:
    """``result`` with the note on printed output, placed before the hint (``hint()`` reads
    the text after the last "Hint: ")."""
    if not note:
        return result
    head, sep, tail = result.message.rpartition("\nHint: ")
    message = f"{head}\n{note}{sep}{tail}" if sep else f"{result.message}\n{note}"
    return replace(result, message=message, printed=printed)


def run(exercise: Exercise, fn: Callable[..., Any]) -> Result:
    """Check ``fn`` against ``exercise``; see :func:`attnbook.practice.check`. The global
    autograd mode and every attribute of the namespaces :func:`call` guards (``torch``,
    ``torch.Tensor``, ``torch.special``, ``torch.linalg``, ``torch.fft``,
    ``torch.nn.functional``, ``torch.testing``, ``math``) are put back afterwards, whatever
    ``fn`` did to them, and again before any catalogued variant runs (a call stopped by the
    time limit in a worker thread may go on patching after its own restore)."""
    grad, saved = torch.is_grad_enabled(), {n: getattr(torch, n) for n in _COMPARISONS}
    namespaces = _snapshot()
    try:
        outcomes: list[Outcome | None] = []
        result = _run(exercise, fn, outcomes, namespaces)
        return _with_note(result, *_printed_note(exercise, outcomes))
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # never propagate: say what could not be compared
        return Result(
            exercise.name, False, None,
            f"The checker could not compare your function's output ({type(error).__name__}: "
            f"{_first_line(error)}). Return what {exercise.signature} promises "
            f"(describe({exercise.name!r})).",
            "wrong", kind="unreadable",
        )  # fmt: skip
    finally:
        torch.set_grad_enabled(grad)
        for name, function in saved.items():
            setattr(torch, name, function)
        _restore(namespaces)


_COMPARISONS = ("equal", "isclose", "allclose")


def _over_budget(exercise: Exercise, fn, prepared, outcomes: list[Outcome | None]) -> Result:
    """The whole check ran past :data:`TOTAL_LIMIT_S`: say what ran, and what it gave."""
    failures = [
        None if o is None or o.timed_out else _failure(exercise, o, expected)
        for (_, expected), o in zip(prepared, outcomes, strict=True)
    ]
    done = [i for i, o in enumerate(outcomes) if o is not None and not o.timed_out]
    wrong = [i for i in done if failures[i] is not None]
    lines = tuple(
        f"· {case.label}: not finished within the check's {TOTAL_LIMIT_S:g} s"
        if i not in done
        else (f"✓ {case.label}" if failures[i] is None else f"✗ {case.label}: {failures[i].short}")
        for i, case in enumerate(exercise.cases)
    )
    so_far = (
        f"{len(wrong)} of them wrong (first: {exercise.cases[wrong[0]].label}: "
        f"{failures[wrong[0]].text})"
        if wrong
        else "all of them right"
    )
    text = (
        f"The check stops {TOTAL_LIMIT_S:g} s after the first case (a first call may spend "
        f"longer importing; {TIME_LIMIT_S:g} s per call): {len(done)} of {len(prepared)} "
        f"cases finished in that time, {so_far}.\n"
        + "\n".join(f"  {line}" for line in lines)
        + "\nHint: every case is small (a few dozen numbers); a correct function answers each "
        "in well under a second. Look for a sleep, a Python loop over a large range, or work "
        "repeated for every element."
    )
    return Result(exercise.name, False, None, text, "wrong", lines, kind="timeout")


def _run(
    exercise: Exercise,
    fn: Callable[..., Any],
    outcomes: list[Outcome | None],
    namespaces: list[tuple[Any, dict[str, Any]]] | None = None,
) -> Result:
    """The check; ``outcomes`` (empty) is filled with the reader's outcome of each case.
    ``namespaces`` (a :func:`_snapshot` taken before) is put back once the reader's calls are
    done, before a catalogued variant runs or a verdict is computed."""
    name = exercise.name
    if not callable(fn):
        return Result(
            name, False, None,
            f"check needs your function itself, got a value of type {type(fn).__name__}. Pass it "
            f"without calling it: check({name!r}, my_function).",
            "wrong", kind="type",
        )  # fmt: skip
    prepared = _prepared(exercise)
    retried, budget_spent = False, False
    start = math.inf  # set once the first case has run: a first call may spend it importing
    for inputs, _ in prepared:
        if outcomes and (outcomes[-1] is None or outcomes[-1].timed_out):
            outcomes.append(None)  # a function that hung once would hang again: stop here
            continue
        left = TOTAL_LIMIT_S - (time.monotonic() - start)
        if left <= 0:
            budget_spent = True
            outcomes.append(None)
            continue
        outcome = call(fn, inputs, keyword=exercise.keyword_call, limit=min(TIME_LIMIT_S, left))
        left = TOTAL_LIMIT_S - (time.monotonic() - start)
        if outcome.timed_out and not retried and left > 0:  # a first use may be importing
            retried = True
            again = call(fn, inputs, keyword=exercise.keyword_call, limit=min(TIME_LIMIT_S, left))
            outcome = replace(
                again,
                attempts=2,
                waited=outcome.waited + again.waited,
                printed=outcome.printed or again.printed,
                printed_lines=outcome.printed_lines + again.printed_lines,
            )
        if outcome.timed_out and TOTAL_LIMIT_S - (time.monotonic() - start) <= 0.05:
            budget_spent = True  # stopped by the whole check's limit, not by the per-call one
        outcomes.append(outcome)
        start = min(start, time.monotonic())
    if namespaces is not None:
        _restore(namespaces)
    if budget_spent:
        return _over_budget(exercise, fn, prepared, outcomes)
    if all(o is not None and isinstance(o.error, NotImplementedError) for o in outcomes):
        return Result(
            name, True, None,
            "Not attempted yet: replace `raise NotImplementedError` with your code and run "
            "the cell again. (This counts as a pass only so that the chapter still runs.)",
            "not attempted", kind="stub",
        )  # fmt: skip

    failures = [
        _failure(exercise, outcome, expected)
        for (_, expected), outcome in zip(prepared, outcomes, strict=True)
    ]
    lines = _case_lines(exercise, failures)
    failing = [i for i, f in enumerate(failures) if f is not None]
    if not failing:
        return Result(name, True, None, f"Your {exercise.signature} is right. {_summary(exercise)}",
                      "correct", lines)  # fmt: skip

    i = failing[0]
    case, why = exercise.cases[i], failures[i]
    assert why is not None
    where = f"On the {case.label} ({describe_inputs(prepared[i][0])}): {why.text}."
    not_run = sum(1 for f in failures if f is not None and f.kind == "not_run")
    count = f"{len(failing) - not_run} of {len(prepared)} cases fail"
    count += f" and {not_run} were not run" if not_run else ""
    listing = f"{count}:\n" + "\n".join(f"  {line}" for line in lines)
    mistake = _full_match(exercise, outcomes)
    if mistake is not None:
        return Result(
            name, False, mistake.id,
            f"{where}\nThis is a known mistake: {mistake.description}\n{listing}\n"
            f"Hint: {mistake.hint}",
            "known mistake", lines, kind="mistake",
        )  # fmt: skip
    partial = _best_partial(exercise, outcomes, failing)
    factor = _constant_factor(exercise, outcomes)
    if partial is not None:
        mistake, k = partial
        tail = "and differs from it elsewhere" if k < len(failing) else "but is right elsewhere"
        # The catalogue's text is quoted as written (never re-cased: "K and V ..." stays so).
        text = (
            f"{where}\nIt matches the known mistake {mistake.id} on {k} of the {len(failing)} "
            f"failing cases {tail}. That mistake: {mistake.description}\n{listing}\n"
            f"Hint: {mistake.hint}"
        )
        return Result(name, False, None, text, "wrong", lines, kind="partial")
    kind, hint = _kind_hint(exercise, failures, factor, outcomes)
    extra = ""
    if factor is not None:
        extra = f"\nOn every case your numbers are {factor:.4g} times the reference's."
    return Result(
        name, False, None, f"{where}{extra}\n{listing}\nHint: {hint}", "wrong", lines, kind=kind
    )


__all__ = ["TIME_LIMIT_S", "TOTAL_LIMIT_S", "describe_inputs", "run"]
