"""Practice: exercises whose checker names the reader's mistake.

Write the function an exercise asks for, then ``check(name, fn)``. The checker runs ``fn``
next to the book's reference on hand-made, random and edge cases (no keys, masked rows,
grouped heads, odd offsets, float16 where it matters) and returns a :class:`Result`. When
``fn`` is wrong, the checker compares its outputs with those of every catalogued wrong
variant of the exercise (the classic mistakes: a missing √dk, a softmax along the wrong axis,
a flipped mask, a merge without the rescale, ...) and, if one matches on every case, names it.
Mistakes are recognised by behaviour only: the checker never reads the reader's source.

A function that raises ``NotImplementedError`` on every case is reported as *not attempted*:
``check`` returns quietly (``result.passed`` is True), so a chapter with unsolved exercises
still runs top to bottom, but ``bool(result)`` is False. One that raises it on some cases only
is a partly written function and fails. ``bool(result)`` is True only when the function is
correct, so ``assert check(name, fn)`` fails on a stub and on a wrong answer. The function
runs with uninitialised memory filled with NaN (``torch.empty`` never passes by chance), and
after each call the checker puts back the default dtype, the grad mode and every attribute the
call replaced or deleted in ``torch``, ``torch.Tensor`` (dunder methods such as ``__matmul__``
included; one set over a method of its C base class is deleted), ``torch.special``,
``torch.linalg``, ``torch.fft``, ``torch.nn.functional``, ``torch.testing`` and ``math``, so a
patched function never survives ``check`` and never takes part in grading (the reference's
outputs are computed before the first call, the catalogued variants' after the restore).

``check`` never raises for anything ``fn`` does (``SystemExit`` included), stops a call
that runs past :data:`TIME_LIMIT_S` seconds (the first call that does is tried once more, in
case it was importing a library, and the verdict says so: a function that never returns is
stopped after two limits) and a whole check :data:`TOTAL_LIMIT_S` seconds after its first
case (the verdict then says how many cases finished); only ``KeyboardInterrupt`` (Jupyter's
interrupt button) is passed on, so that a reader can always stop a cell. What ``fn`` prints
is kept out of the notebook; the verdict quotes its first lines and says how many it printed.
What a function may return (dtypes, tuples, numbers) follows one set of rules, in
:mod:`attnbook.practice._compare` and in every ``describe(name)``; a count that is the exact
one wrapped around 32 bits or rounded to float32 is told so.

On request: ``describe(name)`` gives one exercise's contract and the rules its checker
applies, ``hint(name)`` a nudge, ``solution(name)`` a worked solution, and ``progress()``
the exercises passed in this kernel.

Exercises (signatures use the shape legend of :mod:`attnbook`; details in each module):

==================  ==================================================================  =====
name                signature                                                           ch.
==================  ==================================================================  =====
``attention``       ``attention(q, k, v)``: ``softmax(q k^T / sqrt(dk)) v``             1
``scaled_scores``   ``scaled_scores(q, k)``: ``q k^T / sqrt(dk)``                        2
``split_heads``     ``split_heads(x, heads)``: ``(B, T, d) -> (B, H, T, d/H)``           3
``merge_heads``     ``merge_heads(x)``: ``(B, H, T, dh) -> (B, T, H*dh)``                3
``kv_cache_bytes``  ``kv_cache_bytes(*, batch, layers, positions, heads, kv_heads,``     3
                    ``head_dim, dtype)`` -> int
``causal_mask``     ``causal_mask(t_q, t_k)`` -> bool ``(Tq, Tk)``, queries newest       4
``padding_mask``    ``padding_mask(lengths, t)`` -> bool ``(B, 1, 1, T)``                4
``apply_rope``      ``apply_rope(x, positions)``, rotate-half layout, base 10000         5
``attention_flops`` ``attention_flops(*, t_q, t_k, heads, d_k, d_v)`` -> int             7
``merge``           ``merge(a, b)`` on online-softmax states ``(m, l, u)``               8
==================  ==================================================================  =====

Exercises added for issue 30, each with its own catalogue of mistakes (a slip of a step that
several exercises share, such as a missing √dk, a softmax over the wrong axis or over raw
scores, or RoPE angles in 16 bits, has the same id in each of them):

* ``gqa_attention(q, k, v)``: grouped-query attention, ``Hq`` a multiple of ``Hkv`` (ch. 3);
* ``masked_attention(q, k, v, mask)``: True = may attend, a fully masked row reads 0 (ch. 4);
* ``attention_backward(q, k, v, out, lse, d_out)`` -> ``(d_q, d_k, d_v)`` from the saved
  output and log-sum-exp (ch. 8);
* ``decode_step(q, k, v, cache_k, cache_v)`` -> ``(out, cache_k, cache_v)``: RoPE at the new
  token's position, append, read (ch. 13);
* ``induction_score(weights, lengths)``: the prefix-matching score of chapter 14.

``EXERCISES`` lists the names and ``MISTAKES[name]`` the catalogued ``(id, description)``
pairs of one exercise.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from attnbook.practice._attention import ATTENTION, SCALED_SCORES
from attnbook.practice._capstones import ATTENTION_BACKWARD, INDUCTION_SCORE
from attnbook.practice._compare import TIME_LIMIT_S, TOTAL_LIMIT_S
from attnbook.practice._costs import ATTENTION_FLOPS, KV_CACHE_BYTES
from attnbook.practice._exercise import Exercise
from attnbook.practice._heads import MERGE_HEADS, SPLIT_HEADS
from attnbook.practice._masked import DECODE_STEP, GQA_ATTENTION, MASKED_ATTENTION
from attnbook.practice._masks import CAUSAL_MASK, PADDING_MASK
from attnbook.practice._online_softmax import MERGE
from attnbook.practice._result import Result
from attnbook.practice._rope import APPLY_ROPE
from attnbook.practice._runner import run

__all__ = [
    "EXERCISES",
    "MISTAKES",
    "TIME_LIMIT_S",
    "TOTAL_LIMIT_S",
    "Result",
    "Text",
    "check",
    "describe",
    "hint",
    "progress",
    "solution",
]

_REGISTRY: dict[str, Exercise] = {
    ex.name: ex
    for ex in (
        ATTENTION,
        SCALED_SCORES,
        SPLIT_HEADS,
        MERGE_HEADS,
        KV_CACHE_BYTES,
        GQA_ATTENTION,
        CAUSAL_MASK,
        PADDING_MASK,
        MASKED_ATTENTION,
        APPLY_ROPE,
        ATTENTION_FLOPS,
        MERGE,
        ATTENTION_BACKWARD,
        DECODE_STEP,
        INDUCTION_SCORE,
    )
}

EXERCISES: tuple[str, ...] = tuple(_REGISTRY)
"""Names of the exercises, in chapter order."""

MISTAKES: dict[str, tuple[tuple[str, str], ...]] = {
    name: tuple((m.id, m.description) for m in ex.mistakes) for name, ex in _REGISTRY.items()
}
"""For each exercise, its catalogued mistakes as ``(id, description)`` pairs."""


class Text(str):
    """A ``str`` that a notebook shows as plain text (no quotes, line breaks kept)."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _exercise(name: object) -> Exercise:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"name must be one of {', '.join(EXERCISES)}; got {name!r}")
    return _REGISTRY[name]


