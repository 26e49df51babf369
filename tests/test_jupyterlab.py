"""A reader in JupyterLab, started as `make lab` starts it, driven in headless Chromium.

On a copy of notebooks/ (saving must not touch the repository): the file browser lists each
chapter once, with no news pop-up; a chapter opens with its widget drawn from the saved state;
open-then-save changes no byte; after Run All, moving a widget control redraws the picture and
Python's answer agrees with the JavaScript prediction; after save, kernel shut-down and reopen
the widget is drawn again (no "Error displaying widget"), the outputs are intact and the MyST
source is unchanged; saved once more without re-running (the reopened tab is marked modified)
and reopened again, the widget is still drawn and the file names no widget model it lacks.
Every request stays on 127.0.0.1. Screenshots go to _build/screenshots/.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import chromium  # noqa: E402  (scripts/chromium.py: how every browser check launches it)
import lab as book_lab  # noqa: E402

SHOTS = ROOT / "_build" / "screenshots"
CHAPTER = "02_why_sqrt_dk"
WIDGET_ERROR = "Error displaying widget"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
LAB_LOG: list[Path] = []  # the server's log, quoted when a check fails

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if chromium.PATH is None:
        pytest.fail("needs Chromium (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = book_lab.environment()
    env |= {  # a first launch: nothing from the developer's own Jupyter state
        "JUPYTER_DATA_DIR": str(tmp / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "run"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
    }
    book_lab.trust(env, root)
    port = _free_port()
    LAB_LOG[:] = [tmp / "lab.log"]
    log = LAB_LOG[0].open("w")
    args = ["--port", str(port), "--no-browser", "--ServerApp.token=", "--ServerApp.password="]
    process = subprocess.Popen(
        book_lab.command(*args, root=root), env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=1)
            break
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(tmp / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    else:
        pytest.fail("JupyterLab did not start within 60 s")
    yield url, root
    process.terminate()  # only the server we started; it shuts its kernels down
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def page(lab):  # JupyterLab must be up first
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium.launch(p)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        outside: list[str] = []

        def route(r):
            if r.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
                return r.continue_()
            outside.append(r.request.url)
            return r.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.outside = outside
        page.console = []  # the browser's console, for a failure's message
        page.on(
            "console",
            lambda m: m.type != "debug" and page.console.append(f"{m.type}: {m.text}"[:300]),
        )
        yield page
        browser.close()


def _open(page, url: str, *, reload_if_stuck: bool = False) -> None:
    """Open the chapter; return once its widget is drawn.

    ``reload_if_stuck``: jupyterlab_widgets 3.0 loads a notebook's saved widget state only
    after the kernel answered a comm-info request, and swallows a failure there, leaving
    "Loading widget..." for good (a reader re-runs the cell or reloads); on a loaded machine
    the same race can instead surface as "widget model not found" from the manager's
    renderModel (seen once in CI beside the phone and PDF tests; the same test passed alone
    and on a rerun of the lane). After a reopen either symptom earns one reload, reported as a
    warning with the diagnosis; anything else, or a second failure, fails the test.
    """
    # Generous timeouts: `make test` runs this beside other browser tests on two cores.
    page.goto(f"{url}/lab/tree/{CHAPTER}.ipynb")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    try:
        page.wait_for_selector(
            ".jp-NotebookPanel .attnbook-widget svg", state="attached", timeout=120_000
        )
    except PlaywrightTimeout:
        _shot(page, "no-widget")  # what the reader saw instead
        with urllib.request.urlopen(f"{url}/api/sessions", timeout=5) as reply:
            sessions = reply.read().decode()[:600]
        console = "\n".join(page.console[-25:])
        text = page.inner_text(".jp-NotebookPanel")
        log = LAB_LOG[0].read_text()[-3000:] if LAB_LOG else ""
        diagnosis = (
            f"no widget drawn within 120 s\nsessions: {sessions}\nconsole:\n{console}\n"
            f"notebook panel (end):\n{text[-800:]}\nLab log (end):\n{log}"
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "lab-no-widget.txt").write_text(diagnosis)
        race = "Loading widget..." in text or "widget model not found" in console
        if reload_if_stuck and race:
            stuck = f"saved widgets not restored (state race); reloaded once\n{diagnosis}"
            warnings.warn(stuck, stacklevel=2)
            return _open(page, url)
        pytest.fail(diagnosis)


def _command(page, menu: str, item: str) -> None:
    """Click a main-menu item (exact label), as a reader would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    entry = page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).first
    entry.wait_for(state="visible")
    page.wait_for_timeout(200)  # the menu attaches its handlers after it is shown
    entry.click()


