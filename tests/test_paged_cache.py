"""The paged cache returns what a contiguous cache holds, from blocks anywhere in the pool."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.kv_cache import KVCache
from attnbook.paged_cache import PagedKVCache


@given(
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7)), min_size=1, max_size=25),
    block_size=st.integers(1, 6),
)
def test_interleaved_appends_gather_what_contiguous_caches_hold(steps, block_size):
    g = torch.Generator().manual_seed(len(steps) * 10 + block_size)
    paged = PagedKVCache(blocks=200, block_size=block_size, kv_heads=2, head_dim=3)
    contiguous = {s: KVCache(layers=1, batch=1, kv_heads=2, head_dim=3, max_positions=200)
                  for s in range(4)}  # fmt: skip
    for seq, new in steps:  # sequences grow in turns, so their blocks interleave in the pool
        k, v = torch.randn(2, 2, new, 3, generator=g)
        paged.append(seq, k, v)
        keys, values = contiguous[seq].append(0, k[None], v[None])
        got_k, got_v = paged.gather(seq)
        assert torch.equal(got_k, keys[0]) and torch.equal(got_v, values[0])  # a copy, exact
    used = sum(len(t) for t in paged.block_tables.values())
    assert used + len(paged.free_blocks) == 200
    assert used == sum(-(-n // block_size) for n in paged.lengths.values())
    assert paged.unused_slots() == used * block_size - sum(paged.lengths.values())
    assert all(len(t) * block_size - paged.lengths[s] < block_size or paged.lengths[s] == 0
               for s, t in paged.block_tables.items())  # fmt: skip


def test_freed_blocks_are_reused_and_tables_need_not_be_contiguous():
    paged = PagedKVCache(blocks=6, block_size=2, kv_heads=1, head_dim=1)
    one = torch.ones(1, 1, 1)
    for _ in range(2):  # "a" and "b" take turns: a gets blocks 0, 2; b gets 1, 3
        paged.append("a", one, one)
        paged.append("a", one, one)
        paged.append("b", 2 * one, 2 * one)
        paged.append("b", 2 * one, 2 * one)
    assert paged.block_tables == {"a": [0, 2], "b": [1, 3]}
    assert paged.free("a") == 2 and paged.free_blocks == [0, 2, 4, 5]
    paged.append("c", torch.arange(5.0).view(1, 5, 1), torch.zeros(1, 5, 1))
    assert paged.block_tables["c"] == [0, 2, 4]
    assert paged.gather("c")[0].flatten().tolist() == [0, 1, 2, 3, 4]
    assert paged.gather("b")[0].flatten().tolist() == [2, 2, 2, 2]  # untouched by c


def test_blocks_are_allocated_on_demand_so_only_the_last_is_partial():
    g = torch.Generator().manual_seed(2)
    lengths = torch.randint(1, 60, (40,), generator=g)
    block = 8
    pool = PagedKVCache(blocks=400, block_size=block, kv_heads=1, head_dim=1)
    for seq, n in enumerate(lengths.tolist()):
        for part in (n // 3, n - n // 3):  # a prompt, then the rest, one append each
            pool.append(seq, torch.zeros(1, part, 1), torch.zeros(1, part, 1))
        assert len(pool.block_tables[seq]) == -(-n // block)  # ceil: no block held in advance
    expected = int((-(-lengths // block) * block - lengths).sum())  # last blocks' empty slots
    assert pool.unused_slots() == expected
    assert len(pool.free_blocks) == 400 - int((-(-lengths // block)).sum())


def test_a_full_pool_refuses_and_writes_nothing():
    paged = PagedKVCache(blocks=2, block_size=4, kv_heads=1, head_dim=2)
    paged.append(0, torch.zeros(1, 5, 2), torch.zeros(1, 5, 2))
    with pytest.raises(ValueError, match="needs 1 more blocks but the pool has 0 free of 2"):
        paged.append(1, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    assert 1 not in paged.lengths and paged.lengths[0] == 5


def test_bad_input_is_named():
    paged = PagedKVCache(blocks=2, block_size=4, kv_heads=1, head_dim=2)
    with pytest.raises(ValueError, match="k must have shape"):
        paged.append(0, torch.zeros(2, 1, 2), torch.zeros(2, 1, 2))
    with pytest.raises(TypeError, match="v must have the pool's dtype"):
        paged.append(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2, dtype=torch.float64))
    with pytest.raises(KeyError, match="no sequence 7"):
        paged.gather(7)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        PagedKVCache(blocks=2, block_size=0, kv_heads=1, head_dim=2)
    with pytest.raises(TypeError, match="unhashable"):
        paged.append([0], torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
