"""One widget, one drawing, two faces: an anywidget in a kernel, HTML + JavaScript on the site.

The contract (what a new widget provides)
-----------------------------------------
A widget is declared once, as a :class:`WidgetSpec`:

* ``controls``: its inputs (:class:`Control`); Python writes their markup, carrying the
  values the widget was called with, so both faces (and an untrusted notebook, whose scripts
  are stripped) open as called;
* ``compute(**params) -> state``: the numbers the widget shows, a JSON-able dict. Python is
  authoritative; ``compute`` rejects an impossible setting with a ValueError/TypeError whose
  message names the argument (the faces show that message, styled as an error, and keep the
  last good picture);
* ``js/<name>.js``: registers ``globalThis.attnbook.widgets[name] = {compute, render,
  readout}``. ``compute(params, data)`` re-implements the Python ``compute`` (a grid of
  settings is checked against it in Node, ``tests/test_widgets_js.py``); ``render(state,
  width)`` returns the SVG of a state laid out for ``width`` CSS pixels *at scale 1* (so the
  text sizes it writes, >= 10 px, are the sizes on screen; :func:`ab.panels` stacks two panels
  when narrow) and is called again whenever the width changes; ``readout(state)`` is one line
  of text. Text is drawn in ``currentColor`` (the page's colour), so the drawing suits dark
  pages as well as light ones; colour is carried by marks, never by text;
* ``draw(state, fig)`` / ``panel(state, ax)``: matplotlib pictures for static figures
  (:meth:`LiveWidget.figure`, :meth:`LiveWidget.small_multiples`, PDF). They are off the
  interactive path.

A :class:`Control` may declare ``max_from="n_blocks"``: its slider's maximum is then that
entry of the current state (e.g. the online-softmax stepper's "blocks merged").

The two faces, and why
----------------------
Both faces are the same DOM (the markup from :meth:`LiveWidget.markup`) driven by the same
JavaScript (``js/runtime.js`` + ``js/<name>.js``), so there is one drawing, the SVG that
``render`` draws:

* **Static face** (:meth:`LiveWidget.html`, the website, ``ATTNBOOK_WIDGETS=static``): an
  inline script mounts the markup and recomputes every setting in JavaScript. No kernel, no
  network, a few KB per widget. The arithmetic is tiny (a softmax, a 2-D rotation, a byte
  count, a mask rule, a running max, a geometric sum), so the JavaScript computes each setting
  exactly rather than swapping precomputed frames (every widget has 3-7 controls: frames
  would multiply).
* **Kernel face** (:meth:`LiveWidget.widget`, JupyterLab, Notebook, Colab): an anywidget whose
  ES module is that same JavaScript plus an entry point. On every input event the module
  draws its own JavaScript prediction at once, then sends ``params`` (with a request number
  ``_seq``) to Python; Python validates, computes and answers in one message: ``state``
  (echoing ``_seq``), ``error`` (``""`` or the reason it refused; the last good state stays)
  and ``seq``. The module redraws from Python's state, which is authoritative, and records on
  the root whether its prediction agreed (``data-agree``, ``data-max-diff``,
  ``data-disagreements``). A notebook saved with widget state reopens drawn from the saved
  ``state``; with no kernel the JavaScript keeps the controls live.

Why not ipywidgets sliders and a matplotlib PNG (the previous kernel face): measured in real
JupyterLab 4.6 and in Classic Notebook 6 + ipywidgets 7 (Colab's line) on this 2-core machine
(``benchmarks/widget_latency.py``), a control change took 125-209 ms (Lab) and 145-213 ms
(Classic) to reach the screen as a new PNG (matplotlib's draw and savefig alone were 80-100
ms), and a 0.5 s drag of 15 moves produced 2-6 pictures. With this face the JavaScript's frame
is on screen 3-4 ms (median) after each change in both front ends, every value a drag passes
gets a frame, and Python's reconciled frame follows one round trip later (about 50-70 ms
median under load; it confirms the picture rather than being the first one), with the two
agreeing on every change measured. The face also draws the same picture as the website,
which the PNG face could not.

``_repr_mimebundle_`` returns the widget view (written out by hand: ipywidgets 7.x has no
``_repr_mimebundle_``), ``text/html`` (the static face) and ``text/plain``. JupyterLab and
Colab prefer the widget view; the book build sets ``ATTNBOOK_WIDGETS=static`` and gets only
the HTML. In Colab, anywidget turns on Colab's custom widget manager when the widget is
built; :func:`attnbook.setup` does so explicitly, and only there.
"""

from __future__ import annotations

import html
import itertools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from attnbook._checks import require_bool, require_integral, require_real