def _save(page, path: Path) -> None:
    """Save through the File menu; return once the file on disk is complete and settled."""
    before = path.stat().st_mtime_ns
    _command(page, "File", "Save Notebook")
    settled = None
    for _ in range(300):
        page.wait_for_timeout(100)  # not time.sleep: Playwright must keep routing requests
        mtime = path.stat().st_mtime_ns
        if mtime == before:
            continue
        try:
            json.loads(path.read_text())
        except ValueError:  # caught mid-write
            continue
        if settled == mtime:  # unchanged over one more poll: the write is done
            return
        settled = mtime
    pytest.fail(f"{path.name} was not saved")


def _kernels_and_sessions(url: str) -> list:
    """The server's kernels and sessions (a session can outlive its kernel by a moment)."""
    running = []
    for api in ("kernels", "sessions"):
        with urllib.request.urlopen(f"{url}/api/{api}", timeout=5) as reply:
            running += json.load(reply)
    return running


def _shut_down_kernel(page, url: str) -> None:
    """Shut the kernel down from the Kernel menu and return once the server has no kernel.

    Reopening while the server is still stopping it (the likely cause of one CI failure,
    which reopened 4 s after the command on a loaded machine) lets Lab attach to the dying
    kernel. jupyterlab_widgets 3.0 loads the notebook's
    saved widget state only after the kernel answered its comm-info request, and swallows
    that failure, so the output stays at "Loading widget..." until the cell is run again.
    That is not the case this test is about: a reader reopening a notebook whose kernel is gone.
    """
    _command(page, "Kernel", "Shut Down Kernel")
    accept = page.locator(".jp-Dialog button.jp-mod-accept")
    for _ in range(600):
        if accept.count():  # Lab may ask to confirm; the dialog can come late on a busy machine
            with contextlib.suppress(PlaywrightTimeout):
                accept.first.click(timeout=2000)
        if not _kernels_and_sessions(url):
            return
        page.wait_for_timeout(200)  # not time.sleep: Playwright must keep routing requests
    left = _kernels_and_sessions(url)
    pytest.fail(f"the kernel was still running 2 min after Shut Down Kernel: {left}")


def _outline(nb: dict) -> list:
    """Per code cell: its printed text and the kinds of its other outputs (Lab may join the
    stream messages that nbclient stored apart; widget views exist only after a run)."""
    cells = []
    for cell in nb["cells"]:
        outputs = cell.get("outputs", [])
        text = "".join("".join(o["text"]) for o in outputs if o["output_type"] == "stream")
        kinds = sorted(
            {k for o in outputs for k in o.get("data", {}) if not k.endswith("widget-view+json")}
        )
        cells.append((cell["cell_type"], len(text) > 0, kinds))
    return cells


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"lab-{name}.png"))


