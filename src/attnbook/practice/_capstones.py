"""Exercises of chapters 8 and 14: the backward pass of attention from its saved output, and
the prefix-matching (induction) score of a head.

``attention_backward(q, k, v, out, lse, d_out)``
    The gradients of ``out = softmax(q k^T / sqrt(dk)) v`` (no mask) with respect to ``q``,
    ``k`` and ``v``, from what a memory-saving forward pass keeps: ``out`` ``(..., Tq, dv)``
    and the per-row log-sum-exp of the scaled scores ``lse`` ``(..., Tq)``; ``d_out``
    ``(..., Tq, dv)`` is the incoming gradient. With ``P = exp(S - lse)`` rebuilt from the
    scores ``S``, ``dV = P^T dO``, ``dS = P * (dO V^T - D)`` with ``D = rowsum(dO * O)``, ``dQ =
    dS K / sqrt(dk)`` and ``dK = dS^T Q / sqrt(dk)`` (chapter 8, the backward pass, derived).
    Returns ``(d_q, d_k, d_v)`` shaped like ``q``, ``k``, ``v``, in the dtype of ``q``.
    Autograd on a recomputed forward is also a right answer. One case has float32 scores up
    to 174, where ``exp(S)`` overflows: rebuild ``P`` as ``exp(S - lse)``, or with a stable
    softmax.

``induction_score(weights, lengths)``
    ``weights`` ``(..., N, H, T, T)`` the attention weights of ``H`` heads on ``N`` sequences
    of repeated random tokens (``L`` tokens, the same ``L`` again, then padding; chapter 14),
    ``lengths`` ``(N,)`` the pattern lengths ``L``. Query ``t`` of the repeated half
    (``L <= t <= 2L - 1``) holds a copy of token ``t - L``, so its prefix-matching target is
    key ``t - L + 1``, the token that followed the earlier copy. Returns ``(..., H)``: the
    weight on the target, averaged over every scored (sequence, query) pair together (so
    longer sequences count for more queries), in the dtype of ``weights``. Padding queries are
    not scored, and a NaN in their rows must not reach the score.
"""

from __future__ import annotations

import math

import torch

from attnbook.induction import induction_score as _induction_score
from attnbook.practice._attention import SCALE_FAMILIES, SOFTMAX_FAMILIES
from attnbook.practice._exercise import Case, Exercise, Mistake, pick, randn

# --- the backward pass ------------------------------------------------------------------------


def _forward64(q, k, v):
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]) @ v.double(), lse


def attention_backward(q, k, v, out, lse, d_out):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o, _ = _forward64(q64, k64, v64)
    grads = torch.autograd.grad(o, (q64, k64, v64), d_out.double())
    return tuple(g.to(q.dtype) for g in grads)


def solution_attention_backward(q, k, v, out, lse, d_out):
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])  # (..., Tq, Tk), rows sum to 1
    d_v = p.transpose(-2, -1) @ d_out  # (..., Tk, dv)
    row = (d_out * out).sum(-1, keepdim=True)  # D_i = dO_i . O_i, (..., Tq, 1)
    d_s = p * (d_out @ v.transpose(-2, -1) - row)  # (..., Tq, Tk)
    return (d_s @ k) * scale, (d_s.transpose(-2, -1) @ q) * scale, d_v


def _backward_with(q, k, v, out, lse, d_out, *, row="rows", use_lse=True, scale_s=True,
                   scale_grads=True, scale=None, softmax="lse"):  # fmt: skip
    """The backward pass as a reader writes it, with knobs for each catalogued mistake;
    ``scale(dk, tk)`` replaces 1/sqrt(dk) everywhere it is used (the shared scale slips),
    ``softmax="naive"`` rebuilds P as exp(S) / sum exp(S), ignoring lse, and
    ``softmax="recompute"`` recomputes the whole forward (P and out) with a stable softmax, as
    autograd on a reader's own forward does."""
    dtype = q.dtype  # in the inputs' dtype, as a reader's code runs: float32 overflows alike
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale(q.shape[-1], k.shape[-2])
    s = q @ k.transpose(-2, -1) * (scale if scale_s else 1.0)
    if softmax == "naive":
        e = torch.exp(s)
        p = e / e.sum(-1, keepdim=True)
    elif softmax == "recompute":
        p = torch.softmax(s, -1)
        out = p @ v
    else:
        p = torch.exp(s - lse[..., None]) if use_lse else torch.exp(s)
    d_v = p.transpose(-2, -1) @ d_out
    if row == "rows":
        d = (d_out * out).sum(-1, keepdim=True)
    elif row == "none":
        d = 0.0
    else:  # one number for the whole tensor
        d = (d_out * out).sum((-2, -1), keepdim=True)
    d_s = p * (d_out @ v.transpose(-2, -1) - d)
    g = scale if scale_grads else 1.0
    return tuple(t.to(dtype) for t in ((d_s @ k) * g, (d_s.transpose(-2, -1) @ q) * g, d_v))


