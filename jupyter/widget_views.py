"""What JupyterLab writes when a reader saves a chapter: never a widget view without its model.

Loaded by ``jupyter_server_config.py`` (a pre-save hook of the contents manager), so it runs on
every save from ``make lab`` and Binder. Why it is needed, as measured in JupyterLab 4.6 with
jupyterlab_widgets 3.0 and widget state saving on (``labconfig``):

* A saved chapter reopens **dirty**: the widget manager marks the notebook modified whenever
  it registers a widget model (``register_model`` -> ``setDirty`` when ``saveState`` is on),
  and restoring the models saved in the notebook registers each of them; clearing them when
  the new kernel arrives (``clear_state``) marks it again.
* Saving then writes the state of the models live in that kernel: none, since no widget cell
  ran. Every widget output kept its view (``application/vnd.jupyter.widget-view+json``) naming
  a model the file no longer has, and the next open shows "Error displaying widget: model not
  found" in place of the picture.

Each widget output also carries the widget's static face (``text/html``: the same JavaScript
drawing, live without a kernel). So on save, a view whose model is not in the saved widget
state is dropped from its output, and the static face shows instead; and the saved state keeps
only the models that a kept view needs (a widget cell run twice no longer saves the first
run's models, about 20 KB each). A notebook saved while its widgets are live keeps them all.
"""

from __future__ import annotations

import json
import re

VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
# A model names another as "IPY_MODEL_<id>" (children, layout, style) or, inside an Output
# widget's stored outputs, as a view's "model_id".
_REFERENCE = re.compile(r'IPY_MODEL_([0-9a-f]+)|"model_id": "([0-9a-f]+)"')


def _needed(models: dict, roots: set[str]) -> set[str]:
    """``roots`` and every model they reference, transitively."""
    seen, todo = set(), [m for m in roots if m in models]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        found = _REFERENCE.findall(json.dumps(models[model]))
        todo += [a or b for a, b in found if (a or b) in models]
    return seen


def keep_views_with_models(notebook: dict) -> dict[str, int]:
    """Drop widget views whose model the notebook does not save, and saved models no view
    needs (in place). Returns what was done: {"views_dropped": n, "models_dropped": m}."""
    widgets = notebook.get("metadata", {}).get("widgets", {})
    models = (widgets.get(STATE) or {}).get("state") or {}
    dropped, kept = 0, set()
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            if VIEW not in data:
                continue
            model = (data[VIEW] or {}).get("model_id")
            if model in models:
                kept.add(model)
            elif len(data) > 1:  # another representation (the static face) remains to show
                del data[VIEW]
                dropped += 1
    needed = _needed(models, kept)
    unneeded = [m for m in models if m not in needed]
    for model in unneeded:
        del models[model]
    return {"views_dropped": dropped, "models_dropped": len(unneeded)}


def pre_save_hook(model, path, contents_manager=None, **kwargs):
    """jupyter_server's pre-save hook: applies :func:`keep_views_with_models` to notebooks."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        done = keep_views_with_models(model["content"])
        if contents_manager is not None and any(done.values()):
            contents_manager.log.info("%s: %s", path, done)
