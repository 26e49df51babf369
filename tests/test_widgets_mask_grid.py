"""The mask explorer's state is exactly the mask that attnbook.masks builds for the same rules."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnbook.masks import causal_mask, padding_mask, segment_mask
from attnbook.widgets import mask_explorer
from attnbook.widgets.mask_grid import SPEC, mask_state

SETTINGS = [
    dict(t_q=t_q, t_k=t_k, causal=causal, offset=offset, length=length, doc_len=doc_len)
    for t_q, t_k, causal, offset, length, doc_len in itertools.product(
        (1, 3, 6), (2, 6, 8), (False, True), (-2, 0, 3), (0, 2, 6), (1, 3, 8)
    )
    if length <= t_k
]


def masks_reference(t_q, t_k, causal, offset, length, doc_len) -> torch.Tensor:
    """The same grid from attnbook.masks: causal & padding & segment, on absolute positions."""
    allowed = padding_mask([length], t_k)[0, 0].expand(t_q, t_k)  # (Tq, Tk)
    if causal:
        allowed = allowed & causal_mask(t_q, t_k, offset=offset)
    # segment_mask is square: build it over every position a query or a key occupies.
    positions = sorted(set(range(t_k)) | {offset + i for i in range(t_q)})
    ids = torch.tensor([[p // doc_len for p in positions]])  # (1, P)
    same_doc = segment_mask(ids)[0, 0]  # (P, P)
    rows = [positions.index(offset + i) for i in range(t_q)]
    cols = [positions.index(j) for j in range(t_k)]
    return allowed & same_doc[rows][:, cols]


@pytest.mark.parametrize("params", SETTINGS, ids=lambda p: "-".join(map(str, p.values())))
def test_state_equals_attnbook_masks(params):
    state = mask_state(**params)
    expected = masks_reference(**params)
    assert torch.equal(
        torch.tensor(state["allowed"], dtype=torch.bool).reshape(expected.shape), expected
    )
    assert state["row_counts"] == expected.sum(-1).tolist()
    assert state["empty_rows"] == [i for i, n in enumerate(expected.sum(-1).tolist()) if n == 0]


def test_reasons_name_the_first_blocking_rule():
    state = mask_state(t_q=3, t_k=6, causal=True, offset=3, length=5, doc_len=4)
    # queries at 3, 4, 5; keys 0..5; padding from key 5; documents [0..3], [4..7]
    assert state["reason"][0] == ["allowed"] * 4 + ["future"] * 2
    assert state["reason"][1] == ["segment"] * 4 + ["allowed", "future"]
    assert state["reason"][2] == ["segment"] * 4 + ["allowed", "padding"]
    assert state["padded_queries"] == [2]
    assert state["bottom_right_offset"] == 3


def test_decoding_offset_matches_the_default_causal_mask():
    state = mask_explorer(t_q=2, t_k=5, offset=3, length=5).state()
    assert torch.equal(torch.tensor(state["allowed"]), causal_mask(2, 5))


def test_figure_has_labelled_axes():
    fig = mask_explorer().figure(t_q=3, t_k=6, offset=3)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    assert "allowed" in ax.get_title()


def test_small_multiples_draw_one_panel_per_value():
    fig = mask_explorer().small_multiples("length", [6, 4, 2])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 and all(ax.get_xlabel() == "key position" for ax in visible)


def test_impossible_settings_are_rejected():
    widget = mask_explorer(t_k=4, length=4)
    assert widget.update(length=5) is False  # more real tokens than key slots
    assert widget.update(t_q=9) is False  # outside the slider
    assert widget.params["length"] == 4
    assert widget.update(length=2) is True and widget.params["length"] == 2
    with pytest.raises(ValueError, match="exceeds t_k"):
        mask_state(t_q=2, t_k=3, causal=True, offset=0, length=4, doc_len=8)


def test_whole_floats_count_as_ints_and_fractions_are_refused():
    assert mask_state(t_q=3.0, t_k=6, causal=True, offset=-2.0, length=6, doc_len=8) == (
        mask_state(t_q=3, t_k=6, causal=True, offset=-2, length=6, doc_len=8)
    )
    with pytest.raises(ValueError, match=r"offset must be a whole number, got 0\.5"):
        mask_state(t_q=3, t_k=6, causal=True, offset=0.5, length=6, doc_len=8)


def test_html_contains_every_control():
    page = mask_explorer().html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert 'data-widget="mask_explorer"' in page
