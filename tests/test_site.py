"""The built site, as a reader's browser sees it (headless Chromium, no network).

Run after the book is built (`make test` does both). Every request that leaves 127.0.0.1 is
blocked and recorded, so a page that needs a CDN fails here exactly as it would offline.
"""

from __future__ import annotations

import functools
import http.server
import json
import math
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("ATTNBOOK_REQUIRE_BROWSER") == "1"

pytestmark = pytest.mark.browser


def _pages() -> list[Path]:
    skip = {"genindex.html", "search.html", "index.html"}
    return sorted(
        p
        for p in SITE.rglob("*.html")
        if "_static" not in p.parts and "_sources" not in p.parts and p.name not in skip
    )


def _chapters() -> list[Path]:
    return [p for p in _pages() if p.parent.name == "notebooks"]


@pytest.fixture(scope="module")
def site():
    if not (SITE / "book" / "intro.html").exists() or (CHROMIUM is None):
        message = "needs a built site (make book) and Chromium (apt-get install chromium)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output readable
        pass


@pytest.fixture(scope="module")
def browser(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield chromium
        chromium.close()


class Visit:
    """One page load with everything that went wrong recorded."""

    def __init__(self, browser, url: str, width: int = 1200):
        self.errors: list[str] = []
        self.external: list[str] = []
        self.failed: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", self._console)
        self.page.on(
            "response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}")
        )
        self.page.goto(url, wait_until="load")
        # MathJax typesets asynchronously after load; wait for its promise where present.
        self.page.evaluate("""async () => {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
                await MathJax.startup.promise;
            }
        }""")

    def _route(self, route):
        host = urlparse(route.request.url).hostname
        if host in {"127.0.0.1", "localhost"} or route.request.url.startswith("data:"):
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def _console(self, message):
        if message.type == "error" and "THEBE_JS_URL" not in message.text:
            self.errors.append(f"console: {message.text}")

    def close(self):
        self.context.close()


def test_every_page_loads_offline_without_errors_and_typesets_math(site, browser):
    problems = []
    pages = _pages()
    assert len(pages) >= 15
    for path in pages:
        rel = path.relative_to(SITE).as_posix()
        visit = Visit(browser, urljoin(site, rel))
        page = visit.page
        problems += [f"{rel}: {e}" for e in visit.errors + visit.failed]
        problems += [f"{rel}: third-party request {u}" for u in visit.external]
        text = page.inner_text("body")
        math = page.locator("article .math").count()
        typeset = page.locator("article .math mjx-container").count()
        if typeset < math:
            problems.append(f"{rel}: {math - typeset} of {math} math elements not typeset")
        wide = page.evaluate("""() => {
            const width = document.querySelector('article').getBoundingClientRect().width;
            return [...document.querySelectorAll('article div.math mjx-container')]
                .filter(m => m.scrollWidth > width + 2).map(m => m.textContent.slice(0, 50));
        }""")
        problems += [f"{rel}: display math wider than the page at desktop width: {w}" for w in wide]
        raw = re.findall(r"\\\(|\\\[|\$\$", text)
        if raw:
            problems.append(f"{rel}: raw TeX left in the text: {raw[:3]}")
        broken = page.evaluate("""() => [...document.querySelectorAll('article img')]
            .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src)""")
        problems += [f"{rel}: image did not load {src}" for src in broken]
        no_alt = page.evaluate("""() => [...document.querySelectorAll('article img')]
            .filter(img => !img.alt || !img.alt.trim()).map(img => img.src)""")
        problems += [f"{rel}: image without alt text {src}" for src in no_alt]
        empty = page.evaluate("""() => [...document.querySelectorAll(
            '.jupyter-widgets, .widget-subarea, .attnbook-widget')]
            .filter(el => el.getBoundingClientRect().height < 20).length""")
        if empty:
            problems.append(f"{rel}: {empty} empty widget box(es)")
        visit.close()
    assert not problems, "\n".join(problems)


def test_every_chapter_has_launch_and_download_buttons(site):
    for path in _chapters():
        html = path.read_text()
        notebook = f"notebooks/{path.stem}.ipynb"
        assert re.search(
            r'href="https://colab\.research\.google\.com/github/[^"]+/blob/main/'
            + re.escape(notebook)
            + '"',
            html,
        ), f"{path.name}: no Colab button"
        assert "mybinder.org" in html, f"{path.name}: no Binder button"
        assert f"_sources/notebooks/{path.stem}" in html, f"{path.name}: no source download"


def _anchors(path: Path, cache={}) -> set[str]:  # noqa: B006 - a deliberate per-run memo
    if path not in cache:
        cache[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text()))
    return cache[path]


