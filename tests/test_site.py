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
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
sys.path.insert(0, str(ROOT / "scripts"))
import chromium  # noqa: E402  (scripts/chromium.py: how every browser check launches it)

CHROMIUM = chromium.PATH
REQUIRED = os.environ.get("ATTNBOOK_REQUIRE_BROWSER") == "1"

pytestmark = pytest.mark.browser

PHONE, TABLET, DESKTOP = 390, 900, 1280  # widths a reader's browser has (CSS px)
PAGE_BUDGET = 2_000_000  # bytes a chapter page may load, uncompressed
SCROLL_SHARE = 0.05  # share of code blocks (and of outputs) that may scroll sideways
MIN_WIDGET_TEXT_PX = 10


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
        browser = chromium.launch(p)
        yield browser
        browser.close()


class Visit:
    """One page load with everything that went wrong recorded."""

    def __init__(
        self, browser, url: str, width: int = DESKTOP, height: int = 900, mode=None, scheme=None
    ):
        self.errors: list[str] = []
        self.external: list[str] = []
        self.failed: list[str] = []
        self.responses = []
        self.context = browser.new_context(  # scheme: the system's (prefers-color-scheme)
            viewport={"width": width, "height": height}, color_scheme=scheme or "light"
        )
        if mode:  # the theme reads the reader's choice of light/dark from localStorage
            self.context.add_init_script(f"localStorage.setItem('mode', '{mode}')")
        self.page = self.context.new_page()
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", self._console)
        self.page.on("response", self._response)
        self.inflight = 0  # requests started and not yet finished or failed
        self.page.on("request", lambda r: self._count(1))
        self.page.on("requestfinished", lambda r: self._count(-1))
        self.page.on("requestfailed", lambda r: self._count(-1))
        self.page.goto(url, wait_until="load")
        # MathJax typesets asynchronously after load (then fetches its fonts); wait for it.
        self.page.evaluate("""async () => {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
                await MathJax.startup.promise;
            }
            await document.fonts.ready;
        }""")
        self._wait_for_quiet_network()

    def _count(self, change: int) -> None:
        self.inflight += change

    def _wait_for_quiet_network(self, quiet_ms: int = 100, limit_s: float = 30) -> None:
        """Return once no request has been in flight for ``quiet_ms`` (Playwright's
        "networkidle" is the same test with a fixed 500 ms, half a second on every page)."""
        deadline, quiet = time.monotonic() + limit_s, 0
        while quiet < quiet_ms:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.page.url}: {self.inflight} requests still open")
            self.page.wait_for_timeout(20)  # lets Playwright deliver the request events
            quiet = quiet + 20 if self.inflight == 0 else 0

    def _response(self, response):
        self.responses.append(response)
        if response.status >= 400:
            self.failed.append(f"{response.status} {response.url}")

    def weight(self) -> dict[str, int]:
        """Bytes of every response the page loaded (uncompressed bodies), by URL."""
        sizes = {}
        for response in self.responses:
            try:
                sizes[response.url] = len(response.body())
            except Exception:  # a redirect or an aborted request has no body
                sizes[response.url] = 0
        return sizes

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


# Code blocks (cell inputs and code in the prose) and text outputs that scroll sideways.
OVERFLOW_JS = """() => {
    const pres = [...document.querySelectorAll('article pre')];
    const scrolls = e => e.scrollWidth > e.clientWidth + 1;
    const outputs = pres.filter(e => e.closest('.cell_output'));
    const code = pres.filter(e => !e.closest('.cell_output'));
    return {code: code.length, codeScroll: code.filter(scrolls).length,
            outputs: outputs.length, outputScroll: outputs.filter(scrolls).length};
}"""

# Icons: the theme's CSS draws them with the Font Awesome web fonts (its 1.49 MB icon script
# is replaced by a stub); every visible icon must have its font loaded and a visible width.
ICONS_JS = """() => {
    const icons = [...document.querySelectorAll('i[class*="fa-"]')]
        .filter(i => i.offsetParent !== null);
    const loaded = [...document.fonts].filter(f => f.family.includes('Font Awesome')
        && f.status === 'loaded').map(f => f.family);
    return {icons: icons.length, loaded,
            blank: icons.filter(i => i.getBoundingClientRect().width < 4).map(i => i.className)};
}"""


# Every figure drawn on the page: its drawn size (CSS px) and the file it shows.
IMAGES_JS = """() => [...document.querySelectorAll('article img')]
    .filter(img => img.getBoundingClientRect().width > 0 && img.src.includes('/_images/'))
    .map(img => { const r = img.getBoundingClientRect();
                  return {file: decodeURIComponent(img.src.split('/').pop()),
                          width: r.width, height: r.height}; })"""
ASPECT_TOLERANCE = 0.02  # relative; a squashed figure is off by tens of percent


