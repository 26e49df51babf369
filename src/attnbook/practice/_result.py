"""The verdict of :func:`attnbook.practice.check`: a small record that displays itself.

The notebook face is plain HTML with inline styles and no script, so it looks the same in
JupyterLab, Colab and the static site; text takes the page's own colour, so it stays readable
in light and dark themes (only a coloured edge and a faint tint carry the status, and the
title says it in words too).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Literal

from attnbook._checks import require_bool

Status = Literal["correct", "not attempted", "known mistake", "wrong"]

_TITLES = {
    "correct": "✓ Correct",
    "not attempted": "… Not attempted yet",
    "known mistake": "✗ Not yet: a known mistake",
    "wrong": "✗ Not yet right",
}
_COLOURS = {  # edge colour, tint (the same hue at low alpha, so it works on dark pages too)
    "correct": ("#1a7f37", "rgba(26, 127, 55, 0.08)"),
    "not attempted": ("#6e7781", "rgba(110, 119, 129, 0.08)"),
    "known mistake": ("#bc4c00", "rgba(188, 76, 0, 0.08)"),
    "wrong": ("#cf222e", "rgba(207, 34, 46, 0.08)"),
}


@dataclass(frozen=True)
class Result:
    """What :func:`~attnbook.practice.check` found.

    Attributes:
        exercise: the exercise's name.
        passed: True when the function agrees with the reference on every case, and also
            for an untouched stub (so a chapter with unsolved exercises still runs).
        mistake: id of the catalogued mistake the function's outputs match (see
            ``MISTAKES[exercise]``), or None.
        message: what went wrong, on which input, and a hint; or what was checked.
        status: ``"correct"``, ``"not attempted"``, ``"known mistake"`` or ``"wrong"``.
        cases: one line per case, in order: ``"✓ <case>"`` or ``"✗ <case>: <what went
            wrong>"`` (``"· <case>: not run"`` after a call that hit the time limit).

        kind: how the function failed, which picked the hint: ``"mistake"`` (a catalogued
            one), ``"partial"`` (a catalogued one on most failing cases), ``"timeout"``,
            ``"exception"``, ``"not_implemented"``, ``"view"``, ``"signature"``,
            ``"some_cases"`` (fails only on some cases), ``"shape"``, ``"dtype"``,
            ``"type"``, ``"nan"``, ``"values"`` (wrong finite numbers, with NaN or inf
            elsewhere), ``"mutated"``, ``"order"`` (right outputs in another order),
            ``"some_outputs"`` (some outputs of a tuple right everywhere), ``"count_offset"``
            (a count off by one constant), ``"factor"`` (one constant ratio),
            ``"transposed"``, ``"offset"``, ``"row_scale"``, ``"rearranged"``, ``"precision"``
            (a relation every failing result has with the reference), ``"half_precision"``
            (wrong only on the float16 and bfloat16 cases), ``"overflow"`` (a count wrapped
            around 32 bits), ``"float32"`` (a count rounded to float32), ``"generic"`` (only
            the exercise's own hint), ``"unreadable"`` (an output the checker could not
            compare); ``"stub"`` for a stub, ``""`` when correct.
        printed: how many lines the function printed (to stdout or stderr) during the
            check. They are kept out of the notebook; ``message`` then quotes the first few.

    ``bool(result)`` is True only for status ``"correct"``, so ``assert check(name, fn)``
    fails on a wrong answer and on an untouched stub (whose ``passed`` is True only so that
    a chapter with unsolved exercises still runs).

    Raises:
        TypeError: ``exercise`` or ``message`` not a ``str``, ``passed`` not a ``bool``,
            ``mistake`` neither a ``str`` nor None, ``printed`` not an ``int``.
        ValueError: an unknown ``status``, ``passed`` that contradicts it, a ``mistake``
            given without status ``"known mistake"`` (or missing with it), or a negative
            ``printed``.
    """

    exercise: str
    passed: bool
    mistake: str | None
    message: str
    status: Status
    cases: tuple[str, ...] = field(default=())
    kind: str = ""
    printed: int = 0

    def __bool__(self) -> bool:
        return self.status == "correct"

    def __post_init__(self) -> None:
        for name in ("exercise", "message"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        require_bool("passed", self.passed)
        if not isinstance(self.cases, tuple) or not all(isinstance(c, str) for c in self.cases):
            raise TypeError("cases must be a tuple of str")
        if not isinstance(self.kind, str):
            raise TypeError(f"kind must be a str, got {type(self.kind).__name__}")
        if isinstance(self.printed, bool) or not isinstance(self.printed, int):
            raise TypeError(f"printed must be an int, got {type(self.printed).__name__}")
        if self.printed < 0:
            raise ValueError(f"printed must be >= 0, got {self.printed}")
        if self.mistake is not None and not isinstance(self.mistake, str):
            raise TypeError(f"mistake must be a str or None, got {type(self.mistake).__name__}")
        if self.status not in _TITLES:
            raise ValueError(f"status must be one of {', '.join(_TITLES)}; got {self.status!r}")
        if bool(self.passed) != (self.status in ("correct", "not attempted")):
            raise ValueError(f"passed={self.passed} contradicts status={self.status!r}")
        if (self.mistake is not None) != (self.status == "known mistake"):
            raise ValueError(
                f"mistake={self.mistake!r} needs status 'known mistake' and the reverse, "
                f"got status={self.status!r}"
            )

    @property
    def title(self) -> str:
        """One-line verdict, e.g. ``"✓ Correct"``."""
        if self.status == "known mistake":
            return f"{_TITLES[self.status]} ({self.mistake})"
        return _TITLES[self.status]

    def __str__(self) -> str:
        return f"{self.title} | {self.exercise}\n{self.message}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        edge, tint = _COLOURS[self.status]
        paragraphs = "".join(
            f'<p style="margin: {"0 0 0 1.2em" if line.startswith("  ") else "0.3em 0 0 0"};">'
            f"{html.escape(line.strip())}</p>"
            for line in self.message.split("\n")
            if line.strip()
        )
        return (
            f'<div class="attnbook-verdict" style="border-left: 4px solid {edge}; '
            f"background: {tint}; padding: 0.5em 0.9em; margin: 0.4em 0; "
            f'color: inherit; line-height: 1.45; max-width: 60em;">'
            f"<strong>{html.escape(self.title)}</strong>"
            f' <span style="opacity: 0.75;">· <code>{html.escape(self.exercise)}</code></span>'
            f"{paragraphs}</div>"
        )
