"""Time each widget from a control change to the new picture, in the browser, in every face.

* static face (the website): headless Chromium sets a control and dispatches ``input``; the
  JavaScript recomputes and redraws the SVG synchronously.
* kernel face in real JupyterLab, started as ``make lab`` starts it (``scripts/lab.py``), and
  in Classic Notebook 6 + ipywidgets 7 (Colab's widget line; a separate venv,
  ``_build/bench-ipyw7``, made on first use): a notebook displays every widget and runs; for
  each widget, ``--updates`` control changes (a reader's pause between them) are timed with a
  MutationObserver on the drawing: the JavaScript's own frame (``local``) and Python's
  reconciled frame (``python``), matched by the request's sequence number. Then a 0.5 s drag
  of 15 mouse moves on the widget's finest slider: value changes versus frames drawn.
  Target: median <= 30 ms from a change to a new picture; every move of a drag gives a frame.

    python benchmarks/widget_latency.py [--write] [--updates 40] [--no-lab] [--no-classic]

Chromium: /usr/bin/chromium through Playwright (never a downloaded browser); no request may
leave 127.0.0.1 (they are blocked and counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import attnbook
from attnbook.widgets import WIDGETS, LiveWidget, spec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "scripts"))
import chromium  # noqa: E402  (scripts/chromium.py: how every browser check launches it)
import lab  # noqa: E402  (scripts/lab.py: how `make lab` starts JupyterLab)
from _report import report, table  # noqa: E402

CLASSIC_VENV = ROOT / "_build" / "bench-ipyw7"
CLASSIC_PINS = [
    "notebook==6.5.7",
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "ipykernel>=6,<7",
    "anywidget==0.11.0",
    "torch==2.13.0",  # the CPU wheel from the local index, as in requirements.txt
    "numpy",
    "matplotlib",
]


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


def summary(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))]


def _browser(p):
    return chromium.launch(p)


def _page_on_server(p, port: int, outside: list[str]):
    """Once the notebook server on ``port`` answers: a browser and a page that may only talk
    to 127.0.0.1 (what it tried elsewhere goes to ``outside``)."""
    _wait_http(f"http://127.0.0.1:{port}/api/status")
    browser = _browser(p)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    _block_outside(context, outside)
    return browser, context.new_page()


def _block_outside(context, outside: list[str]) -> None:
    def route(r):
        host = r.request.url.split("/")[2] if "://" in r.request.url else ""
        if r.request.url.startswith(("http://", "https://", "ws://")) and not host.startswith(
            ("127.0.0.1", "localhost")
        ):
            outside.append(r.request.url)
            return r.abort()
        return r.continue_()

    context.route("**/*", route)


# --- the static face ----------------------------------------------------------------------------
STATIC_LOOP = """
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


def static_times(p, count: int) -> dict[str, list[float]]:
    out = {}
    browser = _browser(p)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    with tempfile.TemporaryDirectory() as scratch:
        for name in sorted(WIDGETS):
            widget = LiveWidget(spec(name))
            path = Path(scratch) / f"{name}.html"
            path.write_text(f"<!doctype html><meta charset=utf-8><body>{widget.html()}</body>")
            page.goto(path.as_uri())
            changes = json.loads(json.dumps(settings(widget.spec, count)))
            out[name] = page.evaluate(STATIC_LOOP, [changes])
    browser.close()
    return out


# --- the kernel face in a real front end -------------------------------------------------------
KERNEL_LOOP = """
async ([name, changes]) => {
  const root = [...document.querySelectorAll('.attnbook-widget[data-python-seq]')]
    .find((r) => r.dataset.widget === name);
  root.scrollIntoView();
  const view = root.querySelector('.attnbook-view');
  const frames = [];
  const observer = new MutationObserver(() => {
    const svg = view.querySelector('svg');
    if (svg && !svg.dataset.resized)
      frames.push([svg.dataset.source, +svg.dataset.seq, performance.now()]);
  });
  observer.observe(view, { childList: true });
  const out = [];
  for (const change of changes) {
    const [control, value] = Object.entries(change)[0];
    const el = root.querySelector(`[name="${control}"]`);
    const before = +root.dataset.pythonSeq;
    if (el.type === 'checkbox') el.checked = value; else el.value = String(value);
    const start = performance.now();
    el.dispatchEvent(new Event('input', { bubbles: true }));
    const answered = await new Promise((resolve) => {
      const check = () => (+root.dataset.pythonSeq > before ? resolve(true)
        : performance.now() - start > 10000 ? resolve(false) : setTimeout(check, 1));
      check();
    });
    await new Promise((r) => setTimeout(r, 5)); // let the python frame's observer record
    const n = +root.dataset.pythonSeq;
    const local = frames.find((f) => f[0] === 'local' && f[1] === n);
    const python = frames.find((f) => f[0] === 'python' && f[1] === n);
    out.push({ answered, error: Boolean(root.dataset.error),
      local: local ? local[2] - start : null, python: python ? python[2] - start : null });
    await new Promise((r) => setTimeout(r, 40)); // a reader's pause between changes
  }
  observer.disconnect();
  return { out, agree: root.dataset.agree, disagreements: +root.dataset.disagreements };
}
"""