def _contract(exercise: Exercise) -> str:
    """The block of the exercise's module docstring that documents this one function."""
    doc = inspect.cleandoc(sys.modules[exercise.reference.__module__].__doc__ or "")
    lines = doc.splitlines()
    head = f"``{exercise.name}("
    for i, line in enumerate(lines):
        if line.startswith(head):
            body = []
            for later in lines[i + 1 :]:
                if later and not later.startswith(" "):
                    break
                body.append(later)
            return textwrap.dedent("\n".join(body)).strip()
    return ""


def _output_rule(exercise: Exercise) -> str:
    if exercise.keyword_call:
        return (
            "It is called with keyword arguments. A count may be an int, a float, a NumPy "
            "scalar or a 0-d tensor, and must equal the exact count (not a bool, not a "
            "tensor with a dimension); some counts are beyond 2**31, where 32-bit integers "
            "overflow and float32 rounds."
        )
    rule = (
        "A tensor result must have the reference's shape and dtype; a view or a "
        "non-contiguous result is fine."
    )
    if exercise.output_names:
        rule += (
            f" The result is a tuple ({', '.join(exercise.output_names)}); a list or a "
            "namedtuple is accepted."
        )
    return rule + " Inputs must not be changed in place."


def describe(name: str) -> Text:
    """The contract of exercise ``name``'s function: its signature, shapes, dtypes and edge
    cases, and the rules its checker applies (what may be returned, the time limit)."""
    exercise = _exercise(name)
    labels = "\n".join(f"  {case.label}" for case in exercise.cases)
    return Text(
        f"{exercise.signature}\n\n{_contract(exercise)}\n\n"
        f"Rules: {_output_rule(exercise)} Each call may take at most {TIME_LIMIT_S:g} s (the "
        "first call that runs out is tried once more, in case it was importing a library), "
        f"the cases after the first {TOTAL_LIMIT_S:g} s together. What it prints is kept out "
        "of the notebook; the verdict quotes the first lines.\n"
        f"The checker runs it on {len(exercise.cases)} cases:\n{labels}\n"
        f"Catalogued mistakes: {len(exercise.mistakes)} (MISTAKES[{name!r}]). "
        f"hint({name!r}) and solution({name!r}) on request."
    )


