"""The online softmax stepper shows the true running softmax of the keys it has merged."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.widgets import online_softmax_stepper
from attnbook.widgets.online_softmax import BLOCK_SIZES, DATA, ORDERS, SPEC, online_softmax_state

SCORES = torch.tensor(DATA["scores"], dtype=torch.float64)
VALUES = torch.tensor(DATA["values"], dtype=torch.float64)


def test_data_is_fixed_and_has_a_late_maximum():
    assert len(DATA["scores"]) == len(DATA["values"]) == 16
    assert max(range(16), key=DATA["scores"].__getitem__) == 12  # the max arrives late
    assert SPEC.data is DATA


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_every_step_equals_softmax_over_the_keys_seen(block_size, order):
    n_blocks = math.ceil(16 / block_size)
    for step in range(n_blocks + 1):
        state = online_softmax_state(step=step, block_size=block_size, order=order)
        seen = torch.tensor(state["seen"])
        assert int(seen.sum()) == sum(stop - start for start, stop in state["blocks"][:step])
        if step == 0:
            assert state["m"] is None and state["out"] is None and not seen.any()
            continue
        s, v = SCORES[seen], VALUES[seen]
        p = torch.softmax(s, dim=0)  # independent oracle: torch's softmax over the seen keys
        assert state["m"] == pytest.approx(float(s.max()), abs=0)
        assert state["l"] == pytest.approx(float(torch.exp(s - s.max()).sum()), rel=1e-12)
        assert state["out"] == pytest.approx(float(p @ v), rel=1e-12)
        weights = torch.tensor(state["weights"], dtype=torch.float64)
        torch.testing.assert_close(weights[seen], p, rtol=1e-12, atol=1e-15)
        assert float(weights[~seen].abs().sum()) == 0.0


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_last_step_is_the_full_softmax_whatever_the_blocks(block_size, order):
    n_blocks = math.ceil(16 / block_size)
    state = online_softmax_state(step=n_blocks, block_size=block_size, order=order)
    exact = float(torch.softmax(SCORES, dim=0) @ VALUES)
    assert state["exact"] == pytest.approx(exact, rel=1e-12)
    assert state["out"] == pytest.approx(exact, rel=1e-12)
    assert state["out_trace"][-1] == state["out"] and len(state["out_trace"]) == n_blocks
    assert all(state["seen"])


def test_blocks_cover_the_keys_once_and_the_last_may_be_short():
    state = online_softmax_state(step=0, block_size=5, order="left to right")
    assert state["blocks"] == [[0, 5], [5, 10], [10, 15], [15, 16]]
    reverse = online_softmax_state(step=0, block_size=5, order="right to left")
    assert reverse["blocks"] == state["blocks"][::-1]


def test_rescale_is_the_factor_that_moves_the_old_state_to_the_new_max():
    state = online_softmax_state(step=4, block_size=4, order="left to right")  # max arrives
    m_old, m_new = state["m_trace"][2], state["m_trace"][3]
    assert m_new > m_old
    assert state["rescale"] == pytest.approx(math.exp(m_old - m_new), rel=1e-15)
    assert online_softmax_state(step=1, block_size=4, order="left to right")["rescale"] is None


def test_figure_has_labelled_axes():
    fig = online_softmax_stepper().figure()
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_small_multiples_draw_one_labelled_panel_per_step():
    fig = online_softmax_stepper().small_multiples("step", [1, 2, 3, 4], ncols=2)
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert len(axes) == 4
    assert all(ax.get_xlabel() and ax.get_title() for ax in axes)


@pytest.mark.parametrize(
    "bad",
    [
        {"step": 17},
        {"block_size": 7},
        {"order": "random"},
        {"step": -1},
    ],
)
def test_impossible_settings_are_rejected_without_changing_the_widget(bad):
    widget = online_softmax_stepper(step=2, block_size=4)
    assert widget.update(**bad) is False
    assert widget.params == {"step": 2, "block_size": 4, "order": "left to right"}


def test_a_step_past_the_last_block_shows_the_finished_state():
    past = online_softmax_state(step=9, block_size=8, order="left to right")
    done = online_softmax_state(step=2, block_size=8, order="left to right")
    assert past == done and past["step"] == past["n_blocks"] == 2
    with pytest.raises(ValueError, match=r"step must be a whole number in \[0, 16\], got 17"):
        online_softmax_state(step=17, block_size=8, order="left to right")
    with pytest.raises(ValueError, match=r"block_size must be a whole number, got 2\.5"):
        online_softmax_state(step=1, block_size=2.5, order="left to right")
    assert online_softmax_state(step=3.0, block_size=4.0, order="left to right") == (
        online_softmax_state(step=3, block_size=4, order="left to right")
    )


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_the_step_slider_runs_to_the_block_count(block_size):
    n_blocks = math.ceil(16 / block_size)
    widget = online_softmax_stepper(step=16, block_size=block_size)
    assert widget.params["step"] == n_blocks  # opens at the last block, not past it
    page = widget.html()
    assert f'max="{n_blocks}" step="1" value="{n_blocks}" data-max-from="n_blocks"' in page
    (control,) = (c for c in SPEC.controls if c.name == "step")
    assert control.max_from == "n_blocks"


def test_update_accepts_a_possible_setting():
    widget = online_softmax_stepper()
    assert widget.update(block_size=3, step=6) is True
    assert widget.state()["n_blocks"] == 6


def test_html_contains_every_control_and_the_script():
    page = online_softmax_stepper().html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert "online_softmax_stepper" in page and "<script>" in page
