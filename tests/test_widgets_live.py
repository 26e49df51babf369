"""The two-faced widget framework (attnbook.widgets._live), tested without a browser.

The kernel face's protocol is driven here from Python, as the JavaScript drives it: set
``params`` with a request number ``_seq`` and read back ``state``, ``error`` and ``seq``.
"""

from __future__ import annotations

import re
import sys
import types

import pytest

from attnbook.widgets import WIDGETS, LiveWidget, spec
from attnbook.widgets._live import Control, WidgetSpec, esm_source, js_source


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
        ({"n": 2.5}, ValueError, "n must be a whole number, got 2.5"),
        ({"n": "2"}, TypeError, "n must be a whole number"),
        ({"scale": "big"}, TypeError, "scale must be a real number"),
        ({"flag": 1}, TypeError, "flag must be True or False"),
        ({"mode": "c"}, ValueError, r"mode must be one of \['a', 'b'\]"),
        ({"width": 3}, ValueError, r"has no control named \['width'\]"),
        ({"n": 3, "mode": "b"}, ValueError, "impossible in mode b"),
    ],
)
def test_bad_settings_are_rejected_with_a_message(params, error, match):
    with pytest.raises(error, match=match):
        LiveWidget(TOY, **params)


def test_whole_floats_are_accepted_and_converted_exactly():
    widget = LiveWidget(TOY, n=4.0, scale=1)
    assert widget.params["n"] == 4 and type(widget.params["n"]) is int
    assert widget.params["scale"] == 1.0 and type(widget.params["scale"]) is float
    select = Control("size", "size", "select", 4096, options=(512, 4096))
    assert type(select.check(4096.0)) is int  # the declared option itself
    with pytest.raises(ValueError, match="b must be one of"):
        Control("b", "b", "select", 1, options=(1, 2)).check(True)  # True == 1, but a bool


def _request(face, seq, **params):
    """What the JavaScript sends: every control's value and the request number."""
    face.params = {**face.params, **params, "_seq": seq}


def test_kernel_face_answers_each_request_with_state_and_sequence_number():
    widget = LiveWidget(TOY, n=2)
    face = widget.widget()
    assert face is widget.widget()  # built once
    assert face.state["total"] == 1.0 and face.seq == 0 and face.error == ""
    _request(face, 5, n=4, flag=True)
    assert face.seq == 5 and face.state["_seq"] == 5 and face.error == ""
    assert face.state["total"] == 4.0 and widget.params["n"] == 4


def test_kernel_face_rejects_impossible_combinations_and_keeps_the_last_state():
    widget = LiveWidget(TOY, n=3)
    face = widget.widget()
    _request(face, 1, scale=1.0)
    good = dict(face.state)
    _request(face, 2, mode="b")  # n = 3 in mode b: impossible
    assert face.seq == 2 and "impossible in mode b" in face.error
    assert face.state == good and widget.params["mode"] == "a"
    _request(face, 3, n=9)  # outside the slider
    assert face.seq == 3 and "n must lie in [1, 5]" in face.error and face.state == good
    _request(face, 4, n=4, mode="b")
    assert face.error == "" and face.state["_seq"] == 4 and face.state["mode"] == "b"


def test_update_from_python_reaches_the_kernel_face():
    widget = LiveWidget(TOY)
    face = widget.widget()
    assert widget.update(n=5) is True
    assert face.params["n"] == 5 and face.state["total"] == 2.5 and face.seq == 1
    assert widget.update(n=3, mode="b") is False
    assert "impossible" in widget.error and face.state["total"] == 2.5 and face.seq == 2
    assert widget.update(n=1) is True and widget.error == ""


def test_markup_carries_the_called_values():
    page = LiveWidget(TOY, n=4, scale=0.3, flag=True, mode="b").html()
    assert re.search(r'name="n" data-type="int" min="1" max="5" step="1" value="4"', page)
    assert 'value="0.3"' in page
    # Beside the slider, a box the reader can type into, showing the same value and bounds.
    assert re.search(
        r'<input type="number" class="attnbook-typed" name="n-out" min="1" max="5" step="1" '
        r'value="4"',
        page,
    )
    assert re.search(r'name="flag" data-type="bool" checked', page)
    assert '<option value="b" selected>' in page and '<option value="a">' in page


