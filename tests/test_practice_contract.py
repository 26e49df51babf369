"""attnbook.practice, issue 30: no false pass on the inputs a model really gives (16-bit
angles at large positions, non-contiguous heads, expanded tensors), a mistake named only when
the cases single it out, a checker that never raises or hangs, ``bool(result)``, even rules for
what may be returned, a message line per case with a hint that fits, and help on demand."""

from __future__ import annotations

import collections
import math
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook import practice
from attnbook.practice import EXERCISES, _runner, check, describe, hint, progress, solution

REGISTRY = practice._REGISTRY


@pytest.fixture
def short_limit(monkeypatch):
    """A 0.3 s limit per call, so that the tests of the time limit stay fast."""
    monkeypatch.setattr(_runner, "TIME_LIMIT_S", 0.3)
    return 0.3


# --- (1) false passes -----------------------------------------------------------------------


def _rope_in(dtype_of_angles):
    def rope(x, positions):
        d = x.shape[-1]
        dt = x.dtype if dtype_of_angles is None else dtype_of_angles
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=dt) / d)
        angles = positions.to(dt)[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)

    return rope


def test_rope_angles_in_the_inputs_16_bit_dtype_fail_at_large_positions():
    result = check("apply_rope", _rope_in(None))
    assert not result and not result.passed
    failed = [line for line in result.cases if line.startswith("✗")]
    assert any("positions 1000 to 4000" in line for line in failed)
    assert any("bfloat16" in line for line in failed)
    # The same code with float32 angles is right: the cases test the angles, not luck.
    assert check("apply_rope", _rope_in(torch.float32))


def test_a_flatten_with_view_fails_on_the_heads_split_heads_returns():
    def flat_view(q, k, v):
        lead = q.shape[:-2]
        qf, kf, vf = (t.view(-1, *t.shape[-2:]) for t in (q, k, v))
        return F.scaled_dot_product_attention(qf, kf, vf).view(*lead, q.shape[-2], v.shape[-1])

    result = check("attention", flat_view)
    assert not result.passed and result.kind == "view"
    assert any("non-contiguous" in line and line.startswith("✗") for line in result.cases)
    assert "reshape()" in result.message


def test_merge_heads_with_a_bare_view_fails_on_split_heads_output():
    result = check("merge_heads", lambda x: x.transpose(1, 2).contiguous().view(
        x.shape[0], x.shape[2], -1))  # fmt: skip
    assert result  # right
    result = check("merge_heads", lambda x: x.permute(0, 2, 1, 3).view(x.shape[0], x.shape[2], -1))
    assert not result.passed


def test_writing_into_an_expanded_input_fails():
    def in_place(q, k, v):
        k.mul_(1.0)  # raises on a stride-0 tensor, and is a change in place elsewhere
        return F.scaled_dot_product_attention(q, k, v)

    assert not check("attention", in_place).passed


def test_an_extra_leading_dim_is_tested():
    def three_dims_only(q, k, v):
        if q.dim() > 4:
            raise ValueError("too many dims")
        return F.scaled_dot_product_attention(q, k, v)

    result = check("attention", three_dims_only)
    assert not result.passed and result.kind == "some_cases"
    assert "three leading dims" in result.message


# --- (2) a mistake is named only when the behaviour singles it out --------------------------


