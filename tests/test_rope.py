"""RoPE against hand-computed rotations and two independent implementations."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.rope import apply_rope, rope_angles, rope_attention_factor, rope_frequencies

LAYOUTS = pytest.mark.parametrize("layout", ["half", "interleaved"])


def rope_complex(x, positions, base=10000.0):
    """Interleaved RoPE as in Meta's Llama code: each pair is one complex number."""
    d = x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(positions.to(torch.float64), freqs)  # (T, d/2)
    turns = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2)


def rope_rotate_half(x, positions, base=10000.0):
    """Half-layout RoPE as in Hugging Face's Llama: x * cos + rotate_half(x) * sin."""
    d = x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(positions.to(torch.float64), freqs)
    emb = torch.cat((angles, angles), dim=-1)  # (T, d)
    rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def test_frequencies_hand_case():
    expected = torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64)
    torch.testing.assert_close(rope_frequencies(8, base=10000.0), expected)


def test_angles_are_positions_times_frequencies():
    angles = rope_angles(torch.tensor([0, 1, 5]), 4, base=100.0)
    expected = torch.tensor([[0.0, 0.0], [1.0, 0.1], [5.0, 0.5]], dtype=torch.float64)
    assert angles.dtype == torch.float64
    torch.testing.assert_close(angles, expected)


@LAYOUTS
def test_quarter_turn_per_position_makes_positions_1_and_3_orthogonal(layout):
    # With d = 4, pair 1 turns by base**(-1/2) per position: pi/4 for base = (4/pi)**2.
    base = (4 / math.pi) ** 2
    first, second = {"half": (1, 3), "interleaved": (2, 3)}[layout]  # pair 1's coordinates
    unit = torch.zeros(1, 4, dtype=torch.float64)
    unit[0, first] = 1.0
    q = apply_rope(unit, torch.tensor([1]), base=base, layout=layout)
    k = apply_rope(unit, torch.tensor([3]), base=base, layout=layout)
    assert (q @ k.T).item() == pytest.approx(0.0, abs=1e-15)  # turned apart by pi/2
    at_2 = apply_rope(unit, torch.tensor([2]), base=base, layout=layout)[0]
    expected = torch.zeros(4, dtype=torch.float64)
    expected[second] = 1.0  # (1, 0) turned by pi/2 is (0, 1)
    torch.testing.assert_close(at_2, expected)


def test_position_zero_is_identity():
    x = torch.randn(2, 3, 5, 8)
    for layout in ("half", "interleaved"):
        assert torch.equal(apply_rope(x, torch.zeros(5, dtype=torch.long), layout=layout), x)


def test_interleaved_matches_complex_multiplication():
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    positions = torch.arange(7) * 13
    expected = rope_complex(x, positions)
    torch.testing.assert_close(apply_rope(x, positions, layout="interleaved"), expected)


def test_half_matches_rotate_half_formulation():
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    positions = torch.arange(7) + 100
    torch.testing.assert_close(
        apply_rope(x, positions, base=500.0), rope_rotate_half(x, positions, 500.0)
    )


def test_layouts_differ_by_a_fixed_permutation():
    d = 12
    x = torch.randn(3, 5, d, dtype=torch.float64)
    positions = torch.arange(5)
    # perm = [0, d/2, 1, d/2 + 1, ...] moves the half-layout pair (p, p + d/2) to (2p, 2p + 1).
    perm = torch.arange(d).reshape(2, d // 2).T.flatten()
    torch.testing.assert_close(
        apply_rope(x[..., perm], positions, layout="interleaved"),
        apply_rope(x, positions, layout="half")[..., perm],
    )
    assert not torch.allclose(
        apply_rope(x, positions, layout="interleaved"), apply_rope(x, positions, layout="half")
    )


@LAYOUTS
def test_norms_are_preserved(layout):
    x = torch.randn(4, 9, 10, dtype=torch.float64)
    out = apply_rope(x, torch.arange(9) * 1000, layout=layout)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


def test_positions_broadcast_per_batch_element():
    x = torch.randn(2, 3, 6)
    positions = torch.tensor([[0, 1, 2], [10, 11, 12]])  # (B, T), e.g. left-padded batches
    out = apply_rope(x, positions)
    for b in range(2):
        torch.testing.assert_close(out[b], apply_rope(x[b], positions[b]))


@LAYOUTS
def test_float32_stays_accurate_at_large_positions(layout):
    x = torch.randn(3, 64, dtype=torch.float64)
    positions = torch.tensor([1_000_000, 1_000_001, 5_000_000])
    out32 = apply_rope(x.float(), positions, layout=layout)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32, apply_rope(x, positions, layout=layout).float())


@LAYOUTS
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.integers(0, 5000),
    n=st.integers(0, 5000),
    shift=st.integers(0, 5000),
)
def test_scores_depend_only_on_the_offset(layout, seed, m, n, shift):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 8, dtype=torch.float64, generator=g)

    def score(i, j):
        qi = apply_rope(q, torch.tensor([i]), layout=layout)
        kj = apply_rope(k, torch.tensor([j]), layout=layout)
        return (qi @ kj.T).item()

    assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-9)


