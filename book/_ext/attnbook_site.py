"""Site tweaks for the book that Jupyter Book 1.x has no setting for.

* Drop sphinx-thebe's scripts. Jupyter Book always loads the extension, even with
  ``launch_buttons.thebe: false``; its inline configuration is added twice, which throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page, and it names a CDN.
  The book offers Colab, Binder and JupyterLab instead of in-page execution.
* Link previews: a ``description`` and Open Graph tags on every page, from the page's title
  and first paragraph.
* References link back to where each work is cited (sphinxcontrib-bibtex lists each entry
  once, without back-links).
* Replace the theme's 1.49 MB Font Awesome script (SVG-with-JS, the whole icon library) with
  ``fontawesome_stub.js``: the theme's stylesheet already draws every icon it uses with the
  icon web font it ships. (book/_static cannot carry it: html_static_path copies skip
  ``scripts/**``, one of the book's exclude_patterns.)
* Ship nothing a page does not load: source maps (one of them for the replaced script) and
  the icon fonts' TrueType copies (every browser that runs the theme takes the WOFF2 ones).
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from docutils import nodes

DESCRIPTION_CHARS = 160


def _drop_thebe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files", [])
    kept = []
    for script in scripts:
        filename = str(getattr(script, "filename", script) or "")
        body = str(getattr(script, "attributes", {}).get("body", ""))
        if "sphinx-thebe" in filename or "THEBE_JS_URL" in body:
            continue
        kept.append(script)
    context["script_files"] = kept


def _plain(text: str) -> str:
    """Paragraph text with TeX markup reduced to words (for descriptions)."""
    text = re.sub(r"\\(?:mathrm|text|operatorname|mathbf|boldsymbol)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)
    text = re.sub(r"[{}$]|\\[,;!]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def _description(doctree) -> str:
    for paragraph in doctree.findall(nodes.paragraph):
        if paragraph.next_node(nodes.Admonition, include_self=False, descend=False, ascend=False):
            continue
        text = _plain(paragraph.astext())
        if len(text) >= 40:
            if len(text) > DESCRIPTION_CHARS:
                text = text[: DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
            return text
    return ""


def _meta_tags(app, pagename, templatename, context, doctree):
    site = app.config.html_title or app.config.project
    title = re.sub(r"<[^>]+>", "", context.get("title") or "") or site
    description = _description(doctree) if doctree is not None else ""
    if pagename == app.config.root_doc or not description:
        description = description or site
    tags = [
        ("name", "description", description),
        ("property", "og:title", title if title == site else f"{title} | {site}"),
        ("property", "og:description", description),
        ("property", "og:type", "book" if pagename == app.config.root_doc else "article"),
        ("property", "og:site_name", site),
        ("name", "twitter:card", "summary"),
    ]
    baseurl = app.config.html_baseurl
    if baseurl:
        tags.append(("property", "og:url", baseurl.rstrip("/") + "/" + pagename + ".html"))
    extra = "".join(
        f'<meta {kind}="{key}" content="{html.escape(value, quote=True)}" />\n'
        for kind, key, value in tags
    )
    context["metatags"] = context.get("metatags", "") + extra


_CITATION = re.compile(
    r'(<div class="citation" id="(?P<id>[^"]+)" role="doc-biblioentry">.*?)(</div>)', re.S
)


def _backrefs(app, pagename, templatename, context, doctree):
    """Add "Cited in: 2, 4, 8" under each bibliography entry, linking to each first citation."""
    if "body" not in context or 'role="doc-biblioentry"' not in context["body"]:
        return
    domain = app.env.get_domain("cite")
    key_of_id = {c.citation_id: c.key for c in domain.citations}
    first: dict[str, dict[str, str]] = {}  # key -> {docname: citation_ref_id}
    for ref in domain.citation_refs:
        for target in ref.targets:
            first.setdefault(target.key, {}).setdefault(ref.docname, ref.citation_ref_id)
    builder = app.builder

    def label(docname: str) -> str:
        number = app.env.toc_secnumbers.get(docname, {}).get("")
        if number:
            return ".".join(map(str, number))
        return re.sub(r"<[^>]+>", "", str(app.env.titles[docname].astext()))

    def add(match: re.Match) -> str:
        key = key_of_id.get(match.group("id"))
        docs = first.get(key, {}) if key else {}
        if not docs:
            return match.group(0)
        ranked = sorted(
            docs, key=lambda d: (app.env.toc_secnumbers.get(d, {}).get("") or (999,), d)
        )
        links = ", ".join(
            f'<a href="{builder.get_relative_uri(pagename, d)}#{docs[d]}" '
            f'title="{html.escape(app.env.titles[d].astext(), quote=True)}">'
            f"{html.escape(label(d))}</a>"
            for d in ranked
        )
        note = f'<p class="attnbook-backrefs">Cited in {links}</p>\n'
        return match.group(1) + note + match.group(3)

    context["body"] = _CITATION.sub(add, context["body"])


def _ship_only_what_pages_load(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    shutil.copyfile(
        Path(__file__).with_name("fontawesome_stub.js"), static / "scripts" / "fontawesome.js"
    )
    for path in [*static.rglob("*.map"), *static.glob("vendor/fontawesome/webfonts/*.ttf")]:
        path.unlink()


def setup(app):
    app.connect("html-page-context", _drop_thebe)
    app.connect("html-page-context", _meta_tags)
    app.connect("html-page-context", _backrefs)
    app.connect("build-finished", _ship_only_what_pages_load)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
