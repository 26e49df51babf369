"""Freeze the book's own prose into the character-level corpus of the tiny-GPT chapter.

    python scripts/freeze_corpus.py

Writes ``src/attnbook/data/book_text.txt``: the markdown cells (prose, equations, tables; no
code) of the chapters listed in ``CHAPTERS``, in order, separated by blank lines. The file is
committed and shipped as package data, so the corpus is text this project wrote and nothing is
downloaded. It is frozen on purpose: later edits of the chapters do not change it (re-running
this script would, and would change every number the chapter asserts about its training run).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "attnbook" / "data" / "book_text.txt"
# Every chapter that existed when the corpus was frozen (the tiny-GPT chapter itself and the
# chapter on induction heads came later and are not in it).
CHAPTERS = [
    "01_deriving_self_attention",
    "02_why_sqrt_dk",
    "03_multihead_attention",
    "04_masking",
    "05_positions_and_rope",
    "06_transformer_block",
    "07_complexity_and_flops",
    "08_flash_attention",
    "09_scaling_and_vision",
    "10_lab_attention_contracts",
    "11_lab_associative_retrieval",
    "12_lab_diagnosing_a_run",
    "16_self_check",  # numbered 15 when the corpus was frozen
]


def prose(md: Path) -> str:
    """The markdown cells of one chapter, joined by blank lines."""
    cells = jupytext.read(md).cells
    return "\n\n".join(c.source.strip() for c in cells if c.cell_type == "markdown")


def main() -> int:
    parts = [prose(ROOT / "notebooks" / f"{name}.md") for name in CHAPTERS]
    text = "\n\n".join(parts) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(text):,} characters, {len(set(text))} distinct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
