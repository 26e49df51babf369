"""JupyterLab's pre-save hook (jupyter/widget_views.py): a saved chapter never holds a widget
view whose model it lacks, and holds no model that no view needs."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jupyter"))
import widget_views  # noqa: E402

VIEW, STATE = widget_views.VIEW, widget_views.STATE
A, B, C, LAYOUT, STALE, INNER = "a1", "b2", "c3", "d4", "e5", "f6"


def _output(model: str, html: bool = True) -> dict:
    data = {VIEW: {"version_major": 2, "version_minor": 0, "model_id": model}}
    if html:
        data |= {"text/html": "<div class='attnbook-widget'>face</div>", "text/plain": "w"}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _notebook(state: dict) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "outputs": [_output(A)]},
            {"cell_type": "code", "outputs": [_output(B)]},
            {"cell_type": "code", "outputs": [_output(C, html=False)]},
            {"cell_type": "markdown", "source": "text"},
        ],
        "metadata": {"widgets": {STATE: {"state": state, "version_major": 2}}},
    }


def test_views_without_models_fall_back_to_the_static_face_and_stale_models_go():
    state = {
        A: {"state": {"layout": f"IPY_MODEL_{LAYOUT}", "outputs": []}},
        LAYOUT: {"state": {}},
        STALE: {"state": {"value": 1}},  # a widget cell's earlier run: no output shows it
        INNER: {"state": {}},  # shown only inside an Output widget's stored outputs
    }
    state[A]["state"]["outputs"] = [{"data": {VIEW: {"model_id": INNER}}}]
    nb = _notebook(state)
    done = widget_views.keep_views_with_models(nb)
    assert done == {"views_dropped": 1, "models_dropped": 1}
    outputs = [c["outputs"][0]["data"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert VIEW in outputs[0]  # its model is saved: the live picture reopens
    assert VIEW not in outputs[1] and "text/html" in outputs[1]  # the static face shows
    assert VIEW in outputs[2]  # nothing else to show: left as it was
    assert set(nb["metadata"]["widgets"][STATE]["state"]) == {A, LAYOUT, INNER}


def test_a_notebook_with_every_model_saved_or_no_widgets_is_left_alone():
    state = {A: {"state": {}}, B: {"state": {}}, C: {"state": {}}}
    nb = _notebook(state)
    before = copy.deepcopy(nb)
    assert widget_views.keep_views_with_models(nb) == {"views_dropped": 0, "models_dropped": 0}
    assert nb == before
    stored = json.loads((ROOT / "notebooks" / "02_why_sqrt_dk.ipynb").read_text())
    before = copy.deepcopy(stored)
    widget_views.pre_save_hook(model={"type": "notebook", "content": stored}, path="02.ipynb")
    assert stored == before, "the hook changed a notebook as `make sync` writes it"


def test_the_reader_settings_install_the_hook():
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(
        "jupyter_server_config.py", path=str(ROOT / "jupyter")
    ).load_config()
    hook = config.ContentsManager.pre_save_hook
    assert callable(hook) and hook.__module__ == "widget_views", hook
    nb = _notebook({A: {"state": {}}})
    hook(model={"type": "notebook", "content": nb}, path="x.ipynb")
    assert VIEW not in nb["cells"][1]["outputs"][0]["data"]
