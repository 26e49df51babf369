"""Every chapter in a Colab-like runtime: ipywidgets 7, a non-editable install, no network.

Colab ships ipywidgets 7.7.1 and ipykernel 6 (and transformers, which chapter 13's oracle
section uses), and a reader there installs ``attnbook`` as a
package (the setup cell's ``%pip install``), not as this repository's editable checkout. This
test builds that runtime in a new virtual environment (the same pins for torch, NumPy and
matplotlib, so uv links them from its cache), installs the package from a wheel, cuts the
network (a new network namespace with only loopback), and executes every chapter's stored
``.ipynb`` alone in an empty folder. It fails on an error in any cell, a file written beside the
notebook, a module or data file missing from the wheel, a widget that does not reach the
ipywidgets-7 front end as a widget view with saved state, or the repository's copy being
imported instead of the installed package, or a cell whose printed text changes with the CPU
path but carries no ``nbval-ignore-output`` tag (it prints trained or rounding-dependent
digits, which strict nbval would compare).

Run by ``make test`` (marker ``runtime``), in the background while the other checks run: it is
the second environment in which each chapter executes once. It runs them on the no-vector CPU
code path (``attnbook.runtime.CPU_PATHS["no-vector"]``: PyTorch's kernels without SIMD, MKL's
and oneDNN's most compatible code), the far end from the declared path of the stored outputs;
``tests/test_cpu_paths.py`` runs them once more on this machine's own path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnbook.runtime import CPU_PATHS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_runs import changed_cells, untagged_change  # noqa: E402

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
UV = Path(sys.executable).parent / "uv"
# Colab's widget and kernel line; the rest as the book pins them.
COLAB = ["ipywidgets==7.7.1", "ipykernel==6.30.1"]
SHARED = ("torch", "numpy", "matplotlib", "nbclient", "nbformat", "anywidget", "transformers")
# Colab's CPUs are not this machine's, and float sums that run in another order drift over a
# training run. A chapter that asserts a number only one machine's rounding produces fails here.
NO_VECTOR = CPU_PATHS["no-vector"]

RUN_ALL = r"""
import json, os, shutil, sys, tempfile
from pathlib import Path
import nbformat
from nbclient import NotebookClient

report = {}
for path in map(Path, sys.argv[1:]):
    alone = Path(tempfile.mkdtemp(prefix="alone-"))
    shutil.copy(path, alone)
    nb = nbformat.read(alone / path.name, as_version=4)
    nb.metadata.pop("widgets", None)  # the run must produce its own widget state
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(alone)}}).execute()
    errors = [f"{o.ename}: {o.evalue}" for c in nb.cells for o in c.get("outputs", [])
              if o.output_type == "error"]
    views = [o for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    state = nb.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    report[path.name] = {
        "errors": errors,
        "views": len(views),
        "views_with_state": sum(
            o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] in state
            for o in views),
        "base_versions": sorted({m["model_module_version"] for m in state.values()
                                 if m["model_module"] == "@jupyter-widgets/base"}),
        "extra_files": sorted(p.name for p in alone.iterdir() if p.name != path.name),
    }
    nbformat.write(nb, Path(os.environ["EXECUTED_INTO"]) / path.name)  # compared by the test
import attnbook, ipywidgets, torch
report["_env"] = {"attnbook": attnbook.__file__, "ipywidgets": ipywidgets.__version__,
                  "cpu": torch.backends.cpu.get_cpu_capability()}
print(json.dumps(report))
"""


def _run(args, **kwargs):
    kwargs.setdefault("timeout", 900)
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{args[:3]} failed:\n{output}"
    return result


def _offline_prefix() -> list[str]:
    """A command prefix that runs with no network but loopback (root or user namespaces)."""
    for flags in (["-n"], ["-r", "-n"]):
        probe = subprocess.run(["unshare", *flags, "true"], capture_output=True)
        if probe.returncode == 0:
            return ["unshare", *flags, "sh", "-c", 'ip link set lo up && exec "$@"', "offline"]
    pytest.fail("cannot cut the network: `unshare -n` is not permitted here (run as root)")


def _pins() -> list[str]:
    pins = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        if name in SHARED:
            pins.append(line.split("#")[0].strip())
    return pins


@pytest.mark.runtime
def test_every_chapter_runs_in_a_colab_like_runtime_with_no_network(tmp_path):
    assert UV.exists(), "uv is installed into .venv by `make setup`"
    find_links = os.environ.get("PIP_FIND_LINKS", "").replace(",", " ").split()
    uv_flags = [f"--find-links={d}" for d in find_links]

    _run([str(UV), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path / "dist"), str(ROOT)])
    wheel = next((tmp_path / "dist").glob("attnbook-*.whl"))
    env = tmp_path / "colab"
    _run([str(UV), "venv", "--quiet", "--python", sys.executable, str(env)])
    python = env / "bin" / "python"
    install = [str(UV), "pip", "install", "--quiet", "--python", str(python), *uv_flags]
    _run([*install, *COLAB, *_pins(), str(wheel)])

    run_all = tmp_path / "run_all.py"
    run_all.write_text(RUN_ALL)
    work = tmp_path / "work"  # the driver's cwd: nothing from the repository is importable
    work.mkdir()
    executed = tmp_path / "executed"  # each chapter as this run left it
    executed.mkdir()
    result = _run(
        [*_offline_prefix(), str(python), str(run_all), *map(str, CHAPTERS)],
        cwd=work,
        env={
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV")) and k not in CPU_PATHS["declared"]
        }
        | NO_VECTOR
        | {"EXECUTED_INTO": str(executed)},
        timeout=2400,  # 16 notebooks in one process, sharing two cores with make test's other lanes
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert report["_env"]["ipywidgets"] == "7.7.1"
    assert report["_env"]["cpu"] == "DEFAULT", "the chapters ran on the no-vector CPU path"
    assert str(env) in report["_env"]["attnbook"], "the installed package, not the repository"
    assert set(report) - {"_env"} == {p.name for p in CHAPTERS}
    for name, chapter in sorted(report.items()):
        if name == "_env":
            continue
        assert not chapter["errors"], f"{name}: {chapter['errors']}"
        assert not chapter["extra_files"], f"{name} wrote {chapter['extra_files']} beside itself"
        assert chapter["views"] == chapter["views_with_state"], f"{name}: a view has no model"
        if chapter["views"]:  # ipywidgets 7 speaks widget protocol 2 with base 1.2.0
            assert chapter["base_versions"] == ["1.2.0"], (name, chapter["base_versions"])
    assert sum(c["views"] for k, c in report.items() if k != "_env") >= 5, "the widgets ran"
    # On the no-vector path every float sum rounds otherwise than on the declared path, so a
    # cell whose text depends on rounding shows it here, on any machine.
    changes = {
        p.name: changed_cells(
            json.loads(p.read_text()), json.loads((executed / p.name).read_text())
        )
        for p in CHAPTERS
    }
    untagged = [untagged_change(n, c) for n, cs in changes.items() for c in cs if not c["tagged"]]
    print(
        f"{sum(map(len, changes.values()))} code cells printed other text than the stored "
        f"outputs, {len(untagged)} of them untagged"
    )
    assert sum(map(len, changes.values())) > 0, "no cell changed: the comparison tested nothing"
    assert not untagged, "\n".join(untagged)
    shutil.rmtree(env, ignore_errors=True)