def _backward_like(**knobs):
    return lambda *a: _backward_with(*a, **knobs)


def _bw(tq, tk, dk, dv, lead=(), *, seed, dtype=torch.float64, scale=1.0):
    def make():
        q = randn(*lead, tq, dk, seed=seed, scale=scale)
        k = randn(*lead, tk, dk, seed=seed + 1, scale=scale)
        v = randn(*lead, tk, dv, seed=seed + 2)
        out, lse = _forward64(q, k, v)
        d_out = randn(*lead, tq, dv, seed=seed + 3)
        return {n: t.to(dtype) for n, t in
                dict(q=q, k=k, v=v, out=out, lse=lse, d_out=d_out).items()}  # fmt: skip

    return make


def _bw_cast(make, dtype):
    def cast():
        return {n: t.to(dtype) for n, t in make().items()}

    return cast


def _bw_views():
    inputs = _bw(4, 5, 6, 3, (2,), seed=311)()
    return {n: t.mT.contiguous().mT for n, t in inputs.items()}  # same numbers, column-major


ATTENTION_BACKWARD = Exercise(
    name="attention_backward",
    chapter="ch-flash",
    signature="attention_backward(q, k, v, out, lse, d_out)",
    reference=attention_backward,
    solution=solution_attention_backward,
    output_names=("d_q", "d_k", "d_v"),
    hint="Rebuild P from the scaled scores and lse, and check it on the hand case: its rows "
    "must sum to 1. Then dV, then dS with the row term D, then dQ and dK, each with its shape.",
    cases=(
        Case("hand case: 2 queries, 2 keys, dk = dv = 2", "hand", lambda: (lambda q, k, v: {
            "q": q, "k": k, "v": v, "out": _forward64(q, k, v)[0].float(),
            "lse": _forward64(q, k, v)[1].float(),
            "d_out": torch.tensor([[1.0, 0.0], [0.0, -1.0]])})(
            torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([[1.0, 1.0], [0.0, -1.0]]),
            torch.tensor([[1.0, 2.0], [3.0, -1.0]]))),
        Case("random case: 2 x 3 heads, 4 queries, 6 keys, dk = 8, dv = 5", "random",
             _bw(4, 6, 8, 5, (2, 3), seed=301)),
        Case("random case: 7 tokens, dk = dv = 4, float32", "random",
             _bw_cast(_bw(7, 7, 4, 4, seed=305), torch.float32)),
        Case("random case: column-major views (non-contiguous)", "random", _bw_views),
        Case("edge case: one key", "edge", _bw(3, 1, 4, 2, (2,), seed=315)),
        Case("edge case: scores up to about 26", "edge", _bw(3, 4, 8, 2, seed=319, scale=3.0)),
        Case("edge case: float32 scores up to 174, where exp overflows without the max", "edge",
             _bw(3, 4, 8, 2, seed=323, scale=12.0, dtype=torch.float32)),
    ),
    mistakes=(
        Mistake("no_row_term", "dS is P * (dO V^T) without subtracting D = rowsum(dO * O): "
                "the softmax's Jacobian has a second term.", "Chapter 8: the derivative of "
                "p_ij with respect to s_ik is p_ij (δ_jk - p_ik). Where does the -p_ik term "
                "go?", "ch-flash, the backward pass derived",
                lambda *a: _backward_with(*a, row="none")),
        Mistake("row_term_summed_over_everything", "D is summed over every query (one "
                "number per tensor) instead of one number per query row.", "D_i belongs to "
                "query i: sum over the feature axis only, keeping the row axis.",
                "ch-flash", lambda *a: _backward_with(*a, row="all")),
        Mistake("scores_not_scaled", "P is rebuilt from q k^T without the 1/sqrt(dk) the "
                "forward pass used, so exp(S - lse) is not the forward's softmax.", "lse was "
                "computed from the scaled scores; print the row sums of your P.",
                "ch-flash", lambda *a: _backward_with(*a, scale_s=False)),
        Mistake("lse_ignored", "P is exp(S) without subtracting lse, so it is not "
                "normalised.", "The saved lse is what turns exp(S) into the softmax: "
                "P = exp(S - lse).", "ch-flash", lambda *a: _backward_with(*a, use_lse=False)),
        Mistake("grads_not_scaled", "dQ and dK miss the factor 1/sqrt(dk) from S = q k^T / "
                "sqrt(dk).", "Chain rule through S = c q k^T: what multiplies dS on the way to "
                "dQ and dK?", "ch-flash", lambda *a: _backward_with(*a, scale_grads=False)),
        # Each scale slip made everywhere, in the formula with lse or in a forward that
        # autograd differentiates (then P is normalised, and the output is that forward's).
        pick(SCALE_FAMILIES, "no_scale").mistake(
            _backward_like, more=({**SCALE_FAMILIES[0].knobs[0], "softmax": "recompute"},),
            description="the 1/sqrt(dk) is left out everywhere: P is rebuilt from q k^T (or "
            "the forward that autograd differentiates has no scale), and dQ and dK miss the "
            "factor too."),
        *(family.mistake(_backward_like,
                         more=tuple({**k, "softmax": "recompute"} for k in family.knobs))
          for family in SCALE_FAMILIES[1:]),
        pick(SOFTMAX_FAMILIES, "unstable_softmax").mistake(
            _backward_like, description="P is rebuilt with a softmax of the raw scores "
            "(exp(S) / sum exp(S), or exp(S) / exp(lse)) instead of exp(S - lse): exp() "
            "overflows above about 88 in float32, and inf / inf gives NaN.",
            hint="The saved lse is what keeps every exponent at or below 0: P = exp(S - "
            "lse) needs no sum, and never overflows."),
    ),
)  # fmt: skip


