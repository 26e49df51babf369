"""Pair each chapter's MyST source with its .ipynb and execute it in a fresh kernel.

    python scripts/sync_notebooks.py                 # every notebooks/*.md
    python scripts/sync_notebooks.py notebooks/02_why_sqrt_dk.md

The .md is the source of truth (MyST: the site build checks its references). The .ipynb is
written from it for notebook front ends: markdown cells pass through ``scripts/portable.py``
(no MyST syntax left: answers become ``<details>`` blocks, references and citations links to
the published site), then it is executed top to bottom in a fresh kernel (execution counts
1, 2, 3, ...) without timing metadata. It is not a jupytext pair of the .md (the markdown
differs), so saving it in JupyterLab never rewrites the .md.

The kernel runs on the declared CPU code path (``attnbook.runtime.CPU_PATHS["declared"]``),
the one strict nbval compares against on every machine; the script refuses to write outputs
from a machine that cannot take that path, since nbval would then fail everywhere else.

Widget views are not stored: a view needs its model, and JupyterLab saves only the models
of a running kernel, so a stored view would show "Error displaying widget: model not found"
after any open-and-save. The stored output keeps each widget's HTML + JavaScript face, which
draws and stays live with no kernel (in a trusted notebook; `make lab` trusts them); running
the cell brings the kernel face. The widget-state metadata is written exactly as JupyterLab
writes it for a notebook with no live widgets, so opening and saving changes no byte.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chapter_runs import capability, path_env
from portable import Portable

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# What JupyterLab (saveState on) writes when no widget model is live: stored as is.
NO_LIVE_WIDGETS = {WIDGET_STATE: {"state": {}, "version_major": 2, "version_minor": 0}}
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def notebook(md: Path, portable: Portable | None = None) -> nbformat.NotebookNode:
    """The unexecuted notebook for ``md``: portable markdown, stable cell ids, plain metadata."""
    nb = jupytext.read(md)
    portable = portable or Portable()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = portable.markdown(cell.source)
        elif "hide-input" in cell.metadata.get("tags", []):
            # The site folds this cell's code behind a toggle; fold it in the notebook too:
            # JupyterLab reads jupyter.source_hidden, Colab shows a cellView "form" collapsed.
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            cell.metadata["cellView"] = "form"
    # Cell ids derived from the cell's own text (jupytext would draw random ones), so that
    # re-syncing an unchanged chapter rewrites nothing and an edit changes only its cell.
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}:{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
    nb.metadata = nbformat.NotebookNode(kernelspec=KERNELSPEC)
    return nb


def coalesced(outputs: list) -> list:
    """Consecutive stream outputs of one name joined into one: where a kernel split a cell's
    printing depends on how loaded the machine was, and the stored notebook must not."""
    merged: list = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and last is not None
            and last.get("output_type") == "stream"
            and last.get("name") == output.get("name")
        ):
            last["text"] = "".join(last["text"]) + "".join(output["text"])
        else:
            merged.append(output)
    return merged


def build(md: Path) -> nbformat.NotebookNode:
    nb = notebook(md)
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        record_timing=False,
        store_widget_state=False,
        resources={"metadata": {"path": str(md.parent)}},
    )
    client.execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
        if "outputs" in cell:
            cell.outputs = coalesced(cell.outputs)
    nb.metadata["widgets"] = NO_LIVE_WIDGETS
    return nb


def canonical(md: Path) -> None:
    """Rewrite ``md`` in jupytext's own MyST form (JupyterLab's save writes exactly this)."""
    text = md.read_text(encoding="utf-8")
    form = jupytext.writes(jupytext.reads(text, fmt="md:myst"), fmt="md:myst")
    if form != text:
        md.write_text(form, encoding="utf-8")


def main(paths: list[str]) -> int:
    if (found := capability("declared")) != "AVX2":
        print(
            f"the declared CPU path reads {found} here, not AVX2: stored outputs must come "
            "from a machine with AVX2",
            file=sys.stderr,
        )
        return 1
    os.environ.clear()
    os.environ.update(path_env("declared"))  # the kernels inherit it
    sources = [Path(p) for p in paths] or sorted((ROOT / "notebooks").glob("*.md"))
    for md in sources:
        start = time.perf_counter()
        canonical(md)
        nb = build(md.resolve())
        nbformat.write(nb, md.with_suffix(".ipynb"))
        print(f"{md.name}: executed in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
