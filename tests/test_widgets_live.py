"""The two-faced widget framework (attnbook.widgets._live), tested without a browser."""

from __future__ import annotations

import re

import pytest

from attnbook.widgets import WIDGETS, LiveWidget, spec
from attnbook.widgets._live import Control, WidgetSpec, js_source


def _toy_compute(*, n: int, scale: float, flag: bool, mode: str) -> dict:
    if n == 3 and mode == "b":
        raise ValueError("n = 3 is impossible in mode b")
    return {"total": n * scale * (2 if flag else 1), "mode": mode}


def _toy_draw(state, fig):
    ax = fig.subplots()
    ax.bar([0], [state["total"]])
    ax.set_xlabel("x")
    ax.set_ylabel("total")


TOY = WidgetSpec(
    name="softmax_saturation",  # borrow a shipped JS file; only the Python side is tested
    title="Toy <widget>",
    controls=(
        Control("n", "n", "range", 2, min=1, max=5, step=1, integer=True),
        Control("scale", "scale", "range", 0.5, min=0.1, max=1.0, step=0.1),
        Control("flag", "flag", "checkbox", False),
        Control("mode", "mode", "select", "a", options=("a", "b")),
    ),
    compute=_toy_compute,
    draw=_toy_draw,
    panel=lambda state, ax: ax.bar([0], [state["total"]]),
)


def test_state_uses_defaults_and_overrides():
    widget = LiveWidget(TOY)
    assert widget.state() == {"total": 1.0, "mode": "a"}
    assert widget.state(flag=True, n=4) == {"total": 4.0, "mode": "a"}


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"n": 9}, ValueError, r"n must lie in \[1, 5\], got 9"),
        ({"n": 2.5}, TypeError, "n must be an integer"),
        ({"scale": "big"}, TypeError, "scale must be a number"),
        ({"flag": 1}, TypeError, "flag must be a bool"),
        ({"mode": "c"}, ValueError, r"mode must be one of \['a', 'b'\]"),
        ({"width": 3}, ValueError, r"has no control named \['width'\]"),
        ({"n": 3, "mode": "b"}, ValueError, "impossible in mode b"),
    ],
)
def test_bad_settings_are_rejected_with_a_message(params, error, match):
    with pytest.raises(error, match=match):
        LiveWidget(TOY, **params)


def test_kernel_face_rejects_impossible_combinations_without_a_traceback():
    widget = LiveWidget(TOY, n=3)
    box = widget.ipywidget()
    before = widget._image.value
    assert before  # the first picture is drawn when the face is built
    assert widget.update(mode="b") is False
    assert "impossible in mode b" in widget._message.value
    assert widget.params["mode"] == "a" and widget._image.value == before
    assert widget.update(n=4, mode="b") is True
    assert widget._message.value == "" and widget._image.value != before
    assert box is widget.ipywidget()  # built once


def test_html_face_is_self_contained_and_escaped():
    widget = LiveWidget(TOY)
    first, second = widget.html(), widget.html()
    ids = [re.search(r'id="([^"]+)"', h).group(1) for h in (first, second)]
    assert ids[0] != ids[1], "two displays of one widget need distinct element ids"
    for control in TOY.controls:
        assert f'name="{control.name}"' in first
    assert "Toy &lt;widget&gt;" in first and "<widget>" not in first
    # Visible text says the script has not run; the script swaps in the live note on mount.
    assert re.search(r'data-live="Live on this page[^"]*">The script behind this figure', first)
    assert js_source("runtime") in first
    assert "http://" not in first.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in first


def test_mime_bundle_has_both_faces_and_the_static_build_gets_only_html(monkeypatch):
    widget = LiveWidget(TOY)
    bundle = widget._repr_mimebundle_()
    assert {"text/html", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    monkeypatch.setenv("ATTNBOOK_WIDGETS", "static")
    static = widget._repr_mimebundle_()
    assert set(static) == {"text/html", "text/plain"}


def test_figure_and_small_multiples_are_labelled():
    widget = LiveWidget(TOY)
    fig = widget.figure(n=5)
    (ax,) = fig.axes
    assert ax.get_xlabel() and ax.get_ylabel()
    grid = widget.small_multiples("n", [1, 2, 4, 5, 5], ncols=2)
    visible = [a for a in grid.axes if a.get_visible()]
    assert len(grid.axes) == 6 and len(visible) == 5
    with pytest.raises(ValueError, match="must not be empty"):
        widget.small_multiples("n", [])


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_every_shipped_widget_builds_both_faces(name):
    widget_spec = spec(name)
    assert widget_spec.name == name
    widget = LiveWidget(widget_spec)
    assert "globalThis.attnbook.mount" in widget.html()
    assert widget.figure().axes, f"{name}: draw() made no axes"
    for ax in widget.figure().axes:
        if ax.get_visible() and ax.has_data():
            assert ax.get_xlabel() or ax.get_title(), f"{name}: an axis without a label"


def test_unknown_widget_names_are_rejected():
    with pytest.raises(ValueError, match="unknown widget 'nope'"):
        spec("nope")


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_widget_functions_are_never_shadowed_by_their_modules(name):
    import attnbook.widgets as widgets

    spec(name)  # imports the defining module first, the order that used to shadow
    assert callable(getattr(widgets, name))
    assert WIDGETS[name] != name, "a module named like its function would shadow it"