# --- the prefix-matching score ----------------------------------------------------------------


def induction_score(weights, lengths):
    return _induction_score(weights, lengths)


def solution_induction_score(weights, lengths):
    t = weights.shape[-1]
    pos = torch.arange(t)  # query positions, (T,)
    scored = (pos >= lengths[:, None]) & (pos <= 2 * lengths[:, None] - 1)  # (N, T)
    target = (pos - lengths[:, None] + 1).clamp(0, t - 1)  # key t - L + 1, (N, T)
    index = target[:, None, :, None].expand(*weights.shape[:-1], 1)
    on_target = weights.gather(-1, index).squeeze(-1)  # (..., N, H, T)
    kept = torch.where(scored[:, None, :], on_target, 0.0)  # where, so NaN in padding stays out
    return kept.sum((-3, -1)) / scored.sum()  # (..., H)


def _score_with(weights, lengths, *, shift=1, last=1, pooled=True, product=False,
                transposed=False, previous=False):  # fmt: skip
    w = weights.double()
    if transposed:
        w = w.transpose(-2, -1)
    t = w.shape[-1]
    pos = torch.arange(t)
    n = lengths[:, None]
    scored = (pos >= n) & (pos <= 2 * n - 2 + last) if last >= 0 else (pos >= n)
    target = (pos - 1).expand(len(lengths), t) if previous else pos - n + shift
    on = w.gather(-1, target.clamp(0, t - 1)[:, None, :, None].expand(*w.shape[:-1], 1))
    on = on.squeeze(-1)  # (..., N, H, T)
    keep = scored[:, None, :]
    kept = on * keep if product else torch.where(keep, on, 0.0)
    if pooled:
        score = kept.sum((-3, -1)) / scored.sum()
    else:
        per_seq = kept.sum(-1) / scored.sum(-1)[:, None].clamp(min=1)  # (..., N, H)
        score = per_seq.mean(-2)
    return score.to(weights.dtype)


def _weights(lead, n, h, t, *, seed, dtype=torch.float64, nan_after=None, lengths=None):
    w = torch.softmax(randn(*lead, n, h, t, t, seed=seed, scale=2.0), -1)
    if nan_after is not None:  # padding queries of sequence i get NaN rows
        for i, length in enumerate(lengths):
            w[..., i, :, 2 * length :, :] = float("nan")
    return w.to(dtype)


