"""Pair each chapter's MyST source with its .ipynb and execute it in a fresh kernel.

    python scripts/sync_notebooks.py                 # every notebooks/*.md
    python scripts/sync_notebooks.py notebooks/02_why_sqrt_dk.md

The .md is the source of truth (MyST: the site build checks its references). The .ipynb is
written from it for notebook front ends: markdown cells pass through ``scripts/portable.py``
(no MyST syntax left: answers become ``<details>`` blocks, references and citations links to
the published site), then it is executed top to bottom in a fresh kernel (execution counts
1, 2, 3, ...) without timing metadata. It is not a jupytext pair of the .md (the markdown
differs), so saving it in JupyterLab never rewrites the .md.

Widget state is stored with the notebook, so a reader who opens a chapter sees each widget
drawn (and its controls live, from the widget's own JavaScript) before running anything.
Model ids are renamed to ids derived from the chapter and the model's order, so re-syncing an
unchanged chapter rewrites nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from portable import Portable

ROOT = Path(__file__).resolve().parents[1]
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def notebook(md: Path, portable: Portable | None = None) -> nbformat.NotebookNode:
    """The unexecuted notebook for ``md``: portable markdown, stable cell ids, plain metadata."""
    nb = jupytext.read(md)
    portable = portable or Portable()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = portable.markdown(cell.source)
    # Cell ids derived from the cell's own text (jupytext would draw random ones), so that
    # re-syncing an unchanged chapter rewrites nothing and an edit changes only its cell.
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}:{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
    nb.metadata = nbformat.NotebookNode(kernelspec=KERNELSPEC)
    return nb


def build(md: Path) -> nbformat.NotebookNode:
    nb = notebook(md)
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        record_timing=False,
        store_widget_state=True,
        resources={"metadata": {"path": str(md.parent)}},
    )
    client.execute()
    return stable_widget_ids(nb, md.stem)


def stable_widget_ids(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Rename the random widget model ids to ones derived from ``name`` and their order."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if not state:
        nb.metadata.pop("widgets", None)
        return nb
    text = json.dumps(nb)
    for i, old in enumerate(sorted(state, key=text.index)):
        new = hashlib.sha1(f"{name}:{i}".encode()).hexdigest()[:32]
        text = text.replace(old, new)
    return nbformat.from_dict(json.loads(text))


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
