"""The slow-memory counter: both schedules compute attention, and their traffic is what the
schedule implies (checked against closed forms and FlashAttention's Theta(n^2 d^2 / M))."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook.io_complexity import (
    FastMemory,
    flash_attention_io,
    flash_tiles,
    standard_attention_io,
)


def head(tq, tk, d=16, dv=None, seed=0, device="cpu"):
    if device == "meta":
        return tuple(torch.empty(t, w, device="meta") for t, w in ((tq, d), (tk, d), (tk, dv or d)))
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(t, w, generator=g, dtype=torch.float64)
        for t, w in ((tq, d), (tk, d), (tk, dv or d))
    )


@pytest.mark.parametrize("memory", [300, 1000, 5000])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_schedule_computes_attention(memory, causal):
    q, k, v = head(70, 90, dv=12)
    out, traffic = flash_attention_io(q, k, v, memory, causal=causal)
    mask = torch.ones(70, 90, dtype=torch.bool).tril(20) if causal else None
    torch.testing.assert_close(out, sdpa(q[None], k[None], v[None], attn_mask=mask)[0])
    assert traffic.peak <= memory
    b_r, _ = flash_tiles(16, memory, 12)
    if not causal:  # Q once, K and V once per query tile; O and the log-sum-exp written
        assert traffic.reads == 70 * 16 + 90 * (16 + 12) * math.ceil(70 / b_r)
        assert traffic.writes == 70 * (12 + 1)


def test_causal_skips_tiles_and_reads_less():
    q, k, v = head(96, 96)
    full = flash_attention_io(q, k, v, 2000)[1]
    causal = flash_attention_io(q, k, v, 2000, causal=True)[1]
    assert causal.reads < full.reads and causal.writes == full.writes


@pytest.mark.parametrize("memory", [200, 1000])
def test_standard_schedule_computes_attention_and_moves_the_scores_four_times(memory):
    q, k, v = head(50, 60, dv=8)
    out, traffic = standard_attention_io(q, k, v, memory)
    torch.testing.assert_close(out, sdpa(q[None], k[None], v[None])[0])
    assert traffic.peak <= memory
    # S written, S read, P written, P read: 4 Tq Tk, on top of the matmuls' operand reads
    assert traffic.writes == 2 * 50 * 60 + 50 * 8
    assert traffic.reads > 2 * 50 * 60


def test_meta_tensors_give_the_same_counts():
    real = [f(*head(64, 64), 1500)[1] for f in (standard_attention_io, flash_attention_io)]
    meta = [
        f(*head(64, 64, device="meta"), 1500)[1]
        for f in (standard_attention_io, flash_attention_io)
    ]
    assert real == meta


def test_flash_traffic_grows_as_n2_d2_over_m():
    d = 64
    totals = {
        (n, m): flash_attention_io(*head(n, n, d=d, device="meta"), m)[1].total
        for n in (4096, 8192)
        for m in (2**16, 2**17)
    }
    for m in (2**16, 2**17):  # doubling n: about 4x
        assert 3.4 < totals[(8192, m)] / totals[(4096, m)] < 4.01  # tiles round up
    for n in (4096, 8192):  # doubling M: about half (query tiles round up)
        assert 0.45 < totals[(n, 2**17)] / totals[(n, 2**16)] < 0.6
    constant = [t * m / (n * n * d * d) for (n, m), t in totals.items()]
    assert all(5 < c < 9 for c in constant)  # total ~ c n^2 d^2 / M


def test_fast_memory_refuses_to_overflow_and_bad_sizes_are_named():
    fast = FastMemory(10)
    fast.hold(10)
    with pytest.raises(MemoryError, match="over capacity"):
        fast.hold(1)
    with pytest.raises(ValueError, match="fast_memory"):
        flash_tiles(64, 100)
    with pytest.raises(ValueError, match="row of scores"):
        standard_attention_io(*head(8, 300), 250)
    with pytest.raises(ValueError, match="do not fit"):
        flash_attention_io(*head(8, 8)[:2], torch.zeros(7, 16, dtype=torch.float64), 1000)
    with pytest.raises(TypeError, match="causal"):
        flash_attention_io(*head(8, 8), 1000, causal="yes")
