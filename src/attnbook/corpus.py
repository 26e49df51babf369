"""The book's own prose as a character-level language-modelling corpus.

``data/book_text.txt`` holds the markdown cells of the chapters, frozen by
``scripts/freeze_corpus.py`` and shipped inside the package, so the corpus needs no download
and reads the same after a plain ``pip install``. This module loads it, maps characters to
ids, cuts random training windows, and scores the count-based baselines a trained model must
beat.

Extra shape name: ``N`` characters in a stream of ids.
"""

from __future__ import annotations

from importlib import resources

import torch

from attnbook._checks import (
    require_int,
    require_positive_int,
    require_real,
    require_tensor,
    require_values,
    too_large,
)

__all__ = [
    "CharVocab",
    "book_text",
    "count_cross_entropy",
    "interpolated_cross_entropy",
    "random_windows",
]


def book_text() -> str:
    """The frozen corpus: the prose of the book's chapters as one ``str``."""
    return resources.files("attnbook").joinpath("data/book_text.txt").read_text("utf-8")


class CharVocab:
    """A bijection between the distinct characters of a text and the ids ``0 .. V - 1``,
    in code-point order (so the newline, the smallest, is id 0 when the text has one).

    Raises ``TypeError`` for a ``text`` that is not a ``str`` and ``ValueError`` for ``""``."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a non-empty str, got {type(text).__name__}")
        if not text:
            raise ValueError("text must be a non-empty str, got ''")
        self.chars = sorted(set(text))
        self._ids = {ch: i for i, ch in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Ids ``(N,)`` (int64) of the characters of ``text``; a character outside the
        vocabulary raises ``ValueError`` naming it."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        unknown = sorted(set(text) - self._ids.keys())
        if unknown:
            raise ValueError(f"text has characters outside the vocabulary: {unknown[:5]!r}")
        return torch.tensor([self._ids[ch] for ch in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor) -> str:
        """The text of a 1-D integer tensor of ids in ``[0, V)``; raises ``TypeError`` or
        ``ValueError`` naming ``ids`` for any other (a ``meta`` tensor included)."""
        ids = require_values("ids", require_tensor("ids", ids, rank=1, dtype="integer"))
        if ids.numel() and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError(f"ids must lie in [0, {len(self)}), got {ids.min()}..{ids.max()}")
        return "".join(self.chars[i] for i in ids.tolist())


def _require_stream(name: str, ids: object, minimum: int) -> torch.Tensor:
    ids = require_tensor(name, ids, rank=1, dtype="integer", shape_hint="(N,)")
    require_values(name, ids)
    if ids.numel() < minimum or ids.min() < 0:
        raise ValueError(f"{name} must hold >= {minimum} ids >= 0, got shape {tuple(ids.shape)}")
    return ids


def random_windows(
    ids: torch.Tensor, batch: int, context: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut ``batch`` windows of ``context + 1`` consecutive ids at random offsets.

    Args:
        ids: the stream ``(N,)`` with ``N > context``.
        batch, context: ``B`` windows of ``T = context`` inputs each.
        generator: draws the offsets (uniform over every full window).

    Returns:
        ``(inputs, labels)``, each ``(B, T)``: ``labels`` is ``inputs`` shifted left by one,
        the next-token targets of every position.

    Raises:
        TypeError: non-int ``batch`` or ``context``, ``ids`` not a 1-D integer tensor, or
            ``generator`` not a ``torch.Generator``.
        ValueError: ``batch`` or ``context`` < 1, ``batch`` too large to allocate, ``ids``
            with fewer than ``context + 1`` ids, a negative id, or no values (``meta``).
    """
    batch, context = require_positive_int("batch", batch), require_positive_int("context", context)
    ids = _require_stream("ids", ids, context + 1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    with too_large(f"batch={batch}, context={context}"):
        starts = torch.randint(len(ids) - context, (batch,), generator=generator)  # (B,)
        windows = ids[starts[:, None] + torch.arange(context + 1)]  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


def _counts_of(keys: torch.Tensor, table_keys: torch.Tensor) -> torch.Tensor:
    """How often each of ``keys`` occurs in ``table_keys`` (both 1-D int64)."""
    unique, counts = table_keys.unique(return_counts=True)  # sorted
    where = torch.searchsorted(unique, keys).clamp_max(len(unique) - 1)
    return torch.where(unique[where] == keys, counts[where], 0).double()


def count_cross_entropy(train: torch.Tensor, test: torch.Tensor, vocab: int, order: int) -> float:
    """Cross-entropy in nats per character of a count model on ``test``.

    The model predicts each character from the ``order`` characters before it, by how often
    that continuation followed that context in ``train``: ``order=0`` is the unigram model
    (frequency alone, what a predictor gets without reading the text before the character),
    ``order=1`` the bigram and ``order=2`` the trigram model. Counts get add-one smoothing,
    ``p(c | ctx) = (n(ctx, c) + 1) / (n(ctx) + V)``, so that a continuation never seen in
    ``train`` costs a finite amount (an unseen context gives the uniform ``1 / V``); the
    first ``order`` test characters have no full context and are not scored.

    Raises:
        TypeError: non-int ``vocab`` or ``order``; ``train`` or ``test`` not 1-D integer
            tensors.
        ValueError: ``order < 0``, ``V ** (order + 1)`` beyond int64, streams shorter than
            ``order + 1`` (or 2) ids, ids outside ``[0, vocab)``, or ``meta`` streams.
    """
    vocab = require_positive_int("vocab", vocab)
    order = require_int("order", order, minimum=0)
    # order + 1 > 62 already overflows for vocab >= 2; testing it first keeps Python from
    # computing a vast power (3 ** 10**30 would never finish).
    if vocab > 1 and (order + 1 > 62 or vocab ** (order + 1) >= 2**62):
        raise ValueError(f"order={order} is too large for vocab={vocab}: V ** (order + 1) >= 2**62")
    train = _require_stream("train", train, max(2, order + 1))
    test = _require_stream("test", test, max(2, order + 1))
    if max(train.max().item(), test.max().item()) >= vocab:
        raise ValueError(f"ids must lie in [0, vocab={vocab})")

    def keys(ids: torch.Tensor) -> torch.Tensor:  # (N - order,): each (context, next) in base V
        windows = ids.long().unfold(0, order + 1, 1)  # (N - order, order + 1)
        return (windows * vocab ** torch.arange(order, -1, -1)).sum(1)

    train_keys, test_keys = keys(train), keys(test)
    joint = _counts_of(test_keys, train_keys)  # n(ctx, c)
    context = _counts_of(test_keys // vocab, train_keys // vocab)  # n(ctx)
    return -((joint + 1) / (context + vocab)).log().mean().item()


def interpolated_cross_entropy(
    train: torch.Tensor, test: torch.Tensor, vocab: int, order: int, discount: float = 0.75
) -> float:
    """Cross-entropy in nats per character of an interpolated count model on ``test``.

    The standard strong count baseline (interpolated absolute discounting, the core of
    Kneser-Ney smoothing without its continuation counts): each order takes ``discount`` off
    every seen count and hands the mass it freed to the order below,

    ``p_n(c | ctx) = max(n(ctx, c) - D, 0) / n(ctx) + D t(ctx) / n(ctx) p_{n-1}(c | ctx')``,

    where ``t(ctx)`` is the number of distinct characters seen after ``ctx`` and ``ctx'`` drops
    its oldest character; a context never seen in ``train`` passes ``p_{n-1}`` on unchanged.
    The unigram ``p_0`` is add-one smoothed, so nothing costs infinity. Unlike add-one
    smoothing at every order (:func:`count_cross_entropy`), this does not spread mass over the
    ``V`` characters a long context never saw, so longer contexts help instead of hurt. The
    first ``order`` test characters are not scored, as in :func:`count_cross_entropy`.

    Args:
        train, test: 1-D integer id streams; vocab: ``V``; order: the context length (0 to 8).
        discount: ``D``, in ``(0, 1)``; tune it on held-out *training* text, not on ``test``.

    Raises:
        TypeError, ValueError: as :func:`count_cross_entropy`, an ``order`` above 8, or a
            ``discount`` outside ``(0, 1)``.
    """
    vocab = require_positive_int("vocab", vocab)
    order = require_int("order", order, minimum=0, maximum=8)
    discount = require_real("discount", discount, positive=True)
    if not discount < 1:
        raise ValueError(f"discount must lie in (0, 1), got {discount}")
    if vocab ** (order + 1) >= 2**62:
        raise ValueError(f"order={order} is too large for vocab={vocab}: V ** (order + 1) >= 2**62")
    train = _require_stream("train", train, max(2, order + 1))
    test = _require_stream("test", test, max(2, order + 1))
    if max(train.max().item(), test.max().item()) >= vocab:
        raise ValueError(f"ids must lie in [0, vocab={vocab})")
    train, test = train.long(), test.long()
    scored = test[order:]  # (M,) the characters predicted
    unigram = torch.bincount(train, minlength=vocab).double()
    p = (unigram[scored] + 1) / (len(train) + vocab)  # (M,) p_0
    for n in range(1, order + 1):
        weights = vocab ** torch.arange(n, -1, -1)  # context of n characters, then the next
        train_keys = (train.unfold(0, n + 1, 1) * weights).sum(1)  # (N - n,)
        test_keys = (test[order - n :].unfold(0, n + 1, 1) * weights).sum(1)  # (M,)
        joint = _counts_of(test_keys, train_keys)  # n(ctx, c)
        context = _counts_of(test_keys // vocab, train_keys // vocab)  # n(ctx)
        kinds = _counts_of(test_keys // vocab, train_keys.unique() // vocab)  # t(ctx)
        seen = context > 0
        safe = context.clamp_min(1)
        mixed = (joint - discount).clamp_min(0) / safe + discount * kinds / safe * p
        p = torch.where(seen, mixed, p)
    return -p.log().mean().item()
