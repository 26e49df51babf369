"""Exercises of chapter 3: splitting a model-width tensor into heads and merging them back.

``split_heads(x, heads)``
    x ``(B, T, d)`` with ``d`` divisible by ``heads``; returns ``(B, H, T, d/H)`` where head
    ``h`` holds features ``h * d/H`` to ``(h + 1) * d/H - 1`` of every token, dtype of ``x``
    (a view is fine). ``x`` may be non-contiguous (a slice of a fused projection, a
    transposed tensor).

``merge_heads(x)``
    x ``(B, H, T, dh)``; returns ``(B, T, H * dh)``, the heads side by side along the features
    (the inverse of ``split_heads``), dtype of ``x``. ``x`` may be contiguous or the
    non-contiguous view that ``split_heads`` returns.
"""

from __future__ import annotations

import torch

from attnbook.heads import merge_heads as _merge_heads
from attnbook.heads import split_heads as _split_heads
from attnbook.practice._exercise import Case, Exercise, Mistake, randn


def split_heads(x, heads):
    return _split_heads(x, heads)


def merge_heads(x):
    return _merge_heads(x)


def _split_case(shape, heads, seed, dtype=torch.float64):
    return lambda: {"x": randn(*shape, seed=seed, dtype=dtype), "heads": heads}


_LAYOUT_HINT = (
    "Work it out on the hand case: with d = 6 and 3 heads, which features should head 1 of "
    "token 0 hold? Print your head 1 and compare."
)


def solution_split_heads(x, heads):
    b, t, d = x.shape
    return x.reshape(b, t, heads, d // heads).transpose(1, 2)  # (B, H, T, d/H)


SPLIT_HEADS = Exercise(
    name="split_heads",
    chapter="ch-multihead",
    signature="split_heads(x, heads)",
    reference=split_heads,
    solution=solution_split_heads,
    hint=_LAYOUT_HINT,
    cases=(
        Case("hand case: 1 sequence of 2 tokens, d = 6, 3 heads", "hand",
             lambda: {"x": torch.arange(12.0).reshape(1, 2, 6), "heads": 3}),
        Case("random case: B = 2, T = 5, d = 12, 4 heads", "random",
             _split_case((2, 5, 12), 4, 61, torch.float32)),
        Case("random case: B = 3, T = 4, d = 8, 4 heads (T equals H)", "random",
             _split_case((3, 4, 8), 4, 62)),
        Case("random case: B = 1, T = 6, d = 12, 2 heads", "random",
             _split_case((1, 6, 12), 2, 63)),
        Case("random case: a slice of a fused (B, T, 3d) projection (non-contiguous), d = 8, "
             "2 heads", "random", lambda: {"x": randn(2, 4, 24, seed=67)[..., 8:16], "heads": 2}),
        Case("random case: a transposed tensor (non-contiguous), d = 6, 3 heads", "random",
             lambda: {"x": randn(2, 6, 5, seed=68).mT, "heads": 3}),
        Case("edge case: one head", "edge", _split_case((2, 3, 4), 1, 64)),
        Case("edge case: one feature per head (H = d)", "edge", _split_case((2, 3, 5), 5, 65)),
        Case("edge case: one token", "edge", _split_case((2, 1, 6), 3, 66)),
    ),
    mistakes=(
        Mistake("reshape_without_transpose", "x is reshaped straight to (B, H, T, d/H), "
                "which cuts the flat memory of (T, d) into H blocks of whole tokens instead "
                "of cutting each token's features.", "A reshape never moves data. Reshape "
                "to (B, T, H, d/H) first: which two axes are then in the wrong order?",
                "ch-multihead; attnbook.heads",
                lambda x, heads: x.reshape(x.shape[0], heads, x.shape[1], -1),
                (lambda x, heads: x.view(x.shape[0], heads, x.shape[1], -1),)),
        Mistake("heads_strided", "head h takes every H-th feature (h, h + H, ...) instead of "
                "a contiguous block of d/H features.", _LAYOUT_HINT, "ch-multihead",
                lambda x, heads: x.reshape(*x.shape[:2], -1, heads).permute(0, 3, 1, 2)),
        Mistake("missing_transpose", "the result has shape (B, T, H, d/H): the features are "
                "split, but the head axis is not moved in front of the tokens.", "Attention "
                "runs on (..., heads, tokens, features), the layout of SDPA.", "ch-multihead",
                lambda x, heads: x.reshape(*x.shape[:2], heads, -1)),
        Mistake("transpose_before_reshape", "x is transposed to (B, d, T) and then reshaped, "
                "which mixes features of different tokens into one head.", "Split the "
                "feature axis first, then swap the token and head axes.", "ch-multihead",
                lambda x, heads: x.transpose(1, 2).reshape(x.shape[0], heads, x.shape[1], -1)),
    ),
)  # fmt: skip


def _merge_case(shape, seed, dtype=torch.float64):
    return lambda: {"x": randn(*shape, seed=seed, dtype=dtype)}


def solution_merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # reshape copies when it must


MERGE_HEADS = Exercise(
    name="merge_heads",
    chapter="ch-multihead",
    signature="merge_heads(x)",
    reference=merge_heads,
    solution=solution_merge_heads,
    hint="merge_heads must undo split_heads: check that merging a split gives back the "
    "original tensor, and that token t's features are head 0's block, then head 1's, ...",
    cases=(
        Case("hand case: 1 sequence, 3 heads, 2 tokens, 2 features per head", "hand",
             lambda: {"x": torch.arange(12.0).reshape(1, 3, 2, 2)}),
        Case("random case: B = 2, H = 4, T = 5, dh = 3", "random",
             _merge_case((2, 4, 5, 3), 71, torch.float32)),
        Case("random case: B = 3, H = 2, T = 2, dh = 4 (T equals H)", "random",
             _merge_case((3, 2, 2, 4), 72)),
        Case("random case: the output of split_heads (a non-contiguous view), B = 2, H = 3, "
             "T = 4, dh = 2", "random",
             lambda: {"x": _split_heads(randn(2, 4, 6, seed=76, dtype=torch.float32), 3)}),
        Case("edge case: one head", "edge", _merge_case((2, 1, 3, 4), 73)),
        Case("edge case: one token", "edge", _merge_case((2, 3, 1, 2), 74)),
        Case("edge case: one feature per head", "edge", _merge_case((1, 5, 3, 1), 75)),
    ),
    mistakes=(
        Mistake("reshape_without_transpose", "x is reshaped straight to (B, T, H * dh), "
                "which reads whole heads as if they were tokens.", "A reshape never moves "
                "data. Bring the token axis next to the batch axis first.", "ch-multihead",
                lambda x: x.reshape(x.shape[0], x.shape[2], -1)),
        Mistake("heads_interleaved", "the features come out interleaved by head (feature f "
                "of every head, then feature f + 1, ...) instead of head by head.",
                "After the transpose the last two axes must be (H, dh) in that order.",
                "ch-multihead", lambda x: x.permute(0, 2, 3, 1).flatten(2)),
        Mistake("view_after_transpose", "view() is called on the transposed tensor, which "
                "is not contiguous in memory, so it raises.", "transpose() only changes "
                "strides. Use reshape(), or make the tensor contiguous before view().",
                "PyTorch's view/stride rules (the Annotated Transformer calls .contiguous())",
                lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)),
        Mistake("not_flattened", "the result is (B, T, H, dh): the heads are moved but not "
                "joined into one feature axis.", "The next layer's projection expects "
                "(B, T, d).", "ch-multihead", lambda x: x.transpose(1, 2)),
    ),
)  # fmt: skip