def _png_size(name: str, cache={}) -> tuple[int, int]:  # noqa: B006 - a per-run memo
    if name not in cache:
        from PIL import Image

        with Image.open(SITE / "_images" / name) as image:
            cache[name] = image.size
    return cache[name]


def _squashed(page, rel: str, width: int) -> tuple[int, list[str]]:
    """Figures on ``page`` drawn in other proportions than their PNG's, at ``width`` px."""
    problems, drawn = [], page.evaluate(IMAGES_JS)
    for image in drawn:
        png_w, png_h = _png_size(image["file"])
        aspect, png = image["width"] / image["height"], png_w / png_h
        if abs(aspect / png - 1) > ASPECT_TOLERANCE:
            problems.append(
                f"{rel} at {width} px: {image['file'][:12]}... drawn {image['width']:.0f} x "
                f"{image['height']:.0f} (aspect {aspect:.2f}) from a {png_w} x {png_h} PNG "
                f"(aspect {png:.2f})"
            )
    return len(drawn), problems


def test_every_page_loads_offline_without_errors_and_typesets_math(site, browser):
    """Desktop width (1280 px): no errors or third-party requests, math typeset, images with
    alt text, icons drawn, each chapter within the page-weight budget, code that fits."""
    problems = []
    pages = _pages()
    assert len(pages) >= 15
    weights, overflow = {}, {"code": 0, "codeScroll": 0, "outputs": 0, "outputScroll": 0}
    figures = 0
    for path in pages:
        rel = path.relative_to(SITE).as_posix()
        visit = Visit(browser, urljoin(site, rel))
        page = visit.page
        drawn, squashed = _squashed(page, rel, DESKTOP)
        figures += drawn
        problems += squashed
        icons = page.evaluate(ICONS_JS)
        if not icons["icons"] or not icons["loaded"] or icons["blank"]:
            problems.append(f"{rel}: icons not drawn: {icons}")
        if path.parent.name == "notebooks":
            sizes = visit.weight()
            weights[rel] = sum(sizes.values())
            if weights[rel] > PAGE_BUDGET:
                largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
                problems.append(
                    f"{rel}: loads {weights[rel]:,} bytes, over {PAGE_BUDGET:,}; largest: "
                    + ", ".join(f"{urlparse(u).path} {n:,}" for u, n in largest)
                )
            for key, value in page.evaluate(OVERFLOW_JS).items():
                overflow[key] += value
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
    code_share = overflow["codeScroll"] / overflow["code"]
    output_share = overflow["outputScroll"] / overflow["outputs"]
    print(
        f"\nat {DESKTOP} px: {overflow['codeScroll']}/{overflow['code']} code blocks and "
        f"{overflow['outputScroll']}/{overflow['outputs']} outputs scroll sideways; chapter "
        f"pages load {min(weights.values()):,}-{max(weights.values()):,} bytes"
    )
    if code_share > SCROLL_SHARE:
        problems.append(f"{code_share:.1%} of code blocks scroll sideways at {DESKTOP} px")
    if overflow["outputScroll"]:  # a printed line longer than the column wraps (attnbook.css)
        problems.append(f"{output_share:.1%} of outputs scroll sideways at {DESKTOP} px")
    assert figures > 10, f"only {figures} figures measured"
    assert not problems, "\n".join(problems)


def _setup_cell_install(notebook: Path) -> tuple[str, str]:
    """(repository, ref) that the notebook's first code cell pip-installs attnbook from."""
    cells = json.loads(notebook.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "code")
    source = "".join(first["source"])
    match = re.search(r"git\+https://github\.com/([^@\s\"']+)@([^\s\"']+)", source)
    assert match, f"{notebook.name}: the set-up cell installs attnbook from no git ref"
    return match[1], match[2]


def test_launch_buttons_open_the_release_the_setup_cell_installs(site):
    """Colab and Binder open the chapter's notebook at the ref its set-up cell installs
    attnbook from (the release tag), so notebook and package cannot disagree."""
    refs = set()
    for path in _chapters():
        html = path.read_text()
        notebook = f"notebooks/{path.stem}.ipynb"
        repo, ref = _setup_cell_install(ROOT / notebook)
        refs.add(ref)
        colab = re.findall(
            r'href="https://colab\.research\.google\.com/github/([^/"]+/[^/"]+)/blob/'
            r'([^"]+?)/' + re.escape(notebook) + '"',
            html,
        )
        binder = re.findall(
            r'href="https://mybinder\.org/v2/gh/([^/"]+/[^/"]+)/([^"?]+)\?urlpath=lab/tree/'
            + re.escape(notebook)
            + '"',
            html,
        )
        assert colab == [(repo, ref)], f"{path.name}: Colab opens {colab}, installs {repo}@{ref}"
        assert binder == [(repo, ref)], f"{path.name}: Binder opens {binder}, installs {ref}"
    assert len(refs) == 1 and not {"main", "master"} & refs, f"set-up cells install {refs}"


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


