"""Start JupyterLab on notebooks/ the way `make lab` does (tests and benchmarks import it).

    python scripts/lab.py                      # what `make lab` runs
    python scripts/lab.py --port 8899 --no-browser

What it sets up, and why:
* ``jupyter/`` (on ``JUPYTER_CONFIG_PATH``): the file browser lists each chapter once (the
  ``.ipynb``, which carries outputs and reads without MyST; the ``.md`` source is hidden), no
  news pop-up, and widget state saved with the notebook so a saved chapter reopens with its
  pictures instead of "model not found"; a pre-save hook (``jupyter/widget_views.py``) drops
  any widget view whose model a save did not keep (a chapter reopened and saved without
  re-running its widget cells), so that output shows the widget's static face instead.
* The chapters are marked trusted (they are this repository's own files), so their stored
  widget and HTML outputs render with their scripts.
* ``--allow-root`` when run as root (containers, cloud VMs), where Lab otherwise refuses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CONFIG = ROOT / "jupyter"


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Lab runs in: the book's config folder first on the config path."""
    env = dict(os.environ if base is None else base)
    paths = [str(CONFIG), *filter(None, env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def command(*extra: str, root: Path = NOTEBOOKS) -> list[str]:
    """The ``jupyter lab`` command line on ``root``, with ``extra`` arguments appended."""
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "jupyter"), "lab", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return [*cmd, *extra]


def trust(env: dict[str, str], root: Path = NOTEBOOKS) -> None:
    """Sign every chapter notebook so Lab runs the scripts of its stored outputs."""
    notebooks = sorted(str(p) for p in root.glob("*.ipynb"))
    jupyter = str(Path(sys.executable).parent / "jupyter")
    subprocess.run([jupyter, "trust", *notebooks], env=env, check=True, capture_output=True)


def main(argv: list[str]) -> int:
    if not (sys.stdin.isatty() or sys.stdout.isatty() or argv):
        # Neither a reader at a terminal nor explicit arguments: most likely a script that
        # ran `make lab` by accident (it would block forever on a server nobody opens).
        print("make lab starts a JupyterLab server for a reader; run it from a terminal, or")
        print("pass arguments (make lab LAB_ARGS=--no-browser) to start it from a script.")
        return 0
    env = environment()
    trust(env)
    return subprocess.call(command(*argv), env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
