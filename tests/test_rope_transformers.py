"""``attnbook.rope`` against Hugging Face ``transformers``' own rotary code (the oracle).

Every module here is built from a config with nothing downloaded (``HF_HUB_OFFLINE=1``):
Llama's ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` (rotate-half layout, every
``rope_type`` attnbook offers), GPT-NeoX's partial rotary (``rotary_pct``), and GPT-J's
interleaved layout with ``rotary_dim``. transformers computes its angles in float32 and
attnbook in float64, so the tolerances scale with the largest position used.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")

from transformers import GPTNeoXConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox import modeling_gpt_neox as neox  # noqa: E402
from transformers.models.gptj import modeling_gptj as gptj  # noqa: E402
from transformers.models.llama import modeling_llama as llama  # noqa: E402

from attnbook.rope import (  # noqa: E402
    apply_rope,
    rope_attention_factor,
    rope_frequencies,
    rope_softmax_factor,
)

SCALINGS = {
    "none": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
    "yarn-betas-untruncated": {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 2048,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "truncate": False,
    },
    "yarn-mscale": {  # DeepSeek's two-mscale form with unequal values (a ratio other than 1)
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
    },
    "yarn-deepseek-v3": {  # DeepSeek-V3's config.json: equal mscales, cos/sin factor 1
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    },
    "yarn-attention-factor": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "attention_factor": 1.5,
    },
    "llama3": {  # Llama 3.1's published values
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
SCALED = {name: s for name, s in SCALINGS.items() if s is not None}


def llama_config(head_dim, base, scaling, heads=4):
    params = {"rope_theta": base, **(scaling or {"rope_type": "default"})}
    return LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=32768,
        rope_parameters=params,
    )


def hf_inv_freq(config):
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        return llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[kind](config)


@pytest.mark.parametrize("name", SCALINGS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_frequencies_and_attention_factor_match_transformers(name, head_dim):
    scaling = SCALINGS[name]
    inv_freq, factor = hf_inv_freq(llama_config(head_dim, 500000.0, scaling))
    ours = rope_frequencies(head_dim, base=500000.0, scaling=scaling)
    # float32 there, float64 here: agreement to float32 rounding of a power of the base
    torch.testing.assert_close(ours, inv_freq.double(), rtol=3e-6, atol=0.0)
    assert rope_attention_factor(scaling) == pytest.approx(factor, rel=1e-12)


def test_each_scaling_changes_the_frequencies_or_the_factor():
    """The rules differ from each other and from no scaling, so the oracle tests can fail."""
    plain = rope_frequencies(128, base=500000.0)
    results = [
        (rope_frequencies(128, base=500000.0, scaling=s), rope_attention_factor(s))
        for s in SCALED.values()
    ]
    for i, (a, fa) in enumerate(results):
        assert not torch.allclose(a, plain, rtol=1e-3)
        for b, fb in results[i + 1 :]:
            assert not torch.allclose(a, b, rtol=1e-3) or abs(fa - fb) > 0.05


def test_yarn_ramp_is_hugging_faces_not_the_papers():
    """HF (and vLLM) ramp linearly in the pair index; the paper ramps in turns per context."""
    d, base, context, s = 128, 10000.0, 4096, 4.0
    scaling = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": context}
    theta = rope_frequencies(d, base=base)
    turns = context * theta / (2 * torch.pi)
    gamma = ((turns - 1.0) / 31.0).clamp(0, 1)  # the paper's ramp, alpha = 1, beta = 32
    paper = (1 - gamma) * theta / s + gamma * theta
    ours = rope_frequencies(d, base=base, scaling=scaling)
    # the two blends agree at both ends and differ strongly in between
    assert torch.equal(ours == theta, paper == theta)
    assert (ours / paper - 1).abs().max() > 0.3


def random_position_ids(batch, length, high, seed):
    """Distinct, sorted positions per sequence (as left padding or packing gives)."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack(
        [torch.randperm(high, generator=g)[:length].sort().values for _ in range(batch)]
    )


@pytest.mark.parametrize("name", SCALINGS)
def test_llama_rotary_matches_transformers_with_position_ids(name):
    scaling, head_dim = SCALINGS[name], 64
    config = llama_config(head_dim, 10000.0, scaling, heads=3)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 3, 9, head_dim, generator=g)  # B == H = 3: the ambiguous case
    position_ids = random_position_ids(3, 9, 512, seed=1)  # (B, T), a different row each
    cos, sin = llama.LlamaRotaryEmbedding(config)(q, position_ids)
    q_hf, k_hf = llama.apply_rotary_pos_emb(q, k, cos, sin)
    for ours, theirs, x in ((apply_rope(q, position_ids, scaling=scaling), q_hf, q),
                            (apply_rope(k, position_ids, scaling=scaling), k_hf, k)):  # fmt: skip
        torch.testing.assert_close(ours, theirs, rtol=0.0, atol=1e-4)
        assert (ours - x).abs().max() > 0.1  # it did turn something