DRAG_SETUP = """
([name, control, start]) => {
  const root = [...document.querySelectorAll('.attnbook-widget[data-python-seq]')]
    .find((r) => r.dataset.widget === name);
  root.scrollIntoView({ block: 'center' });
  const view = root.querySelector('.attnbook-view');
  for (const [k, v] of Object.entries(start)) {  // back to a possible setting
    const input = root.querySelector(`[name="${k}"]`);
    if (input.type === 'checkbox') input.checked = v; else input.value = String(v);
  }
  const el = root.querySelector(`[name="${control}"]`);
  el.value = el.min;
  el.dispatchEvent(new Event('input', { bubbles: true }));
  window.__drag = { changes: 0, local: 0, python: 0, last: el.value };
  el.addEventListener('input', () => {
    if (el.value === window.__drag.last) return;
    window.__drag.changes += 1;
    window.__drag.last = el.value;
  });
  new MutationObserver(() => {
    const svg = view.querySelector('svg');
    if (svg && !svg.dataset.resized) window.__drag[svg.dataset.source] += 1;
  }).observe(view, { childList: true });
  const box = el.getBoundingClientRect();
  return [box.left, box.top, box.width, box.height];
}
"""


# Where each drag starts (else the defaults): 16 blocks give the step slider 16 values.
DRAG_FROM = {"online_softmax_stepper": {"block_size": 1}}


def _finest_slider(name: str) -> str:
    sliders = [c for c in spec(name).controls if c.kind == "range"]
    return max(sliders, key=lambda c: (c.max - c.min) / c.step).name


def measure_front_end(page, count: int) -> dict[str, dict]:
    results = {}
    for name in sorted(WIDGETS):
        changes = json.loads(json.dumps(settings(spec(name), count)))
        run = page.evaluate(KERNEL_LOOP, [name, changes])
        timed = [r for r in run["out"] if r["answered"] and not r["error"]]
        control = _finest_slider(name)
        start = json.loads(json.dumps(LiveWidget(spec(name), **DRAG_FROM.get(name, {})).params))
        left, top, width, height = page.evaluate(DRAG_SETUP, [name, control, start])
        page.wait_for_timeout(300)
        page.evaluate("() => { window.__drag.local = 0; window.__drag.python = 0; }")
        y = top + height / 2
        page.mouse.move(left + 4, y)
        page.mouse.down()
        for i in range(1, 16):  # 15 moves in 0.5 s
            page.mouse.move(left + 4 + i * (width - 8) / 15, y)
            page.wait_for_timeout(33)
        page.mouse.up()
        page.wait_for_timeout(1500)  # Python's answers to the last moves
        drag = page.evaluate("() => window.__drag")
        results[name] = {
            "local": [r["local"] for r in timed if r["local"] is not None],
            "python": [r["python"] for r in timed if r["python"] is not None],
            "refused": sum(r["error"] for r in run["out"]),
            "unanswered": sum(not r["answered"] for r in run["out"]),
            "agree": run["agree"] == "true" and run["disagreements"] == 0,
            "drag": drag,
            "drag_control": control,
        }
    return results