# --- scaling, partial rotary and position ids: oracles that need no transformers ---


def meta_llama3_scaling(freqs, factor, low, high, context):
    """Meta's ``apply_scaling`` from the Llama 3.1 reference code, written as a loop."""
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < context / high:
            out.append(f)
        elif wavelen > context / low:
            out.append(f / factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def test_llama3_frequencies_match_metas_loop():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    plain = rope_frequencies(128, base=500000.0)
    expected = meta_llama3_scaling(plain, 8.0, 1.0, 4.0, 8192)
    torch.testing.assert_close(rope_frequencies(128, base=500000.0, scaling=scaling), expected)
    assert (expected == plain).sum() not in (0, 64) and (expected == plain / 8).any()


@LAYOUTS
def test_linear_scaling_is_position_interpolation(layout):
    """``factor`` s at position s m turns exactly as no scaling at position m."""
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    m = torch.tensor([0, 1, 5, 9, 100, 4097])
    scaled = apply_rope(x, 4 * m, layout=layout, scaling={"rope_type": "linear", "factor": 4})
    torch.testing.assert_close(scaled, apply_rope(x, m, layout=layout))


def test_yarn_scales_norms_by_its_attention_factor_and_keeps_fast_pairs():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    factor = rope_attention_factor(scaling)
    assert factor == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)
    x = torch.randn(3, 7, 128, dtype=torch.float64)
    out = apply_rope(x, torch.arange(7) * 300, scaling=scaling)
    torch.testing.assert_close(out.norm(dim=-1), factor * x.norm(dim=-1))
    freqs = rope_frequencies(128, scaling=scaling)
    plain = rope_frequencies(128)
    # pairs making more than 32 turns in 4096 positions keep their frequency, those making
    # fewer than one are divided by the factor
    turns = 4096 * plain / (2 * math.pi)
    torch.testing.assert_close(freqs[turns > 32], plain[turns > 32])
    torch.testing.assert_close(freqs[turns < 1], plain[turns < 1] / 4)


@LAYOUTS
def test_partial_rotary_turns_only_the_leading_features(layout):
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    positions = torch.arange(5) + 3
    out = apply_rope(x, positions, layout=layout, rotary_dim=4)
    assert torch.equal(out[..., 4:], x[..., 4:])
    # the turned block is a 4-wide head in its own right: frequencies base**(-2p/4)
    torch.testing.assert_close(out[..., :4], apply_rope(x[..., :4], positions, layout=layout))
    assert not torch.allclose(out[..., :4], x[..., :4])
    full = apply_rope(x, positions, layout=layout, rotary_dim=12)
    assert torch.equal(full, apply_rope(x, positions, layout=layout))


def test_partial_rotary_pair_1_turns_at_the_rotary_width_frequency():
    """Hand case: rotary_dim 4 of 8 features, half layout, pair 1 is features (1, 3)."""
    x = torch.zeros(1, 8, dtype=torch.float64)
    x[0, 1] = 1.0
    base = (4 / math.pi) ** 2  # pair 1 of a 4-wide rotation turns by pi/4 per position
    out = apply_rope(x, torch.tensor([2]), base=base, rotary_dim=4)[0]
    expected = torch.zeros(8, dtype=torch.float64)
    expected[3] = 1.0  # (1, 0) turned by 2 * pi/4 = pi/2 is (0, 1)
    torch.testing.assert_close(out, expected)


def test_2d_positions_for_4d_x_are_per_sequence():
    x = torch.randn(2, 2, 4, 6, dtype=torch.float64)  # B == H
    ids = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 9]])
    out = apply_rope(x, ids)
    torch.testing.assert_close(out, apply_rope(x, ids[:, None, :]))
    for b in range(2):
        for h in range(2):
            torch.testing.assert_close(out[b, h], apply_rope(x[b, h], ids[b]))


def test_positions_must_give_one_position_per_token():
    """A size-1 positions is not spread over T tokens; a one-token step (T == 1) still works,
    and leading dims of positions broadcast (review item 3)."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"must end in T = x.shape\[-2\] = 5"):
        apply_rope(x, torch.tensor([7]))
    with pytest.raises(ValueError, match=r"must end in T = x.shape\[-2\] = 5"):
        apply_rope(x, torch.full((2, 1), 7))
    full = apply_rope(x, torch.arange(5))
    for t in range(5):  # a decode step: one token at position t
        torch.testing.assert_close(apply_rope(x[..., t : t + 1, :], torch.tensor([t])),
                                   full[..., t : t + 1, :], rtol=0, atol=0)  # fmt: skip
    per_batch = torch.stack((torch.arange(5), torch.arange(5) + 3))[:, None, :]  # (B, 1, T)
    out = apply_rope(x, per_batch)
    torch.testing.assert_close(out[1], apply_rope(x[1], torch.arange(5) + 3), rtol=0, atol=0)
