"""Holes independent learners found in the checker, each pinned by the submission that found
it: a correct backward rejected under ``no_grad``, float16 positions accepted by the RoPE
exercise, a function that patches torch's comparisons to grade itself; then three wrong
diagnoses (a "NaN" hint for a merge whose numbers are wrong everywhere, a partial match to
``keys_only`` for a count that ignores the dtype, the catalogue's "K and V" re-cased to
"k and V") and a check with no time cap as a whole."""

from __future__ import annotations

import math
import time

import pytest
import torch

from attnbook import practice
from attnbook.practice import _runner, check


def _backward(q, k, v, out, lse, d_out):  # by hand: no autograd needed
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.mT * scale - lse[..., None])
    d_s = p * (d_out @ v.mT - (d_out * out).sum(-1, keepdim=True))
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_out


def test_a_correct_backward_passes_whatever_the_readers_autograd_mode():
    assert practice.check("attention_backward", _backward)
    with torch.no_grad():
        assert practice.check("attention_backward", _backward)
    with torch.inference_mode():
        assert practice.check("attention_backward", _backward)

    def turns_grad_off(*args):
        torch.set_grad_enabled(False)
        return _backward(*args)

    practice.check("attention_backward", turns_grad_off)
    assert torch.is_grad_enabled(), "the reader's global mode is put back"


def test_rope_with_positions_cast_to_float16_fails():
    namespace = {"torch": torch}
    exec(practice.solution("apply_rope"), namespace)
    right = namespace["solution_apply_rope"]
    assert practice.check("apply_rope", right)
    assert not practice.check("apply_rope", lambda x, positions: right(x, positions.half()))


def test_a_function_that_patches_torchs_comparisons_cannot_pass():
    originals = torch.equal, torch.isclose, torch.allclose

    def cheat(q, k, v, mask=None):
        torch.equal = lambda *a, **kw: True
        torch.allclose = lambda *a, **kw: True
        torch.isclose = lambda a, b, **kw: torch.ones(a.shape, dtype=torch.bool)
        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)

    try:
        assert not practice.check("attention", cheat)
        assert (torch.equal, torch.isclose, torch.allclose) == originals, "put back"
    finally:
        torch.equal, torch.isclose, torch.allclose = originals


def _merge_with_the_smaller_max(a, b):
    (m_a, l_a, u_a), (m_b, l_b, u_b) = a, b
    m = torch.minimum(m_a, m_b)  # the wrong running max
    c_a, c_b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, c_a * l_a + c_b * l_b, c_a[..., None] * u_a + c_b[..., None] * u_b


def test_wrong_numbers_everywhere_are_not_blamed_on_nan():
    """The wrong running max gives wrong finite numbers on every ordinary case and inf only
    where a side is empty: the hint is about the formula, not about NaN."""
    result = practice.check("merge", _merge_with_the_smaller_max)
    assert not result and result.mistake is None
    assert result.kind == "values", result.message
    hint = result.message.split("Hint:")[1]
    assert "Non-finite numbers appear" not in hint and "formula itself is off" in hint
    # Non-finite output on the ordinary cases too still earns the NaN hint.
    namespace = {"torch": torch}
    exec(practice.solution("merge"), namespace)

    def nan_everywhere(a, b):
        m, total, u = namespace["solution_merge"](a, b)
        return m, total * float("nan"), u

    nan_result = practice.check("merge", nan_everywhere)
    assert nan_result.kind == "nan", nan_result.message


