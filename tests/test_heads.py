"""attnbook.heads against nn.MultiheadAttention's own head layout and hand-made examples."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.attention import attention
from attnbook.heads import merge_heads, split_heads


def test_split_puts_consecutive_features_in_each_head():
    x = torch.arange(12.0).reshape(1, 2, 6)  # (B, T, d): token t has features 6t .. 6t+5
    heads = split_heads(x, 3)  # (B, H, T, 2)
    assert heads.shape == (1, 3, 2, 2)
    assert heads[0, 1].tolist() == [[2.0, 3.0], [8.0, 9.0]]  # head 1: features 2 and 3


@given(st.integers(1, 3), st.integers(1, 5), st.sampled_from([1, 2, 4]), st.integers(1, 4))
def test_merge_inverts_split(batch, tokens, heads, width):
    x = torch.randn(batch, tokens, heads * width)
    assert torch.equal(merge_heads(split_heads(x, heads)), x)


def test_matches_multihead_attention_module():
    torch.manual_seed(0)
    d, h, T = 8, 2, 5
    mha = torch.nn.MultiheadAttention(d, h, bias=False, batch_first=True)
    x = torch.randn(1, T, d)
    q, k, v = (x @ w.T for w in mha.in_proj_weight.chunk(3))  # (B, T, d) each
    ours = mha.out_proj(merge_heads(attention(*(split_heads(t, h) for t in (q, k, v)))))
    theirs, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(ours, theirs)
