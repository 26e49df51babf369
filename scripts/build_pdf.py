"""Print the built site into one PDF of the whole book: `make pdf` (after `make book`).

Offline and TeX-free: each page of `_build/html`, in `_toc.yml` order, is opened in the
system Chromium (served from 127.0.0.1, every other host unresolvable), printed once MathJax
has typeset it and its widgets have drawn, with the site's print stylesheet (no navigation,
code wrapped instead of cut); pypdf then joins the pages into
`_build/html/attention-and-transformers.pdf` with one bookmark per page, so the site links
to it and it is published with the site. A widget prints as the picture its default settings
draw; the chapters' figures are the same PNGs the pages show.

Answers: a reader of paper should try an exercise before seeing its answer, so the PDF moves
every answer (each "Answer" dropdown, with the folded code cell that computes it just
before it) into an appendix, "Answers to the exercises", printed after the last chapter.
Where an answer stood, the chapter has a link to it; each answer links back to its exercise.

Links: Chromium writes a link to another page as a URI on the temporary print server
(``http://127.0.0.1:<port>/...``), dead once printing is over, and names the destinations of
in-page links per page (``summary`` in every chapter). Each page is therefore printed with a
hidden in-page link to every anchor the book links to on it (Chromium then records where each
anchor landed), its destinations are renamed ``<page>#<anchor>`` in the joined PDF, and every
link to a page of the book becomes a jump to that destination; a link to anything else on
the site (a download, the index) goes to the published site (``scripts/portable.py``).

    python scripts/build_pdf.py [--site _build/html] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import re
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium
from portable import site_url

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
PDF_NAME = "attention-and-transformers.pdf"
# Offline by construction: every host but this machine fails to resolve.
RESOLVE_LOCAL_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
# Header and footer templates are rendered by Chromium in their own tiny document. Its page
# numbers would count from 1 in every page of the site printed (each is printed on its own);
# the book-wide "n / N" is drawn onto each page after joining (_number_pages).
FOOTER = (
    '<div style="font-size:8px;width:100%;padding:0 12mm;display:flex;'
    'justify-content:space-between;color:#666"><span class="title"></span></div>'
)
NUMBER_FONT_PT, NUMBER_RIGHT_PT, NUMBER_BASELINE_PT = 6, 34, 21  # 8 CSS px = 6 pt; 12 mm


def _number_pages(writer) -> None:
    """Draw "n / N" (book-wide) at the right of each page's footer line."""
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, StreamObject

    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )

    def stream(text: str):
        obj = StreamObject()
        obj.set_data(text.encode("ascii"))
        return writer._add_object(obj)

    save, restore = stream("q\n"), stream("\nQ\n")
    total = len(writer.pages)
    for number, page in enumerate(writer.pages, start=1):
        label = f"{number} / {total}"
        width = 0.556 * NUMBER_FONT_PT * len(label)  # Helvetica digits are 0.556 em wide
        x = float(page.mediabox.right) - NUMBER_RIGHT_PT - width
        resources = page["/Resources"].get_object()
        fonts = resources.get("/Font")
        if fonts is None:
            fonts = resources[NameObject("/Font")] = DictionaryObject()
        fonts.get_object()[NameObject("/AttnbookPageNumber")] = font
        contents = page.raw_get("/Contents") if "/Contents" in page else None
        if contents is None:
            existing = []
        elif isinstance(contents.get_object(), ArrayObject):
            existing = list(contents.get_object())
        else:
            existing = [contents]
        label_stream = stream(
            f"q 0.4 g BT /AttnbookPageNumber {NUMBER_FONT_PT} Tf {x:.2f} {NUMBER_BASELINE_PT} "
            f"Td ({label}) Tj ET Q\n"
        )
        page[NameObject("/Contents")] = ArrayObject([save, *existing, restore, label_stream])


