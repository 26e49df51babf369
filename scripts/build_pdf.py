"""Print the built site into one PDF of the whole book: `make pdf` (after `make book`).

Offline and TeX-free: each page of `_build/html`, in `_toc.yml` order, is opened in the
system Chromium (served from 127.0.0.1, every other host unresolvable), printed once MathJax
has typeset it and its widgets have drawn, with the site's print stylesheet (no navigation,
code wrapped instead of cut, exercise answers opened); pypdf then joins the pages into
`_build/html/attention-and-transformers.pdf` with one bookmark per page, so the site links
to it and it is published with the site. A widget prints as the picture its default settings
draw; the chapters' figures are the same PNGs the pages show.

    python scripts/build_pdf.py [--site _build/html] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import sys
import threading
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
PDF_NAME = "attention-and-transformers.pdf"
# Offline by construction: every host but this machine fails to resolve.
RESOLVE_LOCAL_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
# Header and footer templates are rendered by Chromium in their own tiny document.
FOOTER = (
    '<div style="font-size:8px;width:100%;padding:0 12mm;display:flex;'
    'justify-content:space-between;color:#666"><span class="title"></span>'
    '<span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>'
)


def book_pages(root: Path = ROOT) -> list[str]:
    """The site's pages in reading order (`_toc.yml`), as paths relative to the site root."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return [f"{file}.html" for file in files]


def _serve(site: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


# Before printing: math typeset, exercise answers open, every figure loaded, fonts ready.
PREPARE_JS = """async () => {
    localStorage.setItem('mode', 'light');
    document.documentElement.dataset.theme = 'light';
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
    }
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    const imgs = [...document.querySelectorAll('article img')];
    imgs.forEach(img => img.removeAttribute('loading'));
    await Promise.all(imgs.map(img => img.complete ? null :
        new Promise(done => { img.onload = img.onerror = done; })));
    await document.fonts.ready;
    return imgs.filter(img => img.naturalWidth > 0).length;
}"""


def print_book(browser, base_url: str, out: Path, pages: list[str] | None = None) -> dict:
    """Print `pages` (default: the whole book) from `base_url` into `out`; returns counts."""
    from pypdf import PdfReader, PdfWriter

    pages = pages or book_pages()
    context = browser.new_context(
        viewport={"width": 1000, "height": 1400}, color_scheme="light", java_script_enabled=True
    )
    writer = PdfWriter()
    figures = 0

    def open_page(rel: str):
        page = context.new_page()
        response = page.goto(base_url + rel, wait_until="commit")  # loads while one prints
        if response is None or not response.ok:
            status = response.status if response else "no response"
            raise RuntimeError(f"{rel} ({status}): not in the built site; run `make book` first")
        return page

    try:
        upcoming = open_page(pages[0])
        for index in range(len(pages)):
            page = upcoming
            upcoming = open_page(pages[index + 1]) if index + 1 < len(pages) else None
            page.wait_for_load_state("load")
            figures += page.evaluate(PREPARE_JS)
            title = page.title().split(" — ")[0].strip()
            data = page.pdf(
                format="A4",
                print_background=True,
                margin={"top": "14mm", "bottom": "16mm", "left": "12mm", "right": "12mm"},
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
            )
            page.close()
            start = len(writer.pages)
            for pdf_page in PdfReader(io.BytesIO(data)).pages:
                writer.add_page(pdf_page)
            writer.add_outline_item(title=title, page_number=start)
    finally:
        context.close()
    writer.add_metadata({"/Title": "Attention and Transformers, executable"})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        writer.write(handle)
    return {"pages": len(writer.pages), "figures": figures, "documents": len(pages)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    site = args.site.resolve()
    out = args.out or site / PDF_NAME
    if not (site / "book" / "intro.html").exists():
        print(f"no built site in {site}: run `make book` first", file=sys.stderr)
        return 1
    if chromium.PATH is None:
        print("needs Chromium (apt-get install chromium)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    server, base_url = _serve(site)
    try:
        with sync_playwright() as p:
            browser = chromium.launch(p, RESOLVE_LOCAL_ONLY)
            try:
                counts = print_book(browser, base_url, out)
            finally:
                browser.close()
    finally:
        server.shutdown()
    size = out.stat().st_size / 2**20
    print(
        f"{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {counts['pages']} pages "
        f"from {counts['documents']} pages of the site, {counts['figures']} figures, {size:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
