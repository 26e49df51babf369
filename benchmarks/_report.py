"""Shared by the benchmark scripts: print a table, and record it in benchmarks/RESULTS.md.

Each script owns one section of RESULTS.md (between markers named after it), rewritten with
the machine it ran on whenever the script runs with ``--write``.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), which names its vendor: MKL's reproducible
    branches are promised on Intel only, so runs on two vendors differ in their last bits."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    import torch

    return (
        f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} CPU cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), rule, *map(line, cells[1:])])


def report(name: str, title: str, body: str, *, write: bool) -> None:
    print(f"\n{title}\n{body}")
    if not write:
        return
    section = (
        f"<!-- {name}:start -->\n## {title}\n\nMeasured {dt.date.today()} on "
        f"{machine()}.\n\n{body}\n<!-- {name}:end -->"
    )
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"<!-- {name}:start -->.*?<!-- {name}:end -->", re.S)
    text = (
        pattern.sub(lambda _: section, text)
        if pattern.search(text)
        else (text.rstrip() + "\n\n" + section + "\n")
    )
    RESULTS.write_text(text)
    print(f"(recorded in {RESULTS.name})")
