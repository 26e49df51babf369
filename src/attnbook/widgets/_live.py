"""Two faces for one widget: ipywidgets for a live kernel, HTML + JavaScript for the static site.

Why this design
---------------
A reader of the website has no kernel, so an ipywidgets slider embedded in a page moves
nothing. Every widget in this package is therefore declared once, as a :class:`WidgetSpec`:

* its controls (``Control``), from which *both* faces build their inputs;
* ``compute(**params) -> state``: the numbers the widget shows, a plain dict;
* ``draw(state, fig)``: the matplotlib picture of a state (used by the kernel face, by
  static figures and by tests, without a browser);
* a small JavaScript file (``widgets/js/<name>.js``) that re-implements ``compute`` in a few
  lines and draws the state as SVG. The arithmetic here is tiny (a softmax, a 2-D rotation, a
  byte count, a mask rule, a running max), so the JavaScript computes every setting exactly
  instead of swapping precomputed frames; that keeps each page's added weight at a few KB.
  ``tests/test_widgets_js.py`` runs the JavaScript in Node and checks it against ``compute``
  for a grid of settings, so the two implementations cannot drift apart silently.

Choosing the static mechanism, widget by widget
----------------------------------------------
Three mechanisms keep a control live without a kernel: precomputed frames swapped by a range
input (matplotlib's ``to_jshtml``; ~10 KB a frame, one parameter), a grid of precomputed
states for two parameters (frames multiply), or the arithmetic itself in JavaScript. Each
widget here has three or more controls, so frames would need hundreds to thousands of PNGs,
while its arithmetic is a few lines; every one therefore recomputes in JavaScript:

=======================  =======================================  ===========================
widget                   what the JavaScript recomputes           why not frames
=======================  =======================================  ===========================
softmax_saturation       softmax, entropy, Jacobian norm, curve   3 controls, continuous scale
kv_cache_calculator      exact integer byte counts (< 2**53)      7 controls, millions of settings
mask_explorer            the causal/padding/segment mask rule     6 controls, a grid per setting
rope_rotation            2-D rotations and the score curve        4 controls, continuous base
online_softmax_stepper   block states and their exact merges      3 controls, data-dependent
=======================  =======================================  ===========================

Displaying a :class:`LiveWidget` returns one MIME bundle holding both faces. JupyterLab and
Colab prefer the widget view (the sliders call back into Python); the book build is told to
prefer ``text/html`` (``nb_mime_priority_overrides`` in ``_config.yml``), so the site shows
the JavaScript face, which stays interactive with no kernel and no network.
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

__all__ = ["Control", "LiveWidget", "WidgetSpec", "js_source"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_ids = itertools.count()  # deterministic element ids in a fresh kernel (strict nbval)

# Shown until the script runs; mount() swaps in LIVE_NOTE. A reader sees it with JavaScript
# off, or in JupyterLab, which strips the scripts of an untrusted notebook's stored outputs.
NOT_RUN_NOTE = (
    "The script behind this figure has not run here: in Jupyter, re-run the cell (or trust "
    "the notebook); the static figures nearby carry the same lesson."
)
LIVE_NOTE = (
    "Live on this page: the controls recompute in your browser. "
    "The full widget, with Python behind it, runs in JupyterLab or Colab."
)


# Scoped to .attnbook-widget; the drawing sits on white so it stays legible in dark mode.
_CSS = (
    ".attnbook-widget{border:1px solid #bbb;border-radius:6px;padding:.5em .9em;"
    "margin:1em 0;max-width:680px}"
    ".attnbook-widget .attnbook-controls{display:flex;flex-wrap:wrap;gap:.3em 1.2em;"
    "align-items:center;font-size:.9em}"
    ".attnbook-widget input[type=range]{vertical-align:middle;width:9em}"
    ".attnbook-widget .attnbook-live-note{font-size:.85em;opacity:.8;margin:.2em 0}"
    ".attnbook-widget .attnbook-view{background:#fff;border-radius:4px}"
    ".attnbook-widget .attnbook-readout{font-family:monospace;font-size:.85em;min-height:1.2em}"
)


@dataclass(frozen=True)
class Control:
    """One input of a widget, shared by the ipywidgets face and the HTML face.

    ``kind`` is ``"range"`` (a slider from ``min`` to ``max`` by ``step``; ``integer`` picks
    an int slider), ``"checkbox"`` (a bool) or ``"select"`` (one of ``options``).
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

    def check(self, value: Any) -> Any:
        """Return ``value`` coerced to this control's type, or raise naming the control."""
        if self.kind == "checkbox":
            if not isinstance(value, bool):
                raise TypeError(f"{self.name} must be a bool, got {value!r}")
            return value
        if self.kind == "select":
            if value not in self.options:
                raise ValueError(f"{self.name} must be one of {list(self.options)}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{self.name} must be a number, got {value!r}")
        if self.integer and int(value) != value:
            raise TypeError(f"{self.name} must be an integer, got {value!r}")
        if not self.min <= value <= self.max:
            raise ValueError(f"{self.name} must lie in [{self.min}, {self.max}], got {value!r}")
        return int(value) if self.integer else float(value)

    def html(self) -> str:
        label = html.escape(self.label)
        if self.kind == "checkbox":
            checked = " checked" if self.value else ""
            return (
                f'<label>{label} <input type="checkbox" name="{self.name}" '
                f'data-type="bool"{checked}></label>'
            )
        if self.kind == "select":
            kind = "int" if all(isinstance(o, int) for o in self.options) else "str"
            items = "".join(
                f'<option value="{html.escape(str(o))}"'
                f"{' selected' if o == self.value else ''}>{html.escape(str(o))}</option>"
                for o in self.options
            )
            return (
                f'<label>{label} <select name="{self.name}" data-type="{kind}">'
                f"{items}</select></label>"
            )
        kind = "int" if self.integer else "float"
        return (
            f'<label>{label} <input type="range" name="{self.name}" data-type="{kind}" '
            f'min="{self.min}" max="{self.max}" step="{self.step}" value="{self.value}">'
            f'<output name="{self.name}-out">{self.value}</output></label>'
        )

    def ipywidget(self):
        import ipywidgets as w

        style = {"description_width": "initial"}
        if self.kind == "checkbox":
            return w.Checkbox(value=self.value, description=self.label, style=style)
        if self.kind == "select":
            return w.Dropdown(
                options=list(self.options), value=self.value, description=self.label, style=style
            )
        slider = w.IntSlider if self.integer else w.FloatSlider
        return slider(
            value=self.value,
            min=self.min,
            max=self.max,
            step=self.step,
            description=self.label,
            style=style,
            continuous_update=True,
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


class LiveWidget:
    """A widget ready to display; see the module docstring for its two faces.

    Args:
        spec: the widget's declaration.
        params: initial values, one per control; each is validated by its control.
    """

    def __init__(self, spec: WidgetSpec, **params: Any):
        self.spec = spec
        self.params = self._checked({c.name: c.value for c in spec.controls} | params)
        self.spec.compute(**self.params)  # reject an impossible starting point early
        self._box = None
        self._positions = None  # axes positions of the kernel face's first laid-out picture

    def _checked(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known = {c.name: c for c in self.spec.controls}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(
                f"{self.spec.name} has no control named {unknown}; controls are {sorted(known)}"
            )
        return {name: known[name].check(value) for name, value in params.items()}

    def state(self, **overrides: Any) -> dict:
        """The numbers shown for the current settings updated by ``overrides``."""
        return self.spec.compute(**(self.params | self._checked(overrides)))

    def figure(self, **overrides: Any):
        """A matplotlib figure of :meth:`state` (what the kernel face displays)."""
        return self._draw(self.state(**overrides), layout="constrained")

    def _draw(self, state: dict, *, layout: str):
        from matplotlib.figure import Figure

        from attnbook.plots import use_style

        use_style()
        fig = Figure(figsize=(6.4, 3.4), layout=layout)
        self.spec.draw(state, fig)
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

    # --- the static-site face -------------------------------------------------------------
    def html(self) -> str:
        """Self-contained HTML + JavaScript that recomputes in the browser (no kernel)."""
        root = f"attnbook-{self.spec.name}-{next(_ids)}"
        config = {"params": self.params, "data": dict(self.spec.data)}
        controls = "\n".join(c.html() for c in self.spec.controls)
        payload = json.dumps(config, sort_keys=True).replace("</", "<\\/")
        return f"""<style>{_CSS}</style>
<div class="attnbook-widget" id="{root}" data-widget="{self.spec.name}">
<p class="attnbook-title"><strong>{html.escape(self.spec.title)}</strong></p>
<p class="attnbook-live-note" data-live="{html.escape(self.spec.live_note)}">{NOT_RUN_NOTE}</p>
<form class="attnbook-controls" onsubmit="return false">
{controls}
</form>
<div class="attnbook-view" role="img" aria-label="{html.escape(self.spec.title)}"></div>
<p class="attnbook-readout" aria-live="polite"></p>
</div>
<script>
(function () {{
{js_source("runtime")}
{js_source(self.spec.name)}
globalThis.attnbook.mount(document.getElementById("{root}"), "{self.spec.name}", {payload});
}})();
</script>"""

    # --- the kernel face --------------------------------------------------------------------
    def ipywidget(self):
        """The ipywidgets face: the same controls, a PNG of :meth:`figure`, a message line."""
        if self._box is None:
            import ipywidgets as w

            inputs = {c.name: c.ipywidget() for c in self.spec.controls}
            image = w.Image(format="png")
            message = w.HTML()
            for name, control in inputs.items():
                control.value = self.params[name]
                control.observe(
                    lambda change, n=name: self.update(**{n: change["new"]}), names="value"
                )
            self._inputs, self._image, self._message = inputs, image, message
            self._box = w.VBox(
                [
                    w.HTML(f"<b>{html.escape(self.spec.title)}</b>"),
                    w.HBox(list(inputs.values()), layout=w.Layout(flex_flow="row wrap")),
                    image,
                    message,
                ]
            )
            self.update()
        return self._box

    def update(self, **params: Any) -> bool:
        """Apply new settings to the kernel face; returns False (and says why) if rejected.

        An impossible combination shows a one-line message instead of a traceback and keeps
        the last good picture.
        """
        import io

        import matplotlib as mpl

        try:
            candidate = self.params | self._checked(params)
            self.spec.compute(**candidate)
        except (TypeError, ValueError) as error:
            if self._box is not None:
                self._message.value = (
                    f"<span style='color:#D55E00'>{html.escape(str(error))}</span>"
                )
            return False
        self.params = candidate
        if self._box is not None:
            fig, buffer = self._kernel_figure(), io.BytesIO()
            # A "tight" bounding box (the book's default for saved figures) would draw twice.
            with mpl.rc_context({"savefig.bbox": "standard"}):
                fig.savefig(buffer, format="png")
            self._image.value = buffer.getvalue()
            self._message.value = ""
        return True

    def _kernel_figure(self):
        """The figure for the kernel face, laid out once and then reused.

        Constrained layout is half the cost of a redraw, so the axes positions it finds for
        the first picture are kept for the following ones (while the axes stay the same),
        which keeps a slider move within the 100 ms a reader notices.
        """
        saved = self._positions
        fig = self._draw(self.state(), layout="none" if saved else "constrained")
        if saved and len(saved) == len(fig.axes):
            for ax, position in zip(fig.axes, saved, strict=True):
                ax.set_position(position)
        elif saved:  # the axes changed: lay this figure out afresh
            fig.set_layout_engine("constrained")
            saved = None
        if not saved:
            fig.draw_without_rendering()  # runs the layout, so the positions below are final
            self._positions = [ax.get_position() for ax in fig.axes]
        return fig

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The static-site build sets ATTNBOOK_WIDGETS=static: no kernel will be there to
        # answer the sliders, so only the JavaScript face is emitted (and no widget state
        # is saved, which would make each page load the 3.6 MB widget manager for nothing).
        bundle = {}
        if os.environ.get("ATTNBOOK_WIDGETS") != "static":
            # Written out rather than asking ipywidgets, whose 7.x line (still Colab's
            # default) has no _repr_mimebundle_; a view needs only the model's id.
            bundle[WIDGET_VIEW] = {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.ipywidget().model_id,
            }
        bundle["text/html"] = self.html()
        bundle["text/plain"] = f"{self.spec.title} (interactive: run in JupyterLab or Colab)"
        return bundle