def test_a_reader_opens_runs_moves_saves_and_reopens_a_chapter(lab, page):
    url, root = lab
    ipynb, md = root / f"{CHAPTER}.ipynb", root / f"{CHAPTER}.md"
    original_ipynb, original_md = ipynb.read_bytes(), md.read_bytes()

    # First launch: each chapter listed once, no news pop-up, the widget drawn from saved state.
    _open(page, url)
    listed = page.locator(".jp-DirListing-itemText").all_inner_texts()
    assert f"{CHAPTER}.ipynb" in listed and f"{CHAPTER}.md" not in listed, listed
    assert "Jupyter news" not in page.inner_text("body")
    assert WIDGET_ERROR not in page.inner_text(".jp-NotebookPanel")
    # The stored output is the static face: its note says how to put Python behind it, not
    # that "the full widget runs in JupyterLab" (the reader is in it).
    notes = _notes(page)
    told = [n for n in notes if "Run this cell" not in n or "runs in JupyterLab" in n]
    assert notes and not told, notes
    _shot(page, "first-open")

    # Open, then save without running: no byte changes.
    _save(page, ipynb)
    assert ipynb.read_bytes() == original_ipynb, "opening and saving rewrote the notebook"
    assert md.read_bytes() == original_md

    # Run all, then move a control: a new picture, and Python's state agrees with the JS.
    _command(page, "Run", "Run All Cells")
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => !p.textContent.includes('*'))
                && document.querySelector('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')
                       .textContent.includes('1');
        }""",
        timeout=180_000,
    )
    widget = page.locator(".jp-NotebookPanel .attnbook-widget").first
    widget.scroll_into_view_if_needed()
    page.wait_for_function(
        "el => el.dataset.source === 'python'", arg=widget.element_handle(), timeout=60_000
    )
    before_svg = widget.locator("svg").first.inner_html()
    before_seq = int(widget.get_attribute("data-python-seq") or 0)
    slider = widget.locator("input[type=range]").first
    slider.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "([el, seq]) => el.dataset.source === 'python' && +el.dataset.pythonSeq > seq",
        arg=[widget.element_handle(), before_seq],
        timeout=60_000,
    )
    assert widget.get_attribute("data-agree") == "true", widget.get_attribute("data-max-diff")
    note = widget.locator(".attnbook-live-note").inner_text()
    assert "Python recomputes" in note, note
    assert widget.locator("svg").first.inner_html() != before_svg, "the picture did not change"
    assert WIDGET_ERROR not in page.inner_text(".jp-NotebookPanel")
    _shot(page, "after-run")

    # Save, shut the kernel down, reopen: drawn from the saved state, outputs intact.
    _save(page, ipynb)
    saved = json.loads(ipynb.read_text())
    assert saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    stored = json.loads(original_ipynb)
    assert _outline(saved) == _outline(stored), "Run All in Lab gave other outputs than make sync"
    _shut_down_kernel(page, url)
    _open(page, url, reload_if_stuck=True)
    page.wait_for_timeout(1500)
    assert WIDGET_ERROR not in page.inner_text(".jp-NotebookPanel")
    assert json.loads(ipynb.read_text())["cells"] == saved["cells"], "reopening changed outputs"
    assert page.locator(".jp-NotebookPanel .attnbook-widget svg").count() >= 1
    assert md.read_bytes() == original_md, "saving in JupyterLab rewrote the MyST source"
    # Drawn from the saved state with the kernel that made it gone: no claim that Python
    # recomputes (issue 27), and the controls still redraw in JavaScript.
    notes = _notes(page)
    assert notes and not any("Python recomputes" in n for n in notes), notes
    assert any("no Python kernel" in n for n in notes), notes
    _shot(page, "reopened")

    # The reopened tab may be marked modified (the widget manager marks it when it restores
    # the saved models); a reader saves it without re-running anything, and reopens it once
    # more: the widget is still drawn, never "model not found".
    _save(page, ipynb)
    resaved = json.loads(ipynb.read_text())
    assert not _dangling_views(resaved), f"views without models: {_dangling_views(resaved)}"
    assert _outline(resaved) == _outline(stored), "saving again lost outputs"
    _shut_down_kernel(page, url)
    _open(page, url, reload_if_stuck=True)
    page.wait_for_timeout(1500)
    assert WIDGET_ERROR not in page.inner_text(".jp-NotebookPanel")
    assert page.locator(".jp-NotebookPanel .attnbook-widget svg").count() >= 1
    _shot(page, "reopened-twice")
    assert not page.outside, f"requests left 127.0.0.1: {page.outside[:5]}"


def _notes(page) -> list[str]:
    """The note of every widget drawn in the open chapter, once each has mounted."""
    page.wait_for_timeout(1000)  # a kernel face's ping is answered in a round trip
    return page.evaluate(
        """() => [...document.querySelectorAll(
            '.jp-NotebookPanel .attnbook-widget .attnbook-live-note')].map((n) => n.textContent)"""
    )


def _dangling_views(nb: dict) -> list[str]:
    """Widget views in the outputs whose model the notebook's saved widget state lacks."""
    state = nb["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [
        output["data"][WIDGET_VIEW]["model_id"]
        for cell in nb["cells"]
        for output in cell.get("outputs", [])
        if WIDGET_VIEW in output.get("data", {})
        and output["data"][WIDGET_VIEW]["model_id"] not in state
    ]
