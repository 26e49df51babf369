"""RMSNorm against torch.nn.RMSNorm, plus the properties that define it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attnbook.norm import RMSNorm


@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    d=st.integers(1, 16),
    eps=st.sampled_from([1e-6, 1e-5, 0.1]),
    seed=st.integers(0, 2**16),
)
def test_matches_torch_rmsnorm(lead, d, eps, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, d, generator=gen)
    ours, theirs = RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(d, generator=gen))
        theirs.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), theirs(x))


def test_gradients_match_torch_rmsnorm():
    x = torch.randn(3, 5, 8, requires_grad=True)
    ours, theirs = RMSNorm(8), nn.RMSNorm(8, eps=1e-6)
    grads = [torch.autograd.grad(norm(x).pow(3).sum(), (x, norm.weight)) for norm in (ours, theirs)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@given(scale=st.floats(1e-2, 1e3), seed=st.integers(0, 2**16))
def test_output_ignores_the_input_scale(scale, seed):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    norm = RMSNorm(6, eps=1e-12).double()
    torch.testing.assert_close(norm(scale * x), norm(x))


def test_fresh_norm_gives_unit_root_mean_square_and_zero_stays_zero():
    norm = RMSNorm(32)
    y = norm(torch.randn(5, 32) * 7)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(5), rtol=1e-5, atol=1e-5)
    zeros = norm(torch.zeros(2, 32))
    assert torch.equal(zeros, torch.zeros(2, 32))
    assert sum(p.numel() for p in norm.parameters()) == 32  # a gain, no bias


@pytest.mark.parametrize(("scale", "dtype"), [(1e20, torch.float32), (300.0, torch.float16)])
def test_extreme_scales_are_normalised_not_zeroed(scale, dtype):
    """Squaring 1e20 overflows float32 and squaring 300 overflows float16; a plain
    x * rsqrt(mean(x**2) + eps) would return zeros for both."""
    x = torch.randn(3, 16).to(dtype) * scale
    expected = RMSNorm(16, eps=1e-12).double()(x.double())
    got = RMSNorm(16, eps=1e-12)(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("scale", [1e-30, 1e-40])  # 1e-40 is subnormal in float32
def test_tiny_inputs_keep_their_exact_output(scale):
    """For a tiny x the output is x / sqrt(eps), as torch.nn.RMSNorm computes it; dividing by
    max |x| first would overflow eps / max|x|**2 and return zeros."""
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0)) * scale
    expected = x.double() / 1e-6**0.5  # mean(x^2) is negligible next to eps
    got = RMSNorm(16, eps=1e-6)(x)
    assert (got != 0).all()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=0.0)
    torch.testing.assert_close(got, nn.RMSNorm(16, eps=1e-6)(x))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: RMSNorm(0), ValueError, "d must be >= 1"),
        (lambda: RMSNorm(4.0), TypeError, "d must be an int"),
        (lambda: RMSNorm(4, eps=0.0), ValueError, "eps must be > 0"),
        (lambda: RMSNorm(4)(torch.zeros(2, 5)), ValueError, r"d=4 features, got shape \(2, 5\)"),
        (lambda: RMSNorm(4)(torch.zeros(2, 4, dtype=torch.long)), TypeError, "x must have"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
