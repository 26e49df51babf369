"""The speculative-decoding widget: its numbers against exact enumeration and exact
fractions, its edge cases, its refusals, its pictures and its controls."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnbook.speculative import step_distribution
from attnbook.widgets import speculative_speedup
from attnbook.widgets._live import js_source
from attnbook.widgets.draft_quality import K_MAX, SPEC, TIE, _fmt, speculative_state

REQUIRE = bool(os.environ.get("ATTNBOOK_REQUIRE_BROWSER") or os.environ.get("CI"))
ALPHAS = (0.0, 0.3, 0.56, 0.8, 0.95)
COSTS = (0.0, 0.05, 0.2, 0.5, 1.0)


def _tokens_by_enumeration(alpha: Fraction, k: int) -> Fraction:
    """Mean tokens of one speculative step, enumerated exactly: the draft always proposes
    token 0, which the target gives probability ``alpha`` in every context, so each draft
    token is accepted with probability ``alpha``, independently of the others."""

    def target(ctx):
        return [alpha, 1 - alpha]

    def draft(ctx):
        return [Fraction(1), Fraction(0)]

    steps = step_distribution(target, draft, (0,), k)
    assert sum(steps.values()) == 1
    return sum(len(seq) * w for seq, w in steps.items())


def _exact(alpha: Fraction, c: Fraction) -> tuple[list[Fraction], list[Fraction], int]:
    """Tokens as the geometric sum 1 + alpha + ... + alpha^k, speed-ups, and the best k (the
    smallest of the exact maximum), all in exact fractions."""
    tokens = [sum(alpha**i for i in range(j + 1)) for j in range(1, K_MAX + 1)]
    speedups = [t / (j * c + 1) for j, t in enumerate(tokens, start=1)]
    return tokens, speedups, 1 + speedups.index(max(speedups))


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("alpha", [Fraction(0), Fraction(3, 10), Fraction(14, 25)])
def test_tokens_per_pass_equal_an_exact_enumeration_of_the_step(alpha, k):
    state = speculative_state(alpha=float(alpha), k=k, c=0.1)
    assert state["tokens_per_pass"] == pytest.approx(float(_tokens_by_enumeration(alpha, k)))


@pytest.mark.parametrize("c", COSTS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_curves_and_best_k_equal_exact_fractions(alpha, c):
    state = speculative_state(alpha=alpha, k=3, c=c)
    tokens, speedups, best_k = _exact(Fraction(alpha), Fraction(c))
    assert state["ks"] == list(range(1, K_MAX + 1))
    assert state["tokens"] == pytest.approx([float(t) for t in tokens], rel=1e-12)
    assert state["speedups"] == pytest.approx([float(s) for s in speedups], rel=1e-12)
    # the chapter's form of the speed-up, (1 - a^(k+1)) / ((1 - a)(k c + 1)), Leviathan et al.
    leviathan = [(1 - alpha ** (j + 1)) / ((1 - alpha) * (j * c + 1)) for j in state["ks"]]
    assert state["speedups"] == pytest.approx(leviathan, rel=1e-12)
    assert state["best_k"] == best_k
    assert state["best_speedup"] == state["speedups"][best_k - 1] == max(state["speedups"])
    assert state["ceiling"] == pytest.approx(1 / (1 - alpha), rel=1e-15)
    assert state["step_cost"] == 3 * c + 1
    assert state["speedup"] == state["tokens_per_pass"] / state["step_cost"]


def test_alpha_zero_accepts_no_draft():
    for c in COSTS:
        state = speculative_state(alpha=0.0, k=5, c=c)
        assert state["tokens"] == [1.0] * K_MAX and state["ceiling"] == 1.0
        assert state["drafts_kept"] == 0.0 and state["tokens_per_pass"] == 1.0
        assert state["speedups"] == [1 / (j * c + 1) for j in state["ks"]]
        assert state["best_k"] == 1  # with c = 0 every k ties at 1x: the smallest wins


def test_one_draft_token_is_kept_with_probability_alpha():
    for alpha in ALPHAS:
        state = speculative_state(alpha=alpha, k=1, c=0.3)
        assert state["tokens_per_pass"] == pytest.approx(1 + alpha, rel=1e-15)
        assert state["drafts_kept"] == pytest.approx(alpha, rel=1e-12, abs=1e-15)
        assert state["speedup"] == pytest.approx((1 + alpha) / 1.3, rel=1e-15)


def test_a_free_draft_makes_the_speedup_the_tokens_and_the_longest_draft_best():
    for alpha in ALPHAS[1:]:
        state = speculative_state(alpha=alpha, k=4, c=0.0)
        assert state["speedups"] == state["tokens"] and state["step_cost"] == 1.0
        assert state["best_k"] == K_MAX
        # ... in the slider's range only: the speed-up is still rising there, and says so
        assert state["rising_at_end"] and state["gains"]
        assert state["best_label"] == f"best in 1–{K_MAX}: k = {K_MAX} (still rising)"
        value = _fmt(state["best_speedup"])
        assert state["best_text"] == f"best in 1–{K_MAX}: k = {K_MAX} ({value}×, still rising)"


def test_a_draft_as_slow_as_the_target_never_pays():
    for alpha in ALPHAS:
        state = speculative_state(alpha=alpha, k=4, c=1.0)
        assert max(state["speedups"]) < 1 and state["best_k"] == 1
        assert not state["gains"] and not state["rising_at_end"]
        # the ring is the least loss, not a "best" k
        label = f"no k gains; least loss at k = 1 ({_fmt(state['best_speedup'])}×)"
        assert state["best_label"] == state["best_text"] == label
        assert "best" not in label


@pytest.mark.parametrize(
    ("params", "gains", "rising", "label", "text"),
    [
        (  # a free draft, good acceptance: the optimum lies beyond k = 10
            {"alpha": 0.9, "k": 4, "c": 0.0},
            True,
            True,
            "best in 1–10: k = 10 (still rising)",
            "best in 1–10: k = 10 (6.86×, still rising)",
        ),
        (  # alpha near 1 still rises at k = 10 even when the draft is not free
            {"alpha": 0.9, "k": 4, "c": 0.05},
            True,
            True,
            "best in 1–10: k = 10 (still rising)",
            "best in 1–10: k = 10 (4.57×, still rising)",
        ),
        (  # a draft as slow as the target: every k loses
            {"alpha": 0.5, "k": 4, "c": 1.0},
            False,
            False,
            "no k gains; least loss at k = 1 (0.75×)",
            "no k gains; least loss at k = 1 (0.75×)",
        ),
        (  # alpha == c: k = 1 gives (1 + alpha)/(1 + c) = 1 exactly, every longer k loses
            {"alpha": 0.5, "k": 4, "c": 0.5},
            False,
            False,
            "no k gains; k = 1 breaks even (1×)",
            "no k gains; k = 1 breaks even (1×)",
        ),
        (  # nothing accepted, nothing paid: every k ties at 1x, the smallest is ringed
            {"alpha": 0.0, "k": 4, "c": 0.0},
            False,
            False,
            "no k gains; k = 1 breaks even (1×)",
            "no k gains; k = 1 breaks even (1×)",
        ),
        (  # the chapter's setting: an optimum inside the range
            {"alpha": 0.56, "k": 4, "c": 0.05},
            True,
            False,
            "best k = 4",
            "best k = 4 (1.79×)",
        ),
        (  # only k = 1 gains, by 4%
            {"alpha": 0.56, "k": 4, "c": 0.5},
            True,
            False,
            "best k = 1",
            "best k = 1 (1.04×)",
        ),
    ],
)
def test_the_ring_says_when_the_best_k_is_at_the_edge_or_nothing_gains(
    params, gains, rising, label, text
):
    state = speculative_state(**params)
    assert (state["gains"], state["rising_at_end"]) == (gains, rising)
    assert (state["best_label"], state["best_text"]) == (label, text)


@given(
    st.floats(min_value=0.0, max_value=0.95),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_still_rising_means_the_ring_is_at_the_slider_end_and_gains_means_alpha_above_c(alpha, c):
    state = speculative_state(alpha=alpha, k=1, c=c)
    # the speed-up rises to its peak and falls after it (a concave over an affine function),
    # so rising at K_MAX (by the tie rule's own margin) is exactly a best k of K_MAX
    assert state["rising_at_end"] == (state["best_k"] == K_MAX)
    assert state["gains"] == (state["best_speedup"] > 1 + TIE)
    if abs(alpha - c) > 1e-9:  # some k gains exactly when alpha > c (k = 1 already does)
        assert state["gains"] == (alpha > c)
    if not state["gains"]:
        assert state["best_k"] == 1 and state["best_label"].startswith("no k gains; ")
    elif state["rising_at_end"]:
        assert state["best_label"].startswith(f"best in 1–{K_MAX}: k = {K_MAX} ")
    else:
        assert state["best_label"] == f"best k = {state['best_k']}"


def test_the_chapter_setting():
    state = speculative_speedup(alpha=0.56, k=4, c=0.05).state()
    assert state["best_k"] == 4 and round(state["best_speedup"], 2) == 1.79
    assert round(state["drafts_kept"], 3) == 0.287 and round(state["ceiling"], 2) == 2.27
    assert speculative_state(alpha=0.56, k=4, c=0.2)["best_k"] == 2
    assert speculative_state(alpha=0.8, k=4, c=0.05)["best_k"] == 8


def test_the_widget_opens_at_the_chapter_setting():
    chapter = {"alpha": 0.56, "k": 4, "c": 0.05}
    assert {c.name: c.value for c in SPEC.controls} == chapter
    assert speculative_speedup().params == chapter
    assert speculative_state() == speculative_state(**chapter)


def test_the_cost_control_says_its_unit():
    labels = {c.name: c.label for c in SPEC.controls}
    assert "target passes" in labels["c"] and labels["c"].startswith("draft cost c")
    # short enough for one slider row of a 390 px phone (measured in Chromium: two lines)
    assert all(len(label) <= 36 for label in labels.values())


@given(
    st.floats(min_value=0.0, max_value=0.95),
    st.integers(1, K_MAX),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_tokens_stay_under_the_ceiling_and_cost_moves_the_best_k_down(alpha, k, c1, c2):
    state = speculative_state(alpha=alpha, k=k, c=min(c1, c2))
    dearer = speculative_state(alpha=alpha, k=k, c=max(c1, c2))
    tokens = state["tokens"]
    assert all(1 <= t <= j + 1 for j, t in zip(state["ks"], tokens, strict=True))
    assert all(t <= state["ceiling"] * (1 + 1e-12) for t in tokens)
    assert tokens == sorted(tokens) and 0 <= state["drafts_kept"] <= 1
    # k beats a shorter k' at cost c only if it does at every cheaper cost: (k'c+1)/(kc+1)
    # falls with c
    assert dearer["best_k"] <= state["best_k"]
    assert all(a >= b for a, b in zip(state["speedups"], dearer["speedups"], strict=True))


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"alpha": 1.0}, ValueError, r"alpha must lie in \[0, 1\), got 1\.0"),
        ({"alpha": -0.1}, ValueError, r"alpha must lie in \[0, 1\)"),
        ({"alpha": float("nan")}, ValueError, "alpha must be finite"),
        ({"alpha": "0.5"}, TypeError, "alpha must be a real number"),
        ({"alpha": True}, TypeError, "alpha must be a real number"),
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": K_MAX + 1}, ValueError, rf"k must lie in \[1, {K_MAX}\], got {K_MAX + 1}"),
        ({"k": 2.5}, ValueError, r"k must be a whole number, got 2\.5"),
        ({"k": "4"}, TypeError, "k must be a whole number"),
        ({"c": -0.01}, ValueError, r"c must be >= 0, got -0\.01"),
        ({"c": float("inf")}, ValueError, "c must be finite"),
        ({"c": None}, TypeError, "c must be a real number"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(overrides, error, message):
    with pytest.raises(error, match=message):
        speculative_state(**({"alpha": 0.5, "k": 4, "c": 0.1} | overrides))


def test_whole_floats_count_as_ints():
    assert speculative_state(alpha=0.5, k=4.0, c=0) == speculative_state(alpha=0.5, k=4, c=0.0)
    assert speculative_speedup(k=4.0).params["k"] == 4


def test_impossible_settings_are_rejected_without_raising():
    widget = speculative_speedup()
    assert widget.update(alpha=0.96) is False  # above the slider's range
    assert widget.update(k=11) is False
    assert widget.update(c=-0.5) is False
    assert widget.params == {"alpha": 0.56, "k": 4, "c": 0.05}
    assert widget.update(alpha=0.8, k=6, c=0.2) is True
    assert widget.params == {"alpha": 0.8, "k": 6, "c": 0.2}


def test_the_k_slider_covers_the_curves():
    (control,) = (c for c in SPEC.controls if c.name == "k")
    state = speculative_state(alpha=0.5, k=1, c=0.0)
    assert (control.min, control.max) == (min(state["ks"]), max(state["ks"]))


def test_figure_has_labelled_axes_and_small_multiples_one_panel_per_alpha():
    fig = speculative_speedup().figure(alpha=0.56)
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert axes[1].get_title().endswith("ring: best k = 4 (1.79×)")
    panels = speculative_speedup().small_multiples("alpha", [0.5, 0.7, 0.9], c=0.05)
    visible = [ax for ax in panels.get_axes() if ax.get_visible()]
    assert len(visible) == 3 and all(ax.get_xlabel() for ax in visible)
    titles = [ax.get_title() for ax in visible]
    assert titles[0].endswith("\nbest k = 3 (1.63×)")
    assert titles[2].endswith("\nbest in 1–10:\nk = 10 (4.57×, still rising)")
    edges = speculative_speedup().small_multiples("c", [0.0, 1.0], alpha=0.9)
    assert edges.get_axes()[1].get_title().endswith("\nno k gains;\nleast loss at k = 1 (0.95×)")
    assert "ring: no k gains; least loss" in speculative_speedup().figure(c=1.0).axes[1].get_title()


def test_html_face_has_every_control():
    page = speculative_speedup(alpha=0.56, k=6, c=0.2).html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert 'data-widget="speculative_speedup"' in page and 'value="0.56"' in page


PICTURE = """
const i = JSON.parse(require('fs').readFileSync(0, 'utf8'));
eval(i.runtime); eval(i.widget);
const w = globalThis.attnbook.widgets.speculative_speedup;
const out = i.cases.map((p) => { const s = w.compute(p, i.data);
  return { state: s, svg: w.render(s, 700), narrow: w.render(s, 346), readout: w.readout(s) }; });
