"""Associative retrieval: a synthetic lookup task whose table changes with every sequence.

A sequence holds ``R`` context records ``(key, value)`` with distinct keys, then one query record
``(key, MASK)`` whose key repeats one of the context keys. The target is the value that this
sequence paired with that key. Values are drawn afresh for every sequence, so the query alone
says nothing about the answer: the model must read the context. The model that solves it, and
its training and evaluation, live in :mod:`attnbook.retrieval_model`.

Extra shape names: ``N`` examples, ``R`` context records (so ``T = R + 1``), ``V`` values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_real,
    require_same_shape,
    require_tensor,
    require_values,
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
    seed: int = 12  # seeds the initial weights and the batch order (data: make_data's generator)

    def __post_init__(self) -> None:
        sizes = ("keys", "values", "records", "train_size", "test_size", "width", "heads", "ffn")
        for name in (*sizes, "steps", "batch"):
            require_int(name, getattr(self, name), minimum=1)
        # train() seeds torch with seed and seed + 1, and torch seeds must fit in an int64.
        require_int("seed", self.seed, minimum=0, maximum=2**63 - 2)
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
    """A set of sequences; row ``n`` is one example.

    Checked on construction: ids are non-negative, each row has at least one context record
    (``T >= 2``), ``evidence`` points at a context record (``0 <= evidence < T - 1``) whose key
    is the query key, and ``answers`` is the value stored there. Upper bounds on the ids depend
    on the vocabulary, so :class:`~attnbook.retrieval_model.TinyRetriever` checks those.
    """

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
        for name in ("keys", "values", "answers", "evidence"):
            x = require_values(name, getattr(self, name))
            if bool((x < 0).any()):
                raise ValueError(f"{name} must be >= 0, got a minimum of {x.min().item()}")
        n, t = self.keys.shape
        if t < 2:
            raise ValueError(
                f"keys must have T >= 2 (context records, then the query), got shape {(n, t)}"
            )
        outside = self.evidence >= t - 1
        if bool(outside.any()):
            row = int(outside.nonzero()[0])
            raise ValueError(
                f"evidence must lie in [0, R={t - 1}) (a context record, not the query), "
                f"got evidence[{row}] = {self.evidence[row].item()}"
            )
        rows = torch.arange(n, device=self.keys.device)
        mismatch = self.keys[rows, self.evidence] != self.keys[:, -1]
        if bool(mismatch.any()):
            row = int(mismatch.nonzero()[0])
            raise ValueError(
                f"evidence[{row}] = {self.evidence[row].item()} points at key "
                f"{self.keys[row, self.evidence[row]].item()}, not at the query key "
                f"{self.keys[row, -1].item()}"
            )
        wrong = self.values[rows, self.evidence] != self.answers
        if bool(wrong.any()):
            row = int(wrong.nonzero()[0])
            raise ValueError(
                f"answers[{row}] = {self.answers[row].item()} but the evidence record holds "
                f"value {self.values[row, self.evidence[row]].item()}"
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
    # Fail now, not after a million draws, when fewer distinct sequences exist than requested.
    space = math.perm(config.keys, r) * config.values**r * (r if evidence is None else 1)
    available = space - sum(_drawable(sig, config, r, evidence) for sig in taken)
    if count > available:
        raise ValueError(
            f"count={count} exceeds the {available} distinct sequences that keys={config.keys}, "
            f"values={config.values}, records={r}"
            + ("" if evidence is None else f", evidence={evidence}")
            + ("" if not taken else " and exclude")
            + " allow"
        )
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


def _drawable(sig: object, config: RetrievalConfig, r: int, evidence: int | None) -> bool:
    """Whether ``make_data`` could draw the signature ``sig`` (so excluding it costs a draw)."""
    if not isinstance(sig, tuple) or len(sig) != 2 * (r + 1):
        return False
    keys, vals = sig[: r + 1], sig[r + 1 :]
    if len(set(keys[:r])) != r or not all(0 <= k < config.keys for k in keys[:r]):
        return False
    if vals[r] != config.values or not all(0 <= v < config.values for v in vals[:r]):
        return False
    picks = [i for i in range(r) if keys[i] == keys[r]]
    return bool(picks) and (evidence is None or picks == [evidence])
