"""The robustness sweep is current, and every claim it checked has room to spare.

``benchmarks/sweep.py`` re-runs each training chapter on 8 seeds and every CPU code path and
records every :func:`attnbook.measured.claim` (``benchmarks/sweep.json``, ``SWEEP.md``). These
tests need no training: they compare the chapters' claims, read from their code, with the
sweep's record, and the code the sweep ran with the code now in the repository. A change that
moves a bound, adds a claim, or edits a training chapter or the package fails here until the
sweep is re-run; a sweep row without room to spare fails too.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import sweep  # noqa: E402

RESULT = json.loads(sweep.RESULT.read_text())
RUNS = [run for chapter in RESULT["chapters"].values() for run in chapter["runs"]]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


def _number(node: ast.expr) -> float:
    value = ast.literal_eval(node)
    assert isinstance(value, (int, float)) and not isinstance(value, bool), ast.unparse(node)
    return float(value)


def claims_in(md: Path) -> list[tuple[str, float | None, float | None]]:
    """Every ``claim(name, value, above=, below=)`` call in the chapter's code cells."""
    found = []
    for cell in jupytext.read(md).cells:
        if cell.cell_type != "code" or "claim(" not in cell.source:
            continue
        code = "\n".join(
            line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "claim":
                name = node.args[0]
                assert isinstance(name, ast.Constant) and isinstance(name.value, str), (
                    f"{md.name}: a claim's name must be a string literal: {ast.unparse(node)}"
                )
                bounds = {k.arg: _number(k.value) for k in node.keywords}
                assert set(bounds) <= {"above", "below"} and bounds, ast.unparse(node)
                found.append((name.value, bounds.get("above"), bounds.get("below")))
    return found


def test_every_chapter_with_claims_is_swept_and_every_swept_chapter_claims():
    claiming = {md.stem for md in CHAPTERS if claims_in(md)}
    assert claiming == set(sweep.CHAPTERS), "chapters with claims = chapters in the sweep"
    assert set(RESULT["chapters"]) == set(sweep.CHAPTERS), "the sweep ran every chapter"


@pytest.mark.parametrize("chapter", sorted(sweep.CHAPTERS))
def test_the_chapters_claims_are_the_swept_ones(chapter):
    claims = claims_in(ROOT / "notebooks" / f"{chapter}.md")
    names = [name for name, *_ in claims]
    assert len(names) == len(set(names)), f"{chapter}: claim names must be unique"
    swept = {r["name"]: (r["above"], r["below"]) for r in RESULT["rows"] if r["chapter"] == chapter}
    mine = {name: (above, below) for name, above, below in claims}
    assert mine == swept, (
        f"{chapter}: its claims differ from the sweep's; re-run `python benchmarks/sweep.py`"
    )


@pytest.mark.parametrize("chapter", sorted(sweep.CHAPTERS))
def test_the_sweep_ran_the_code_in_the_repository(chapter):
    record = RESULT["chapters"][chapter]
    assert RESULT["seeds"] == sweep.SEEDS >= 8 and len(set(record["seeds"])) == sweep.SEEDS
    assert set(record["paths"]) == {"declared", "native", "no-vector"}
    assert record["fingerprint"] == sweep.fingerprint(chapter), (
        f"{chapter}'s code, the package or torch changed since the sweep ran: re-run "
        f"`python benchmarks/sweep.py {chapter}` (a few minutes a chapter on 2 cores)"
    )
    hosts = sweep.hosts_of(record)
    assert hosts and all(set(h["paths"]) == set(record["paths"]) for h in hosts)
    assert len(record["runs"]) == sweep.SEEDS * len(record["paths"]) * len(hosts)
    for host in hosts:  # every machine ran every seed on every path, once
        mine = [r for r in record["runs"] if r.get("machine", host["machine"]) == host["machine"]]
        assert sorted((r["seed"], r["path"]) for r in mine) == sorted(
            (s, p) for s in record["seeds"] for p in record["paths"]
        ), (chapter, host["machine"])
    for run in record["runs"]:
        assert run["claims"], f"{chapter} seed {run['seed']} on {run['path']}: no claims"


def test_a_sweep_on_a_second_machine_adds_its_runs_and_a_rerun_replaces_them():
    """Runs are merged across machines only while the code is the one they ran."""

    def record(machine, native, fp="f", value=1.0):
        host = {"machine": machine, "date": "d", "paths": {"declared": "AVX2", "native": native}}
        run = {"seed": 0, "path": "native", "claims": [{"name": "x", "min": value}]}
        return {"fingerprint": fp, "seeds": [0], "paths": ["declared", "native"],
                "hosts": [host], "runs": [run]}  # fmt: skip

    amd = sweep.merge_record(None, record("AMD", "AVX2"))
    both = sweep.merge_record(amd, record("Intel", "AVX512", value=2.0))
    assert [h["machine"] for h in both["hosts"]] == ["AMD", "Intel"]
    assert [r["machine"] for r in both["runs"]] == ["AMD", "Intel"]
    again = sweep.merge_record(both, record("Intel", "AVX512", value=3.0))  # replaces its own
    assert [(r["machine"], r["claims"][0]["min"]) for r in again["runs"]] == [
        ("AMD", 1.0),
        ("Intel", 3.0),
    ]
    changed = sweep.merge_record(both, record("Intel", "AVX512", fp="g"))
    assert [h["machine"] for h in changed["hosts"]] == ["Intel"]
    fresh = sweep.merge_record(both, record("Intel", "AVX512"), fresh=True)
    assert len(fresh["runs"]) == 1
    legacy = {k: v for k, v in amd.items() if k != "hosts"} | amd["hosts"][0]
    legacy["runs"] = [{k: v for k, v in r.items() if k != "machine"} for r in amd["runs"]]
    assert len(sweep.merge_record(legacy, record("Intel", "AVX512"))["hosts"]) == 2


def test_every_run_of_the_sweep_ran_clean_and_every_claim_has_room():
    errors = [
        f"{r['chapter']} seed {r['seed']} on {r['path']}: {e}" for r in RUNS for e in r["errors"]
    ]
    assert not errors, errors
    tight = [
        f"{r['chapter']}: {r['name']} (min {r['min']:.4g}, max {r['max']:.4g}, margin "
        f"{r['margin']:.3g}, z {r['z']:.2f}, failed on {r['failed']} runs)"
        for r in RESULT["rows"]
        if not r["room"]
    ]
    assert not tight, "claims without room to spare (benchmarks/SWEEP.md):\n" + "\n".join(tight)
    for r in RESULT["rows"]:
        assert r["runs"] == expected_runs(r["chapter"]), (r["chapter"], r["name"], r["runs"])
        assert not math.isnan(r["min"]) and r["margin"] > 0


def expected_runs(chapter: str) -> int:
    return len(RESULT["chapters"][chapter]["runs"])


def test_the_table_is_the_record():
    """SWEEP.md is written from sweep.json in the same run; a hand edit of either shows."""
    table = sweep.TABLE.read_text()
    for r in RESULT["rows"]:
        assert f"| {r['name']} |" in table, r["name"]
    assert f"Runs: {len(RUNS)};" in table


def test_summarise_flags_a_claim_without_room():
    """The room rule itself can fail: a bound one run crosses, one a few runs sit against,
    and one with room, over otherwise identical runs."""

    def runs(values, above):
        return [
            {
                "chapter": "c",
                "claims": [
                    {
                        "name": "x",
                        "min": v,
                        "max": v,
                        "above": above,
                        "below": None,
                        "held": v > above,
                    }
                ],
            }
            for v in values
        ]

    crossed = sweep.summarise(runs([0.5, 0.6, 0.7, 0.39], above=0.4))[0]
    assert not crossed["room"] and crossed["failed"] == 1 and crossed["margin"] < 0
    close = sweep.summarise(runs([0.5, 0.6, 0.7, 0.45], above=0.4))[0]
    assert close["margin"] > 0 and close["z"] < sweep.Z_REQUIRED and not close["room"]
    roomy = sweep.summarise(runs([0.5, 0.6, 0.7, 0.55], above=0.0))[0]
    assert roomy["room"] and roomy["z"] >= sweep.Z_REQUIRED
    nan = sweep.summarise(runs([0.5, math.nan], above=0.0))[0]
    assert not nan["room"]


def test_a_run_that_repeats_another_paths_bits_counts_once_for_z():
    """On an AVX2 machine the native path computes the declared path's bits: the repeat may
    fail a bound but must not shrink the spread that z divides by."""

    def run(seed, path, v):
        claim = {"name": "x", "min": v, "max": v, "above": 0.0, "below": None, "held": v > 0}
        return {"chapter": "c", "seed": seed, "path": path, "claims": [claim]}

    values = {0: 1.0, 1: 2.0, 2: 3.0}
    both = [run(s, p, v) for s, v in values.items() for p in ("declared", "native")]
    row = sweep.summarise(both)[0]
    alone = sweep.summarise([run(s, "declared", v) for s, v in values.items()])[0]
    assert (row["runs"], row["distinct"]) == (6, 3)
    assert row["z"] == alone["z"]
    other = sweep.summarise([*both[:-1], run(2, "native", 3.5)])[0]  # a path of its own
    assert other["distinct"] == 4


def test_the_fingerprint_follows_the_modules_a_run_executes():
    """A widget function pulls in its own module only (``attnbook.widgets`` imports it on first
    use), and an import under ``if TYPE_CHECKING:`` never runs: editing one widget leaves the
    other chapters' sweeps current, and the modules a chapter does run are all hashed."""
    code = (
        "from typing import TYPE_CHECKING\nimport attnbook.rope\n"
        "if TYPE_CHECKING:\n    from attnbook.widgets.softmax import softmax_saturation\n"
    )
    assert sweep._imported(code) == {"attnbook.rope"}
    widgets = ROOT / "src" / "attnbook" / "widgets"
    lazy = sweep._lazy_widgets()
    assert lazy["rope_rotation"] == "rope_plane" and lazy["head_explorer"] == "head_rows"
    for chapter, own in [
        ("05_positions_and_rope", "rope_plane"),
        ("14_induction_heads", "head_rows"),
    ]:
        reached = {
            p.relative_to(widgets).as_posix()
            for p in sweep._module_files(chapter)
            if widgets in p.parents
        }
        assert reached == {"__init__.py", "_live.py", f"{own}.py"}, (chapter, reached)
    retrieval = {p.name for p in sweep._module_files("12_lab_diagnosing_a_run")}
    assert {"retrieval_model.py", "training_health.py", "diagnostics.py"} <= retrieval
