"""The checking loop: run the reader's function on every case, then name the mistake.

Order of questions: is it a stub (raises ``NotImplementedError`` on the first case)? Does it
agree with the reference everywhere? If not, does it behave exactly like one of the
catalogued wrong variants on every case? The message names the first case that fails.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from attnbook.practice._compare import Outcome, call, difference, same_behaviour
from attnbook.practice._exercise import Exercise, Mistake
from attnbook.practice._result import Result


@cache
def _prepared(exercise: Exercise) -> tuple[tuple[dict[str, Any], Any], ...]:
    """Inputs and reference output of every case, computed once per session."""
    rows = []
    for case in exercise.cases:
        inputs = case.make()
        expected = call(exercise.reference, inputs, keyword=exercise.keyword_call)
        if expected.error is not None:  # a bug in the book, not in the reader's code
            raise RuntimeError(f"{exercise.name}: reference fails on {case.label}") from (
                expected.error
            )
        rows.append((inputs, expected.value))
    return tuple(rows)


@cache
def _variant_outcomes(exercise: Exercise, variant: Callable[..., Any]) -> tuple[Outcome, ...]:
    return tuple(
        call(variant, inputs, keyword=exercise.keyword_call) for inputs, _ in _prepared(exercise)
    )


def _matches(exercise: Exercise, mistake: Mistake, outcomes: list[Outcome]) -> bool:
    """The reader's function behaves like one way of making ``mistake`` on every case."""
    return any(
        all(map(same_behaviour, _variant_outcomes(exercise, variant), outcomes))
        for variant in mistake.variants
    )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
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


def _failure(exercise: Exercise, outcome: Outcome, expected: Any) -> str | None:
    if outcome.error is not None:
        error = outcome.error
        first = (str(error).strip().splitlines() or [""])[0][:200]
        text = f"your function raised {type(error).__name__}" + (f": {first}" if first else "")
        if isinstance(error, TypeError) and "argument" in first:
            text += f" (the checker calls {exercise.signature})"
        return text
    if outcome.mutated is not None:
        return (
            f"your function changed its input {outcome.mutated} in place; work on new tensors "
            f"(x = x / 2, not x /= 2) so the caller's data stays as it was"
        )
    why = difference(expected, outcome.value, exercise.output_names)
    return f"your result {why}" if why else None


def _constant_factor(exercise: Exercise, outcomes: list[Outcome]) -> float | None:
    """The one ratio reader/reference shared by every case that fails, if there is one."""
    ratios = []
    for (_, expected), outcome in zip(_prepared(exercise), outcomes, strict=True):
        got = outcome.value
        if outcome.error is not None or got is None:
            return None
        if isinstance(expected, int) and isinstance(got, int | float) and expected:
            ratios.append(got / expected)
        elif (
            isinstance(expected, torch.Tensor)
            and isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and expected.is_floating_point()
            and got.is_floating_point()
        ):
            e, g = expected.double().flatten(), got.detach().double().flatten()
            big = e.abs() > 1e-3
            if big.any() and torch.isfinite(g).all():
                ratios.extend((g[big] / e[big]).tolist())
    if not ratios or all(abs(r - 1) < 1e-3 for r in ratios):
        return None
    first = ratios[0]
    return first if all(abs(r - first) <= 1e-3 * abs(first) for r in ratios) else None


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


def run(exercise: Exercise, fn: Callable[..., Any]) -> Result:
    """Check ``fn`` against ``exercise``; see :func:`attnbook.practice.check`."""
    name = exercise.name
    if not callable(fn):
        return Result(
            name, False, None,
            f"check needs your function itself, got a value of type {type(fn).__name__}. Pass it "
            f"without calling it: check({name!r}, my_function).",
            "wrong",
        )  # fmt: skip
    prepared = _prepared(exercise)
    outcomes: list[Outcome] = []
    for inputs, _ in prepared:
        outcome = call(fn, inputs, keyword=exercise.keyword_call)
        if not outcomes and isinstance(outcome.error, NotImplementedError):
            return Result(
                name, True, None,
                "Not attempted yet: replace `raise NotImplementedError` with your code and run "
                "the cell again. (This counts as a pass only so that the chapter still runs.)",
                "not attempted",
            )  # fmt: skip
        outcomes.append(outcome)

    failures = [
        (i, why)
        for i, ((_, expected), outcome) in enumerate(zip(prepared, outcomes, strict=True))
        if (why := _failure(exercise, outcome, expected)) is not None
    ]
    if not failures:
        return Result(name, True, None, f"Your {exercise.signature} is right. {_summary(exercise)}",
                      "correct")  # fmt: skip

    i, why = failures[0]
    case = exercise.cases[i]
    where = f"On the {case.label} ({describe_inputs(prepared[i][0])}): {why}."
    for mistake in exercise.mistakes:
        if _matches(exercise, mistake, outcomes):
            return Result(
                name, False, mistake.id,
                f"{where}\nThis is a known mistake: {mistake.description}\n"
                f"Hint: {mistake.hint}",
                "known mistake",
            )  # fmt: skip
    count = f"{len(failures)} of {len(prepared)} cases fail."
    factor = _constant_factor(exercise, outcomes)
    if factor is not None:
        count += f" On every case your numbers are {factor:.4g} times the reference's."
    return Result(name, False, None, f"{where}\n{count}\nHint: {exercise.hint}", "wrong")
