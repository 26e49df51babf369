"""Exercises of chapters 3, 4 and 13: attention under a mask, grouped-query attention, and one
decoding step with a KV cache and RoPE.

``masked_attention(q, k, v, mask)``
    q ``(..., Tq, dk)``, k ``(..., Tk, dk)``, v ``(..., Tk, dv)``; ``mask`` a ``torch.bool``
    tensor that broadcasts to ``(..., Tq, Tk)`` (a ``(Tq, Tk)`` causal mask, a
    ``(B, 1, 1, Tk)`` padding mask), ``True`` = may attend (the convention of this book and
    of SDPA's boolean ``attn_mask``; ``nn.MultiheadAttention`` means the opposite). Returns
    ``softmax(q k^T / sqrt(dk), masked) v``, shape ``(..., Tq, dv)``, dtype of ``q``. A query
    whose every key is masked gets a zero row (it reads nothing), never NaN. One case has
    float32 scores past 88, where ``exp`` of a raw score overflows: the softmax must be the
    stable one.

``gqa_attention(q, k, v)``
    q ``(B, Hq, Tq, dk)``, k ``(B, Hkv, Tk, dk)``, v ``(B, Hkv, Tk, dv)`` with ``Hq`` a
    multiple of ``Hkv``: the query heads come in ``Hkv`` groups of ``g = Hq / Hkv``
    neighbours, and query head ``h`` reads key/value head ``h // g`` (as Llama's
    ``repeat_kv`` and SDPA's ``enable_gqa`` do). No mask. Returns ``(B, Hq, Tq, dv)``, dtype
    of ``q``. ``Hkv = Hq`` is multi-head attention, ``Hkv = 1`` multi-query. One case has
    float32 scores past 88, as in ``masked_attention``.

``decode_step(q, k, v, cache_k, cache_v)``
    One new token per sequence: q, k, v ``(B, H, 1, d)`` its query, key and value as
    projected (RoPE not yet applied); ``cache_k``, ``cache_v`` ``(B, H, P, d)`` the keys (RoPE
    already applied) and values of positions ``0 .. P-1``. The new token sits at position
    ``P``: rotate its query and key by ``P`` (rotate-half RoPE, base 10000, as in
    ``apply_rope``), append its key and value to the caches, and let its query read all
    ``P + 1`` positions, itself included. Returns ``(out, cache_k, cache_v)``: ``out``
    ``(B, H, 1, d)`` and the two caches ``(B, H, P + 1, d)``, all in the dtype of ``q``.
    The inputs are not changed (return new caches). ``P`` may be 0. The cases include float16
    and bfloat16 steps at positions that 16 bits round (4001, 1001): compute the position,
    the frequencies and the angles in float32 or wider (as for ``apply_rope``), and a case
    with float32 scores past 88 (a stable softmax).
"""

from __future__ import annotations

import math

import torch

from attnbook.attention import softmax as _zero_row_softmax
from attnbook.heads import split_heads as _split_heads
from attnbook.practice._attention import SCALE_FAMILIES, SOFTMAX_FAMILIES, attend
from attnbook.practice._exercise import (
    Case,
    Exercise,
    Mistake,
    from_families,
    pick,
    randn,
    small_ints,
)
from attnbook.practice._rope import ROPE_FAMILIES, rotate
from attnbook.rope import apply_rope as _apply_rope

_NEG_INF = float("-inf")


def _scores(q, k):
    return (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])


# --- masked attention ---------------------------------------------------------------------


def masked_attention(q, k, v, mask):
    scores = _scores(q, k).masked_fill(~mask, _NEG_INF)
    return (_zero_row_softmax(scores, -1) @ v.double()).to(q.dtype)


def solution_masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # a fully masked row: 0 / 0 -> reads nothing
    return weights @ v


def _masked_with(q, k, v, mask, *, keep=None, fill=_NEG_INF, zero_rows=True, after=False):
    keep = mask if keep is None else keep
    scores = _scores(q, k)
    if after:  # the weights of the masked keys are zeroed after a softmax over every key
        weights = torch.softmax(scores, -1) * keep
    else:
        scores = scores.masked_fill(~keep, fill)
        weights = _zero_row_softmax(scores, -1) if zero_rows else torch.softmax(scores, -1)
    return (weights @ v.double()).to(q.dtype)


