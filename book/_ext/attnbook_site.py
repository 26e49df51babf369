"""Site tweaks for the book that Jupyter Book 1.x has no setting for.

* Drop sphinx-thebe's scripts. Jupyter Book always loads the extension, even with
  ``launch_buttons.thebe: false``; its inline configuration is added twice, which throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page, and it names a CDN.
  The book offers Colab, Binder and JupyterLab instead of in-page execution.
* Drop the ipywidgets state that myst-nb embeds when a notebook was saved with it: the site
  shows each widget's own HTML + JavaScript face and loads no widget manager to read it.
* Link previews: a ``description`` and Open Graph tags on every page, from the page's title
  and first paragraph.
* References link back to where each work is cited (sphinxcontrib-bibtex lists each entry
  once, without back-links).
* Replace the theme's 1.49 MB Font Awesome script (SVG-with-JS, the whole icon library) with
  ``fontawesome_stub.js``: the theme's stylesheet already draws every icon it uses with the
  icon web font it ships. (book/_static cannot carry it: html_static_path copies skip
  ``scripts/**``, one of the book's exclude_patterns.)
* Launch buttons open the release the chapters install ``attnbook`` from: Colab's and
  Binder's links name the tag ``v<version>`` (``pyproject.toml``), the ref each chapter's
  set-up cell installs from, instead of a branch that moves on after the release.
* Download -> .ipynb gives the reader's notebook, ``notebooks/NN_name.ipynb`` (outputs,
  plain markdown, answers folded: what Lab and Colab open), instead of the theme's copy of
  the build's own unexecuted reading of the MyST source.
* The introduction's PDF link: the PDF is printed by ``make pdf`` (``scripts/build_pdf.py``,
  which links it locally once written); a build without it links the published copy, so a
  reader of a plain ``make book`` never meets a 404.
* One viewport tag per page (three templates each wrote one).
* TeX in a bibliography entry ("$O(n^2)$") is shown as text ("O(n²)"), not raw.
* Ship nothing a page does not load: source maps (one of them for the replaced script) and
  the icon fonts' TrueType copies (every browser that runs the theme takes the WOFF2 ones);
  the icon fonts and the theme's icon rules are cut to the icons the site uses, and the
  theme's stylesheets to the rules whose classes occur in the site; figures are stored as
  256-colour PNGs.
"""

from __future__ import annotations

import html
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes

DESCRIPTION_CHARS = 160


def release_ref(root: Path) -> str:
    """The git ref of the release this tree is (``v`` + pyproject's version): the tag the
    publishing workflow deploys and each chapter's set-up cell installs from."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    return "v" + re.search(r'^version = "([^"]+)"', text, re.M)[1]


def _launch_release(app, config):
    options = dict(config.html_theme_options or {})
    options["repository_branch"] = release_ref(Path(app.srcdir))
    config.html_theme_options = options


def _readers_notebooks(outdir: Path, srcdir: Path) -> int:
    """Put each chapter's own ``.ipynb`` where the page's download button points."""
    copied = 0
    for target in (outdir / "_sources").rglob("*.ipynb"):
        rel = target.relative_to(outdir / "_sources")
        source = srcdir / rel
        if source.exists() and source.with_suffix(".md").exists():
            shutil.copyfile(source, target)
            copied += 1
    return copied


PDF_NAME = "attention-and-transformers.pdf"
_PDF_LINK = re.compile(r'(<a class="attnbook-pdf"[^>]*?)href="[^"]*"')


def published_site(srcdir: Path) -> str:
    sys.path.insert(0, str(srcdir / "scripts"))
    try:
        import yaml
        from portable import site_url
    finally:
        sys.path.pop(0)
    return site_url(yaml.safe_load((srcdir / "_config.yml").read_text(encoding="utf-8")))


def link_pdf(outdir: Path, srcdir: Path) -> str | None:
    """Point the introduction's PDF link at this build's PDF if it has one, else at the
    published copy; returns the link written (None: no intro page or no link on it)."""
    intro = outdir / "book" / "intro.html"
    if not intro.exists():
        return None
    text = intro.read_text(encoding="utf-8")
    local = (outdir / PDF_NAME).exists()
    href = f"../{PDF_NAME}" if local else published_site(srcdir) + PDF_NAME
    new, found = _PDF_LINK.subn(lambda m: f'{m.group(1)}href="{href}"', text)
    if not found:
        return None
    if new != text:
        temporary = intro.with_suffix(".html.tmp")
        temporary.write_text(new, encoding="utf-8")
        temporary.replace(intro)  # a reader (or a test) never sees half a page
    return href


_VIEWPORT = re.compile(r'\s*<meta name="viewport"[^>]*>')


def _one_viewport_tag(outdir: Path) -> None:
    """Keep the first of the three viewport tags Sphinx's, pydata's and the book theme's
    templates each write into every page's head."""
    for path in outdir.rglob("*.html"):
        if "_static" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        tags = list(_VIEWPORT.finditer(text))
        if len(tags) < 2:
            continue
        kept = text[: tags[0].end()]
        last = tags[0].end()
        for tag in tags[1:]:
            kept += text[last : tag.start()]
            last = tag.end()
        path.write_text(kept + text[last:], encoding="utf-8")


