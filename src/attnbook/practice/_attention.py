"""Exercises of chapters 1 and 2: attention from scratch, and the scaled scores.

``attention(q, k, v)``
    q ``(..., Tq, dk)``, k ``(..., Tk, dk)``, v ``(..., Tk, dv)`` with the same leading dims
    (any number of them); returns ``softmax(q @ k^T / sqrt(dk)) @ v``, shape
    ``(..., Tq, dv)``, dtype of ``q``. No mask. With ``Tk == 0`` each output row is zero (an
    empty mixture reads nothing). Inputs may be non-contiguous views (the heads that
    ``split_heads`` returns) or expanded tensors (one sequence broadcast over a batch).

``scaled_scores(q, k)``
    q ``(..., Tq, dk)``, k ``(..., Tk, dk)``; returns ``q @ k^T / sqrt(dk)``, shape
    ``(..., Tq, Tk)``, dtype of ``q``. Inputs may be non-contiguous or expanded.
"""

from __future__ import annotations

import math

import torch

from attnbook.attention import softmax as _zero_row_softmax
from attnbook.practice._exercise import (
    Case,
    Exercise,
    Family,
    Mistake,
    from_families,
    randn,
    small_ints,
)


def _scores(q, k, scale):
    return (q.double() @ k.double().transpose(-2, -1)) * scale