CHAPTER = "notebooks/02_why_sqrt_dk.html"
TARGET = "04_masking.html"  # a chapter the drawer's table of contents links to


def _tap_visible(page, selector: str):
    """Click the first *visible* match: the theme also renders hidden copies of its toggles."""
    button = page.locator(f"{selector}:visible").first
    button.click()


@pytest.mark.parametrize("width", [PHONE, TABLET])
def test_menu_buttons_open_drawers_that_navigate(site, browser, width):
    """The ☰ button opens the table of contents, and a tapped chapter link lands on it; the
    page-contents button opens the page's contents, and a tapped section link goes there."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    visit = Visit(browser, urljoin(site, CHAPTER), width=width, height=844)
    page = visit.page
    _tap_visible(page, ".primary-toggle")
    assert page.evaluate("document.getElementById('pst-primary-sidebar-modal').open")
    page.screenshot(path=str(SHOTS / f"drawer-{width}.png"))
    link = page.locator(f'#pst-primary-sidebar-modal a[href$="{TARGET}"]:visible').first
    link.click()
    page.wait_for_url(f"**/{TARGET}")

    _tap_visible(page, ".secondary-toggle")
    assert page.evaluate("document.getElementById('pst-secondary-sidebar-modal').open")
    section = page.locator("#pst-secondary-sidebar-modal a[href^='#']:visible").nth(1)
    anchor = section.get_attribute("href")
    section.click()
    page.wait_for_url(f"**/{TARGET}{anchor}")
    assert not visit.errors, visit.errors
    visit.close()


def test_keys_move_between_chapters_and_the_footer_says_which(site, browser):
    """Keyboard navigation between chapters (issue 27): "]" opens the next chapter and "["
    the previous one, as the footer's links say; typing them into a field (the search box, a
    widget's value box) moves nowhere, and the arrow keys stay the page's (they scroll wide
    equations and move sliders)."""
    visit = Visit(browser, urljoin(site, CHAPTER))
    page = visit.page
    labels = page.evaluate(
        """() => [...document.querySelectorAll('.prev-next-area a')].map(
            (a) => [a.className, a.getAttribute('aria-keyshortcuts'), a.innerText])"""
    )
    keys = {cls: (key, text) for cls, key, text in labels}
    assert keys["left-prev"][0] == "[" and "[" in keys["left-prev"][1], labels
    assert keys["right-next"][0] == "]" and "]" in keys["right-next"][1], labels
    next_url = page.evaluate("document.querySelector('.prev-next-area a.right-next').href")
    box = page.locator("input.attnbook-typed").first
    if box.count():
        box.focus()
        page.keyboard.press("]")
        page.wait_for_timeout(300)
        assert page.url.endswith(CHAPTER), "a key typed into a field changed the page"
        page.evaluate("document.activeElement.blur()")
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(300)
    assert page.url.endswith(CHAPTER), "the arrow key left the page"
    page.keyboard.press("]")
    page.wait_for_url(next_url)
    page.wait_for_load_state("load")
    page.keyboard.press("[")
    page.wait_for_url(f"**/{CHAPTER}")
    assert not visit.errors, visit.errors
    visit.close()


def test_menu_button_collapses_the_sidebar_on_desktop(site, browser):
    visit = Visit(browser, urljoin(site, CHAPTER), width=DESKTOP)
    page = visit.page
    hidden = (
        "document.getElementById('pst-primary-sidebar').classList.contains('pst-sidebar-hidden')"
    )
    assert not page.evaluate(hidden)
    _tap_visible(page, ".primary-toggle")
    assert page.evaluate(hidden)
    _tap_visible(page, ".primary-toggle")
    assert not page.evaluate(hidden)
    # Page contents: a drawer at every width, so the code column keeps its 100+ characters.
    _tap_visible(page, ".secondary-toggle")
    assert page.evaluate("document.getElementById('pst-secondary-sidebar-modal').open")
    assert page.locator("#pst-secondary-sidebar-modal a[href^='#']:visible").count() >= 3
    assert not visit.errors, visit.errors
    visit.close()


PHONE_JS = """() => {
    const view = document.documentElement.clientWidth;
    const wide = [...document.querySelectorAll('article *')].filter(e => {
        const r = e.getBoundingClientRect();
        return r.right > view + 1 && !e.closest(
            'pre, div.math, table, mjx-container, .attnbook-widget, .highlight, .cell_output');
    }).map(e => e.tagName + ' ' + (e.textContent || '').trim().slice(0, 40));
    // Display math that scrolls must show a cue on the element that scrolls.
    const maths = [...document.querySelectorAll('article div.math')]
        .filter(m => m.scrollWidth > m.clientWidth + 1);
    const noCue = maths.filter(m => !getComputedStyle(m).backgroundImage.includes('radial-gradient')
        || !['auto', 'scroll'].includes(getComputedStyle(m).overflowX));
    // Every display equation opens with its start in view, and scrolling reaches its end.
    const cut = [...document.querySelectorAll('article div.math mjx-container[display="true"]')]
        .filter(c => {
            const box = c.closest('div.math'), drawn = c.querySelector('mjx-math') || c;
            box.scrollLeft = 0;
            const start = drawn.getBoundingClientRect().left - box.getBoundingClientRect().left;
            box.scrollLeft = box.scrollWidth;
            const end = box.getBoundingClientRect().right - drawn.getBoundingClientRect().right;
            box.scrollLeft = 0;
            return start < -1 || end < -1;
        }).map(c => (c.closest('div.math').textContent || '').trim().slice(0, 40));
    // Text in widget drawings, in CSS px as rendered (font size times the SVG's scale).
    const sizes = [...document.querySelectorAll('.attnbook-widget svg text')]
        .filter(t => t.textContent.trim() && t.getBBox().width > 0).map(t => {
            const m = t.getScreenCTM();
            return parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
        });
    return {pageWidth: document.documentElement.scrollWidth, view, wide: wide.slice(0, 3),
            scrollingMath: maths.length, noCue: noCue.length, cut,
            widgetText: sizes.length ? Math.min(...sizes) : null, widgetTexts: sizes.length};
}"""


NARROW = 600  # a column narrower than most figures' CSS width (651 px for Fig. 2.1)


def test_pages_fit_a_phone(site, browser):
    """At 390 px: no page is wider than the screen, display math that scrolls shows a cue,
    and text inside every widget drawing renders at 10 px or more. At 390 and 600 px every
    figure keeps its PNG's proportions."""
    problems, smallest, scrolling, figures = [], {}, 0, 0
    for path in _pages():
        rel = path.relative_to(SITE).as_posix()
        visit = Visit(browser, urljoin(site, rel), width=PHONE, height=844)
        for width in (NARROW, PHONE):  # a resize lays the page out again; no reload
            visit.page.set_viewport_size({"width": width, "height": 844})
            drawn, squashed = _squashed(visit.page, rel, width)
            figures += drawn
            problems += squashed
        result = visit.page.evaluate(PHONE_JS)
        if result["pageWidth"] > result["view"] + 1:
            problems.append(f"{rel}: page is {result['pageWidth']} px wide: {result['wide']}")
        scrolling += result["scrollingMath"]
        if result["noCue"]:
            problems.append(f"{rel}: {result['noCue']} scrolling display equation(s) without a cue")
        problems += [f"{rel}: display equation cut off at {PHONE} px: {c}" for c in result["cut"]]
        if result["widgetText"] is not None:
            smallest[rel] = round(result["widgetText"], 1)
            if result["widgetText"] < MIN_WIDGET_TEXT_PX:
                problems.append(
                    f"{rel}: widget text renders at {result['widgetText']:.1f} px on a phone"
                )
        if path.name == "how_to_use.html":
            visit.page.screenshot(path=str(SHOTS / "how-to-use-390.png"), full_page=False)
        visit.close()
    print(
        f"\nat {PHONE} px: {scrolling} display equations scroll (with a cue); "
        f"smallest widget text (px): {smallest}"
    )
    assert smallest, "no widget drawing found on any page"
    assert figures > 20, f"only {figures} figures measured at {NARROW} and {PHONE} px"
    assert not problems, "\n".join(problems)


