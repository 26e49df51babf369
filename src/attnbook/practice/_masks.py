"""Exercises of chapter 4: the causal mask for a cache, and the padding mask.

``causal_mask(t_q, t_k)``
    Returns a ``torch.bool`` tensor ``(Tq, Tk)``, ``True`` = may attend. The queries are the
    newest ``t_q`` positions: query ``i`` sits at position ``t_k - t_q + i`` and may read keys
    ``j`` at or before it. With ``t_q > t_k`` the first rows are all ``False``.

``padding_mask(lengths, t)``
    ``lengths`` a list of ``B`` ints in ``[0, t]``, ``t`` the padded length. Returns a
    ``torch.bool`` tensor ``(B, 1, 1, T)`` (it broadcasts against scores ``(B, H, Tq, Tk)``)
    with entry ``[b, 0, 0, j]`` true when key ``j`` is a real token of sequence ``b`` (right
    padding: the real tokens come first).
"""

from __future__ import annotations

import torch

from attnbook.masks import causal_mask as _causal_mask
from attnbook.masks import padding_mask as _padding_mask
from attnbook.practice._exercise import Case, Exercise, Family, Mistake


def causal_mask(t_q, t_k):
    return _causal_mask(t_q, t_k)


def _additive(mask):
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))


# A slip of both mask exercises (knob: how the boolean mask is turned into floats).
_FLOAT_MASK = Family(
    "float_mask",
    "the mask is a float tensor (an additive 0 / -inf mask, or 1.0 and 0.0); this exercise "
    "asks for the boolean form.",
    "Return a torch.bool tensor with True where attending is allowed; masked_fill turns it "
    "into -inf later.",
    "ch-masking, a mask is added to the scores",
    ({"as_float": _additive}, {"as_float": lambda mask: mask.float()}),
)


def _tril(t_q, t_k, diagonal):
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=diagonal)


def _sizes(t_q, t_k):
    return lambda: {"t_q": t_q, "t_k": t_k}


def solution_causal_mask(t_q, t_k):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)  # absolute positions, (Tq, 1)
    key_pos = torch.arange(t_k)[None, :]  # (1, Tk)
    return key_pos <= query_pos  # (Tq, Tk) bool


CAUSAL_MASK = Exercise(
    name="causal_mask",
    chapter="ch-masking",
    signature="causal_mask(t_q, t_k)",
    reference=causal_mask,
    solution=solution_causal_mask,
    hint="Write down the absolute position of query i and of key j, then the condition "
    "between them. Try it by hand on t_q = 2, t_k = 5: two new tokens reading a cache of 5.",
    cases=(
        Case("hand case: 4 queries, 4 keys", "hand", _sizes(4, 4)),
        Case("hand case: 2 new tokens reading a cache of 5 keys", "hand", _sizes(2, 5)),
        Case("random case: 7 queries, 7 keys", "random", _sizes(7, 7)),
        Case("random case: 3 queries, 8 keys", "random", _sizes(3, 8)),
        Case("edge case: one query, 9 keys (a decoding step)", "edge", _sizes(1, 9)),
        Case("edge case: 4 queries, the same 9 keys (a mask is not a function of t_k alone)",
             "edge", _sizes(4, 9)),
        Case("edge case: 5 queries, 3 keys (rows with no key)", "edge", _sizes(5, 3)),
        Case("edge case: one query, one key", "edge", _sizes(1, 1)),
    ),
    mistakes=(
        Mistake("inverted", "the mask's sense is flipped: True marks what is hidden.",
                "This book and SDPA use True = may attend (nn.MultiheadAttention's boolean "
                "masks mean the opposite). Should query 0 be allowed to read key 0?",
                "attnbook conventions; nn.MultiheadAttention",
                lambda t_q, t_k: ~_causal_mask(t_q, t_k)),
        Mistake("diagonal_excluded", "the diagonal is shifted by one: a query may not read its "
                "own position.", "Chapter 4: with shifted labels, position i reads its own "
                "input. Is key i allowed for query i?", "ch-masking exercise 1",
                lambda t_q, t_k: _tril(t_q, t_k, t_k - t_q - 1)),
        Mistake("sees_next_token", "the diagonal is shifted by one the other way: each query "
                "also reads the next position, the token it must predict.", "Which is the "
                "latest key query i may read?", "ch-masking, the shortcut of unshifted labels",
                lambda t_q, t_k: _tril(t_q, t_k, t_k - t_q + 1)),
        Mistake("top_left", "the mask is aligned top-left (query i reads keys 0..i), as "
                "SDPA's is_causal does; with a cache the queries are the newest positions.",
                "Chapter 4, rectangular masks: at which absolute position does query 0 of a "
                "decoding step sit?", "ch-masking, rectangular masks for decoding",
                lambda t_q, t_k: _tril(t_q, t_k, 0)),
        Mistake("offset_sign_flipped", "the offset between queries and keys has the wrong "
                "sign (t_q - t_k instead of t_k - t_q).", "With t_q = 1 and t_k = 9 the one "
                "query is the newest token: how many keys does it see?", "ch-masking",
                lambda t_q, t_k: _tril(t_q, t_k, t_q - t_k)),
        Mistake("future_not_past", "the mask is upper-triangular: queries read the future "
                "instead of the past (triu in place of tril).", "Row i is query i; in a "
                "causal row the allowed keys come first.", "ch-masking",
                lambda t_q, t_k: ~_tril(t_q, t_k, t_k - t_q - 1)),
        _FLOAT_MASK.mistake(lambda as_float: lambda t_q, t_k: as_float(_causal_mask(t_q, t_k))),
    ),
)  # fmt: skip


