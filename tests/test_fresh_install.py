"""A reader's fresh install, as in Colab: a wheel of attnbook plus the pinned requirements in
a new virtual environment outside the repository, and chapter notebooks executed alone in an
empty folder. A chapter that reached for a file beside it, or a package module missing from
the wheel (the widgets' JavaScript is package data), fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ["01_deriving_self_attention", "02_why_sqrt_dk"]

EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3").execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
assert not errors, errors
print("executed", sys.argv[1], "cells:", len(nb.cells))
"""


def _run(*args, cwd):
    return subprocess.run(
        args,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


@pytest.mark.slow
def test_wheel_and_one_notebook_alone_in_a_new_environment(tmp_path):
    dist = tmp_path / "dist"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(dist),
        str(ROOT),
        cwd=tmp_path,
    )
    wheel = next(dist.glob("attnbook-*.whl"))

    env_dir = tmp_path / "reader-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pins = [
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-e"))
    ]
    (tmp_path / "pins.txt").write_text("\n".join(pins) + "\n")
    _run(str(python), "-m", "pip", "install", "--quiet", "-r", "pins.txt", str(wheel), cwd=tmp_path)

    for name in CHAPTERS:
        alone = tmp_path / f"alone-{name}"
        alone.mkdir()
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", alone)
        result = _run(str(python), "-c", EXECUTE, f"{name}.ipynb", cwd=alone)
        assert "executed" in result.stdout
        assert sorted(p.name for p in alone.iterdir()) == [f"{name}.ipynb"], (
            "the chapter wrote files beside itself"
        )

    probe = _run(
        str(python),
        "-c",
        "import attnbook, attnbook.widgets._live as l; "
        "print(attnbook.__file__); print(len(l.js_source('runtime')))",
        cwd=tmp_path,
    )
    assert str(ROOT) not in probe.stdout, "the reader's env imported the repository's copy"