def test_print_hides_screen_only_labels(site, browser):
    """What the PDF is printed from: with print media, no folded cell's "Hide code cell
    source" toggle and no widget note about its controls is drawn."""
    visit = Visit(browser, urljoin(site, "notebooks/02_why_sqrt_dk.html"))
    page = visit.page
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    count = """() => [...document.querySelectorAll(
        'details.hide > summary, .attnbook-widget .attnbook-live-note')]
        .filter(e => e.getClientRects().length > 0).length"""
    on_screen = page.evaluate(count)
    page.emulate_media(media="print")
    printed = page.evaluate(count)
    visit.close()
    assert on_screen >= 2, f"nothing to check: {on_screen} toggles and notes on the page"
    assert printed == 0, f"{printed} of {on_screen} screen-only labels drawn in print"


def test_screenshots_for_review(site, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = [
        ("book/intro.html", "landing-1280.png", DESKTOP, None),
        ("notebooks/01_deriving_self_attention.html", "chapter01-1280.png", DESKTOP, None),
        ("notebooks/02_why_sqrt_dk.html", "chapter02-900.png", TABLET, None),
        ("notebooks/02_why_sqrt_dk.html", "chapter02-390.png", PHONE, None),
        ("notebooks/02_why_sqrt_dk.html", "chapter02-390-dark.png", PHONE, "dark"),
        ("notebooks/01_deriving_self_attention.html", "chapter01-1280-dark.png", DESKTOP, "dark"),
    ]
    for rel, name, width, mode in shots:
        visit = Visit(browser, urljoin(site, rel), width=width, height=844, mode=mode)
        if mode == "dark":  # no light-grey slab behind outputs and widgets in dark mode
            grey = visit.page.evaluate("""() => [...document.querySelectorAll(
                'div.cell_output .text_html, div.cell_output img')]
                .map(e => getComputedStyle(e)).filter(cs => cs.paddingTop !== '0px'
                    || (cs.backgroundColor !== 'rgba(0, 0, 0, 0)'
                        && cs.backgroundColor !== 'rgb(255, 255, 255)')).length""")
            assert not grey, f"{rel}: {grey} output(s) on a grey panel in dark mode"
            widget = visit.page.locator(".attnbook-widget").first
            if widget.count():
                widget.scroll_into_view_if_needed()
        visit.page.screenshot(path=str(SHOTS / name), full_page=False)
        visit.close()
        assert (SHOTS / name).stat().st_size > 10_000


# Each figure as drawn: the file its <picture> chose, whether it loaded.
DRAWN_FIGURES_JS = """async () => {
    const figures = [...document.querySelectorAll('article img')]
        .filter(img => img.src.includes('/_images/'));
    for (const img of figures) {
        img.scrollIntoView();
        if (!img.complete) await new Promise(done => { img.onload = img.onerror = done; });
    }
    return figures.map(img => ({file: decodeURIComponent(img.currentSrc.split('/').pop()),
                                loaded: img.naturalWidth > 0}));
}"""


@pytest.mark.parametrize(
    ("mode", "scheme"), [("auto", "dark"), ("auto", "light"), ("dark", "light"), ("light", "dark")]
)
def test_figures_follow_the_theme(site, browser, mode, scheme):
    """Every figure is drawn in the rendering of the theme the page shows: the dark one (dark
    paper, light neutral ink) when it is dark, whether the system's scheme made it dark (auto,
    the theme's default) or the reader's switch did against the system's. On the default the
    browser fetches only the rendering it draws."""
    problems, total = [], 0
    dark_page = mode == "dark" or (mode == "auto" and scheme == "dark")
    for path in _chapters():
        rel = path.relative_to(SITE).as_posix()
        expected = len(re.findall(r'<source class="attnbook-dark"', path.read_text()))
        visit = Visit(browser, urljoin(site, rel), mode=mode, scheme=scheme)
        theme = visit.page.evaluate("() => document.documentElement.dataset.theme")
        drawn = visit.page.evaluate(DRAWN_FIGURES_JS)
        dark = [d for d in drawn if d["file"].endswith(".dark.png")]
        want = len(drawn) if dark_page else 0
        if theme != ("dark" if dark_page else "light"):
            problems.append(f"{rel}: the page is {theme}")
        if len(drawn) != expected or len(dark) != want or not all(d["loaded"] for d in drawn):
            problems.append(f"{rel} ({mode}, system {scheme}): {expected} figures, drawn {drawn}")
        drawn_files = {d["file"] for d in drawn}
        fetched = {unquote(r.url.split("/")[-1]) for r in visit.responses if "/_images/" in r.url}
        if mode == "auto" and fetched - drawn_files:
            problems.append(f"{rel} ({mode}, {scheme} system): fetched {fetched - drawn_files}")
        total += len(drawn)
        visit.close()
    assert total > 10 and not problems, "\n".join(problems)


def test_search_snippets_show_no_raw_tex_or_page_chrome(site, browser):
    visit = Visit(browser, urljoin(site, "search.html?q=softmax"))
    page = visit.page
    page.wait_for_function(
        "() => (document.querySelector('#search-results .search-summary') || {}).textContent"
        "?.includes('found')",
        timeout=60_000,
    )
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li').length > 0 && "
        "[...document.querySelectorAll('#search-results li')].every(li => li.querySelector('p'))",
        timeout=60_000,
    )
    covered = page.evaluate("""() => {
        const form = document.querySelector('.bd-search-container form.bd-search');
        const icon = form.querySelector('i.fa-magnifying-glass'), box = form.querySelector('input');
        const pad = parseFloat(getComputedStyle(box).paddingLeft);
        const text = box.getBoundingClientRect().left + pad;
        return icon.getBoundingClientRect().right - text;
    }""")
    assert covered <= 0, f"the search icon covers the first {covered:.1f} px of the typed text"
    snippets = page.locator("#search-results li p").all_inner_texts()
    assert len(snippets) >= 5
    raw = [t for t in snippets if re.search(r"\\[()\[\]]|\\(frac|sqrt|top|mathrm)\b|\$\$", t)]
    assert not raw, raw[:3]
    # The page's buttons are not its text ("... Binder Colab Repository Open issue .ipynb").
    chrome = [t for t in snippets if re.search(r"\bBinder\b|Open issue|\.ipynb\s+\.md", t)]
    assert not chrome, chrome[:3]
    assert not visit.errors, visit.errors
    visit.close()


