"""Interactive figures: one SVG drawing, live in a kernel (anywidget) and on the static site.

Every widget is one public function here, returning a :class:`LiveWidget`; display it as the
last expression of a cell. Each lives in its own module, which defines ``SPEC`` (its
:class:`WidgetSpec`) and a JavaScript twin in ``js/<name>.js``. See
:mod:`attnbook.widgets._live` for the design and why the JavaScript recomputes instead of
replaying precomputed frames.

Modules are imported on first use, so ``import attnbook.widgets`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

if TYPE_CHECKING:
    from attnbook.widgets.draft_quality import speculative_speedup
    from attnbook.widgets.head_rows import head_explorer
    from attnbook.widgets.kv_cache import kv_cache_calculator
    from attnbook.widgets.mask_grid import mask_explorer
    from attnbook.widgets.online_softmax import online_softmax_stepper
    from attnbook.widgets.rope_plane import rope_rotation
    from attnbook.widgets.softmax import softmax_saturation

# public widget function -> module that defines it (and its SPEC)
WIDGETS = {
    "softmax_saturation": "softmax",
    "kv_cache_calculator": "kv_cache",
    "mask_explorer": "mask_grid",
    "rope_rotation": "rope_plane",
    "online_softmax_stepper": "online_softmax",
    "head_explorer": "head_rows",
    "speculative_speedup": "draft_quality",
}

__all__ = [
    "WIDGETS",
    "Control",
    "LiveWidget",
    "WidgetSpec",
    "head_explorer",
    "kv_cache_calculator",
    "mask_explorer",
    "online_softmax_stepper",
    "rope_rotation",
    "softmax_saturation",
    "spec",
    "speculative_speedup",
]


def spec(name: str) -> WidgetSpec:
    """The :class:`WidgetSpec` of the widget function ``name`` (e.g. ``"mask_explorer"``)."""
    if name not in WIDGETS:
        raise ValueError(f"unknown widget {name!r}; widgets are {sorted(WIDGETS)}")
    return importlib.import_module(f"attnbook.widgets.{WIDGETS[name]}").SPEC


def __getattr__(name: str):
    # Module names differ from the functions they define: importing a submodule binds it on
    # this package under its own name, which must never shadow a widget function.
    if name in WIDGETS:
        function = getattr(importlib.import_module(f"attnbook.widgets.{WIDGETS[name]}"), name)
        globals()[name] = function
        return function
    raise AttributeError(f"module 'attnbook.widgets' has no attribute {name!r}")
