"""The rolling cache gives the keys a sliding-window mask allows, in a buffer of fixed size."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook.masks import sliding_window_mask
from attnbook.rolling_cache import RollingKVCache
from attnbook.rope import apply_rope


@given(window=st.integers(1, 12), t=st.integers(1, 30))
def test_decoding_with_the_rolling_cache_equals_masked_full_attention(window, t):
    g = torch.Generator().manual_seed(window * 100 + t)
    q, k, v = (torch.randn(2, 3, t, 4, dtype=torch.float64, generator=g) for _ in range(3))
    full = sdpa(q, k, v, attn_mask=sliding_window_mask(t, window=window))  # (2, 3, t, 4)
    cache = RollingKVCache(window=window, batch=2, kv_heads=3, head_dim=4, dtype=torch.float64)
    sizes = set()
    for i in range(t):
        keys, values, positions = cache.append(k[:, :, i : i + 1], v[:, :, i : i + 1])
        assert sorted(positions.tolist()) == list(range(max(0, i + 1 - window), i + 1))
        torch.testing.assert_close(keys, k[:, :, positions])  # each slot holds its position
        out = sdpa(q[:, :, i : i + 1], keys, values)
        torch.testing.assert_close(out, full[:, :, i : i + 1])
        sizes.add(cache.nbytes)
    assert sizes == {2 * 2 * 3 * window * 4 * 8}  # fixed, whatever the length


def test_keys_rotated_at_absolute_positions_survive_the_wrap_and_slot_positions_do_not():
    t, w = 30, 6
    g = torch.Generator().manual_seed(1)
    q_raw, k_raw, v = (torch.randn(1, 2, t, 8, dtype=torch.float64, generator=g) for _ in range(3))
    q, k = apply_rope(q_raw, torch.arange(t)), apply_rope(k_raw, torch.arange(t))
    full = sdpa(q, k, v, attn_mask=sliding_window_mask(t, window=w))  # RoPE, then the mask
    rotated, raw = (
        RollingKVCache(window=w, batch=1, kv_heads=2, head_dim=8, dtype=torch.float64)
        for _ in range(2)
    )
    wrong_steps = 0
    for i in range(t):
        keys, values, _ = rotated.append(k[:, :, i : i + 1], v[:, :, i : i + 1])
        torch.testing.assert_close(sdpa(q[:, :, i : i + 1], keys, values), full[:, :, i : i + 1])
        # the mistake: cache un-rotated keys and rotate them (and the query) by slot index
        keys, values, _ = raw.append(k_raw[:, :, i : i + 1], v[:, :, i : i + 1])
        slot_q = apply_rope(q_raw[:, :, i : i + 1], torch.tensor([i % w]))
        out = sdpa(slot_q, apply_rope(keys, torch.arange(keys.shape[2])), values)
        wrong_steps += bool((out - full[:, :, i : i + 1]).abs().max() > 1e-6)
    assert wrong_steps > t // 2  # wrong once the buffer wraps out of position order


def test_without_the_window_the_answer_differs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 20, 4, dtype=torch.float64, generator=g) for _ in range(3))
    cache = RollingKVCache(window=5, batch=1, kv_heads=1, head_dim=4, dtype=torch.float64)
    for i in range(20):
        keys, values, _ = cache.append(k[:, :, i : i + 1], v[:, :, i : i + 1])
    causal = sdpa(q[:, :, -1:], k, v)  # full causal attention at the last position
    assert (sdpa(q[:, :, -1:], keys, values) - causal).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: RollingKVCache(window=0, batch=1, kv_heads=1, head_dim=2), ValueError, "window"),
        (lambda: RollingKVCache(window=2, batch=1, kv_heads=1, head_dim=2.0), TypeError, "head_d"),
        (lambda: RollingKVCache(window=2, batch=1, kv_heads=1, head_dim=2, dtype=torch.int64),
         TypeError, "dtype"),
    ],
)  # fmt: skip
def test_bad_sizes_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bad_appends_are_named():
    cache = RollingKVCache(window=3, batch=1, kv_heads=2, head_dim=4)
    ok = torch.zeros(1, 2, 1, 4)
    with pytest.raises(ValueError, match="k must have shape"):
        cache.append(torch.zeros(1, 2, 2, 4), ok)
    with pytest.raises(TypeError, match="v must have the cache's dtype"):
        cache.append(ok, ok.double())
    assert cache.length == 0  # a rejected append changes nothing
