"""Execute every chapter in a fresh kernel; print seconds per notebook, in total, and the
share spent in the setup cell (imports, seeding). Target on 2 CPU cores: each notebook
within 30 s in a fresh kernel; all of them within 5 minutes.

    python benchmarks/notebook_times.py [--write] [notebooks/NN_name.md ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table

ROOT = Path(__file__).resolve().parents[1]


def _seconds(cell) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def time_notebook(md: Path) -> tuple[float, float]:
    nb = jupytext.read(md)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=True,
        resources={"metadata": {"path": str(md.parent)}},
    ).execute()
    total = time.perf_counter() - start  # includes kernel start-up, as a reader waits for it
    setup = next(_seconds(c) for c in nb.cells if c.cell_type == "code")
    return total, setup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))
    rows, grand, grand_setup = [], 0.0, 0.0
    for md in paths:
        total, setup = time_notebook(md)
        grand, grand_setup = grand + total, grand_setup + setup
        verdict = "ok" if total <= 30 else "OVER 30 s"
        rows.append([md.stem, f"{total:.1f}", f"{setup:.1f}", f"{setup / total:.0%}", verdict])
        print(f"{md.stem}: {total:.1f} s", flush=True)
    rows.append(
        [
            "all notebooks",
            f"{grand:.1f}",
            f"{grand_setup:.1f}",
            f"{grand_setup / grand:.0%}",
            "ok" if grand < 300 else "OVER 5 min",
        ]
    )
    body = table(["notebook", "seconds", "setup cell (s)", "setup share", "target"], rows)
    report("notebook_times", "Notebook execution times (fresh kernel each)", body, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
