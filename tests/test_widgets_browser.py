"""Every widget in headless Chromium: opens as called, agrees with Python, reads on a phone.

No site build and no Jupyter: each page is built from ``LiveWidget.html()`` (the static face)
or from the kernel face's ES module mounted on a stand-in for anywidget's model, whose
``save_changes`` is answered by the real Python face (``LiveWidget.widget()``) through
Playwright. Checked at a 390 px phone viewport and at 1280 px:

* the controls and the picture show the arguments the widget was called with (also with the
  script stripped, as in an untrusted notebook), and the drawn state equals Python's compute;
* moving every control changes the picture, and each state equals Python's;
* an impossible setting shows a message styled as an error and keeps the last picture;
* text inside the drawing is >= 10 px on screen, inside the drawing, never overlapping other
  text, and has >= 4.5:1 contrast on a light and on a dark page (the widget has no panel of
  its own in dark mode);
* in the kernel face, Python's answers agree with the JavaScript's predictions.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from attnbook.widgets import WIDGETS, LiveWidget, spec
from attnbook.widgets._live import esm_source

pytestmark = pytest.mark.browser

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import chromium  # noqa: E402  (scripts/chromium.py: how every browser check launches it)

REQUIRE = bool(os.environ.get("ATTNBOOK_REQUIRE_BROWSER") or os.environ.get("CI"))

# Non-default arguments for every control of every widget (issue: the site opened defaults).
CALLS = {
    "softmax_saturation": {"scale": 2.5, "d_k": 16, "divide": False},
    "kv_cache_calculator": {
        "layers": 80,
        "positions": 32768,
        "q_heads": 64,
        "kv_heads": 16,
        "head_dim": 96,
        "dtype": "float32",
        "batch": 3,
    },
    "mask_explorer": {
        "t_q": 3,
        "t_k": 7,
        "causal": False,
        "offset": 4,
        "length": 5,
        "doc_len": 5,
    },
    "rope_rotation": {"m": 5, "n": 30, "pair": 3, "log10_base": 3.5},
    "online_softmax_stepper": {"step": 3, "block_size": 3, "order": "right to left"},
    "head_explorer": {"model": "two-layer", "layer": 1, "query": 20, "seed": 2},
    "speculative_speedup": {"alpha": 0.9, "k": 6, "c": 0.01},
}
# Called with its default where no other value makes a possible setting with the rest.
DEFAULT_OK = {"head_explorer": {"model"}}  # layer 1 exists only in the two-layer model
# (head_explorer has no impossible setting: its layer slider follows the model)
# A setting each widget must refuse (with the message) while keeping its last picture.
IMPOSSIBLE = {
    "kv_cache_calculator": {"kv_heads": 16, "q_heads": 12},  # the last move is the bad one
    "mask_explorer": {"length": 2, "t_k": 1},
}
WIDTHS = (390, 1280)


def test_every_widget_has_a_call_here():
    assert set(CALLS) == set(WIDGETS), "add the new widget's arguments to CALLS"
    for name, call in CALLS.items():
        defaults = {c.name: c.value for c in spec(name).controls}
        assert set(call) == set(defaults), name
        same = [k for k in call if call[k] == defaults[k] and k not in DEFAULT_OK.get(name, ())]
        assert not same, f"{name}: {same} called with their defaults test nothing"


@pytest.fixture(scope="module")
def browser():
    if chromium.PATH is None:
        if REQUIRE:
            pytest.fail("Chromium is required (ATTNBOOK_REQUIRE_BROWSER/CI) but is missing")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium.launch(p)
        yield browser
        browser.close()


DARK = (
    "<style>html[data-theme=dark] body{background:#121212;color:#e3e3e3}"
    "body{font-family:sans-serif}</style>"
)


def _page(browser, width: int, body: str, *, dark: bool = False):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.route(
        "**/*",
        lambda route: route.abort() if route.request.url.startswith("http") else route.continue_(),
    )
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    theme = ' data-theme="dark"' if dark else ""
    page.set_content(
        f"<!doctype html><html{theme}><head><meta charset=utf-8>"
        f'<meta name="viewport" content="width=device-width">{DARK}</head>'
        f"<body>{body}</body></html>"
    )
    page.errors = errors
    return page


def _close(a, b, path="state"):
    if isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), f"{path}: keys differ"
        for k in b:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(b, list | tuple):
        assert isinstance(a, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(b, float) and math.isinf(b):
        assert a is None, path
    elif isinstance(b, bool) or b is None or isinstance(b, str):
        assert a == b, f"{path}: {a!r} != {b!r}"
    else:
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {a} != {b}"


def _form(page, root) -> dict:
    return page.evaluate(
        """root => Object.fromEntries([...root.querySelectorAll('[name][data-type]')].map(el => [
            el.name, el.dataset.type === 'bool' ? el.checked : el.dataset.type === 'int'
              ? parseInt(el.value, 10) : el.dataset.type === 'float' ? parseFloat(el.value)
              : el.value]))""",
        root,
    )


# Luminance-contrast, font-size, clipping and overlap checks of every text in the drawing.
LEGIBILITY = """
root => {
  const rgb = (s) => (s.match(/[0-9.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const contrast = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  const svg = root.querySelector('.attnbook-view svg');
  const box = svg.getBoundingClientRect();
  const scale = svg.getScreenCTM().a;
  const texts = [...svg.querySelectorAll('text')].map((t) => {
    const r = t.getBoundingClientRect();  // (rotated labels: their rotated box)
    return { s: t.textContent, px: parseFloat(t.getAttribute('font-size')) * scale,
      ratio: contrast(rgb(getComputedStyle(t).fill), background(svg)),
      l: r.left, r: r.right, t: r.top, b: r.bottom };
  });
  const overlaps = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i], b = texts[j];
    if (a.l < b.r - 1 && b.l < a.r - 1 && a.t < b.b - 2 && b.t < a.b - 2) overlaps.push([a.s, b.s]);
  }
  const readout = root.querySelector('.attnbook-readout');
  return {
    small: texts.filter((t) => t.px < 10 - 1e-6).map((t) => `${t.s} (${t.px.toFixed(1)} px)`),
    outside: texts.filter((t) => t.l < box.left - 1 || t.r > box.right + 1 || t.t < box.top - 1
      || t.b > box.bottom + 1).map((t) => t.s),
    faint: texts.filter((t) => t.ratio < 4.5).map((t) => `${t.s} (${t.ratio.toFixed(2)}:1)`),
    readout: contrast(rgb(getComputedStyle(readout).color), background(readout)),
    overlaps, scale, count: texts.length, svgWidth: box.width,
    rootWidth: root.getBoundingClientRect().width,
    panel: getComputedStyle(root).backgroundColor,
  };
}
"""


def _legible(page, root, where: str, *, dark: bool = False):
    report = page.evaluate(LEGIBILITY, root)
    assert report["count"] >= 5, f"{where}: the drawing has {report['count']} texts"
    assert not report["small"], f"{where}: text below 10 px: {report['small'][:5]}"
    assert not report["outside"], f"{where}: text outside the drawing: {report['outside'][:5]}"
    assert not report["overlaps"], f"{where}: overlapping text: {report['overlaps'][:5]}"
    assert not report["faint"], f"{where}: text below 4.5:1: {report['faint'][:5]}"
    assert report["readout"] >= 4.5, f"{where}: readout contrast {report['readout']:.2f}:1"
    assert report["svgWidth"] <= report["rootWidth"] + 1, f"{where}: drawing wider than widget"
    assert abs(report["scale"] - 1) < 1e-6, f"{where}: drawing scaled by {report['scale']}"
    if dark:
        assert report["panel"] in ("rgba(0, 0, 0, 0)", "transparent"), (
            f"{where}: the widget paints its own panel ({report['panel']}) on a dark page"
        )


def _set(page, root, control, value) -> None:
    page.evaluate(
        """([root, name, value]) => {
            const el = root.querySelector(`[name="${name}"]`);
            if (el.type === 'checkbox') el.checked = value; else el.value = String(value);
            el.dispatchEvent(new Event('input', {bubbles: true}));
        }""",
        [root, control, value],
    )


def _moves(name: str):
    """One move per control: to another value that the control offers."""
    call = CALLS[name]
    for control in spec(name).controls:
        current = call[control.name]
        if control.kind == "checkbox":
            yield control.name, not current
        elif control.kind == "select":
            yield control.name, next(o for o in control.options if o != current)
        else:
            yield control.name, control.min if current != control.min else control.max


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_static_face_opens_as_called_agrees_and_reads_on_any_width(browser, name, width):
    widget_spec = spec(name)
    widget = LiveWidget(widget_spec, **CALLS[name])
    page = _page(browser, width, widget.html())
    root = page.locator(".attnbook-widget").element_handle()
    where = f"{name} at {width} px"
    assert _form(page, root) == widget.params, f"{where}: the controls do not show the call"
    _close(json.loads(root.get_attribute("data-state")), widget.state(), where)
    assert "Live on this page" in root.inner_text()
    _legible(page, root, where)
    for control, value in _moves(name):
        before = page.inner_html(".attnbook-view")
        _set(page, root, control, value)
        params = _form(page, root)
        try:
            expected = widget_spec.compute(**params)
        except (TypeError, ValueError):
            assert root.get_attribute("data-error"), f"{where}: {params} should be refused"
            continue
        assert not root.get_attribute("data-error"), f"{where}: {params} refused"
        _close(json.loads(root.get_attribute("data-state")), expected, f"{where} {params}")
        assert page.inner_html(".attnbook-view") != before, f"{where}: {control} changed nothing"
        _legible(page, root, f"{where} after {control}={value}")
    assert not page.errors, page.errors
    page.context.close()


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_untrusted_notebook_markup_shows_the_call(browser, name):
    """With the script stripped (an untrusted notebook), the controls still show the call."""
    widget = LiveWidget(spec(name), **CALLS[name])
    page = _page(browser, 1280, widget.markup())
    root = page.locator(".attnbook-widget").element_handle()
    assert _form(page, root) == widget.params
    assert "has not run here" in root.inner_text()
    page.context.close()


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_an_impossible_setting_is_an_error_and_keeps_the_picture(browser, name):
    widget = LiveWidget(spec(name))
    page = _page(browser, 1280, widget.html())
    root = page.locator(".attnbook-widget").element_handle()
    *first, last = IMPOSSIBLE[name].items()
    for control, value in first:  # possible on their own
        _set(page, root, control, value)
    assert not root.get_attribute("data-error")
    picture, state = page.inner_html(".attnbook-view"), root.get_attribute("data-state")
    _set(page, root, *last)
    readout = page.locator(".attnbook-readout")
    assert "attnbook-error" in readout.get_attribute("class")
    assert root.get_attribute("data-error") and readout.inner_text() == root.get_attribute(
        "data-error"
    )
    with pytest.raises((TypeError, ValueError)):
        widget.state(**IMPOSSIBLE[name])
    assert (
        page.inner_html(".attnbook-view") == picture and root.get_attribute("data-state") == state
    )
    style = page.evaluate(
        "el => [getComputedStyle(el).color, getComputedStyle(el).backgroundColor]",
        readout.element_handle(),
    )
    assert style[0] != style[1] and style[1] != "rgba(0, 0, 0, 0)", "the error looks like a readout"
    page.context.close()


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_dark_page_keeps_the_widget_legible_without_a_panel(browser, name):
    widget = LiveWidget(spec(name), **CALLS[name])
    page = _page(browser, 1280, widget.html(), dark=True)
    root = page.locator(".attnbook-widget").element_handle()
    _legible(page, root, f"{name}, dark page", dark=True)
    page.context.close()


# A stand-in for anywidget's model: traits in a dict, change events, and save_changes answered
# by the real Python face (exposed to the page as window.pyAnswer).
KERNEL = """
async ([esm, traits]) => {
  const url = URL.createObjectURL(new Blob([esm], {type: 'text/javascript'}));
  const module = await import(url);
  const listeners = {};
  const fire = (keys) => keys.forEach((k) => (listeners['change:' + k] || []).forEach((f) => f()));
  const live = Boolean(window.pyAnswer);  // no pyAnswer: a saved notebook, no kernel behind it
  const model = {
    get: (k) => traits[k],
    set: (k, v) => { traits[k] = v; },
    on: (ev, f) => { (listeners[ev] = listeners[ev] || []).push(f); },
    off: (ev, f) => { listeners[ev] = (listeners[ev] || []).filter((g) => g !== f); },
    save_changes: () => {
      if (!live) throw new Error('Syncing error: no comm channel defined');  // as ipywidgets
      window.pyAnswer(traits.params).then((answer) => {
        Object.assign(traits, answer);
        fire(Object.keys(answer));
      });
    },
    send: (content) => {  // a custom message; with no comm ipywidgets drops it silently
      if (!live) return;
      window.pyMessage(content).then((replies) =>
        replies.forEach((r) => (listeners['msg:custom'] || []).forEach((f) => f(r))));
    },
  };
  const el = document.createElement('div');
  document.body.appendChild(el);
  module.default.render({ model, el });
  window.frames_drawn = [];  // every new picture: [source, seq]
  new MutationObserver(() => {
    const svg = el.querySelector('.attnbook-view svg');
    if (svg && !svg.dataset.resized)
      window.frames_drawn.push([svg.dataset.source, +svg.dataset.seq]);
  }).observe(el.querySelector('.attnbook-view'), { childList: true });
}
"""


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_kernel_face_draws_at_once_and_agrees_with_python(browser, name, width):
    widget_spec = spec(name)
    widget = LiveWidget(widget_spec, **CALLS[name])
    face = widget.widget()
    page = _page(browser, width, "")

    def answer(params):
        face.params = params  # what the comm does with the JavaScript's message
        return {"state": face.state, "error": face.error, "seq": face.seq}

    page.expose_function("pyAnswer", answer)
    page.expose_function("pyMessage", lambda content: _python_replies(face, content))
    traits = {k: getattr(face, k) for k in ("markup", "config", "params", "state", "error", "seq")}
    page.evaluate(KERNEL, [esm_source(name), json.loads(json.dumps(traits))])
    root = page.wait_for_selector(".attnbook-widget[data-state]")
    where = f"kernel face of {name} at {width} px"
    assert root.get_attribute("data-source") == "python"  # first picture: Python's state
    assert _form(page, root) == widget.params, f"{where}: the controls do not show the call"
    # Python answered the mount's ping: only now does the note say Python recomputes.
    page.wait_for_function("el => el.dataset.note === 'kernel'", arg=root)
    assert "Python recomputes" in root.inner_text()
    _legible(page, root, where)
    sent = 0
    for control, value in [*_moves(name), *IMPOSSIBLE.get(name, {}).items()]:
        n = face.seq + 1  # the request number the JavaScript will use
        _set(page, root, control, value)
        sent += 1
        page.wait_for_function("([el, n]) => +el.dataset.pythonSeq >= n", arg=[root, n])
        assert root.get_attribute("data-agree") == "true", (
            where,
            control,
            root.get_attribute("data-max-diff"),
        )
        if face.error:
            assert root.get_attribute("data-error") == face.error  # Python's refusal, shown
            continue
        # The JavaScript's own frame came first, then Python's (authoritative) one.
        frames = [f for f in page.evaluate("window.frames_drawn") if f[1] == n]
        assert frames[:2] == [["local", n], ["python", n]], (where, control, frames)
        assert root.get_attribute("data-source") == "python"
        python_state = {k: v for k, v in face.state.items() if k != "_seq"}
        _close(json.loads(root.get_attribute("data-state")), python_state, where)
    assert (
        root.get_attribute("data-disagreements") == "0"
        and int(root.get_attribute("data-checked")) >= sent
    )
    assert not page.errors, page.errors
    page.context.close()


def _python_replies(face, content) -> list:
    """The custom messages the real Python face sends back for ``content``."""
    sent = []
    original = face.send
    face.send = lambda message, buffers=None: sent.append(message)
    try:
        face._on_ping(face, content, [])
    finally:
        face.send = original
    return sent


@pytest.mark.parametrize("name", ["mask_explorer", "rope_rotation"])
def test_kernel_face_with_no_kernel_never_says_python_recomputes(browser, name):
    """A saved notebook reopened with its kernel gone (issue 27): the widget is drawn from the
    saved state and stays live in JavaScript, and its note says no kernel answers it."""
    widget = LiveWidget(spec(name), **CALLS[name])
    face = widget.widget()
    page = _page(browser, 1280, "")
    traits = {k: getattr(face, k) for k in ("markup", "config", "params", "state", "error", "seq")}
    page.evaluate(KERNEL, [esm_source(name), json.loads(json.dumps(traits))])
    root = page.wait_for_selector(".attnbook-widget[data-state]")
    control, value = next(_moves(name))
    before = page.inner_html(".attnbook-view")
    _set(page, root, control, value)
    page.wait_for_timeout(300)  # time for an answer that must not come
    note = page.inner_text(".attnbook-live-note")
    assert "Python recomputes" not in note and "no Python kernel" in note, note
    assert "Run this cell" in note, note
    assert page.inner_html(".attnbook-view") != before, "the JavaScript stopped drawing"
    assert root.get_attribute("data-source") == "local"
    assert not page.errors, page.errors
    page.context.close()


def test_static_face_in_a_notebook_does_not_send_the_reader_to_jupyterlab(browser):
    """In JupyterLab a stored output shows the static face until its cell runs (issue 27):
    its note says how to get Python behind it, not that the full widget runs in JupyterLab."""
    widget = LiveWidget(spec("rope_rotation"))
    page = _page(browser, 1280, "")
    page.evaluate("() => document.body.setAttribute('data-jp-theme-name', 'JupyterLab Light')")
    page.evaluate(
        "html => { const d = document.createElement('div'); document.body.appendChild(d);"
        " const r = document.createRange(); r.selectNode(d);"
        " d.appendChild(r.createContextualFragment(html)); }",
        widget.html(),
    )
    note = page.inner_text(".attnbook-live-note")
    assert "runs in JupyterLab" not in note and "Run this cell" in note, note
    assert "Live on this page" in LiveWidget(spec("rope_rotation")).html()  # the site's note
    page.context.close()


def _touch_page(browser, body: str):
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True
    )
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.set_content(
        '<!doctype html><html><head><meta charset=utf-8><meta name="viewport" '
        f'content="width=device-width"></head><body>{body}</body></html>'
    )
    return page


def test_touch_targets_are_finger_sized_and_sliders_take_the_column(browser):
    """At 390 px under a finger (issue 27: sliders were 16 px high and 9 em wide on a 342 px
    column, checkboxes 13 px)."""
    page = _touch_page(browser, LiveWidget(spec("mask_explorer")).html())
    sizes = page.evaluate(
        """() => {
        const form = document.querySelector('.attnbook-controls').getBoundingClientRect();
        return [...document.querySelectorAll('.attnbook-controls input')].map((e) => {
          const r = e.getBoundingClientRect(), l = e.closest('label').getBoundingClientRect();
          return {type: e.type, name: e.name, w: r.width, h: r.height, row: l.width / form.width};
        }); }"""
    )
    for s in sizes:
        if s["type"] == "checkbox":
            assert s["w"] >= 24 and s["h"] >= 24, s
        else:
            assert s["h"] >= 44, s
        if s["type"] == "range":
            assert s["row"] > 0.95, f"{s['name']}: its row is {s['row']:.0%} of the column"
            assert s["w"] >= 110, s
    assert {s["type"] for s in sizes} == {"range", "checkbox", "number"}
    page.context.close()


def test_a_finger_drag_moves_the_slider_from_its_first_pixels(browser):
    """Chromium's own range input ignores the first 15-20 px of a finger's drag (its tap slop);
    the book's sliders follow from the first few pixels (issue 27)."""
    widget = LiveWidget(spec("kv_cache_calculator"))
    page = _touch_page(browser, widget.html())
    slider = page.locator("input[name=layers]")
    box = slider.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    cdp = page.context.new_cdp_session(page)

    def touch(kind, at):
        points = [] if kind == "touchEnd" else [{"x": at, "y": y}]
        cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

    touch("touchStart", x)
    start = int(slider.input_value())
    seen = []
    for dx in (2, 4, 6, 8):
        touch("touchMove", x + dx)
        seen.append(int(slider.input_value()))
    touch("touchEnd", x + 8)
    assert seen[-1] > start and seen == sorted(seen), (start, seen)
    state = json.loads(page.locator(".attnbook-widget").get_attribute("data-state"))
    _close(state, widget.state(layers=seen[-1]), "the picture after the drag")
    assert not page.errors, page.errors
    page.context.close()


def test_a_typed_value_moves_its_slider(browser):
    """Each slider has a box beside it taking a typed value (issue 27); the slider snaps it to
    its step and range, and the picture follows."""
    widget = LiveWidget(spec("rope_rotation"))
    page = _page(browser, 1280, widget.html())
    root = page.locator(".attnbook-widget").element_handle()
    for typed, expected in (("17", 17), ("99", 32), ("4.4", 4)):
        box = page.locator("input.attnbook-typed[name=m-out]")
        box.fill(typed)
        box.press("Enter")
        assert page.locator("input[name=m]").input_value() == str(expected)
        assert box.input_value() == str(expected), "the box does not show what the slider took"
        state = json.loads(root.get_attribute("data-state"))
        _close(state, widget.state(m=expected), f"typed {typed}")
    _set(page, root, "n", 9)
    assert page.locator("input.attnbook-typed[name=n-out]").input_value() == "9"
    assert not page.errors, page.errors
    page.context.close()


def test_rope_readout_prints_the_angles_m_theta_and_n_theta(browser):
    """The chapter teaches that q turns by m·θ and k by n·θ (issue 27): the readout says so."""
    import re

    widget = LiveWidget(spec("rope_rotation"), **CALLS["rope_rotation"])
    page = _page(browser, 1280, widget.html())
    text = page.inner_text(".attnbook-readout")
    state = widget.state()
    m, n, theta = state["m"], state["n"], state["theta"]
    found = re.search(
        rf"m·θ = {m}·θ = ([-0-9.e+]+) rad, k turns n·θ = {n}·θ = ([-0-9.e+]+) rad, "
        r"difference \(n − m\)·θ = ([-0-9.e+]+) rad",
        text,
    )
    assert found, text
    wanted = (m * theta, n * theta, (n - m) * theta)
    for got, want in zip(map(float, found.groups()), wanted, strict=True):
        assert math.isclose(got, want, rel_tol=1e-3), (got, want)
    page.context.close()
