"""Split-KV decoding equals SDPA for every split; its chunk states are the chunks' softmaxes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook.decoding import chunk_states, split_kv_attention


def qkv(tq, tk, *, b=2, h=3, dk=8, dv=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(tq * 1000 + tk)
    return (
        torch.randn(b, h, tq, dk, dtype=dtype, generator=g),
        torch.randn(b, h, tk, dk, dtype=dtype, generator=g),
        torch.randn(b, h, tk, dv, dtype=dtype, generator=g),
    )


@given(tk=st.integers(1, 70), data=st.data())
def test_every_split_equals_sdpa(tk, data):
    splits = data.draw(st.integers(1, tk))
    q, k, v = qkv(1, tk)
    torch.testing.assert_close(split_kv_attention(q, k, v, splits=splits), sdpa(q, k, v))


def test_several_queries_and_float32_and_a_scale():
    q, k, v = qkv(4, 33, dtype=torch.float32)
    out = split_kv_attention(q, k, v, splits=5, scale=0.3)
    torch.testing.assert_close(out, sdpa(q, k, v, scale=0.3))


def test_chunk_states_are_each_chunks_own_softmax_statistics():
    q, k, v = qkv(1, 10)
    m, l, u = chunk_states(q, k, v, splits=4)  # noqa: E741 chunks of 3, 3, 2, 2 keys
    assert m.shape == (2, 3, 4, 1) and u.shape == (2, 3, 4, 1, 5)
    bounds = [0, 3, 6, 8, 10]
    for c in range(4):
        kc, vc = k[..., bounds[c] : bounds[c + 1], :], v[..., bounds[c] : bounds[c + 1], :]
        s = q @ kc.transpose(-2, -1) / 8**0.5  # (2, 3, 1, Tc)
        torch.testing.assert_close(m[:, :, c], s.amax(-1))
        # u / l of a chunk is attention over that chunk alone
        torch.testing.assert_close(u[:, :, c] / l[:, :, c, :, None], sdpa(q, kc, vc))


def test_a_split_that_differs_from_the_oracle_is_caught():
    q, k, v = qkv(1, 12)
    _, l, u = chunk_states(q, k, v, splits=3)  # noqa: E741
    naive = (u / l[..., None]).mean(-3)  # averaging chunk outputs is wrong unless l's agree
    assert (naive - sdpa(q, k, v)).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"splits": 0}, ValueError, "splits must be >= 1"),
        ({"splits": 13}, ValueError, "splits must be <= Tk=12"),
        ({"splits": 2.0}, TypeError, "splits must be an int"),
        ({"splits": 2, "scale": "x"}, TypeError, "scale"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    q, k, v = qkv(1, 12)
    with pytest.raises(error, match=match):
        split_kv_attention(q, k, v, **kwargs)


def test_no_keys_is_rejected():
    q, k, v = qkv(1, 0)
    with pytest.raises(ValueError, match="k must hold at least one key"):
        split_kv_attention(q, k, v, splits=1)
