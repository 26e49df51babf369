"""The tiny GPT against independent oracles: a reference forward pass written with SDPA and
torch.nn.RMSNorm, nn parameter counts and costs.block_params, FlopCounterMode, full-pass
logits for the cache, and the diagnostics of chapter 12."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.utils.flop_counter import FlopCounterMode

from attnbook.costs import block_params, kv_cache_bytes, swiglu_hidden
from attnbook.diagnostics import check_attention_rows, check_cache, check_causality
from attnbook.gpt import GPTConfig, TinyGPT, forward_flops, param_count
from attnbook.masks import causal_mask

SMALL = GPTConfig(vocab=11, width=16, layers=2, heads=4, kv_heads=2, context=12)
# The three options of real models at once: heads of 6 (not 16 / 4), Qwen2's q/k/v biases, and
# an untied unembedding.
REAL = GPTConfig(vocab=11, width=16, layers=2, heads=4, kv_heads=2, context=12, head_width=6,
                 qkv_bias=True, tie_embeddings=False)  # fmt: skip


def _rope_half(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate-half RoPE written independently of attnbook.rope, (B, H, T, dk)."""
    t, dk = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # (dk/2,)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv  # (T, dk/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1).float(), torch.cat([angles.sin()] * 2, -1).float()
    a, b = x[..., : dk // 2], x[..., dk // 2 :]
    return x * cos + torch.cat((-b, a), -1) * sin


def reference_logits(model: TinyGPT, ids: torch.Tensor) -> torch.Tensor:
    """The same network through SDPA (causal, GQA), torch.nn.RMSNorm and F.silu."""
    c = model.config
    b, t = ids.shape

    def rms(norm):
        ref = nn.RMSNorm(c.width, eps=c.eps)
        ref.weight = norm.weight
        return ref

    def heads(x, h):
        return x.view(b, t, h, c.head_dim).transpose(1, 2)

    x = model.embed.weight[ids]  # (B, T, d)
    for blk in model.blocks:
        z = rms(blk.norm1)(x)
        q = _rope_half(heads(F.linear(z, blk.q.weight, blk.q.bias), c.heads), c.rope_base)
        k = _rope_half(heads(F.linear(z, blk.k.weight, blk.k.bias), c.kv_heads), c.rope_base)
        v = heads(F.linear(z, blk.v.weight, blk.v.bias), c.kv_heads)
        y = sdpa(q, k, v, is_causal=True, enable_gqa=True)
        x = x + y.transpose(1, 2).reshape(b, t, c.heads * c.head_dim) @ blk.o.weight.T
        z = rms(blk.norm2)(x)
        gated = F.silu(z @ blk.ffn.gate.weight.T) * (z @ blk.ffn.up.weight.T)
        x = x + gated @ blk.ffn.down.weight.T
    unembed = model.embed.weight if c.tie_embeddings else model.unembed.weight
    return rms(model.norm)(x) @ unembed.T


def _model(config: GPTConfig = SMALL, seed: int = 0) -> TinyGPT:
    torch.manual_seed(seed)
    model = TinyGPT(config).eval()
    with torch.no_grad():  # non-trivial gains, so a forgotten norm weight would show
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return model


def test_forward_matches_an_sdpa_reference():
    model = _model()
    ids = torch.randint(SMALL.vocab, (3, 10))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), atol=2e-5, rtol=1e-4)


@given(
    width_per_head=st.sampled_from([2, 4, 6]),
    heads_kv=st.sampled_from([(1, 1), (2, 1), (4, 2), (4, 4), (6, 3)]),
    layers=st.integers(1, 3),
    vocab=st.integers(1, 40),
    hidden=st.integers(0, 20),
)
def test_param_count_matches_the_modules(width_per_head, heads_kv, layers, vocab, hidden):
    heads, kv_heads = heads_kv
    config = GPTConfig(
        vocab=vocab,
        width=width_per_head * heads,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        hidden=hidden,
    )
    assert param_count(config) == sum(p.numel() for p in TinyGPT(config).parameters())


