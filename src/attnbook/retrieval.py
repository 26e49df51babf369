"""Associative retrieval: a synthetic task and the one-block causal transformer that solves it.

A sequence holds ``R`` context records ``(key, value)`` with distinct keys, then one query record
``(key, MASK)`` whose key repeats one of the context keys. The target is the value that this
sequence paired with that key. Values are drawn afresh for every sequence, so the query alone
says nothing about the answer: the model must read the context.

Extra shape names: ``N`` examples, ``R`` context records (so ``T = R + 1``), ``V`` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from attnbook._checks import require_int, require_tensor
from attnbook.attention import attention
from attnbook.masks import causal_mask

__all__ = [
    "RetrievalConfig",
    "RetrievalData",
    "TinyRetriever",
    "final_logits",
    "intervention_accuracy",
    "make_data",
    "no_context_accuracy",
    "score",
    "train",
]


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


@dataclass
class RetrievalData:
    """A set of sequences; row ``n`` is one example."""

    keys: torch.Tensor  # (N, R + 1) key ids; the last column is the query key
    values: torch.Tensor  # (N, R + 1) value ids; the last column is MASK
    answers: torch.Tensor  # (N,) the value paired with the query key in this sequence
    evidence: torch.Tensor  # (N,) which context record holds the answer
    signatures: set[tuple[int, ...]] = field(default_factory=set, repr=False)  # for dedup

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


class TinyRetriever(nn.Module):
    """Embeddings, one pre-norm causal block (attention + FFN), a final norm and a value head.

    Each position is the sum of a key embedding and a value embedding; there is no positional
    embedding, because the answer depends on which key matches, not on where it sits.
    """

    def __init__(self, config: RetrievalConfig) -> None:
        super().__init__()
        if config.width % config.heads:
            raise ValueError(f"width={config.width} is not a multiple of heads={config.heads}")
        self.heads = config.heads
        self.key_emb = nn.Embedding(config.keys, config.width)
        self.value_emb = nn.Embedding(config.values + 1, config.width)  # +1 for MASK
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.ffn = nn.Sequential(
            nn.Linear(config.width, config.ffn), nn.GELU(), nn.Linear(config.ffn, config.width)
        )
        self.norm_out = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.values)

    def forward(
        self, keys: torch.Tensor, values: torch.Tensor, *, head_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits for every position and the block's attention weights.

        Args:
            keys, values: integer ids ``(N, T)``.
            head_mask: optional ``(H,)`` multiplier of each head's output (0 ablates a head).

        Returns:
            ``logits (N, T, V)`` and ``weights (N, H, T, T)`` (causal: row ``i`` reads ``<= i``).
        """
        keys = require_tensor("keys", keys, rank=2, dtype="integer", shape_hint="(N, T)")
        values = require_tensor("values", values, rank=2, dtype="integer", shape_hint="(N, T)")
        if keys.shape != values.shape:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} differ")
        n, t = keys.shape
        x = self.key_emb(keys) + self.value_emb(values)  # (N, T, d)
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out, weights = attention(q, k, v, causal_mask(t), return_weights=True)  # (N, H, T, dk)
        if head_mask is not None:
            out = out * head_mask.view(1, -1, 1, 1)
        x = x + self.proj(out.transpose(1, 2).reshape(n, t, -1))  # (N, T, d)
        x = x + self.ffn(self.norm2(x))
        return self.head(self.norm_out(x)), weights  # (N, T, V), (N, H, T, T)


def final_logits(model: TinyRetriever, data: RetrievalData, **kwargs) -> torch.Tensor:
    """Logits ``(N, V)`` at the query position, the only one the task scores."""
    return model(data.keys, data.values, **kwargs)[0][:, -1]


def score(model: TinyRetriever, data: RetrievalData, **kwargs) -> tuple[float, float]:
    """``(mean cross-entropy, accuracy)`` at the query position, without gradients."""
    with torch.no_grad():
        logits = final_logits(model, data, **kwargs)
        loss = nn.functional.cross_entropy(logits, data.answers).item()
        return loss, (logits.argmax(-1) == data.answers).float().mean().item()


def no_context_accuracy(model: TinyRetriever, data: RetrievalData) -> float:
    """Accuracy when the model sees only the query record (chance is ``1 / V``)."""
    with torch.no_grad():
        logits = model(data.keys[:, -1:], data.values[:, -1:])[0][:, -1]  # (N, V)
        return (logits.argmax(-1) == data.answers).float().mean().item()


def intervention_accuracy(model: TinyRetriever, data: RetrievalData, shift: int = 1) -> float:
    """Rewrite the matching record's value to ``(answer + shift) % V``; how often does the
    prediction follow the new value?"""
    vocab = model.head.out_features
    new_answers = (data.answers + shift) % vocab  # (N,)
    values = data.values.clone()
    values[torch.arange(len(data)), data.evidence] = new_answers
    edited = RetrievalData(data.keys, values, new_answers, data.evidence)
    return score(model, edited)[1]


def train(config: RetrievalConfig, data: RetrievalData) -> tuple[TinyRetriever, list[float], float]:
    """Train a fresh :class:`TinyRetriever` with AdamW, scoring the final position only.

    The global RNG is used only inside a forked state seeded by ``config.seed``, so the run is
    reproducible and leaves the caller's random state untouched. Use one CPU thread for
    bit-identical runs.

    Returns:
        ``(model in eval mode, per-step training losses, initial loss on the first 128 rows)``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = TinyRetriever(config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    sampler = torch.Generator().manual_seed(config.seed + 1)
    head = RetrievalData(data.keys[:128], data.values[:128], data.answers[:128], data.evidence)
    initial, losses = score(model, head)[0], []
    for _ in range(config.steps):
        ids = torch.randint(len(data), (config.batch,), generator=sampler)  # (batch,)
        logits = model(data.keys[ids], data.values[ids])[0][:, -1]  # (batch, V)
        loss = nn.functional.cross_entropy(logits, data.answers[ids])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses, initial
