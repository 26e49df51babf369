"""Time one update of each widget's kernel face: a control changes, the state is recomputed
and a new PNG is drawn (exactly what a slider move triggers in JupyterLab or Colab). Prints
the median and 95th percentile; target median under 100 ms.

    python benchmarks/widget_latency.py [--write] [--updates 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args()
    attnbook.setup(seed=0)
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
        times.sort()
        median = statistics.median(times)
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
        rows.append(
            [
                name,
                f"{median:.1f}",
                f"{p95:.1f}",
                str(rejected),
                "ok" if median < 100 else "OVER 100 ms",
            ]
        )
    body = table(["widget", "median ms", "p95 ms", "rejected settings", "target"], rows)
    report(
        "widget_latency",
        "Widget update latency (kernel face: compute + PNG)",
        body,
        write=args.write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