def test_position_ids_are_per_sequence_not_per_head():
    """(B, T) position ids with B == H: each sequence's row turns all of its heads."""
    x = torch.randn(3, 3, 5, 8, dtype=torch.float64)
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [2, 3, 5, 8, 13]])
    out = apply_rope(x, position_ids)
    for b in range(3):
        torch.testing.assert_close(out[b], apply_rope(x[b], position_ids[b]))
    per_head = apply_rope(x, position_ids[None])  # (1, H, T): the explicit per-head layout
    assert not torch.allclose(out, per_head)
    torch.testing.assert_close(per_head[:, 1], apply_rope(x[:, 1], position_ids[1]))


def test_ambiguous_or_mismatched_position_ids_are_rejected():
    x = torch.randn(2, 3, 5, 8)
    with pytest.raises(ValueError, match=r"positions of shape \(3, 5\).*position_ids \(B, T\)"):
        apply_rope(x, torch.zeros(3, 5, dtype=torch.long))  # (H, T) is not (B, T)
    with pytest.raises(ValueError, match=r"positions of shape \(2, 5\) is ambiguous"):
        apply_rope(torch.randn(2, 2, 3, 5, 8), torch.zeros(2, 5, dtype=torch.long))


@pytest.mark.parametrize("name", ["none", "linear", "yarn", "llama3"])
@pytest.mark.parametrize("rotary_pct", [0.25, 0.5])
def test_gpt_neox_partial_rotary_matches_transformers(name, rotary_pct):
    scaling, heads, head_dim = SCALINGS[name], 2, 64
    params = {"rope_theta": 10000.0, "partial_rotary_factor": rotary_pct}
    params.update(scaling or {"rope_type": "default"})
    config = GPTNeoXConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        max_position_embeddings=32768,
        rope_parameters=params,
    )
    rotary_dim = int(head_dim * rotary_pct)
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 2, heads, 7, head_dim, generator=g)
    position_ids = random_position_ids(2, 7, 300, seed=3)
    cos, sin = neox.GPTNeoXRotaryEmbedding(config)(q, position_ids)
    assert cos.shape[-1] == rotary_dim  # the oracle does turn only part of the head
    q_hf, _ = neox.apply_rotary_pos_emb(q, k, cos, sin)
    ours = apply_rope(q, position_ids, scaling=scaling, rotary_dim=rotary_dim)
    torch.testing.assert_close(ours, q_hf, rtol=0.0, atol=1e-4)
    assert torch.equal(ours[..., rotary_dim:], q[..., rotary_dim:])


