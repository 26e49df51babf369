"""attnbook.memory against hand-counted allocations."""

from __future__ import annotations

import pytest
import torch

from attnbook.attention import attention
from attnbook.memory import AllocationCounter, peak_bytes
from attnbook.online_softmax import tiled_attention


def test_counts_temporaries_and_frees_them():
    with AllocationCounter() as counter:
        x = torch.ones(1000)  # 4000 bytes
        y = (x * 2).sum()  # a 4000-byte temporary, then a 4-byte result
        del x
    assert (counter.peak, counter.live) == (8004, 4)
    assert y.item() == 2000


def test_inputs_and_their_views_are_free():
    x = torch.ones(256)
    assert peak_bytes(lambda t: t.view(16, 16).t(), x) == 0


def test_naive_attention_holds_the_score_matrix_and_meta_matches_real():
    n, d = 256, 16
    real = [torch.randn(1, 1, n, d) for _ in range(3)]
    meta = [torch.empty(1, 1, n, d, device="meta") for _ in range(3)]
    naive_real, naive_meta = peak_bytes(attention, *real), peak_bytes(attention, *meta)
    assert naive_real == naive_meta
    assert naive_real >= n * n * 4  # at least one float32 (n, n) matrix is alive at once
    tiled = peak_bytes(lambda q, k, v: tiled_attention(q, k, v, block_size=32), *real)
    assert tiled < n * n * 4  # never a full score matrix


def test_rejects_a_non_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_bytes(42)
