"""Recomputing backward pass: gradients equal autograd's through naive attention, memory linear."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook.attention import attention
from attnbook.masks import causal_mask
from attnbook.memory import saved_bytes
from attnbook.online_softmax import tiled_attention
from attnbook.tiled_backward import recomputing_attention


def qkv(tq, tk, *, b=2, h=2, dk=4, dv=3, dtype=torch.float64, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, h, tq, dk), (b, h, tk, dk), (b, h, tk, dv)]
    if device == "meta":
        return [torch.empty(s, device="meta", dtype=dtype, requires_grad=True) for s in shapes]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def grads(fn, q, k, v, d_out):
    out = fn(q, k, v)
    return out, torch.autograd.grad(
        out, (q, k, v), d_out, allow_unused=True, materialize_grads=True
    )


SHAPES = [  # (Tq, Tk, block_size): dividing, not dividing, a single block, Tq > Tk, Tq < Tk
    (6, 6, 2),
    (7, 11, 3),
    (5, 5, 128),
    (9, 4, 3),
    (2, 13, 5),
    (1, 1, 1),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("tq", "tk", "block_size"), SHAPES)
def test_gradcheck_float64(tq, tk, block_size, causal):
    q, k, v = qkv(tq, tk, b=1)
    assert torch.autograd.gradcheck(
        lambda q, k, v: recomputing_attention(q, k, v, block_size=block_size, causal=causal),
        (q, k, v),
    )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("tq", "tk", "block_size"), SHAPES)
def test_value_and_gradients_match_autograd_through_attention(tq, tk, block_size, causal):
    q, k, v = qkv(tq, tk, seed=tq * 100 + tk)
    mask = causal_mask(tq, tk) if causal else None
    d_out = torch.randn(2, 2, tq, 3, dtype=torch.float64)
    ours, ours_g = grads(
        lambda q, k, v: recomputing_attention(q, k, v, block_size=block_size, causal=causal),
        q,
        k,
        v,
        d_out,
    )
    ref, ref_g = grads(lambda q, k, v: attention(q, k, v, mask), q, k, v, d_out)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(ours_g, ref_g, strict=True):
        torch.testing.assert_close(a, b)
    if tq <= tk or not causal:  # otherwise some rows have no key, which SDPA leaves unspecified
        fused, fused_g = grads(lambda q, k, v: sdpa(q, k, v, attn_mask=mask), q, k, v, d_out)
        torch.testing.assert_close(ours, fused)
        for a, b in zip(ours_g, fused_g, strict=True):
            torch.testing.assert_close(a, b)


@settings(max_examples=40, deadline=None)
@given(
    tq=st.integers(1, 12),
    tk=st.integers(1, 12),
    block_size=st.integers(1, 14),
    causal=st.booleans(),
    dk=st.integers(1, 5),
    dv=st.integers(1, 5),
    scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_agree_with_attention(tq, tk, block_size, causal, dk, dv, scale, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, tq, dk, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, tk, dk, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, tk, dv, generator=g, dtype=torch.float64, requires_grad=True)
    d_out = torch.randn(1, 2, tq, dv, generator=g, dtype=torch.float64)
    mask = causal_mask(tq, tk) if causal else None
    ours, ours_g = grads(
        lambda q, k, v: recomputing_attention(
            q, k, v, block_size=block_size, causal=causal, scale=scale
        ),
        q,
        k,
        v,
        d_out,
    )
    ref, ref_g = grads(lambda q, k, v: attention(q, k, v, mask, scale=scale), q, k, v, d_out)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(ours_g, ref_g, strict=True):
        torch.testing.assert_close(a, b)


def test_float32_and_rank_two_inputs():
    q, k, v = (x.detach().float()[0, 0].requires_grad_() for x in qkv(6, 9))  # (T, d)
    d_out = torch.randn(6, 3)
    ours, ours_g = grads(
        lambda q, k, v: recomputing_attention(q, k, v, block_size=4), q, k, v, d_out
    )
    ref, ref_g = grads(sdpa, q, k, v, d_out)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(ours_g, ref_g, strict=True):
        torch.testing.assert_close(a, b)


def test_rows_without_keys_give_zero_output_and_zero_gradients():
    q, k, v = qkv(5, 2)  # causal with Tq > Tk: the first three queries see no key
    out = recomputing_attention(q, k, v, block_size=1, causal=True)
    assert torch.equal(out[..., :3, :], torch.zeros_like(out[..., :3, :]))
    (d_q,) = torch.autograd.grad(out.sum(), (q,))
    assert torch.equal(d_q[..., :3, :], torch.zeros_like(d_q[..., :3, :]))
    assert torch.isfinite(d_q).all()


def test_no_keys_and_no_queries():
    q, k, v = qkv(4, 0)
    out = recomputing_attention(q, k, v)
    assert torch.equal(out, torch.zeros(2, 2, 4, 3, dtype=torch.float64))
    d_q, d_k, d_v = torch.autograd.grad(out.sum(), (q, k, v))
    assert torch.equal(d_q, torch.zeros_like(q)) and d_k.shape == k.shape and d_v.shape == v.shape
    q, k, v = qkv(0, 5)
    out = recomputing_attention(q, k, v, causal=True)
    assert out.shape == (2, 2, 0, 3)
    d_q, d_k, d_v = torch.autograd.grad(out.sum(), (q, k, v))
    assert torch.equal(d_k, torch.zeros_like(k)) and torch.equal(d_v, torch.zeros_like(v))


def test_forward_equals_tiled_attention_and_works_without_grad():
    q, k, v = (x.detach() for x in qkv(7, 10))
    with torch.no_grad():
        ours = recomputing_attention(q, k, v, block_size=3, causal=True)
    torch.testing.assert_close(ours, tiled_attention(q, k, v, block_size=3, causal=True))
    assert not ours.requires_grad


def test_second_derivatives_are_refused():
    q, k, v = qkv(3, 3)
    weight = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    out = recomputing_attention(q, k, v)
    (d_q,) = torch.autograd.grad((out * weight).sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        d_q.sum().backward()


# --- memory saved for the backward pass -------------------------------------------------------


def test_saved_bytes_hand_cases():
    x = torch.ones(1000, requires_grad=True)
    assert saved_bytes(torch.exp, x) == 4000  # exp saves its result, a new tensor
    assert saved_bytes(torch.sin, x) == 0  # sin saves its input, which the caller holds
    assert saved_bytes(torch.exp, x.detach()) == 0  # nothing requires grad: nothing saved
    with pytest.raises(TypeError, match="fn"):
        saved_bytes("exp", x)


def test_saves_only_output_and_log_sum_exp():
    q, k, v = qkv(64, 96, device="meta", dtype=torch.float32)
    # (B, H, Tq, dv) output and (B, H, Tq) log-sum-exp, float32
    assert saved_bytes(recomputing_attention, q, k, v) == 2 * 2 * 64 * (3 + 1) * 4


@pytest.mark.slow
def test_saved_memory_is_linear_where_naive_and_tiled_are_quadratic():
    def saved(fn, n):
        q, k, v = qkv(n, n, b=1, h=1, dk=64, dv=64, dtype=torch.float32, device="meta")
        return saved_bytes(fn, q, k, v)

    ns = (1024, 2048, 4096, 8192, 16384)
    ours = [saved(recomputing_attention, n) for n in ns]
    naive = [saved(attention, n) for n in ns]
    tiled = [saved(tiled_attention, n) for n in ns]
    assert ours == [n * (64 + 1) * 4 for n in ns]  # exactly linear: output plus lse
    for a, b in itertools.pairwise(naive):
        assert 3.9 < b / a <= 4.0
    assert tiled[-1] > naive[-1]  # tiling the forward alone saves nothing for training
    assert ours[-1] <= 0.02 * naive[-1]


def test_bad_arguments_are_named():
    q, k, v = qkv(3, 4)
    with pytest.raises(ValueError, match="block_size"):
        recomputing_attention(q, k, v, block_size=0)
    with pytest.raises(TypeError, match="causal"):
        recomputing_attention(q, k, v, causal="yes")
    with pytest.raises(TypeError, match="scale"):
        recomputing_attention(q, k, v, scale="big")
    with pytest.raises(TypeError, match="dtype"):
        recomputing_attention(q, k.float(), v)
    with pytest.raises(ValueError, match="heads must divide"):
        recomputing_attention(q[:, :1].expand(-1, 3, -1, -1), k, v)  # 3 query heads, 2 kv heads
    with pytest.raises(ValueError, match="query_block_size must be >= 1"):
        recomputing_attention(q, k, v, query_block_size=0)
    with pytest.raises(TypeError, match=r"mask must have .*bool"):
        recomputing_attention(q, k, v, torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"mask of shape .* does not broadcast"):
        recomputing_attention(q, k, v, torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="dk"):
        recomputing_attention(q, k[..., :2], v)
    with pytest.raises(TypeError, match="q"):
        recomputing_attention([[1.0]], k, v)
