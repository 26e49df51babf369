"""The notebooks read the same without MyST: Colab, JupyterLab and GitHub show no raw syntax.

The ``.ipynb`` files are what readers open in Colab and JupyterLab; their markdown comes from
the MyST ``.md`` through ``scripts/portable.py``. These tests pin the conversion on hand cases,
scan every stored notebook for MyST that a plain renderer would show raw, and (once the site
is built) check that every link the conversion made lands on a real page and anchor.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from portable import LEFTOVER, Portable, glossary_anchor, site_url  # noqa: E402

P = Portable()
SITE = P.site
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))


def markdown_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


# --- the conversion, on hand cases -------------------------------------------------------------
def test_label_lines_are_dropped_and_refs_become_links_to_the_site():
    text = "(ch-masking)=\n# Masking\n\nSee {ref}`ch-deriving` and {ref}`this <notation>`."
    out = P.markdown(text)
    assert "(ch-masking)=" not in out
    assert out.startswith("# Masking")
    assert f"[Deriving self-attention]({SITE}notebooks/01_deriving_self_attention.html)" in out
    assert f"[this]({SITE}book/notation.html)" in out


def test_citations_become_author_year_links_to_the_reference_list():
    out = P.markdown("As shown {cite}`vaswani2017attention,ainslie2023gqa`.")
    refs = f"{SITE}book/references.html#cite-"
    assert out == (
        f"As shown ([Vaswani et al., 2017]({refs}vaswani2017attention); "
        f"[Ainslie et al., 2023]({refs}ainslie2023gqa))."
    )


def test_terms_link_to_their_glossary_entry():
    out = P.markdown("the {term}`KV cache` and {term}`heads <GQA>`")
    assert f"[KV cache]({SITE}book/glossary.html#term-KV-cache)" in out
    assert f"[heads]({SITE}book/glossary.html#term-GQA)" in out


def test_dropdowns_become_details_blocks_with_math_and_code_intact():
    source = "````{dropdown} Answer\n:open:\n$x^2$ and\n```python\n{ref}`kept`\n```\n````\nafter"
    out = P.markdown(source)
    assert out == (
        "<details><summary>Answer</summary>\n\n$x^2$ and\n```python\n{ref}`kept`\n```\n\n"
        "</details>\nafter"
    )


def test_unknown_targets_and_unconverted_directives_are_errors_not_raw_text():
    with pytest.raises(ValueError, match="unknown label"):
        P.markdown("{ref}`no-such-label`")
    with pytest.raises(ValueError, match="citation"):
        P.markdown("{cite}`nobody1999`")
    with pytest.raises(ValueError, match="directive"):
        P.markdown("```{note}\nhi\n```")
    with pytest.raises(ValueError, match="unclosed"):
        P.markdown("```{dropdown} Answer\nnever closed")


def test_site_url_follows_the_repository_url():
    assert site_url({"repository": {"url": "https://github.com/Me/my-book"}}) == (
        "https://me.github.io/my-book/"
    )
    with pytest.raises(ValueError, match=r"repository\.url"):
        site_url({"repository": {"url": "https://example.org/x"}})
    assert glossary_anchor("causal mask") == "term-causal-mask"


# --- every stored notebook -------------------------------------------------------------------
@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_myst_syntax_reaches_a_notebook(ipynb):
    for i, text in enumerate(markdown_cells(ipynb)):
        leftover = LEFTOVER.search(text)
        assert not leftover, f"{ipynb.name} markdown cell {i}: raw MyST {leftover.group(0)!r}"
        assert "```{" not in text and ":::" not in text, f"{ipynb.name} cell {i}: a directive"


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_prose_is_true_inside_a_notebook(ipynb):
    # Prose that only holds on the website would be wrong where the notebook is read.
    for text in markdown_cells(ipynb):
        assert not re.search(r"\bon (this|the) website\b", text, re.I), ipynb.name


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_not_a_jupytext_pair(ipynb):
    # If it were, saving it in JupyterLab would overwrite the MyST source with portable text.
    assert "jupytext" not in json.loads(ipynb.read_text())["metadata"]


@pytest.mark.parametrize("md", SOURCES, ids=[p.stem for p in SOURCES])
def test_source_is_in_jupytext_form_so_a_save_rewrites_nothing(md):
    text = md.read_text(encoding="utf-8")
    assert jupytext.writes(jupytext.reads(text, fmt="md:myst"), fmt="md:myst") == text, (
        f"{md.name} is not in jupytext's own form: run `make sync NB={md.relative_to(ROOT)}`"
    )


# --- the links land, once the site is built (runs after the book build in `make test`) --------
@pytest.mark.browser
def test_every_link_into_the_site_reaches_a_page_and_anchor():
    html = ROOT / "_build" / "html"
    if not (html / "index.html").exists():
        pytest.fail("build the site first (make book)")
    links = set()
    for ipynb in NOTEBOOKS:
        for text in markdown_cells(ipynb):
            links |= set(re.findall(re.escape(SITE) + r"[^)\s]*", text))
    assert links, "the notebooks link to the site somewhere"
    for link in sorted(links):
        parts = urlsplit(link)
        page = html / parts.path.removeprefix(urlsplit(SITE).path)
        assert page.is_file(), f"{link}: no page {page.relative_to(html)}"
        if parts.fragment:
            assert f'id="{parts.fragment}"' in page.read_text(encoding="utf-8"), (
                f"{link}: no anchor #{parts.fragment}"
            )