def _fill_native(q, k, v, mask, value):
    """A reader's code in q's own dtype with a large negative constant."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    fill = torch.finfo(q.dtype).min if value is None else value
    return torch.softmax(s.masked_fill(~mask, fill), -1) @ v


def _qkvm(tq, tk, dk, dv, lead, mask, *, seed, dtype=torch.float64, scale=1.0):
    return lambda: {
        "q": randn(*lead, tq, dk, seed=seed, dtype=dtype, scale=scale),
        "k": randn(*lead, tk, dk, seed=seed + 1, dtype=dtype, scale=scale),
        "v": randn(*lead, tk, dv, seed=seed + 2, dtype=dtype),
        "mask": mask.clone(),
    }


def _causal(tq, tk):
    return torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)


def _padding(lengths, t):
    return (torch.arange(t) < torch.tensor(lengths)[:, None])[:, None, None, :]


def _heads_case():
    fused = randn(2, 3, 24, seed=207, dtype=torch.float32)
    q, k, v = fused.split(8, dim=-1)
    return {"q": _split_heads(q, 2), "k": _split_heads(k, 2), "v": _split_heads(v, 2),
            "mask": _causal(3, 3)}  # fmt: skip


def _fp16_case():
    mask = _causal(5, 4)  # 5 queries, 4 keys: the first query has no key
    return {
        "q": small_ints(2, 5, 4, seed=210, dtype=torch.float16, high=3),
        "k": small_ints(2, 4, 4, seed=211, dtype=torch.float16, high=3),
        "v": small_ints(2, 4, 3, seed=212, dtype=torch.float16, high=2),
        "mask": mask,
    }


def _masked_like(**knobs):
    return lambda q, k, v, mask: attend(q, k, v, mask, **knobs)


_CONVENTION_HINT = (
    "This book and SDPA use True = may attend; nn.MultiheadAttention's boolean masks use True "
    "= masked. Should a causal row 0 be allowed to read key 0?"
)

MASKED_ATTENTION = Exercise(
    name="masked_attention",
    chapter="ch-masking",
    signature="masked_attention(q, k, v, mask)",
    reference=masked_attention,
    solution=solution_masked_attention,
    hint="Check each step on the hand case: the scores q @ k^T scaled by 1/sqrt(dk); every "
    "forbidden score set to -inf before the softmax over the keys (the scores are masked, not "
    "the weights); then what a row with no allowed key must read (chapter 4, the empty row).",
    cases=(
        Case("hand case: 4 tokens, a causal mask, dk = dv = 2", "hand", lambda: {
            "q": torch.tensor([[1.0, 0], [0, 1], [1, 1], [-1, 2]]),
            "k": torch.tensor([[1.0, 1], [2, 0], [0, -1], [1, -1]]),
            "v": torch.tensor([[1.0, 0], [0, 1], [2, 2], [-1, 1]]),
            "mask": _causal(4, 4),
        }),
        Case("random case: padding mask (B, 1, 1, Tk) broadcast over 2 heads, lengths 5 and 3",
             "random", _qkvm(4, 5, 8, 3, (2, 2), _padding([5, 3], 5), seed=201)),
        Case("random case: 2 new tokens reading a cache of 6 (lower-right causal (Tq, Tk))",
             "random", _qkvm(2, 6, 4, 4, (3,), _causal(2, 6), seed=204)),
        Case("random case: heads of a fused projection (non-contiguous), causal", "random",
             _heads_case),
        Case("edge case: a sequence of length 0 (every query fully masked)", "edge",
             _qkvm(3, 4, 4, 2, (2, 1), _padding([4, 0], 4), seed=213)),
        Case("edge case: more queries than keys (the first rows have no key)", "edge",
             _qkvm(5, 3, 4, 2, (), _causal(5, 3), seed=216)),
        Case("edge case: float16, scores up to 9, the first query has no key", "edge",
             _fp16_case),
        Case("edge case: nothing masked", "edge",
             _qkvm(3, 4, 4, 2, (2,), torch.ones(3, 4, dtype=torch.bool), seed=219)),
        Case("edge case: float32 scores up to 134, causal (exp overflows without the max)",
             "edge", _qkvm(4, 5, 8, 3, (2,), _causal(4, 5), seed=246, dtype=torch.float32,
                           scale=8.0)),
    ),
    mistakes=(
        Mistake("mask_after_softmax", "the mask is applied to the weights after a softmax "
                "over all keys, so the allowed weights no longer sum to 1 (and forbidden "
                "keys still lowered them).", "Chapter 4, a mask is added to the scores: which "
                "comes first, the mask or the normalisation?",
                "ch-masking, a mask is added to the scores",
                lambda q, k, v, mask: _masked_with(q, k, v, mask, after=True)),
        Mistake("nan_on_fully_masked", "a row whose every key is masked is all -inf, and "
                "softmax gives 0 / 0 = NaN there, which spreads through later layers.",
                "Chapter 4, the empty row: what should a query with no key read? "
                "torch.nan_to_num or a where() after the softmax fixes only that row.",
                "ch-masking, the empty row; SDPA's NaN on fully masked rows",
                lambda q, k, v, mask: _masked_with(q, k, v, mask, zero_rows=False)),
        Mistake("empty_row_reads_average", "a fully masked row gets equal weights on every "
                "key and reads the average of all values instead of nothing: what a large "
                "finite fill (torch.finfo(dtype).min, -1e9) gives, and what a uniform "
                "fallback for empty rows gives.",
                "A query with no allowed key reads nothing (a zero row, chapter 4). A finite "
                "fill, or a uniform fallback, leaves it a proper softmax over forbidden keys. "
                "Use -inf and zero such rows afterwards.",
                "Hugging Face models fill with finfo.min; ch-masking, the empty row",
                lambda q, k, v, mask: _masked_with(q, k, v, mask, fill=-1e300),
                (lambda q, k, v, mask: _fill_native(q, k, v, mask, None),
                 lambda q, k, v, mask: _fill_native(q, k, v, mask, -1e9))),
        Mistake("inverted", "the mask's sense is flipped (True = masked, the "
                "nn.MultiheadAttention convention): queries read exactly the keys they must "
                "not.", _CONVENTION_HINT, "nn.MultiheadAttention's attn_mask and "
                "key_padding_mask",
                lambda q, k, v, mask: _masked_with(q, k, v, mask, keep=~mask),
                (lambda q, k, v, mask: _masked_with(q, k, v, mask, keep=~mask,
                                                    zero_rows=False),)),
        Mistake("added_as_numbers", "the boolean mask is added to the scores (True counts as "
                "1, False as 0), which nudges the scores instead of forbidding keys.",
                "An additive mask holds 0 and -inf; a boolean one goes through masked_fill "
                "(or torch.where).", "ch-masking: two forms of one mask",
                lambda q, k, v, mask: (torch.softmax(_scores(q, k) + mask, -1)
                                       @ v.double()).to(q.dtype)),
        Mistake("mask_ignored", "the mask is not used: every query reads every key.",
                "Is mask used anywhere in your function?", "ch-masking",
                lambda q, k, v, mask: _masked_with(q, k, v, torch.ones_like(mask))),
        *from_families(SCALE_FAMILIES, _masked_like),
        pick(SOFTMAX_FAMILIES, "softmax_over_queries").mistake(
            _masked_like, more=({"dim": -2, "softmax": "plain"},)),
        pick(SOFTMAX_FAMILIES, "no_softmax").mistake(
            _masked_like, more=({"softmax": "none_inf"},),
            description="the scaled scores are used as weights without a softmax (the "
            "masked ones set to 0, or left at -inf)."),
        *from_families(SOFTMAX_FAMILIES, _masked_like, "returns_weights", "keys_as_values"),
        pick(SOFTMAX_FAMILIES, "unstable_softmax").mistake(
            _masked_like,
            more=({"softmax": "naive", "guard": "rows"},
                  {"softmax": "naive", "guard": "multiplied"}),
            description="the softmax exponentiates raw scores; exp() overflows (about 88 in "
            "float32, 11 in float16) and inf / inf gives NaN, or a row of zeros once "
            "nan_to_num has cleaned it."),
    ),
)  # fmt: skip


# --- grouped-query attention ----------------------------------------------------------------


def _attend(q, k, v):
    return (torch.softmax(_scores(q, k), -1) @ v.double()).to(q.dtype)


def gqa_attention(q, k, v):
    g = q.shape[1] // k.shape[1]
    return _attend(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))


def solution_gqa_attention(q, k, v):
    groups = q.shape[1] // k.shape[1]  # query heads per key/value head
    k = k.repeat_interleave(groups, dim=1)  # (B, Hq, Tk, dk): kv head j serves heads j*g ..
    v = v.repeat_interleave(groups, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v  # (B, Hq, Tq, dv)


def _gqa_like(**knobs):
    def gqa(q, k, v):
        g = q.shape[1] // k.shape[1]
        return attend(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), **knobs)

    return gqa


def _gqa_tiled(q, k, v):  # query head h reads kv head h % Hkv
    g = q.shape[1] // k.shape[1]
    return _attend(q, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1))


def _gqa_token_axis(q, k, v):  # repeats along the tokens: fine for MQA, an error otherwise
    g = q.shape[1] // k.shape[1]
    return _attend(q, k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2))


def _gqa_inverted_group(q, k, v):  # Hkv // Hq: 0 groups unless the head counts are equal
    g = k.shape[1] // q.shape[1]
    return _attend(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))


def _gqa_inverted_group_sdpa(q, k, v):  # SDPA reads zero kv heads as zeros, not an error
    g = k.shape[1] // q.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _gqa(b, hq, hkv, tq, tk, dk, dv, *, seed, dtype=torch.float64, scale=1.0):
    return lambda: {
        "q": randn(b, hq, tq, dk, seed=seed, dtype=dtype, scale=scale),
        "k": randn(b, hkv, tk, dk, seed=seed + 1, dtype=dtype, scale=scale),
        "v": randn(b, hkv, tk, dv, seed=seed + 2, dtype=dtype),
    }


def _gqa_views():
    q = _split_heads(randn(2, 3, 12, seed=231, dtype=torch.float32), 6)  # (2, 6, 3, 2)
    kv = randn(2, 3, 8, seed=232, dtype=torch.float32)
    k, v = kv.split(4, dim=-1)
    return {"q": q, "k": _split_heads(k, 2), "v": _split_heads(v, 2)}


GQA_ATTENTION = Exercise(
    name="gqa_attention",
    chapter="ch-multihead",
    signature="gqa_attention(q, k, v)",
    reference=gqa_attention,
    solution=solution_gqa_attention,
    hint="Check each step on the hand case: which key/value head each query head reads (for "
    "Hq = 4 and Hkv = 2: 0 0 1 1, so your expanded k's head 1 equals k's head 0), then "
    "attention as in chapter 1 for each query head: q @ k^T scaled by 1/sqrt(dk), a softmax "
    "over the keys, the weighted sum of the values.",
    cases=(
        Case("hand case: 4 query heads, 2 key/value heads, 2 tokens, d = 2", "hand",
             _gqa(1, 4, 2, 2, 2, 2, 2, seed=221)),
        Case("random case: 6 query heads in 3 groups of 2, 4 queries, 5 keys", "random",
             _gqa(2, 6, 3, 4, 5, 4, 3, seed=224)),
        Case("random case: 8 query heads, 2 key/value heads, float32", "random",
             _gqa(1, 8, 2, 3, 6, 8, 4, seed=227, dtype=torch.float32)),
        Case("random case: heads from split_heads (non-contiguous), 6 and 2 heads", "random",
             _gqa_views),
        Case("edge case: multi-query (one key/value head)", "edge",
             _gqa(2, 4, 1, 3, 4, 4, 2, seed=233)),
        Case("edge case: multi-head (as many key/value heads as query heads)", "edge",
             _gqa(1, 3, 3, 2, 3, 4, 2, seed=236)),
        Case("edge case: float16", "edge", lambda: {
            "q": small_ints(1, 4, 3, 4, seed=239, dtype=torch.float16, high=2),
            "k": small_ints(1, 2, 5, 4, seed=240, dtype=torch.float16, high=2),
            "v": small_ints(1, 2, 5, 2, seed=241, dtype=torch.float16, high=2)}),
        Case("edge case: float32 scores up to 133 (exp overflows without the max)", "edge",
             _gqa(1, 4, 2, 3, 5, 8, 2, seed=251, dtype=torch.float32, scale=8.0)),
    ),
    mistakes=(
        Mistake("repeat_not_interleave", "the key/value heads are tiled (k.repeat, or an "
                "expand on a group axis in front), so query head h reads kv head h % Hkv "
                "instead of h // g.", "Llama's repeat_kv and SDPA's enable_gqa give each kv "
                "head g neighbouring query heads: repeat_interleave(g, dim=1), or expand on "
                "an axis after the kv heads.", "ch-multihead, MQA/GQA; Llama repeat_kv",
                _gqa_tiled),
        Mistake("first_kv_head_only", "every query head reads key/value head 0.",
                "There are Hkv distinct key/value heads; each serves its own group.",
                "ch-multihead", lambda q, k, v: _attend(q, k[:, :1], v[:, :1])),
        Mistake("kv_heads_not_expanded", "the key/value heads are not expanded along the "
                "head axis (dim 1): left as they are, or repeated along the token axis (dim "
                "2). The shapes then broadcast only with one kv head or as many as query "
                "heads, and the product fails otherwise.",
                "Which axis of k (B, Hkv, Tk, dk) holds the heads, and how many query heads "
                "must each kv head serve?", "ch-multihead",
                _gqa_token_axis, (_attend,)),
        Mistake("group_size_inverted", "the group size is computed as Hkv // Hq instead of "
                "Hq // Hkv: it is 0 whenever there are fewer kv heads than query heads, so "
                "the expanded k and v have no heads at all.",
                "The group size is the number of query heads per key/value head: with 8 "
                "query heads and 2 kv heads, 4.", "ch-multihead, MQA/GQA",
                _gqa_inverted_group, (_gqa_inverted_group_sdpa,)),
        *from_families(SCALE_FAMILIES, _gqa_like),
        *from_families(SOFTMAX_FAMILIES, _gqa_like),
    ),
)  # fmt: skip


# --- a decoding step with a KV cache and RoPE -------------------------------------------------


def _step(q, k, v, cache_k, cache_v, *, offset=0, rotate_q=True, rotate_k=True,
          append=True, read_new=True, rerotate=False, read_only=False, layout="half",
          rope=None, attn=None, clamp=True):  # fmt: skip
    """A decoding step with knobs for each catalogued mistake (``rerotate``: RoPE applied
    again to the whole cache after the append, ``"all"``, or to the old cached keys before
    it, ``"old"``; ``read_only``: to the keys the query reads, not to the cache returned;
    ``clamp``: a position shifted below 0 is taken as 0, else used as it is, -1 for P - 1 on
    an empty cache);
    ``rope`` and ``attn`` are the knobs of :func:`~attnbook.practice._rope.rotate` and
    :func:`~attnbook.practice._attention.attend` (the shared RoPE and attention slips)."""
    p = cache_k.shape[-2] + offset
    at = torch.tensor([max(p, 0) if clamp else p])
    qr = rotate(q, at, layout=layout, **(rope or {})) if rotate_q else q
    kr = rotate(k, at, layout=layout, **(rope or {})) if rotate_k else k
    keys, values = torch.cat((cache_k, kr), dim=-2), torch.cat((cache_v, v), dim=-2)
    stored = keys
    if rerotate:  # "all": the whole cache after the append; "old": the cached keys only
        if rerotate == "old":
            again = _apply_rope(cache_k, torch.arange(cache_k.shape[-2]))
            keys = torch.cat((again, kr), dim=-2)
        else:
            keys = _apply_rope(keys, torch.arange(keys.shape[-2]))
        if not read_only:
            stored = keys
    read_k, read_v = (keys, values) if read_new else (cache_k, cache_v)
    out = attend(qr, read_k, read_v, **(attn or {}))
    if not append:
        return out, cache_k, cache_v
    return out, stored, values


def _decode_rope(**knobs):
    return lambda *a: _step(*a, rope=knobs)


def _decode_attn(**knobs):
    return lambda *a: _step(*a, attn=knobs)


def decode_step(q, k, v, cache_k, cache_v):
    return _step(q, k, v, cache_k, cache_v)


def solution_decode_step(q, k, v, cache_k, cache_v):
    d = q.shape[-1]
    position = cache_k.shape[-2]  # the new token's absolute position
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = position * theta  # (d/2,), in float64
    cos, sin = angle.cos().to(q.dtype), angle.sin().to(q.dtype)

    def rotate(x):
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    cache_k = torch.cat((cache_k, rotate(k)), dim=-2)  # (B, H, P + 1, d), new tensors
    cache_v = torch.cat((cache_v, v), dim=-2)
    weights = torch.softmax(rotate(q) @ cache_k.transpose(-2, -1) / math.sqrt(d), dim=-1)
    return weights @ cache_v, cache_k, cache_v


def _decode(b, h, p, d, *, seed, dtype=torch.float64, scale=1.0, q_scale=None):
    # q_scale: a small query keeps the scores small, so that a reader's 16-bit arithmetic
    # with a wrong scale still matches the catalogued variant (computed in float64) there.
    def make():
        keys = randn(b, h, p, d, seed=seed + 3, scale=scale)
        keys = _apply_rope(keys, torch.arange(p)).to(dtype)
        return {
            "q": randn(b, h, 1, d, seed=seed, dtype=dtype, scale=q_scale or scale),
            "k": randn(b, h, 1, d, seed=seed + 1, dtype=dtype, scale=scale),
            "v": randn(b, h, 1, d, seed=seed + 2, dtype=dtype),
            "cache_k": keys,
            "cache_v": randn(b, h, p, d, seed=seed + 4, dtype=dtype),
        }

    return make


_POSITION_HINT = (
    "The cache holds positions 0 .. P-1, so the new token is at position P = "
    "cache_k.shape[-2], read before anything is appended."
)

DECODE_STEP = Exercise(
    name="decode_step",
    chapter="ch-tiny-gpt",
    signature="decode_step(q, k, v, cache_k, cache_v)",
    reference=decode_step,
    solution=solution_decode_step,
    output_names=("out", "cache_k", "cache_v"),
    hint="Do it in order: the new token's position from the cache, RoPE on its query and key "
    "at that position, the append, then attention of the one query over every cached key.",
    cases=(
        Case("hand case: 1 sequence, 1 head, 3 cached positions, d = 4", "hand", lambda: {
            "q": torch.tensor([[[[1.0, 0, 0, 1]]]]),
            "k": torch.tensor([[[[0.0, 1, 1, 0]]]]),
            "v": torch.tensor([[[[1.0, 2, 3, 4]]]]),
            "cache_k": _apply_rope(torch.eye(4)[None, None, :3], torch.arange(3)),
            "cache_v": torch.tensor([[[[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]]]),
        }),
        Case("random case: B = 2, H = 2, 10 cached positions, d = 8", "random",
             _decode(2, 2, 10, 8, seed=256)),
        Case("random case: B = 1, H = 3, 37 cached positions, d = 16, float32", "random",
             _decode(1, 3, 37, 16, seed=261, dtype=torch.float32)),
        Case("edge case: an empty cache (the first token, P = 0)", "edge",
             _decode(2, 1, 0, 4, seed=266)),
        Case("edge case: 2000 cached positions, d = 64, float32", "edge",
             _decode(1, 1, 2000, 64, seed=271, dtype=torch.float32)),
        Case("edge case: float16, 1500 cached positions, d = 32", "edge",
             _decode(1, 1, 1500, 32, seed=276, dtype=torch.float16)),
        Case("edge case: float16, 4001 cached positions (a position float16 rounds), d = 64",
             "edge", _decode(1, 2, 4001, 64, seed=281, dtype=torch.float16,
                                       q_scale=0.05)),
        Case("edge case: bfloat16, 1001 cached positions, d = 64", "edge",
             _decode(2, 1, 1001, 64, seed=286, dtype=torch.bfloat16, q_scale=0.05)),
        Case("edge case: float32 scores up to 176, 5 cached positions (exp overflows without "
             "the max)", "edge", _decode(2, 2, 5, 8, seed=290, dtype=torch.float32, scale=8.0)),
    ),
    mistakes=(
        Mistake("position_zero", "the new token is rotated as if it were at position 0 (its "
                "index within this call), not at its absolute position P.", _POSITION_HINT,
                "ch-positions, cached decoding", lambda *a: _step(*a, offset=-10**9)),
        Mistake("position_after_append", "the new token is rotated by P + 1, the cache's "
                "length after the append.", _POSITION_HINT, "off-by-one",
                lambda *a: _step(*a, offset=1)),
        Mistake("position_of_last_cached", "the new token is rotated by P - 1, the position "
                "of the last cached token.", _POSITION_HINT, "off-by-one",
                lambda *a: _step(*a, offset=-1), (lambda *a: _step(*a, offset=-1, clamp=False),)),
        Mistake("cache_not_appended", "the caches come back without the new key and value, "
                "so the next step will not see this token.", "Return the caches with one "
                "more position (torch.cat along the token axis).", "ch-tiny-gpt, sampling "
                "with a KV cache", lambda *a: _step(*a, append=False),
                (lambda *a: _step(*a, append=False, read_new=False),)),
        Mistake("new_token_not_read", "the query reads only the old cache, not its own "
                "key and value.", "A causal query reads every position up to and including "
                "its own.", "ch-masking, the diagonal", lambda *a: _step(*a, read_new=False)),
        Mistake("key_not_rotated", "the new key is cached without RoPE, while every other "
                "cached key has it.", "Keys are stored after RoPE: they never need rotating "
                "again (attnbook.kv_cache).", "ch-tiny-gpt; attnbook.kv_cache",
                lambda *a: _step(*a, rotate_k=False)),
        Mistake("query_not_rotated", "the query is used without RoPE.", "Scores compare a "
                "rotated query with rotated keys: that is what makes them depend on the "
                "offset only.", "ch-positions", lambda *a: _step(*a, rotate_q=False)),
        Mistake("cache_rotated_again", "RoPE is applied to the cached keys again (to the "
                "whole cache after the append, or to the old keys before it; to the cache "
                "returned, or only to the keys the query reads), so they are turned twice.",
                "The cached keys already carry their rotation; rotate only the new key.",
                "ch-tiny-gpt; attnbook.kv_cache", lambda *a: _step(*a, rerotate="all"),
                (lambda *a: _step(*a, rerotate="old"),
                 lambda *a: _step(*a, rerotate="old", read_only=True),
                 lambda *a: _step(*a, rerotate="all", read_only=True))),
        Mistake("interleaved_layout", "the new query and key are rotated with adjacent pairs "
                "(2p, 2p + 1; RoFormer's and Meta's layout) while the cache holds keys rotated "
                "with split halves (p, p + d/2), the layout of attnbook.rope.apply_rope.",
                "The cache fixes the layout: pair coordinate p with p + d/2, as the keys "
                "already cached were rotated (chapter 5, the two layouts).",
                "ch-positions, the two layouts; Hugging Face's permute on conversion",
                lambda *a: _step(*a, layout="interleaved")),
        *from_families(ROPE_FAMILIES, _decode_rope, "rotates_backwards",
                       "frequency_exponent_halved", "frequency_not_inverted",
                       "missing_sine_term"),
        pick(ROPE_FAMILIES, "angles_in_16_bit").mistake(
            _decode_rope, more=({"angles": "scalar"}, {"angles": "scalar_inv"})),
        pick(ROPE_FAMILIES, "positions_in_16_bit").mistake(_decode_rope),
        *from_families(SCALE_FAMILIES, _decode_attn),
        pick(SOFTMAX_FAMILIES, "softmax_over_queries").mistake(
            _decode_attn, description="the softmax runs over the query axis, which holds "
            "one query here, so every weight is 1 and the output is the sum of the values, "
            "not their weighted average."),
        *from_families(SOFTMAX_FAMILIES, _decode_attn, "no_softmax", "returns_weights",
                       "keys_as_values", "unstable_softmax"),
    ),
)  # fmt: skip