def test_reference_list_links_back_and_links_arxiv():
    html = (SITE / "book" / "references.html").read_text()
    entries = re.findall(r'<div class="citation".*?</div>', html, re.S)
    assert len(entries) >= 20
    backrefs = [e for e in entries if 'class="attnbook-backrefs"' in e]
    assert len(backrefs) >= len(entries) * 0.8, f"only {len(backrefs)} of {len(entries)} link back"
    unlinked = [
        arxiv
        for entry in entries
        for arxiv in re.findall(
            r"arXiv:?\s*\d{4}\.\d{4,5}", re.sub(r"<a [^>]*>.*?</a>", "", entry, flags=re.S)
        )
    ]
    assert not unlinked, f"arXiv ids without a link (give the entry an eprint field): {unlinked}"
    raw_tex = [e for e in entries if re.search(r"\$[^$<]+\$", re.sub(r"<[^>]+>", "", e))]
    assert not raw_tex, (
        f"raw TeX in a reference: {[re.sub(r'<[^>]+>', '', e)[:90] for e in raw_tex]}"
    )


def test_chapters_link_to_the_glossary_and_number_headings_once():
    chapters = _chapters()
    linking = [p.name for p in chapters if 'href="../book/glossary.html#term-' in p.read_text()]
    assert linking, "no chapter links a term to the glossary"
    twice = []
    for path in _pages():
        for heading in re.findall(r"<h[1-6]>(.*?)</h[1-6]>", path.read_text(), re.S):
            if re.match(r'<span class="section-number">[^<]*</span>\s*\d+\.\s', heading):
                twice.append(f"{path.name}: {re.sub(r'<[^>]+>', '', heading)[:50]}")
    assert not twice, twice