def _kv_ignoring_dtype(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return 2 * batch * layers * positions * kv_heads * head_dim * 2  # always 2 bytes


def test_a_mistake_is_not_named_where_the_reader_is_right():
    """Ignoring the dtype halves the count on float32 cases, as keys_only does, but is right
    on bfloat16 ones, where keys_only is wrong: keys_only is not named, not even partly."""
    result = practice.check("kv_cache_bytes", _kv_ignoring_dtype)
    assert not result and result.mistake is None
    assert result.kind != "partial" and "keys_only" not in result.message, result.message
    assert "float32" in result.message  # the failing cases are listed, each with its dtype

    # keys_only and also the batch dropped on the large batches: wrong wherever keys_only is,
    # and equal to it on most failing cases: the partial match is still reported.
    def keys_only_and_batch(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
        b = 1 if batch > 3 else batch
        return b * layers * positions * kv_heads * head_dim * dtype.itemsize

    partial = practice.check("kv_cache_bytes", keys_only_and_batch)
    assert partial.kind == "partial" and "keys_only" in partial.message, partial.message


def test_the_catalogue_text_is_quoted_as_written():
    def keys_only_and_batch(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
        b = 1 if batch > 3 else batch
        return b * layers * positions * kv_heads * head_dim * dtype.itemsize

    message = practice.check("kv_cache_bytes", keys_only_and_batch).message
    description = dict(practice.MISTAKES["kv_cache_bytes"])["keys_only"]
    assert description.startswith("K and V") and description in message
    assert "k and V" not in message


def test_a_whole_check_has_a_time_cap_and_says_so():
    """A function that takes 2.9 s a call (under the per-call limit) once took 32 s to check;
    the check now stops TOTAL_LIMIT_S after its first case and says how many finished."""

    def slow(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
        time.sleep(2.9)
        return 2 * batch * layers * positions * kv_heads * head_dim * dtype.itemsize

    start = time.monotonic()
    result = practice.check("kv_cache_bytes", slow)
    took = time.monotonic() - start
    assert took < 2.9 + practice.TOTAL_LIMIT_S + 1.0, took
    assert not result and result.kind == "timeout"
    assert f"stops {practice.TOTAL_LIMIT_S:g} s after the first case" in result.message
    assert "cases finished in that time, all of them right" in result.message
    assert f"{practice.TOTAL_LIMIT_S:g} s" in str(practice.describe("kv_cache_bytes"))


# --- found by a second independent attack (62 submissions of its own) -----------------------


def test_a_mask_of_the_wrong_dtype_gets_a_hint_about_bool_not_about_casting_back():
    result = practice.check(
        "causal_mask", lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.int8).tril(t_k - t_q)
    )
    assert result.kind == "dtype" and "torch.bool" in result.message.split("Hint:")[1]
    assert ".to(x.dtype)" not in result.message


def test_when_only_some_outputs_are_wrong_the_hint_says_which():
    namespace = {"torch": torch}
    exec(practice.solution("merge"), namespace)

    def u_averaged(a, b):
        m, total, u = namespace["solution_merge"](a, b)
        return m, total, u / 2

    result = practice.check("merge", u_averaged)
    assert result.kind == "some_outputs", result.message
    assert "Only u is wrong: m and l agree" in result.message


def test_a_ratio_near_one_is_printed_with_the_digits_that_show_it():
    def one_position_too_many(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
        return 2 * batch * layers * (positions + 1) * kv_heads * head_dim * dtype.itemsize

    message = practice.check("kv_cache_bytes", one_position_too_many).message
    assert "(1 times the reference)" not in message and "1.000244" in message


def test_right_on_few_cases_names_those_cases():
    def softmax_over_queries(q, k, v):
        return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), 0) @ v

    result = practice.check("attention", softmax_over_queries)
    assert "It is right only on edge case: no keys" in result.message, result.message


def test_a_first_call_that_imports_does_not_eat_the_whole_checks_time(monkeypatch):
    """The first case may spend seconds importing (FlopCounterMode: 6 s under load, longer
    than the whole limit's share it would take); the total limit counts from after it, so a
    correct function is not cut short. Here the total limit is shrunk below the first
    call's time (a sleep under the per-call limit stands for the import)."""
    from attnbook.practice import _runner

    monkeypatch.setattr(_runner, "TOTAL_LIMIT_S", 1.0)
    calls = []

    def slow_first(*, t_q, t_k, heads, d_k, d_v):
        if not calls:
            time.sleep(1.5)
        calls.append(1)
        return 2 * heads * t_q * t_k * (d_k + d_v)

    result = practice.check("attention_flops", slow_first)
    assert result, result.message


# Round 3 of the learner attack (issue #30): an output left uninitialised passed some of the
# time, an infinite count was named as a catalogued mistake, and a function's change of the
# default dtype outlived the check.


def _attention_leaving_no_keys_uninitialised(q, k, v):
    if k.shape[-2] == 0:  # the answer for no keys is zeros; this leaves whatever memory held
        return torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v


def test_an_uninitialised_output_never_passes():
    for _ in range(5):  # it passed 4 times in 5 before, whenever the memory held zeros
        result = check("attention", _attention_leaving_no_keys_uninitialised)
        assert not result and result.status != "correct"
    assert not torch.are_deterministic_algorithms_enabled()  # the fill is the checker's only


def test_a_call_stopped_by_the_time_limit_leaves_no_state_behind():
    def hangs(q, k, v):  # stopped at the limit; in a thread it goes on after check returns
        time.sleep(8)
        return q

    import threading

    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("r", check("attention", hangs)))
    worker.start()  # not the main thread: the checker stops the call with a thread of its own
    worker.join()
    assert not result["r"]
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("value", [math.inf, -math.inf, float("nan")])
def test_a_non_finite_count_is_not_named_as_a_mistake(value):
    def flops(*, t_q, t_k, heads, d_k, d_v):
        return value

    result = check("attention_flops", flops)
    assert not result and result.mistake is None


def test_a_changed_default_dtype_does_not_outlive_the_call():
    def sets_float64(q, k, v):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v

    check("attention", sets_float64)
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


# --- a relation every failing result shares with the reference, named without a mistake ----


def _scores_transposed(q, k):
    return k @ q.transpose(-1, -2) / math.sqrt(q.shape[-1])


def _scores_plus_half(q, k):
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + 0.5


def _attention_unnormalised(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (s - s.amax(-1, keepdim=True)).exp() @ v  # the softmax's sum never divided


def _attention_half_scores(q, k, v):
    s = (q.half() @ k.half().transpose(-1, -2)).to(q.dtype) / math.sqrt(q.shape[-1])
    return s.softmax(-1) @ v


def _merge_heads_in_wrong_order(x):
    return x.flip(1).transpose(1, 2).flatten(-2)  # heads reversed: same numbers, elsewhere


def _solution(name):
    from attnbook.practice import _REGISTRY

    return _REGISTRY[name].solution


def _backward_sign_flipped(*args):
    return tuple(-g for g in _solution("attention_backward")(*args))


def _merge_l_first(a, b):
    m, total, u = _solution("merge")(a, b)
    return total, m, u


def _kv_bytes_plus_one(**c):
    return _solution("kv_cache_bytes")(**c) + 1


def _flops_minus_one(**s):
    return _solution("attention_flops")(**s) - 1


@pytest.mark.parametrize(
    ("name", "fn", "kind", "words"),
    [
        ("scaled_scores", _scores_plus_half, "offset", "plus one constant"),
        ("attention_backward", _backward_sign_flipped, "factor", "opposite sign"),
        ("merge", _merge_l_first, "order", "you return (l, m, u); the contract is (m, l, u)"),
        ("kv_cache_bytes", _kv_bytes_plus_one, "count_offset", "reference's +1"),
        ("attention_flops", _flops_minus_one, "count_offset", "reference's -1"),
        ("attention", _attention_unnormalised, "row_scale", "factor of its own"),
        ("attention", _attention_half_scores, "precision", "16-bit"),
        ("merge_heads", _merge_heads_in_wrong_order, "rearranged", "in other places"),
    ],
)
def test_an_uncatalogued_mistake_gets_the_relation_its_numbers_show(name, fn, kind, words):
    """Before these, each got only the exercise's generic hint (or "right only on the
    edge cases"); the observation must be true of the numbers and name no mistake."""
    result = check(name, fn)
    assert result.status == "wrong" and result.mistake is None
    assert result.kind == kind and words in result.message, result.message


def test_a_catalogued_transpose_keeps_its_name():
    assert check("scaled_scores", _scores_transposed).mistake == "transposed"


def test_the_relations_are_observations_that_can_fail():
    """Each relation is tested on numbers that have it and numbers that do not."""
    e = torch.arange(1.0, 13.0).reshape(3, 4)
    r = 1e-4
    assert _runner._structure([(e, e + 2.0, r)])[0] == "offset"
    assert _runner._structure([(e, e * torch.tensor([[1.0], [2.0], [3.0]]), r)])[0] == "row_scale"
    assert _runner._structure([(e, e.flip(0), r)])[0] == "rearranged"
    square = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    assert _runner._structure([(square, square.mT, r)])[0] == "transposed"
    assert _runner._structure([(e, e * 1.5, r)]) is None  # one factor: not per row (nor close)
    assert _runner._structure([(e, e + torch.randn(3, 4) * 0.5, r)]) is None