def test_param_count_is_block_params_plus_norms_and_one_embedding():
    d, vocab, layers = 24, 30, 3
    mha = GPTConfig(vocab=vocab, width=d, layers=layers, heads=4, kv_heads=4)
    per_block = block_params(d, hidden=swiglu_hidden(d), gated=True) + 2 * d  # + two gains
    assert param_count(mha) == layers * per_block + vocab * d + d
    gqa = GPTConfig(vocab=vocab, width=d, layers=layers, heads=4, kv_heads=1)
    # W_K and W_V shrink from d x d to d x (d / 4): 2 * d * (3d / 4) fewer weights per block
    assert param_count(mha) - param_count(gqa) == layers * 2 * d * (3 * d // 4)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_ids_of_any_integer_dtype_give_the_int64_logits(dtype):
    model = _model()
    ids = torch.randint(SMALL.vocab, (2, 6))
    with torch.no_grad():
        assert torch.equal(model(ids.to(dtype)), model(ids))


def test_unembedding_is_the_embedding_matrix():
    model = _model()
    assert not any(p.shape == model.embed.weight.shape for p in model.blocks.parameters())
    ids = torch.randint(SMALL.vocab, (1, 5))
    with torch.no_grad():
        before = model(ids)
        model.embed.weight[3] += 1.0  # token 3 is never fed in unless drawn, but is scored
        after = model(ids)
    assert (after[..., 3] != before[..., 3]).all()


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize(("tokens", "cached"), [(1, 0), (9, 0), (1, 7), (3, 5)])
def test_forward_flops_match_the_counter(tokens, cached):
    model = _model()
    ids = torch.randint(SMALL.vocab, (1, cached + tokens))
    cache = model.new_cache()
    with torch.no_grad():
        if cached:
            model(ids[:, :cached], cache=cache)
        counted = _counted(lambda: model(ids[:, cached:], cache=cache))
    assert counted == forward_flops(SMALL, tokens, cached=cached)


def test_a_training_step_costs_three_forward_passes():
    model = _model()
    ids = torch.randint(SMALL.vocab, (2, 9))

    def step():
        loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()

    assert _counted(step) == 3 * 2 * forward_flops(SMALL, 8)


@pytest.mark.parametrize("chunks", [[10], [1] * 10, [4, 1, 1, 3, 1], [7, 3]])
def test_cached_decoding_reproduces_the_full_pass(chunks):
    model = _model()
    ids = torch.randint(SMALL.vocab, (2, sum(chunks)))
    cache, pieces, start = model.new_cache(batch=2), [], 0
    with torch.no_grad():
        full = model(ids)
        for n in chunks:
            pieces.append(model(ids[:, start : start + n], cache=cache))
            start += n
    cached = torch.cat(pieces, dim=1)
    assert check_cache(full, cached).passed
    assert cache.length == sum(chunks)
    assert cache.nbytes == kv_cache_bytes(
        layers=2, positions=SMALL.context, kv_heads=2, head_dim=4, bytes_per_element=4, batch=2
    )


def test_causality_and_attention_rows_pass_the_diagnostics():
    model = _model()
    x = torch.randn(2, 9, SMALL.width)
    assert check_causality(model.forward_embeddings, x).passed
    ids = torch.randint(SMALL.vocab, (2, 9))
    with torch.no_grad():
        _, weights = model(ids, return_weights=True)
        edited = ids.clone()
        edited[:, 5:] = (edited[:, 5:] + 1) % SMALL.vocab
        assert torch.equal(model(ids)[:, :5], model(edited)[:, :5])  # bit for bit
    assert len(weights) == SMALL.layers
    for w in weights:
        assert w.shape == (2, SMALL.heads, 9, 9)
        assert check_attention_rows(w, causal_mask(9)).passed


def test_initial_loss_is_near_log_vocab():
    config = GPTConfig(vocab=50, width=32, heads=4, kv_heads=2)
    ids = torch.randint(50, (4, 33))
    with torch.no_grad():
        loss = F.cross_entropy(TinyGPT(config)(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    assert abs(loss.item() - math.log(50)) < 0.05


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: GPTConfig(vocab=0), ValueError, "vocab must be >= 1"),
        (lambda: GPTConfig(vocab=5, width=12, heads=4), ValueError, "heads of even width"),
        (lambda: GPTConfig(vocab=5, width=15, heads=5, kv_heads=1), ValueError, "even width"),
        (lambda: GPTConfig(vocab=5, heads=4, kv_heads=3), ValueError, "not a multiple of kv_"),
        (lambda: GPTConfig(vocab=5, eps=0.0), ValueError, "eps must be > 0"),
        (lambda: GPTConfig(vocab=5, hidden=-1), ValueError, "hidden must be >= 0"),
        (lambda: TinyGPT("small"), TypeError, "config must be a GPTConfig"),
        (lambda: _model()(torch.tensor([[0, 11]])), ValueError, r"ids must .* in \[0, 11\)"),
        (lambda: _model()(torch.zeros(1, 3)), TypeError, "ids must have"),
        (lambda: _model()(torch.zeros(3, dtype=torch.long)), ValueError, "ids must have rank 2"),
        (lambda: _model().forward_embeddings(torch.zeros(1, 3, 8)), ValueError, "d=16"),
        (lambda: _model()(torch.zeros(1, 13, dtype=torch.long), cache=_model().new_cache()),
         ValueError, "exceeds max_positions=12"),
        (lambda: _model()(torch.zeros(1, 3, dtype=torch.long), cache={}), TypeError,
         "cache must be a KVCache"),
        (lambda: _model().forward_embeddings(torch.zeros(1, 3, 16, dtype=torch.float64)),
         TypeError, "x must have the model's dtype"),
        (lambda: _model()(torch.zeros(2, 3, dtype=torch.long), cache=_model().new_cache()),
         ValueError, r"cache holds .* = \(2, 1, 2, 4, torch.float32\) but this call needs \(2, 2,"),
        (lambda: forward_flops(SMALL, 0), ValueError, "tokens must be >= 1"),
        (lambda: forward_flops(SMALL, 2, cached=-1), ValueError, "cached must be >= 0"),
    ],
)  # fmt: skip
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- the options of real models: head_width, qkv_bias, tie_embeddings -----------------------