_LAST: dict[str, Result] = {}
_PASSED_BY: dict[str, str] = {}


def hint(name: str) -> Text:
    """A nudge for exercise ``name`` that does not give the code away; after a failed check in
    this kernel, the hint that fits that failure comes first."""
    exercise = _exercise(name)
    text = f"Hint for {exercise.signature}: {exercise.hint}"
    last = _LAST.get(name)
    if last is not None and not last and last.status != "not attempted":
        fitted = last.message.rsplit("\nHint: ", 1)
        if len(fitted) == 2 and fitted[1] != exercise.hint:
            text = f"Your last attempt: {fitted[1]}\n\n{text}"
    edges = "; ".join(
        c.label.removeprefix("edge case: ") for c in exercise.cases if c.kind == "edge"
    )
    return Text(f"{text}\nEdge cases the checker tries: {edges}.")


def solution(name: str) -> Text:
    """A worked solution of exercise ``name``, as source code (it passes ``check``)."""
    exercise = _exercise(name)
    if exercise.solution is None:  # every exercise has one; a test checks it
        return Text(f"No worked solution is stored for {name}.")
    return Text(textwrap.dedent(inspect.getsource(exercise.solution)).strip())


def progress() -> Text:
    """Which exercises passed ``check`` in this kernel (with the function that passed), and
    how the last attempt at each of the others went."""
    rows = []
    for name in EXERCISES:
        chapter = _REGISTRY[name].chapter
        if name in _PASSED_BY:
            rows.append(f"✓ {name:<18} passed by {_PASSED_BY[name]}  ({chapter})")
        elif name in _LAST:
            rows.append(f"✗ {name:<18} last try: {_LAST[name].title.split(' ', 1)[1]}  ({chapter})")
        else:
            rows.append(f"· {name:<18} not tried yet  ({chapter})")
    done = len(_PASSED_BY)
    return Text(f"Passed in this kernel: {done} of {len(EXERCISES)} exercises.\n" + "\n".join(rows))


def check(name: str, fn: Callable[..., Any]) -> Result:
    """Run ``fn`` against exercise ``name``'s reference and name its mistake, if catalogued.

    Args:
        name: one of :data:`EXERCISES`.
        fn: the reader's function, with the exercise's signature.

    Returns:
        A :class:`Result` with ``passed``, ``mistake`` (a catalogued id or None),
        ``message`` (the first failing input and what went wrong there, a line per case,
        and a hint that fits the failure), ``cases`` and ``kind``. Displayed in a notebook
        it shows a short verdict. ``bool(result)`` is True only when ``fn`` is correct.
        A stub that raises ``NotImplementedError`` on every case gets ``passed`` True
        (the chapter runs on) with status ``"not attempted"``, and ``bool(result)`` False.
        Whatever ``fn`` raises (``SystemExit`` too) is reported in the message, never
        propagated; a call that runs past :data:`TIME_LIMIT_S` seconds is stopped and
        reported (the first such call is tried once more, and the verdict says it was tried
        twice), and the check stops :data:`TOTAL_LIMIT_S` seconds after the first case,
        saying how many cases finished. ``KeyboardInterrupt`` is passed on, so that a cell
        can always be interrupted. What ``fn`` prints is captured: ``result.printed`` counts
        the lines and the message quotes the first few.

    Raises:
        ValueError: ``name`` is not an exercise.
    """
    result = run(_exercise(name), fn)
    _LAST[name] = result
    if result.status == "correct":
        _PASSED_BY[name] = getattr(fn, "__name__", type(fn).__name__)
    return result