const fmt = i.numbers.map((x) => globalThis.attnbook.fmt(x, 3));
process.stdout.write(JSON.stringify({ out, fmt }));
"""
# the edge cases and a middle one: c = 0 with alpha 0.9 (still rising at k = 10), c = 1 (no k
# gains), alpha == c (k = 1 breaks even), alpha = 0 and c = 0 (all tie at 1x), the chapter's
EDGES = [
    {"alpha": 0.56, "k": 4, "c": 0.05},
    {"alpha": 0.9, "k": 3, "c": 0.0},
    {"alpha": 0.95, "k": 10, "c": 0.0},
    {"alpha": 0.5, "k": 7, "c": 1.0},
    {"alpha": 0.95, "k": 2, "c": 1.0},
    {"alpha": 0.3, "k": 1, "c": 0.3},
    {"alpha": 0.0, "k": 1, "c": 0.0},
    {"alpha": 0.8, "k": 2, "c": 0.05},
]
NEW = ("best_k", "best_speedup", "gains", "rising_at_end", "best_label", "best_text")


def _drawn(cases, numbers=()):
    payload = {
        "runtime": js_source("runtime"),
        "widget": js_source(SPEC.name),
        "data": SPEC.data,
        "cases": cases,
        "numbers": list(numbers),
    }
    return json.loads(
        subprocess.run(
            ["node", "-e", PICTURE],
            input=json.dumps(payload),
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    )


node = pytest.mark.skipif(
    shutil.which("node") is None and not REQUIRE, reason="Node.js is not installed"
)


@node
def test_the_picture_marks_k_the_best_k_and_the_ceiling():
    drawn = _drawn(EDGES)["out"]
    for params, out in zip(EDGES, drawn, strict=True):
        state = speculative_state(**params)
        # the new facts and their wording, the same in both faces
        assert {key: out["state"][key] for key in NEW} == {key: state[key] for key in NEW}
        for svg in (out["svg"], out["narrow"]):

            def values(cls, svg=svg):
                return [float(v) for v in re.findall(rf'class="{cls}" data-value="([^"]+)"', svg)]

            assert values("current") == pytest.approx([state["tokens_per_pass"], state["speedup"]])
            assert values("best") == [state["best_k"]]
            assert values("ceiling") == pytest.approx([state["ceiling"]])
            assert values("no-gain") == [1.0]
            assert len(values("point")) == 2 * K_MAX
            assert re.findall(r'class="best-label">([^<]*)<', svg) == [state["best_label"]]
            assert "1/(1−α)" in svg
            assert math.isclose(values("current")[1], state["speedup"])
        assert out["readout"].endswith(f"× · {state['best_text']}"), out["readout"]
    readouts = [out["readout"] for out in drawn]
    assert "speed-up 1.79× · best k = 4 (1.79×)" in readouts[0]
    assert "28.7% of drafts kept" in readouts[0]
    assert readouts[1].endswith("best in 1–10: k = 10 (6.86×, still rising)")
    assert readouts[3].endswith("no k gains; least loss at k = 1 (0.75×)")
    assert readouts[5].endswith("no k gains; k = 1 breaks even (1×)")
    assert readouts[6].endswith("no k gains; k = 1 breaks even (1×)")
    assert not any("best k = 10" in r or "best k = 1 " in r for r in readouts[1:7])


@node
def test_numbers_in_the_texts_are_written_as_the_javascript_writes_them():
    # 1.625 and 0.03125 are exact halves at 3 digits (toPrecision rounds them up, as _fmt does,
    # where Python's format would round to even); 2.675 and 9.995 only look like halves
    ties = [1.625, 0.03125, 2.675, 1.005, 9.995, 0.9995, 1.0, 10.0, 0.5, 19.99]
    speedups = [
        s for a in ALPHAS for c in COSTS for s in speculative_state(alpha=a, k=1, c=c)["speedups"]
    ]
    numbers = [*ties, *speedups, 1 / 11, 1 / 3, 2 / 3, 0.0]
    assert _drawn([], numbers)["fmt"] == [_fmt(x) for x in numbers]
    assert [_fmt(x) for x in ties[:6]] == ["1.63", "0.0313", "2.67", "1", "9.99", "1"]
    assert f"{1.625:.3g}" == "1.62"  # why _fmt does not use format()