_SUPERSCRIPTS = str.maketrans("0123456789+-=()n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿ")
_SUBSCRIPTS = str.maketrans("0123456789+-=()", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎")
_INLINE_TEX = re.compile(r"\$([^$]+)\$")


def _tex_as_text(tex: str) -> str | None:
    """Plain text for the simple TeX a bibliography title holds (``O(n^2)`` -> ``O(n²)``),
    or None when it needs more than scripts and braces."""

    def script(match: re.Match) -> str:
        body = match.group(2) or match.group(3)
        table = _SUPERSCRIPTS if match.group(1) == "^" else _SUBSCRIPTS
        converted = body.translate(table)
        return converted if converted != body or not body.strip() else match.group(0)

    text = re.sub(r"([_^])(?:\{([^{}]*)\}|(\w))", script, tex)
    text = text.replace("{", "").replace("}", "")
    return None if re.search(r"[\\^_]", text) else text


def _bibliography_math(app, doctree, docname):
    """A formula in a reference's title ("Self-attention does not need $O(n^2)$ memory")
    reached the page and the PDF as raw TeX: the list is rendered after MyST's math parsing.
    Each ``$...$`` in an entry becomes its plain-text reading, else a math node."""
    for citation in doctree.findall(nodes.citation):
        for text in list(citation.findall(nodes.Text)):
            source = str(text)
            if not _INLINE_TEX.search(source):
                continue
            parts, last = [], 0
            for match in _INLINE_TEX.finditer(source):
                parts.append(nodes.Text(source[last : match.start()]))
                plain = _tex_as_text(match.group(1))
                if plain is None:
                    parts.append(nodes.math(match.group(1), match.group(1)))
                    app.env.get_domain("math").data["has_equations"][docname] = True
                else:
                    parts.append(nodes.Text(plain))
                last = match.end()
            parts.append(nodes.Text(source[last:]))
            text.parent.replace(text, parts)


def _drop_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files", [])
    kept = []
    for script in scripts:
        filename = str(getattr(script, "filename", script) or "")
        attributes = getattr(script, "attributes", {})
        body = str(attributes.get("body", ""))
        if "sphinx-thebe" in filename or "THEBE_JS_URL" in body:
            continue
        if attributes.get("type") == "application/vnd.jupyter.widget-state+json":
            continue  # ipywidgets state saved with a notebook: no page has a manager to read it
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


_ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:before,?)+)\{content:"\\([0-9a-f]+)"\}')


def _trim_icons(outdir: Path) -> None:
    """Keep only the icons the site uses in the theme's stylesheet and icon fonts.

    The theme's CSS carries Font Awesome's rule for each of ~2,400 icons and the fonts carry
    every glyph (274 KB of WOFF2 on every page); the site shows about twenty. Icon names are
    collected from every page and script, their code points from the CSS rules, plus every
    code point the CSS writes elsewhere (admonition and link icons); the rest is dropped.
    """
    from fontTools import subset
    from fontTools.ttLib import TTFont

    static = outdir / "_static"
    css_path = static / "styles" / "pydata-sphinx-theme.css"
    fonts = sorted((static / "vendor" / "fontawesome" / "webfonts").glob("*.woff2"))
    if not css_path.exists() or not fonts:
        return
    sources = [*outdir.rglob("*.html"), *static.glob("*.js"), *static.glob("scripts/*.js")]
    used = set()
    for path in sources:
        used.update(re.findall(r"\bfa-[a-z0-9-]+", path.read_text(errors="ignore")))
    css = css_path.read_text()
    codepoints = set()

    def keep(match: re.Match) -> str:
        names = set(re.findall(r"fa-[a-z0-9-]+", match.group(1)))
        if names & used:
            codepoints.add(int(match.group(2), 16))
            return match.group(0)
        return ""

    trimmed = _ICON_RULE.sub(keep, css)
    codepoints.update(int(c, 16) for c in re.findall(r'"\\(f[0-9a-f]{3})"', trimmed))
    codepoints.update(ord(c) for c in re.findall("[\ue000-\uf8ff]", trimmed))  # --pst-icon-*
    css_path.write_text(trimmed)
    for font_path in fonts:
        font = TTFont(font_path)
        options = subset.Options()
        options.flavor = "woff2"
        options.layout_features = ["*"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=sorted(codepoints))
        subsetter.subset(font)
        font.flavor = "woff2"
        font.save(font_path)


