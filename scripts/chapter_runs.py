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
import re
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
nbformat.write(nb, path)  # the executed copy, for the comparison with the stored outputs
"""

IGNORE_OUTPUT = "nbval-ignore-output"  # the cell tag that tells strict nbval not to compare


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    """The (pattern, replacement) pairs of ``tests/nbval_sanitize.cfg``, in order."""
    lines = (ROOT / "tests" / "nbval_sanitize.cfg").read_text().splitlines()
    patterns = [x.removeprefix("regex:").strip() for x in lines if x.startswith("regex:")]
    replaces = [x.removeprefix("replace:").strip() for x in lines if x.startswith("replace:")]
    return [(re.compile(p), r) for p, r in zip(patterns, replaces, strict=True)]


def compared_text(cell: dict) -> str:
    """What strict nbval compares in a code cell, sanitized: its streams (each stream's pieces
    joined, as nbval coalesces them), the text/plain of its results and displays, and the
    names of its errors."""

    def text(value: str | list[str]) -> str:
        return "".join(value) if isinstance(value, list) else value

    streams: dict[str, str] = {}
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            streams[output["name"]] = streams.get(output["name"], "") + text(output["text"])
        elif output.get("output_type") in {"execute_result", "display_data"}:
            if "text/plain" in output.get("data", {}):
                parts.append(text(output["data"]["text/plain"]))
        elif output.get("output_type") == "error":
            parts.append(f"[error] {output['ename']}")
    joined = "\n".join([f"[{name}]\n{body}" for name, body in sorted(streams.items())] + parts)
    for pattern, replace in _sanitizers():
        joined = pattern.sub(replace, joined)
    return joined


def changed_cells(stored: dict, executed: dict) -> list[dict]:
    """The code cells whose compared text differs between two copies of one notebook: a list
    of ``{"cell": number among code cells, from 1, "tagged": bool, "stored": str, "now": str}``
    (``tagged``: the cell carries ``nbval-ignore-output``, so strict nbval does not compare
    it; ``stored`` and ``now``: the first line that differs, as stored and as executed)."""
    old = [c for c in stored["cells"] if c["cell_type"] == "code"]
    new = [c for c in executed["cells"] if c["cell_type"] == "code"]
    if len(old) != len(new):
        raise ValueError(f"executed has {len(new)} code cells, stored {len(old)}")
    changed = []
    for i, (a, b) in enumerate(zip(old, new, strict=True), 1):
        before, after = compared_text(a).splitlines(), compared_text(b).splitlines()
        if before != after:
            first = next(
                (j for j, (x, y) in enumerate(zip(before, after, strict=False)) if x != y),
                min(len(before), len(after)),
            )
            changed.append(
                {
                    "cell": i,
                    "tagged": IGNORE_OUTPUT in a.get("metadata", {}).get("tags", []),
                    "stored": (before[first : first + 1] or [""])[0][:200],
                    "now": (after[first : first + 1] or [""])[0][:200],
                }
            )
    return changed


def untagged_change(chapter: str, change: dict) -> str:
    """The failure message for an untagged cell whose text changed with the CPU path."""
    return (
        f"{chapter}: code cell {change['cell']} prints text that changes with the CPU path "
        f"(stored {change['stored']!r}, now {change['now']!r}): print a bound, or tag the "
        f"cell {IGNORE_OUTPUT} if it prints trained or sampled numbers its claims bound"
    )


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
    "claims": [record, ...], "changed": [{"cell", "tagged"}], "seconds": float}``; claims
    are recorded, not raised; ``changed`` names the code cells whose outputs differ from the
    stored ones (:func:`changed_cells`)."""
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
        stored = json.loads(notebook.read_text())
        executed = json.loads((work / notebook.name).read_text())
        result["changed"] = changed_cells(stored, executed)
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
