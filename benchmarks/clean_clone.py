"""The README's two commands from a clean clone, timed: `make book` and `make test`.

    python benchmarks/clean_clone.py [--write] [--only book|test|ci]

`--only ci` times what CI runs (.ci/run): `make test`, then `make test-surfaces` in the same
clone (JupyterLab, phone widths, screenshots, the PDF), each on its own row.

Each command runs in its own fresh `git clone` of this repository's HEAD in a temporary
folder (so nothing built here is reused: no .venv, no node_modules, no _build), exactly as a
new contributor or CI would run it. Package-manager caches (uv's, pip's, npm's) are the
machine's own and stay warm between runs; a machine with cold caches adds its download time.
The goals: clean clone -> `make book` within 90 s, -> `make test` within 510 s (8.5 min). The script
also reads how many chapters the site build executed (it should be none: it takes the
stored outputs that strict nbval has just re-checked), and the CPU time the command used
(user + system of the processes reaped in a chain back to `make`: pytest, the kernels, the
JupyterLab server; Chromium's helper processes only partly). CPU seconds divided by the cores
this process may use is a floor under the wall time that no ordering of the same work can
beat, and an understated one.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"book": 90.0, "test": 510.0}  # 8.5 min: every chapter on three CPU paths
RUNS = {"book": ["book"], "test": ["test"], "ci": ["test", "test-surfaces"]}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def clean_clone_run(targets: list[str]) -> list[tuple[str, float, float, str]]:
    """Each of ``targets`` run with make, one after another, in one fresh clone."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="attnbook-clone-") as scratch:
        clone = Path(scratch) / "book"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        for target in targets:
            start, cpu = time.perf_counter(), _children_cpu()
            result = subprocess.run(
                ["make", target], cwd=clone, capture_output=True, text=True, timeout=3600
            )
            seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
            log = result.stdout + result.stderr
            (ROOT / "_build").mkdir(exist_ok=True)
            (ROOT / "_build" / f"clean-clone-{target}.log").write_text(log)
            if result.returncode:
                sys.exit(f"make {target} failed in the clean clone:\n{log[-4000:]}")
            runs.append((target, seconds, cpu, log))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    parser.add_argument("--only", choices=sorted(RUNS))
    args = parser.parse_args()
    rows = []
    for run in [args.only] if args.only else ["book", "test"]:
        for target, seconds, cpu, log in clean_clone_run(RUNS[run]):
            executed = log.count("Executing notebook")
            verified = re.search(r"site build executed (\d+) of (\d+) chapters", log)
            note = f"site build executed {executed} chapters"
            if verified:
                note += f" (verified: {verified[1]} of {verified[2]})"
            goal = GOALS.get(target)
            cores = len(os.sched_getaffinity(0))
            rows.append(
                [
                    f"make {target}",
                    f"{seconds:.0f}",
                    f"{cpu:.0f}",
                    f"{cpu / cores:.0f}",
                    f"{goal:.0f}" if goal else "none",
                    f"{seconds / goal:.2f}" if goal else "",
                    note,
                ]
            )
    headers = ["clean clone ->", "seconds", "CPU seconds", "CPU / cores (floor)", "goal (s)"]
    body = table([*headers, "ratio to goal", "notes"], rows)
    report("clean_clone", "The README's commands from a clean clone", body, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
