"""attnbook.practice: the checker's contract (stubs, crashes, wrong shapes, NaN, the verdict's
display) and the catalogue's own consistency."""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import practice
from attnbook.practice import EXERCISES, MISTAKES, check, describe
from attnbook.practice._compare import call, same_behaviour
from attnbook.practice._runner import _prepared, _variant_outcomes

REGISTRY = practice._REGISTRY


def test_catalogue_is_large_enough():
    assert len(EXERCISES) >= 8
    assert sum(len(m) for m in MISTAKES.values()) >= 30
    assert set(MISTAKES) == set(EXERCISES)
    for name, mistakes in MISTAKES.items():
        ids = [i for i, _ in mistakes]
        assert len(ids) == len(set(ids)), f"{name}: duplicate mistake ids"
        assert all(re.fullmatch(r"[a-z0-9_]+", i) for i in ids)
        assert all(isinstance(d, str) and d.endswith(".") for _, d in mistakes)


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_passes(name):
    result = check(name, REGISTRY[name].reference)
    assert result.passed and result.mistake is None and result.status == "correct"
    assert "agrees with the reference on all" in result.message


@pytest.mark.parametrize("name", EXERCISES)
def test_cases_cover_hand_random_and_edge(name):
    kinds = {case.kind for case in REGISTRY[name].cases}
    assert kinds == {"hand", "random", "edge"}
    assert REGISTRY[name].cases[0].kind == "hand"  # messages name the simplest failing case


@pytest.mark.parametrize("name", EXERCISES)
def test_each_mistake_differs_from_the_reference_and_from_the_others(name):
    exercise = REGISTRY[name]
    rows = _prepared(exercise)
    expected = [call(exercise.reference, i, keyword=exercise.keyword_call) for i, _ in rows]
    behaviours = {}
    for mistake in exercise.mistakes:
        got = [call(mistake.wrong, i, keyword=exercise.keyword_call) for i, _ in rows]
        assert not all(map(same_behaviour, got, expected)), f"{mistake.id} is never wrong"
        for other, seen in behaviours.items():
            assert not all(map(same_behaviour, got, seen)), f"{mistake.id} == {other}"
        behaviours[mistake.id] = got


@pytest.mark.parametrize("name", EXERCISES)
def test_no_variant_of_one_mistake_behaves_like_a_variant_of_another(name):
    """Every way of making a mistake (its alternatives and the knobs a shared family adds)
    is told apart from every way of making each other mistake: a full match never has two
    candidates, so the name it gives is the only one the behaviour fits."""
    exercise = REGISTRY[name]
    rows = [
        (mistake.id, _variant_outcomes(exercise, variant))
        for mistake in exercise.mistakes
        for variant in mistake.variants
    ]
    for (a, theirs), (b, others) in itertools.combinations(rows, 2):
        if a != b:
            assert not all(map(same_behaviour, theirs, others)), f"{a} == {b}"


@pytest.mark.parametrize("name", EXERCISES)
def test_each_variant_is_recognised_by_its_own_id(name):
    for mistake in REGISTRY[name].mistakes:
        for variant in mistake.variants:
            result = check(name, variant)
            assert not result.passed and result.mistake == mistake.id, (mistake.id, result)
            assert result.status == "known mistake"
            assert mistake.description in result.message and "Hint: " in result.message


@pytest.mark.parametrize("name", EXERCISES)
def test_stub_is_not_attempted_and_passes(name):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = check(name, stub)
    assert result.passed and result.mistake is None and result.status == "not attempted"
    assert result.message.startswith("Not attempted yet")
    assert "Correct" not in str(result) and "Not attempted yet" in result._repr_html_()


@pytest.mark.parametrize("name", EXERCISES)
def test_describe_gives_the_signature(name):
    assert describe(name).startswith(REGISTRY[name].signature)


def test_unknown_exercise_is_a_value_error_listing_the_names():
    with pytest.raises(ValueError, match="attention, scaled_scores"):
        check("atention", lambda q, k, v: q)


def test_not_a_function_is_reported_not_raised():
    result = check("attention", torch.zeros(3))
    assert not result.passed and result.mistake is None and "without calling it" in result.message


def test_an_exception_is_reported_with_the_case_and_never_propagates():
    def broken(q, k, v):
        _batch, _heads, _tokens, _dk = q.shape  # assumes 4-D input: fails on the hand case
        return q

    result = check("attention", broken)
    assert not result.passed and result.mistake is None
    assert result.message.startswith("On the hand case: 4 tokens, dk = dv = 4 (q (4, 4) float32")
    assert "your function raised ValueError: not enough values to unpack" in result.message


def test_a_wrong_signature_is_named():
    result = check("attention", lambda q, k: q)
    assert "the checker calls attention(q, k, v)" in result.message


def test_nan_output_is_never_equal_to_the_reference():
    def nan(q, k, v):
        return torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), dtype=q.dtype)

    result = check("attention", nan)
    assert not result.passed and "contains NaN" in result.message


def test_wrong_dtype_is_named():
    def float64(q, k, v):
        w = torch.softmax(q.double() @ k.double().mT / math.sqrt(q.shape[-1]), -1)
        return w @ v.double()  # forgot to cast back

    result = check("attention", float64)
    assert not result.passed and "has dtype torch.float64; expected torch.float32" in (
        result.message
    )


def test_changing_an_input_in_place_is_reported():
    def in_place(q, k, v):
        q /= math.sqrt(q.shape[-1])
        return torch.softmax(q @ k.mT, -1) @ v

    result = check("attention", in_place)
    assert not result.passed and "changed its input q in place" in result.message


def test_a_constant_factor_is_named_when_no_mistake_matches():
    def doubled(q, k, v):
        return 2 * torch.nn.functional.scaled_dot_product_attention(q, k, v)

    result = check("attention", doubled)
    assert result.mistake is None and "2 times the reference" in result.message


def test_verdict_html_is_static_and_escaped():
    result = check("causal_mask", lambda t_q, t_k: "<b>")
    page = result._repr_html_()
    assert "<script" not in page and "&lt;b&gt;" not in page  # the str is described, not shown
    assert "color: inherit" in page and "Not yet right" in page
    assert str(result).startswith("✗ Not yet right | causal_mask\n")
    assert repr(result) == str(result)
    tricky = practice.Result("x", False, None, "a <tag> & 'quote'", "wrong")
    assert "a &lt;tag&gt; &amp; &#x27;quote&#x27;" in tricky._repr_html_()


@settings(max_examples=10, deadline=None)
@given(factor=st.floats(0.05, 20.0).filter(lambda c: abs(c - 1) > 0.01))
def test_a_constant_factor_is_never_given_a_catalogued_name(factor):
    # Every catalogued scale mistake depends on dk, and the cases use several dk, so a
    # constant factor must come back unnamed, with the factor stated.
    result = check("scaled_scores", lambda q, k: factor * (q @ k.mT) / math.sqrt(q.shape[-1]))
    assert not result.passed and result.mistake is None
    assert f"{factor:.4g} times the reference" in result.message
