"""Time one update of each widget, in both faces, and print the median and 95th percentile.

* kernel face (JupyterLab, Colab): a control changes, Python recomputes the state and draws a
  new PNG with matplotlib, through the widget's own ``update`` path. Target: median < 100 ms.
* static face (the website): in headless Chromium, a control's value is set and its
  ``input`` event dispatched; the JavaScript recomputes and redraws the SVG synchronously, so
  the time around ``dispatchEvent`` is the whole update. Skipped if Chromium is missing.

    python benchmarks/widget_latency.py [--write] [--updates 40]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attnbook
from attnbook.widgets import WIDGETS, LiveWidget, spec

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table


def settings(widget_spec, count: int) -> list[dict]:
    """``count`` settings that each move one control, cycling through all of them."""
    out = []
    controls = widget_spec.controls
    for i in range(count):
        control = controls[i % len(controls)]
        if control.kind == "checkbox":
            value = bool(i // len(controls) % 2) != control.value
        elif control.kind == "select":
            value = control.options[(i // len(controls)) % len(control.options)]
        else:
            span = control.max - control.min
            value = control.min + span * ((i * 0.37) % 1.0)
            value = round(
                control.min + round((value - control.min) / control.step) * control.step, 10
            )
            value = int(value) if control.integer else value
        out.append({control.name: value})
    return out


BROWSER_LOOP = """
async ([settings]) => {
  const root = document.querySelector('.attnbook-widget');
  const times = [];
  for (const change of settings) {
    const [name, value] = Object.entries(change)[0];
    const el = root.querySelector(`[name="${name}"]`);
    if (el.type === 'checkbox') el.checked = value; else el.value = String(value);
    const start = performance.now();
    el.dispatchEvent(new Event('input', {bubbles: true}));
    times.push(performance.now() - start);
  }
  return times;
}
"""


def browser_times(count: int) -> dict[str, list[float]]:
    """Per widget, the static face's update times in ms (empty if Chromium is missing)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {}
    from playwright.sync_api import sync_playwright

    out = {}
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        for name in sorted(WIDGETS):
            widget = LiveWidget(spec(name))
            path = Path(scratch) / f"{name}.html"
            path.write_text(f"<!doctype html><meta charset=utf-8><body>{widget.html()}</body>")
            page.goto(path.as_uri())
            changes = json.loads(json.dumps(settings(widget.spec, count)))
            out[name] = page.evaluate(BROWSER_LOOP, [changes])
        browser.close()
    return out


def summary(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args()
    attnbook.setup(seed=0)
    static = browser_times(args.updates)
    rows = []
    for name in sorted(WIDGETS):
        widget = LiveWidget(spec(name))
        widget.ipywidget()  # build the kernel face once, as displaying it would
        times, rejected = [], 0
        for change in settings(widget.spec, args.updates):
            start = time.perf_counter()
            accepted = widget.update(**change)
            times.append((time.perf_counter() - start) * 1000)
            rejected += not accepted
        median, p95 = summary(times)
        js = summary(static[name]) if name in static else None
        rows.append(
            [
                name,
                f"{median:.1f}",
                f"{p95:.1f}",
                "ok" if median < 100 else "over 100 ms",
                f"{js[0]:.2f}" if js else "n/a",
                f"{js[1]:.2f}" if js else "n/a",
                str(rejected),
            ]
        )
    headers = [
        "widget",
        "kernel median ms",
        "kernel p95 ms",
        "kernel target",
        "static median ms",
        "static p95 ms",
        "rejected settings",
    ]
    body = table(headers, rows)
    report(
        "widget_latency",
        "Widget update latency (kernel face: compute + PNG; static face: JavaScript + SVG)",
        body,
        write=args.write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
