"""The softmax-saturation widget: its numbers against torch, its pictures and its controls."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.widgets import softmax_saturation
from attnbook.widgets.softmax import SPEC, STANDARD_SCORES, softmax_state

D_KS = next(c for c in SPEC.controls if c.name == "d_k").options


def _torch_reference(scale: float, d_k: int, divide: bool):
    std = 1.0 if divide else math.sqrt(d_k)
    logits = scale * std * torch.tensor(STANDARD_SCORES, dtype=torch.float64)
    probs = torch.softmax(logits, dim=0)
    jac = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=0), logits)
    entropy = -(probs * probs.log()).sum()
    return logits, probs, jac, entropy


@pytest.mark.parametrize("divide", [False, True])
@pytest.mark.parametrize("d_k", [1, 64, 512])
@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0])
def test_state_matches_torch_autograd(scale, d_k, divide):
    state = softmax_state(scale=scale, d_k=d_k, divide=divide)
    logits, probs, jac, entropy = _torch_reference(scale, d_k, divide)
    assert state["logits"] == pytest.approx(logits.tolist(), rel=1e-12)
    assert state["probs"] == pytest.approx(probs.tolist(), rel=1e-9, abs=1e-15)
    assert state["entropy"] == pytest.approx(entropy.item(), rel=1e-9, abs=1e-12)
    # the widget's closed form p_i (delta_ij - p_j) against autograd's Jacobian
    assert state["jacobian_norm"] == pytest.approx(jac.norm().item(), rel=1e-9, abs=1e-15)
    assert state["max_entropy"] == pytest.approx(math.log(len(STANDARD_SCORES)))


def test_score_std_is_sqrt_dk_without_the_division():
    for d_k in D_KS:
        assert softmax_state(scale=1.0, d_k=d_k, divide=False)["score_std"] == math.sqrt(d_k)
        assert softmax_state(scale=1.0, d_k=d_k, divide=True)["score_std"] == 1.0


def test_fixed_scores_are_standardised():
    # "score std" in the readout is only the logits' real spread if the base row has std 1
    scores = torch.tensor(STANDARD_SCORES, dtype=torch.float64)
    assert abs(scores.mean().item()) < 1e-12
    assert scores.std(correction=0).item() == pytest.approx(1.0, rel=1e-12)


def test_division_makes_the_state_independent_of_dk():
    states = [softmax_state(scale=1.3, d_k=d_k, divide=True) for d_k in D_KS]
    assert [s.pop("d_k") for s in states] == list(D_KS)  # echoed, and nothing else moves
    assert all(s == states[0] for s in states)


def test_saturation_grows_with_scale():
    states = [softmax_state(scale=s, d_k=64, divide=True) for s in (0.5, 1.5, 2.0, 3.0, 4.0)]
    entropies = [s["entropy"] for s in states]
    norms = [s["jacobian_norm"] for s in states]
    assert entropies == sorted(entropies, reverse=True)
    # The norm is not monotone: it rises a little from near-uniform weights, peaks at a
    # moderate scale, and only then collapses.
    assert norms[0] < norms[1] and norms[1:] == sorted(norms[1:], reverse=True)
    undivided = softmax_state(scale=1.0, d_k=512, divide=False)
    assert max(undivided["probs"]) > 0.999 and undivided["jacobian_norm"] < 1e-3


@given(st.floats(min_value=0.1, max_value=4.0), st.sampled_from(D_KS), st.booleans())
def test_probabilities_form_a_distribution(scale, d_k, divide):
    state = softmax_state(scale=scale, d_k=d_k, divide=divide)
    assert all(p >= 0 for p in state["probs"])
    assert math.isclose(sum(state["probs"]), 1.0, rel_tol=1e-12)
    assert 0.0 <= state["entropy"] <= state["max_entropy"] + 1e-12
    assert len(state["curve_jacobian"]) == len(state["curve_scale"])


def test_figure_has_labelled_axes():
    fig = softmax_saturation().figure(scale=2.0)
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_small_multiples_draws_one_panel_per_value():
    fig = softmax_saturation().small_multiples("scale", [0.5, 1.0, 2.0, 4.0])
    visible = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert len(visible) == 4
    assert all(ax.get_xlabel() for ax in visible)


def test_impossible_settings_are_rejected_without_raising():
    widget = softmax_saturation()
    assert widget.update(scale=0.0) is False  # below the slider's range
    assert widget.update(d_k=3) is False  # not one of the offered d_k
    assert widget.update(divide="yes") is False
    assert widget.params["scale"] == 1.0 and widget.params["d_k"] == 64
    assert widget.update(scale=2.0, divide=False) is True
    assert widget.params == {"scale": 2.0, "d_k": 64, "divide": False}
    with pytest.raises(ValueError, match="scale must be positive"):
        softmax_state(scale=-1.0, d_k=4, divide=True)


def test_the_scale_slider_covers_the_whole_curve():
    (control,) = (c for c in SPEC.controls if c.name == "scale")
    state = softmax_state(scale=1.0, d_k=64, divide=True)
    assert control.min == min(state["curve_scale"]) and control.max == max(state["curve_scale"])


def test_whole_floats_count_as_ints_and_fractions_are_refused():
    assert softmax_state(scale=1, d_k=64.0, divide=True) == softmax_state(
        scale=1.0, d_k=64, divide=True
    )
    with pytest.raises(ValueError, match=r"d_k must be a whole number, got 64\.5"):
        softmax_state(scale=1.0, d_k=64.5, divide=True)
    with pytest.raises(TypeError, match="divide must be True or False"):
        softmax_state(scale=1.0, d_k=64, divide="yes")


def test_html_face_has_every_control_and_the_script():
    page = softmax_saturation().html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert "globalThis.attnbook.mount" in page
    assert 'data-widget="softmax_saturation"' in page
