"""What one attention layer can do on :mod:`attnbook.induction`'s task without an induction head.

A query in the repeated half knows its position ``t`` and its own token, not the pattern length
``L``. Its position leaves a few candidate answer positions, one per length consistent with
``t``; its token rules out any candidate that holds the same token (:func:`answer_candidates`).
Two yardsticks follow: guessing uniformly among the candidates left
(:meth:`Candidates.guess_accuracy`, the positional guess) and always taking the earliest one
(:meth:`Candidates.earliest_accuracy`), which a one-layer, one-head model with weights set by
hand implements exactly (:func:`earliest_candidate_head`). That rule is the best a head can do
that ranks the candidates by position; one head can do better by breaking ties between the
candidates by token identity, with a strength that depends on where its own token sits
(:func:`label_priority_head`). None of them does prefix matching
(attending to the token after the previous occurrence of the query's token), which is what
the induction head does and one layer cannot.

Shape names as in :mod:`attnbook.induction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_tensor,
    require_values,
)
from attnbook.induction import _require_lengths, repeated_queries
from attnbook.induction_model import AttentionOnly, InductionConfig

__all__ = ["Candidates", "answer_candidates", "earliest_candidate_head", "label_priority_head"]


@dataclass(frozen=True)
class Candidates:
    """Where the answer to each repeated-half query could be, judged from positions alone.

    A query at ``t`` knows ``t`` but not ``L``. Each pattern length ``l`` in
    ``[min_len, max_len]`` with ``l <= t <= 2l - 2`` is *consistent* with it and puts the answer
    at ``t - l + 1``; the true length's candidate is the answer. Shapes: ``Q`` queries (the
    ``True`` entries of :func:`repeated_queries`, row by row), ``K = max_len - min_len + 1``
    lengths, column ``k`` for ``l = min_len + k``.

    Attributes:
        rows, queries: ``(Q,)`` the sequence and the position of each query.
        position: ``(Q, K)`` the candidate key ``t - l + 1`` for each length.
        consistent: ``(Q, K)`` bool, ``l`` is possible at this ``t``.
        own: ``(Q, K)`` bool, the candidate key holds the query's own token (it never is
            the answer: a pattern's tokens are distinct). Meaningless where not consistent.
        truth: ``(Q, K)`` bool, ``l`` is the sequence's real length.
    """

    rows: torch.Tensor
    queries: torch.Tensor
    position: torch.Tensor
    consistent: torch.Tensor
    own: torch.Tensor
    truth: torch.Tensor

    def guess_accuracy(self) -> float:
        """Expected accuracy of guessing uniformly among the consistent candidates that do
        not hold the query's token, averaged over the queries."""
        left = (self.consistent & ~self.own).sum(-1)  # (Q,) >= 1: the answer is never ruled out
        return (1 / left.double()).mean().item()

    def earliest_accuracy(self) -> float:
        """Accuracy of always taking the earliest such candidate (the longest length left)."""
        usable = self.consistent & ~self.own
        far = self.position.max().item() + 1
        chosen = torch.where(usable, self.position, far).min(-1).values  # (Q,)
        answer = (self.position * self.truth).sum(-1)  # (Q,) the true length's candidate
        return (chosen == answer).double().mean().item()