def test_every_page_has_a_favicon_and_a_link_preview():
    for path in [*_pages(), SITE / "search.html"]:
        html = path.read_text()
        assert re.search(r'<link rel="icon" href="[^"]*favicon\.svg"', html), path.name
        assert html.count('<meta name="viewport"') == 1, f"{path.name}: viewport tags"
        description = re.search(r'<meta name="description" content="([^"]+)"', html)
        assert description and len(description.group(1)) >= 20, path.name
        assert "\\" not in description.group(1), f"{path.name}: TeX in {description.group(1)}"
        for tag in ("og:title", "og:description", "og:type", "og:site_name"):
            assert f'<meta property="{tag}" content="' in html, f"{path.name}: no {tag}"


def test_site_ships_only_what_pages_use():
    shipped = [p.relative_to(SITE).as_posix() for p in SITE.rglob("*") if p.is_file()]
    unwanted = [
        p
        for p in shipped
        if "html-manager" in p or "requirejs" in p or p.endswith((".map", ".ttf", "embed-amd.js"))
    ]
    assert not unwanted, f"{unwanted[:10]} (left by an older build? Sphinx keeps stale files)"
    assert (SITE / "_static" / "scripts" / "fontawesome.js").stat().st_size < 2_000
    for path in _chapters():
        html = path.read_text()
        assert "require.js" not in html and "embed-amd" not in html, path.name
        assert "widget-state+json" not in html, f"{path.name}: carries ipywidgets state"


