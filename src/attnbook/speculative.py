"""Speculative decoding: a cheap draft proposes, the target accepts or corrects.

A draft model proposes ``k`` tokens one after another; the target scores all of them in one
pass. Draft token ``x``, proposed with draft probability ``q(x)`` where the target gives
``p(x)``, is accepted with probability ``min(1, p(x) / q(x))``; at the first rejection a token
is drawn from the residual ``max(p - q, 0) / sum(max(p - q, 0))`` and the step ends; if all
``k`` are accepted the target's next distribution gives one more token for free. Each emitted
token is then distributed exactly as the target would have drawn it (Leviathan et al., 2023;
Chen et al., 2023): ``P(x) = min(p, q)(x) + (1 - sum min(p, q)) * residual(x) = p(x)``.

The models here are callables from a context (a tuple of token ids) to a probability vector
(a sequence of ``V`` numbers summing to 1). The functions use only ``+ - * /``, ``min`` and
``max`` on those numbers, so with :class:`fractions.Fraction` probabilities the enumerations
are exact, and with floats they are ordinary floating-point sums.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import torch

from attnbook._checks import require_callable, require_int

__all__ = [
    "acceptance_rate",
    "expected_tokens_iid",
    "first_tokens_distribution",
    "residual",
    "speculative_step",
    "step_distribution",
]

Model = Callable[[tuple[int, ...]], Sequence]


def _require_pair(p: Sequence, q: Sequence) -> tuple[list, list]:
    p, q = list(p), list(q)
    if len(p) != len(q) or not p:
        raise ValueError(f"p and q must be non-empty and of one length, got {len(p)} and {len(q)}")
    for name, dist in (("p", p), ("q", q)):
        if any(x < 0 for x in dist) or abs(float(sum(dist)) - 1) > 1e-9:
            raise ValueError(f"{name} must be a probability vector (>= 0, summing to 1)")
    return p, q


def acceptance_rate(p: Sequence, q: Sequence) -> object:
    """``beta = sum_x min(p(x), q(x))``: the probability that a draft token is accepted,
    ``1 - TV(p, q)``. Raises ``ValueError`` unless ``p`` and ``q`` are probability vectors
    of one length."""
    p, q = _require_pair(p, q)
    return sum(min(a, b) for a, b in zip(p, q, strict=True))


def residual(p: Sequence, q: Sequence) -> list:
    """The distribution a rejection draws from: ``max(p - q, 0)``, normalised.

    When ``p == q`` nothing is ever rejected and the residual is undefined; ``p`` is returned
    (any choice gives the same output distribution, since it is drawn with probability 0).
    Raises ``ValueError`` as :func:`acceptance_rate`."""
    p, q = _require_pair(p, q)
    excess = [max(a - b, 0 * a) for a, b in zip(p, q, strict=True)]
    total = sum(excess)
    return p if total == 0 else [e / total for e in excess]


def step_distribution(target: Model, draft: Model, prefix: tuple[int, ...], k: int) -> dict:
    """Every outcome of one speculative step, by exact enumeration of its branches.

    Args:
        target, draft: models (context -> probability vector of length ``V``).
        prefix: the context the step starts from, a tuple of ids.
        k: draft tokens proposed per step, an int >= 1.

    Returns:
        ``{emitted tokens (a tuple of 1 to k + 1 ids): probability}`` over every draw of the
        draft tokens, every accept/reject decision and every residual or bonus token; the
        probabilities sum to 1.

    Raises:
        TypeError: a model that is not callable, a ``prefix`` that is not a tuple, a
            non-int ``k``. ValueError: ``k < 1``, or a model returning a non-distribution.
    """
    require_callable("target", target)
    require_callable("draft", draft)
    if not isinstance(prefix, tuple):
        raise TypeError(f"prefix must be a tuple of token ids, got {type(prefix).__name__}")
    k = require_int("k", k, minimum=1)
    out: dict = defaultdict(int)

    def branch(emitted: tuple[int, ...], weight: object) -> None:
        p = list(target(prefix + emitted))
        if len(emitted) == k:  # all k accepted: the target's pass gives one more token
            for x, px in enumerate(p):
                out[(*emitted, x)] += weight * px
            return
        q = list(draft(prefix + emitted))
        res = residual(p, q)
        for x, qx in enumerate(q):
            if qx == 0:
                continue
            accept = min(1, p[x] / qx)
            if accept > 0:
                branch((*emitted, x), weight * qx * accept)
            if accept < 1:  # rejected: the step ends with a residual token
                for y, ry in enumerate(res):
                    out[(*emitted, y)] += weight * qx * (1 - accept) * ry

    branch((), 1)
    return {seq: w for seq, w in out.items() if w != 0}


def first_tokens_distribution(
    target: Model, draft: Model, prefix: tuple[int, ...], k: int, n: int
) -> dict:
    """The exact distribution of the first ``n`` tokens that repeated speculative steps emit.

    Steps run from ``prefix`` until at least ``n`` tokens are out; the extra ones of the last
    step are cut off. Returns ``{tokens (a tuple of n ids): probability}``; if speculative
    decoding is correct it equals the target's own ``prod_i p(y_i | prefix, y_<i)``.

    Raises:
        as :func:`step_distribution`, and for a non-int or negative ``n``.
    """
    n = require_int("n", n, minimum=0)
    out: dict = defaultdict(int)

    def run(emitted: tuple[int, ...], weight: object) -> None:
        if len(emitted) >= n:
            out[emitted[:n]] += weight
            return
        for seq, w in step_distribution(target, draft, prefix + emitted, k).items():
            run(emitted + seq, weight * w)

    run((), 1)
    return dict(out)


def expected_tokens_iid(alpha: float, k: int) -> float:
    """Tokens per target pass if every draft token is accepted with the same probability
    ``alpha`` independently: ``(1 - alpha ** (k + 1)) / (1 - alpha)`` (``k + 1`` at 1).

    Raises ``ValueError`` for ``alpha`` outside ``[0, 1]`` or ``k < 1``."""
    k = require_int("k", k, minimum=1)
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def speculative_step(
    target: Model, draft: Model, prefix: tuple[int, ...], k: int, generator: torch.Generator
) -> tuple[int, ...]:
    """Sample one speculative step; returns the emitted tokens (1 to ``k + 1`` ids).

    Uses ``generator`` for every draw, so a seeded generator repeats the step. Raises as
    :func:`step_distribution`, and ``TypeError`` for a ``generator`` that is not a
    ``torch.Generator``."""
    require_callable("target", target)
    require_callable("draft", draft)
    k = require_int("k", k, minimum=1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")

    def draw(dist: Sequence) -> int:
        weights = torch.tensor([float(x) for x in dist], dtype=torch.float64)
        return int(torch.multinomial(weights, 1, generator=generator))

    emitted: tuple[int, ...] = ()
    for _ in range(k):
        p, q = list(target(prefix + emitted)), list(draft(prefix + emitted))
        x = draw(q)
        if torch.rand((), generator=generator, dtype=torch.float64).item() < min(
            1, float(p[x] / q[x])
        ):
            emitted += (x,)
            continue
        return (*emitted, draw(residual(p, q)))
    return (*emitted, draw(target(prefix + emitted)))
