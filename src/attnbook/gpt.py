"""A decoder-only language model assembled from the book's parts.

Token embedding -> ``L`` pre-norm blocks (RMSNorm, grouped-query attention with RoPE through
:func:`attnbook.attention.attention`, RMSNorm, SwiGLU) -> RMSNorm -> logits through the
embedding matrix again (tied unembedding), or through a separate unembedding matrix when
``tie_embeddings=False`` (Llama 2 and 3). The layout is Hugging Face's ``LlamaForCausalLM``
(``head_width`` is its ``head_dim``, ``qkv_bias`` Qwen2's q/k/v biases), so the same
:func:`param_count` counts real configurations exactly. With a
:class:`attnbook.kv_cache.KVCache` the same forward pass decodes incrementally. Sampling
lives in :mod:`attnbook.sampling`; the counts of parameters and FLOPs are
:func:`param_count` and :func:`forward_flops`.

Extra shape name: ``V`` vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from attnbook._checks import (
    require_bool,
    require_instance,
    require_int,
    require_real,
    require_tensor,
    require_values,
    too_large,
)
from attnbook.attention import attention
from attnbook.costs import attention_flops, ffn_flops, swiglu_hidden
from attnbook.heads import merge_heads, split_heads
from attnbook.kv_cache import KVCache
from attnbook.masks import causal_mask
from attnbook.norm import RMSNorm
from attnbook.rope import apply_rope

__all__ = ["GPTConfig", "TinyGPT", "forward_flops", "param_count"]

_REAL_MODEL_FIELDS = ("head_width", "qkv_bias", "tie_embeddings")


@dataclass(frozen=True, repr=False)
class GPTConfig:
    """The architecture; the defaults are chapter 13's model. Every size is a positive int.

    The last three fields describe real models and default to chapter 13's choices:
    ``head_width`` (Hugging Face's ``head_dim``; 0 means ``width // heads``; Gemma-7B and
    Qwen3 use heads wider or narrower than ``width / heads``), ``qkv_bias`` (biases on the
    query, key and value projections, as in Qwen2) and ``tie_embeddings`` (``False``: a
    separate ``V x d`` unembedding, as in Llama 2 and 3). The repr lists them only when they
    differ from those defaults.
    """

    vocab: int  # V: token ids lie in [0, V)
    width: int = 64  # d: the residual stream's width
    layers: int = 2  # L: blocks
    heads: int = 4  # Hq: query heads, each of width d / Hq (even, for RoPE)
    kv_heads: int = 2  # Hkv: key/value heads shared by groups of Hq / Hkv query heads
    hidden: int = 0  # SwiGLU width; 0 means swiglu_hidden(width) = 8 d // 3
    context: int = 64  # longest sequence trained on, and the KV cache's default size
    rope_base: float = 10000.0  # RoPE wavelength scale
    eps: float = 1e-6  # RMSNorm's epsilon
    head_width: int = 0  # dk per head; 0 means width // heads (HF's head_dim)
    qkv_bias: bool = False  # biases on W_Q, W_K, W_V (Qwen2); W_O never has one
    tie_embeddings: bool = True  # False: a separate unembedding matrix (Llama 2 and 3)

    def __post_init__(self) -> None:
        for name in ("vocab", "width", "layers", "heads", "kv_heads", "context"):
            require_int(name, getattr(self, name), minimum=1)
        require_int("hidden", self.hidden, minimum=0)
        require_real("rope_base", self.rope_base, positive=True)
        require_real("eps", self.eps, positive=True)
        require_int("head_width", self.head_width, minimum=0)
        require_bool("qkv_bias", self.qkv_bias)
        require_bool("tie_embeddings", self.tie_embeddings)
        if self.head_width:
            if self.head_width % 2:
                raise ValueError(f"head_width={self.head_width} must be even, for RoPE")
        elif self.width % self.heads or (self.width // self.heads) % 2:
            raise ValueError(
                f"width={self.width} must split into heads={self.heads} heads of even width "
                "(or give head_width explicitly)"
            )
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")

    def __repr__(self) -> str:
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name not in _REAL_MODEL_FIELDS or getattr(self, f.name) != f.default
        ]
        return f"GPTConfig({', '.join(shown)})"

    @property
    def head_dim(self) -> int:
        """Features per query, key and value head: ``head_width``, or ``width // heads``."""
        return self.head_width or self.width // self.heads

    @property
    def ffn_width(self) -> int:
        return self.hidden or swiglu_hidden(self.width)


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``: three bias-free matrices, ``(..., d) -> (..., d)``."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm block: ``h = x + attn(norm(x))``, then ``h + ffn(norm(h))``."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.c, d, kv_width, bias = c, c.width, c.kv_heads * c.head_dim, c.qkv_bias
        q_width = c.heads * c.head_dim  # d itself unless head_width says otherwise
        self.norm1, self.norm2 = RMSNorm(d, eps=c.eps), RMSNorm(d, eps=c.eps)
        self.q, self.o = nn.Linear(d, q_width, bias=bias), nn.Linear(q_width, d, bias=False)
        self.k, self.v = nn.Linear(d, kv_width, bias=bias), nn.Linear(d, kv_width, bias=bias)
        self.ffn = SwiGLU(d, c.ffn_width)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None, layer: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c, z = self.c, self.norm1(x)  # (B, T, d)
        q = apply_rope(split_heads(self.q(z), c.heads), positions, base=c.rope_base)
        k = apply_rope(split_heads(self.k(z), c.kv_heads), positions, base=c.rope_base)
        v = split_heads(self.v(z), c.kv_heads)  # q (B, Hq, T, dk); k, v (B, Hkv, T, dk)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, Hkv, Tk, dk): the cached prefix, then these
        mask = causal_mask(q.shape[-2], k.shape[-2], device=x.device)  # queries are the newest
        out, weights = attention(q, k, v, mask, return_weights=True)  # (B, Hq, T, dk)
        h = x + self.o(merge_heads(out))  # (B, T, d)
        return h + self.ffn(self.norm2(h)), weights  # (B, T, d), (B, Hq, T, Tk)