def padding_mask(lengths, t):
    return _padding_mask(lengths, t)


def _keys_real(lengths, t, *, left=False, inclusive=False):
    j = torch.arange(t)
    n = torch.tensor(lengths)[:, None]
    if left:
        return j >= t - n  # (B, T)
    return j <= n if inclusive else j < n  # (B, T)


def solution_padding_mask(lengths, t):
    real = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    return real[:, None, None, :]  # (B, 1, 1, T)


PADDING_MASK = Exercise(
    name="padding_mask",
    chapter="ch-masking",
    signature="padding_mask(lengths, t)",
    reference=padding_mask,
    solution=solution_padding_mask,
    hint="Check the shape against scores (B, H, Tq, Tk) with torch.broadcast_shapes, and "
    "entry [b, 0, 0, j] against the question: is key j a real token of sequence b?",
    cases=(
        Case("hand case: lengths [2, 0, 4], t = 4", "hand",
             lambda: {"lengths": [2, 0, 4], "t": 4}),
        Case("random case: lengths [3, 1, 4], t = 4 (the hand case's shape, other lengths)",
             "random", lambda: {"lengths": [3, 1, 4], "t": 4}),
        Case("random case: lengths [5, 3], t = 5", "random",
             lambda: {"lengths": [5, 3], "t": 5}),
        Case("random case: lengths [1, 6, 3, 2], t = 7", "random",
             lambda: {"lengths": [1, 6, 3, 2], "t": 7}),
        Case("edge case: one sequence without padding", "edge",
             lambda: {"lengths": [3], "t": 3}),
        Case("edge case: an empty sequence (length 0)", "edge",
             lambda: {"lengths": [0, 2], "t": 2}),
    ),
    mistakes=(
        Mistake("inverted", "the mask's sense is flipped: True marks the padding.",
                "This book and SDPA use True = may attend.", "attnbook conventions",
                lambda lengths, t: ~_padding_mask(lengths, t)),
        Mistake("includes_first_pad", "one padding key too many is allowed (j <= length).",
                "A sequence of length n has real tokens at positions 0 .. n - 1.",
                "off-by-one", lambda lengths, t: _keys_real(lengths, t, inclusive=True)[
                    :, None, None, :]),
        Mistake("masks_queries", "the mask has shape (B, 1, T, 1), so it hides padded "
                "queries instead of padded keys.", "Chapter 4: a padding-key mask stops real "
                "queries reading padding. Which axis of the scores holds the keys?",
                "ch-masking, padding keys and padding losses",
                lambda lengths, t: _padding_mask(lengths, t).transpose(-1, -2)),
        Mistake("not_broadcastable", "the mask has shape (B, T); against scores (B, H, Tq, "
                "Tk) it would line up with (Tq, Tk), not with the batch.", "Broadcasting "
                "aligns shapes from the right. Insert the head and query axes.",
                "broadcasting rules", lambda lengths, t: _keys_real(lengths, t)),
        Mistake("left_padded", "the real tokens are taken to be the last ones (left "
                "padding); this exercise pads on the right.", "Right padding: the real tokens "
                "come first.", "ch-masking exercise 3",
                lambda lengths, t: _keys_real(lengths, t, left=True)[:, None, None, :]),
        _FLOAT_MASK.mistake(lambda as_float: lambda lengths, t: as_float(
            _padding_mask(lengths, t))),
    ),
)  # fmt: skip
