"""attention() against PyTorch's scaled_dot_product_attention and against its own invariants."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook.attention import attention, softmax
from attnbook.masks import causal_mask, padding_mask

TOL = {torch.float64: {"atol": 1e-12, "rtol": 1e-12}, torch.float32: {"atol": 1e-5, "rtol": 1e-5}}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])


def qkv(b=2, hq=4, hkv=4, tq=5, tk=5, dk=8, dv=8, dtype=torch.float64, generator=None):
    """Random q ``(b, hq, tq, dk)``, k ``(b, hkv, tk, dk)``, v ``(b, hkv, tk, dv)``."""
    q = torch.randn(b, hq, tq, dk, dtype=dtype, generator=generator)
    k = torch.randn(b, hkv, tk, dk, dtype=dtype, generator=generator)
    v = torch.randn(b, hkv, tk, dv, dtype=dtype, generator=generator)
    return q, k, v


# --- agreement with SDPA ------------------------------------------------------------------


@DTYPES
def test_matches_sdpa_without_mask(dtype):
    q, k, v = qkv(dtype=dtype, dv=3)
    torch.testing.assert_close(attention(q, k, v), sdpa(q, k, v), **TOL[dtype])


@DTYPES
def test_matches_sdpa_causal(dtype):
    q, k, v = qkv(tq=7, tk=7, dtype=dtype)
    expected = sdpa(q, k, v, is_causal=True)
    torch.testing.assert_close(attention(q, k, v, causal_mask(7)), expected, **TOL[dtype])


@DTYPES
def test_matches_sdpa_with_random_bool_mask(dtype):
    q, k, v = qkv(tq=6, tk=9, dtype=dtype)
    mask = torch.rand(2, 4, 6, 9) < 0.6
    mask[..., 0] = True  # every row keeps a key, so SDPA's output is defined everywhere
    expected = sdpa(q, k, v, attn_mask=mask)
    torch.testing.assert_close(attention(q, k, v, mask), expected, **TOL[dtype])


@DTYPES
def test_matches_sdpa_with_padding(dtype):
    q, k, v = qkv(b=3, tq=6, tk=6, dtype=dtype)
    mask = padding_mask([6, 3, 1], 6) & causal_mask(6)  # (3, 1, 6, 6)
    expected = sdpa(q, k, v, attn_mask=mask)
    torch.testing.assert_close(attention(q, k, v, mask), expected, **TOL[dtype])


@DTYPES
@pytest.mark.parametrize(("hq", "hkv"), [(4, 2), (6, 2), (3, 1), (4, 4)])
def test_matches_sdpa_grouped_query(dtype, hq, hkv):
    q, k, v = qkv(hq=hq, hkv=hkv, tq=5, tk=8, dv=6, dtype=dtype)
    mask = causal_mask(5, 8)
    expected = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(attention(q, k, v, mask), expected, **TOL[dtype])


@DTYPES
@pytest.mark.parametrize(("tq", "tk"), [(1, 9), (4, 9), (9, 9)])
def test_default_causal_offset_is_sdpas_lower_right(dtype, tq, tk):
    q, k, v = qkv(tq=tq, tk=tk, dtype=dtype)
    expected = sdpa(q, k, v, attn_mask=causal_lower_right(tq, tk))
    torch.testing.assert_close(attention(q, k, v, causal_mask(tq, tk)), expected, **TOL[dtype])


@DTYPES
def test_matches_sdpa_cross_attention_with_scale(dtype):
    q, k, v = qkv(tq=3, tk=11, dk=5, dv=2, dtype=dtype)
    expected = sdpa(q, k, v, scale=0.3)
    torch.testing.assert_close(attention(q, k, v, scale=0.3), expected, **TOL[dtype])


def test_rank_two_inputs_are_one_head():
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    torch.testing.assert_close(attention(q, k, v), sdpa(q, k, v))


def test_default_scale_is_inverse_sqrt_dk():
    q, k, v = qkv(dk=16)
    torch.testing.assert_close(attention(q, k, v), attention(q, k, v, scale=1 / math.sqrt(16)))
    assert not torch.allclose(attention(q, k, v), attention(q, k, v, scale=1.0))


# --- the weights ---------------------------------------------------------------------------


def test_weights_match_hand_computed_softmax():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # (Tq=1, dk=2)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    v = torch.eye(3, dtype=torch.float64)
    out, weights = attention(q, k, v, scale=1.0, return_weights=True)
    e = math.e
    expected = torch.tensor([[e, 1.0, 1 / e]], dtype=torch.float64) / (e + 1 + 1 / e)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected)  # v = I reads the weights back out


def test_weights_rows_sum_to_one_and_forbidden_are_exactly_zero():
    q, k, v = qkv(tq=6, tk=7)
    mask = torch.rand(2, 4, 6, 7) < 0.5
    mask[..., 2] = True
    out, weights = attention(q, k, v, mask, return_weights=True)
    assert weights.shape == (2, 4, 6, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(out, weights @ v)


def test_grouped_query_head_h_reads_kv_head_h_div_group():
    q, k, v = qkv(hq=6, hkv=2)
    out = attention(q, k, v)
    for h in range(6):
        torch.testing.assert_close(out[:, h], attention(q[:, h], k[:, h // 3], v[:, h // 3]))


# --- rows with no allowed key -----------------------------------------------------------------


def test_empty_rows_give_zero_output_and_weights():
    q, k, v = qkv(tq=4, tk=5)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    mask[3] = False
    out, weights = attention(q, k, v, mask, return_weights=True)
    assert not out.isnan().any() and not weights.isnan().any()
    assert torch.all(out[..., [1, 3], :] == 0) and torch.all(weights[..., [1, 3], :] == 0)
    torch.testing.assert_close(out[..., [0, 2], :], attention(q[..., [0, 2], :], k, v))


def test_causal_mask_with_more_queries_than_keys_gives_zero_rows():
    q, k, v = qkv(tq=5, tk=3)
    out = attention(q, k, v, causal_mask(5, 3))  # queries at positions -2 .. 2
    assert torch.all(out[..., :2, :] == 0)
    assert torch.all(out[..., 2:, :].abs().sum(-1) > 0)


def test_no_keys_at_all_gives_zeros():
    q, k, v = qkv(tk=0, dv=3)
    out, weights = attention(q, k, v, return_weights=True)
    assert out.shape == (2, 4, 5, 3) and weights.shape == (2, 4, 5, 0)
    assert torch.all(out == 0)


def test_gradients_stay_finite_through_empty_rows():
    q, k, v = (t.requires_grad_() for t in qkv(tq=3, tk=4))
    mask = torch.tensor([[True] * 4, [False] * 4, [True, False, False, False]])
    attention(q, k, v, mask).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_softmax_turns_all_minus_inf_row_into_zeros():
    scores = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])
    torch.testing.assert_close(softmax(scores), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))


def test_softmax_is_stable_for_huge_scores():
    scores = torch.tensor([1000.0, 1000.0, -1000.0])
    torch.testing.assert_close(softmax(scores), torch.tensor([0.5, 0.5, 0.0]))


def test_masked_keys_and_values_do_not_matter():
    q, k, v = qkv(tq=4, tk=6)
    mask = torch.ones(6, dtype=torch.bool)
    mask[[1, 4]] = False  # (Tk,) broadcasts to (..., Tq, Tk)
    k2, v2 = k.clone(), v.clone()
    k2[..., [1, 4], :] = 1e3 * torch.randn(2, 4, 2, 8, dtype=torch.float64)
    v2[..., [1, 4], :] = 1e3 * torch.randn(2, 4, 2, 8, dtype=torch.float64)
    assert torch.equal(attention(q, k, v, mask), attention(q, k2, v2, mask))


def test_cached_decoding_matches_full_causal_pass():
    q, k, v = qkv(tq=10, tk=10)
    full = attention(q, k, v, causal_mask(10))
    for new in (1, 3):
        latest = attention(q[..., -new:, :], k, v, causal_mask(new, 10))
        torch.testing.assert_close(latest, full[..., -new:, :])


# --- properties ------------------------------------------------------------------------------

small = st.integers(1, 5)


@given(seed=st.integers(0, 2**31 - 1), tq=small, tk=small, dk=small)
def test_adding_a_vector_to_every_key_changes_nothing(seed, tq, tk, dk):
    # q . (k_j + w) = q . k_j + q . w: a per-row constant, which softmax ignores.
    g = torch.Generator().manual_seed(seed)
    q, k, v = qkv(b=1, hq=2, hkv=2, tq=tq, tk=tk, dk=dk, dv=3, generator=g)
    w = 5 * torch.randn(dk, dtype=torch.float64, generator=g)
    torch.testing.assert_close(attention(q, k + w, v), attention(q, k, v))


@given(seed=st.integers(0, 2**31 - 1), shape=st.lists(small, min_size=1, max_size=3))
def test_softmax_ignores_a_per_row_shift(seed, shape):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(*shape, dtype=torch.float64, generator=g)
    shift = 100 * torch.randn(*shape[:-1], 1, dtype=torch.float64, generator=g)
    torch.testing.assert_close(softmax(scores + shift), softmax(scores))
    torch.testing.assert_close(softmax(scores).sum(-1), torch.ones(shape[:-1], dtype=torch.float64))


@given(seed=st.integers(0, 2**31 - 1), tq=small, tk=small)
def test_permutation_equivariance(seed, tq, tk):
    g = torch.Generator().manual_seed(seed)
    q, k, v = qkv(b=1, hq=2, hkv=2, tq=tq, tk=tk, dk=4, dv=3, generator=g)
    pq, pk = torch.randperm(tq, generator=g), torch.randperm(tk, generator=g)
    out = attention(q, k, v)
    # Reordering the queries reorders the rows; reordering the key/value pairs changes nothing.
    torch.testing.assert_close(attention(q[..., pq, :], k, v), out[..., pq, :])
    torch.testing.assert_close(attention(q, k[..., pk, :], v[..., pk, :]), out)


@given(seed=st.integers(0, 2**31 - 1), tq=small, tk=small, density=st.floats(0.0, 1.0))
def test_weights_are_a_distribution_or_zero(seed, tq, tk, density):
    g = torch.Generator().manual_seed(seed)
    q, k, v = qkv(b=1, hq=1, hkv=1, tq=tq, tk=tk, dk=3, dv=2, generator=g)
    mask = torch.rand(tq, tk, generator=g) < density
    out, weights = attention(q, k, v, mask, return_weights=True)
    row_sums = weights.sum(-1)[0, 0]  # (Tq,)
    expected = mask.any(-1).to(torch.float64)
    torch.testing.assert_close(row_sums, expected)
    assert torch.all(weights[0, 0][~mask] == 0) and not out.isnan().any()


# --- 16-bit inputs, empty key sets and meta tensors -------------------------------------------

HALF = pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])


@HALF
@pytest.mark.parametrize("magnitude", [1, 10, 100, 300, 1000, 3000])
def test_16bit_is_finite_and_as_accurate_as_sdpa(dtype, magnitude):
    # One large shared coordinate pushes the raw scores q . k (magnitude**2 / 3) far past
    # float16's 65504 from magnitude 300 on; SDPA stays finite there, and so must attention.
    g = torch.Generator().manual_seed(magnitude)
    q = torch.randn(2, 3, 16, 64, generator=g)
    k = torch.randn(2, 3, 16, 64, generator=g)
    q[..., 0], k[..., 0] = magnitude, magnitude / 3
    v = torch.randn(2, 3, 16, 32, generator=g)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    exact = attention(q.double(), k.double(), v.double())  # the answer for these 16-bit inputs

    ours, weights = attention(q, k, v, return_weights=True)
    assert ours.dtype == weights.dtype == dtype and torch.isfinite(ours).all()
    ours_error = (ours.double() - exact).abs().max().item()
    sdpa_error = (sdpa(q, k, v).double() - exact).abs().max().item()
    assert ours_error <= 1.5 * sdpa_error + 1e-6


@HALF
def test_16bit_self_attention_of_the_issue_does_not_overflow(dtype):
    q = torch.randn(1, 1, 4, 64).to(dtype)
    q[..., 0] = 300  # q @ q^T is about 90,000 > 65504 before scaling
    out = attention(q, q, q)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), sdpa(q, q, q).float(), atol=2e-2, rtol=2e-2)


def test_float32_path_is_unchanged_by_the_16bit_path():
    # float32 and float64 are computed as before (q @ k^T, then the scale), bit for bit.
    q, k, v = qkv(dtype=torch.float32, dk=8)
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(8))
    assert torch.equal(attention(q, k, v), softmax(scores) @ v)


@HALF
def test_16bit_softmax_sums_to_one_in_its_dtype(dtype):
    scores = (30 * torch.randn(4, 100)).to(dtype)
    p = softmax(scores)
    assert p.dtype == dtype
    torch.testing.assert_close(p, torch.softmax(scores.float(), -1).to(dtype))  # dtype's tol


@pytest.mark.parametrize("with_mask", [False, True])
def test_no_keys_gives_zero_gradients_like_sdpa(with_mask):
    q = torch.randn(2, 3, 4, 8, requires_grad=True)
    k = torch.randn(2, 3, 0, 8, requires_grad=True)
    v = torch.randn(2, 3, 0, 5, requires_grad=True)
    mask = torch.ones(4, 0, dtype=torch.bool) if with_mask else None
    grads = torch.autograd.grad(attention(q, k, v, mask).sum(), (q, k, v))
    expected = torch.autograd.grad(sdpa(q, k, v).sum(), (q, k, v))
    for ours, theirs in zip(grads, expected, strict=True):
        assert torch.equal(ours, theirs)
    assert torch.equal(grads[0], torch.zeros_like(q))


def test_softmax_of_an_empty_axis_stays_in_the_graph():
    scores = torch.randn(3, 0, requires_grad=True)
    (grad,) = torch.autograd.grad(softmax(scores).sum(), scores)
    assert grad.shape == (3, 0)


def test_meta_tensors_give_shapes_without_data():
    q = torch.empty(2, 4, 5, 8, device="meta")
    k = torch.empty(2, 2, 7, 8, device="meta")
    v = torch.empty(2, 2, 7, 3, device="meta")
    out, weights = attention(q, k, v, causal_mask(5, 7, device="meta"), return_weights=True)
    assert out.is_meta and out.shape == (2, 4, 5, 3) and weights.shape == (2, 4, 5, 7)
    assert attention(q.half(), k.half(), v.half()).dtype == torch.float16


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_softmax_along_any_valid_dim(dim):
    scores = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(softmax(scores, dim), torch.softmax(scores, dim))


# --- additive float masks (ALiBi, Hugging Face's eager masks) ------------------------------


@DTYPES
def test_float_mask_matches_sdpa_float_attn_mask(dtype):
    q, k, v = qkv(tq=6, tk=9, dtype=dtype)
    bias = torch.randn(2, 4, 6, 9, dtype=dtype)
    expected = sdpa(q, k, v, attn_mask=bias)
    torch.testing.assert_close(attention(q, k, v, bias), expected, **TOL[dtype])


@DTYPES
def test_alibi_biases_match_sdpa(dtype):
    heads, t = 4, 7
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)], dtype=dtype)
    distance = torch.arange(t)[None, :] - torch.arange(t)[:, None]  # j - i
    alibi = slopes[:, None, None] * distance.to(dtype)  # (H, T, T)
    alibi = alibi.masked_fill(~causal_mask(t), float("-inf"))
    q, k, v = qkv(tq=t, tk=t, dtype=dtype)
    torch.testing.assert_close(attention(q, k, v, alibi), sdpa(q, k, v, attn_mask=alibi),
                               **TOL[dtype])  # fmt: skip


def test_minus_inf_float_mask_equals_the_bool_mask_bit_for_bit():
    q, k, v = qkv(tq=6, tk=6, dtype=torch.float32)
    mask = padding_mask([6, 3], 6) & causal_mask(6)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    assert torch.equal(attention(q, k, v, additive), attention(q, k, v, mask))


def test_finfo_min_rows_average_every_key_as_hugging_face_eager_does():
    q, k, v = qkv(b=1, hq=1, hkv=1, tq=2, tk=5, dtype=torch.float32)
    low = torch.finfo(torch.float32).min
    additive = torch.tensor([[0.0, 0.0, low, low, low], [low] * 5])  # row 1: no allowed key
    out = attention(q, k, v, additive)
    torch.testing.assert_close(out[0, 0, 1], v[0, 0].mean(0))  # uniform over all 5 keys
    as_bool = attention(q, k, v, additive == 0)
    torch.testing.assert_close(out[0, 0, 0], as_bool[0, 0, 0])
    assert torch.equal(as_bool[0, 0, 1], torch.zeros(8))  # the bool convention: zeros


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_inputs_take_a_float_mask_in_float32(dtype):
    q, k, v = (x.to(dtype) for x in qkv(tq=5, tk=5, dtype=torch.float32))
    bias = torch.randn(5, 5).to(dtype)
    out = attention(q, k, v, bias)
    expected = attention(q.float(), k.float(), v.float(), bias.float()).to(dtype)
    assert out.dtype == dtype and torch.equal(out, expected)
