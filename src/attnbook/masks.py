"""Boolean attention masks: ``True`` means the query may attend to the key.

Every mask broadcasts against scores of shape ``(B, H, Tq, Tk)``, so masks combine with ``&``:
``padding_mask(lengths, t) & causal_mask(t)`` is a causal mask that also ignores padding.

Position convention for the causal masks: key ``j`` sits at absolute position ``j`` and query
``i`` at ``offset + i``. The default ``offset = t_k - t_q`` makes the queries the newest
positions, as when decoding with a KV cache (FlashAttention's "bottom-right" alignment). Note
that ``scaled_dot_product_attention(..., is_causal=True)`` aligns top-left instead (offset 0);
the two agree only when ``t_q == t_k``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnbook._checks import (
    require_device,
    require_int,
    require_positive_int,
    require_tensor,
    too_large,
)

__all__ = ["causal_mask", "padding_mask", "segment_mask", "sliding_window_mask"]

_MAX_POSITIONS = 2**62  # past this, torch's int64 arithmetic on positions can overflow


def _query_key_positions(
    t_q: int, t_k: int | None, offset: int | None, device: torch.device | str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    t_q = require_positive_int("t_q", t_q)
    t_k = t_q if t_k is None else require_positive_int("t_k", t_k)
    offset = t_k - t_q if offset is None else require_int("offset", offset)
    device = require_device("device", device)
    with too_large(f"t_q={t_q}, t_k={t_k} (offset={offset})"):
        query_pos = torch.arange(t_q, device=device).unsqueeze(-1) + offset  # (t_q, 1)
        key_pos = torch.arange(t_k, device=device).unsqueeze(0)  # (1, t_k)
    return query_pos, key_pos


def causal_mask(
    t_q: int,
    t_k: int | None = None,
    *,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Mask that lets each query see its own position and every earlier one.

    Args:
        t_q: number of queries ``Tq``.
        t_k: number of keys ``Tk``; defaults to ``t_q``.
        offset: absolute position of query 0; defaults to ``t_k - t_q``. With
            ``t_q > t_k`` the default is negative and the first queries see no key at all
            (their rows are all ``False``; :func:`attnbook.attention.attention` returns zeros).
        device: where to build the mask: a ``torch.device``, a string such as ``"cuda"``, or
            None for the default device.

    Returns:
        Bool tensor ``(Tq, Tk)``: entry ``[i, j]`` is ``j <= offset + i``.

    Example:
        ``causal_mask(2, 4)`` is ``[[T, T, T, F], [T, T, T, T]]``: two new tokens at positions
        2 and 3 reading a cache of four keys.
    """
    query_pos, key_pos = _query_key_positions(t_q, t_k, offset, device)
    with too_large(f"t_q={t_q}, t_k={t_k}"):
        return key_pos <= query_pos  # (Tq, Tk)


def sliding_window_mask(
    t_q: int,
    t_k: int | None = None,
    *,
    window: int,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask restricted to the ``window`` most recent positions (local attention).

    Args:
        t_q, t_k, offset, device: as in :func:`causal_mask`.
        window: how many positions each query sees, counting itself (``window >= 1``).
            ``window >= offset + t_q`` gives back :func:`causal_mask`.

    Returns:
        Bool tensor ``(Tq, Tk)``: entry ``[i, j]`` is ``0 <= (offset + i) - j < window``.
    """
    window = require_positive_int("window", window)
    query_pos, key_pos = _query_key_positions(t_q, t_k, offset, device)
    with too_large(f"t_q={t_q}, t_k={t_k}"):
        distance = query_pos - key_pos  # (Tq, Tk)
        return (distance >= 0) & (distance < window)


def padding_mask(
    lengths: torch.Tensor | Sequence[int], t: int, *, side: str = "right"
) -> torch.Tensor:
    """Mask that hides the padding of each sequence in a padded batch.

    Args:
        lengths: the true length of each of the ``B`` sequences, a 1-D integer tensor or a
            sequence of ints, each in ``[0, t]``. A length of 0 gives an all-``False`` row.
        t: padded length ``T`` (the key axis of the scores).
        side: where the padding sits, ``"right"`` (after the tokens: training batches, the
            default) or ``"left"`` (before them: batched generation, so that every
            sequence's newest token is in the last column).

    Returns:
        Bool tensor ``(B, 1, 1, T)`` on the device of ``lengths``: entry ``[b, 0, 0, j]`` is
        ``j < lengths[b]`` (right) or ``j >= T - lengths[b]`` (left). It broadcasts over heads
        and queries, so padded *keys* are hidden; outputs at padded *query* positions are still
        computed and should be ignored. ``lengths`` on the ``meta`` device (shapes only) gives
        a meta mask, unchecked.

    Warning:
        The result is 4-D on purpose. Its ``[:, 0, 0]`` slice, a ``(B, T)`` tensor, is NOT a
        valid mask for scores ``(B, H, Tq, Tk)``: broadcasting aligns trailing axes, so a
        ``(B, Tk)`` mask lines up its batch axis with the *query* axis ``Tq``. When
        ``B != Tq`` that fails loudly; when ``B == Tq`` it silently applies sequence ``i``'s
        padding to query ``i`` of every sequence. ``torch.nn.functional.
        scaled_dot_product_attention`` broadcasts the same way (it is its documented
        semantics, and :func:`attnbook.attention.attention` keeps them): add the two axes,
        ``mask[:, None, None, :]``.
    """
    t = require_int("t", t, minimum=1, maximum=_MAX_POSITIONS)
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    if not isinstance(lengths, torch.Tensor):
        if not isinstance(lengths, Sequence):
            raise TypeError(f"lengths must be a 1-D tensor or a sequence of ints, got {lengths!r}")
        values = [require_int(f"lengths[{i}]", n) for i, n in enumerate(lengths)]
        lengths = torch.tensor(values, dtype=torch.long)
    lengths = require_tensor("lengths", lengths, rank=1, dtype="integer", shape_hint="(B,)")
    if lengths.numel() == 0:
        raise ValueError("lengths is empty; need one length per sequence (B >= 1)")
    if not lengths.is_meta and bool(((lengths < 0) | (lengths > t)).any()):
        raise ValueError(f"lengths must lie in [0, t={t}], got {lengths.tolist()}")
    with too_large(f"t={t}"):
        key_pos = torch.arange(t, device=lengths.device)  # (T,)
        if side == "right":
            valid = key_pos < lengths.unsqueeze(-1)  # (B, T)
        else:
            valid = key_pos >= t - lengths.unsqueeze(-1)  # (B, T)
    return valid[:, None, None, :]  # (B, 1, 1, T)


def segment_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Mask for packed sequences: tokens attend only within their own segment.

    Combine with :func:`causal_mask` for packed causal training:
    ``segment_mask(ids) & causal_mask(T)``.

    Args:
        segment_ids: integer tensor ``(B, T)``; tokens with equal ids share a segment
            (segments need not be contiguous).

    Returns:
        Bool tensor ``(B, 1, T, T)``: entry ``[b, 0, i, j]`` is
        ``segment_ids[b, i] == segment_ids[b, j]``.
    """
    ids = require_tensor("segment_ids", segment_ids, rank=2, dtype="integer", shape_hint="(B, T)")
    if ids.numel() == 0:
        raise ValueError(f"segment_ids must have B >= 1 and T >= 1, got shape {tuple(ids.shape)}")
    return ids[:, None, :, None] == ids[:, None, None, :]  # (B, 1, T, T)