def test_whole_book_pdf_builds_with_sane_page_and_figure_counts(site, browser):
    """Prints the book (scripts/build_pdf.py, as `make pdf` does) into the site, where the
    intro page links to it, and checks what came out."""
    import sys

    from pypdf import PdfReader

    sys.path.insert(0, str(ROOT / "scripts"))
    from build_pdf import ANSWERS_PAGE, PDF_NAME, book_pages, print_book, print_order

    out = SITE / PDF_NAME
    counts = print_book(browser, site, out)
    reader = PdfReader(out)
    printed = print_order(book_pages())  # the book's pages and the answers appendix
    documents = len(printed)
    chapter_figures = sum(
        len(re.findall(r"<img [^>]*src=\"\.\./_images/", p.read_text())) for p in _chapters()
    )
    assert counts["figures"] >= chapter_figures > 10
    assert documents * 2 <= len(reader.pages) <= documents * 40, len(reader.pages)
    assert len(reader.outline) == documents
    images = _pdf_images(reader)
    print(f"\nPDF: {len(reader.pages)} pages, {images} images, {out.stat().st_size:,} bytes")
    assert images >= chapter_figures, (images, chapter_figures)
    text = "".join(reader.pages[i].extract_text() for i in range(min(len(reader.pages), 30)))
    assert "Attention" in text
    assert not re.search(r"\\\(|\\\[|\\frac", text), "raw TeX in the PDF"
    total = len(reader.pages)  # page numbers count through the book, not per chapter
    for number in sorted({1, total // 3, total // 2, total}):
        footer = reader.pages[number - 1].extract_text()
        assert f"{number} / {total}" in footer, f"page {number}: {footer[-80:]!r}"
    assert 'href="../attention-and-transformers.pdf"' in (SITE / "book" / "intro.html").read_text()
    stranded, chrome = _pdf_page_feet(reader)
    assert not stranded, f"headings left at the foot of a page: {stranded[:5]}"
    assert not chrome, f"screen-only labels printed: {chrome[:5]}"
    links = _pdf_links(reader, printed)
    print(f"PDF links: {links['counts']}")
    assert not links["problems"], "\n".join(links["problems"][:20])
    # Answers in an appendix: each answer's place in its chapter jumps to it, and back.
    answers = sum(
        len(re.findall(r'<span class="sd-summary-text">Answer</span>', p.read_text()))
        for p in _chapters()
    )
    assert counts["answers"] == answers > 40, (counts["answers"], answers)
    assert not (SITE / ANSWERS_PAGE).exists(), "the appendix page is only for printing"
    to_answer = links["targets"].get(ANSWERS_PAGE, [])
    back = [
        name
        for page, names in links["targets"].items()
        if page != ANSWERS_PAGE
        for name in names
        if "#exercise-" in name
    ]
    # distinct targets: a link that wraps onto two lines is two link boxes in the PDF
    assert len({name for name in to_answer if "#answer-" in name}) == answers, len(to_answer)
    assert len(set(back)) == answers, len(back)
    start = reader.get_destination_page_number(reader.outline[printed.index(ANSWERS_PAGE)])
    appendix = reader.pages[start].extract_text()
    assert "Answers to the exercises" in appendix and "Exercise 1" in appendix, appendix[:300]
    answers_text = "".join(page.extract_text() for page in reader.pages[start:])
    assert "Where does the" in answers_text  # self-check answers under their question titles
    assert not re.search(r"\\\(|\\\[|\\frac", answers_text), "raw TeX in the appendix"
    in_chapters = "".join(page.extract_text() for page in reader.pages[:start])
    assert in_chapters.count("Answer: in the appendix") == answers
    # Cross-references, citations and glossary terms: hundreds of jumps inside the PDF.
    assert links["counts"]["internal"] >= 300, links["counts"]


_HEADING = re.compile(r"^\d+\.\d+(\.\d+)*\. [A-Z]")  # "2.3. Title", as the PDF has it
_SCREEN_ONLY = ("Hide code cell", "Show code cell", "Live on this page", "has not run here")


def _pdf_page_feet(reader) -> tuple[list[str], list[str]]:
    """Numbered headings among the last two text lines of a page above its footer (issue 27:
    four were stranded at page feet), and screen-only labels anywhere in the PDF."""
    stranded, chrome = [], []
    for number, page in enumerate(reader.pages, 1):
        lines = [" ".join(t.split()) for t in page.extract_text().splitlines() if t.strip()]
        body = lines[:-1]  # the last line is the footer (title, "n / N")
        stranded += [f"page {number}: {t[:50]}" for t in body[-2:] if _HEADING.match(t)]
        chrome += [f"page {number}: {w}" for w in _SCREEN_ONLY if any(w in t for t in lines)]
    return stranded, chrome


def _pdf_links(reader, pages: list[str]) -> dict:
    """Every link annotation of the joined PDF: none may point at the print server (a
    127.0.0.1 URI), and each jump must name a destination that exists and that lies inside
    the page range of the document it names (from the PDF's outline: one entry per page)."""
    starts = [reader.get_destination_page_number(item) for item in reader.outline]
    ranges = {
        page: (start, (starts[i + 1] if i + 1 < len(starts) else len(reader.pages)) - 1)
        for i, (page, start) in enumerate(zip(pages, starts, strict=True))
    }
    dests = {str(k): v for k, v in reader.named_destinations.items()}
    problems, counts = [], {"internal": 0, "local_uri": 0, "uri": 0}
    targets: dict[str, list[str]] = {}  # document -> the destinations jumped to in it
    for number, page in enumerate(reader.pages):
        for annot in page.get("/Annots") or []:
            annot = annot.get_object()
            if annot.get("/Subtype") != "/Link":
                continue
            action = annot.get("/A")
            action = action.get_object() if action is not None else {}
            uri = str(action.get("/URI", ""))
            if uri:
                host = urlparse(uri).hostname
                if host in {"127.0.0.1", "localhost"}:
                    counts["local_uri"] += 1
                    problems.append(f"page {number + 1}: link to the print server {uri}")
                else:
                    counts["uri"] += 1
                continue
            name = annot.get("/Dest", action.get("/D"))
            counts["internal"] += 1
            if name is None or str(name) not in dests:
                problems.append(f"page {number + 1}: jump to a missing destination {name}")
                continue
            document = str(name).split("#")[0]
            targets.setdefault(document, []).append(str(name))
            target = reader.get_destination_page_number(dests[str(name)])
            low, high = ranges.get(document, (-1, -1))
            if not low <= target <= high:
                problems.append(
                    f"page {number + 1}: {name} lands on page {target + 1}, outside "
                    f"{document} (pages {low + 1}-{high + 1})"
                )
    return {"problems": problems, "counts": counts, "targets": targets}


def _pdf_images(reader) -> int:
    """Distinct image objects drawn on the PDF's pages (including inside form XObjects)."""
    seen = set()

    def walk(resources):
        xobjects = (resources or {}).get("/XObject") or {}
        for ref in xobjects.values():
            obj = ref.get_object()
            key = getattr(ref, "idnum", id(obj))
            if obj.get("/Subtype") == "/Image":
                seen.add(key)
            elif obj.get("/Subtype") == "/Form" and key not in seen:
                seen.add(("form", key))
                walk(obj.get("/Resources"))

    for page in reader.pages:
        walk(page.get("/Resources"))
    return sum(1 for key in seen if not isinstance(key, tuple))


def _anchors(path: Path, cache={}) -> set[str]:  # noqa: B006 - a deliberate per-run memo
    if path not in cache:
        cache[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text()))
    return cache[path]


def test_every_internal_link_and_anchor_resolves():
    """Runs after the PDF test (file order; `make test` runs the two in this order in one
    session): the intro page links to the printed book."""
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


def test_download_ipynb_is_the_readers_notebook(site):
    """Download -> .ipynb gives notebooks/NN_name.ipynb (outputs, plain markdown), not the
    build's unexecuted reading of the MyST source."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from portable import LEFTOVER

    for path in _chapters():
        links = re.findall(r'href="\.\./(_sources/notebooks/[^"]+\.ipynb)"', path.read_text())
        assert links == [f"_sources/notebooks/{path.stem}.ipynb"], f"{path.name}: {links}"
        served = SITE / links[0]
        notebook = json.loads(served.read_text())
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        outputs = sum(len(c.get("outputs", [])) for c in code)
        assert outputs >= len(code) // 2, f"{served.name}: {outputs} outputs in {len(code)} cells"
        markup = [
            m
            for c in notebook["cells"]
            if c["cell_type"] == "markdown"
            for m in LEFTOVER.findall("".join(c["source"]))
        ]
        assert not markup, f"{served.name}: MyST markup left: {markup[:5]}"
        reader = ROOT / "notebooks" / f"{path.stem}.ipynb"
        assert served.read_bytes() == reader.read_bytes(), f"{served.name} is not {reader.name}"


def test_the_intro_pdf_link_is_never_a_404():
    """`make book` alone has no PDF (`make pdf` prints it): the introduction then links the
    published copy; once this build's PDF exists it links that (checked on a copy of the
    built intro page, then on the build itself)."""
    import importlib
    import shutil
    import tempfile

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    site_ext = importlib.import_module("attnbook_site")
    from portable import Portable

    intro = SITE / "book" / "intro.html"
    if not intro.exists():
        pytest.skip("needs a built site (make book)")
    from build_pdf import PDF_NAME

    assert site_ext.PDF_NAME == PDF_NAME
    published = Portable().site + site_ext.PDF_NAME
    local = f"../{site_ext.PDF_NAME}"

    def pdf_links(html: str) -> list[str]:
        return re.findall(r'<a class="attnbook-pdf"[^>]*href="([^"]+)"', html)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "book").mkdir()
        shutil.copyfile(intro, out / "book" / "intro.html")
        (out / site_ext.PDF_NAME).unlink(missing_ok=True)
        assert site_ext.link_pdf(out, ROOT) == published
        assert pdf_links((out / "book" / "intro.html").read_text()) == [published]
        (out / site_ext.PDF_NAME).write_bytes(b"%PDF-1.7")
        assert site_ext.link_pdf(out, ROOT) == local
        assert pdf_links((out / "book" / "intro.html").read_text()) == [local]
    links = pdf_links(intro.read_text())
    assert len(links) == 1, links
    if links[0] == local:
        assert (SITE / site_ext.PDF_NAME).exists(), "the intro links a PDF this build lacks"
    else:
        assert links[0] == published, links
