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
  256-colour PNGs; the search index only on the search page (``search_as_you_type`` is off).
* Figures in dark mode: each figure also gets a dark rendering (``_dark_figures``), shown
  instead of the light one when the theme is dark. Only the paper and the neutral ink are
  recoloured: white turns into the page's dark background, black and grey ink (text, axes,
  neutral lines) into the text colour, while coloured ink keeps its hue and its place in a
  colour scale (viridis stays dark-to-bright, so "the bright diagonal" stays true).
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


# The dark theme's page background and text colour (sphinx-book-theme's --pst-color-background
# and pydata-sphinx-theme's --pst-color-text-base in dark mode).
DARK_PAPER, DARK_INK = (0x12, 0x12, 0x12), (0xCE, 0xD6, 0xDD)
NEUTRAL_CHROMA, CHROMA_RAMP = 24.0, 40.0  # ink this grey or greyer counts as neutral
PAPER_FROM, PAPER_RAMP = 128.0, 64.0  # a coloured pixel lighter than this is partly paper
GROUND_RADIUS, GROUND_SHARE = 12, 0.55  # neutral ink on coloured ground is left alone


def dark_colours(rgb, on_colour=None):
    """Map colours ``(..., 3)`` (0-255) of a figure drawn on white to its dark rendering.

    Each colour is read as ink of opacity ``a = 1 - min(rgb) / 255`` on white paper, with
    ink ``(rgb - min(rgb)) / a`` (GIMP's "colour to alpha"). Neutral ink (chroma below
    ``NEUTRAL_CHROMA``: text, axes, black and grey lines) becomes the dark theme's text
    colour at that opacity on the dark paper: white turns into the paper, black into the
    text colour, grey stays a grey. Coloured ink keeps its colour: a colour whose lightest
    channel is at most ``PAPER_FROM`` (every colour of viridis, every Okabe-Ito colour) is
    kept exactly, so a heatmap and its colour bar are unchanged; lighter colours lose their
    white over a ramp of ``PAPER_RAMP``, fully from ``PAPER_FROM + PAPER_RAMP`` on, so a
    faded line (a quarter of its colour or less) sits on the dark paper without a light
    halo, while a pixel half covered by a line keeps its light tint. Between neutral and
    coloured ink the two rules blend over a chroma ramp of ``CHROMA_RAMP``. Where
    ``on_colour`` (a boolean array of the leading shape) is true, a colour is kept as it is:
    numbers printed on a heatmap's cells keep their contrast with the cells.
    """
    import numpy as np

    rgb = np.asarray(rgb, dtype=np.float32)
    low = rgb.min(axis=-1, keepdims=True)
    alpha = (255.0 - low) / 255.0
    chroma = (rgb.max(axis=-1, keepdims=True) - low) / np.maximum(alpha, 1e-12)
    paper, ink = np.asarray(DARK_PAPER, np.float32), np.asarray(DARK_INK, np.float32)
    neutral = alpha * ink + (1 - alpha) * paper
    white = np.clip((low - PAPER_FROM) / PAPER_RAMP, 0, 1) * low / 255.0  # paper's share
    coloured = rgb - white * (255.0 - paper)
    weight = np.clip((chroma - NEUTRAL_CHROMA) / CHROMA_RAMP, 0, 1)
    if on_colour is not None:
        weight = np.where(np.asarray(on_colour)[..., None], 1.0, weight)
        coloured = np.where(np.asarray(on_colour)[..., None], rgb, coloured)
    out = weight * coloured + (1 - weight) * neutral
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def coloured_ground(rgb):
    """Pixels ``(H, W)`` that lie on a coloured area: at least ``GROUND_SHARE`` of the
    ``(2 GROUND_RADIUS + 1)``-pixel square around them is coloured ink that
    ``dark_colours`` keeps exactly (a heatmap's cells, a colour bar, a wide bar)."""
    import numpy as np

    rgb = np.asarray(rgb, dtype=np.float32)
    low, high = rgb.min(axis=-1), rgb.max(axis=-1)
    solid = (low <= PAPER_FROM) & (high - low >= NEUTRAL_CHROMA + CHROMA_RAMP)
    r = GROUND_RADIUS
    padded = np.pad(solid.astype(np.float32), r + 1)
    sums = padded.cumsum(0).cumsum(1)
    h, w = solid.shape
    k = 2 * r + 1
    box = sums[k : k + h, k : k + w] - sums[:h, k : k + w] - sums[k : k + h, :w] + sums[:h, :w]
    return box / k**2 >= GROUND_SHARE


