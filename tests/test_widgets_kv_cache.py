"""The KV-cache calculator: exact byte counts against real tensors, its picture and its controls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.widgets import kv_cache_calculator
from attnbook.widgets._live import js_source
from attnbook.widgets.kv_cache import BYTES_PER_ELEMENT, SPEC, human_bytes, kv_cache_state

REQUIRE = bool(os.environ.get("ATTNBOOK_REQUIRE_BROWSER") or os.environ.get("CI"))

TORCH_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float8": torch.float8_e4m3fn,
}
OPTIONS = {c.name: c.options for c in SPEC.controls if c.kind == "select"}


def test_worked_budget():
    state = kv_cache_state(
        layers=32, positions=4096, q_heads=32, kv_heads=8, head_dim=128, dtype="bfloat16"
    )
    assert state["bytes"] == 536_870_912 == 512 * 2**20
    assert [v["bytes"] for v in state["variants"]] == [2 * 2**30, 512 * 2**20, 64 * 2**20]
    assert state["kind"] == "GQA" and state["group_size"] == 4 and state["ratio_to_mha"] == 0.25
    assert human_bytes(state["bytes"]) == "512 MiB"


def test_gqa_eight_groups_of_sixty_four_heads_stores_eight_times_fewer_elements():
    state = kv_cache_state(
        layers=80, positions=8192, q_heads=64, kv_heads=8, head_dim=128, dtype="float16"
    )
    mha, ours, _ = state["variants"]
    assert mha["bytes"] == 8 * ours["bytes"]


@pytest.mark.parametrize("dtype", sorted(BYTES_PER_ELEMENT))
def test_bytes_equal_a_real_cache_allocated_by_torch(dtype):
    layers, positions, q_heads, kv_heads, head_dim, batch = 3, 512, 8, 2, 32, 2
    cache = [
        (
            torch.zeros(batch, kv_heads, positions, head_dim, dtype=TORCH_DTYPES[dtype]),
            torch.zeros(batch, kv_heads, positions, head_dim, dtype=TORCH_DTYPES[dtype]),
        )
        for _ in range(layers)
    ]
    allocated = sum(t.untyped_storage().nbytes() for pair in cache for t in pair)
    state = kv_cache_state(
        layers=layers,
        positions=positions,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        batch=batch,
    )
    assert state["bytes"] == allocated
    assert state["elements"] == sum(t.numel() for pair in cache for t in pair)


@given(
    st.integers(1, 128),
    st.sampled_from(OPTIONS["positions"]),
    st.sampled_from(OPTIONS["q_heads"]),
    st.sampled_from(OPTIONS["kv_heads"]),
    st.sampled_from(OPTIONS["head_dim"]),
    st.sampled_from(sorted(BYTES_PER_ELEMENT)),
    st.integers(1, 64),
)
def test_formula_and_ordering(layers, positions, q_heads, kv_heads, head_dim, dtype, batch):
    params = dict(
        layers=layers,
        positions=positions,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        batch=batch,
    )
    if q_heads % kv_heads:
        with pytest.raises(ValueError, match="Hq % Hkv == 0"):
            kv_cache_state(**params)
        return
    state = kv_cache_state(**params)
    b = BYTES_PER_ELEMENT[dtype]
    assert state["bytes"] == 2 * batch * layers * positions * kv_heads * head_dim * b
    mha, ours, mqa = (v["bytes"] for v in state["variants"])
    assert mha >= ours >= mqa and mha == ours * (q_heads // kv_heads)
    assert all(isinstance(v["bytes"], int) for v in state["variants"])


def test_impossible_settings_are_rejected_with_a_message():
    widget = kv_cache_calculator()
    assert widget.update(q_heads=12, kv_heads=8) is False  # 8 does not divide 12
    assert widget.update(q_heads=8, kv_heads=16) is False  # more KV heads than query heads
    assert widget.update(dtype="int3") is False
    assert widget.params["q_heads"] == 32 and widget.params["kv_heads"] == 8
    with pytest.raises(ValueError, match="try one of 1, 2, 3, 4, 6, 12"):
        kv_cache_state(
            layers=1, positions=512, q_heads=12, kv_heads=8, head_dim=64, dtype="float16"
        )
    assert widget.update(q_heads=12, kv_heads=4) is True


def test_figure_has_labelled_axes_and_three_bars():
    fig = kv_cache_calculator().figure()
    (ax,) = fig.get_axes()
    assert ax.get_xlabel() == "KV cache (GiB)" and ax.get_ylabel() and ax.get_title()
    assert len(ax.patches) == 3
    panels = kv_cache_calculator().small_multiples("positions", [4096, 32768, 131072])
    assert sum(ax.get_visible() for ax in panels.get_axes()) == 3


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (2**48, "256 TiB"),
        (2**40, "1 TiB"),
        (1024 * 2**30, "1 TiB"),  # not "1020 GiB"
        (2050 * 2**30, "≈2.00 TiB"),  # not "2050 GiB"
        (262144 * 2**30, "256 TiB"),  # not "262000 GiB"
        (3 * 2**29, "1.5 GiB"),
        (512 * 2**20, "512 MiB"),
        (1365, "≈1.33 KiB"),
        (1000, "1000 B"),
    ],
)
def test_byte_labels_are_exact_in_the_largest_unit(n, text):
    assert human_bytes(n) == text


def test_labels_and_plurals():
    mqa = kv_cache_state(
        layers=1, positions=512, q_heads=1, kv_heads=1, head_dim=64, dtype="float16"
    )
    assert mqa["group_size"] == 1
    fig = kv_cache_calculator(q_heads=1, kv_heads=1).figure()
    assert "1 query head per KV head" in fig.axes[0].get_title()
    largest = kv_cache_state(
        layers=128,
        positions=131072,
        q_heads=128,
        kv_heads=128,
        head_dim=256,
        dtype="float32",
        batch=64,
    )
    assert largest["label"] == "256 TiB" and largest["variants"][2]["label"] == "2 TiB"


def test_whole_floats_count_as_ints_and_fractions_are_refused():
    base = dict(layers=32, q_heads=32, kv_heads=8, head_dim=128, dtype="bfloat16")
    assert kv_cache_state(positions=4096.0, **base) == kv_cache_state(positions=4096, **base)
    assert kv_cache_calculator(positions=4096.0).params["positions"] == 4096
    with pytest.raises(ValueError, match=r"layers must be a whole number, got 70\.5"):
        kv_cache_state(**(base | {"layers": 70.5}), positions=4096)


def test_html_face_has_every_control():
    page = kv_cache_calculator().html()
    for control in SPEC.controls:
        assert f'name="{control.name}"' in page
    assert 'data-widget="kv_cache_calculator"' in page


@pytest.mark.skipif(shutil.which("node") is None and not REQUIRE, reason="Node.js is not installed")
def test_javascript_is_exact_at_the_largest_setting():
    largest = dict(
        layers=128,
        positions=131072,
        q_heads=128,
        kv_heads=128,
        head_dim=256,
        dtype="float32",
        batch=64,
    )
    runner = (
        "const i = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "eval(i.runtime); eval(i.widget);"
        "const s = globalThis.attnbook.widgets.kv_cache_calculator.compute(i.p, i.data);"
        "process.stdout.write(String(s.bytes));"
    )
    payload = {
        "runtime": js_source("runtime"),
        "widget": js_source(SPEC.name),
        "p": largest,
        "data": SPEC.data,
    }
    out = subprocess.run(
        ["node", "-e", runner],
        input=json.dumps(payload),
        text=True,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert int(out) == kv_cache_state(**largest)["bytes"] == 2**48
