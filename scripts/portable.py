"""MyST markdown -> markdown that every notebook front end renders (JupyterLab, Colab, GitHub).

The chapters are written in MyST (``notebooks/*.md``): the site build checks every
cross-reference and citation. A notebook front end without a MyST extension shows that syntax
raw, and Colab cannot load extensions at all. ``make sync`` therefore writes each ``.ipynb``
with its markdown cells passed through :func:`Portable.markdown`:

==========================================  ===============================================
MyST in the ``.md``                           plain markdown in the ``.ipynb``
==========================================  ===============================================
``(ch-masking)=`` (a label line)              dropped
``{ref}`ch-masking``, ``{ref}`text <lbl>``    a link to that page of the published site
``{doc}`path``                                the same
``{cite}`key1,key2``                          "(Author et al., 2017; ...)" linking to the
                                              site's reference list
``{term}`KV cache``                           a link to the glossary entry
````` ```{dropdown} Answer ... ``` `````      ``<details><summary>Answer</summary>`` with
                                              the body between blank lines (math renders)
==========================================  ===============================================

Anything else MyST-only is an error here, so a new construct cannot slip into the notebooks
unconverted (``tests/test_portable.py`` also scans every stored ``.ipynb``).

The published site's address comes from the one repository URL in ``_config.yml``
(GitHub Pages: ``https://OWNER.github.io/REPO/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

ROLE = re.compile(r"\{(ref|doc|cite|cite:p|cite:t|term)\}`([^`]+)`")
LABEL_LINE = re.compile(r"^\(([A-Za-z0-9_-]+)\)=\s*$")
FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\s*(?P<info>\S*)\s*(?P<arg>.*)$")
TITLED = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$")  # "text <target>"
# Whatever MyST syntax survives conversion; the test scans every .ipynb for these.
LEFTOVER = re.compile(r"\{[a-z:-]+\}`|^[`:]{3,}\s*\{|^\([A-Za-z0-9_-]+\)=\s*$", re.M)


def site_url(config: dict) -> str:
    """The published site's base URL, from the repository URL (GitHub Pages convention)."""
    url = config["repository"]["url"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    if not match:
        raise ValueError(f"repository.url must be https://github.com/OWNER/REPO, got {url!r}")
    owner, repo = match.groups()
    return f"https://{owner.lower()}.github.io/{repo}/"


def glossary_anchor(term: str) -> str:
    """Sphinx's id for a glossary term: 'term-' and the term with runs of other chars as '-'."""
    return "term-" + re.sub(r"[^A-Za-z0-9_.]+", "-", term.strip()).strip("-")


@dataclass
class Portable:
    """Converter bound to one repository (its pages, labels, bibliography and site URL)."""

    root: Path = ROOT

    @cached_property
    def config(self) -> dict:
        return yaml.safe_load((self.root / "_config.yml").read_text(encoding="utf-8"))

    @cached_property
    def site(self) -> str:
        return site_url(self.config)

    @cached_property
    def labels(self) -> dict[str, tuple[str, str]]:
        """label -> (page path relative to the site root, title of the heading it marks)."""
        found: dict[str, tuple[str, str]] = {}
        pages = [*self.root.glob("notebooks/*.md"), *self.root.glob("book/*.md")]
        for page in sorted(pages):
            lines = page.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                match = LABEL_LINE.match(line)
                if not match:
                    continue
                heading = next((x for x in lines[i + 1 :] if x.strip()), "")
                title = heading.lstrip("#").strip()
                found[match.group(1)] = (self._page(page), title)
        return found

    def _page(self, path: Path) -> str:
        return path.relative_to(self.root).with_suffix(".html").as_posix()

    @cached_property
    def bibliography(self) -> dict[str, str]:
        """key -> 'Author et al., Year' for every entry of book/references.bib."""
        from pybtex.database import parse_file

        data = parse_file(str(self.root / "book" / "references.bib"))
        cites = {}
        for key, entry in data.entries.items():
            people = entry.persons.get("author") or entry.persons.get("editor") or []
            names = [" ".join(p.last_names) for p in people]
            names = [re.sub(r"[{}\\]", "", n) for n in names]
            if not names:
                who = re.sub(r"[{}]", "", entry.fields.get("title", key))
            elif len(names) == 1:
                who = names[0]
            elif len(names) == 2:
                who = f"{names[0]} and {names[1]}"
            else:
                who = f"{names[0]} et al."
            cites[key] = f"{who}, {entry.fields.get('year', 'n.d.')}"
        return cites

    # --- roles ---------------------------------------------------------------------------
    def _role(self, match: re.Match) -> str:
        role, body = match.groups()
        if role.startswith("cite"):
            keys = [k.strip() for k in body.split(",")]
            unknown = [k for k in keys if k not in self.bibliography]
            if unknown:
                raise ValueError(f"unknown citation key(s) {unknown}")
            refs = self.site + "book/references.html#cite-"
            parts = "; ".join(f"[{self.bibliography[k]}]({refs}{k})" for k in keys)
            return f"({parts})"
        titled = TITLED.match(body)
        text, target = (titled["text"], titled["target"]) if titled else (None, body)
        if role == "term":
            return f"[{text or target}]({self.site}book/glossary.html#{glossary_anchor(target)})"
        if role == "doc":
            page = (target.lstrip("/") + ".html").replace(".md.html", ".html")
            return f"[{text or Path(target).name}]({self.site}{page})"
        if target not in self.labels:
            raise ValueError(f"unknown label {target!r} in {{ref}}")
        page, title = self.labels[target]
        return f"[{text or title}]({self.site}{page})"

    # --- blocks ----------------------------------------------------------------------------
    def markdown(self, text: str) -> str:
        """One markdown cell's MyST converted to portable markdown (see the module docstring)."""
        out: list[str] = []
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if LABEL_LINE.match(line):
                i += 1
                continue
            fence = FENCE.match(line)
            if fence and fence["info"].startswith("{"):
                if fence["info"] != "{dropdown}":
                    raise ValueError(f"no portable form for the directive {fence['info']}")
                end = self._closing(lines, i, fence["fence"])
                body = [x for x in lines[i + 1 : end] if not re.match(r"^:\w[\w-]*:", x)]
                summary = ROLE.sub(self._role, fence["arg"].strip() or "Answer")
                inner = self.markdown("\n".join(body)).strip("\n")
                out += [f"<details><summary>{summary}</summary>", "", inner, "", "</details>"]
                i = end + 1
                continue
            if fence:  # an ordinary code fence: copy it verbatim, roles inside stay literal
                end = self._closing(lines, i, fence["fence"])
                out += lines[i : end + 1]
                i = end + 1
                continue
            out.append(ROLE.sub(self._role, line))
            i += 1
        result = "\n".join(out).strip("\n")
        return result

    @staticmethod
    def _closing(lines: list[str], start: int, fence: str) -> int:
        char, width = fence[0], len(fence)
        for j in range(start + 1, len(lines)):
            stripped = lines[j].strip()
            if stripped and set(stripped) == {char} and len(stripped) >= width:
                return j
        raise ValueError(f"unclosed fence {fence!r} opened at line {start + 1}")
