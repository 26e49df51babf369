"""Exercises of chapters 3 and 7: the KV-cache byte count and the FLOPs of attention.

Both are called with keyword arguments and must return an exact ``int``. The cases include
counts past 2**31 and counts float32 cannot hold: a count computed in a 32-bit integer
(``torch.int32``, ``numpy.int32``) wraps around there, and one computed in float32 rounds;
the verdict says which happened.

``kv_cache_bytes(*, batch, layers, positions, heads, kv_heads, head_dim, dtype)``
    Bytes of the keys and values a decoder caches: ``batch`` sequences, ``layers`` layers,
    ``positions`` cached positions, ``heads`` query heads, ``kv_heads`` key/value heads of
    ``head_dim`` features each (values as wide as keys), stored as ``dtype`` (a
    ``torch.dtype``).

``attention_flops(*, t_q, t_k, heads, d_k, d_v)``
    FLOPs of the two attention matmuls (scores and weighted sum of values) for ``heads`` heads,
    ``t_q`` queries and ``t_k`` keys, one multiply-add counted as 2 FLOPs, as
    ``torch.utils.flop_counter.FlopCounterMode`` counts.
"""

from __future__ import annotations

import torch

from attnbook.costs import kv_cache_bytes as _kv_cache_bytes
from attnbook.practice._exercise import Case, Exercise, Mistake


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def kv_cache_bytes(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return _kv_cache_bytes(
        batch=batch, layers=layers, positions=positions, kv_heads=kv_heads,
        head_dim=head_dim, bytes_per_element=_element_size(dtype),
    )  # fmt: skip


def _kv(batch=1, layers=1, positions=1, heads=1, kv_heads=1, head_dim=1, dtype=torch.bfloat16):
    """The formula with each factor passed in, so a mistake is one changed argument."""
    return 2 * batch * layers * positions * kv_heads * head_dim * _element_size(dtype)


def _config(batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return lambda: dict(
        batch=batch, layers=layers, positions=positions, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, dtype=dtype,
    )  # fmt: skip


_BF16, _F32 = torch.bfloat16, torch.float32


def solution_kv_cache_bytes(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    per_position = 2 * kv_heads * head_dim  # a key and a value per KV head (heads is unused)
    return batch * layers * positions * per_position * dtype.itemsize


KV_CACHE_BYTES = Exercise(
    name="kv_cache_bytes",
    chapter="ch-multihead",
    signature="kv_cache_bytes(*, batch, layers, positions, heads, kv_heads, head_dim, dtype)",
    reference=kv_cache_bytes,
    solution=solution_kv_cache_bytes,
    keyword_call=True,
    hint="Write what one layer stores for one cached position of one sequence (a key and a "
    "value per key/value head, head_dim numbers each, element_size bytes per number), then "
    "multiply by what there are several of: sequences, layers, positions.",
    cases=(
        Case("hand case: Llama-3-8B-like, 1 sequence, 4096 positions, bfloat16", "hand",
             _config(1, 32, 4096, 32, 8, 128, _BF16)),
        Case("random case: 4 sequences, 12 layers, 1000 positions, float32", "random",
             _config(4, 12, 1000, 12, 12, 64, _F32)),
        Case("random case: 3 sequences, 80 layers, 8192 positions, 64 heads in 8 groups",
             "random", _config(3, 80, 8192, 64, 8, 128, _BF16)),
        Case("random case: 2 sequences, 5 layers, 7 positions, float16", "random",
             _config(2, 5, 7, 6, 3, 10, torch.float16)),
        Case("edge case: multi-query (one KV head), 1 position", "edge",
             _config(6, 2, 1, 16, 1, 32, _F32)),
        Case("edge case: an 8-bit cache (float8_e4m3fn)", "edge",
             _config(2, 3, 333, 8, 4, 96, torch.float8_e4m3fn)),
        Case("edge case: 3,672,059,160 bytes, a count float32 cannot hold exactly", "edge",
             _config(7, 33, 4097, 10, 5, 97, _F32)),
    ),
    mistakes=(
        Mistake("keys_only", "K and V are counted once: the cache holds a key and a value "
                "per head and position, so twice the numbers.", "What does each cached "
                "position store, per layer and KV head?", "ch-multihead, the KV cache",
                lambda **c: _kv(**c) // 2),
        Mistake("query_heads", "the count uses the query heads; only the key/value heads are "
                "cached (queries are used once and thrown away).", "Chapter 3: with grouped-"
                "query attention, how many distinct key heads does a layer hold?",
                "ch-multihead, MQA/GQA", lambda **c: _kv(**{**c, "kv_heads": c["heads"]})),
        Mistake("bits_not_bytes", "the element size is in bits (16 for bfloat16), not bytes.",
                "One byte is 8 bits; torch.empty((), dtype=dtype).element_size() gives bytes.",
                "units", lambda **c: 8 * _kv(**c)),
        Mistake("forgot_layers", "the layers are missing: every layer keeps its own cache.",
                "Each layer has its own keys and values.", "ch-multihead",
                lambda **c: _kv(**{**c, "layers": 1})),
        Mistake("forgot_batch", "the batch is missing: every sequence keeps its own cache.",
                "Two sequences in a batch share no positions.", "ch-multihead",
                lambda **c: _kv(**{**c, "batch": 1})),
        Mistake("quadratic_in_positions", "the count grows with positions squared, like the "
                "score matrix; the cache holds one key and one value per position.",
                "Which tensor is (T, T): the cache or the scores?", "ch-flops vs ch-multihead",
                lambda **c: _kv(**c) * c["positions"]),
        Mistake("not_in_bytes", "the result is in GiB or MiB (bytes / 2**30 or / 2**20, "
                "rounded or not), not in bytes.", "Return the exact number of bytes as an "
                "int; convert only when printing.", "units", lambda **c: _kv(**c) / 2**30,
                (lambda **c: _kv(**c) / 2**20, lambda **c: round(_kv(**c) / 2**20),
                 lambda **c: round(_kv(**c) / 2**30), lambda **c: _kv(**c) // 2**20,
                 lambda **c: _kv(**c) // 2**30)),
    ),
)  # fmt: skip


def attention_flops(*, t_q, t_k, heads, d_k, d_v):
    return 2 * heads * t_q * t_k * (d_k + d_v)


def _shape(t_q, t_k, heads, d_k, d_v):
    return lambda: dict(t_q=t_q, t_k=t_k, heads=heads, d_k=d_k, d_v=d_v)


def solution_attention_flops(*, t_q, t_k, heads, d_k, d_v):
    scores = 2 * t_q * d_k * t_k  # (t_q, d_k) @ (d_k, t_k), one head
    weighted_sum = 2 * t_q * t_k * d_v  # (t_q, t_k) @ (t_k, d_v), one head
    return heads * (scores + weighted_sum)


ATTENTION_FLOPS = Exercise(
    name="attention_flops",
    chapter="ch-flops",
    signature="attention_flops(*, t_q, t_k, heads, d_k, d_v)",
    reference=attention_flops,
    solution=solution_attention_flops,
    keyword_call=True,
    hint="Chapter 7's rule: an (m x k) @ (k x p) product costs 2·m·k·p FLOPs. Write down the "
    "two products of one head with their shapes, then count the heads.",
    cases=(
        Case("hand case: 4 tokens, 2 heads, d_k = d_v = 8", "hand", _shape(4, 4, 2, 8, 8)),
        Case("random case: cross-attention, 10 queries, 77 keys, d_k = 64, d_v = 32",
             "random", _shape(10, 77, 8, 64, 32)),
        Case("random case: 48 tokens, 4 heads of 8", "random", _shape(48, 48, 4, 8, 8)),
        Case("edge case: one decoding step, 4096 cached keys, 32 heads of 128", "edge",
             _shape(1, 4096, 32, 128, 128)),
        Case("edge case: one head, one feature", "edge", _shape(3, 5, 1, 1, 1)),
        Case("edge case: 2,411,445,036 FLOPs, a count float32 cannot hold exactly", "edge",
             _shape(1001, 4097, 3, 65, 33)),
        Case("edge case: widths not divisible by the heads (3 heads, d_k = 8, d_v = 5)",
             "edge", _shape(6, 9, 3, 8, 5)),
    ),
    mistakes=(
        Mistake("macs_not_flops", "multiply-adds are counted once; FLOPs count them twice.",
                "Chapter 7's counting rule: how many FLOPs is one multiply-add?",
                "ch-flops, the counting rule", lambda **s: attention_flops(**s) // 2),
        Mistake("scores_only", "only q @ k^T is counted; the weighted sum of the values is a "
                "second matmul of the same size class.", "What happens to the weights after "
                "the softmax?", "ch-flops, the cost of one layer",
                lambda **s: 2 * s["heads"] * s["t_q"] * s["t_k"] * s["d_k"]),
        Mistake("values_use_d_k", "the weighted sum is counted with d_k; it produces d_v "
                "features per query.", "What are the shapes of the weights and of v?",
                "ch-multihead (cross-attention shapes)",
                lambda **s: 4 * s["heads"] * s["t_q"] * s["t_k"] * s["d_k"]),
        Mistake("quadratic_in_keys", "the count uses t_k squared, as if every step had as "
                "many queries as keys; a decoding step has one query.", "The score matrix is "
                "(t_q, t_k). What is t_q when one token is generated?",
                "ch-flops exercise 3 (decoding)",
                lambda **s: attention_flops(**{**s, "t_q": s["t_k"]})),
        Mistake("forgot_heads", "the count is one head's: either the factor heads is missing, "
                "or d_k and d_v were divided by heads before multiplying by heads (they are "
                "already the widths of one head, so the two cancel).", "Every head computes "
                "its own scores and its own weighted sum over d_k and d_v features; does your "
                "count grow when heads doubles?", "ch-flops",
                lambda **s: attention_flops(**{**s, "heads": 1}),
                (lambda **s: 2 * s["heads"] * s["t_q"] * s["t_k"]
                 * (s["d_k"] / s["heads"] + s["d_v"] / s["heads"]),)),
        Mistake("widths_divided_by_heads", "d_k and d_v are divided by heads with integer "
                "division (d_k // heads): they are already the widths of one head.",
                "d_k is one head's width, not the model's; nothing is split again.",
                "ch-multihead, d_k = d_model / heads is done before this count",
                lambda **s: 2 * s["heads"] * s["t_q"] * s["t_k"]
                * (s["d_k"] // s["heads"] + s["d_v"] // s["heads"])),
    ),
)  # fmt: skip