def dark_image(image):
    """The dark rendering of a PIL image of a figure (see ``dark_colours``)."""
    import numpy as np
    from PIL import Image

    rgba = np.asarray(image.convert("RGBA"), dtype=np.float32)
    alpha = rgba[..., 3:] / 255.0
    on_white = rgba[..., :3] * alpha + 255.0 * (1 - alpha)  # as the light page shows it
    return Image.fromarray(dark_colours(on_white, coloured_ground(on_white)), "RGB")


DARK_SUFFIX = ".dark.png"
_FIGURE_IMG = re.compile(
    r'<img (?P<head>[^>]*?)src="(?P<src>(?:\.\./)*_images/[^"/]+?)\.png"'
    r"(?P<tail>[^>]*?)\s*/?>"
)


DARK_MEDIA = "(prefers-color-scheme: dark)"  # book/_static/attnbook.js follows the theme


def _dark_figures(outdir: Path) -> int:
    """Write ``X.dark.png`` beside each figure ``_images/X.png`` and show it in dark mode.

    Each figure's ``<img>`` is wrapped in a ``<picture>`` whose ``<source
    class="attnbook-dark">`` names the dark rendering for a dark colour scheme;
    ``attnbook.js`` points that source at the theme's own choice (the reader's toggle), so
    the browser fetches one of the two. One ``<img>`` and one alt text per figure; without
    JavaScript the figure follows the system's scheme. Returns the pages changed."""
    import io

    from PIL import Image

    for path in (outdir / "_images").glob("*.png"):
        if path.name.endswith(DARK_SUFFIX):
            continue
        target = path.with_name(path.stem + DARK_SUFFIX)
        if target.exists() and target.stat().st_mtime >= path.stat().st_mtime:
            continue
        with Image.open(path) as image:
            image.load()
            info = {key: image.info[key] for key in ("dpi",) if key in image.info}
            dark = dark_image(image)
        dark = dark.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        buffer = io.BytesIO()
        dark.save(buffer, format="PNG", optimize=True, **info)  # 256 colours, as the light
        target.write_bytes(buffer.getvalue())

    def wrap(match: re.Match) -> str:
        source = (
            f'<source class="attnbook-dark" srcset="{match["src"]}{DARK_SUFFIX}" '
            f'media="{DARK_MEDIA}" />'
        )
        return f"<picture>{source}{match[0]}</picture>"

    changed = 0
    for page in outdir.rglob("*.html"):
        if "_static" in page.parts:
            continue
        text = page.read_text(encoding="utf-8")
        if 'class="attnbook-dark"' in text:  # done in an earlier build (pages not rewritten)
            continue
        new = _FIGURE_IMG.sub(wrap, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed += 1
    return changed


_SEARCH_SCRIPTS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)'
    r'[^"]*"></script>'
)


def _search_index_on_the_search_page_only(outdir: Path, as_you_type: bool) -> None:
    """pydata-sphinx-theme loads Sphinx's search scripts and the whole search index
    (searchindex.js, about 140 KB and growing with every page) on every page, for its
    search-as-you-type box. With that option off, as here, only the search page uses them:
    every other page's search box submits to it."""
    if as_you_type:
        return
    for path in outdir.rglob("*.html"):
        if "_static" in path.parts or path.name == "search.html":
            continue
        text = path.read_text(encoding="utf-8")
        new = _SEARCH_SCRIPTS.sub("", text)
        if new != text:
            path.write_text(new, encoding="utf-8")


_BLOCK_COMMENT = re.compile(r"^[ \t]*/\*.*?\*/[ \t]*\n", re.S | re.M)


def _strip_comments(static: Path) -> None:
    """Ship the book's own script and stylesheet without their comment blocks (those that
    start a line): every page loads both, and the comments are for their readers here."""
    for name in ("attnbook.js", "attnbook.css"):
        path = static / name
        if path.exists():
            path.write_text(_BLOCK_COMMENT.sub("", path.read_text(encoding="utf-8")))


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
    _strip_comments(static)
    as_you_type = str((app.config.html_theme_options or {}).get("search_as_you_type", False))
    _search_index_on_the_search_page_only(Path(app.outdir), as_you_type.lower() == "true")
    _palette_pngs(Path(app.outdir))
    _dark_figures(Path(app.outdir))
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
