"""The RoPE widget's numbers against attnbook.rope.apply_rope and a rotation matrix."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.rope import apply_rope, rope_frequencies
from attnbook.widgets import rope_rotation
from attnbook.widgets.rope_plane import K_PAIR, Q_PAIR, SPEC, D, rope_state


def embed(pair_values, pair: int) -> torch.Tensor:
    """A d=D vector that is zero except in feature pair ``pair`` (interleaved layout)."""
    x = torch.zeros(1, D, dtype=torch.float64)
    x[0, 2 * pair], x[0, 2 * pair + 1] = pair_values
    return x


@given(
    m=st.integers(0, 32),
    n=st.integers(0, 32),
    pair=st.integers(0, D // 2 - 1),
    log10_base=st.sampled_from([2.0, 3.5, 4.0, 6.0]),
)
def test_state_matches_apply_rope(m, n, pair, log10_base):
    state = rope_state(m=m, n=n, pair=pair, log10_base=log10_base)
    base = 10.0**log10_base
    assert state["theta"] == pytest.approx(rope_frequencies(D, base=base)[pair].item(), rel=1e-12)
    q = apply_rope(embed(Q_PAIR, pair), torch.tensor([m]), base=base, layout="interleaved")
    k = apply_rope(embed(K_PAIR, pair), torch.tensor([n]), base=base, layout="interleaved")
    assert state["q_rot"] == pytest.approx(q[0, 2 * pair : 2 * pair + 2].tolist(), abs=1e-12)
    assert state["k_rot"] == pytest.approx(k[0, 2 * pair : 2 * pair + 2].tolist(), abs=1e-12)
    assert state["score"] == pytest.approx((q @ k.T).item(), abs=1e-12)
    assert state["score"] == pytest.approx(state["score_relative"], abs=1e-12)
    assert state["q_norm"] == pytest.approx(1.0) and state["k_norm"] == pytest.approx(1.0)


def test_worked_offset_and_curve():
    state = rope_state(m=1, n=3, pair=0, log10_base=4.0)
    assert state["theta"] == 1.0 and state["offset"] == 2
    angle = math.atan2(K_PAIR[1], K_PAIR[0]) + 2.0  # key angle plus the relative turn
    assert state["score"] == pytest.approx(math.cos(angle), abs=1e-12)
    i = state["curve_offset"].index(2)
    assert state["curve_score"][i] == pytest.approx(state["score"], abs=1e-12)


def test_figure_has_labelled_axes():
    fig = rope_rotation().figure(m=2, n=7, pair=3)
    plane, curve = fig.axes[:2]
    assert plane.get_xlabel() and plane.get_ylabel()
    assert curve.get_xlabel().startswith("offset") and curve.get_ylabel().startswith("score")


def test_small_multiples_draw_one_panel_per_value():
    fig = rope_rotation().small_multiples("n", [1, 2, 3, 5])
    assert sum(ax.get_visible() for ax in fig.axes) == 4


def test_impossible_settings_are_rejected():
    widget = rope_rotation()
    assert widget.update(pair=D // 2) is False  # there are only D/2 pairs
    assert widget.update(m=-1) is False
    assert widget.update(m=1.5) is False
    assert widget.update(pair=2) is True and widget.params["pair"] == 2
    with pytest.raises(ValueError, match="pair must be"):
        rope_state(m=0, n=0, pair=D // 2, log10_base=4.0)


def test_every_control_moves_the_default_picture():
    widget = rope_rotation()
    assert widget.params["pair"] == 1  # pair 0 turns 1 rad/position for every base
    base = widget.state()
    for change in ({"m": 2}, {"n": 4}, {"pair": 2}, {"log10_base": 3.0}):
        assert widget.state(**change)["score"] != pytest.approx(base["score"]), change
    assert rope_state(m=0, n=1, pair=0, log10_base=2.0)["theta"] == 1.0


def test_the_curve_covers_every_offset_the_sliders_make():
    (m,) = (c for c in SPEC.controls if c.name == "m")
    state = rope_state(m=int(m.max), n=0, pair=1, log10_base=4.0)
    assert state["offset"] == -m.max and state["curve_offset"][0] == -m.max
    assert state["curve_offset"][-1] == m.max


def test_html_contains_every_control():
    page = rope_rotation().html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert 'data-widget="rope_rotation"' in page
