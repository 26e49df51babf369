"""Associative retrieval: a synthetic lookup task whose table changes with every sequence.

A sequence holds ``R`` context records ``(key, value)`` with distinct keys, then one query record
``(key, MASK)`` whose key repeats one of the context keys. The target is the value that this
sequence paired with that key. Values are drawn afresh for every sequence, so the query alone
says nothing about the answer: the model must read the context. The model that solves it, and
its training and evaluation, live in :mod:`attnbook.retrieval_model`.

Extra shape names: ``N`` examples, ``R`` context records (so ``T = R + 1``), ``V`` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_real,
    require_same_shape,
    require_tensor,
)

__all__ = ["RetrievalConfig", "RetrievalData", "make_data"]


@dataclass(frozen=True)
class RetrievalConfig:
    """Everything that defines the task, the model and its training run."""

    keys: int = 8  # key vocabulary size
    values: int = 8  # value vocabulary size V; id V is the MASK value of the query record
    records: int = 4  # context records R per sequence (distinct keys, so R <= keys)
    train_size: int = 2048  # distinct training sequences
    test_size: int = 384  # distinct test sequences, none of them in the training set
    width: int = 32  # model width d
    heads: int = 4  # attention heads H (width must be a multiple)
    ffn: int = 64  # hidden width of the feed-forward sublayer
    steps: int = 320  # optimizer steps
    batch: int = 64  # sequences per step, sampled with replacement
    lr: float = 5e-3  # AdamW learning rate (constant)
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    clip: float = 1.0  # gradient-norm clipping threshold
    seed: int = 12  # seeds the data, the initial weights and the batch order

    def __post_init__(self) -> None:
        sizes = ("keys", "values", "records", "train_size", "test_size", "width", "heads", "ffn")
        for name in (*sizes, "steps", "batch"):
            require_int(name, getattr(self, name), minimum=1)
        require_int("seed", self.seed, minimum=0)
        require_real("lr", self.lr, positive=True)
        require_real("clip", self.clip, positive=True)
        if require_real("weight_decay", self.weight_decay) < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.records > self.keys:
            raise ValueError(
                f"records={self.records} needs {self.records} distinct keys but keys={self.keys}"
            )
        if self.width % self.heads:
            raise ValueError(f"width={self.width} is not a multiple of heads={self.heads}")


@dataclass
class RetrievalData:
    """A set of sequences; row ``n`` is one example."""

    keys: torch.Tensor  # (N, R + 1) key ids; the last column is the query key
    values: torch.Tensor  # (N, R + 1) value ids; the last column is MASK
    answers: torch.Tensor  # (N,) the value paired with the query key in this sequence
    evidence: torch.Tensor  # (N,) which context record holds the answer
    signatures: set[tuple[int, ...]] = field(default_factory=set, repr=False)  # for dedup

    def __post_init__(self) -> None:
        for name in ("keys", "values"):
            x = require_tensor(
                name, getattr(self, name), rank=2, dtype="integer", shape_hint="(N, T)"
            )
            require_nonempty(name, x, "N, T")
        require_same_shape("keys", self.keys, "values", self.values)
        for name in ("answers", "evidence"):
            x = require_tensor(
                name, getattr(self, name), rank=1, dtype="integer", shape_hint="(N,)"
            )
            if len(x) != len(self.keys):
                raise ValueError(
                    f"{name} has shape {tuple(x.shape)} but keys has N={len(self.keys)}"
                )

    def __len__(self) -> int:
        return len(self.answers)


def make_data(
    count: int,
    config: RetrievalConfig,
    generator: torch.Generator,
    *,
    records: int | None = None,
    evidence: int | None = None,
    exclude: set[tuple[int, ...]] | None = None,
) -> RetrievalData:
    """Draw ``count`` distinct sequences, none of whose signatures is in ``exclude``.

    Args:
        count: number of sequences ``N``.
        config: vocabulary sizes and the default number of records.
        generator: the only source of randomness, so a seed fixes the data.
        records: context records ``R``; defaults to ``config.records``.
        evidence: fix the record that holds the answer (``0 <= evidence < R``); random if None.
        exclude: signatures (key ids then value ids) that must not be drawn, e.g. the training set.

    Returns:
        :class:`RetrievalData` whose ``signatures`` are the drawn ones (``exclude`` not included).
    """
    count = require_int("count", count, minimum=1)
    require_instance("config", config, RetrievalConfig)
    require_instance("generator", generator, torch.Generator)
    if exclude is not None and not isinstance(exclude, set):
        raise TypeError(
            f"exclude must be a set of signatures or None, got {type(exclude).__name__}"
        )
    r = config.records if records is None else require_int("records", records, minimum=1)
    if r > config.keys:
        raise ValueError(f"records={r} needs {r} distinct keys but keys={config.keys}")
    if evidence is not None and not 0 <= require_int("evidence", evidence) < r:
        raise ValueError(f"evidence must lie in [0, records={r}), got {evidence}")
    taken = set() if exclude is None else exclude
    rows, seen = [], set()
    for _ in range(1000 * count):  # far more attempts than needed unless the space is tiny
        if len(rows) == count:
            break
        keys = torch.randperm(config.keys, generator=generator)[:r]  # (R,)
        vals = torch.randint(config.values, (r,), generator=generator)  # (R,)
        pick = int(torch.randint(r, (), generator=generator)) if evidence is None else evidence
        key_row = [*keys.tolist(), int(keys[pick])]
        val_row = [*vals.tolist(), config.values]  # MASK at the query
        sig = tuple(key_row + val_row)
        if sig in seen or sig in taken:
            continue
        seen.add(sig)
        rows.append((key_row, val_row, int(vals[pick]), pick))
    if len(rows) < count:
        raise ValueError(f"could only draw {len(rows)} distinct sequences of {count} requested")
    keys_t, vals_t, ans, ev = zip(*rows, strict=True)
    return RetrievalData(
        torch.tensor(keys_t), torch.tensor(vals_t), torch.tensor(ans), torch.tensor(ev), seen
    )