def gptj_rotary(x_bthd, position_ids, rotary_dim):
    """GPT-J's own lines (GPTJAttention.forward): x (B, T, H, d), interleaved pairs."""
    embed_positions = gptj.create_sinusoidal_positions(1024, rotary_dim)  # (P, rotary_dim)
    table = embed_positions.repeat(position_ids.shape[0], 1, 1)
    index = position_ids.unsqueeze(-1).repeat(1, 1, table.shape[-1])
    sin, cos = torch.split(torch.gather(table, 1, index), rotary_dim // 2, dim=-1)
    turned = gptj.apply_rotary_pos_emb(x_bthd[..., :rotary_dim], sin, cos)
    return torch.cat([turned, x_bthd[..., rotary_dim:]], dim=-1)


@pytest.mark.parametrize("rotary_dim", [16, 48, 64])
def test_gpt_j_interleaved_rotary_matches_transformers(rotary_dim):
    head_dim = 64
    x = torch.randn(2, 6, 3, head_dim, generator=torch.Generator().manual_seed(4))  # (B, T, H, d)
    position_ids = random_position_ids(2, 6, 1024, seed=5)
    theirs = gptj_rotary(x, position_ids, rotary_dim).transpose(1, 2)  # (B, H, T, d)
    dim = None if rotary_dim == head_dim else rotary_dim
    ours = apply_rope(x.transpose(1, 2), position_ids, layout="interleaved", rotary_dim=dim)
    torch.testing.assert_close(ours, theirs, rtol=0.0, atol=2e-4)
    half = apply_rope(x.transpose(1, 2), position_ids, layout="half", rotary_dim=dim)
    assert (half - theirs).abs().max() > 0.1  # the other layout is a different model


@settings(max_examples=40, deadline=None)
@given(
    head_dim=st.sampled_from([32, 64, 96, 128, 256]),
    log10_base=st.floats(3.0, 6.5),
    factor=st.floats(1.0, 64.0),
    context=st.integers(256, 131072),
    beta_fast=st.floats(4.0, 64.0),
    beta_slow=st.floats(0.25, 2.0),
    truncate=st.booleans(),
)
def test_yarn_frequencies_match_transformers_for_any_config(
    head_dim, log10_base, factor, context, beta_fast, beta_slow, truncate
):
    scaling = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": context,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": truncate,
    }
    base = 10.0**log10_base
    inv_freq, attention_factor = hf_inv_freq(llama_config(head_dim, base, scaling))
    ours = rope_frequencies(head_dim, base=base, scaling=scaling)
    torch.testing.assert_close(ours, inv_freq.double(), rtol=5e-6, atol=0.0)
    assert rope_attention_factor(scaling) == pytest.approx(attention_factor, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    head_dim=st.sampled_from([64, 128]),
    factor=st.floats(1.0, 32.0),
    low=st.floats(0.5, 2.0),
    gap=st.floats(0.5, 8.0),
    context=st.sampled_from([2048, 4096, 8192, 32768]),
)
def test_llama3_frequencies_match_transformers_for_any_config(head_dim, factor, low, gap, context):
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": low + gap,
        "original_max_position_embeddings": context,
    }
    inv_freq, _ = hf_inv_freq(llama_config(head_dim, 500000.0, scaling))
    ours = rope_frequencies(head_dim, base=500000.0, scaling=scaling)
    torch.testing.assert_close(ours, inv_freq.double(), rtol=5e-6, atol=0.0)


@pytest.mark.parametrize("name", SCALINGS)
def test_a_transformers_rope_parameters_dict_is_accepted_as_it_is(name):
    """transformers 5.x writes rope_theta into rope_parameters; passing that dict as scaling
    (with the same base) gives the same frequencies and factors as the dict without it."""
    params = dict(llama_config(128, 500000.0, SCALINGS[name]).rope_parameters)
    assert params["rope_theta"] == 500000.0
    ours = rope_frequencies(128, base=500000.0, scaling=params)
    assert torch.equal(ours, rope_frequencies(128, base=500000.0, scaling=SCALINGS[name]))
    assert rope_attention_factor(params) == rope_attention_factor(SCALINGS[name])
    with pytest.raises(ValueError, match=r"rope_theta.*differs from base=10000\.0"):
        rope_frequencies(128, scaling=params)


@pytest.mark.parametrize(
    ("mscale", "mscale_all_dim"), [(1.0, 1.0), (0.707, 0.707), (1.0, 0.707), (1.0, None)]
)
def test_softmax_factor_matches_deepseek_v3_attention(mscale, mscale_all_dim):
    """DeepSeek's attention multiplies its softmax scale by rope_softmax_factor; with V3's
    equal mscales the cos/sin factor is 1 and the whole temperature (about 1.87) is there."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek

    scaling = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
               "mscale": mscale, "mscale_all_dim": mscale_all_dim}  # fmt: skip
    config = DeepseekV3Config(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None,
        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
        intermediate_size=32, moe_intermediate_size=16, n_routed_experts=2, num_hidden_layers=1,
        rope_parameters={"rope_theta": 10000.0, **scaling},
    )  # fmt: skip
    attention = deepseek.DeepseekV3Attention(config, layer_idx=0)
    qk_head_dim = 8 + 8
    assert attention.scaling == pytest.approx(qk_head_dim**-0.5 * rope_softmax_factor(scaling))
    if mscale_all_dim:
        expected = (0.1 * mscale_all_dim * math.log(40.0) + 1.0) ** 2
        assert rope_softmax_factor(scaling) == pytest.approx(expected, rel=1e-12)
    else:
        assert rope_softmax_factor(scaling) == 1.0
    if mscale == mscale_all_dim:
        assert rope_attention_factor(scaling) == 1.0
    total = rope_attention_factor(scaling) ** 2 * rope_softmax_factor(scaling)
    if (mscale, mscale_all_dim) == (1.0, 1.0):
        assert 1.86 < total < 1.88  # DeepSeek-V3: the logits grow by about 1.87


def test_softmax_factor_is_one_outside_deepseeks_form():
    assert rope_softmax_factor(None) == 1.0
    assert rope_softmax_factor(SCALINGS["yarn"]) == 1.0
    assert rope_softmax_factor(SCALINGS["llama3"]) == 1.0