def _mix(q, k, v, *, scale=None, dim=-1):
    """Reference arithmetic in float64, returned in the input dtype."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.softmax(_scores(q, k, scale), dim=dim)
    return (weights @ v.double()).to(q.dtype)  # (..., Tq, dv)


def attention(q, k, v):
    return _mix(q, k, v)


def attend(q, k, v, mask=None, *, scale=None, dim=-1, softmax="stable", output="out",
           values="v", guard="weights"):  # fmt: skip
    """Attention as the references compute it (float64 inside, the result in ``q``'s dtype, a
    row with no allowed key reading zeros), with the knobs of the shared mistakes below.

    Args:
        scale: ``(dk, tk) -> factor`` of the scores; None for ``1 / sqrt(dk)``.
        dim: the axis the softmax normalises (-2: over the queries).
        softmax: ``"stable"`` (the reference's), ``"naive"`` (``exp`` of the raw scores in
            the inputs' own dtype, as a reader writes it: it overflows where theirs does),
            ``"plain"`` (``torch.softmax``: NaN where every entry is masked), ``"none"`` (the
            scaled scores, the masked ones zeroed, as weights) or ``"none_inf"`` (the same
            with the masked ones left at -inf).
        output: ``"out"``, or ``"weights"`` (the weights returned instead of the mixture).
        values: ``"v"``, or ``"k"`` (the weights multiply the keys).
        guard: with a mask and ``softmax="naive"``, how the reader keeps an empty row from
            NaN: ``"weights"`` (``nan_to_num`` on the weights, which also zeroes a row that
            overflowed), ``"rows"`` (rows with no allowed key set to zero afterwards) or
            ``"multiplied"`` (``exp(s) * mask`` instead of a -inf fill, then ``nan_to_num`` on
            the weights: a forbidden score that overflows makes ``inf * 0 = NaN``, and its
            whole row reads zeros).
    """
    dk, tk = q.shape[-1], k.shape[-2]
    read = v if values == "v" else k
    if softmax == "naive":
        s = q @ k.transpose(-2, -1)
        s = s / math.sqrt(dk) if scale is None else s * scale(dk, tk)
        if mask is not None and guard == "multiplied":  # exp(s) * mask: inf * 0 is NaN
            e = torch.exp(s) * mask
        else:
            e = torch.exp(s if mask is None else s.masked_fill(~mask, float("-inf")))
        w = e / e.sum(dim, keepdim=True)
        if mask is not None and guard in ("weights", "multiplied"):
            w = w.nan_to_num(nan=0.0)
        if output == "weights":
            return w
        out = w @ read
        if mask is not None and guard == "rows":
            out = torch.where(mask.any(-1, keepdim=True), out, 0.0)
        return out
    s = _scores(q, k, 1 / math.sqrt(dk) if scale is None else scale(dk, tk))
    if softmax in ("none", "none_inf"):
        fill = 0.0 if softmax == "none" else float("-inf")
        w = s if mask is None else s.masked_fill(~mask, fill)
    elif softmax == "plain":
        w = torch.softmax(s if mask is None else s.masked_fill(~mask, float("-inf")), dim)
    else:
        w = _zero_row_softmax(s if mask is None else s.masked_fill(~mask, float("-inf")), dim)
    return (w if output == "weights" else w @ read.double()).to(q.dtype)


def _manual_max_attention(q, k, v):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.max(-1, keepdim=True).values)  # max over an empty axis raises
    return (e / e.sum(-1, keepdim=True)) @ v


_FP16 = torch.float16


def _qkv(tq, tk, dk, dv, lead=(), *, seed, dtype=torch.float64, scale=1.0):
    return lambda: {
        "q": randn(*lead, tq, dk, seed=seed, dtype=dtype, scale=scale),
        "k": randn(*lead, tk, dk, seed=seed + 1, dtype=dtype, scale=scale),
        "v": randn(*lead, tk, dv, seed=seed + 2, dtype=dtype),
    }


def _qkv_split_heads():
    # The layout attention gets in a model: a fused projection (B, T, 3d) sliced into q, k, v,
    # each split into heads; all three are non-contiguous views of one tensor.
    from attnbook.heads import split_heads

    fused = randn(2, 5, 24, seed=28, dtype=torch.float32)
    q, k, v = fused.split(8, dim=-1)  # (B, T, d) each, strides of the fused tensor
    return {"q": split_heads(q, 2), "k": split_heads(k, 2), "v": split_heads(v, 2)}


def _qkv_expanded():
    # One sequence's keys and values broadcast over a batch of 3 queries (stride 0).
    return {
        "q": randn(3, 4, 6, seed=29),
        "k": randn(1, 7, 6, seed=30).expand(3, 7, 6),
        "v": randn(1, 7, 2, seed=31).expand(3, 7, 2),
    }


def _qkv_fp16():
    # Small integers with dk = 4: every score is exact in float16, and most rows have a score
    # above 11.1, where exp() overflows float16 (its largest number is 65504).
    q = small_ints(2, 5, 4, seed=31, dtype=_FP16, high=6)
    k = small_ints(2, 6, 4, seed=32, dtype=_FP16, high=6)
    return {"q": q, "k": k, "v": small_ints(2, 6, 3, seed=33, dtype=_FP16, high=2)}


ATTENTION_CASES = (
    Case("hand case: 4 tokens, dk = dv = 4", "hand", lambda: {
        "q": torch.tensor([[1.0, 0, 0, 0], [0, 2, 0, 0], [0, 0, 1, 1], [1, -1, 0, 0]]),
        "k": torch.tensor([[1.0, 1, 0, 0], [0, 1, 0, 1], [2, 0, 0, 0], [0, 0, -1, 1]]),
        "v": torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]),
    }),
    Case("random case: 2 x 3 heads, 5 queries, 7 keys, dk = 8, dv = 6", "random",
         _qkv(5, 7, 8, 6, (2, 3), seed=11, dtype=torch.float32)),
    Case("random case: 6 tokens, dk = 16, dv = 5", "random", _qkv(6, 6, 16, 5, seed=14)),
    Case("random case: 3 queries, 9 keys, dk = 2, dv = 2", "random",
         _qkv(3, 9, 2, 2, (1,), seed=17)),
    Case("random case: heads of a fused projection (non-contiguous views), B = 2, 2 heads, "
         "5 tokens, dh = 4", "random", _qkv_split_heads),
    Case("random case: three leading dims (2 x 2 x 2), 3 queries, 4 keys", "random",
         _qkv(3, 4, 5, 3, (2, 2, 2), seed=35)),
    Case("edge case: no keys (Tk = 0)", "edge", _qkv(3, 0, 4, 5, (2,), seed=20)),
    Case("edge case: one key", "edge", _qkv(4, 1, 3, 2, seed=23, dtype=torch.float32)),
    Case("edge case: keys and values expanded over the batch (stride 0)", "edge",
         _qkv_expanded),
    Case("edge case: float32 scores up to 104", "edge",
         _qkv(4, 5, 8, 3, seed=26, dtype=torch.float32, scale=6.0)),
    Case("edge case: float16 scores up to 30", "edge", _qkv_fp16),
)  # fmt: skip

_SCALE_HINT = (
    "Chapter 2 works out the variance of q·k for unit-variance features. Which factor "
    "brings it back to 1, and which tensor's last dimension tells you dk?"
)

_PRECEDENCE = (
    "the exponent 1/2 is not in parentheses: Python reads dk ** 1/2 as (dk ** 1) / 2, so the "
    "scores end up divided by dk/2 (or by 2·dk when written inline as scores / dk ** 1/2)."
)
_PRECEDENCE_HINT = "Operator precedence: ** binds tighter than /. Print your scale for dk = 16."

# The slips of the scale, shared by every exercise that scales scores (knob: scale(dk, tk)).
SCALE_FAMILIES = (
    Family(
        "no_scale",
        "the scores are not divided by √dk.",
        _SCALE_HINT,
        "ch-sqrt-dk; the factor of Vaswani et al. (2017)",
        ({"scale": lambda dk, tk: 1.0},),
    ),
    Family(
        "scale_by_dk",
        "the scores are divided by dk instead of √dk (or q and k are each divided by √dk).",
        _SCALE_HINT,
        "ch-sqrt-dk",
        ({"scale": lambda dk, tk: 1 / dk},),
    ),
    Family(
        "scale_multiplies",
        "the scores are multiplied by √dk instead of divided.",
        _SCALE_HINT,
        "ch-sqrt-dk",
        ({"scale": lambda dk, tk: math.sqrt(dk)},),
    ),
    Family(
        "precedence_half",
        _PRECEDENCE,
        _PRECEDENCE_HINT,
        "a Python precedence slip",
        ({"scale": lambda dk, tk: 2 / dk}, {"scale": lambda dk, tk: 0.5 / dk}),
    ),
    Family(
        "scale_uses_token_count",
        "the scale uses the number of keys Tk where it needs the feature width dk.",
        "Which axis of k holds the features? Index it from the end (-1), so that batch and "
        "head axes cannot shift it.",
        "shape indexing on batched tensors",
        ({"scale": lambda dk, tk: 1 / math.sqrt(max(tk, 1))},),
    ),
)

_UNSTABLE = (
    "the softmax exponentiates raw scores; exp() overflows (about 88 in float32, 11 in "
    "float16) and inf / inf gives NaN."
)
_UNSTABLE_HINT = (
    "Chapter 2: adding a constant to every score in a row changes no weight. Which constant "
    "keeps every exponent at or below 0?"
)

# The slips of the softmax and the mixture, shared by every exercise that computes attention
# (knobs of attend()).
SOFTMAX_FAMILIES = (
    Family(
        "softmax_over_queries",
        "the softmax runs over the query axis, so the weights sum to 1 down each column "
        "instead of along each query's row.",
        "Each query distributes one unit of attention over the keys. Which axis of the "
        "(Tq, Tk) score matrix is the key axis?",
        "ch-deriving, the contract's row sums",
        ({"dim": -2},),
    ),
    Family(
        "no_softmax",
        "the scaled scores are used as weights without a softmax.",
        "Weights should be non-negative and sum to 1 per query; raw scores are neither.",
        "ch-deriving, attempt 1",
        ({"softmax": "none"},),
    ),
    Family(
        "returns_weights",
        "the function returns the attention weights, not the weighted sum of the values.",
        "The output holds one dv-vector per query: what do the weights multiply?",
        "ch-deriving",
        ({"output": "weights"},),
    ),
    Family(
        "keys_as_values",
        "the weights multiply the keys instead of the values.",
        "Keys decide how much to read; values are what is read.",
        "ch-deriving, attempt 2 (three roles)",
        ({"values": "k"},),
    ),
    Family(
        "unstable_softmax",
        _UNSTABLE,
        _UNSTABLE_HINT,
        "ch-sqrt-dk (shift invariance) and ch-flash exercise 2",
        ({"softmax": "naive"},),
    ),
)

_HALF_HINT_ATTENTION = (
    "In 16 bits exp() overflows above about 11 (float16's largest number is 65504) and long "
    "sums lose digits: subtract each row's max before exp(), or compute the scores and the "
    "softmax in float32 and cast the result back to q.dtype."
)


def solution_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    weights = torch.softmax(scores, dim=-1)  # each query's row sums to 1; Tk = 0 gives (..., Tq, 0)
    return weights @ v  # (..., Tq, dv); an empty key axis sums to zeros


ATTENTION = Exercise(
    name="attention",
    chapter="ch-deriving",
    signature="attention(q, k, v)",
    reference=attention,
    solution=solution_attention,
    cases=ATTENTION_CASES,
    hint="Build it in three steps and check each on the hand case: scores q @ k^T scaled by "
    "1/sqrt(dk) with shape (Tq, Tk), a softmax that makes each query's row sum to 1, then "
    "the weighted sum of the values.",
    half_hint=_HALF_HINT_ATTENTION,
    mistakes=(
        *from_families(SCALE_FAMILIES, lambda **knobs: lambda q, k, v: attend(q, k, v, **knobs)),
        *from_families(SOFTMAX_FAMILIES[:4],
                       lambda **knobs: lambda q, k, v: attend(q, k, v, **knobs)),
        Mistake("queries_keys_swapped", "the scores are k @ q^T, so keys play the queries' "
                "role.", "Row i of the scores must belong to query i: its shape is (Tq, Tk).",
                "ch-deriving, attempt 2",
                lambda q, k, v: _mix(k, q, v)),
        *from_families(SOFTMAX_FAMILIES, lambda **knobs: lambda q, k, v: attend(q, k, v, **knobs),
                       "unstable_softmax"),
        Mistake("crashes_without_keys", "a hand-written stable softmax takes the max over "
                "the key axis, which fails when there are no keys (Tk = 0).", "A query with no "
                "key to read gets a zero output in this book. Handle the empty key axis "
                "before taking a max over it (or use a softmax that accepts it).",
                "ch-masking, the empty row", _manual_max_attention),
    ),
)  # fmt: skip


def scaled_scores(q, k):
    return _scores(q, k, 1 / math.sqrt(q.shape[-1])).to(q.dtype)


def _scaled(q, k, scale):
    return _scores(q, k, scale).to(q.dtype)


def _qk(tq, tk, dk, lead=(), *, seed, dtype=torch.float64):
    return lambda: {
        "q": randn(*lead, tq, dk, seed=seed, dtype=dtype),
        "k": randn(*lead, tk, dk, seed=seed + 1, dtype=dtype),
    }


def solution_scaled_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)


SCALED_SCORES = Exercise(
    name="scaled_scores",
    chapter="ch-sqrt-dk",
    signature="scaled_scores(q, k)",
    reference=scaled_scores,
    solution=solution_scaled_scores,
    hint="Compare your output with q @ k^T on the hand case: the two should differ only by "
    "one factor that depends on dk, and the shape should be (..., Tq, Tk).",
    cases=(
        Case("hand case: 2 queries, 3 keys, dk = 4", "hand", lambda: {
            "q": torch.tensor([[2.0, 0, 0, 0], [1, 1, 1, 1]]),
            "k": torch.tensor([[1.0, 0, 0, 0], [0, 3, 0, 1], [1, 1, -1, 0]]),
        }),
        Case("random case: 2 x 4 heads, 5 queries, 7 keys, dk = 16", "random",
             _qk(5, 7, 16, (2, 4), seed=41, dtype=torch.float32)),
        Case("random case: 6 tokens, dk = 6", "random", _qk(6, 6, 6, seed=43)),
        Case("random case: 3 queries, 10 keys, dk = 64", "random",
             _qk(3, 10, 64, (1,), seed=45)),
        Case("random case: transposed views (non-contiguous), 4 queries, 6 keys, dk = 5",
             "random", lambda: {"q": randn(2, 5, 4, seed=51).mT, "k": randn(2, 5, 6, seed=52).mT}),
        Case("edge case: no keys (Tk = 0)", "edge", _qk(3, 0, 8, (2,), seed=47)),
        Case("edge case: keys expanded over the batch (stride 0)", "edge", lambda: {
            "q": randn(3, 2, 4, seed=53), "k": randn(1, 5, 4, seed=54).expand(3, 5, 4)}),
        Case("edge case: float16", "edge", lambda: {
            "q": small_ints(2, 3, 16, seed=49, dtype=_FP16),
            "k": small_ints(2, 5, 16, seed=50, dtype=_FP16),
        }),
    ),
    mistakes=(
        *from_families(SCALE_FAMILIES, lambda *, scale: lambda q, k: _scaled(
            q, k, scale(q.shape[-1], k.shape[-2]))),
        Mistake("transposed", "the result is k @ q^T, of shape (Tk, Tq).", "Row i should "
                "hold query i's scores against every key.", "ch-deriving, attempt 2",
                lambda q, k: _scaled(k, q, 1 / math.sqrt(q.shape[-1]))),
    ),
)  # fmt: skip
