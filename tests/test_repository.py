"""Repository contracts: one repository URL, notebooks in sync and freshly executed, a TOC
that lists every chapter, and chapter pages that follow the book's pattern."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sync_notebooks  # noqa: E402
from portable import Portable  # noqa: E402

PORTABLE = Portable()
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]


def _ids(paths):
    return [p.stem for p in paths]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 1


@pytest.mark.parametrize("md", CHAPTERS, ids=_ids(CHAPTERS))
def test_setup_cell_installs_from_the_configured_repository(md):
    nb = jupytext.read(md)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "import attnbook" in first_code.source
    # Colab installs the package from the release the site is built from (the workflow
    # publishes only tags v<version>), never from a moving branch.
    urls = re.findall(r"git\+(https://\S+?)[\"'\s]", first_code.source)
    assert urls == [f"{REPO_URL}@v{VERSION}"], (
        f"{md.name}: setup cell installs from {urls}, not {REPO_URL}@v{VERSION}"
    )
    assert "attnbook.setup(" in first_code.source, "the setup cell must fix seeds and threads"


def test_pyproject_names_the_same_repository():
    assert REPO_URL in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("md", CHAPTERS, ids=_ids(CHAPTERS))
def test_ipynb_is_in_sync_with_its_markdown_source(md):
    ipynb = md.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} is missing: run `make sync`"
    source = sync_notebooks.notebook(md, PORTABLE)  # what `make sync` writes before executing
    stored = json.loads(ipynb.read_text())
    pairs = list(zip(source.cells, stored["cells"], strict=False))
    assert len(source.cells) == len(stored["cells"]), f"{md.name}: cell count differs"
    for i, (a, b) in enumerate(pairs):
        b_source = "".join(b["source"]) if isinstance(b["source"], list) else b["source"]
        assert a.cell_type == b["cell_type"], f"{md.name} cell {i}: type differs"
        assert a.source == b_source, f"{md.name} cell {i}: source differs; run `make sync`"
        assert a.metadata.get("tags", []) == b["metadata"].get("tags", []), (
            f"{md.name} cell {i}: tags differ"
        )


@pytest.mark.parametrize("md", CHAPTERS, ids=_ids(CHAPTERS))
def test_stored_outputs_come_from_one_fresh_top_to_bottom_run(md):
    stored = json.loads(md.with_suffix(".ipynb").read_text())
    counts = [c.get("execution_count") for c in stored["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1)), f"{md.name}: execution counts {counts}"
    for cell in stored["cells"]:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", f"{md.name}: a stored output is an error"
            data = output.get("data", {})
            # a stored view would break after an open-and-save in Lab (scripts/sync_notebooks.py)
            assert "application/vnd.jupyter.widget-view+json" not in data
            assert not (
                str(data.get("text/plain", "")).startswith("<Figure size")
                and "image/png" not in data
            ), f"{md.name}: a figure was stored as text only (inline display was off)"
        assert "execution" not in cell.get("metadata", {}), "timing metadata makes noisy diffs"


def _toc_files(node) -> list[str]:
    found = []
    if isinstance(node, dict):
        if "file" in node:
            found.append(node["file"])
        for value in node.values():
            found += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += _toc_files(item)
    return found


def test_toc_lists_every_chapter_once_and_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [f for f in _toc_files(toc) if f.startswith("notebooks/")]
    assert listed == [f"notebooks/{md.stem}" for md in CHAPTERS]


@pytest.mark.parametrize("md", CHAPTERS, ids=_ids(CHAPTERS))
def test_chapter_follows_the_pattern(md):
    text = md.read_text()
    assert re.search(r"^\(ch-[a-z0-9-]+\)=\n# ", text, re.M), "a label, then the title"
    self_check = md.name.endswith("_self_check.md")  # questions and answers, no summary
    assert "## Summary" in text or self_check, f"{md.name}: no summary section"
    assert "```{dropdown}" in text or ":class: dropdown" in text, f"{md.name}: no exercises"
    for block in re.findall(r"```\{code-cell\}[^\n]*\n---\n(.*?)\n---", text, re.S):
        if "figure:" in block:
            assert "alt:" in block, f"{md.name}: a figure without alt text"
            assert "caption:" in block, f"{md.name}: a figure without a caption"


README = (ROOT / "README.md").read_text()
IGNORE_OUTPUT = "nbval-ignore-output"
VOLATILE = "volatile-output"


def test_only_training_chapters_tag_cells_and_the_readme_counts_them():
    """The one nbval marker is the tag on cells that print trained or sampled numbers (README,
    "What strict nbval tolerates"): only chapters whose claims the sweep checks may carry it,
    no cell is skipped, and the README's table counts each chapter's tagged cells. Its converse
    (an untagged cell whose text changes with the CPU path) is checked where chapters run on
    other paths: tests/test_cpu_paths.py and tests/test_colab_runtime.py."""
    swept = set(
        re.findall(r"^\| (\d\d) \| \d+ \|", (ROOT / "benchmarks/SWEEP.md").read_text(), re.M)
    )
    assert swept, "benchmarks/SWEEP.md lists no claims"
    listed = set(
        re.findall(r"^\| tag `nbval-ignore-output`[^|]*\| `([0-9]{2}_[a-z_]+)`", README, re.M)
    )
    tagged = set()
    for md in CHAPTERS:
        cells = jupytext.read(md).cells
        assert not [c for c in cells if "nbval-skip" in c.metadata.get("tags", [])], (
            f"{md.name}: a skipped cell; every cell runs"
        )
        assert not [c for c in cells if "NBVAL_" in c.source], f"{md.name}: an NBVAL_ comment"
        marked = [c for c in cells if IGNORE_OUTPUT in c.metadata.get("tags", [])]
        if not marked:
            continue
        tagged.add(md.stem)
        assert md.stem[:2] in swept, f"{md.name} tags cells but has no claims in the sweep"
        assert all(c.cell_type == "code" for c in marked), f"{md.name}: a tagged markdown cell"
        # The reason stands beside each tag, in the cell's metadata (not its code, which the
        # sweep's fingerprint hashes): what the cell prints that moves with the CPU path.
        unexplained = [
            i
            for i, c in enumerate(cells)
            if (IGNORE_OUTPUT in c.metadata.get("tags", []))
            != (len(str(c.metadata.get(VOLATILE, "")).split()) >= 5)
        ]
        assert not unexplained, (
            f"{md.name} cells {unexplained}: a tag needs its reason in '{VOLATILE}' metadata "
            "(five words or more), and only a tagged cell carries one"
        )
        row = re.search(rf"^\| tag `{IGNORE_OUTPUT}`, ([^|]+)\| `{md.stem}`", README, re.M)
        assert row, f"README's marker table does not list {md.stem}"
        count = "1 cell" if len(marked) == 1 else f"{len(marked)} cells"
        assert row.group(1).strip() == count, (
            f"README lists {md.stem} as {row.group(1)!r}, not {count}"
        )
    assert listed == tagged, (
        f"README's rows {sorted(listed)} != chapters with tags {sorted(tagged)}"
    )


def test_every_nbval_sanitizer_is_explained_in_the_readme():
    sections = re.findall(r"^\[(.+)\]$", (ROOT / "tests/nbval_sanitize.cfg").read_text(), re.M)
    assert sections
    for section in sections:
        assert section in README, f"README does not explain the sanitizer [{section}]"
