"""Exercise of chapter 8: merge two online-softmax states.

``merge(a, b)``
    ``a`` and ``b`` are tuples ``(m, l, u)`` describing two disjoint sets of keys for the same
    queries: ``m`` the largest score ``(..., Tq)`` (``-inf`` when the set is empty or fully
    masked), ``l = sum exp(s - m)`` ``(..., Tq)`` and ``u = sum exp(s - m) v`` ``(..., Tq, dv)``.
    Returns the tuple ``(m, l, u)`` of the union, with ``m`` the union's maximum. Merging two
    empty states gives ``(-inf, 0, 0)``, never NaN. The three outputs have the dtype of the
    inputs (all six tensors share one); a tuple, a list or a namedtuple is accepted. The
    leading dims ``...`` may be several (batch, heads), and the tensors may be
    non-contiguous views.
"""

from __future__ import annotations

import torch

from attnbook.online_softmax import SoftmaxState, block_state
from attnbook.online_softmax import merge as _merge
from attnbook.practice._exercise import Case, Exercise, Mistake, randn

_NEG_INF = float("-inf")


def merge(a, b):
    return tuple(_merge(SoftmaxState(*a), SoftmaxState(*b)))


def _factors(a, b, m, *, inverted=False, guard=True):
    shift = m.masked_fill(m == _NEG_INF, 0.0) if guard else m
    if inverted:
        return torch.exp(shift - a[0]), torch.exp(shift - b[0])
    return torch.exp(a[0] - shift), torch.exp(b[0] - shift)


def _merge_with(a, b, *, rescale_l=True, rescale_u=True, m=None, **factor_options):
    m = torch.maximum(a[0], b[0]) if m is None else m
    ca, cb = _factors(a, b, m, **factor_options)
    one_a, one_b = torch.ones_like(ca), torch.ones_like(cb)
    la, lb = (ca, cb) if rescale_l else (one_a, one_b)
    ua, ub = (ca, cb) if rescale_u else (one_a, one_b)
    return m, la * a[1] + lb * b[1], ua[..., None] * a[2] + ub[..., None] * b[2]


def _states(scores: torch.Tensor, values: torch.Tensor, cut: int):
    a = block_state(scores[..., :cut], values[..., :cut, :])
    b = block_state(scores[..., cut:], values[..., cut:, :])
    return lambda: {"a": tuple(a), "b": tuple(b)}


def _random(tq, tk, dv, cut, seed, *, dtype=torch.float64, scale=2.0, masked=None):
    scores = randn(2, tq, tk, seed=seed, dtype=dtype, scale=scale)
    if masked is not None:
        scores[..., masked] = _NEG_INF
    return _states(scores, randn(2, tk, dv, seed=seed + 1, dtype=dtype), cut)


def _one_query_empty():
    scores = randn(2, 3, 4, seed=101, scale=2.0)
    scores[:, 1, :] = _NEG_INF  # query 1: both sides empty
    scores[:, 0, :2] = _NEG_INF  # query 0: side a empty
    return _states(scores, randn(2, 4, 2, seed=102), 2)()


def _leading_and_views():
    scores = randn(2, 2, 3, 6, seed=103, scale=2.0)
    a = block_state(scores[..., :4], randn(2, 2, 4, 3, seed=104))
    b = block_state(scores[..., 4:], randn(2, 2, 2, 3, seed=105))
    # u as a non-contiguous view of the same numbers
    u_a, u_b = a.u.mT.contiguous().mT, b.u.mT.contiguous().mT
    return {"a": (a.m, a.l, u_a), "b": (b.m, b.l, u_b)}


_HAND_SCORES = torch.tensor([[0.0, 2.0, 1.0, 5.0], [3.0, -1.0, 0.0, 1.0]])
_HAND_VALUES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 1.0]])


def solution_merge(a, b):
    (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
    m = torch.maximum(m_a, m_b)  # (..., Tq)
    shift = torch.where(m == float("-inf"), 0.0, m)  # both sides empty: any finite shift works
    c_a, c_b = torch.exp(m_a - shift), torch.exp(m_b - shift)  # each at most 1
    return m, c_a * l_a + c_b * l_b, c_a[..., None] * u_a + c_b[..., None] * u_b


MERGE = Exercise(
    name="merge",
    chapter="ch-flash",
    signature="merge(a, b)",
    reference=merge,
    solution=solution_merge,
    output_names=("m", "l", "u"),
    hint="Derive it once more from chapter 8: write l over the union as two sums, one per "
    "side, and express each term exp(s - m) through that side's own max.",
    cases=(
        Case("hand case: 2 queries, keys 0-1 in a and 2-3 in b", "hand",
             _states(_HAND_SCORES, _HAND_VALUES, 2)),
        Case("random case: 2 x 3 queries, 5 keys split 2 + 3", "random", _random(3, 5, 4, 2, 91)),
        Case("random case: float32, 8 keys split 7 + 1", "random",
             _random(4, 8, 3, 7, 93, dtype=torch.float32)),
        Case("random case: leading dims (2, 2), 3 queries, 6 keys split 4 + 2, u transposed "
             "views", "random", _leading_and_views),
        Case("edge case: scores near 100 in b, near 0 in a (float32)", "edge",
             lambda: {"a": tuple(block_state(randn(1, 2, 3, seed=95, dtype=torch.float32),
                                             randn(1, 3, 2, seed=96, dtype=torch.float32))),
                      "b": tuple(block_state(100 + randn(1, 2, 2, seed=97, dtype=torch.float32),
                                             randn(1, 2, 2, seed=98, dtype=torch.float32)))}),
        Case("edge case: b fully masked for every query", "edge",
             _random(3, 6, 2, 3, 99, masked=slice(3, None))),
        Case("edge case: one query sees no key at all, another none in a", "edge",
             _one_query_empty),
    ),
    mistakes=(
        Mistake("no_rescale", "the sums are added without rescaling each side to the common "
                "max (a merge without the rescale).", "l_a counts exp(s - m_a); the union "
                "needs exp(s - m). What factor turns one into the other?",
                "ch-flash, the merge rule", lambda a, b: _merge_with(a, b, rescale_l=False,
                                                                     rescale_u=False)),
        Mistake("rescale_inverted", "each side is multiplied by exp(m - m_side) instead of "
                "exp(m_side - m); the factors should be at most 1.", "The side whose max is "
                "smaller must shrink.", "ch-flash, the merge rule",
                lambda a, b: _merge_with(a, b, inverted=True)),
        Mistake("u_not_rescaled", "l is rescaled but u is not.", "u is a sum of the same "
                "exp(s - m) terms, each multiplied by a value.", "ch-flash",
                lambda a, b: _merge_with(a, b, rescale_u=False)),
        Mistake("l_not_rescaled", "u is rescaled but l is not.", "l is a sum of the same "
                "exp(s - m) terms that u weights the values with.", "ch-flash",
                lambda a, b: _merge_with(a, b, rescale_l=False)),
        Mistake("nan_on_empty", "when both sides are empty (m = -inf), exp(-inf - (-inf)) "
                "gives NaN, which poisons every later merge.", "Chapter 8, fully masked "
                "blocks: when m is -inf, any finite shift gives the right (zero) factors.",
                "ch-flash, fully masked blocks are harmless",
                lambda a, b: _merge_with(a, b, guard=False)),
        Mistake("max_not_kept", "m is the newer side's max (b's), not the larger of the two.",
                "m must be the maximum over the union, so that no exponent is positive.",
                "ch-flash", lambda a, b: _merge_with(a, b, m=b[0])),
    ),
)  # fmt: skip
