"""CPU code paths: the stored outputs come from one declared path; every chapter also runs on
this machine's own path.

A reader's CPU decides which kernels PyTorch, MKL and oneDNN run (AVX-512, AVX2, or none), and
each rounds differently. Strict nbval compares the stored outputs on the declared path
(``attnbook.runtime.CPU_PATHS["declared"]``, AVX2, which every x86-64 CPU since 2013 takes);
the Colab-like runtime (``tests/test_colab_runtime.py``) runs every chapter on the no-vector
path; the test here runs every chapter on the machine's native path: every cell must run and
every claim hold. On an AVX-512 machine this is where a bound set on one machine's digits
shows. Both runs also compare each cell's text with the stored outputs: a cell whose text
changes with the CPU path prints trained or rounding-dependent digits, and must either print
a bound or carry the ``nbval-ignore-output`` tag (README, "What strict nbval tolerates").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from attnbook.runtime import CPU_PATHS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_runs import (  # noqa: E402
    IGNORE_OUTPUT,
    PATH_VARIABLES,
    capability,
    changed_cells,
    path_env,
    run_chapter,
    untagged_change,
)

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_makefile_declares_the_packages_declared_path():
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^DECLARED_CPU\s*:=\s*(.*)$", makefile, re.M)
    assert line, "the Makefile names the declared CPU path once, as DECLARED_CPU"
    assigned = dict(item.split("=", 1) for item in line.group(1).split())
    assert assigned == CPU_PATHS["declared"]
    for use in ("$(NBVAL_ENV)", "$(BOOK)"):
        assert use in makefile
    assert re.search(r"^NBVAL_ENV\s*:=.*\$\(DECLARED_CPU\)", makefile, re.M)
    assert re.search(r"^BOOK\s*:=.*\$\(DECLARED_CPU\)", makefile, re.M)


def test_path_env_sets_one_path_and_clears_the_others():
    base = {"HOME": "/x", **CPU_PATHS["no-vector"]}
    assert path_env("native", base) == {"HOME": "/x"}
    assert path_env("declared", base) == {"HOME": "/x", **CPU_PATHS["declared"]}
    assert set(PATH_VARIABLES) == {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"}
    with pytest.raises(ValueError, match="path"):
        path_env("avx512")


def _cell(*outputs, tags=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "outputs": list(outputs)}


def _out(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def test_changed_cells_compares_what_strict_nbval_compares():
    stored = {"cells": [_cell(_out("loss 2.609\n")), _cell(_out("a\nb\n")), _cell(_out("x"))]}
    # The same text in other pieces, a timing the sanitizer hides, and one changed digit.
    executed = {
        "cells": [
            _cell(_out("loss 2.582\n")),
            _cell(_out("a\n"), _out(["b", "\n"])),
            _cell(_out("x")),
        ]
    }
    assert changed_cells(stored, executed) == [
        {"cell": 1, "tagged": False, "stored": "loss 2.609", "now": "loss 2.582"}
    ]
    stored["cells"][0]["metadata"]["tags"] = [IGNORE_OUTPUT]
    assert changed_cells(stored, executed)[0]["tagged"]
    timing = [_cell(_out("measured: 12.3 ms\n"))], [_cell(_out("measured: 4 ms\n"))]
    assert changed_cells({"cells": timing[0]}, {"cells": timing[1]}) == []
    plain = {"output_type": "execute_result", "data": {"text/plain": "0.5"}, "metadata": {}}
    other = plain | {"data": {"text/plain": "0.6"}}
    assert len(changed_cells({"cells": [_cell(plain)]}, {"cells": [_cell(other)]})) == 1
    err = {"output_type": "error", "ename": "AssertionError", "evalue": "", "traceback": []}
    assert len(changed_cells({"cells": [_cell()]}, {"cells": [_cell(err)]})) == 1
    assert (
        len(changed_cells({"cells": [_cell(_out("1"))]}, {"cells": [_cell(_out("1", "stderr"))]}))
        == 1
    )
    with pytest.raises(ValueError, match="code cells"):
        changed_cells(stored, {"cells": []})
    assert "tag the cell nbval-ignore-output" in untagged_change(
        "13", changed_cells({"cells": [_cell(_out("1"))]}, {"cells": [_cell(_out("2"))]})[0]
    )


def test_the_paths_select_what_they_say():
    assert capability("no-vector") == "DEFAULT"
    declared, native = capability("declared"), capability("native")
    assert declared in {"AVX2", "DEFAULT"}  # DEFAULT only on a CPU without AVX2
    assert native in {"AVX512", "AVX2", "DEFAULT"}


@pytest.mark.runtime
def test_every_chapter_runs_on_this_machines_own_cpu_path():
    native = capability("native")
    failures, changed = [], 0
    for notebook in CHAPTERS:
        run = run_chapter(notebook, "native")
        failures += [f"{notebook.stem}: cell {e['cell']}: {e['error']}" for e in run["errors"]]
        failures += [
            f"{notebook.stem}: claim {c['name']!r}: {c['min']:.4g} to {c['max']:.4g}, bounds "
            f"{c['above']}, {c['below']}"
            for c in run["claims"]
            if not c["held"]
        ]
        failures += [f"{notebook.stem} wrote {n}" for n in run["extra_files"]]
        failures += [untagged_change(notebook.stem, c) for c in run["changed"] if not c["tagged"]]
        changed += len(run["changed"])
    print(
        f"every chapter on the native path ({native}): {len(failures)} failures; {changed} "
        "code cells printed other text than the stored outputs"
        + (
            ""
            if changed
            else " (this path rounds as the declared one: the comparison of "
            "untagged cells tested nothing here)"
        )
    )
    assert not failures, f"on this machine's own CPU path ({native}):\n" + "\n".join(failures)
