"""attnbook against Hugging Face ``transformers``, an implementation its authors did not write.

Everything is built from configurations with random weights (real models on the ``meta``
device, which allocates nothing); nothing is downloaded (``HF_HUB_OFFLINE=1``). Covered:
attention and masks against ``LlamaAttention`` (eager and SDPA; causal, right and left
padding, and rows with no allowed key, where the two HF paths themselves differ); parameter
counts of the shipped real configurations; KV-cache bytes against ``DynamicCache``'s tensors;
and ``TinyGPT`` against ``LlamaForCausalLM`` and ``Qwen2ForCausalLM`` with copied weights
(logits, cached decoding step by step, cached keys, greedy tokens). RoPE's own oracle tests
are in ``tests/test_rope_transformers.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers.masking_utils import create_causal_mask  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention,
    LlamaRotaryEmbedding,
)

from attnbook import configs  # noqa: E402
from attnbook.attention import attention  # noqa: E402
from attnbook.costs import kv_cache_bytes, swiglu_hidden  # noqa: E402
from attnbook.gpt import GPTConfig, TinyGPT, param_count  # noqa: E402
from attnbook.heads import merge_heads, split_heads  # noqa: E402
from attnbook.masks import causal_mask, padding_mask  # noqa: E402
from attnbook.rope import apply_rope  # noqa: E402
from attnbook.sampling import generate  # noqa: E402

T = 6
LENGTHS = [6, 4, 3]  # one full sequence, one with 2 pads, one with 3


def small_llama_config(impl: str, **extra) -> transformers.LlamaConfig:
    config = transformers.LlamaConfig(
        vocab_size=10, hidden_size=32, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **extra,
    )  # fmt: skip
    config._attn_implementation = impl
    return config


def hf_attention_run(impl: str, side: str | None):
    """One LlamaAttention call on a padded batch, with HF's own mask for ``impl``."""
    torch.manual_seed(0)
    config = small_llama_config(impl)
    layer = LlamaAttention(config, layer_idx=0).eval()
    x = torch.randn(len(LENGTHS), T, 32)
    if side is None:
        keep = torch.ones(len(LENGTHS), T, dtype=torch.long)
    else:
        keep = padding_mask(LENGTHS, T, side=side)[:, 0, 0].long()  # (B, T): HF's 1 = keep
    positions = torch.arange(T)
    hf_mask = create_causal_mask(config=config, inputs_embeds=x, attention_mask=keep,
                                 past_key_values=None, position_ids=positions.expand(3, -1),
                                 allow_is_causal_skip=False)  # fmt: skip
    cos_sin = LlamaRotaryEmbedding(config)(x, positions.expand(3, -1))
    with torch.no_grad():
        theirs, _ = layer(x, cos_sin, attention_mask=hf_mask)
        q = apply_rope(split_heads(layer.q_proj(x), 4), positions)  # (B, 4, T, 8)
        k = apply_rope(split_heads(layer.k_proj(x), 2), positions)  # (B, 2, T, 8)
        v = split_heads(layer.v_proj(x), 2)
    return layer, hf_mask, theirs, (q, k, v)


def ours_boolean(side, q, k, v):
    mask = causal_mask(T)
    if side is not None:
        mask = padding_mask(LENGTHS, T, side=side) & mask  # (B, 1, T, T)
    return mask, attention(q, k, v, mask)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("side", [None, "right", "left"])
def test_attention_and_masks_match_llama_attention(impl, side):
    layer, hf_mask, theirs, (q, k, v) = hf_attention_run(impl, side)
    mask, out = ours_boolean(side, q, k, v)
    with torch.no_grad():
        ours = layer.o_proj(merge_heads(out))  # (B, T, d)
    has_key = mask.expand(3, 1, T, T)[:, 0].any(-1)  # (B, T): query rows with a key
    torch.testing.assert_close(ours[has_key], theirs[has_key], atol=2e-6, rtol=1e-5)
    if side == "left":  # queries 0, 1 of sequence 1 and 0, 1, 2 of sequence 2 see no key
        assert (~has_key).sum() == 5
    else:
        assert has_key.all()
    # HF's mask is the same mask: bool for SDPA; 0 / finfo.min for eager.
    allowed = hf_mask if hf_mask.dtype == torch.bool else hf_mask == 0
    assert torch.equal(allowed, mask.expand(3, 1, T, T))


