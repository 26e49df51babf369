"""Masks against hand-written cases, torch.tril, and what they mean for attention."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.attention import attention
from attnbook.masks import causal_mask, padding_mask, segment_mask, sliding_window_mask

T, F = True, False


def as_mask(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_causal_square_is_lower_triangular():
    assert torch.equal(causal_mask(3), as_mask([[T, F, F], [T, T, F], [T, T, T]]))


def test_causal_default_offset_puts_queries_at_the_end():
    # Two new tokens at positions 3 and 4 reading a cache of five keys.
    assert torch.equal(causal_mask(2, 5), as_mask([[T, T, T, T, F], [T, T, T, T, T]]))


def test_causal_explicit_offset():
    assert torch.equal(causal_mask(2, 5, offset=0), as_mask([[T, F, F, F, F], [T, T, F, F, F]]))
    assert torch.equal(causal_mask(2, 3, offset=-1), as_mask([[F, F, F], [T, F, F]]))


def test_causal_more_queries_than_keys_has_empty_rows():
    assert torch.equal(causal_mask(3, 2), as_mask([[F, F], [T, F], [T, T]]))


@given(t_q=st.integers(1, 8), t_k=st.integers(1, 8), offset=st.none() | st.integers(-9, 9))
def test_causal_matches_tril(t_q, t_k, offset):
    diagonal = t_k - t_q if offset is None else offset
    expected = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=diagonal)
    mask = causal_mask(t_q, t_k, offset=offset)
    assert mask.dtype == torch.bool and torch.equal(mask, expected)


def test_sliding_window_hand_case():
    expected = as_mask([[T, F, F, F], [T, T, F, F], [F, T, T, F], [F, F, T, T]])
    assert torch.equal(sliding_window_mask(4, window=2), expected)
    assert torch.equal(sliding_window_mask(2, 4, window=2), expected[2:])


@given(t_q=st.integers(1, 8), t_k=st.integers(1, 8), window=st.integers(1, 10))
def test_sliding_window_is_a_band_of_the_causal_mask(t_q, t_k, window):
    mask = sliding_window_mask(t_q, t_k, window=window)
    band = torch.ones(t_q, t_k, dtype=torch.bool).triu(diagonal=t_k - t_q - window + 1)
    assert torch.equal(mask, causal_mask(t_q, t_k) & band)
    assert torch.equal(sliding_window_mask(t_q, t_k, window=t_k), causal_mask(t_q, t_k))


def test_padding_mask_hand_case():
    expected = as_mask([[T, T, F, F], [F, F, F, F], [T, T, T, T]]).reshape(3, 1, 1, 4)
    assert torch.equal(padding_mask([2, 0, 4], 4), expected)
    assert torch.equal(padding_mask(torch.tensor([2, 0, 4], dtype=torch.int32), 4), expected)


def test_padding_mask_equals_dropping_the_padding():
    lengths = [5, 2, 4]
    q, k, v = (torch.randn(3, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    out = attention(q, k, v, padding_mask(lengths, 5))
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[b], attention(q[b], k[b, :, :n], v[b, :, :n]))


def test_segment_mask_hand_case():
    mask = segment_mask(torch.tensor([[7, 7, 3], [1, 2, 1]]))
    assert mask.shape == (2, 1, 3, 3)
    assert torch.equal(mask[0, 0], as_mask([[T, T, F], [T, T, F], [F, F, T]]))
    assert torch.equal(mask[1, 0], as_mask([[T, F, T], [F, T, F], [T, F, T]]))


def test_packed_causal_attention_equals_separate_sequences():
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2]])  # three documents packed in one row
    q, k, v = (torch.randn(1, 2, 8, 4, dtype=torch.float64) for _ in range(3))
    out = attention(q, k, v, segment_mask(ids) & causal_mask(8))
    for start, stop in [(0, 3), (3, 5), (5, 8)]:
        part = slice(start, stop)
        alone = attention(
            q[..., part, :], k[..., part, :], v[..., part, :], causal_mask(stop - start)
        )
        torch.testing.assert_close(out[..., part, :], alone)


def test_masks_are_built_on_the_requested_device():
    # The meta device allocates nothing, yet shows where the tensor would live.
    assert causal_mask(3, device="meta").device.type == "meta"
    assert sliding_window_mask(3, window=2, device="meta").device.type == "meta"


def test_masks_on_the_meta_device_have_shapes_only():
    # Shape-only runs (memory counting on meta tensors) build their masks there too.
    lengths = torch.tensor([2, 4], device="meta")
    mask = padding_mask(lengths, 4)
    assert mask.is_meta and mask.shape == (2, 1, 1, 4)
    assert causal_mask(3, 5, device="meta").is_meta
    assert sliding_window_mask(3, window=2, device=torch.device("meta")).shape == (3, 3)


def test_device_given_as_a_string_or_device():
    assert torch.equal(causal_mask(3, device="cpu"), causal_mask(3, device=torch.device("cpu")))


def test_left_padding_mask_hand_case():
    expected = as_mask([[F, F, T, T], [F, F, F, F], [T, T, T, T]]).reshape(3, 1, 1, 4)
    assert torch.equal(padding_mask([2, 0, 4], 4, side="left"), expected)
    assert torch.equal(padding_mask([2, 0, 4], 4, side="right"), padding_mask([2, 0, 4], 4))


@given(st.lists(st.integers(0, 7), min_size=1, max_size=5), st.integers(7, 9))
def test_left_padding_is_right_padding_reversed_along_the_keys(lengths, t):
    right, left = padding_mask(lengths, t), padding_mask(lengths, t, side="left")
    assert torch.equal(left, right.flip(-1))


def test_left_padded_attention_equals_dropping_the_padding():
    lengths = [5, 2, 4]
    q, k, v = (torch.randn(3, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    out = attention(q, k, v, padding_mask(lengths, 5, side="left") & causal_mask(5))
    for b, n in enumerate(lengths):  # the last n positions hold the sequence
        alone = attention(q[b, :, 5 - n :], k[b, :, 5 - n :], v[b, :, 5 - n :], causal_mask(n))
        torch.testing.assert_close(out[b, :, 5 - n :], alone)


def test_a_two_dimensional_padding_mask_aligns_its_batch_with_the_queries():
    # The documented trap: with B == Tq a (B, Tk) mask broadcasts without error, and applies
    # sequence i's padding to query i of every sequence, in attention as in SDPA.
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    lengths, t = [4, 2, 3, 1], 4  # B == Tq == 4
    q, k, v = (torch.randn(4, 1, t, 8, dtype=torch.float64) for _ in range(3))
    flat = padding_mask(lengths, t)[:, 0, 0]  # (B, Tk)
    wrong, right = attention(q, k, v, flat), attention(q, k, v, padding_mask(lengths, t))
    torch.testing.assert_close(wrong, sdpa(q, k, v, attn_mask=flat))
    per_query = flat[None, None]  # what the broadcast really means: (1, 1, Tq=B, Tk)
    torch.testing.assert_close(wrong, attention(q, k, v, per_query.expand(4, 1, t, t)))
    assert not torch.allclose(wrong, right)