def book_pages(root: Path = ROOT) -> list[str]:
    """The site's pages in reading order (`_toc.yml`), as paths relative to the site root."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return [f"{file}.html" for file in files]


ANSWERS_PAGE = "notebooks/_pdf_answers.html"  # written for printing only, then removed
ANSWERS_TITLE = "Answers to the exercises"


def _is_answer(tag) -> bool:
    summary = tag.find("summary")
    return summary is not None and summary.get_text(strip=True) == "Answer"


def _answer_blocks(soup) -> list[list]:
    """Each answer of a page: the elements it is made of, in page order (an "Answer"
    dropdown and the folded code cells just before it). Mirrors ``ANSWERS_JS``."""
    blocks = []
    for dropdown in soup.select("details.sd-dropdown"):
        if not _is_answer(dropdown):
            continue
        block = [dropdown]
        for previous in dropdown.find_previous_siblings():
            if previous.name != "div" or "tag_hide-input" not in (previous.get("class") or []):
                break
            block.insert(0, previous)
        blocks.append(block)
    return blocks


def _exercise_label(first) -> list:
    """What an answer answers, as HTML nodes: "Exercise N" after a numbered exercise list (the
    last item before it), else the heading of its section (a self-check question's title,
    its math kept for MathJax), else nothing."""
    listing = first.find_previous_sibling("ol")
    if listing is not None:
        items = len(listing.find_all("li", recursive=False))
        return [f"Exercise {int(listing.get('start', 1)) + items - 1}"]
    section = first.find_parent("section")
    heading = section.find(["h2", "h3", "h4"]) if section is not None else None
    if heading is None:
        return []
    for link in heading.select("a.headerlink"):
        link.decompose()
    return list(heading.contents)


def answers_page(site: Path, pages: list[str]) -> tuple[str, dict[str, int]]:
    """The appendix's HTML (a chapter page's frame around every answer of the book, each
    under its chapter, with a link back to its exercise) and each page's number of answers."""
    from bs4 import BeautifulSoup

    chapters = [page for page in pages if page.startswith("notebooks/") and page != ANSWERS_PAGE]
    frame = BeautifulSoup((site / chapters[-1]).read_text(encoding="utf-8"), "html.parser")
    for chrome in frame.select("#print-main-content, .bd-sidebar-secondary, .prev-next-footer"):
        chrome.decompose()  # the frame page's contents list and neighbours
    frame.select_one("#jb-print-docs-body h1").string = ANSWERS_TITLE  # the printed title
    article = frame.select_one("article.bd-article")
    article.clear()
    heading = frame.new_tag("h1")
    heading.string = ANSWERS_TITLE
    article.append(heading)
    counts = {}
    for page in chapters:
        soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
        blocks = _answer_blocks(soup)
        counts[page] = len(blocks)
        if not blocks:
            continue
        stem = Path(page).stem
        section = frame.new_tag("section", id=f"answers-{stem}")
        title = frame.new_tag("h2")
        title.string = soup.title.get_text().split(" — ")[0].strip()
        section.append(title)
        for k, block in enumerate(blocks, 1):
            answer = frame.new_tag("div", id=f"answer-{stem}-{k}")
            answer["class"] = "attnbook-answer"
            back = frame.new_tag("p", attrs={"class": "rubric"})
            link = frame.new_tag("a", href=f"{Path(page).name}#exercise-{stem}-{k}")
            link.extend(_exercise_label(block[0]) or [f"Answer {k}"])
            back.append(link)
            answer.append(back)
            for element in block:
                if element.name == "details" and _is_answer(element):
                    body = element.select_one(".sd-summary-content") or element
                    answer.extend(list(body.contents))
                else:  # a folded code cell: printed unfolded, without its toggle
                    for toggle in element.select("details.hide"):
                        if toggle.summary is not None:
                            toggle.summary.decompose()
                        toggle.unwrap()
                    answer.append(element)
            section.append(answer)
        article.append(section)
    frame.title.string = f"{ANSWERS_TITLE} — {frame.title.get_text().split(' — ')[-1]}"
    return str(frame), counts


def print_order(pages: list[str]) -> list[str]:
    """``pages`` with the answers appendix after the last chapter."""
    last = max(i for i, page in enumerate(pages) if page.startswith("notebooks/"))
    return [*pages[: last + 1], ANSWERS_PAGE, *pages[last + 1 :]]