def test_rows_with_no_key_eager_averages_every_key_sdpa_and_attnbook_give_zeros():
    layer, eager_mask, eager, (q, k, v) = hf_attention_run("eager", "left")
    _, _, sdpa, _ = hf_attention_run("sdpa", "left")
    mask, out = ours_boolean("left", q, k, v)
    empty = ~mask.expand(3, 1, T, T)[:, 0].any(-1)  # (B, T)
    assert empty.sum() == 5
    with torch.no_grad():
        ours = layer.o_proj(merge_heads(out))
        # Eager adds finfo.min to every score of such a row: equal scores, uniform weights.
        average = layer.o_proj(merge_heads(v.repeat_interleave(2, dim=1).mean(-2, keepdim=True)))
    assert torch.equal(ours[empty], torch.zeros_like(ours[empty]))  # o_proj has no bias
    assert torch.equal(sdpa[empty], torch.zeros_like(sdpa[empty]))
    expected = average.expand(3, T, 32)[empty]
    torch.testing.assert_close(eager[empty], expected, atol=2e-6, rtol=1e-5)
    assert eager[empty].abs().min() > 1e-3  # the two conventions really differ here
    # attnbook given HF's additive eager mask reproduces the eager path, rows included.
    with torch.no_grad():
        additive = layer.o_proj(merge_heads(attention(q, k, v, eager_mask)))
    torch.testing.assert_close(additive, eager, atol=2e-6, rtol=1e-5)


def hf_config_of(name: str):
    raw = configs.load(name)
    own = ("hf_id", "published_parameters", "meta_ffn", "architectures", "rope_theta")
    fields = {key: value for key, value in raw.items() if key not in own}
    architecture = raw["architectures"][0]
    config_class = getattr(transformers, architecture.replace("ForCausalLM", "Config"))
    rope = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    return getattr(transformers, architecture), config_class(**fields, rope_parameters=rope)


REQUIRED = {"llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3.2-1b", "mistral-7b-v0.1",
            "qwen2.5-0.5b", "gemma-7b"}  # fmt: skip


def test_the_shipped_configurations_cover_the_required_models():
    assert set(configs.names()) >= REQUIRED


@pytest.mark.parametrize("name", configs.names())
def test_param_count_equals_the_real_module_on_the_meta_device(name):
    model_class, hf_config = hf_config_of(name)
    config = configs.gpt_config(name)
    with torch.device("meta"):
        hf_model = model_class(hf_config)
        ours = TinyGPT(config)
    hf_count = sum(p.numel() for p in hf_model.parameters())  # tied weights counted once
    assert hf_count == param_count(config) == configs.load(name)["published_parameters"]
    assert sum(p.numel() for p in ours.parameters()) == hf_count
    meta = configs.load(name).get("meta_ffn")
    if meta is not None:  # Meta's params.json reproduces HF's intermediate_size
        hidden = swiglu_hidden(config.width, meta["multiple_of"],
                               ffn_dim_multiplier=meta["ffn_dim_multiplier"])  # fmt: skip
        assert hidden == hf_config.intermediate_size


def cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_cache_bytes_equal_dynamic_cache_after_a_forward_pass(dtype):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=20, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 20, (2, 7)), use_cache=True).past_key_values
    expected = kv_cache_bytes(layers=3, positions=7, kv_heads=2, head_dim=12, batch=2,
                              bytes_per_element=torch.finfo(dtype).bits // 8)  # fmt: skip
    assert cache_bytes(cache) == expected


@pytest.mark.parametrize("tokens", [2, 7])
def test_sliding_window_cache_bytes_equal_mistral_dynamic_cache(tokens):
    torch.manual_seed(0)
    window = 4
    config = transformers.MistralConfig(
        vocab_size=20, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=window,
    )  # fmt: skip
    model = transformers.MistralForCausalLM(config).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 20, (1, tokens)), use_cache=True).past_key_values
    sizes = dict(layers=2, kv_heads=2, head_dim=8, bytes_per_element=4)
    one_token = kv_cache_bytes(positions=1, **sizes)
    # HF keeps window - 1 positions between steps; the next step attends with its own on top.
    assert cache_bytes(cache) + one_token == kv_cache_bytes(positions=tokens + 1, window=window,
                                                            **sizes)  # fmt: skip
    assert cache_bytes(cache) == kv_cache_bytes(positions=min(tokens, window - 1), **sizes)


def test_kv_cache_bytes_of_an_empty_cache_and_a_4_bit_one():
    sizes = dict(layers=32, kv_heads=8, head_dim=128)
    assert kv_cache_bytes(positions=0, bytes_per_element=2, **sizes) == 0
    full = kv_cache_bytes(positions=4096, bytes_per_element=2, **sizes)
    assert kv_cache_bytes(positions=4096, bytes_per_element=0.5, **sizes) * 4 == full