def test_real_model_options_match_the_sdpa_reference():
    model = _model(REAL)
    assert all(b.q.bias.abs().min() > 0 for b in model.blocks)  # non-trivial biases
    assert not torch.equal(model.unembed.weight, model.embed.weight)
    ids = torch.randint(REAL.vocab, (3, 10))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("fields", [{}, {"head_width": 6}, {"head_width": 2, "kv_heads": 1},
                                    {"qkv_bias": True}, {"tie_embeddings": False},
                                    {"head_width": 10, "qkv_bias": True,
                                     "tie_embeddings": False}])  # fmt: skip
def test_param_count_matches_the_modules_with_real_model_options(fields):
    config = GPTConfig(
        **{"vocab": 13, "width": 16, "layers": 2, "heads": 4, "kv_heads": 2, **fields}
    )
    model = TinyGPT(config)
    assert param_count(config) == sum(p.numel() for p in model.parameters())
    with torch.device("meta"):
        assert param_count(config) == sum(p.numel() for p in TinyGPT(config).parameters())
    if config.qkv_bias:
        assert model.blocks[0].o.bias is None  # only W_Q, W_K, W_V carry biases
        assert torch.equal(model.blocks[0].q.bias, torch.zeros(4 * config.head_dim))


@pytest.mark.parametrize(("tokens", "cached"), [(1, 0), (9, 0), (3, 5)])
def test_forward_flops_match_the_counter_with_real_model_options(tokens, cached):
    model = _model(REAL)
    ids = torch.randint(REAL.vocab, (1, cached + tokens))
    cache = model.new_cache()
    with torch.no_grad():
        if cached:
            model(ids[:, :cached], cache=cache)
        counted = _counted(lambda: model(ids[:, cached:], cache=cache))
    assert counted == forward_flops(REAL, tokens, cached=cached)


def test_cached_decoding_with_real_model_options_reproduces_the_full_pass():
    model = _model(REAL)
    ids = torch.randint(REAL.vocab, (2, 10))
    cache = model.new_cache(batch=2)
    assert cache.keys.shape[-1] == 6
    with torch.no_grad():
        full = model(ids)
        prefill = [model(ids[:, :4], cache=cache)]
        steps = torch.cat(
            prefill + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 10)], 1
        )
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_repr_lists_the_real_model_options_only_when_set():
    assert "head_width" not in repr(SMALL) and "tie_embeddings" not in repr(SMALL)
    assert repr(SMALL).startswith("GPTConfig(vocab=11, width=16, layers=2, heads=4")
    text = repr(REAL)
    assert "head_width=6" in text and "qkv_bias=True" in text and "tie_embeddings=False" in text
    assert eval(text, {"GPTConfig": GPTConfig}) == REAL
    assert REAL.head_dim == 6 and SMALL.head_dim == 4


def test_head_width_frees_width_from_dividing_by_heads():
    config = GPTConfig(vocab=5, width=12, heads=4, kv_heads=2, head_width=8)  # 12 / 4 is odd
    assert config.head_dim == 8
    with pytest.raises(ValueError, match="or give head_width explicitly"):
        GPTConfig(vocab=5, width=12, heads=4)


def test_shipped_configurations_load_and_convert():
    from attnbook import configs

    names = configs.names()
    assert "llama-3-8b" in names and names == sorted(names)
    first = configs.load("llama-3-8b")
    first["hidden_size"] = 1
    assert configs.load("llama-3-8b")["hidden_size"] == 4096  # a new dict every time
    llama3 = configs.gpt_config("llama-3-8b")
    assert (llama3.width, llama3.kv_heads, llama3.ffn_width) == (4096, 8, 14336)
    assert not llama3.tie_embeddings and not llama3.qkv_bias
    assert configs.gpt_config("qwen2.5-0.5b").qkv_bias
    gemma = configs.gpt_config("gemma-7b")
    assert gemma.head_dim * gemma.heads == 4096 != gemma.width
    for name in names:
        config = configs.gpt_config(name)
        assert param_count(config) == configs.load(name)["published_parameters"]
