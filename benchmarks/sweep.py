"""The robustness sweep: every training chapter on 8 seeds and on every CPU code path here.

A trained number is a random variable. This script re-runs each chapter that trains or samples
models (``CHAPTERS``) top to bottom, once per seed and CPU code path (``attnbook.runtime.
CPU_PATHS``: the declared path of the stored outputs, this machine's native one, and the
no-vector one), collects every :func:`attnbook.measured.claim` of each run, and writes

* ``benchmarks/sweep.json``: every run (seed, path, seconds, errors, claims) and a fingerprint
  of what ran (the chapters' code cells, the package's code without docstrings, torch), and
* ``benchmarks/SWEEP.md``: one row per claim: its chapter and code cell, the smallest and
  largest value over the sweep, the bound, the margin left and whether it has room to spare.

A bound has room to spare when it held on every run and lies at least ``Z_REQUIRED`` standard
deviations of the runs' values from their mean (for a bound a few sweep runs sit right against,
a new machine's run would cross it too often). ``tests/test_sweep.py`` fails when a chapter's
claims differ from the table's, when the fingerprint no longer matches, or when a row lacks
room; re-run the sweep after changing a training chapter or the package:

    python benchmarks/sweep.py [--jobs 2] [CHAPTER ...]    (about 25 min on 2 cores for all)

Naming chapters re-runs those alone; the others keep their record, each with its own
fingerprint. A chapter whose fingerprint is unchanged keeps the runs other machines made
(``hosts``): this machine's runs are added beside them, or replace the ones this machine made
before, so the margins cover every CPU the sweep has seen; ``--fresh`` drops them instead. A
changed fingerprint always starts the chapter's record afresh.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import json
import math
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_runs import capability, run_chapter  # noqa: E402

from attnbook.runtime import CPU_PATHS  # noqa: E402

RESULT = Path(__file__).with_name("sweep.json")
TABLE = Path(__file__).with_name("SWEEP.md")
# chapter: (its own seed, models per run). Run r uses seed + r * models, so no model repeats.
CHAPTERS = {
    "05_positions_and_rope": (0, 5),
    "11_lab_associative_retrieval": (12, 10),
    "12_lab_diagnosing_a_run": (12, 6),
    "13_tiny_gpt": (0, 1),
    "14_induction_heads": (0, 5),
}
SEEDS = 8
Z_REQUIRED = 3.0


def _code_cells(chapter: str) -> list[str]:
    import jupytext

    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _without_docstrings(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return ast.unparse(tree)


_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _lazy_widgets() -> dict[str, str]:
    """``attnbook.widgets`` imports a widget's module on first use of its function
    (``from attnbook.widgets import mask_explorer`` runs ``widgets/mask_grid.py``): the map
    from function to module, read from the package's source."""
    tree = ast.parse((ROOT / "src" / "attnbook" / "widgets" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["WIDGETS"]:
            return ast.literal_eval(node.value)
    raise RuntimeError("attnbook/widgets/__init__.py defines no WIDGETS map")


def _imported(source: str) -> set[str]:
    """The ``attnbook`` modules a piece of code imports (``attnbook.x.y`` as ``x/y``)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    tree = ast.parse(code)
    for node in ast.walk(tree):  # imports under `if TYPE_CHECKING:` never run
        if isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
            node.body = []
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n == "attnbook" or n.startswith("attnbook.")}
    return found


def _module_files(chapter: str) -> list[Path]:
    """The package files a chapter's run can reach: every ``attnbook`` module its code cells
    import, and theirs in turn (``attnbook`` itself brings ``runtime`` and ``plots``)."""
    package = ROOT / "src" / "attnbook"

    lazy = _lazy_widgets()

    def files(name: str) -> list[Path]:
        parts = name.split(".")[1:]
        if parts[:1] == ["widgets"] and len(parts) == 2 and parts[1] in lazy:
            parts = ["widgets", lazy[parts[1]]]  # a widget function: the module that runs
        base = package.joinpath(*parts)
        return [f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()]

    todo = set().union(*(_imported(s) for s in _code_cells(chapter))) | {"attnbook"}
    seen: set[Path] = set()
    while todo:
        name = todo.pop()
        if name.split(".")[1:2] == ["practice"]:  # grades a reader's function, trains nothing
            continue
        for f in files(name):
            if f not in seen:
                seen.add(f)
                todo |= _imported(f.read_text())
    return sorted(seen)


def fingerprint(chapter: str) -> str:
    """A hash of what one chapter's sweep depends on: its code cells; the code (not the
    docstrings or comments) of every ``attnbook`` module it imports, directly or through
    another, but the exercise checker (``practice/``: it grades a reader's function and trains
    nothing); the package's data files (``data/`` folders: the corpus, the widget data);
    torch's version and the sweep's own settings. A change anywhere else (another chapter, a
    module it never imports, prose, the widgets' browser scripts, which never run in the
    kernel) leaves its sweep current."""
    import torch

    h = hashlib.sha256()
    h.update(f"torch {torch.__version__}; seeds {SEEDS}; {sorted(CPU_PATHS)}".encode())
    h.update(f"{chapter} {CHAPTERS[chapter]}".encode())
    for source in _code_cells(chapter):
        h.update(source.encode())
    package = ROOT / "src" / "attnbook"
    data = sorted(p for p in package.rglob("data/*") if p.is_file())
    for path in [*_module_files(chapter), *data]:
        h.update(str(path.relative_to(package)).encode())
        text = path.read_bytes()
        h.update(_without_docstrings(text.decode()).encode() if path.suffix == ".py" else text)
    return h.hexdigest()


def _values(run: dict) -> tuple:
    return tuple((c["name"], c["min"], c["max"]) for c in run["claims"])


def summarise(runs: list[dict]) -> list[dict]:
    """One row per (chapter, claim, bound side): worst value, margin and z over the runs.

    Two CPU paths of one seed can compute the same bits (on an AVX2 machine the native path
    is the declared one): such a run counts for ``runs`` and for failures but once only for
    the statistics, and ``distinct`` says how many runs computed something of their own."""
    rows: dict[tuple[str, str], dict] = {}
    seen: set[tuple] = set()
    for run in runs:
        key = (run["chapter"], run.get("seed", id(run)), _values(run))
        duplicate = key in seen
        seen.add(key)
        for c in run["claims"]:
            row = rows.setdefault(
                (run["chapter"], c["name"]),
                {
                    "chapter": run["chapter"],
                    "name": c["name"],
                    "above": c["above"],
                    "below": c["below"],
                    "mins": [],
                    "maxs": [],
                    "runs": 0,
                    "distinct": 0,
                    "failed": 0,
                },
            )
            if (row["above"], row["below"]) != (c["above"], c["below"]):
                row["failed"] += 1  # one claim name with two bounds: never room to spare
            if not duplicate:
                row["mins"].append(c["min"])
                row["maxs"].append(c["max"])
                row["distinct"] += 1
            row["runs"] += 1
            row["failed"] += not c["held"]
    out = []
    for row in rows.values():
        mins, maxs = row.pop("mins"), row.pop("maxs")
        nan = any(math.isnan(x) for x in mins + maxs)
        row["min"] = math.nan if nan else min(mins)
        row["max"] = math.nan if nan else max(maxs)
        margins, zs = [], []
        for bound, values, sign in ((row["above"], mins, 1), (row["below"], maxs, -1)):
            if bound is None or nan:
                continue
            worst = min(values) if sign > 0 else max(values)
            margins.append(sign * (worst - bound))
            sd = statistics.pstdev(values)
            zs.append(math.inf if sd == 0 else sign * (statistics.fmean(values) - bound) / sd)
        row["margin"] = min(margins) if margins else math.nan
        row["z"] = min(zs) if zs else math.nan
        row["room"] = bool(
            not nan and row["failed"] == 0 and row["margin"] > 0 and row["z"] >= Z_REQUIRED
        )
        out.append(row)
    return sorted(out, key=lambda r: (r["chapter"], r["name"]))


def _cell_of(chapter: str, name: str) -> int | None:
    for i, source in enumerate(_code_cells(chapter), 1):
        if f'"{name}"' in source:
            return i
    return None


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return f"{x:.4g}"


def _host_key(host: dict) -> tuple[str, str]:
    """A machine as the sweep tells machines apart: its description and what its native path
    reads (two hosts of one CPU model may differ there)."""
    return host["machine"], host["paths"]["native"]


def hosts_of(record: dict) -> list[dict]:
    """The machines a chapter's record holds runs of (records written before runs were
    merged across machines have one, stored at the chapter's level)."""
    if "hosts" in record:
        return record["hosts"]
    return [{k: record[k] for k in ("machine", "date", "paths")}]


def merge_record(old: dict | None, new: dict, fresh: bool = False) -> dict:
    """A chapter's record after a sweep on one machine (``new``: its fingerprint, seeds, one
    host and that host's runs). The old record's runs on other machines are kept when its
    fingerprint and seeds are the new ones and ``fresh`` is false; its runs on this machine
    are always replaced."""
    (host,) = new["hosts"]
    for run in new["runs"]:
        run["machine"] = host["machine"]
    if (
        old is None
        or fresh
        or (old["fingerprint"], old["seeds"]) != (new["fingerprint"], new["seeds"])
    ):
        return new
    hosts = hosts_of(old)
    for run in old["runs"]:
        run.setdefault("machine", hosts[0]["machine"])
    keep = [h for h in hosts if _host_key(h) != _host_key(host)]
    kept = {h["machine"] for h in keep}
    runs = [r for r in old["runs"] if r["machine"] in kept and r["machine"] != host["machine"]]
    return new | {"hosts": [*keep, host], "runs": [*runs, *new["runs"]]}


def write_table(result: dict) -> str:
    runs = [run for c in result["chapters"].values() for run in c["runs"]]
    where = sorted(
        {
            (h["machine"], h["date"], ", ".join(f"{p} ({k})" for p, k in h["paths"].items()))
            for c in result["chapters"].values()
            for h in hosts_of(c)
        }
    )
    lines = [
        "# The robustness sweep",
        "",
        "Written by `python benchmarks/sweep.py` (see its docstring); checked by",
        "`tests/test_sweep.py`. Every claim a training chapter makes about a trained or sampled",
        f"quantity (`attnbook.measured.claim`) over every run: {result['seeds']} seeds × "
        f"{len(CPU_PATHS)} CPU code paths per chapter. Machines, dates and paths (with what "
        "`torch.backends.cpu.get_cpu_capability()` read on each): "
        + "; ".join(f"{m}, {d}: {p}" for m, d, p in where)
        + ".",
        "A row has room to spare (`ok`) when its bound held on every run and lies at least "
        f"{Z_REQUIRED:g} standard deviations of the runs' values from their mean (`z`).",
        "`margin` is the distance from the worst run to the bound. `cell` counts code cells.",
        "`distinct` counts the runs that computed values of their own: where two CPU paths gave",
        "one seed the same bits (on an AVX2 machine the native path is the declared one), the",
        "second counts for `runs` and could fail, but not again for `z`.",
        "",
    ]
    header = (
        "| chapter | cell | claim | runs | distinct | min | max | above | below | margin | z | ok |"
    )
    lines += [header, "|" + "---|" * 12]
    for r in result["rows"]:
        lines.append(
            f"| {r['chapter'][:2]} | {_cell_of(r['chapter'], r['name'])} | {r['name']} | "
            f"{r['runs']} | {r['distinct']} | {_fmt(r['min'])} | {_fmt(r['max'])} | "
            f"{_fmt(r['above'])} | {_fmt(r['below'])} | {_fmt(r['margin'])} | {_fmt(r['z'])} | "
            f"{'ok' if r['room'] else '**NO**'} |"
        )
    errors = [(run["chapter"], run["seed"], run["path"], e) for run in runs for e in run["errors"]]
    lines += ["", f"Runs: {len(runs)}; cell errors: {len(errors)}. Machines per chapter:", ""]
    for chapter, c in result["chapters"].items():
        names = "; ".join(f"{h['machine']}, native {h['paths']['native']}" for h in hosts_of(c))
        lines.append(f"- {chapter[:2]}: {len(c['runs'])} runs on {len(hosts_of(c))}: {names}")
    lines.append("")
    lines += [f"- {c} seed {s} on {p}: cell {e['cell']}: {e['error']}" for c, s, p, e in errors]
    seconds = {}
    for run in runs:
        seconds.setdefault(run["chapter"], []).append(run["seconds"])
    lines += ["", "Seconds per run (min / median / max, two runs at once on 2 cores):", ""]
    lines += [
        f"- {c}: {min(s):.1f} / {statistics.median(s):.1f} / {max(s):.1f}"
        for c, s in seconds.items()
    ]
    text = "\n".join(lines) + "\n"
    TABLE.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", default=list(CHAPTERS))
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--fresh", action="store_true", help="drop other machines' runs of these chapters"
    )
    args = parser.parse_args()
    from _report import machine

    unknown = set(args.chapters) - set(CHAPTERS)
    if unknown:
        parser.error(f"not in the sweep: {sorted(unknown)}; choose from {sorted(CHAPTERS)}")
    jobs = [
        (chapter, CHAPTERS[chapter][0] + r * CHAPTERS[chapter][1], path)
        for chapter in args.chapters
        for r in range(SEEDS)
        for path in CPU_PATHS
    ]

    def one(job):
        chapter, seed, path = job
        run = run_chapter(ROOT / "notebooks" / f"{chapter}.ipynb", path, seed)
        print(
            f"{chapter} seed {seed} {path}: {run['seconds']} s, {len(run['errors'])} errors",
            flush=True,
        )
        return {"chapter": chapter, "seed": seed, "path": path} | run

    prints = {chapter: fingerprint(chapter) for chapter in args.chapters}  # of what will run
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(one, jobs))
    if any(fingerprint(c) != prints[c] for c in args.chapters):
        sys.exit("the code changed while the sweep ran; nothing recorded: run it again")
    # Chapters not re-run keep their record; each carries the fingerprint of what it ran.
    old = json.loads(RESULT.read_text()) if RESULT.exists() else {"chapters": {}}
    chapters = {c: v for c, v in old["chapters"].items() if c in CHAPTERS}
    host = {
        "machine": machine(),
        "date": str(dt.date.today()),
        "paths": {p: capability(p) for p in CPU_PATHS},
    }
    for chapter in args.chapters:
        new = {
            "fingerprint": prints[chapter],
            "seeds": [CHAPTERS[chapter][0] + r * CHAPTERS[chapter][1] for r in range(SEEDS)],
            "paths": sorted(CPU_PATHS),
            "hosts": [host],
            "runs": [r for r in runs if r["chapter"] == chapter],
        }
        chapters[chapter] = merge_record(chapters.get(chapter), new, args.fresh)
    everything = [run for c in chapters.values() for run in c["runs"]]
    result = {
        "seeds": SEEDS,
        "chapters": dict(sorted(chapters.items())),
        "rows": summarise(everything),
    }
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(write_table(result))


if __name__ == "__main__":
    main()
