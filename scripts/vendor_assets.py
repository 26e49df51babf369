"""Copy the pinned browser assets from node_modules into book/_vendor/vendor/.

The site must load no third-party script, so MathJax 3, require.js and the Jupyter widget
HTML manager are installed from npm (package.json + package-lock.json, via `npm ci`) and only
the files a page needs are copied here. book/_vendor is listed in Sphinx's html_static_path
(not Jupyter Book's auto-included _static/), so nothing here is injected into every page;
_config.yml names each script where it is wanted.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "node_modules"
TARGET = ROOT / "book" / "_vendor" / "vendor"

COPIES = {
    # MathJax's combined TeX-to-CommonHTML component, its web fonts, and the TeX extensions
    # it autoloads on demand (\boldsymbol, \cancel, ...), all resolved relative to the script.
    "mathjax/es5/tex-chtml.js": "mathjax/tex-chtml.js",
    "mathjax/es5/output/chtml/fonts/woff-v2": "mathjax/output/chtml/fonts/woff-v2",
    "mathjax/es5/input/tex/extensions": "mathjax/input/tex/extensions",
    "requirejs/require.js": "requirejs/require.js",
    "@jupyter-widgets/html-manager/dist": "html-manager",
}


def main() -> int:
    if not MODULES.is_dir():
        print("node_modules/ is missing: run `npm ci` first", file=sys.stderr)
        return 1
    if TARGET.exists():
        shutil.rmtree(TARGET)
    for source, destination in COPIES.items():
        src, dst = MODULES / source, TARGET / destination
        if not src.exists():
            print(
                f"missing {src}: is package-lock.json in sync with package.json?", file=sys.stderr
            )
            return 1
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(
                src,
                dst,
                ignore=shutil.ignore_patterns(
                    "*.map", "*.LICENSE.txt", "embed.js", "libembed-amd.js"
                ),
            )
        else:
            shutil.copy2(src, dst)
    size = sum(p.stat().st_size for p in TARGET.rglob("*") if p.is_file())
    print(f"vendored {len(COPIES)} assets into {TARGET.relative_to(ROOT)} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