def test_every_internal_link_and_anchor_resolves():
    problems = []
    for path in [*_pages(), SITE / "index.html"]:
        for href in re.findall(r'<a [^>]*href="([^"]+)"', path.read_text()):
            parsed = urlparse(href)
            if parsed.scheme or href.startswith(("mailto:", "//", "javascript:")):
                continue
            target = path if not parsed.path else (path.parent / unquote(parsed.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{path.name}: broken link {href}")
            elif (
                parsed.fragment
                and target.suffix == ".html"
                and unquote(parsed.fragment) not in _anchors(target)
            ):
                problems.append(f"{path.name}: missing anchor {href}")
    assert not problems, "\n".join(problems[:40])


def _close(a, b) -> bool:
    if isinstance(b, dict):
        return isinstance(a, dict) and set(a) == set(b) and all(_close(a[k], b[k]) for k in b)
    if isinstance(b, list | tuple):
        return isinstance(a, list) and len(a) == len(b) and all(map(_close, a, b))
    if isinstance(b, bool) or b is None or isinstance(b, str):
        return a == b
    if isinstance(b, float) and math.isinf(b):
        return a is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_static_widgets_respond_and_agree_with_python(site, browser):
    from attnbook.widgets import spec

    pages = [p for p in _chapters() if "attnbook-widget" in p.read_text()]
    seen = set()
    for path in pages:
        rel = path.relative_to(SITE).as_posix()
        visit = Visit(browser, urljoin(site, rel))
        for root in visit.page.locator(".attnbook-widget").all():
            name = root.get_attribute("data-widget")
            seen.add(name)
            widget_spec = spec(name)
            assert "Live on this page" in root.inner_text(), f"{rel}: {name} lacks its live note"
            previous = json.loads(root.get_attribute("data-state"))
            moved = 0
            # Move every control once (slider to its far end, toggle, last option) and check
            # the picture's numbers against Python after each move.
            for control in widget_spec.controls:
                element = root.locator(f'[name="{control.name}"]')
                if control.kind == "range":
                    target = control.min if control.value == control.max else control.max
                    element.evaluate(
                        "(el, v) => { el.value = v; "
                        "el.dispatchEvent(new Event('input', {bubbles: true})); }",
                        target,
                    )
                elif control.kind == "checkbox":
                    element.click()
                else:
                    element.select_option(
                        str(
                            control.options[-1]
                            if control.value != control.options[-1]
                            else control.options[0]
                        )
                    )
                params = _form_params(root, widget_spec)
                error = root.get_attribute("data-error")
                try:
                    expected = widget_spec.compute(**params)
                except (TypeError, ValueError):
                    assert error, f"{rel}: {name}{params} should be rejected in the page"
                    continue
                assert not error, f"{rel}: {name}{params} rejected in the page: {error}"
                state = json.loads(root.get_attribute("data-state"))
                assert _close(state, expected), f"{rel}: {name}{params} differs from Python"
                moved += state != previous
                previous = state
            assert moved, f"{rel}: moving {name}'s controls never changed the picture"
            assert root.locator(".attnbook-view svg").count() == 1
        assert not visit.errors, visit.errors
        visit.close()
    from attnbook.widgets import WIDGETS

    missing = set(WIDGETS) - seen
    assert not missing, f"widgets never shown on the site: {sorted(missing)}"


def _form_params(root, widget_spec) -> dict:
    params = {}
    for control in widget_spec.controls:
        element = root.locator(f'[name="{control.name}"]')
        if control.kind == "checkbox":
            params[control.name] = element.is_checked()
        elif control.kind == "select":
            raw = element.input_value()
            params[control.name] = type(control.value)(raw)
        else:
            raw = element.input_value()
            params[control.name] = int(raw) if control.integer else float(raw)
    return params


def test_widget_weight_per_page_is_small():
    for path in _chapters():
        html = path.read_text()
        blocks = re.findall(r'<div class="attnbook-widget".*?</script>', html, re.S)
        weight = sum(len(b.encode()) for b in blocks)
        assert weight < 1_000_000, f"{path.name}: widgets add {weight} bytes"


def test_screenshots_for_review(site, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for rel, name, width in [
        ("book/intro.html", "landing.png", 1200),
        ("notebooks/01_deriving_self_attention.html", "chapter01.png", 1200),
        ("notebooks/02_why_sqrt_dk.html", "chapter02-phone.png", 400),
    ]:
        visit = Visit(browser, urljoin(site, rel), width=width)
        visit.page.screenshot(path=str(SHOTS / name), full_page=False)
        visit.close()
        assert (SHOTS / name).stat().st_size > 10_000
