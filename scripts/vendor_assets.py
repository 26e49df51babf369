"""Copy the pinned browser assets from node_modules into book/_vendor/vendor/.

The site must load no third-party script, so MathJax 3 is installed from npm (package.json +
package-lock.json, via `npm ci`) and only the files a page needs are copied here.
book/_vendor is listed in Sphinx's html_static_path (not Jupyter Book's auto-included
_static/), so nothing here is injected into every page; Sphinx adds MathJax only to pages
with math.

MathJax is copied as separate components instead of the combined ``tex-chtml.js`` (1.16 MB):
the loader (``startup.js``) fetches ``core``, ``input/tex``, ``output/chtml`` and its font
data (about 0.75 MB together), leaving out the 0.43 MB context menu. ``_config.yml`` lists
the components in ``mathjax3_config.loader.load``. Widgets draw with their own JavaScript,
so no page needs the ipywidgets HTML manager or require.js and neither is shipped.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "node_modules"
TARGET = ROOT / "book" / "_vendor" / "vendor"

COPIES = {
    # MathJax's loader and the components _config.yml loads, its CommonHTML web fonts and
    # the TeX extensions it autoloads on demand (\boldsymbol, \cancel, ...), all resolved
    # relative to startup.js.
    "mathjax/es5/startup.js": "mathjax/startup.js",
    "mathjax/es5/core.js": "mathjax/core.js",
    "mathjax/es5/input/tex.js": "mathjax/input/tex.js",
    "mathjax/es5/input/tex/extensions": "mathjax/input/tex/extensions",
    "mathjax/es5/output/chtml.js": "mathjax/output/chtml.js",
    "mathjax/es5/output/chtml/fonts/tex.js": "mathjax/output/chtml/fonts/tex.js",
    "mathjax/es5/output/chtml/fonts/woff-v2": "mathjax/output/chtml/fonts/woff-v2",
    "mathjax/es5/a11y/assistive-mml.js": "mathjax/a11y/assistive-mml.js",
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
                ignore=shutil.ignore_patterns("*.map", "*.LICENSE.txt"),
            )
        else:
            shutil.copy2(src, dst)
    size = sum(p.stat().st_size for p in TARGET.rglob("*") if p.is_file())
    print(f"vendored {len(COPIES)} assets into {TARGET.relative_to(ROOT)} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