def _notebook(path: Path) -> None:
    cells = [
        "import attnbook\nimport attnbook.widgets as w\nattnbook.setup(seed=0)",
        *[f"w.{name}()" for name in sorted(WIDGETS)],
    ]
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for src in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:  # the server answers (auth or not): it is up
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {seconds} s")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()  # only the server this script started, by its PID
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def jupyterlab(p, count: int) -> tuple[dict, list[str]]:
    """Real JupyterLab, launched exactly as `make lab` launches it (root: notebooks/).

    The bench notebook lives in a scratch folder under notebooks/ for the run (Lab's root
    cannot be changed on the command line) and is removed afterwards.
    """
    outside: list[str] = []
    scratch = Path(tempfile.mkdtemp(prefix="_widget_bench_", dir=lab.NOTEBOOKS))
    try:
        _notebook(scratch / "bench.ipynb")
        port = _free_port()
        cmd = lab.command(
            f"--port={port}", "--no-browser", "--ServerApp.token=", "--ServerApp.password="
        )
        server = subprocess.Popen(
            cmd, env=lab.environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            browser, page = _page_on_server(p, port, outside)
            page.goto(  # a fresh workspace: nothing restored from an earlier session
                f"http://127.0.0.1:{port}/lab/workspaces/bench{os.getpid()}/tree/"
                f"{scratch.name}/bench.ipynb?reset"
            )
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
            for attempt in range(3):  # a busy machine may take the click before the kernel
                page.wait_for_timeout(3000)
                page.locator(".jp-NotebookPanel .jp-Cell").first.click()
                page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
                try:
                    page.wait_for_function(
                        "n => document.querySelectorAll('.attnbook-widget[data-python-seq]')"
                        ".length >= n",
                        arg=len(WIDGETS),
                        timeout=90_000,
                    )
                    break
                except Exception:
                    if attempt == 2:
                        raise
            page.wait_for_timeout(1000)
            results = measure_front_end(page, count)
            browser.close()
        finally:
            _stop(server)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results, outside


def _classic_venv() -> Path:
    python = CLASSIC_VENV / "bin" / "python"
    if not (CLASSIC_VENV / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", str(CLASSIC_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *CLASSIC_PINS], check=True)
        with tempfile.TemporaryDirectory() as wheels:  # the package as a reader installs it
            subprocess.run(
                [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, str(ROOT)],
                check=True,
            )
            subprocess.run([*pip, "--no-deps", *Path(wheels).glob("*.whl")], check=True)
        (CLASSIC_VENV / ".ready").touch()
    return python


def classic_notebook(p, count: int) -> tuple[dict, list[str]]:
    """Classic Notebook 6 + ipywidgets 7 (Colab's line) from its own venv."""
    python = _classic_venv()
    outside: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        _notebook(Path(scratch) / "bench.ipynb")
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env |= {
            "JUPYTER_CONFIG_DIR": str(Path(scratch) / ".jupyter"),
            "JUPYTER_DATA_DIR": str(Path(scratch) / ".data"),
            "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
        }
        cmd = [
            str(python.parent / "jupyter"),
            "notebook",
            f"--port={port}",
            "--no-browser",
            "--NotebookApp.token=",
            "--NotebookApp.password=",
            f"--notebook-dir={scratch}",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        server = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=scratch
        )
        try:
            browser, page = _page_on_server(p, port, outside)
            page.goto(f"http://127.0.0.1:{port}/notebooks/bench.ipynb")
            page.wait_for_function(
                "() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                " && Jupyter.notebook.kernel.is_connected()",
                timeout=120_000,
            )
            # Running all the instant the kernel is ready loses the widget outputs ("Control
            # comm was closed too early"); ~3 s later it works (shared/notes/kernel-widgets.md).
            page.wait_for_timeout(3000)
            page.evaluate("() => Jupyter.notebook.execute_all_cells()")
            page.wait_for_function(
                "n => document.querySelectorAll('.attnbook-widget[data-python-seq]').length >= n",
                arg=len(WIDGETS),
                timeout=180_000,
            )
            page.wait_for_timeout(1000)
            results = measure_front_end(page, count)
            browser.close()
        finally:
            _stop(server)
    return results, outside


def front_end_rows(label: str, results: dict) -> list[list[str]]:
    rows = []
    for name, r in sorted(results.items()):
        local, python = summary(r["local"]), summary(r["python"])
        drag = r["drag"]
        # The target is the new picture (the JavaScript's frame) within 30 ms and a frame for
        # every value a drag passes through; Python's frame is reported beside it.
        ok = local[0] <= 30 and drag["local"] >= drag["changes"]
        rows.append(
            [
                label,
                name,
                f"{local[0]:.1f} / {local[1]:.1f}",
                f"{python[0]:.1f} / {python[1]:.1f}",
                str(len(r["python"])),
                f"{drag['changes']} / {drag['local']} / {drag['python']}",
                "yes" if r["agree"] else "NO",
                "ok" if ok else "missed",
            ]
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    parser.add_argument("--no-lab", action="store_true", help="skip JupyterLab")
    parser.add_argument("--no-classic", action="store_true", help="skip Classic Notebook 6")
    args = parser.parse_args()
    attnbook.setup(seed=0)
    if chromium.PATH is None:
        print(
            "Chromium is missing: nothing to measure (install it: scripts/install_system_deps.sh)"
        )
        return 1
    from playwright.sync_api import sync_playwright

    rows, outside = [], []
    with sync_playwright() as p:
        static = static_times(p, args.updates)
        for name in sorted(WIDGETS):
            median, p95 = summary(static[name])
            rows.append(
                ["static site", name, f"{median:.2f} / {p95:.2f}", "no kernel", "", "", "", "ok"]
            )
        if not args.no_lab:
            results, blocked = jupyterlab(p, args.updates)
            rows += front_end_rows("JupyterLab 4", results)
            outside += blocked
        if not args.no_classic:
            results, blocked = classic_notebook(p, args.updates)
            rows += front_end_rows("Notebook 6 + ipywidgets 7", results)
            outside += blocked
    headers = [
        "front end",
        "widget",
        "local frame ms (median / p95)",
        "Python frame ms (median / p95)",
        "changes timed",
        "drag: value changes / local / Python frames",
        "JS = Python",
        "target: picture <= 30 ms, a frame per move",
    ]
    body = table(headers, rows)
    body += (
        f"\n\nRequests that tried to leave 127.0.0.1: {len(outside)}."
        "\nBefore (the ipywidgets + matplotlib PNG kernel face, same machine): control change"
        " to new picture 125-209 ms median in JupyterLab, 145-213 ms in Classic Notebook 6 +"
        " ipywidgets 7; a 0.5 s drag of 15 moves drew 2-6 pictures."
    )
    report(
        "widget_latency",
        "Widget latency: control change to new picture (static site, JupyterLab, Notebook 6)",
        body,
        write=args.write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
