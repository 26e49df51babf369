"""Practice: exercises whose checker names the reader's mistake.

Write the function an exercise asks for, then ``check(name, fn)``. The checker runs ``fn``
next to the book's reference on hand-made, random and edge cases (no keys, masked rows,
grouped heads, odd offsets, float16 where it matters) and returns a :class:`Result`. When
``fn`` is wrong, the checker compares its outputs with those of every catalogued wrong
variant of the exercise (the classic mistakes: a missing √dk, a softmax along the wrong axis,
a flipped mask, a merge without the rescale, ...) and, if one matches on every case, names it.
Mistakes are recognised by behaviour only: the checker never reads the reader's source.

A function that still raises ``NotImplementedError`` is reported as *not attempted* and counts
as passed, so a chapter with unsolved exercises still runs top to bottom.

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

``EXERCISES`` lists the names, ``MISTAKES[name]`` the catalogued ``(id, description)``
pairs of one exercise, and ``describe(name)`` the full contract of its function.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from attnbook.practice._attention import ATTENTION, SCALED_SCORES
from attnbook.practice._costs import ATTENTION_FLOPS, KV_CACHE_BYTES
from attnbook.practice._exercise import Exercise
from attnbook.practice._heads import MERGE_HEADS, SPLIT_HEADS
from attnbook.practice._masks import CAUSAL_MASK, PADDING_MASK
from attnbook.practice._online_softmax import MERGE
from attnbook.practice._result import Result
from attnbook.practice._rope import APPLY_ROPE
from attnbook.practice._runner import run

__all__ = ["EXERCISES", "MISTAKES", "Result", "check", "describe"]

_REGISTRY: dict[str, Exercise] = {
    ex.name: ex
    for ex in (
        ATTENTION,
        SCALED_SCORES,
        SPLIT_HEADS,
        MERGE_HEADS,
        KV_CACHE_BYTES,
        CAUSAL_MASK,
        PADDING_MASK,
        APPLY_ROPE,
        ATTENTION_FLOPS,
        MERGE,
    )
}

EXERCISES: tuple[str, ...] = tuple(_REGISTRY)
"""Names of the exercises, in chapter order."""

MISTAKES: dict[str, tuple[tuple[str, str], ...]] = {
    name: tuple((m.id, m.description) for m in ex.mistakes) for name, ex in _REGISTRY.items()
}
"""For each exercise, its catalogued mistakes as ``(id, description)`` pairs."""


def _exercise(name: object) -> Exercise:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"name must be one of {', '.join(EXERCISES)}; got {name!r}")
    return _REGISTRY[name]


def describe(name: str) -> str:
    """The contract of exercise ``name``'s function: its signature, shapes and edge cases."""
    exercise = _exercise(name)
    module_doc = sys.modules[exercise.reference.__module__].__doc__ or ""
    return f"{exercise.signature}\n\n{module_doc.strip()}"


def check(name: str, fn: Callable[..., Any]) -> Result:
    """Run ``fn`` against exercise ``name``'s reference and name its mistake, if catalogued.

    Args:
        name: one of :data:`EXERCISES`.
        fn: the reader's function, with the exercise's signature.

    Returns:
        A :class:`Result` with ``passed``, ``mistake`` (a catalogued id or None) and
        ``message`` (the first failing input, what went wrong there, and a hint). Displayed in
        a notebook it shows a short verdict. A stub that raises ``NotImplementedError``
        passes with status ``"not attempted"``. Exceptions raised by ``fn`` are reported in
        the message, never propagated.

    Raises:
        ValueError: ``name`` is not an exercise.
    """
    return run(_exercise(name), fn)