def answer_candidates(
    tokens: torch.Tensor, lengths: torch.Tensor, min_len: int, max_len: int
) -> Candidates:
    """The answer's possible positions for every repeated-half query (:class:`Candidates`).

    Args:
        tokens: ``(N, T)`` integer tokens from :func:`make_repeats`.
        lengths: ``(N,)`` pattern lengths, each in ``[min_len, max_len]``.
        min_len, max_len: the lengths the data draws from, ``1 <= min_len <= max_len``
            and ``2 * max_len <= T``.

    Returns:
        :class:`Candidates` for the ``Q`` queries ``L <= t <= 2L - 2``. On data from
        :func:`make_repeats` exactly one consistent candidate that does not hold the query's
        token is the answer.

    Raises:
        TypeError: ``tokens`` or ``lengths`` not an integer tensor of the stated rank, or a
            non-int ``min_len`` or ``max_len``.
        ValueError: ``min_len > max_len``, ``2 * max_len > T``, ``tokens`` empty or not
            ``N`` rows, ``lengths`` outside ``[min_len, max_len]`` or without values;
            ``lengths`` that leave no repeated-half query (every length 1); ``tokens`` and
            ``lengths`` that are not repeats of patterns of distinct tokens (a query's token
            is not the one ``L`` before it, or recurs at its answer position, which would
            rule out every candidate).
    """
    tokens = require_tensor("tokens", tokens, rank=2, dtype="integer", shape_hint="(N, T)")
    require_nonempty("tokens", tokens, "N and T")
    require_values("tokens", tokens)
    min_len = require_int("min_len", min_len, minimum=1)
    max_len = require_int("max_len", max_len, minimum=1)
    if min_len > max_len:
        raise ValueError(f"min_len={min_len} exceeds max_len={max_len}")
    n, t = tokens.shape
    if 2 * max_len > t:
        raise ValueError(f"max_len={max_len} needs T >= {2 * max_len} positions, tokens has {t}")
    lengths = require_tensor("lengths", lengths, rank=1, dtype="integer", shape_hint="(N,)")
    if len(lengths) != n:
        raise ValueError(f"lengths has {len(lengths)} entries but tokens holds N={n} sequences")
    lengths = _require_lengths(lengths, n, t)
    low, high = lengths.min().item(), lengths.max().item()
    if low < min_len or high > max_len:
        raise ValueError(
            f"lengths must lie in [min_len, max_len] = [{min_len}, {max_len}], got {low} to {high}"
        )
    rows, queries = repeated_queries(lengths, t).nonzero(as_tuple=True)  # (Q,) each
    if len(rows) == 0:
        raise ValueError("lengths leave no repeated-half query: a pattern needs length >= 2")
    ell = torch.arange(min_len, max_len + 1, device=tokens.device)  # (K,)
    consistent = (ell <= queries[:, None]) & (queries[:, None] <= 2 * ell - 2)  # (Q, K)
    position = queries[:, None] - ell + 1  # (Q, K)
    held = tokens[rows[:, None], position.clamp(0, t - 1)]  # (Q, K) the token at each candidate
    own = held == tokens[rows, queries][:, None]
    truth = ell == lengths[rows, None]
    period = lengths[rows]  # (Q,)
    broken = tokens[rows, queries] != tokens[rows, queries - period]  # (Q,) not a copy
    clash = (own & truth).any(-1)  # (Q,) the answer holds the query's token
    for bad, why in ((broken, "is not the token L before it"), (clash, "recurs at its answer")):
        if bad.any():
            i = bad.nonzero()[0].item()
            raise ValueError(
                f"tokens and lengths do not describe repeats of patterns of distinct tokens: "
                f"in row {rows[i].item()} the token at query {queries[i].item()} {why} "
                f"(L = {period[i].item()}); use make_repeats"
            )
    return Candidates(rows, queries, position, consistent, own, truth)


def earliest_candidate_head(config: InductionConfig) -> AttentionOnly:
    """A one-layer, one-head model with weights set by hand: each query attends to the earliest
    answer position its own position allows that does not hold its own token, and copies it.

    The rule is :meth:`Candidates.earliest_accuracy`. Residual dims
    ``0 .. V-1`` hold the token (one-hot), ``V .. V+3`` the position features ``j``, ``j**2``,
    ``e(j) + 0.4`` and ``1``, where ``e(j) = j - min(j, max_len) + 1`` is the earliest candidate
    of a query at ``j``. The score of query ``t`` on key ``j`` (after the ``1/sqrt(d)`` of
    attention) is ``-100 [same token] - 50 (j - e(t) - 0.4)**2`` up to a constant, so the
    query prefers the earliest candidate, then the next one, and never its own token; the value
    is the key's token, written with weight 10 onto its logit. Every seed gets the same weights.

    Raises:
        TypeError: ``config`` not an :class:`InductionConfig`.
        ValueError: ``config.layers`` or ``config.heads`` not 1, or
            ``config.width < config.vocab + 4``.
    """
    require_instance("config", config, InductionConfig)
    if config.layers != 1 or config.heads != 1:
        raise ValueError(
            f"config must have layers=1 and heads=1, got {config.layers} and {config.heads}"
        )
    d, v, t = config.width, config.vocab, config.t
    if d < v + 4:
        raise ValueError(f"config.width={d} must be at least config.vocab + 4 = {v + 4}")
    model = AttentionOnly(config)
    root = math.sqrt(d)  # attention divides every score by sqrt(d_head) = sqrt(d)
    j = torch.arange(t, dtype=model.embed.dtype)  # (T,) positions
    earliest = j - j.clamp(max=config.max_len) + 1  # (T,) the earliest candidate's position
    qkv = torch.zeros(d, 3 * d)  # columns: query 0..d-1, key d..2d-1, value 2d..3d-1
    qkv[:v, :v] = -100 * root * torch.eye(v)  # query: minus its own token ...
    qkv[v + 2, v] = 2 * 50 * root  # ... plus 100 (e(t) + 0.4) against the key's j ...
    qkv[v + 3, v + 1] = -50 * root  # ... minus 50 against the key's j**2
    qkv[:v, d : d + v] = torch.eye(v)  # key: its token
    qkv[v, d + v] = qkv[v + 1, d + v + 1] = 1.0  # key: j and j**2
    qkv[:v, 2 * d : 2 * d + v] = torch.eye(v)  # value: the key's token
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed[:, :v, :v] = torch.eye(v)  # the pad's embedding stays zero
        features = torch.stack([j, j**2, earliest + 0.4, torch.ones(t)], dim=-1)  # (T, 4)
        model.position[:, :, v : v + 4] = features
        model.qkv[0][:] = qkv
        model.out[0][:, :v, :v] = 10 * torch.eye(v)
        model.unembed[:, :v, :v] = torch.eye(v)
    return model


