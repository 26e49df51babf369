"""Book build times: from the stored outputs (as `make book` does), and after a code edit.

Works on a scratch copy of the tracked files, so the repository's own _build/ and notebooks
are untouched. `make book` files each chapter's stored outputs in jupyter-cache
(scripts/prime_cache.py) before building, so a cold build executes no chapter; after an edit
to one chapter's code (without `make sync`) exactly that chapter must be executed by the
build. The script checks both counts and prints each time as a ratio to the cold build.

    python benchmarks/book_build.py [--write] [--chapter notebooks/01_deriving_self_attention.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")


def build(tree: Path) -> tuple[float, int]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "scripts/prime_cache.py"], cwd=tree, check=True)
    result = subprocess.run(
        [str(JUPYTER_BOOK), "build", ".", "-W", "-n", "--keep-going"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "ATTNBOOK_WIDGETS": "static"},
    )
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout.count("Executing notebook")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="notebooks/01_deriving_self_attention.md")
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args()
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch)
        for name in files:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
        shutil.copytree(ROOT / "book" / "_vendor", tree / "book" / "_vendor")
        (tree / "scripts" / "prime_cache.py").write_text(
            (ROOT / "scripts" / "prime_cache.py").read_text()
        )
        cold, cold_runs = build(tree)
        again, again_runs = build(tree)
        chapter = tree / args.chapter
        chapter.write_text(chapter.read_text() + "\n```{code-cell} ipython3\n1 + 1\n```\n")
        edited, edited_runs = build(tree)
    ok = (cold_runs, again_runs, edited_runs) == (0, 0, 1)
    if not ok:
        runs = (cold_runs, again_runs, edited_runs)
        print(f"expected 0, 0 and 1 chapters executed, got {runs}")
    rows = [
        ["cold build from the stored outputs", f"{cold:.1f}", cold_runs, "1.00"],
        ["rebuild, nothing changed", f"{again:.1f}", again_runs, f"{again / cold:.2f}"],
        [
            f"rebuild after editing {Path(args.chapter).stem}",
            f"{edited:.1f}",
            edited_runs,
            f"{edited / cold:.2f}",
        ],
    ]
    body = table(["build", "seconds", "chapters executed", "ratio to cold"], rows)
    report("book_build", "Book build: from stored outputs, rebuilds", body, write=args.write)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
