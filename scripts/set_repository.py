"""Point the book at another repository (a fork that publishes its own copy).

    python scripts/set_repository.py https://github.com/OWNER/REPO

The repository URL is a setting in one place, ``_config.yml`` (``repository.url``): launch
buttons, the published site's address (``https://OWNER.github.io/REPO/``) and the links the
notebooks carry are derived from it. Two copies must state it literally and are checked
against it by ``tests/test_repository.py``: the package metadata (``pyproject.toml``) and each
chapter's Colab setup cell (Colab has nothing but the notebook). This script rewrites all of
them; afterwards run ``make sync`` so the notebooks' links point at the new site.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main(url: str) -> int:
    url = url.rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        print(f"expected https://github.com/OWNER/REPO, got {url!r}", file=sys.stderr)
        return 2
    config = ROOT / "_config.yml"
    old = yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]["url"].rstrip("/")
    files = [config, ROOT / "pyproject.toml", *sorted(ROOT.glob("notebooks/[0-9][0-9]_*.*"))]
    changed = 0
    for path in files:
        if path.suffix not in {".yml", ".toml", ".md", ".ipynb"}:
            continue
        text = path.read_text(encoding="utf-8")
        if old in text:
            path.write_text(text.replace(old, url), encoding="utf-8")
            changed += 1
    print(f"{old} -> {url} in {changed} files; now run `make sync` to relink the notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else print(__doc__) or 2)
