"""Speculative decoding: exact enumeration shows the emitted tokens follow the target."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.speculative import (
    acceptance_rate,
    expected_tokens_iid,
    first_tokens_distribution,
    residual,
    speculative_step,
    step_distribution,
)

V = 3


def table_model(weights):
    """A bigram model with rational probabilities from a (V, V) table of positive ints."""

    def model(ctx):
        row = weights[ctx[-1]]
        return [Fraction(w, sum(row)) for w in row]

    return model


rows = st.lists(st.integers(0, 4), min_size=V, max_size=V).filter(lambda r: sum(r) > 0)
tables = st.lists(rows, min_size=V, max_size=V)


def target_probability(target, prefix, tokens):
    prob, ctx = Fraction(1), prefix
    for x in tokens:
        prob *= target(ctx)[x]
        ctx += (x,)
    return prob


@given(target=tables, draft=tables, k=st.integers(1, 3))
def test_emitted_tokens_are_distributed_exactly_as_the_target(target, draft, k):
    p, q = table_model(target), table_model(draft)
    got = first_tokens_distribution(p, q, (0,), k, 3)
    for y in itertools.product(range(V), repeat=3):
        assert got.get(y, 0) == target_probability(p, (0,), y)  # exact rationals


def test_a_wrong_rule_is_caught():
    p, q = table_model([[1, 1, 2]] * V), table_model([[3, 1, 1]] * V)

    def greedy_accept(ctx):  # accepting every draft token gives the draft's distribution
        return q(ctx)

    wrong = first_tokens_distribution(greedy_accept, q, (0,), 2, 2)
    assert any(wrong.get(y, 0) != target_probability(p, (0,), y)
               for y in itertools.product(range(V), repeat=2))  # fmt: skip


@given(target=tables, draft=tables, k=st.integers(1, 3))
def test_step_lengths_follow_the_acceptance_rate_for_a_context_free_draft(target, draft, k):
    p = table_model([target[0]] * V)  # both ignore the context: acceptance is i.i.d.
    q = table_model([draft[0]] * V)
    alpha = acceptance_rate(p((0,)), q((0,)))
    steps = step_distribution(p, q, (0,), k)
    assert sum(steps.values()) == 1
    mean = sum(len(s) * w for s, w in steps.items())
    expected = sum(alpha**i for i in range(k + 1))  # the closed form, in exact rationals
    assert mean == expected
    assert abs(expected_tokens_iid(float(alpha), k) - float(expected)) < 1e-12


def test_residual_and_acceptance_by_hand():
    p, q = [Fraction(1, 2), Fraction(1, 2), 0], [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]
    assert acceptance_rate(p, q) == Fraction(1, 2)
    assert residual(p, q) == [Fraction(1, 2), Fraction(1, 2), 0]
    assert residual(p, p) == p


def test_sampling_matches_the_enumeration():
    p, q = table_model([[1, 2, 3], [3, 1, 1], [1, 1, 1]]), table_model([[1, 1, 1]] * V)
    exact = step_distribution(p, q, (0,), 2)
    mean = float(sum(len(s) * w for s, w in exact.items()))
    var = float(sum(len(s) ** 2 * w for s, w in exact.items())) - mean**2
    gen = torch.Generator().manual_seed(0)
    n = 2000
    lengths = [len(speculative_step(p, q, (0,), 2, gen)) for _ in range(n)]
    assert abs(sum(lengths) / n - mean) < 4 * (var / n) ** 0.5  # 4 standard errors


# Chi-square with V - 1 = 2 degrees of freedom: P(X > x) = exp(-x / 2), so 18.42 is the
# threshold a correct sampler exceeds with probability 1e-4.
CHI2_2DOF_1E4 = -2 * math.log(1e-4)
SKEWED_P = table_model([[1, 4, 1], [3, 1, 1], [1, 1, 1]])
SKEWED_Q = table_model([[2, 1, 2]] * V)


def first_token_chi2(p, q, n=2000, seed=0):
    """Chi-square of the first emitted token of n sampled steps against p(. | (0,))."""
    gen = torch.Generator().manual_seed(seed)
    counts = [0] * V
    for _ in range(n):
        counts[speculative_step(p, q, (0,), 2, gen)[0]] += 1
    expected = [n * float(x) for x in p((0,))]
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))


def test_sampled_tokens_follow_the_target():
    # the emitted tokens, not only their number: the first one must be distributed as p
    assert first_token_chi2(SKEWED_P, SKEWED_Q) < CHI2_2DOF_1E4


def test_resampling_from_p_on_rejection_is_caught(monkeypatch):
    import attnbook.speculative as speculative

    # the shortcut keeps the length distribution (acceptance is unchanged) but not the tokens
    monkeypatch.setattr(speculative, "residual", lambda p, q: list(p))
    assert first_token_chi2(SKEWED_P, SKEWED_Q) > 5 * CHI2_2DOF_1E4


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: acceptance_rate([0.5, 0.5], [1.0]), ValueError, "of one length"),
        (lambda: acceptance_rate([0.5, 0.6], [0.5, 0.5]), ValueError, "p must be a probability"),
        (lambda: step_distribution(len, len, (0,), 0), ValueError, "k must be >= 1"),
        (lambda: step_distribution(1, len, (0,), 1), TypeError, "target"),
        (lambda: step_distribution(len, len, [0], 1), TypeError, "prefix must be a tuple"),
        (lambda: expected_tokens_iid(1.5, 2), ValueError, "alpha must lie in"),
        (lambda: speculative_step(len, len, (0,), 1, 0), TypeError, "generator"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