# On a chapter page being printed: each answer (as ``_answer_blocks`` finds them) becomes a
# link to it in the appendix, at an anchor the appendix links back to.
ANSWERS_JS = """(stem) => {
    const isAnswer = d => d.querySelector(':scope > summary')?.textContent.trim() === 'Answer';
    const dropdowns = [...document.querySelectorAll('details.sd-dropdown')].filter(isAnswer);
    dropdowns.forEach((dropdown, i) => {
        const block = [dropdown];
        let previous = dropdown.previousElementSibling;
        while (previous && previous.matches('div.tag_hide-input')) {
            block.unshift(previous);
            previous = previous.previousElementSibling;
        }
        const note = document.createElement('p');
        note.className = 'attnbook-answer-link';
        note.id = `exercise-${stem}-${i + 1}`;
        const a = document.createElement('a');
        a.href = `_pdf_answers.html#answer-${stem}-${i + 1}`;
        a.textContent = 'Answer: in the appendix, Answers to the exercises';
        note.appendChild(a);
        block[0].before(note);
        block.forEach(element => element.remove());
    });
    return dropdowns.length;
}"""


def link_targets(site: Path, pages: list[str]) -> dict[str, list[str]]:
    """page -> the anchors on it that some page of the book links to (sorted)."""
    targets: dict[str, set[str]] = {page: set() for page in pages}
    for page in pages:
        path = site / page
        if not path.exists():
            continue
        for href in re.findall(r'<a [^>]*href="([^"]+)"', path.read_text(encoding="utf-8")):
            parsed = urlparse(urljoin("http://book/" + page, href))
            target = unquote(parsed.path.lstrip("/"))
            if parsed.netloc == "book" and parsed.fragment and target in targets:
                targets[target].add(unquote(parsed.fragment))
    return {page: sorted(ids) for page, ids in targets.items()}


# Hidden in-page links to the anchors other pages link to: Chromium records a destination for
# each element an in-page link targets (display: none links draw no link box of their own).
ANCHOR_JS = """(ids) => {
    const box = document.createElement('div');
    box.style.display = 'none';
    for (const id of ids) {
        if (!document.getElementById(id)) continue;
        const a = document.createElement('a');
        a.href = '#' + encodeURIComponent(id);
        box.appendChild(a);
    }
    document.body.appendChild(box);
}"""


class _Links:
    """Joins the pages' destinations and rewrites their links (see the module docstring)."""

    def __init__(self, base_url: str, pages: list[str], site: str):
        self.base_url, self.pages, self.site = base_url, set(pages), site
        self.names: set[str] = set()
        self.pending: list[tuple[object, str]] = []  # (annotation, the page it sits on)
        self.counts = {"internal": 0, "published": 0, "external": 0}

    def add(self, writer, reader, rel: str, start: int) -> None:
        """Register the destinations of ``reader`` (page ``rel``, added at ``start``)."""
        from pypdf.generic import Fit

        writer.add_named_destination(rel, start, Fit.xyz(None, None, None))
        self.names.add(rel)
        for name, dest in reader.named_destinations.items():
            number = reader.get_destination_page_number(dest)
            if number is None or number < 0:
                continue
            key = f"{rel}#{str(name).lstrip('/')}"
            fit = Fit.xyz(dest.left, dest.top, None)
            writer.add_named_destination(key, start + number, fit)
            self.names.add(key)
        for page in writer.pages[start:]:
            for annot in page.get("/Annots") or []:
                annot = annot.get_object()
                if annot.get("/Subtype") == "/Link":
                    self.pending.append((annot, rel))

    def _goto(self, annot, name: str) -> None:
        from pypdf.generic import NameObject, TextStringObject

        annot.pop("/A", None)
        annot[NameObject("/Dest")] = TextStringObject(name)
        self.counts["internal"] += 1

    def finish(self) -> None:
        """Point every link at a destination that exists, now that all pages are in."""
        from pypdf.generic import NameObject, TextStringObject

        for annot, rel in self.pending:
            if "/Dest" in annot:  # an in-page link, named as Chromium named it for this page
                name = f"{rel}#{str(annot['/Dest']).lstrip('/')}"
                self._goto(annot, name if name in self.names else rel)
                continue
            action = annot.get("/A")
            action = action.get_object() if action is not None else None
            uri = str(action.get("/URI", "")) if action is not None else ""
            if not uri.startswith(self.base_url):
                self.counts["external"] += bool(uri)
                continue
            parsed = urlparse(uri)
            target = unquote(parsed.path.lstrip("/")) or "index.html"
            if target in self.pages:
                name = f"{target}#{unquote(parsed.fragment)}" if parsed.fragment else target
                self._goto(annot, name if name in self.names else target)
            else:
                action[NameObject("/URI")] = TextStringObject(self.site + uri[len(self.base_url) :])
                self.counts["published"] += 1


