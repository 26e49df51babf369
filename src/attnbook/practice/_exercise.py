"""What an exercise is made of: a reference, cases to run it on, and catalogued wrong variants.

A mistake is recognised by behaviour: each :class:`Mistake` carries a function that makes it
(``wrong``), and the reader's outputs are compared with that function's outputs on every
case. Cheap signatures (off by a factor, the mask's sense flipped, ...) are written the same
way, usually as a one-line change of the reference.

A slip that can happen in several exercises (a missing √dk wherever scores are scaled, RoPE
angles computed in float16 wherever tokens are rotated) is written once, as a :class:`Family`:
its id, words and the knobs that make it. Each exercise that has the step turns the family
into its own :class:`Mistake` with a ``make(**knobs)`` that builds the exercise's function with
that step changed, so the same slip gets the same name in every exercise that contains it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Kind = Literal["hand", "random", "edge"]


@dataclass(frozen=True)
class Case:
    """One input the reader's function is run on.

    Attributes:
        label: how the message names it, e.g. ``"hand case: 3 tokens, dk = 4"``.
        kind: ``"hand"`` (small, written out), ``"random"`` (seeded) or ``"edge"``.
        make: returns the inputs by parameter name; called once, then copied for each call.
    """

    label: str
    kind: Kind
    make: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer, and a function that gives exactly that answer.

    Attributes:
        id: short stable name, e.g. ``"no_scale"``.
        description: what the mistake is, in one sentence.
        hint: a nudge toward the fix that does not hand over the code.
        source: where the mistake comes from (a chapter section, a library convention).
        wrong: a function with the exercise's signature that makes this mistake.
        alternatives: other ways of writing the same mistake that give other numbers
            (``dk ** 1/2`` as a scale, or inline as ``scores / dk ** 1/2``).
    """

    id: str
    description: str
    hint: str
    source: str
    wrong: Callable[..., Any]
    alternatives: tuple[Callable[..., Any], ...] = ()

    @property
    def variants(self) -> tuple[Callable[..., Any], ...]:
        return (self.wrong, *self.alternatives)


@dataclass(frozen=True)
class Family:
    """A mistake shared by every exercise that contains one step (scaling the scores, a
    softmax, the RoPE angles), as knobs rather than as one exercise's function.

    Attributes:
        id, description, hint, source: as in :class:`Mistake`.
        knobs: one keyword dict per way of making the mistake, the commonest first; an
            exercise's ``make(**knobs)`` returns a function with the exercise's signature.
    """

    id: str
    description: str
    hint: str
    source: str
    knobs: tuple[dict[str, Any], ...]

    def mistake(
        self,
        make: Callable[..., Callable[..., Any]],
        *,
        more: tuple[dict[str, Any], ...] = (),
        **words: str,
    ) -> Mistake:
        """This family's mistake in one exercise. ``more``: further knobs, for ways of making
        it that only this exercise has (a guard for empty rows where there is a mask);
        ``words`` may replace ``description`` or ``hint`` where the exercise's own terms say
        it better."""
        wrong, *others = (make(**knobs) for knobs in (*self.knobs, *more))
        return Mistake(
            self.id,
            words.get("description", self.description),
            words.get("hint", self.hint),
            self.source,
            wrong,
            tuple(others),
        )


def pick(families: tuple[Family, ...], id: str) -> Family:
    """The family of ``families`` with this ``id``."""
    for family in families:
        if family.id == id:
            return family
    raise ValueError(f"no such family: {id}")


def from_families(
    families: tuple[Family, ...], make: Callable[..., Callable[..., Any]], *ids: str
) -> tuple[Mistake, ...]:
    """The mistakes of ``families`` with the given ``ids`` (all when none are given), in the
    families' order, each built with ``make``."""
    known = {f.id for f in families}
    unknown = set(ids) - known
    if unknown:
        raise ValueError(f"no such family: {', '.join(sorted(unknown))}")
    return tuple(f.mistake(make) for f in families if not ids or f.id in ids)


@dataclass(frozen=True)
class Exercise:
    """An exercise: the reference, its cases and its catalogued mistakes.

    Attributes:
        name: the key readers pass to :func:`attnbook.practice.check`.
        chapter: the chapter label the exercise belongs to, e.g. ``"ch-deriving"``.
        signature: how the reader's function is called, e.g. ``"attention(q, k, v)"``.
        reference: the correct function.
        cases: hand, random and edge cases, hand cases first.
        mistakes: catalogued wrong variants, most specific first (the first match wins).
        hint: what to look at when no catalogued mistake matches.
        keyword_call: call the function with keyword arguments (for integer formulas with
            many parameters) instead of positionally.
        output_names: names of the parts when the function returns a tuple.
        solution: a worked solution, written as a reader would (``solution(name)`` shows
            its source).
        half_hint: for an exercise with float16 or bfloat16 cases, what to look at when a
            function is right on every wider case and wrong only on the 16-bit ones.
    """

    name: str
    chapter: str
    signature: str
    reference: Callable[..., Any]
    cases: tuple[Case, ...]
    mistakes: tuple[Mistake, ...]
    hint: str
    keyword_call: bool = False
    output_names: tuple[str, ...] = field(default=())
    solution: Callable[..., Any] | None = None
    half_hint: str = ""


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64, scale: float = 1.0):
    """Seeded normal tensor: the same numbers on every machine and in every session."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)


def small_ints(*shape: int, seed: int, dtype: torch.dtype, high: int = 4) -> torch.Tensor:
    """Seeded integers in ``[-high, high]`` as floats: products and sums of them stay exact in
    float16, so a float16 case tests the method, not rounding luck."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-high, high + 1, shape, generator=g).to(dtype)
