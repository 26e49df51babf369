"""Online softmax: merge is exact for any split, and tiled attention equals attention."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.overrides import TorchFunctionMode

from attnbook.attention import attention, softmax
from attnbook.masks import causal_mask
from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge, tiled_attention

NEG_INF = float("-inf")


def qkv(tq, tk, *, b=2, h=3, dk=8, dv=5, dtype=torch.float64):
    return (
        torch.randn(b, h, tq, dk, dtype=dtype),
        torch.randn(b, h, tk, dk, dtype=dtype),
        torch.randn(b, h, tk, dv, dtype=dtype),
    )


# --- tiled attention ---------------------------------------------------------------------------

SHAPES = [  # (Tq, Tk, block_size): blocks that divide Tk, that do not, and one bigger than Tk
    (13, 13, 4),
    (13, 13, 13),
    (5, 17, 4),
    (1, 9, 2),
    (6, 30, 7),
    (4, 3, 128),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("tq", "tk", "block_size"), SHAPES)
def test_tiled_matches_attention_and_sdpa(tq, tk, block_size, causal):
    q, k, v = qkv(tq, tk)
    tiled = tiled_attention(q, k, v, block_size=block_size, causal=causal)
    mask = causal_mask(tq, tk) if causal else None
    torch.testing.assert_close(tiled, attention(q, k, v, mask))
    if tq <= tk:  # otherwise some rows have no key, where SDPA's output is not specified
        torch.testing.assert_close(tiled, sdpa(q, k, v, attn_mask=mask))


def test_tiled_float32_and_custom_scale():
    q, k, v = qkv(6, 11, dtype=torch.float32)
    expected = sdpa(q, k, v, scale=0.7)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=3, scale=0.7), expected)


def test_tiled_causal_with_more_queries_than_keys_has_zero_rows():
    q, k, v = qkv(5, 3)
    out = tiled_attention(q, k, v, block_size=2, causal=True)
    assert torch.all(out[..., :2, :] == 0) and not out.isnan().any()
    torch.testing.assert_close(out, attention(q, k, v, causal_mask(5, 3)))


def test_tiled_with_no_keys_is_zero():
    q, k, v = qkv(4, 0)
    assert torch.equal(tiled_attention(q, k, v), torch.zeros(2, 3, 4, 5, dtype=torch.float64))


def test_tiled_never_builds_a_score_matrix_wider_than_a_block():
    tq, tk, block_size = 5, 37, 8
    q, k, v = qkv(tq, tk, dk=3, dv=2)

    class RecordShapes(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.shapes = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if isinstance(result, torch.Tensor):
                self.shapes.append(tuple(result.shape))
            return result

    with RecordShapes() as recorder:
        tiled_attention(q, k, v, block_size=block_size, causal=True)
    assert (2, 3, tq, block_size) in recorder.shapes  # the score blocks were seen ...
    assert all(tk not in shape for shape in recorder.shapes)  # ... and nothing Tk wide


# --- block_state, merge and finalize --------------------------------------------------------------


def test_single_block_state_finalizes_to_softmax_times_values():
    scores = torch.randn(2, 4, 6, dtype=torch.float64)
    values = torch.randn(2, 6, 3, dtype=torch.float64)
    state = block_state(scores, values)
    torch.testing.assert_close(state.m, scores.amax(-1))
    torch.testing.assert_close(finalize(state), softmax(scores) @ values)


def test_fully_masked_block_is_the_identity_of_merge():
    scores = torch.randn(3, 4, dtype=torch.float64)
    values = torch.randn(4, 2, dtype=torch.float64)
    masked = block_state(torch.full((3, 5), NEG_INF, dtype=torch.float64), values.new_ones(5, 2))
    assert torch.all(masked.m == NEG_INF) and torch.all(masked.l == 0) and torch.all(masked.u == 0)
    state = block_state(scores, values)
    for merged in (merge(state, masked), merge(masked, state)):
        assert all(torch.equal(x, y) for x, y in zip(merged, state, strict=True))
    both_masked = merge(masked, masked)
    assert not any(x.isnan().any() for x in both_masked)
    assert torch.equal(finalize(both_masked), torch.zeros(3, 2, dtype=torch.float64))


def test_rows_masked_in_one_block_only():
    scores = torch.randn(2, 6, dtype=torch.float64)
    scores[0, :3] = NEG_INF  # row 0 sees nothing in the first block
    scores[1, :] = NEG_INF  # row 1 sees nothing at all
    values = torch.randn(6, 4, dtype=torch.float64)
    state = merge(block_state(scores[:, :3], values[:3]), block_state(scores[:, 3:], values[3:]))
    out = finalize(state)
    torch.testing.assert_close(out, softmax(scores) @ values)
    assert torch.equal(out[1], torch.zeros(4, dtype=torch.float64))


def test_finalize_gives_zero_rows_where_l_is_zero():
    state = SoftmaxState(
        m=torch.tensor([0.0, NEG_INF]), l=torch.tensor([2.0, 0.0]), u=torch.tensor([[4.0], [0.0]])
    )
    assert torch.equal(finalize(state), torch.tensor([[2.0], [0.0]]))


@given(
    seed=st.integers(0, 2**31 - 1),
    tk=st.integers(1, 12),
    data=st.data(),
)
def test_merge_is_exact_for_any_split_order_and_grouping(seed, tk, data):
    g = torch.Generator().manual_seed(seed)
    scores = 4 * torch.randn(3, tk, dtype=torch.float64, generator=g)
    scores[torch.rand(3, tk, generator=g) < 0.3] = NEG_INF  # some forbidden keys
    values = torch.randn(tk, 2, dtype=torch.float64, generator=g)

    cuts = sorted(data.draw(st.sets(st.integers(1, tk - 1), max_size=tk - 1)) if tk > 1 else [])
    edges = [0, *cuts, tk]
    states = [block_state(scores[:, a:b], values[a:b]) for a, b in itertools.pairwise(edges)]
    states = data.draw(st.permutations(states))
    while len(states) > 1:  # merge a random neighbouring pair until one state is left
        i = data.draw(st.integers(0, len(states) - 2))
        states[i : i + 2] = [merge(states[i], states[i + 1])]

    whole = block_state(scores, values)
    assert torch.equal(states[0].m, whole.m)  # the max does not depend on the grouping
    torch.testing.assert_close(states[0].l, whole.l)
    torch.testing.assert_close(states[0].u, whole.u)
    torch.testing.assert_close(finalize(states[0]), softmax(scores) @ values)
    assert not finalize(states[0]).isnan().any()


# --- edge sizes and 16-bit inputs -------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tk", [0, 5])
def test_tiled_with_no_queries_is_empty(causal, tk):
    q, k, v = qkv(0, tk)
    out = tiled_attention(q, k, v, block_size=2, causal=causal)
    assert torch.equal(out, torch.zeros(2, 3, 0, 5, dtype=torch.float64))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tiled_with_no_keys_gives_zero_gradients_like_sdpa(causal):
    q, k, v = (x.requires_grad_() for x in qkv(4, 0, dtype=torch.float32))
    grads = torch.autograd.grad(tiled_attention(q, k, v, causal=causal).sum(), (q, k, v))
    expected = torch.autograd.grad(sdpa(q, k, v).sum(), (q, k, v))
    for ours, theirs in zip(grads, expected, strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("magnitude", [1, 300, 3000])
def test_tiled_16bit_is_finite_and_as_accurate_as_sdpa(dtype, magnitude):
    g = torch.Generator().manual_seed(magnitude)
    q, k = torch.randn(1, 2, 9, 64, generator=g), torch.randn(1, 2, 9, 64, generator=g)
    q[..., 0], k[..., 0] = magnitude, magnitude / 3
    v = torch.randn(1, 2, 9, 16, generator=g)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    exact = attention(q.double(), k.double(), v.double(), causal_mask(9))
    ours = tiled_attention(q, k, v, block_size=4, causal=True)
    assert ours.dtype == dtype and torch.isfinite(ours).all()
    sdpa_error = (sdpa(q, k, v, is_causal=True).double() - exact).abs().max().item()
    assert (ours.double() - exact).abs().max().item() <= 1.5 * sdpa_error + 1e-6


def test_tiled_on_meta_tensors():
    q = torch.empty(2, 3, 5, 8, device="meta")
    out = tiled_attention(q, q, q[..., :4], block_size=2, causal=True)
    assert out.is_meta and out.shape == (2, 3, 5, 4)