def _serve(site: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


# Before printing: math typeset, exercise answers open, every figure loaded (the light one:
# each <picture>'s dark source is dropped), fonts ready.
PREPARE_JS = """async () => {
    localStorage.setItem('mode', 'light');
    document.documentElement.dataset.theme = 'light';
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
    }
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    document.querySelectorAll('source.attnbook-dark').forEach(s => s.remove());
    const imgs = [...document.querySelectorAll('article img')];
    imgs.forEach(img => img.removeAttribute('loading'));
    await Promise.all(imgs.map(img => img.complete ? null :
        new Promise(done => { img.onload = img.onerror = done; })));
    await document.fonts.ready;
    return imgs.filter(img => img.naturalWidth > 0).length;
}"""


def print_book(
    browser, base_url: str, out: Path, pages: list[str] | None = None, site: Path = SITE
) -> dict:
    """Print `pages` (default: the whole book) and the answers appendix (after the last
    chapter) from `base_url` into `out`; returns counts."""
    pages = print_order(pages or book_pages())
    appendix, answers = answers_page(site, pages)
    (site / ANSWERS_PAGE).write_text(appendix, encoding="utf-8")
    try:
        return _print_pages(browser, base_url, out, pages, site, answers)
    finally:
        (site / ANSWERS_PAGE).unlink(missing_ok=True)


def _print_pages(browser, base_url, out, pages, site, answers) -> dict:
    from pypdf import PdfReader, PdfWriter

    anchors = link_targets(site, pages)
    for page, count in answers.items():  # the anchors ANSWERS_JS makes on each side
        stem = Path(page).stem
        anchors[page] = sorted(
            {*anchors[page], *(f"exercise-{stem}-{k}" for k in range(1, count + 1))}
        )
        anchors[ANSWERS_PAGE] = sorted(
            {*anchors[ANSWERS_PAGE], *(f"answer-{stem}-{k}" for k in range(1, count + 1))}
        )
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    links = _Links(base_url, pages, site_url(config))
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
            if pages[index] in answers:
                moved = page.evaluate(ANSWERS_JS, Path(pages[index]).stem)
                if moved != answers[pages[index]]:
                    raise RuntimeError(
                        f"{pages[index]}: {moved} answers moved, not {answers[pages[index]]}"
                    )
            figures += page.evaluate(PREPARE_JS)
            page.evaluate(ANCHOR_JS, anchors.get(pages[index], []))
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
            reader = PdfReader(io.BytesIO(data))
            for pdf_page in reader.pages:
                writer.add_page(pdf_page)
            writer.add_outline_item(title=title, page_number=start)
            links.add(writer, reader, pages[index], start)
    finally:
        context.close()
    links.finish()
    _number_pages(writer)
    writer.add_metadata({"/Title": "Attention and Transformers, executable"})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        writer.write(handle)
    if out.resolve() == (site / PDF_NAME).resolve():  # the site now has its own PDF: link it
        sys.path.insert(0, str(ROOT / "book" / "_ext"))
        from attnbook_site import link_pdf

        link_pdf(site, ROOT)
    return {
        "pages": len(writer.pages),
        "figures": figures,
        "documents": len(pages),
        "answers": sum(answers.values()),
        "links": links.counts,
    }


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
                counts = print_book(browser, base_url, out, site=site)
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
