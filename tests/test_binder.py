"""Binder's reader environment: the book's pins, the CPU build of torch, no authoring tools.

``binder/requirements.txt`` names PyTorch's CPU index, which this machine cannot reach; the
test resolves the same file with that line replaced by the local wheel folders pip is set up
with (where the same CPU wheel lies), so the resolution is the one Binder makes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder" / "requirements.txt"
UV = Path(sys.executable).parent / "uv"
AUTHORING = {"jupyter-book", "pytest", "playwright", "ruff", "hypothesis", "nbval", "jupytext"}


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)", line)
        if match:
            pins[match[1].lower()] = match[2]
    return pins


def test_binder_pins_are_the_books_pins_with_the_cpu_torch():
    binder, book = _pins(BINDER), _pins(ROOT / "requirements.txt")
    assert binder["torch"] == book["torch"] + "+cpu"
    for name, version in binder.items():
        if name != "torch":
            assert book.get(name) == version, f"{name}: binder {version}, book {book.get(name)}"
    assert not AUTHORING & set(binder), "Binder needs no authoring or test tools"
    assert "transformers" in binder, "chapter 13's export section runs on Binder"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in BINDER.read_text()
    assert (ROOT / "binder" / "start").stat().st_mode & 0o111, "binder/start is executable"


@pytest.mark.slow
def test_binder_environment_resolves_to_cpu_torch_and_nothing_for_authoring(tmp_path):
    if not UV.exists():
        pytest.fail("uv is installed into .venv by `make setup`")
    local = os.environ.get("PIP_FIND_LINKS", "").replace(",", " ").split()
    if not local:
        pytest.skip("no local wheel folder to stand in for PyTorch's CPU index")
    text = BINDER.read_text()
    text = text.replace("--extra-index-url https://download.pytorch.org/whl/cpu", "")
    text = text.replace("\n.\n", f"\n{ROOT}\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(text)
    result = subprocess.run(
        [str(UV), "pip", "compile", "--quiet", "--no-header", str(requirements)]
        + [f"--find-links={d}" for d in local],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    resolved = _pins_from(result.stdout)
    assert resolved["torch"] == "2.13.0+cpu"
    assert not [name for name in resolved if name.startswith("nvidia-")], "a CUDA build crept in"
    assert not AUTHORING & set(resolved), AUTHORING & set(resolved)


def _pins_from(text: str) -> dict[str, str]:
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}
