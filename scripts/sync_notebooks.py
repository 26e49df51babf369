"""Pair each chapter's MyST source with its .ipynb and execute it in a fresh kernel.

    python scripts/sync_notebooks.py                 # every notebooks/*.md
    python scripts/sync_notebooks.py notebooks/02_why_sqrt_dk.md

The .md is the source of truth. The .ipynb is rewritten from it and executed top to bottom
in a fresh kernel (so execution counts run 1, 2, 3, ...), without timing metadata or widget
state (both would change on every run and make diffs noisy). Widget views are dropped from
the stored outputs: their model ids point at a kernel that no longer exists, so a reader
opening the file would see an error box instead of the widget's HTML face.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def build(md: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(md)
    # Cell ids derived from the cell's own text (jupytext would draw random ones), so that
    # re-syncing an unchanged chapter rewrites nothing and an edit changes only its cell.
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}:{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["jupytext"] = {"formats": "ipynb,md:myst"}
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
    nb.metadata.pop("widgets", None)
    return nb


def canonical(md: Path) -> None:
    """Rewrite ``md`` in jupytext's own MyST form (JupyterLab's save writes exactly this)."""
    text = md.read_text(encoding="utf-8")
    form = jupytext.writes(jupytext.reads(text, fmt="md:myst"), fmt="md:myst")
    if form != text:
        md.write_text(form, encoding="utf-8")


def main(paths: list[str]) -> int:
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
