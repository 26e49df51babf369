"""The site build takes every chapter's stored outputs (scripts/prime_cache.py).

jupyter-cache keys a notebook by its code cells' source and metadata. If the notebook filed
for a chapter did not hash like the one the build reads from the ``.md``, the build would
silently execute the chapter again (the slow path this script exists to avoid).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import prime_cache  # noqa: E402


def test_every_chapter_in_sync_is_found_by_the_build(tmp_path, monkeypatch):
    from jupyter_cache import get_cache

    monkeypatch.setattr(prime_cache, "CACHE", tmp_path / "cache")
    assert prime_cache.prime() == 0
    cache = get_cache(str(tmp_path / "cache"))
    for md in prime_cache.chapters():
        record = cache.match_cache_notebook(prime_cache.as_built(md))  # KeyError: a miss
        assert record.data[prime_cache.MARK] == md.with_suffix(".ipynb").name
    assert prime_cache.verify() == 0


def test_a_chapter_edited_without_sync_is_left_to_the_build(tmp_path, monkeypatch):
    md = tmp_path / "notebooks" / "01_x.md"
    md.parent.mkdir()
    source = (ROOT / "notebooks" / "01_deriving_self_attention.md").read_text()
    md.write_text(source + "\n```{code-cell} ipython3\n1 + 1\n```\n")
    (md.with_suffix(".ipynb")).write_bytes(
        (ROOT / "notebooks" / "01_deriving_self_attention.ipynb").read_bytes()
    )
    assert prime_cache.with_stored_outputs(md) is None
    monkeypatch.setattr(prime_cache, "ROOT", tmp_path)
    monkeypatch.setattr(prime_cache, "CACHE", tmp_path / "cache")
    prime_cache.prime()
    assert prime_cache.verify() == 1  # the build would have to execute it