class TinyGPT(nn.Module):
    """Embedding, ``L`` pre-norm blocks, a final RMSNorm and the unembedding (tied unless
    ``config.tie_embeddings`` is false, then a separate ``unembed`` matrix ``(V, d)``).

    Weights start as in GPT-2: normal with std 0.02, the two projections that write into the
    residual stream (``o`` and ``ffn.down``) shrunk by ``sqrt(2 L)``; norm gains start at 1,
    biases (``qkv_bias``) at 0. Built on the ``meta`` device (``with torch.device("meta"):``)
    it allocates nothing, so a 70B configuration can be counted:
    ``sum(p.numel() for p in model.parameters()) == param_count(config)``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = require_instance("config", config, GPTConfig)
        with too_large(f"config (vocab={config.vocab}, width={config.width})"):
            self.embed = nn.Embedding(config.vocab, config.width)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
            self.norm = RMSNorm(config.width, eps=config.eps)
            if not config.tie_embeddings:
                self.unembed = nn.Linear(config.width, config.vocab, bias=False)
        for name, p in self.named_parameters():
            if p.is_meta:  # shapes only: nothing to draw (and torch's meta normal_ is slow)
                continue
            if p.dim() == 2:
                residual = name.endswith((".o.weight", ".down.weight"))
                nn.init.normal_(p, std=0.02 / (2 * config.layers) ** 0.5 if residual else 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(
        self, ids: torch.Tensor, *, cache: KVCache | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for every position.

        Args:
            ids: integer token ids ``(B, T)`` in ``[0, V)``, of any integer dtype.
            cache: optional :class:`KVCache`; ``ids`` are then the tokens that follow the
                ``cache.length`` positions it holds, and their keys and values are appended.
                Without a cache the tokens sit at positions ``0 .. T - 1``.
            return_weights: also return each layer's attention weights.

        Returns:
            ``logits (B, T, V)``, or ``(logits, [weights (B, Hq, T, Tk)] * L)``; row ``t`` of
            the logits predicts the token after position ``t``. ``T`` may exceed
            ``config.context`` (RoPE has no length limit; the model was trained on shorter).

        Raises:
            TypeError: ``ids`` not an integer tensor, a ``cache`` that is not a
                :class:`KVCache`, a non-bool ``return_weights``.
            ValueError: ``ids`` empty, of rank other than 2, outside ``[0, V)`` or without
                values (``meta``); a ``cache`` of other sizes, dtype or device than the
                model's, whose layers hold different numbers of positions, or without room
                for ``T`` more positions.
        """
        ids = require_tensor("ids", ids, rank=2, dtype="integer", shape_hint="(B, T)")
        require_values("ids", ids)
        if ids.numel() == 0 or ids.min() < 0 or ids.max() >= self.config.vocab:
            raise ValueError(f"ids must be a non-empty (B, T) in [0, {self.config.vocab})")
        x = self.embed(ids.long())  # (B, T, d); nn.Embedding takes only int32/int64 ids
        return self.forward_embeddings(x, cache=cache, return_weights=return_weights)

    def forward_embeddings(
        self, x: torch.Tensor, *, cache: KVCache | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` from token embeddings ``x (B, T, d)`` instead of ids, so that the
        input can be perturbed smoothly (as :func:`attnbook.diagnostics.check_causality` does).

        Raises as :meth:`forward` does, with ``x`` for ``ids``: ``x`` must be a floating
        ``(B, T, d)`` tensor with ``B, T >= 1``, of the model's dtype and on its device."""
        x = require_tensor("x", x, rank=3, dtype="floating", shape_hint="(B, T, d)")
        return_weights = require_bool("return_weights", return_weights)
        c, weight = self.config, self.embed.weight
        if x.shape[-1] != c.width or x.shape[0] * x.shape[1] == 0:
            raise ValueError(f"x must be (B, T, d={c.width}), got {tuple(x.shape)}")
        if x.dtype != weight.dtype:
            raise TypeError(f"x must have the model's dtype {weight.dtype}, got {x.dtype}")
        if x.device != weight.device:
            raise ValueError(f"x is on {x.device} but the model is on {weight.device}")
        if cache is not None:
            require_instance("cache", cache, KVCache)
            fits = (c.layers, x.shape[0], c.kv_heads, c.head_dim, weight.dtype)
            has = (*cache.keys.shape[:3], cache.keys.shape[4], cache.keys.dtype)
            if has != fits:
                raise ValueError(
                    f"cache holds (layers, B, Hkv, dk, dtype) = {has} but this call needs {fits}"
                )
            if cache.keys.device != weight.device:
                raise ValueError(f"cache is on {cache.keys.device}, the model on {weight.device}")
            if len(set(cache._filled)) != 1:  # appended to by hand, layer by layer
                raise ValueError(
                    f"cache layers hold different numbers of positions {cache._filled}; a "
                    "forward pass needs every layer to hold the same prefix"
                )
            if cache.length + x.shape[1] > cache.max_positions:
                raise ValueError(
                    f"cache holds {cache.length} positions; {x.shape[1]} more exceeds "
                    f"max_positions={cache.max_positions}"
                )
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (T,)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, positions, cache, layer)  # (B, T, d)
            all_weights.append(weights)
        unembed = self.embed.weight if c.tie_embeddings else self.unembed.weight  # (V, d)
        logits = F.linear(self.norm(x), unembed)  # (B, T, V)
        return (logits, all_weights) if return_weights else logits

    def new_cache(self, batch: int = 1, max_positions: int | None = None) -> KVCache:
        """An empty :class:`KVCache` sized for this model (``max_positions`` defaults to
        ``config.context``), with the dtype and device of its weights."""
        c, w = self.config, self.embed.weight
        size = c.context if max_positions is None else max_positions
        return KVCache(layers=c.layers, batch=batch, kv_heads=c.kv_heads, head_dim=c.head_dim,
                       max_positions=size, dtype=w.dtype, device=w.device)  # fmt: skip


def param_count(config: GPTConfig) -> int:
    """Parameters of :class:`TinyGPT`, and of Hugging Face's ``LlamaForCausalLM`` (and the
    Mistral, Qwen2 and Gemma models of the same layout) built from the same sizes.

    Per block: ``W_Q`` and ``W_O`` are ``d x Hq dk``; ``W_K`` and ``W_V`` are ``d x Hkv dk``
    (grouped-query attention); ``qkv_bias`` adds ``Hq dk + 2 Hkv dk`` biases; the SwiGLU has
    three ``d x hidden`` matrices; two RMSNorm gains add ``2 d``. Then the embedding ``V d``,
    once more ``V d`` when the unembedding is untied, and the final norm's ``d``. With the
    default ``head_width`` this is :func:`attnbook.costs.block_params` with ``W_K, W_V``
    shrunk from ``d x d`` to ``d x Hkv dk``.
    """
    c = require_instance("config", config, GPTConfig)
    d, q_width, kv_width = c.width, c.heads * c.head_dim, c.kv_heads * c.head_dim
    attention_weights = 2 * d * q_width + 2 * d * kv_width
    biases = q_width + 2 * kv_width if c.qkv_bias else 0
    block = attention_weights + biases + 3 * d * c.ffn_width + 2 * d
    embeddings = c.vocab * d * (1 if c.tie_embeddings else 2)
    return c.layers * block + embeddings + d


def forward_flops(config: GPTConfig, tokens: int, *, cached: int = 0) -> int:
    """Matmul FLOPs of one forward pass over ``tokens`` new tokens of one sequence.

    The new tokens attend to ``cached`` earlier positions plus themselves, computed densely
    (masked scores are computed, then dropped), as :func:`attnbook.attention.attention` does.
    Counts as :func:`attnbook.costs.ffn_flops` and friends: two FLOPs per multiply-add, no
    elementwise work (biases and norms are left out). ``cached=0`` gives a full pass;
    ``tokens=1`` one cached decoding step. The scores and weighted values cost
    ``4 n Tk Hq dk``, which is ``4 n Tk d`` unless ``head_width`` makes ``Hq dk != d``.
    """
    c = require_instance("config", config, GPTConfig)
    n = require_int("tokens", tokens, minimum=1)
    keys = n + require_int("cached", cached, minimum=0)
    d, q_width, kv_width = c.width, c.heads * c.head_dim, c.kv_heads * c.head_dim
    projections = 2 * n * d * (2 * q_width + 2 * kv_width)  # W_Q, W_O; W_K, W_V under GQA
    pairwise = attention_flops(n, q_width) * keys // n  # 4 n Tk Hq dk: scores, weighted values
    per_layer = projections + pairwise + ffn_flops(n, d, c.ffn_width, gated=True)
    return c.layers * per_layer + 2 * n * d * c.vocab  # + the unembedding, tied or not
