"""CPU code paths: the stored outputs come from one declared path; every chapter also runs on
this machine's own path.

A reader's CPU decides which kernels PyTorch, MKL and oneDNN run (AVX-512, AVX2, or none), and
each rounds differently. Strict nbval compares the stored outputs on the declared path
(``attnbook.runtime.CPU_PATHS["declared"]``, AVX2, which every x86-64 CPU since 2013 takes);
the Colab-like runtime (``tests/test_colab_runtime.py``) runs every chapter on the no-vector
path; the test here runs every chapter on the machine's native path, with no output
comparison: every cell must run and every claim hold. On an AVX-512 machine this is where a
bound set on one machine's digits shows.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from attnbook.runtime import CPU_PATHS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_runs import PATH_VARIABLES, capability, path_env, run_chapter  # noqa: E402

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


def test_the_paths_select_what_they_say():
    assert capability("no-vector") == "DEFAULT"
    declared, native = capability("declared"), capability("native")
    assert declared in {"AVX2", "DEFAULT"}  # DEFAULT only on a CPU without AVX2
    assert native in {"AVX512", "AVX2", "DEFAULT"}


@pytest.mark.runtime
def test_every_chapter_runs_on_this_machines_own_cpu_path():
    native = capability("native")
    failures = []
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
    print(f"every chapter on the native path ({native}): {len(failures)} failures")
    assert not failures, f"on this machine's own CPU path ({native}):\n" + "\n".join(failures)