def test_flops_with_widths_divided_by_heads_is_told_apart_from_one_head():
    def divided(*, t_q, t_k, heads, d_k, d_v):
        return heads * 2 * t_q * t_k * (d_k // heads + d_v // heads)

    def one_head(*, t_q, t_k, heads, d_k, d_v):
        return 2 * t_q * t_k * (d_k + d_v)

    assert check("attention_flops", divided).mistake == "widths_divided_by_heads"
    result = check("attention_flops", one_head)
    assert result.mistake == "forgot_heads"
    # Float division cancels the heads exactly: the description names both ways to get there.
    assert "divided by heads" in result.message
    result = check("attention_flops", lambda **s: 2 * s["heads"] * s["t_q"] * s["t_k"] * (
        s["d_k"] / s["heads"] + s["d_v"] / s["heads"]))  # fmt: skip
    assert result.mistake == "forgot_heads"


def test_a_partial_match_is_reported_without_naming_the_mistake():
    # The scale is missing only where dk > 4: it matches no_scale on some cases, not all.
    def half_fixed(q, k, v):
        scale = 1 / math.sqrt(q.shape[-1]) if q.shape[-1] <= 4 else 1.0
        return F.scaled_dot_product_attention(q, k, v, scale=scale)

    result = check("attention", half_fixed)
    assert not result.passed and result.mistake is None and result.kind == "partial"
    assert "matches the known mistake no_scale on" in result.message


# --- (3) check never raises and never hangs --------------------------------------------------


@pytest.mark.parametrize(
    "error", [SystemExit(3), GeneratorExit(), OverflowError("big"), RecursionError(), MemoryError()]
)
def test_any_exception_but_keyboard_interrupt_is_reported(error):
    def raises(q, k, v):
        raise error

    result = check("attention", raises)
    assert not result.passed and type(error).__name__ in result.message


def test_a_custom_base_exception_is_reported():
    class Escape(BaseException):
        pass

    def raises(q, k, v):
        raise Escape

    assert "Escape" in check("attention", raises).message


def test_keyboard_interrupt_is_passed_on():
    def interrupted(q, k, v):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check("attention", interrupted)


def test_a_huge_integer_answer_is_compared_not_crashed():
    result = check("kv_cache_bytes", lambda **c: c["layers"] ** c["positions"])
    assert not result.passed and "digits" in result.message
    result = check("attention_flops", lambda **s: 10**400)
    assert not result.passed and result.mistake is None


def test_outputs_that_resist_comparison_are_reported():
    class Odd:
        def __eq__(self, other):
            raise RuntimeError("no")

        def __bool__(self):
            raise RuntimeError("no")

    for fn in (lambda **c: Odd(), lambda **c: float("nan"), lambda **c: "12", lambda **c: [1]):
        result = check("kv_cache_bytes", fn)
        assert not result.passed
    assert not check("merge", lambda a, b: Odd()).passed
    assert not check("attention", lambda q, k, v: q.to("meta")).passed


def test_a_function_that_never_returns_is_stopped_and_the_limit_stated(short_limit):
    def forever(q, k, v):
        while True:
            pass

    result = check("attention", forever)
    assert not result.passed and result.kind == "timeout"
    assert f"did not return within {short_limit:g} s" in result.message
    assert (
        sum(line.startswith("·") for line in result.cases) == len(REGISTRY["attention"].cases) - 1
    )


def test_a_function_that_swallows_the_first_alarm_is_still_stopped(short_limit):
    def stubborn(q, k, v):
        while True:
            try:
                while True:
                    pass
            except BaseException:  # the reader's bare except
                break
        while True:
            pass

    assert check("attention", stubborn).kind == "timeout"


def test_an_import_is_never_cut_short(short_limit, tmp_path, monkeypatch):
    # A first use of a library may import for longer than the limit; stopping it half-way
    # would leave the module broken for the rest of the kernel.
    (tmp_path / "slow_module_for_practice.py").write_text(
        "import time\ntime.sleep(0.8)\nDONE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def imports(q, k, v):
        import slow_module_for_practice

        assert slow_module_for_practice.DONE
        return F.scaled_dot_product_attention(q, k, v)

    result = check("attention", imports)
    import sys

    assert sys.modules["slow_module_for_practice"].DONE
    assert result, result  # the retry finds the import done
    monkeypatch.delitem(sys.modules, "slow_module_for_practice")


def test_the_time_limit_works_off_the_main_thread(short_limit):
    # Where SIGALRM cannot be used (Windows, a worker thread), a daemon thread is abandoned
    # and asked to stop at its next Python step.
    box = {}

    def forever(q, k, v):
        while True:
            pass

    worker = threading.Thread(target=lambda: box.update(r=check("attention", forever)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and box["r"].kind == "timeout"


def test_the_alarm_is_cleared_after_a_check_and_an_earlier_timer_put_back():
    import signal

    check("attention", lambda q, k, v: q)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None, signal.SIG_IGN)
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 60.0)  # another tool's timer, far in the future
        check("attention", lambda q, k, v: q)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 30.0 < left <= 60.0 and not fired
        assert signal.getsignal(signal.SIGALRM) is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- (4) bool(result), and what a stub is ----------------------------------------------------


def test_assert_check_fails_on_a_wrong_answer_and_on_a_stub():
    def stub(q, k, v):
        raise NotImplementedError

    assert not check("attention", lambda q, k, v: q)
    stubbed = check("attention", stub)
    assert stubbed.passed and not stubbed  # runs the chapter, but is no answer
    assert check("attention", REGISTRY["attention"].solution)


def test_a_function_raising_not_implemented_on_some_cases_only_is_not_a_stub():
    def partly(q, k, v):
        if k.shape[-2] == 0:
            raise NotImplementedError  # the empty case is left for later
        return F.scaled_dot_product_attention(q, k, v)

    result = check("attention", partly)
    assert not result.passed and result.status == "wrong" and result.kind == "not_implemented"
    assert "no keys" in result.message


# --- (5) one set of rules for what may be returned -------------------------------------------


def _kv(**c):
    return 2 * c["batch"] * c["layers"] * c["positions"] * c["kv_heads"] * c["head_dim"] * (
        c["dtype"].itemsize)  # fmt: skip


def _float64_tensor(n):
    return torch.tensor(float(n), dtype=torch.float64)  # exact; float32 is not (next test)


@pytest.mark.parametrize(
    "wrap",
    [int, float, np.int64, np.float64, torch.tensor, np.array, _float64_tensor],
    ids=["int", "float", "np.int64", "np.float64", "0-d tensor", "0-d array", "0-d float tensor"],
)
def test_every_real_scalar_type_is_a_count(wrap):
    assert check("kv_cache_bytes", lambda **c: wrap(_kv(**c)))


@pytest.mark.parametrize("name", ["kv_cache_bytes", "attention_flops"])
def test_a_count_held_in_float32_is_refused_where_float32_cannot_hold_it(name):
    """A count must be exact: one computed in float32 arithmetic (a learner's
    ``torch.tensor(2.0) * ...``) is right on small cases only; a case beyond 2**24 whose count
    float32 rounds catches it (a learner attack found both passing before)."""
    from attnbook.practice import _costs

    exact = _kv if name == "kv_cache_bytes" else lambda **s: _costs.attention_flops(**s)
    result = check(name, lambda **c: torch.tensor(float(exact(**c)), dtype=torch.float32))
    assert not result.passed and "float32 cannot hold exactly" in result.message, result
    assert check(name, lambda **c: torch.tensor(float(exact(**c)), dtype=torch.float64))


@pytest.mark.parametrize(
    ("wrap", "words"),
    [(bool, "bool"), (str, "str"), (lambda n: torch.tensor([n]), "shape (1,)"),
     (lambda n: [n], "list"), (lambda n: n + 0.5, "times the reference")],
)  # fmt: skip
def test_what_is_not_a_count_is_refused_with_the_reason(wrap, words):
    result = check("kv_cache_bytes", lambda **c: wrap(_kv(**c)))
    assert not result.passed and words in result.message


def test_merge_accepts_lists_and_namedtuples_and_demands_the_inputs_dtype():
    sol = REGISTRY["merge"].solution
    state = collections.namedtuple("State", "m l u")
    assert check("merge", lambda a, b: list(sol(a, b)))
    assert check("merge", lambda a, b: state(*sol(a, b)))
    result = check("merge", lambda a, b: tuple(t.double() for t in sol(a, b)))
    assert not result.passed and result.kind == "dtype" and "float32" in result.message


# --- (6) messages ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXERCISES)
def test_every_case_gets_a_line(name):
    result = check(name, lambda *a, **k: None)
    lines = result.cases
    assert len(lines) == len(REGISTRY[name].cases)
    assert all(line.startswith("✗") for line in lines)
    assert all(line in result.message for line in lines)
    ok = check(name, REGISTRY[name].reference)
    assert all(line.startswith("✓") for line in ok.cases)


def test_the_hint_fits_the_failure_kind():
    sdpa = F.scaled_dot_product_attention
    kinds = {
        "shape": lambda q, k, v: sdpa(q, k, v)[..., :1],
        "dtype": lambda q, k, v: sdpa(q.double(), k.double(), v.double()),
        "type": lambda q, k, v: sdpa(q, k, v).tolist(),
        "nan": lambda q, k, v: sdpa(q, k, v) * float("nan"),
        "mutated": lambda q, k, v: sdpa(q, k, v.mul_(1.0).add_(1.0).sub_(1.0).mul_(2.0) / 2),
        "factor": lambda q, k, v: 3 * sdpa(q, k, v),
        "exception": lambda q, k, v: 1 / 0,
        "signature": lambda q, k: q,
    }
    for kind, fn in kinds.items():
        result = check("attention", fn)
        assert not result.passed and result.kind == kind, (kind, result)
        assert REGISTRY["attention"].hint not in result.message, kind


def test_describe_gives_one_exercises_contract():
    text = describe("scaled_scores")
    assert text.startswith("scaled_scores(q, k)")
    assert "attention(q, k, v)``" not in text  # not the whole module's docstring
    assert "dtype of ``q``" in text and "at most" in text
    assert "edge case: no keys" in text
    assert "exact count" in describe("attention_flops")


# --- (7) help on demand, and progress ---------------------------------------------------------


@pytest.mark.parametrize("name", EXERCISES)
def test_every_solution_is_shown_and_passes(name):
    source = solution(name)
    assert source.startswith("def solution_")
    space = {"torch": torch, "math": math}
    exec(source, space)
    fn = next(v for k, v in space.items() if k.startswith("solution_"))
    assert check(name, fn)
    assert hint(name).startswith(f"Hint for {REGISTRY[name].signature}")


def test_the_hint_after_a_failed_attempt_fits_it():
    check("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v)[..., :1])
    assert hint("attention").startswith("Your last attempt: The output's shape is wrong")


def test_progress_lists_what_passed_in_this_kernel(monkeypatch):
    monkeypatch.setattr(practice, "_LAST", {})
    monkeypatch.setattr(practice, "_PASSED_BY", {})
    assert progress().startswith(f"Passed in this kernel: 0 of {len(EXERCISES)}")

    def my_causal(t_q, t_k):
        return torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)

    check("causal_mask", my_causal)
    check("padding_mask", lambda n, t: None)
    text = progress()
    assert "1 of" in text and "passed by my_causal" in text
    assert "padding_mask" in text and "last try: Not yet right" in text
    assert repr(text) == str(text)  # shows as plain text in a notebook
