"""Time the two lab chapters against the source's own lab programs, run the same way.

    .venv/bin/python benchmarks/labs_vs_source.py [--repeats 3] [--write]

The source text (``/work/shared/source/attention_and_transformers.txt``, or ``--source``)
holds two runnable programs: the attention-contracts lab and the associative-retrieval lab.
They are extracted from the text at run time (the repository does not keep a copy), each is
written to a temporary file and run in a fresh process with this Python, and the matching
chapter (10 and 11) is executed in a fresh kernel with nbclient, as
``benchmarks/notebook_times.py`` does. Every wall time includes the interpreter or kernel
start-up and the imports, as a reader waiting for a result experiences it. Each of the four
runs is repeated ``--repeats`` times, interleaved, and the best time is kept (the least
disturbed by other work on a shared machine). The target is a ratio of at most 2.

Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path("/work/shared/source/attention_and_transformers.txt")
# (heading in the source text, a string the program prints on success, chapter)
LABS = [
    ("Runnable attention contracts", "agree", "notebooks/10_lab_attention_contracts.md"),
    (
        "Training a small causal transformer",
        "retrieval_accuracy",
        "notebooks/11_lab_associative_retrieval.md",
    ),
]
PROSE = re.compile(r"^[A-Z][a-z]+ [a-z]+ ")  # "Notice that ...": the text resumes


def extract(text: str, heading: str, marker: str) -> str:
    """The program that follows ``heading``: from its first ``import`` line to the prose."""
    lines = text.splitlines()
    start = lines.index(heading)
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("import "))
    end = next(i for i in range(first, len(lines)) if PROSE.match(lines[i]))
    program = "\n".join(lines[first:end]).strip() + "\n"
    ast.parse(program)  # a whole program, or the extraction is wrong
    if marker not in program:
        raise ValueError(f"the program after {heading!r} does not print {marker!r}")
    return program


def run_program(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(path)], check=True, capture_output=True, cwd=path.parent)
    return time.perf_counter() - start


def run_chapter(md: Path) -> float:
    nb = jupytext.read(md)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(md.parent)}}
    ).execute()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args()
    text = args.source.read_text(encoding="utf-8")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        programs = []
        for n, (heading, marker, chapter) in enumerate(LABS, start=1):
            path = Path(tmp) / f"source_lab_{n}.py"
            path.write_text(extract(text, heading, marker))
            programs.append((path, ROOT / chapter))
        best = {p: [float("inf"), float("inf")] for p, _ in programs}
        for _ in range(args.repeats):
            for path, md in programs:
                best[path][0] = min(best[path][0], run_program(path))
                best[path][1] = min(best[path][1], run_chapter(md))
                print(f"{md.stem}: {best[path][1]:.1f} s; source lab: {best[path][0]:.1f} s")
        for n, (path, md) in enumerate(programs, start=1):
            source_s, chapter_s = best[path]
            ratio = chapter_s / source_s
            verdict = "ok" if ratio <= 2 else "OVER 2x"
            rows.append(
                [
                    f"lab {n}",
                    md.stem,
                    f"{source_s:.1f}",
                    f"{chapter_s:.1f}",
                    f"{ratio:.2f}",
                    verdict,
                ]
            )
    body = table(
        ["source", "chapter", "source program (s)", "chapter (s)", "ratio", "target <= 2x"], rows
    ) + (
        "\n\nOn a shared machine the wall times move with the load; the ratio compares runs"
        " interleaved under the same load, and is the number to read."
    )
    title = (
        "Lab chapters against the source's lab programs "
        f"(fresh process each, best of {args.repeats})"
    )
    report("labs_vs_source", title, body, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
