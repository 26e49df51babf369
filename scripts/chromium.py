"""Headless Chromium, launched the same way by every browser check and benchmark here.

The system build (Debian's ``chromium``, or the runner's Chrome linked as ``chromium`` in CI)
driven by Playwright; never a browser Playwright downloads. The flags keep it from calling
home, which a machine without a network would otherwise answer with errors.
"""

from __future__ import annotations

import shutil

PATH = shutil.which("chromium") or shutil.which("chromium-browser")  # None: not installed
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def launch(playwright, *extra_args: str):
    """A headless Chromium browser from a started ``sync_playwright()`` context."""
    if PATH is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=PATH, args=[*ARGS, *extra_args])
