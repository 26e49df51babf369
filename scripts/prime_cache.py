"""Give the site build each chapter's stored outputs, so it executes nothing that is in sync.

    python scripts/prime_cache.py            # before `jupyter-book build`
    python scripts/prime_cache.py --verify   # after it: fail if the build executed a chapter

Every ``notebooks/NN_name.ipynb`` is the output of one top-to-bottom run of its ``.md`` in a
fresh kernel (``make sync``), and ``make test`` re-executes it under strict nbval, which fails
on any text output that differs. Re-executing the same code for the site would only repeat
that run. jupyter-cache keys a notebook by its kernel and its code cells (source and cell
metadata, not its markdown), so this script reads each ``.md`` as the build will (myst-nb's
reader), gives its code cells the stored notebook's outputs, and files that; the book
build (``execute_notebooks: cache``) then finds every chapter and executes none. A chapter
whose code was edited without ``make sync`` has no matching entry and is executed by the
build as before, so a stale ``.ipynb`` can never reach the site.

``--verify`` checks that every chapter's cache entry is still the one filed here, i.e. that
the build ran no chapter (each chapter executes at most once per ``make test``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"
MARK = "primed-from-ipynb"


def chapters() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


def as_built(md: Path) -> nbformat.NotebookNode:
    """The notebook the site build makes of ``md`` (what jupyter-cache will key it by)."""
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(md.read_text(encoding="utf-8"))


def with_stored_outputs(md: Path) -> nbformat.NotebookNode | None:
    """``md`` as the build reads it, carrying its ``.ipynb``'s outputs; None if out of sync."""
    ipynb = md.with_suffix(".ipynb")
    if not ipynb.exists():  # a new chapter before its first `make sync`: the build runs it
        return None
    nb, stored = as_built(md), nbformat.read(ipynb, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    done = [c for c in stored.cells if c.cell_type == "code"]
    if [c.source for c in code] != [c.source for c in done]:
        return None  # edited without `make sync`: the build executes it
    for cell, ran in zip(code, done, strict=True):
        cell.outputs, cell.execution_count = ran.outputs, ran.execution_count
    nb.metadata = {**stored.metadata, "kernelspec": nb.metadata.get("kernelspec")}
    return nb


def prime() -> int:
    cache = get_cache(str(CACHE))
    filed = 0
    for md in chapters():
        nb = with_stored_outputs(md)
        if nb is None:
            continue
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, str(md), data={MARK: md.with_suffix(".ipynb").name}),
            check_validity=False,
            overwrite=True,
        )
        filed += 1
    print(f"jupyter-cache: filed the stored outputs of {filed} of {len(chapters())} chapters")
    return 0


def verify() -> int:
    cache = get_cache(str(CACHE))
    executed = []
    for md in chapters():
        try:
            record = cache.match_cache_notebook(as_built(md))
        except KeyError:
            executed.append(f"{md.name} (no cache entry)")
            continue
        if record.data.get(MARK) != md.with_suffix(".ipynb").name:
            executed.append(md.name)
    if executed:
        print("the site build executed chapters it should have taken from their .ipynb:")
        print("  " + "\n  ".join(executed) + "\nrun `make sync` for them")
        return 1
    print(f"site build executed 0 of {len(chapters())} chapters (all from their stored outputs)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true")
    sys.exit(verify() if parser.parse_args().verify else prime())