# Theme stylesheets carry all of Bootstrap and of sphinx-design (about 300 KB unused). A rule
# is kept when every class its selector requires occurs somewhere in the site's pages or
# scripts (as PurgeCSS's default extractor does); classes inside :not()/:is()/:where()/:has()
# are not required. tests/test_site.py drives the pages at three widths, in both colour modes.
_PURGED = (
    "styles/pydata-sphinx-theme.css",
    "styles/sphinx-book-theme.css",
    "sphinx-design.min.css",
)
_NESTED = re.compile(r":(?:not|is|where|has)\([^()]*(?:\([^()]*\)[^()]*)*\)")


def _split_selectors(head: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in head:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _purge(css: str, tokens: set[str]) -> str:
    out, i, n = [], 0, len(css)
    while i < n:
        start = css.find("{", i)
        if start < 0:
            out.append(css[i:])
            break
        depth, end = 0, start
        while end < n:
            depth += {"{": 1, "}": -1}.get(css[end], 0)
            if depth == 0:
                break
            end += 1
        head, body = css[i:start], css[start + 1 : end]
        stripped = head.strip()
        if stripped.startswith(("@media", "@supports", "@layer", "@container")):
            inner = _purge(body, tokens)
            if inner.strip():
                out.append(f"{head}{{{inner}}}")
        elif stripped.startswith("@") or stripped.startswith("/*"):
            out.append(css[i : end + 1])
        else:
            kept = [
                selector
                for selector in _split_selectors(head)
                if all(
                    name in tokens
                    for name in re.findall(r"\.([A-Za-z_][\w-]*)", _NESTED.sub("", selector))
                )
            ]
            if kept:
                out.append(",".join(kept) + "{" + body + "}")
        i = end + 1
    return "".join(out)


def _purge_unused_css(outdir: Path) -> None:
    static = outdir / "_static"
    tokens: set[str] = set()
    for path in [*outdir.rglob("*.html"), *static.glob("*.js"), *static.glob("scripts/*.js")]:
        tokens.update(re.findall(r"[A-Za-z_][\w-]*", path.read_text(errors="ignore")))
    for name in _PURGED:
        path = static / name
        if path.exists():
            path.write_text(_purge(path.read_text(), tokens))


def _palette_pngs(outdir: Path) -> None:
    """Store each figure as a 256-colour PNG when that is smaller (typically a third).

    Plots are flat colours plus anti-aliasing; 256 colours without dithering look the same
    and make room for figures drawn at twice the pixels (sharp on hi-DPI screens) at less
    weight than the 1x RGBA PNGs matplotlib writes.
    """
    import io

    from PIL import Image

    for path in (outdir / "_images").glob("*.png"):
        raw = path.read_bytes()
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            info = {key: image.info[key] for key in ("dpi",) if key in image.info}
            if image.mode == "P":
                continue
            has_alpha = image.mode in ("RGBA", "LA") and image.getextrema()[-1][0] < 255
            if has_alpha:
                palette = image.convert("RGBA").quantize(256, method=Image.Quantize.FASTOCTREE)
            else:
                palette = image.convert("RGB").quantize(
                    256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
                )
        buffer = io.BytesIO()
        palette.save(buffer, format="PNG", optimize=True, **info)
        if buffer.tell() < len(raw):
            path.write_bytes(buffer.getvalue())


def _ship_only_what_pages_load(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    shutil.copyfile(
        Path(__file__).with_name("fontawesome_stub.js"), static / "scripts" / "fontawesome.js"
    )
    for path in [*static.rglob("*.map"), *static.glob("vendor/fontawesome/webfonts/*.ttf")]:
        path.unlink()
    _trim_icons(Path(app.outdir))
    _purge_unused_css(Path(app.outdir))
    _palette_pngs(Path(app.outdir))
    _readers_notebooks(Path(app.outdir), Path(app.srcdir))
    link_pdf(Path(app.outdir), Path(app.srcdir))
    _one_viewport_tag(Path(app.outdir))


def setup(app):
    app.connect("config-inited", _launch_release)
    app.connect("doctree-resolved", _bibliography_math)
    app.connect("html-page-context", _drop_scripts)
    app.connect("html-page-context", _meta_tags)
    app.connect("html-page-context", _backrefs)
    app.connect("build-finished", _ship_only_what_pages_load)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