def test_a_slider_can_follow_the_state():
    capped = WidgetSpec(
        name="softmax_saturation",
        title="capped",
        controls=(Control("k", "k", "range", 3, min=0, max=9, integer=True, max_from="top"),),
        compute=lambda *, k: {"top": 4, "k": min(k, 4)},
        draw=_toy_draw,
    )
    widget = LiveWidget(capped, k=7)
    assert widget.params == {"k": 4}  # shown at the state's maximum
    assert re.search(r'max="4" step="1" value="4" data-max-from="top"', widget.html())


def test_esm_is_the_static_javascript_plus_an_entry_point():
    module = esm_source("mask_explorer")
    assert js_source("runtime") in module and js_source("mask_explorer") in module
    assert "export default" in module and "kernelView" in module
    assert "import " not in module and "https://" not in module  # nothing from a CDN


def test_html_face_is_self_contained_and_escaped():
    widget = LiveWidget(TOY)
    first, second = widget.html(), widget.html()
    ids = [re.search(r'id="([^"]+)"', h).group(1) for h in (first, second)]
    assert ids[0] != ids[1], "two displays of one widget need distinct element ids"
    for control in TOY.controls:
        assert f'name="{control.name}"' in first
    assert "Toy &lt;widget&gt;" in first and "<widget>" not in first
    # Visible text says the script has not run; the script swaps in the live note on mount.
    # Which one depends on where it runs: the site, a notebook before its cell runs, the
    # kernel face with Python answering, or the kernel face drawn from a saved notebook.
    assert re.search(
        r'data-live="Live on this page[^"]*" data-notebook="[^"]*Run this cell[^"]*" '
        r'data-kernel="[^"]*Python recomputes[^"]*" data-saved="[^"]*no Python kernel[^"]*">'
        r"The script behind",
        first,
    )
    assert js_source("runtime") in first
    assert "http://" not in first.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in first


def test_mime_bundle_has_both_faces_and_the_static_build_gets_only_html(monkeypatch):
    widget = LiveWidget(TOY)
    bundle = widget._repr_mimebundle_()
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == widget.widget().model_id and view["version_major"] == 2
    assert {"text/html", "text/plain"} <= set(bundle)
    monkeypatch.setenv("ATTNBOOK_WIDGETS", "static")
    static = widget._repr_mimebundle_()
    assert set(static) == {"text/html", "text/plain"}


def _fake_colab(monkeypatch, calls):
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("enabled")
    output._widgets = types.SimpleNamespace(_installed_url="https://colab.example/manager.js")
    colab = types.ModuleType("google.colab")
    colab.output = output
    google = types.ModuleType("google")
    google.colab = colab
    for name, module in (
        ("google", google),
        ("google.colab", colab),
        ("google.colab.output", output),
    ):
        monkeypatch.setitem(sys.modules, name, module)


def test_colab_gets_its_widget_manager_and_nothing_happens_elsewhere(monkeypatch):
    from attnbook.runtime import _colab_widgets

    calls = []
    _colab_widgets()  # not in Colab: nothing, no error
    _fake_colab(monkeypatch, calls)
    _colab_widgets()
    assert calls == ["enabled"]
    bundle, metadata = LiveWidget(TOY)._repr_mimebundle_()
    assert "text/html" in bundle
    assert metadata["application/vnd.jupyter.widget-view+json"]["colab"]
    broken = types.ModuleType("google.colab.output")
    broken.enable_custom_widget_manager = lambda: 1 / 0
    monkeypatch.setitem(sys.modules, "google.colab.output", broken)
    monkeypatch.setattr(sys.modules["google.colab"], "output", broken)
    _colab_widgets()  # a Colab whose call fails: still no error


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
    face = widget.widget()
    assert face.state and face.widget_name == name

    def strip_ids(text):
        return re.sub(r'id="[^"]+"', "", text)

    assert strip_ids(face.markup) in strip_ids(widget.html()), "the faces' DOM differs"
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


def test_kernel_face_answers_a_ping_and_changes_no_trait():
    """The JavaScript asks at mount whether Python holds the model (issue 27: the note said
    Python recomputes after the kernel had gone); the answer is a message, not a trait."""
    face = LiveWidget(TOY).widget()
    sent = []
    face.send = lambda message, buffers=None: sent.append(message)
    before = {k: getattr(face, k) for k in ("params", "state", "error", "seq")}
    face._handle_custom_msg({"type": "ping"}, [])  # what a comm message from the page calls
    face._handle_custom_msg({"type": "other"}, [])
    assert sent == [{"type": "pong"}]
    assert {k: getattr(face, k) for k in before} == before
