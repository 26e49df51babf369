"""Give the site build each chapter's stored outputs, so it executes nothing that is in sync.

    python scripts/prime_cache.py            # before `jupyter-book build`
    python scripts/prime_cache.py --verify   # after it: fail if the build executed a chapter

Every ``notebooks/NN_name.ipynb`` is the output of one top-to-bottom run of its ``.md`` in a
fresh kernel (``make sync``), and ``make test`` re-executes it under strict nbval, which fails
on any text output that differs. Re-executing the same code for the site would only repeat
that run. jupyter-cache keys a notebook by its kernel and the source of its code cells (not
its markdown), so this script files each stored notebook under its ``.md``'s key; the book
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


def prime() -> int:
    cache = get_cache(str(CACHE))
    for md in chapters():
        ipynb = md.with_suffix(".ipynb")
        if not ipynb.exists():  # a new chapter before its first `make sync`: the build runs it
            continue
        nb = nbformat.read(ipynb, as_version=4)
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, str(md), data={MARK: ipynb.name}),
            check_validity=False,
            overwrite=True,
        )
    filed = sum(md.with_suffix(".ipynb").exists() for md in chapters())
    print(f"jupyter-cache: filed the stored outputs of {filed} of {len(chapters())} chapters")
    return 0


def verify() -> int:
    import jupytext

    cache = get_cache(str(CACHE))
    executed = []
    for md in chapters():
        try:
            record = cache.match_cache_notebook(jupytext.read(md))
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
