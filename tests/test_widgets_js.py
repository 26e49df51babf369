"""The JavaScript face of every widget computes what the Python face computes.

Each widget's ``js/<name>.js`` re-implements its ``SPEC.compute``. This test runs the shipped
JavaScript in Node.js over a grid of settings built from the widget's own controls and
compares every number with the Python state (errors must match too: an impossible setting
is rejected by both faces), then checks that every control changes the drawn picture.

Without Node these tests skip, except where a missing Node must fail the run
(``ATTNBOOK_REQUIRE_BROWSER=1``, set by ``make test``, or ``CI``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess

import pytest

from attnbook.widgets import WIDGETS, spec
from attnbook.widgets._live import js_source

NODE = shutil.which("node")
REQUIRE = bool(os.environ.get("ATTNBOOK_REQUIRE_BROWSER") or os.environ.get("CI"))
pytestmark = pytest.mark.skipif(NODE is None and not REQUIRE, reason="Node.js is not installed")


def _node(script: str, payload: dict):
    assert NODE, "Node.js is required here (ATTNBOOK_REQUIRE_BROWSER or CI is set)"
    result = subprocess.run(
        [NODE, "-e", script],
        input=json.dumps(payload),
        text=True,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return json.loads(result.stdout)


RUNNER = """
const fs = require("fs");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
eval(input.runtime); eval(input.widget);
const w = globalThis.attnbook.widgets[input.name];
const out = input.cases.map((params) => {
  try { return { state: w.compute(params, input.data) }; }
  catch (e) { return { error: String(e.message || e) }; }
});
process.stdout.write(JSON.stringify(out));
"""


def _values(control):
    if control.kind == "checkbox":
        return [False, True]
    if control.kind == "select":
        return list(control.options)
    lo, hi = control.min, control.max
    picks = [lo, lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3, hi]
    if control.integer:
        return sorted({round(p) for p in picks})
    # snap to the slider's step, as a browser would
    return sorted({round(lo + round((p - lo) / control.step) * control.step, 10) for p in picks})


def settings_grid(widget_spec, limit: int = 160):
    axes = [[(c.name, v) for v in _values(c)] for c in widget_spec.controls]
    grid = [dict(combo) for combo in itertools.product(*axes)]
    step = max(1, len(grid) // limit)
    return grid[::step]


def assert_close(js, py, path="state"):
    if isinstance(py, dict):
        assert isinstance(js, dict) and set(js) == set(py), f"{path}: keys {set(js)} != {set(py)}"
        for key in py:
            assert_close(js[key], py[key], f"{path}.{key}")
    elif isinstance(py, list | tuple):
        assert isinstance(js, list) and len(js) == len(py), f"{path}: lengths differ"
        for i, (a, b) in enumerate(zip(js, py, strict=True)):
            assert_close(a, b, f"{path}[{i}]")
    elif isinstance(py, bool) or py is None or isinstance(py, str):
        assert js == py, f"{path}: {js!r} != {py!r}"
    elif isinstance(py, int | float):
        if math.isinf(py) or js is None:  # JSON has no Infinity: JS writes null
            assert js is None and math.isinf(py), f"{path}: {js!r} != {py!r}"
        else:
            assert math.isclose(js, py, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {js} != {py}"
    else:
        raise AssertionError(f"{path}: unexpected type {type(py)}")


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_javascript_matches_python(name):
    widget_spec = spec(name)
    cases = settings_grid(widget_spec)
    payload = {
        "runtime": js_source("runtime"),
        "widget": js_source(widget_spec.name),
        "name": widget_spec.name,
        "data": widget_spec.data,
        "cases": cases,
    }
    outputs = _node(RUNNER, payload)
    rejected = 0
    for params, js in zip(cases, outputs, strict=True):
        try:
            py = widget_spec.compute(**params)
        except (TypeError, ValueError):
            rejected += 1
            assert "error" in js, f"{params}: Python rejects it, JavaScript computed {js}"
            continue
        assert "state" in js, f"{params}: JavaScript failed with {js.get('error')}"
        assert_close(json.loads(json.dumps(js["state"])), py, f"{name}{params}")
    assert rejected < len(cases), "every setting was rejected: the grid tests nothing"


PICTURES = """
const fs = require("fs");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
eval(input.runtime); eval(input.widget);
const w = globalThis.attnbook.widgets[input.name];
const out = input.cases.map((params) => {
  try {
    const state = w.compute(params, input.data);
    return input.widths.map((width) => w.render(state, width));
  } catch (e) { return null; }
});
process.stdout.write(JSON.stringify(out));
"""


def _other_values(control, current):
    if control.kind == "checkbox":
        return [not current]
    if control.kind == "select":
        return [o for o in control.options if o != current]
    values = [control.min, control.max, current + control.step, current - control.step]
    values = [v for v in values if control.min <= v <= control.max and v != current]
    return [int(v) if control.integer else v for v in values]


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_every_control_changes_the_picture(name):
    """From the widget's defaults, moving any one control redraws something different."""
    from attnbook.widgets import LiveWidget

    widget_spec = spec(name)
    start = LiveWidget(widget_spec).params
    cases, owners = [start], []
    for control in widget_spec.controls:
        for value in _other_values(control, start[control.name]):
            cases.append(start | {control.name: value})
            owners.append(control.name)
    payload = {
        "runtime": js_source("runtime"),
        "widget": js_source(name),
        "name": name,
        "data": widget_spec.data,
        "cases": cases,
        "widths": [320, 700],
    }
    first, *rest = _node(PICTURES, payload)
    assert first is not None, f"{name}: the default setting is rejected"
    moved = {owner for owner, svgs in zip(owners, rest, strict=True) if svgs and svgs != first}
    still = {c.name for c in widget_spec.controls} - moved
    assert not still, f"{name}: moving {sorted(still)} never changes the picture"
    for svg, width in zip(first, payload["widths"], strict=True):
        # laid out for the width it gets, at scale 1 (so its font sizes are screen pixels)
        assert f'viewBox="0 0 {width} ' in svg and f'width="{width}"' in svg
        sizes = [float(x) for x in re.findall(r'font-size="([0-9.]+)"', svg)]
        assert sizes and min(sizes) >= 10, f"{name}: text below 10 px at width {width}"
