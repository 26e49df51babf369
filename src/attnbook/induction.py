"""Repeated random tokens, and the two attention patterns that solve them.

A sequence is ``L`` distinct random tokens followed by the same ``L`` tokens again, then
padding up to a fixed length ``T``. In the repeated half every next token is predictable, but
only by looking back: at query ``t`` (``L <= t <= 2L - 2``) the next token is the one that
followed the previous occurrence of the current token, at position ``t - L + 1``. The pattern
length ``L`` varies between sequences, so the position of the answer is not fixed and a model
has to find it by matching tokens.

Olsson et al. (2022) define an induction head by two properties, and this module measures
both, with one more pattern score that names the first head of the circuit:

* *prefix matching*, here the *induction score*: mean weight on key ``t - L + 1`` (the token
  after the previous occurrence of the query's token) over the queries of the repeated half,
  ``L <= t <= 2L - 1``;
* *copying*: the head's OV circuit through the embedding and the unembedding raises the logit
  of the token it attends to (:func:`copying_score`, the eigenvalue measure of Elhage et al.,
  2021);
* the *previous-token score* (not one of Olsson et al.'s criteria): mean weight on key
  ``t - 1`` over the real queries ``t >= 1``.

The model that learns them and its training live in :mod:`attnbook.induction_model`.

Extra shape names: ``N`` sequences, ``V`` vocabulary (token ``V`` is padding).
"""

from __future__ import annotations

import torch

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_tensor,
    require_values,
    too_large,
)

__all__ = [
    "copying_score",
    "induction_score",
    "make_repeats",
    "previous_token_score",
    "repeated_queries",
]