__all__ = ["Control", "LiveWidget", "WidgetSpec", "esm_source", "js_source"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_ids = itertools.count()  # deterministic element ids in a fresh kernel (strict nbval)

# Shown until the script runs; mount() swaps in LIVE_NOTE (or KERNEL_NOTE). A reader sees it
# with JavaScript off, or in JupyterLab, which strips the scripts of an untrusted notebook's
# stored outputs (the controls then still show the values the widget was called with).
NOT_RUN_NOTE = (
    "The script behind this figure has not run here: in Jupyter, re-run the cell (or trust "
    "the notebook); the static figures nearby carry the same lesson."
)
LIVE_NOTE = (
    "Live on this page: the controls recompute in your browser. "
    "The full widget, with Python behind it, runs in JupyterLab or Colab."
)
# The same static face inside Jupyter (a stored output, before its cell is run): the reader is
# already where the full widget runs, so the note says how to get it, not where.
NOTEBOOK_NOTE = (
    "Live in your browser: the controls recompute here without Python. "
    "Run this cell to have Python recompute each move too."
)
# The kernel face says Python recomputes only once Python has answered (a ping at mount, or
# any reply); drawn from a saved notebook with no kernel behind it, it says so.
KERNEL_NOTE = "Live: your browser draws each move at once and Python recomputes it."
SAVED_NOTE = (
    "Drawn from the saved notebook: your browser recomputes each move; no Python kernel is "
    "answering this widget. Run this cell to have Python recompute each move too."
)

# Scoped to .attnbook-widget. No background of its own: the widget takes the page's colours
# (light or dark); an error is styled as one, with 4.5:1 contrast in both themes.
_CSS = (
    ".attnbook-widget{border:1px solid rgba(128,128,128,.5);border-radius:6px;"
    "padding:.5em .8em;margin:1em 0;max-width:760px;color:inherit;background:transparent;"
    "box-sizing:border-box}"
    ".attnbook-widget .attnbook-controls{display:flex;flex-wrap:wrap;gap:.3em 1.2em;"
    "align-items:center;font-size:.9em}"
    # Touch targets: a slider's box is 32 px high (44 px under a finger) and takes the rest of
    # its row on a narrow column; checkboxes 20 px (24 px); the slider answers a finger from
    # its first pixel (touch-action, and runtime.js follows the pointer itself).
    ".attnbook-widget .attnbook-controls label{display:inline-flex;align-items:center;"
    "gap:.3em;min-height:32px}"
    ".attnbook-widget .attnbook-controls label.attnbook-range{flex:1 1 20em;max-width:100%}"
    ".attnbook-widget input[type=range]{flex:1 0 9em;width:auto;height:32px;"
    "margin:0;touch-action:pan-y}"
    ".attnbook-widget input[type=checkbox]{width:20px;height:20px;margin:0}"
    ".attnbook-widget input.attnbook-typed{width:4.5em;flex:none;font:inherit;color:inherit;"
    "background:transparent;border:1px solid rgba(128,128,128,.6);border-radius:3px;"
    "padding:.1em .25em;box-sizing:border-box}"
    "@media (pointer:coarse){.attnbook-widget input[type=range]{height:44px}"
    ".attnbook-widget input[type=checkbox]{width:24px;height:24px}"
    ".attnbook-widget .attnbook-controls label{min-height:44px}"
    ".attnbook-widget input.attnbook-typed{min-height:44px}}"
    ".attnbook-widget .attnbook-live-note{font-size:.85em;margin:.2em 0}"
    ".attnbook-widget .attnbook-view{width:100%;min-height:1em}"
    ".attnbook-widget .attnbook-view svg{display:block;max-width:100%;height:auto;"
    "overflow:visible}"
    ".attnbook-widget .attnbook-readout{font-family:monospace;font-size:.85em;"
    "min-height:1.2em;overflow-wrap:anywhere;margin:.3em 0}"
    ".attnbook-widget .attnbook-error{color:#a4262c;background:#fde7e9;"
    "border-left:4px solid #a4262c;padding:.25em .5em;font-family:inherit}"
    ".attnbook-widget .attnbook-error::before{content:'Not possible: ';font-weight:bold}"
    "html[data-theme=dark] .attnbook-widget .attnbook-error,"
    "body[data-jp-theme-light=false] .attnbook-widget .attnbook-error"
    "{color:#ffb3b8;background:#3d1316;border-color:#ffb3b8}"
    "html[data-theme=dark] .attnbook-widget,body[data-jp-theme-light=false] .attnbook-widget"
    "{color-scheme:dark}"
)


def _show(value: Any) -> str:
    """A control value as the browser writes it (``4.0`` -> ``4``, as ``input.value`` does)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Control:
    """One input of a widget; Python writes its markup, both faces use it.

    ``kind`` is ``"range"`` (a slider from ``min`` to ``max`` by ``step``; ``integer`` picks
    whole numbers), ``"checkbox"`` (a bool) or ``"select"`` (one of ``options``).
    ``max_from`` names a state entry that caps the slider (its range follows the state).
    """

    name: str
    label: str
    kind: Literal["range", "checkbox", "select"]
    value: Any
    min: float = 0.0
    max: float = 1.0
    step: float = 1.0
    integer: bool = False
    options: tuple[Any, ...] = ()
    max_from: str | None = None

    def check(self, value: Any) -> Any:
        """Return ``value`` as this control's type, or raise naming the control.

        Whole-number floats are accepted where an integer is needed (``4096.0`` is 4096);
        ``70.5`` is not.
        """
        if self.kind == "checkbox":
            return require_bool(self.name, value)
        if self.kind == "select":
            for option in self.options:
                same_kind = isinstance(option, str) == isinstance(value, str)
                if same_kind and not isinstance(value, bool) and option == value:
                    return option  # the declared option itself: 4096.0 -> 4096
            raise ValueError(f"{self.name} must be one of {list(self.options)}, got {value!r}")
        number = (
            require_integral(self.name, value) if self.integer else require_real(self.name, value)
        )
        if not self.min <= number <= self.max:
            raise ValueError(
                f"{self.name} must lie in [{_show(self.min)}, {_show(self.max)}], got {value!r}"
            )
        return number

    def html(self, value: Any = None, maximum: float | None = None) -> str:
        """The control's markup, set to ``value`` (default: its own) and capped at ``maximum``."""
        value = self.value if value is None else value
        label = html.escape(self.label)
        if self.kind == "checkbox":
            checked = " checked" if value else ""
            return (
                f'<label>{label} <input type="checkbox" name="{self.name}" '
                f'data-type="bool"{checked}></label>'
            )
        if self.kind == "select":
            kind = "int" if all(isinstance(o, int) for o in self.options) else "str"
            items = "".join(
                f'<option value="{html.escape(str(o))}"'
                f"{' selected' if o == value else ''}>{html.escape(str(o))}</option>"
                for o in self.options
            )
            return (
                f'<label>{label} <select name="{self.name}" data-type="{kind}">'
                f"{items}</select></label>"
            )
        kind = "int" if self.integer else "float"
        top = self.max if maximum is None else maximum
        limit = f' data-max-from="{self.max_from}"' if self.max_from else ""
        bounds = f'min="{_show(self.min)}" max="{_show(top)}" step="{_show(self.step)}"'
        # Beside the slider, its value as a box the reader can type into (runtime.js moves the
        # slider to a typed value, snapped to the slider's step and range).
        return (
            f'<label class="attnbook-range">{label} <input type="range" name="{self.name}" '
            f'data-type="{kind}" {bounds} value="{_show(value)}"{limit}>'
            f'<input type="number" class="attnbook-typed" name="{self.name}-out" {bounds} '
            f'value="{_show(value)}" aria-label="{label}, typed"{limit}></label>'
        )


@dataclass(frozen=True)
class WidgetSpec:
    """Everything a widget shows, declared once (see the module docstring)."""

    name: str  # also the JavaScript file name and its registry key
    title: str
    controls: tuple[Control, ...]
    compute: Callable[..., dict]  # params -> JSON-serialisable state
    draw: Callable[[dict, Any], None]  # (state, matplotlib Figure) -> None
    data: Mapping[str, Any] = field(default_factory=dict)  # fixed inputs shared with the JS
    panel: Callable[[dict, Any], None] | None = None  # (state, Axes): one small-multiple panel
    live_note: str = LIVE_NOTE


@cache
def js_source(name: str) -> str:
    """The JavaScript shipped with the package: ``runtime`` or a widget's ``name``."""
    return resources.files("attnbook.widgets").joinpath("js", f"{name}.js").read_text("utf-8")


@cache
def esm_source(name: str) -> str:
    """The kernel face's ES module: the static face's JavaScript plus anywidget's entry."""
    return (
        f"{js_source('runtime')}\n{js_source(name)}\n"
        "export default {\n"
        "  render({ model, el }) {\n"
        f"    return globalThis.attnbook.kernelView(model, el, {json.dumps(name)});\n"
        "  },\n"
        "};\n"
    )


@cache
def _kernel_class():
    """The anywidget class (built on first use, so importing the widgets stays cheap)."""
    import anywidget
    import traitlets

    class KernelFace(anywidget.AnyWidget):
        """Traits of the kernel face; see the module docstring for the protocol."""

        widget_name = traitlets.Unicode().tag(sync=True)
        markup = traitlets.Unicode().tag(sync=True)  # the same DOM as the static face
        config = traitlets.Dict().tag(sync=True)  # {"data", "controls"}
        # Set by the JS, with "_seq". No echo (ipywidgets 8 would send the params back in a
        # message of their own before the answer: one more round of websocket traffic).
        params = traitlets.Dict().tag(sync=True, echo_update=False)
        state = traitlets.Dict().tag(sync=True)  # set by Python, echoing "_seq"
        error = traitlets.Unicode("").tag(sync=True)
        seq = traitlets.Int(0).tag(sync=True)  # the last request Python answered

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.on_msg(self._on_ping)

        def _on_ping(self, _widget, content, _buffers) -> None:
            # The JavaScript asks at mount whether a kernel holds this model (a custom message
            # changes no trait, so a reopened notebook is not marked modified by asking).
            if isinstance(content, dict) and content.get("type") == "ping":
                self.send({"type": "pong"})

    return KernelFace


class LiveWidget:
    """A widget ready to display; see the module docstring for its two faces.

    Args:
        spec: the widget's declaration.
        params: initial values, one per control; each is validated by its control (whole
            floats such as ``4096.0`` become ints), then together by ``spec.compute``.
    """

    def __init__(self, spec: WidgetSpec, **params: Any):
        self.spec = spec
        params = self._checked({c.name: c.value for c in spec.controls} | params)
        state = self.spec.compute(**params)  # reject an impossible starting point early
        self.params = self._clamped(params, state)
        self._state = state
        self._face = None
        self._seq = 0

    def _checked(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known = {c.name: c for c in self.spec.controls}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(
                f"{self.spec.name} has no control named {unknown}; controls are {sorted(known)}"
            )
        return {name: known[name].check(value) for name, value in params.items()}

    def _clamped(self, params: dict, state: dict) -> dict:
        # A slider whose range follows the state shows at most that maximum (compute clamps).
        out = dict(params)
        for c in self.spec.controls:
            if c.max_from and isinstance(state.get(c.max_from), int | float):
                out[c.name] = min(out[c.name], state[c.max_from])
        return out

    def state(self, **overrides: Any) -> dict:
        """The numbers shown for the current settings updated by ``overrides``."""
        return self.spec.compute(**(self.params | self._checked(overrides)))

    def figure(self, **overrides: Any):
        """A matplotlib figure of :meth:`state` (static figures; not the interactive path)."""
        from matplotlib.figure import Figure

        from attnbook.plots import use_style

        use_style()
        fig = Figure(figsize=(6.4, 3.4), layout="constrained")
        self.spec.draw(self.state(**overrides), fig)
        return fig

    def small_multiples(self, name: str, values, *, ncols: int | None = None, **fixed: Any):
        """A static figure: one :attr:`WidgetSpec.panel` per value of control ``name``.

        This is what a reader without JavaScript or a kernel still sees: the same lesson as the
        slider, as a row (or grid) of frames.
        """
        from matplotlib.figure import Figure

        from attnbook.plots import use_style

        if self.spec.panel is None:
            raise ValueError(f"{self.spec.name} has no small-multiple panel")
        values = list(values)
        if not values:
            raise ValueError("values must not be empty")
        ncols = ncols or min(len(values), 4)
        nrows = -(-len(values) // ncols)
        use_style()
        fig = Figure(figsize=(6.4, 2.4 * nrows + 0.4), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for i, (ax, value) in enumerate(zip(axes, values, strict=False)):
            self.spec.panel(self.state(**fixed, **{name: value}), ax)
            if i % ncols:
                ax.set_ylabel("")  # shared meaning across a row; say it once
        for ax in axes[len(values) :]:
            ax.set_visible(False)
        return fig

    # --- the DOM both faces share ------------------------------------------------------------
    def _config(self) -> dict:
        controls = [
            {"name": c.name, "kind": c.kind, "max_from": c.max_from} for c in self.spec.controls
        ]
        return {"data": dict(self.spec.data), "controls": controls}

    def markup(self) -> str:
        """The widget's DOM, controls set to the current values (no script)."""
        root = f"attnbook-{self.spec.name}-{next(_ids)}"
        controls = "\n".join(
            c.html(
                self.params[c.name],
                self._state.get(c.max_from) if c.max_from else None,
            )
            for c in self.spec.controls
        )
        title = html.escape(self.spec.title)
        return f"""<style>{_CSS}</style>
<div class="attnbook-widget" id="{root}" data-widget="{self.spec.name}">
<p class="attnbook-title"><strong>{title}</strong></p>
<p class="attnbook-live-note" data-live="{html.escape(self.spec.live_note)}" \
data-notebook="{html.escape(NOTEBOOK_NOTE)}" data-kernel="{html.escape(KERNEL_NOTE)}" \
data-saved="{html.escape(SAVED_NOTE)}">{NOT_RUN_NOTE}</p>
<form class="attnbook-controls" onsubmit="return false">
{controls}
</form>
<div class="attnbook-view" role="img" aria-label="{title}"></div>
<p class="attnbook-readout" aria-live="polite"></p>
</div>"""

    # --- the static-site face -----------------------------------------------------------------
    def html(self) -> str:
        """Self-contained HTML + JavaScript that recomputes in the browser (no kernel)."""
        markup = self.markup()
        root = markup.split('id="', 1)[1].split('"', 1)[0]
        config = self._config() | {"params": self.params}
        payload = json.dumps(config, sort_keys=True).replace("</", "<\\/")
        return f"""{markup}
<script>
(function () {{
{js_source("runtime")}
{js_source(self.spec.name)}
globalThis.attnbook.mount(document.getElementById("{root}"), "{self.spec.name}", {payload});
}})();
</script>"""

    # --- the kernel face ------------------------------------------------------------------------
    def widget(self):
        """The kernel face: an anywidget (built once) drawing with the same JavaScript."""
        if self._face is None:
            face = _kernel_class()(
                _esm=esm_source(self.spec.name),
                widget_name=self.spec.name,
                markup=self.markup(),
                config=self._config(),
                params=dict(self.params),
                state={**self._state, "_seq": self._seq},
                seq=self._seq,
            )
            face.observe(self._on_params, names="params")
            self._face = face
        return self._face

    def _on_params(self, change) -> None:
        """A request from the JavaScript: validate, compute, answer in one message."""
        request = dict(change["new"])
        seq = request.pop("_seq", None)
        if seq is None:  # set from Python (update), already answered
            return
        face = self._face
        try:
            candidate = self.params | self._checked(request)
            state = self.spec.compute(**candidate)
        except (TypeError, ValueError) as error:
            with face.hold_sync():
                face.error = str(error)
                face.seq = self._seq = int(seq)
            return
        self.params, self._state = self._clamped(candidate, state), state
        with face.hold_sync():
            face.error = ""
            face.state = {**state, "_seq": int(seq)}
            face.seq = self._seq = int(seq)

    def update(self, **params: Any) -> bool:
        """Apply new settings from Python; returns False (and says why) if rejected.

        An impossible combination shows its message, styled as an error, and keeps the last
        good picture.
        """
        try:
            candidate = self.params | self._checked(params)
            state = self.spec.compute(**candidate)
        except (TypeError, ValueError) as error:
            if self._face is not None:
                with self._face.hold_sync():
                    self._seq += 1
                    self._face.error = str(error)
                    self._face.seq = self._seq
            return False
        self.params, self._state = self._clamped(candidate, state), state
        if self._face is not None:
            with self._face.hold_sync():
                self._seq += 1
                self._face.params = dict(self.params)
                self._face.error = ""
                self._face.state = {**state, "_seq": self._seq}
                self._face.seq = self._seq
        return True

    @property
    def error(self) -> str:
        """The kernel face's message for the last rejected setting (``""`` if none)."""
        return "" if self._face is None else self._face.error

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The static-site build sets ATTNBOOK_WIDGETS=static: no kernel will be there to
        # answer the controls, so only the JavaScript face is emitted (and no widget state
        # is saved, which would make each page load the 3.6 MB widget manager for nothing).
        bundle, metadata = {}, {}
        if os.environ.get("ATTNBOOK_WIDGETS") != "static":
            # Written out rather than asking ipywidgets, whose 7.x line (still Colab's
            # default) has no _repr_mimebundle_; a view needs only the model's id.
            bundle[WIDGET_VIEW] = {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget().model_id,
            }
            metadata = _colab_metadata()
        bundle["text/html"] = self.html()
        bundle["text/plain"] = f"{self.spec.title} (interactive: run in JupyterLab or Colab)"
        return (bundle, metadata) if metadata else bundle


def _colab_metadata() -> dict:
    """In Colab, the custom widget manager's URL (what anywidget's own repr adds); else {}."""
    import sys

    if "google.colab.output" not in sys.modules:
        return {}
    try:
        from anywidget._util import get_repr_metadata

        return get_repr_metadata()
    except Exception:  # a private helper of anywidget: never let it break a display
        return {}
