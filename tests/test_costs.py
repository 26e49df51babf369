"""Cost formulas against FlopCounterMode on real forward passes, torch.nn parameter counts and
published numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.utils.flop_counter import FlopCounterMode

from attnbook.attention import attention
from attnbook.costs import (
    attention_flops,
    block_params,
    chinchilla_tokens,
    ffn_flops,
    kv_cache_bytes,
    projection_flops,
    swiglu_hidden,
    training_flops,
    vit_tokens,
)

GiB = 2**30


def counted_flops(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn(*args)
    return counter.get_total_flops()


class FFN(nn.Module):
    """Plain (two matrices, GELU) or gated (three matrices, SwiGLU) feed-forward block."""

    def __init__(self, d: int, hidden: int, gated: bool):
        super().__init__()
        self.up = nn.Linear(d, hidden, bias=False)
        self.gate = nn.Linear(d, hidden, bias=False) if gated else None
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        if self.gate is None:
            return self.down(nn.functional.gelu(self.up(x)))
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d: int, hidden: int, gated: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, num_heads=2, bias=False)  # packed q, k, v + out
        self.ffn = FFN(d, hidden, gated)


# --- FLOPs against FlopCounterMode ------------------------------------------------------------


@pytest.mark.parametrize(("n", "heads", "head_dim"), [(7, 1, 16), (12, 4, 8), (5, 3, 2)])
def test_attention_flops_matches_counted_matmuls(n, heads, head_dim):
    q, k, v = (torch.randn(1, heads, n, head_dim) for _ in range(3))
    d = heads * head_dim
    assert counted_flops(attention, q, k, v) == attention_flops(n, d)
    # SDPA's fused CPU kernel has no FLOP formula registered; its math backend runs matmuls.
    with sdpa_kernel(SDPBackend.MATH):
        assert counted_flops(sdpa, q, k, v) == attention_flops(n, d)


@pytest.mark.parametrize(("n", "d"), [(5, 8), (9, 24)])
def test_projection_flops_matches_four_linears(n, d):
    projections = [nn.Linear(d, d, bias=False) for _ in range(4)]
    x = torch.randn(n, d)
    assert counted_flops(lambda: [p(x) for p in projections]) == projection_flops(n, d)


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize(("n", "d", "hidden"), [(5, 12, None), (3, 16, 40)])
def test_ffn_flops_matches_counted_linears(n, d, hidden, gated):
    width = hidden if hidden is not None else (swiglu_hidden(d) if gated else 4 * d)
    ffn = FFN(d, width, gated)
    assert counted_flops(ffn, torch.randn(n, d)) == ffn_flops(n, d, hidden, gated=gated)


def test_ffn_outweighs_attention_sixteen_to_one_at_1024_tokens_of_4096():
    assert ffn_flops(1024, 4096) / attention_flops(1024, 4096) == 16
    assert ffn_flops(1024, 4096) == 16 * 1024 * 4096**2


# --- parameters against torch.nn --------------------------------------------------------------


@pytest.mark.parametrize(("gated", "hidden"), [(False, None), (True, None), (True, 20), (False, 7)])
def test_block_params_matches_torch_modules(gated, hidden):
    d = 12
    width = hidden if hidden is not None else (swiglu_hidden(d) if gated else 4 * d)
    block = Block(d, width, gated)
    assert sum(p.numel() for p in block.parameters()) == block_params(d, hidden=hidden, gated=gated)


def test_gpt_style_stack_of_32_blocks_at_4096_is_about_6_4_billion():
    assert block_params(4096) == 12 * 4096**2
    assert 32 * block_params(4096) == pytest.approx(6.4e9, rel=0.01)


def test_llama_7b_parameter_count():
    d, layers, vocab = 4096, 32, 32000
    hidden = swiglu_hidden(d, multiple_of=256)
    assert hidden == 11008
    norms = (2 * layers + 1) * d  # two RMSNorm weights per block plus the final one
    embeddings = 2 * vocab * d  # input embedding and untied output head
    total = layers * block_params(d, hidden=hidden, gated=True) + embeddings + norms
    assert total == 6_738_415_616  # the published count of Llama-2-7B


def test_swiglu_hidden_rounding():
    assert swiglu_hidden(12) == 32
    assert swiglu_hidden(12, multiple_of=5) == 35
    assert swiglu_hidden(4096) == 10922


# --- memory, training and data ----------------------------------------------------------------


def test_kv_cache_worked_numbers():
    common = {"layers": 32, "positions": 4096, "head_dim": 128, "bytes_per_element": 2}
    assert kv_cache_bytes(kv_heads=8, **common) == 536_870_912 == GiB // 2
    assert kv_cache_bytes(kv_heads=32, **common) == 2 * GiB
    assert kv_cache_bytes(kv_heads=8, batch=3, **common) == 3 * GiB // 2
    # Multi-head latent style caches can store values of another width than keys.
    assert kv_cache_bytes(kv_heads=1, value_dim=64, **common) == 32 * 4096 * (128 + 64) * 2


def test_kv_cache_matches_real_tensors():
    layers, positions, kv_heads, head_dim, batch = 3, 10, 2, 4, 2
    cache = [
        torch.zeros(2, batch, kv_heads, positions, head_dim, dtype=torch.bfloat16)  # keys, values
        for _ in range(layers)
    ]
    used = sum(t.numel() * t.element_size() for t in cache)
    assert used == kv_cache_bytes(
        layers=layers,
        positions=positions,
        kv_heads=kv_heads,
        head_dim=head_dim,
        bytes_per_element=2,
        batch=batch,
    )


def test_training_and_chinchilla_numbers():
    params = 70_000_000_000
    tokens = chinchilla_tokens(params)
    assert tokens == 1_400_000_000_000
    assert training_flops(params, tokens) == 588 * 10**21  # about 5.9e23
    assert chinchilla_tokens(10, tokens_per_param=3) == 30


def test_results_are_exact_python_ints_even_past_float_precision():
    flops = training_flops(10**15 + 1, 10**15 + 3)
    assert type(flops) is int and flops == 6 * (10**15 + 1) * (10**15 + 3)


def test_vit_tokens():
    assert vit_tokens(224, 224, 16) == (196, 768)
    assert vit_tokens(224, 448, 14, channels=1) == (512, 196)


def test_vit_tokens_matches_a_patchifying_conv():
    conv = nn.Conv2d(3, 8, kernel_size=16, stride=16)
    out = conv(torch.zeros(1, 3, 64, 96))  # (1, 8, 4, 6)
    assert out.shape[-2] * out.shape[-1] == vit_tokens(64, 96, 16)[0]
    assert conv.weight[0].numel() == vit_tokens(64, 96, 16)[1]


def test_costs_import_without_torch():
    code = "import sys, attnbook.costs; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- numbers as readers write them ----------------------------------------------------------


def test_whole_number_floats_convert_exactly():
    assert training_flops(70e9, 1.4e12) == training_flops(70 * 10**9, 14 * 10**11)
    assert training_flops(70e9, 1.4e12) == 588 * 10**21  # exact, no float rounding
    assert chinchilla_tokens(70e9) == 1_400_000_000_000
    kv = {"layers": 32, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2}
    assert kv_cache_bytes(**kv, positions=4e3) == kv_cache_bytes(**kv, positions=4000)
    assert type(chinchilla_tokens(70e9)) is int


def test_numpy_numbers_are_accepted():
    import numpy as np

    assert training_flops(np.float64(7e9), np.int64(10**12)) == 42 * 10**21
    assert swiglu_hidden(np.float32(4096.0), multiple_of=np.int32(256)) == 11008
    assert ffn_flops(2, 4, gated=np.bool_(True)) == ffn_flops(2, 4, gated=True)


@given(n=st.integers(1, 2**53), d=st.integers(1, 2**20))
def test_a_float_that_holds_a_whole_number_counts_as_that_number(n, d):
    assert attention_flops(float(n), float(d)) == attention_flops(n, d)
    assert chinchilla_tokens(float(n)) == 20 * n


@pytest.mark.parametrize("bad", [70.5, 1e-3, 2.0**53 + 2, 1e23])
def test_fractional_or_ambiguous_floats_are_refused(bad):
    with pytest.raises(ValueError, match="params"):
        training_flops(bad, 10)


def test_swiglu_hidden_with_meta_ffn_dim_multiplier():
    # Meta's params.json: Llama-3-8B dim 4096, multiple_of 1024, ffn_dim_multiplier 1.3;
    # Llama-2-70B dim 8192, 4096, 1.3; Llama-3.1-405B dim 16384, 4096, 1.2. The widths are the
    # intermediate_size of the published Hugging Face configs.
    assert swiglu_hidden(4096, 1024, ffn_dim_multiplier=1.3) == 14336
    assert swiglu_hidden(8192, 4096, ffn_dim_multiplier=1.3) == 28672
    assert swiglu_hidden(16384, 4096, ffn_dim_multiplier=1.2) == 53248
    assert swiglu_hidden(4096, 256, ffn_dim_multiplier=None) == swiglu_hidden(4096, 256)
    # Meta's FeedForward, written out independently: 4 d, two thirds, scale, round up.
    for d, multiple_of, scale in [(4096, 1024, 1.3), (2048, 256, 1.5), (3072, 256, 1.0)]:
        hidden = int(2 * (4 * d) / 3)
        hidden = int(scale * hidden)
        expected = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        assert swiglu_hidden(d, multiple_of, ffn_dim_multiplier=scale) == expected


def test_kv_cache_window_fractions_and_an_empty_cache():
    common = {"layers": 32, "kv_heads": 8, "head_dim": 128}
    full = kv_cache_bytes(positions=4096, bytes_per_element=2, **common)
    assert kv_cache_bytes(positions=0, bytes_per_element=2, **common) == 0
    assert kv_cache_bytes(positions=32768, window=4096, bytes_per_element=2, **common) == full
    assert kv_cache_bytes(positions=100, window=4096, bytes_per_element=2, **common) == (
        kv_cache_bytes(positions=100, bytes_per_element=2, **common)
    )
    assert kv_cache_bytes(positions=4096, bytes_per_element=0.5, **common) * 4 == full
    assert kv_cache_bytes(positions=4096, bytes_per_element=0.25, **common) * 8 == full
    # A packed total that is not a whole number of bytes rounds up: 3 numbers of 4 bits.
    assert kv_cache_bytes(layers=1, positions=1, kv_heads=1, head_dim=1, value_dim=2,
                          bytes_per_element=0.5) == 2  # fmt: skip
    # A 4-bit cache in real tensors: two numbers packed per uint8.
    packed = torch.zeros(2, 1, 2, 10, 8 // 2, dtype=torch.uint8)  # (K/V, B, H, T, dk / 2)
    assert packed.numel() * packed.element_size() == kv_cache_bytes(
        layers=1, positions=10, kv_heads=2, head_dim=8, bytes_per_element=0.5
    )
