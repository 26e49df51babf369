"""Split-KV decoding (the idea of Flash-Decoding): one query's keys cut into chunks.

At a decoding step each sequence has one new query per head, ``Tq = 1``, so an attention kernel
that parallelises over batch, heads and query blocks has only ``B * H`` pieces of work. Cutting
the keys into ``splits`` chunks gives ``B * H * splits`` independent pieces: each chunk reduces
its keys to an online-softmax state (:func:`attnbook.online_softmax.block_state`), and the
states are combined with :func:`attnbook.online_softmax.merge`, which is exact for any split.

Extra shape name: ``S`` chunks of keys (``splits``).
"""

from __future__ import annotations

import math

import torch

from attnbook._checks import require_positive_int, require_qkv, require_real
from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge

__all__ = ["chunk_states", "split_kv_attention"]


def chunk_states(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, splits: int, scale: float | None = None
) -> SoftmaxState:
    """The online-softmax state of each chunk of keys, all chunks at once.

    Args:
        q: queries ``(..., H, Tq, dk)``.
        k, v: keys ``(..., H, Tk, dk)`` and values ``(..., H, Tk, dv)``, ``Tk >= 1``.
        splits: ``S``, chunks to cut the keys into, ``1 <= S <= Tk``: consecutive keys,
            sizes differing by at most one (as ``torch.tensor_split``), none empty.
        scale: multiplier of the scores; defaults to ``1 / sqrt(dk)``.

    Returns:
        :class:`~attnbook.online_softmax.SoftmaxState` with a chunk axis before the query
        axis: ``m, l`` of shape ``(..., H, S, Tq)`` and ``u`` of shape ``(..., H, S, Tq, dv)``.

    Raises:
        TypeError, ValueError: as :func:`attnbook.attention.attention` for ``q, k, v`` (equal
            head counts here); ``Tk == 0``; a ``splits`` that is not an int in ``[1, Tk]``.
    """
    q, k, v = require_qkv(q, k, v, allow_gqa=False)
    t_k = k.shape[-2]
    if t_k == 0:
        raise ValueError(f"k must hold at least one key to split, got shape {tuple(k.shape)}")
    splits = require_positive_int("splits", splits)
    if splits > t_k:
        raise ValueError(f"splits must be <= Tk={t_k} (no empty chunks), got {splits}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_real("scale", scale)
    states = [  # each chunk is independent of the others: a GPU reduces them all at once
        block_state((q @ k_c.transpose(-2, -1)) * scale, v_c)  # scores (..., H, Tq, Tc)
        for k_c, v_c in zip(k.tensor_split(splits, -2), v.tensor_split(splits, -2), strict=True)
    ]
    m = torch.stack([s.m for s in states], dim=-2)  # (..., H, S, Tq)
    l = torch.stack([s.l for s in states], dim=-2)  # noqa: E741 (..., H, S, Tq)
    u = torch.stack([s.u for s in states], dim=-3)  # (..., H, S, Tq, dv)
    return SoftmaxState(m, l, u)


def split_kv_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, splits: int, scale: float | None = None
) -> torch.Tensor:
    """Attention with the keys cut into ``splits`` chunks reduced apart, then merged.

    Equal up to rounding to ``attention(q, k, v)`` (no mask) for every ``splits``; the merge
    is a left fold over the chunks, as a reduction kernel's final pass would do.

    Args:
        q, k, v, splits, scale: as in :func:`chunk_states`.

    Returns:
        ``(..., H, Tq, dv)``.

    Raises:
        TypeError, ValueError: as :func:`chunk_states`.
    """
    m, l, u = chunk_states(q, k, v, splits=splits, scale=scale)  # noqa: E741
    state = SoftmaxState(m[..., 0, :], l[..., 0, :], u[..., 0, :, :])  # chunk 0
    for c in range(1, m.shape[-2]):
        state = merge(state, SoftmaxState(m[..., c, :], l[..., c, :], u[..., c, :, :]))
    return finalize(state)