def label_priority_head(config: InductionConfig) -> AttentionOnly:
    """A one-layer, one-head model with weights set by hand that beats every ranking head.

    At a query ``t`` with ``n`` possible lengths, ``l_max = min(t, max_len)`` the longest:

    * the candidates ``t - l + 1`` get nearly equal scores, the earliest slightly ahead
      (``-1e-4`` per rank), the key ``t - l_max`` (where the query's own token sits when
      ``L = l_max``) ``-12``, every other key ``-40``;
    * the key holding the query's own token (at ``t - L``) gets ``+13`` on top, so for
      ``L < l_max`` it takes almost all the weight; the direct path cancels its copy of that
      token (``-5``);
    * that key's value also writes ``kappa * (t - L) * g`` and the direct path
      ``-kappa * (t - l_max + 1) * g``, where ``g = (0, 1, ..., V-1) / (V-1)`` favours higher
      token ids and ``kappa = 0.15 e^{-13}``: after the softmax, measured in units of the
      candidates' own weight (about ``e^{-13}`` each), the net tilt is about
      ``0.15 (l_max - L - 1) g`` against candidate copies of about 1.

    So for ``L = l_max`` and ``L = l_max - 1`` the tilt vanishes and the ranking decides, which
    is right on exactly those lengths (:meth:`Candidates.earliest_accuracy`); for shorter ``L``
    the tilt picks the candidate with the highest token id, a uniformly random one of the
    ``n - 1`` left, right with probability ``1 / (n - 1)`` instead of 0. On the chapter's data
    (lengths 6 to 12) the expected accuracy is ``383/560`` of the queries, 0.684 (each of
    the 56 ``(L, t)`` pairs equally likely).

    Residual dims: ``0 .. V`` the token (one-hot, the pad included), ``V+1 .. V+T`` the
    position (one-hot), then ``V`` logit dims read by the unembedding.

    Raises:
        TypeError: ``config`` not an :class:`InductionConfig`.
        ValueError: ``config.layers`` or ``config.heads`` not 1, or
            ``config.width < 2 * config.vocab + 1 + config.t`` (73 for the chapter's task).
    """
    require_instance("config", config, InductionConfig)
    if config.layers != 1 or config.heads != 1:
        raise ValueError(
            f"config must have layers=1 and heads=1, got {config.layers} and {config.heads}"
        )
    d, v, t = config.width, config.vocab, config.t
    tokens, logit = v + 1, v + 1 + t  # where the position dims and the logit dims start
    if d < logit + v:
        raise ValueError(
            f"config.width={d} must be at least 2 * vocab + 1 + t = {logit + v} (one-hot "
            "tokens and positions beside the logits)"
        )
    model = AttentionOnly(config)
    own, rank_step, far, tilt, cancel = 13.0, 1e-4, -40.0, 0.15, -5.0
    kappa = tilt / math.exp(own)
    priority = torch.arange(v, dtype=torch.float64) / (v - 1)  # (V,) the tie-break by token id
    scores = torch.zeros(logit, logit, dtype=torch.float64)  # query one-hots x key one-hots
    scores[:v, :v] = own * torch.eye(v)  # the key holding the query's own token
    by_position = torch.full((t, t), far, dtype=torch.float64)  # (query t, key j)
    direct_position = torch.zeros(t, v, dtype=torch.float64)
    for q in range(t):
        lengths = [n for n in range(config.min_len, config.max_len + 1) if n <= q <= 2 * n - 2]
        if not lengths:
            continue
        longest = max(lengths)
        for n in lengths:
            by_position[q, q - n + 1] = -rank_step * (longest - n)  # earliest candidate first
        by_position[q, q - longest] = -12.0  # own token's key when L = longest (no candidate)
        direct_position[q] = -kappa * (q - longest + 1) * priority
    scores[tokens:, tokens:] = by_position
    root = math.sqrt(d)  # attention divides every score by sqrt(d_head) = sqrt(d)
    qkv = torch.zeros(d, 3 * d, dtype=torch.float64)
    qkv[:logit, :logit] = root * scores  # query: one-hots times the score table
    qkv[:logit, d : d + logit] = torch.eye(logit)  # key: its one-hots
    qkv[:logit, 2 * d : 2 * d + logit] = torch.eye(logit)  # value: its one-hots
    out = torch.zeros(d, d, dtype=torch.float64)
    out[:v, logit : logit + v] = torch.eye(v)  # a key's token: copied onto its logit
    positions = torch.arange(t, dtype=torch.float64)
    out[tokens : tokens + t, logit : logit + v] = kappa * positions[:, None] * priority
    dtype = model.embed.dtype
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed[:, :tokens, :tokens] = torch.eye(tokens, dtype=dtype)
        model.embed[:, :v, logit : logit + v] = cancel * torch.eye(v, dtype=dtype)
        model.position[:, :, tokens : tokens + t] = torch.eye(t, dtype=dtype)
        model.position[:, :, logit : logit + v] = direct_position.to(dtype)
        model.qkv[0][:] = qkv.to(dtype)
        model.out[0][:] = out.to(dtype)
        model.unembed[:, logit : logit + v, :] = torch.eye(v, dtype=dtype)
    return model
