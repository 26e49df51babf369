"""Causal linear attention: the quadratic, recurrent and chunked forms are one function."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attnbook.linear_attention import causal_linear_attention


def dense_oracle(q, k, v):
    """Written out per query, with no matrix tricks: o_t = sum_j<=t w_tj v_j / sum_j<=t w_tj."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    rows = []
    for t in range(q.shape[-2]):
        w = (fq[..., t : t + 1, :] * fk[..., : t + 1, :]).sum(-1)  # (..., t + 1)
        rows.append((w.unsqueeze(-1) * v[..., : t + 1, :]).sum(-2) / w.sum(-1, keepdim=True))
    return torch.stack(rows, dim=-2)


@given(t=st.integers(1, 25), chunk=st.integers(1, 30))
def test_three_forms_equal_the_dense_oracle(t, chunk):
    g = torch.Generator().manual_seed(t * 31 + chunk)
    q, k = (torch.randn(2, 3, t, 4, dtype=torch.float64, generator=g) for _ in range(2))
    v = torch.randn(2, 3, t, 5, dtype=torch.float64, generator=g)
    oracle = dense_oracle(q, k, v)
    for form in ("quadratic", "recurrent"):
        torch.testing.assert_close(causal_linear_attention(q, k, v, form=form), oracle)
    out = causal_linear_attention(q, k, v, form="chunked", chunk_size=chunk)
    torch.testing.assert_close(out, oracle)


def test_it_is_causal_and_not_softmax_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 12, 4, dtype=torch.float64, generator=g) for _ in range(3))
    out = causal_linear_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[..., 8:, :] += 1.0
    v2[..., 8:, :] += 1.0
    edited = causal_linear_attention(q, k2, v2)
    torch.testing.assert_close(edited[..., :8, :], out[..., :8, :])  # the past is untouched
    assert (edited[..., 8:, :] - out[..., 8:, :]).abs().max() > 1e-3  # the edit is seen
    soft = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
    assert (soft - out).abs().max() > 1e-2


def test_empty_sequence_gives_empty_output():
    q = torch.zeros(1, 2, 0, 4)
    assert causal_linear_attention(q, q, torch.zeros(1, 2, 0, 3)).shape == (1, 2, 0, 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"form": "fast"}, ValueError, "form must be"),
        ({"form": "chunked", "chunk_size": 0}, ValueError, "chunk_size must be >= 1"),
        ({"chunk_size": 1.5}, TypeError, "chunk_size must be an int"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    x = torch.zeros(1, 1, 3, 2)
    with pytest.raises(error, match=match):
        causal_linear_attention(x, x, x, **kwargs)


def test_unequal_lengths_are_rejected():
    with pytest.raises(ValueError, match="needs Tq == Tk"):
        causal_linear_attention(torch.zeros(1, 2, 4), torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