HF_NAMES = {"norm1": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
            "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "norm2": "post_attention_layernorm", "ffn.gate": "mlp.gate_proj",
            "ffn.up": "mlp.up_proj", "ffn.down": "mlp.down_proj"}  # fmt: skip


def exported(config: GPTConfig, model_class, config_class, **extra):
    """A TinyGPT with large random weights (clear greedy margins) and its HF copy."""
    torch.manual_seed(0)
    ours = TinyGPT(config).eval()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            p.normal_(std=0.3 if p.dim() == 2 else 0.1).add_(1.0 if "norm" in name else 0.0)
    hf_config = config_class(
        vocab_size=config.vocab, hidden_size=config.width, num_hidden_layers=config.layers,
        num_attention_heads=config.heads, num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim, intermediate_size=config.ffn_width, hidden_act="silu",
        rms_norm_eps=config.eps, max_position_embeddings=config.context,
        tie_word_embeddings=config.tie_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_base}, **extra,
    )  # fmt: skip
    theirs = model_class(hf_config).eval()
    state = {
        "model.embed_tokens.weight": ours.embed.weight,
        "model.norm.weight": ours.norm.weight,
        "lm_head.weight": (ours.embed if config.tie_embeddings else ours.unembed).weight,
    }
    for i, block in enumerate(ours.blocks):
        for mine, hf in HF_NAMES.items():
            state[f"model.layers.{i}.{hf}.weight"] = block.get_submodule(mine).weight
            if config.qkv_bias and mine in ("q", "k", "v"):
                state[f"model.layers.{i}.{hf}.bias"] = block.get_submodule(mine).bias
    theirs.load_state_dict(state, strict=True)
    assert sum(p.numel() for p in theirs.parameters()) == param_count(config)
    return ours, theirs


CASES = {
    # Llama: chapter 13's layout, another RoPE base, a longer context.
    "llama": (GPTConfig(vocab=41, width=32, layers=2, heads=4, kv_heads=2, context=48,
                        rope_base=500.0, eps=1e-5),
              transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
    # Qwen2-style: q/k/v biases, heads wider than width / heads, untied unembedding.
    "qwen2": (GPTConfig(vocab=41, width=32, layers=2, heads=4, kv_heads=1, context=48,
                        head_width=12, qkv_bias=True, tie_embeddings=False, rope_base=1e6),
              transformers.Qwen2ForCausalLM, transformers.Qwen2Config,
              {"use_sliding_window": False}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_tinygpt_equals_the_transformers_model_with_copied_weights(case):
    config, model_class, config_class, extra = CASES[case]
    ours, theirs = exported(config, model_class, config_class, **extra)
    ids = torch.randint(0, config.vocab, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = ours(ids)
        torch.testing.assert_close(theirs(ids).logits, full, atol=1e-4, rtol=1e-5)
        assert full.abs().max() > 1.0  # logits far from uniform: the comparison has teeth
        # Cached decoding: a prefill of 8, then one token at a time, in both libraries.
        cache, past = ours.new_cache(batch=2), transformers.DynamicCache(config=theirs.config)
        steps_ours = [ours(ids[:, :8], cache=cache)]
        steps_theirs = [theirs(ids[:, :8], past_key_values=past, use_cache=True).logits]
        for t in range(8, 12):
            steps_ours.append(ours(ids[:, t : t + 1], cache=cache))
            steps_theirs.append(
                theirs(ids[:, t : t + 1], past_key_values=past, use_cache=True).logits
            )
    torch.testing.assert_close(torch.cat(steps_theirs, 1), torch.cat(steps_ours, 1),
                               atol=1e-4, rtol=1e-5)  # fmt: skip
    torch.testing.assert_close(torch.cat(steps_ours, 1), full, atol=1e-4, rtol=1e-5)
    for layer in range(config.layers):  # the cached keys (after RoPE) and values themselves
        torch.testing.assert_close(past.layers[layer].keys, cache.keys[layer, :, :, :12])
        torch.testing.assert_close(past.layers[layer].values, cache.values[layer, :, :, :12])
    # Greedy generation: 30 tokens through each library's own loop and cache.
    prompt = ids[:1, :5]
    mine, logits = generate(ours, prompt, 30, top_k=1, generator=torch.Generator())
    with torch.no_grad():
        hf_tokens = theirs.generate(prompt, max_new_tokens=30, do_sample=False, top_k=None,
                                    top_p=None, temperature=None, pad_token_id=0)  # fmt: skip
    top2 = logits[0].topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-3  # no near tie: the tokens must agree
    assert torch.equal(mine, hf_tokens)
