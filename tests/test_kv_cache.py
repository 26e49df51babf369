"""The KV cache: its bytes against costs.kv_cache_bytes, its contents against torch.cat."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.costs import kv_cache_bytes
from attnbook.kv_cache import KVCache


@given(
    layers=st.integers(1, 4),
    batch=st.integers(1, 3),
    kv_heads=st.integers(1, 4),
    head_dim=st.integers(1, 8),
    positions=st.integers(1, 32),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_bytes_match_the_cost_formula(layers, batch, kv_heads, head_dim, positions, dtype):
    cache = KVCache(
        layers=layers,
        batch=batch,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_positions=positions,
        dtype=dtype,
    )
    bytes_per_element = torch.empty((), dtype=dtype).element_size()
    assert cache.nbytes == kv_cache_bytes(
        layers=layers,
        positions=positions,
        kv_heads=kv_heads,
        head_dim=head_dim,
        bytes_per_element=bytes_per_element,
        batch=batch,
    )


@given(chunks=st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_append_returns_the_concatenation_of_everything_appended(chunks):
    cache = KVCache(layers=2, batch=2, kv_heads=3, head_dim=4, max_positions=sum(chunks))
    seen_k, seen_v = [], []
    for n in chunks:
        k, v = torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4)
        seen_k.append(k)
        seen_v.append(v)
        keys, values = cache.append(0, k, v)
        assert torch.equal(keys, torch.cat(seen_k, dim=2))
        assert torch.equal(values, torch.cat(seen_v, dim=2))
    assert cache.length == 0  # layer 1 has stored nothing yet
    cache.append(1, torch.cat(seen_k, 2), torch.cat(seen_v, 2))
    assert cache.length == sum(chunks)


def test_overflow_and_mismatched_tensors_raise():
    cache = KVCache(layers=1, batch=1, kv_heads=2, head_dim=4, max_positions=3)
    cache.append(0, torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match="exceeds max_positions=3"):
        cache.append(0, torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    assert cache.length == 2  # a refused append changes nothing
    with pytest.raises(ValueError, match=r"k must have shape .*got \(1, 3, 1, 4\)"):
        cache.append(0, torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match="equal shapes"):
        cache.append(0, torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 0, 4))
    with pytest.raises(TypeError, match=r"cache's dtype torch\.float32"):
        cache.append(0, torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="layer must be < layers=1"):
        cache.append(1, torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"layers": 0}, ValueError, "layers must be >= 1"),
        ({"head_dim": 2.0}, TypeError, "head_dim must be an int"),
        ({"max_positions": 0}, ValueError, "max_positions must be >= 1"),
        ({"dtype": torch.int64}, TypeError, "dtype must be a floating"),
    ],
)
def test_bad_construction(kwargs, error, match):
    sizes = {"layers": 1, "batch": 1, "kv_heads": 1, "head_dim": 2, "max_positions": 4}
    with pytest.raises(error, match=match):
        KVCache(**{**sizes, **kwargs})