def make_repeats(
    n: int, *, vocab: int, min_len: int, max_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``n`` sequences whose second half repeats their first.

    Args:
        n: number of sequences ``N >= 1``.
        vocab: tokens ``0 .. vocab - 1`` (``V``); token ``vocab`` pads. Needs
            ``vocab >= max_len`` so that the first half can hold distinct tokens.
        min_len, max_len: the pattern length ``L`` is uniform on ``[min_len, max_len]``,
            ``1 <= min_len <= max_len``. Sequences have ``T = 2 * max_len`` positions.
        generator: the only source of randomness, so a seed fixes the data.

    Returns:
        ``tokens`` ``(N, T)`` int64 and ``lengths`` ``(N,)`` int64. Row ``i`` holds ``L_i``
        distinct tokens, the same ``L_i`` tokens in the same order, then ``T - 2 L_i`` pads.

    Raises:
        TypeError: a non-int size or a ``generator`` that is not a ``torch.Generator``.
        ValueError: a size < 1, ``min_len > max_len``, ``vocab < max_len``, or ``n`` and
            ``vocab`` too large to allocate.
    """
    n = require_int("n", n, minimum=1)
    vocab = require_int("vocab", vocab, minimum=1)
    min_len = require_int("min_len", min_len, minimum=1)
    max_len = require_int("max_len", max_len, minimum=1)
    require_instance("generator", generator, torch.Generator)
    if min_len > max_len:
        raise ValueError(f"min_len={min_len} exceeds max_len={max_len}")
    if vocab < max_len:
        raise ValueError(
            f"vocab={vocab} cannot fill a first half of max_len={max_len} distinct tokens"
        )
    t = 2 * max_len
    with too_large(f"n={n}, vocab={vocab}, max_len={max_len}"):
        lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)  # (N,)
        first = torch.rand(n, vocab, generator=generator).argsort(-1)[:, :max_len]  # (N, L)
        position = torch.arange(t)  # (T,)
        tokens = first.gather(1, (position % lengths[:, None]).clamp(max=max_len - 1))  # (N, T)
        padding = position >= 2 * lengths[:, None]  # (N, T)
    return tokens.masked_fill(padding, vocab), lengths


def _require_lengths(lengths: object, n: int, t: int) -> torch.Tensor:
    lengths = require_tensor("lengths", lengths, rank=1, dtype="integer", shape_hint="(N,)")
    require_nonempty("lengths", lengths, "N")
    require_values("lengths", lengths)
    if len(lengths) != n:
        raise ValueError(f"lengths has {len(lengths)} entries but weights hold N={n} sequences")
    low, high = lengths.min().item(), lengths.max().item()
    if low < 1 or 2 * high > t:
        raise ValueError(
            f"lengths must lie in [1, T/2] = [1, {t // 2}] for T={t}, got {low} to {high}"
        )
    return lengths


def _require_weights(weights: object) -> torch.Tensor:
    weights = require_tensor(
        "weights", weights, min_rank=4, dtype="floating", shape_hint="(..., N, H, T, T)"
    )
    require_values("weights", weights)
    if weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(
            f"weights must be square self-attention maps (..., N, H, T, T) with T >= 2, "
            f"got shape {tuple(weights.shape)}"
        )
    return weights


def repeated_queries(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Which query positions predict a repeated token: ``L <= t <= 2L - 2``.

    Args:
        lengths: pattern lengths ``(N,)``, each in ``[1, t/2]``.
        t: sequence length ``T``.

    Returns:
        Bool ``(N, T)``; entry ``[i, q]`` says that the token after query ``q`` is a copy, so
        the next-token prediction at ``q`` can be scored as in-context (``L - 1`` per row).

    Raises:
        TypeError: a non-int ``t``, ``lengths`` not a 1-D integer tensor.
        ValueError: ``t < 2`` or too large to allocate; ``lengths`` empty, outside
            ``[1, t/2]`` or without values (``meta``).
    """
    t = require_int("t", t, minimum=2)
    lengths = require_tensor("lengths", lengths, rank=1, dtype="integer", shape_hint="(N,)")
    lengths = _require_lengths(lengths, len(lengths), t)
    with too_large(f"t={t}"):
        position = torch.arange(t, device=lengths.device)  # (T,)
        return (position >= lengths[:, None]) & (position <= 2 * lengths[:, None] - 2)  # (N, T)


def _mean_on_key(weights: torch.Tensor, key: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    # weights (..., N, H, T, T); key and keep (N, T): the key each query is scored on.
    index = key.clamp(min=0)[:, None, :, None].expand(*weights.shape[:-1], 1)  # (..., N, H, T, 1)
    on_key = weights.gather(-1, index).squeeze(-1)  # (..., N, H, T)
    keep = keep[:, None, :]  # (N, 1, T)
    # where, not a product with keep: a NaN or inf weight of an unscored query (padding, say)
    # must not reach the mean.
    kept = torch.where(keep, on_key, 0.0)  # (..., N, H, T)
    return kept.sum((-3, -1)) / keep.sum().to(weights.dtype)  # (..., H)


def previous_token_score(weights: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean attention on the previous token, over the real queries ``1 <= t <= 2L - 1``.

    Args:
        weights: attention weights ``(..., N, H, T, T)``, rows summing to 1 (e.g. one layer's
            weights, with any leading dims such as a seed axis).
        lengths: pattern lengths ``(N,)`` (as from :func:`make_repeats`), in ``[1, T/2]``;
            positions from ``2L`` on are padding and are not scored.

    Returns:
        ``(..., H)``: 1 for a head that always reads ``t - 1``; ``mean 1/(t+1)`` for a head
        spreading its weight evenly over a causal past.

    Raises:
        TypeError, ValueError: non-floating or non-square ``weights``, ``lengths`` of the
            wrong dtype, count or range, either without values (``meta``).

    A NaN or inf weight of a query that is not scored (padding, say) does not reach the
    score.
    """
    weights = _require_weights(weights)
    t = weights.shape[-1]
    lengths = _require_lengths(lengths, weights.shape[-4], t)
    position = torch.arange(t, device=lengths.device)  # (T,)
    keep = (position >= 1) & (position <= 2 * lengths[:, None] - 1)  # (N, T)
    if not keep.any():
        raise ValueError("no sequence has a query with a previous token (every L is 1 and T = 2?)")
    return _mean_on_key(weights, (position - 1).expand(len(lengths), t), keep)


def induction_score(weights: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean attention on the token after the previous occurrence of the query's token.

    Query ``t`` of the repeated half (``L <= t <= 2L - 1``) holds a copy of the token at
    ``t - L``, so its induction target is key ``t - L + 1``.

    Args:
        weights: attention weights ``(..., N, H, T, T)``, rows summing to 1.
        lengths: pattern lengths ``(N,)`` in ``[1, T/2]``.

    Returns:
        ``(..., H)``: 1 for a perfect induction head. A previous-token head scores 0 unless
        ``L = 2`` (where ``t - L + 1 = t - 1``).

    Raises:
        TypeError, ValueError: as in :func:`previous_token_score`.
    """
    weights = _require_weights(weights)
    t = weights.shape[-1]
    lengths = _require_lengths(lengths, weights.shape[-4], t)
    position = torch.arange(t, device=lengths.device)  # (T,)
    keep = (position >= lengths[:, None]) & (position <= 2 * lengths[:, None] - 1)  # (N, T)
    return _mean_on_key(weights, position - lengths[:, None] + 1, keep)


def copying_score(ov: torch.Tensor) -> torch.Tensor:
    """How much a head's OV circuit copies: ``sum(eigenvalues) / sum(|eigenvalues|)``.

    ``ov`` is the head's full OV circuit read in token space, ``W_E W_V W_O W_U`` (the logit
    change of every output token when the head attends to every input token). Its eigenvalues
    are complex in general; their sum is the (real) trace. The score is 1 when every
    eigenvalue is positive (attending to a token raises that token's logit: copying), -1 when
    every one is negative (anti-copying: the attended token is suppressed), near 0 for no
    preference. This is the measure Elhage et al. (2021) use for copying heads.

    Args:
        ov: real ``(..., V, V)``; computed in float64.

    Returns:
        ``(...)`` in ``[-1, 1]``, float64.

    Raises:
        TypeError, ValueError: ``ov`` not a real floating tensor of rank >= 2 with equal last
            two dimensions, empty, non-finite, or all zeros (no eigenvalue to weigh).
    """
    ov = require_tensor("ov", ov, min_rank=2, dtype="floating", shape_hint="(..., V, V)")
    if ov.shape[-1] != ov.shape[-2] or ov.numel() == 0:
        raise ValueError(f"ov must be a non-empty square (..., V, V), got {tuple(ov.shape)}")
    require_values("ov", ov)
    ov = ov.detach().to(torch.float64)
    if not torch.isfinite(ov).all():
        raise ValueError("ov holds NaN or inf")
    eig = torch.linalg.eigvals(ov)  # (..., V) complex
    size = eig.abs().sum(-1)
    if (size == 0).any():
        raise ValueError("ov has a matrix whose eigenvalues are all zero: nothing to weigh")
    return eig.real.sum(-1) / size
