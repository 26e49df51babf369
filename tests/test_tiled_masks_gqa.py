"""Tiled and recomputing attention with query tiles, grouped-query heads and any boolean mask.

Oracles: SDPA (``enable_gqa=True``), the book's dense ``attention`` on heads repeated by hand,
autograd through it, and PyTorch's FLOP counter for the tile pairs that causal skipping
leaves.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.utils.flop_counter import FlopCounterMode

from attnbook.attention import attention
from attnbook.masks import causal_mask
from attnbook.online_softmax import tiled_attention
from attnbook.tiled_backward import recomputing_attention

FUNCTIONS = {"tiled": tiled_attention, "recomputing": recomputing_attention}


def qkv(tq, tk, *, hq=6, hkv=2, b=2, dk=8, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, hq, tq, dk, generator=g, dtype=dtype),
        torch.randn(b, hkv, tk, dk, generator=g, dtype=dtype),
        torch.randn(b, hkv, tk, dv, generator=g, dtype=dtype),
    )


def repeated(q, k, v):  # GQA by hand: kv head h // G serves query head h
    group = q.shape[-3] // k.shape[-3]
    return q, k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)


def flops(fn, *args, **kwargs):
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    ("tq", "tk", "block", "q_block"),
    [(37, 41, 7, None), (37, 41, 7, 5), (16, 16, 4, 4), (3, 20, 6, 2)],
)
def test_gqa_matches_sdpa_and_repeated_heads(name, causal, tq, tk, block, q_block):
    q, k, v = qkv(tq, tk)
    out = FUNCTIONS[name](q, k, v, block_size=block, query_block_size=q_block, causal=causal)
    mask = causal_mask(tq, tk) if causal else None
    torch.testing.assert_close(out, sdpa(q, k, v, attn_mask=mask, enable_gqa=True))
    torch.testing.assert_close(out, attention(*repeated(q, k, v), mask))
    # one query head's output must depend on its own kv head only: a control that can fail
    k2 = k.clone()
    k2[:, 1] *= 2.0  # kv head 1 serves query heads 3, 4, 5 (a shift would cancel)
    moved = FUNCTIONS[name](q, k2, v, block_size=block, query_block_size=q_block, causal=causal)
    torch.testing.assert_close(moved[:, :3], out[:, :3])
    assert (moved[:, 3:] - out[:, 3:]).abs().max() > 1e-3


MASK_SHAPES = [(37, 41), (2, 1, 37, 41), (2, 6, 37, 41), (1, 6, 1, 41)]


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("shape", MASK_SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["mask", "mask+causal"])
def test_any_boolean_mask_matches_attention(name, shape, causal):
    q, k, v = qkv(37, 41)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(shape, generator=g) < 0.4
    mask[..., 3:11] = False  # a whole key tile forbidden for some query tiles: skipped
    full = mask & causal_mask(37, 41) if causal else mask
    out = FUNCTIONS[name](q, k, v, mask, block_size=7, query_block_size=5, causal=causal)
    torch.testing.assert_close(out, attention(*repeated(q, k, v), full))
    rows_with_keys = full.expand(2, 6, 37, 41).any(-1)  # SDPA leaves empty rows unspecified
    expected = sdpa(q, k, v, attn_mask=full, enable_gqa=True)
    torch.testing.assert_close(out[rows_with_keys], expected[rows_with_keys])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_fully_masked_rows_are_zero_with_zero_gradients(name):
    q, k, v = (x.requires_grad_() for x in qkv(9, 12))
    mask = torch.ones(2, 6, 9, 12, dtype=torch.bool)
    mask[0, 4, 2] = False  # one query with no allowed key
    mask[1, :, 5:] = False  # five queries of every head in the second sequence
    out = FUNCTIONS[name](q, k, v, mask, block_size=4, query_block_size=3)
    assert torch.equal(out[0, 4, 2], torch.zeros(5, dtype=torch.float64))
    assert torch.equal(out[1, :, 5:], torch.zeros(6, 4, 5, dtype=torch.float64))
    assert out[0, 4, 1].abs().sum() > 0  # its neighbours are not zero
    d_q, *_ = torch.autograd.grad(out.sum(), (q, k, v))
    assert torch.equal(d_q[0, 4, 2], torch.zeros(8, dtype=torch.float64))
    assert not torch.isnan(d_q).any()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_block", [None, 4])
def test_recomputing_gradients_with_gqa_and_mask(causal, q_block):
    q, k, v = (x.requires_grad_() for x in qkv(10, 13, hq=4, hkv=2, b=1, dk=3, dv=2))
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(1, 4, 10, 13, generator=g) < 0.6
    full = mask & causal_mask(10, 13) if causal else mask

    def ours(q, k, v):
        return recomputing_attention(
            q, k, v, mask, block_size=3, query_block_size=q_block, causal=causal
        )

    assert torch.autograd.gradcheck(ours, (q, k, v))
    d_out = torch.randn(1, 4, 10, 2, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(ours(q, k, v), (q, k, v), d_out)
    want = torch.autograd.grad(attention(q, k, v, full), (q, k, v), d_out)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("tiles", [1, 2, 4, 8, 16])
def test_causal_tile_skipping_counts_t_plus_1_over_2t_of_dense(name, tiles):
    b, d = 8, 16
    n = tiles * b
    q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
    dense = flops(attention, q, k, v, causal_mask(n))  # every score computed, then masked
    skipped = flops(FUNCTIONS[name], q, k, v, block_size=b, query_block_size=b, causal=True)
    assert dense == 4 * n * n * d
    assert skipped * 2 * tiles == dense * (tiles + 1)  # (t + 1) / 2t of dense, exactly
    assert skipped == 2 * d * n * (n + b)
    # without query tiles nothing is skipped: every key tile holds a key the last query reads
    assert flops(FUNCTIONS[name], q, k, v, block_size=b, causal=True) == dense


def test_padding_mask_skips_the_padded_key_tiles():
    q, k, v = qkv(16, 16, hq=2, hkv=2, b=1)
    keep = torch.zeros(16, dtype=torch.bool)
    keep[:6] = True  # six real keys, ten padded ones: key tiles of 4 from index 8 hold none
    mask = keep.expand(16, 16)
    full = flops(tiled_attention, q, k, v, block_size=4)
    padded = flops(tiled_attention, q, k, v, mask, block_size=4)
    assert padded * 4 == full * 2  # two of four key tiles computed
    torch.testing.assert_close(
        tiled_attention(q, k, v, mask, block_size=4), attention(q, k, v, mask)
    )


def test_meta_mask_computes_every_tile():
    q, k, v = (torch.empty(1, 4, 32, 8, device="meta") for _ in range(3))
    mask = torch.empty(32, 32, dtype=torch.bool, device="meta")  # no values: nothing to skip
    assert flops(tiled_attention, q, k, v, mask, block_size=8) == 4 * 32 * 32 * 8 * 4
    assert tiled_attention(q, k, v, mask, block_size=8).shape == (1, 4, 32, 8)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_bfloat16_gqa_is_computed_in_float32(name):
    q, k, v = qkv(20, 20, dtype=torch.float32)
    out = FUNCTIONS[name](
        *(x.bfloat16() for x in (q, k, v)), block_size=6, query_block_size=7, causal=True
    )
    assert out.dtype == torch.bfloat16
    ref = attention(*repeated(*(x.bfloat16().float() for x in (q, k, v))), causal_mask(20))
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_query_heads_gives_an_empty_output_as_attention_does(name):
    q = torch.randn(1, 0, 3, 4, requires_grad=True)
    k, v = torch.randn(1, 2, 5, 4, requires_grad=True), torch.randn(1, 2, 5, 3, requires_grad=True)
    out = FUNCTIONS[name](q, k, v, causal=True)
    assert out.shape == attention(q, k, v).shape == (1, 0, 3, 3)
    out.sum().backward()
    assert torch.equal(k.grad, torch.zeros_like(k))