def _score_case(lead, h, t, lengths, *, seed, dtype=torch.float64, nan=False):
    def make():
        return {"weights": _weights(lead, len(lengths), h, t, seed=seed, dtype=dtype,
                                    nan_after=True if nan else None, lengths=lengths),
                "lengths": torch.tensor(lengths)}  # fmt: skip

    return make


def _perfect_head():
    # One sequence, L = 3, T = 6, two heads: head 0 attends exactly to the induction target,
    # head 1 to the previous token. Scores: 1 and 0.
    t, length = 6, 3
    w = torch.zeros(1, 2, t, t)
    for q in range(t):
        target = q - length + 1 if q >= length else 0
        w[0, 0, q, target] = 1.0
        w[0, 1, q, max(q - 1, 0)] = 1.0
    return {"weights": w, "lengths": torch.tensor([length])}


INDUCTION_SCORE = Exercise(
    name="induction_score",
    chapter="ch-induction",
    signature="induction_score(weights, lengths)",
    reference=induction_score,
    solution=solution_induction_score,
    hint="On the hand case (L = 3, T = 6) list the scored queries and each one's target key "
    "by hand: queries 3, 4, 5 and keys 1, 2, 3. Then gather those entries of weights.",
    cases=(
        Case("hand case: one sequence, L = 3, an induction head and a previous-token head",
             "hand", _perfect_head),
        Case("random case: 3 sequences, L = 2, 4, 3, T = 8, 2 heads", "random",
             _score_case((), 2, 8, [2, 4, 3], seed=331)),
        Case("random case: a seed axis in front (3 x 2 sequences), L = 3, 1, T = 6, float32",
             "random", _score_case((3,), 2, 6, [3, 1], seed=333, dtype=torch.float32)),
        Case("edge case: NaN in the rows of padding queries", "edge",
             _score_case((), 1, 10, [2, 5, 4], seed=335, nan=True)),
        Case("edge case: lengths 4 and 2 with T = 12 (much padding)", "edge",
             _score_case((), 3, 12, [4, 2], seed=337)),
    ),
    mistakes=(
        Mistake("targets_previous_occurrence", "the target is key t - L, the earlier copy of "
                "the query's own token, instead of the token that followed it (t - L + 1).",
                "Prefix matching attends to what came after the earlier copy: that is what "
                "the head will copy.", "ch-induction; Olsson et al. (2022)",
                lambda w, n: _score_with(w, n, shift=0)),
        Mistake("previous_token_target", "the weight on key t - 1 is scored (the previous-"
                "token score), not the weight on t - L + 1.", "Two heads, two jobs: which "
                "one looks back by a fixed offset?", "ch-induction, two heads two jobs",
                lambda w, n: _score_with(w, n, previous=True)),
        Mistake("last_query_left_out", "the last query of the repeated half (t = 2L - 1) is "
                "not scored: the range of repeated_queries (L .. 2L - 2, queries whose next "
                "token is a copy) is used instead of L .. 2L - 1.", "Query 2L - 1 holds a "
                "copy too, and its target L exists.", "attnbook.induction.repeated_queries",
                lambda w, n: _score_with(w, n, last=0)),
        Mistake("padding_scored", "queries after the repeated half (padding) are scored too.",
                "Positions from 2L on are padding: which queries hold a copy of an earlier "
                "token?", "ch-induction", lambda w, n: _score_with(w, n, last=-1)),
        Mistake("mean_of_sequence_means", "each sequence's mean is taken first, then the "
                "mean over sequences, so a short sequence counts as much as a long one.",
                "Average over every scored (sequence, query) pair at once.", "ch-induction",
                lambda w, n: _score_with(w, n, pooled=False)),
        Mistake("nan_from_padding", "the scored entries are picked by multiplying with a 0/1 "
                "mask, so a NaN in a padding row (NaN * 0 = NaN) reaches the score.",
                "Select with torch.where (or boolean indexing) instead of multiplying.",
                "attnbook.induction", lambda w, n: _score_with(w, n, product=True)),
        Mistake("weights_transposed", "the weights are read as [key, query] instead of "
                "[query, key].", "Row t of weights is query t's distribution over keys.",
                "ch-deriving, the weights' layout",
                lambda w, n: _score_with(w, n, transposed=True)),
    ),
)  # fmt: skip
