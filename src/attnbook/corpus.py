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

from attnbook._checks import require_int, require_positive_int, require_tensor

__all__ = ["CharVocab", "book_text", "count_cross_entropy", "random_windows"]


def book_text() -> str:
    """The frozen corpus: the prose of the book's chapters as one ``str``."""
    return resources.files("attnbook").joinpath("data/book_text.txt").read_text("utf-8")


class CharVocab:
    """A bijection between the distinct characters of a text and the ids ``0 .. V - 1``,
    in code-point order (so the newline, the smallest, is id 0 when the text has one)."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty str, got {type(text).__name__}")
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
        """The text of a 1-D integer tensor of ids in ``[0, V)``."""
        ids = require_tensor("ids", ids, rank=1, dtype="integer", shape_hint="(N,)")
        if ids.numel() and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError(f"ids must lie in [0, {len(self)}), got {ids.min()}..{ids.max()}")
        return "".join(self.chars[i] for i in ids.tolist())


def _require_stream(name: str, ids: object, minimum: int) -> torch.Tensor:
    ids = require_tensor(name, ids, rank=1, dtype="integer", shape_hint="(N,)")
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
    """
    batch, context = require_positive_int("batch", batch), require_positive_int("context", context)
    ids = _require_stream("ids", ids, context + 1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    starts = torch.randint(len(ids) - context, (batch,), generator=generator)  # (B,)
    windows = ids[starts[:, None] + torch.arange(context + 1)]  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


def count_cross_entropy(train: torch.Tensor, test: torch.Tensor, vocab: int, order: int) -> float:
    """Cross-entropy in nats per character of a count model on ``test``.

    ``order=0`` is the unigram model (each character's frequency in ``train``), the best any
    predictor can do without looking at the text before it; ``order=1`` conditions on the
    previous character (bigram). Counts get add-one smoothing so that a pair never seen in
    ``train`` costs a finite amount; with ``order=1`` the first test character is not scored.
    """
    vocab = require_positive_int("vocab", vocab)
    order = require_int("order", order, minimum=0)
    if order > 1:
        raise ValueError(f"order must be 0 (unigram) or 1 (bigram), got {order}")
    train, test = _require_stream("train", train, 2), _require_stream("test", test, 2)
    if max(train.max().item(), test.max().item()) >= vocab:
        raise ValueError(f"ids must lie in [0, vocab={vocab})")
    if order == 0:
        counts = torch.bincount(train, minlength=vocab).double() + 1  # (V,)
        return -(counts / counts.sum()).log()[test].mean().item()
    pairs = torch.bincount(train[:-1] * vocab + train[1:], minlength=vocab * vocab)
    table = pairs.view(vocab, vocab).double() + 1  # (V, V): row = previous character
    log_p = (table / table.sum(1, keepdim=True)).log()
    return -log_p[test[:-1], test[1:]].mean().item()
