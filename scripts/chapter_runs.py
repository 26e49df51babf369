"""Execute chapters on a chosen CPU code path and seed, and report errors and claims.

Shared by the robustness sweep (``benchmarks/sweep.py``) and the test that runs every chapter
on this machine's own CPU path (``tests/test_cpu_paths.py``). Each run copies the chapter's
``.ipynb`` into an empty folder, executes it in a fresh kernel whose environment selects the
CPU path (``attnbook.runtime.CPU_PATHS``), the seed (``ATTNBOOK_SEED``) and a file that
collects every :func:`attnbook.measured.claim` (``ATTNBOOK_CLAIMS``), and returns what it saw.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnbook.measured import CLAIMS_LOG
from attnbook.runtime import CPU_PATHS, SEED_OVERRIDE

ROOT = Path(__file__).resolve().parents[1]
PATH_VARIABLES = sorted({name for env in CPU_PATHS.values() for name in env})

_DRIVER = r"""
import json, sys
import nbformat
from nbclient import NotebookClient
path, out = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
nb.metadata.pop("widgets", None)
NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
               resources={"metadata": {"path": sys.argv[3]}}).execute()
code = [c for c in nb.cells if c.cell_type == "code"]
errors = [{"cell": i + 1, "error": f"{o.ename}: {o.evalue}"[:400]}
          for i, c in enumerate(code) for o in c.get("outputs", []) if o.output_type == "error"]
json.dump({"errors": errors}, open(out, "w"))
"""


def path_env(path: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for CPU path ``path`` ("declared", "no-vector" or "native"): the path's
    variables set and the other paths' variables removed."""
    if path not in CPU_PATHS:
        raise ValueError(f"path must be one of {sorted(CPU_PATHS)}, got {path!r}")
    env = {k: v for k, v in (os.environ if base is None else base).items()}
    for name in PATH_VARIABLES:
        env.pop(name, None)
    return env | CPU_PATHS[path]


def capability(path: str, python: str = sys.executable) -> str:
    """What ``torch.backends.cpu.get_cpu_capability()`` reads on ``path`` on this machine."""
    probe = "import torch; torch.ones(2).sum(); print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run(
        [python, "-c", probe], env=path_env(path), capture_output=True, text=True, check=True
    )
    return result.stdout.strip().splitlines()[-1]


def run_chapter(
    notebook: Path, path: str, seed: int | None = None, python: str = sys.executable
) -> dict:
    """Execute ``notebook`` (an ``.ipynb``) once on CPU path ``path``, with ``seed`` replacing
    the chapter's own (``None``: the chapter's). Returns ``{"errors": [{"cell", "error"}],
    "claims": [record, ...], "seconds": float}``; claims are recorded, not raised."""
    work = Path(tempfile.mkdtemp(prefix="chapter-run-"))
    try:
        shutil.copy(notebook, work)
        log, out = work / "claims.jsonl", work / "result.json"
        env = path_env(path) | {CLAIMS_LOG: str(log)}
        env.pop(SEED_OVERRIDE, None)
        if seed is not None:
            env[SEED_OVERRIDE] = str(seed)
        start = time.perf_counter()
        subprocess.run(
            [python, "-c", _DRIVER, str(work / notebook.name), str(out), str(work)],
            env=env,
            check=True,
            capture_output=True,
            timeout=900,
        )
        seconds = time.perf_counter() - start
        result = json.loads(out.read_text())
        lines = log.read_text().splitlines() if log.exists() else []
        result["claims"] = [json.loads(line) for line in lines]
        result["seconds"] = round(seconds, 1)
        extra = sorted(p.name for p in work.iterdir())
        result["extra_files"] = [n for n in extra if n not in {notebook.name, log.name, out.name}]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``python scripts/chapter_runs.py nbval-mode``: print the nbval flag for this machine,
    ``--nbval`` (strict) where the declared CPU path can be taken, else ``--nbval-lax`` with
    the reason on stderr (the stored outputs cannot be reproduced without AVX2)."""
    if argv != ["nbval-mode"]:
        print(main.__doc__, file=sys.stderr)
        return 2
    found = capability("declared")
    if found == "AVX2":
        print("--nbval")
    else:
        print(
            f"WARNING: this CPU cannot take the declared code path (it reads {found}, not "
            "AVX2), so the stored outputs cannot be reproduced digit for digit here: the "
            "chapters run under nbval without comparing outputs; every assert and claim "
            "still runs.",
            file=sys.stderr,
        )
        print("--nbval-lax")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
