"""The one-block causal transformer that solves :mod:`attnbook.retrieval`, and how to test it.

Training scores only the query position; evaluation measures accuracy, the accuracy left when
the context is removed, and whether the prediction follows an edit of the evidence.

Extra shape names: ``N`` examples, ``V`` values.
"""

from __future__ import annotations

import torch
from torch import nn

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_same_shape,
    require_tensor,
)
from attnbook.attention import attention
from attnbook.heads import merge_heads, split_heads
from attnbook.masks import causal_mask
from attnbook.retrieval import RetrievalConfig, RetrievalData

__all__ = [
    "TinyRetriever",
    "final_logits",
    "intervention_accuracy",
    "key_swap_accuracy",
    "no_context_accuracy",
    "score",
    "specificity",
    "train",
]


def _require_ids(name: str, ids: object, vocab: int) -> None:
    """Integer ids ``(N, T)``, non-empty, each in ``[0, vocab)`` (what ``nn.Embedding`` takes)."""
    ids = require_nonempty(
        name, require_tensor(name, ids, rank=2, dtype="integer", shape_hint="(N, T)"), "N, T"
    )
    low, high = ids.min().item(), ids.max().item()
    if low < 0 or high >= vocab:
        raise ValueError(f"{name} must lie in [0, {vocab}), got ids from {low} to {high}")


class TinyRetriever(nn.Module):
    """Embeddings, one pre-norm causal block (attention + FFN), a final norm and a value head.

    Each position is the sum of a key embedding and a value embedding; there is no positional
    embedding, because the answer depends on which key matches, not on where it sits.
    """

    def __init__(self, config: RetrievalConfig) -> None:
        super().__init__()
        require_instance("config", config, RetrievalConfig)  # which checks width % heads == 0
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
            keys, values: integer ids ``(N, T)``; keys lie in ``[0, config.keys)`` and values in
                ``[0, V]`` (``V`` is MASK). ``T`` may differ from ``config.records + 1``.
            head_mask: optional floating ``(H,)`` multiplier of each head's output (0 ablates a
                head).

        Returns:
            ``logits (N, T, V)`` and ``weights (N, H, T, T)`` (causal: row ``i`` reads ``<= i``).
        """
        _require_ids("keys", keys, self.key_emb.num_embeddings)
        _require_ids("values", values, self.value_emb.num_embeddings)
        require_same_shape("keys", keys, "values", values)
        if head_mask is not None:
            head_mask = require_tensor("head_mask", head_mask, rank=1, dtype="floating")
            if len(head_mask) != self.heads:
                raise ValueError(
                    f"head_mask has shape {tuple(head_mask.shape)}; expected (H,) = ({self.heads},)"
                )
        t = keys.shape[1]
        x = self.key_emb(keys) + self.value_emb(values)  # (N, T, d)
        qkv = self.qkv(self.norm1(x)).chunk(3, dim=-1)  # 3 x (N, T, d)
        q, k, v = (split_heads(z, self.heads) for z in qkv)  # (N, H, T, dk) each
        out, weights = attention(q, k, v, causal_mask(t), return_weights=True)  # (N, H, T, dk)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).view(1, -1, 1, 1)
        x = x + self.proj(merge_heads(out))  # (N, T, d)
        x = x + self.ffn(self.norm2(x))
        return self.head(self.norm_out(x)), weights  # (N, T, V), (N, H, T, T)


def _require_model_and_data(model: object, data: object) -> None:
    require_instance("model", model, TinyRetriever)
    require_instance("data", data, RetrievalData)
    _require_answers(data, model.head.out_features)


def _require_answers(data: RetrievalData, vocab: int) -> None:
    """``data.answers`` must be value ids the model can predict, ``[0, V)`` (not MASK)."""
    high = data.answers.max().item()
    if high >= vocab:
        raise ValueError(f"data.answers must lie in [0, V={vocab}), got an answer of {high}")


def final_logits(model: TinyRetriever, data: RetrievalData, **kwargs) -> torch.Tensor:
    """Logits ``(N, V)`` at the query position, the only one the task scores."""
    _require_model_and_data(model, data)
    return model(data.keys, data.values, **kwargs)[0][:, -1]


def score(model: TinyRetriever, data: RetrievalData, **kwargs) -> tuple[float, float]:
    """``(mean cross-entropy, accuracy)`` at the query position, without gradients."""
    _require_model_and_data(model, data)
    with torch.no_grad():
        logits = final_logits(model, data, **kwargs)
        loss = nn.functional.cross_entropy(logits, data.answers).item()
        return loss, (logits.argmax(-1) == data.answers).float().mean().item()


def no_context_accuracy(model: TinyRetriever, data: RetrievalData) -> float:
    """Accuracy when the model sees only the query record (chance is ``1 / V``)."""
    _require_model_and_data(model, data)
    with torch.no_grad():
        logits = model(data.keys[:, -1:], data.values[:, -1:])[0][:, -1]  # (N, V)
        return (logits.argmax(-1) == data.answers).float().mean().item()


def intervention_accuracy(model: TinyRetriever, data: RetrievalData, shift: int = 1) -> float:
    """Rewrite the matching record's value to ``(answer + shift) % V``; how often does the
    prediction follow the new value? ``shift`` must not be a multiple of ``V``."""
    _require_model_and_data(model, data)
    vocab = model.head.out_features
    shift = require_int("shift", shift)
    if shift % vocab == 0:
        raise ValueError(f"shift={shift} is a multiple of V={vocab}, so the edit changes nothing")
    shift %= vocab  # the same edit; keeps the arithmetic within int64
    new_answers = (data.answers + shift) % vocab  # (N,)
    values = data.values.clone()
    values[torch.arange(len(data)), data.evidence] = new_answers
    edited = RetrievalData(data.keys, values, new_answers, data.evidence)
    return score(model, edited)[1]


def _other_record(data: RetrievalData) -> torch.Tensor:
    """For each row, the first context record after the evidence (cyclically) whose value
    differs from the answer (``-1`` where every record holds the answer's value)."""
    n, r = data.keys.shape[0], data.keys.shape[1] - 1
    steps = torch.arange(1, r)  # (R - 1,) offsets from the evidence
    candidates = (data.evidence[:, None] + steps) % r  # (N, R - 1)
    values = data.values.gather(1, candidates)  # (N, R - 1)
    ok = values != data.answers[:, None]
    first = ok.float().argmax(1)  # (N,)
    picked = candidates[torch.arange(n), first]
    return torch.where(ok.any(1), picked, torch.full_like(picked, -1))


def key_swap_accuracy(model: TinyRetriever, data: RetrievalData) -> float:
    """Point the query at another record: replace the query key by the key of a context record
    that holds a different value; how often does the prediction follow to that value?

    A model that reads the record the query key names scores high; one that ignores the key
    (a shortcut on positions or value counts, or an untrained model) scores near chance.
    Rows whose records all hold the answer's value are skipped.

    Raises:
        ValueError: besides the model and data checks, no row has a record with another value
            (nothing to test).
    """
    _require_model_and_data(model, data)
    if data.keys.shape[1] < 3:
        raise ValueError(f"data needs at least 2 context records per row, got {data.keys.shape}")
    other = _other_record(data)  # (N,)
    rows = (other >= 0).nonzero().flatten()
    if len(rows) == 0:
        raise ValueError(
            "data has no row with a context record whose value differs from the answer: "
            "there is nothing to swap to"
        )
    keys, j = data.keys[rows].clone(), other[rows]
    keys[:, -1] = keys[torch.arange(len(rows)), j]  # the query now names record j
    answers = data.values[rows, j]
    swapped = RetrievalData(keys, data.values[rows], answers, j)
    return score(model, swapped)[1]


def specificity(model: TinyRetriever, data: RetrievalData, shift: int = 1) -> float:
    """Rewrite the value of one record that does *not* match the query (to ``(v + shift) %
    V``, skipping the answer's value); how often does the prediction stay what it was?

    A model that reads only the matching record keeps its prediction (1.0); one that mixes the
    context's values moves. The new value is the first of ``v + shift``, ``v + shift + 1``,
    ... (mod ``V``) that is neither ``v`` nor the answer. ``shift`` must not be a multiple of
    ``V``, and ``V >= 3``.
    """
    _require_model_and_data(model, data)
    vocab = model.head.out_features
    shift = require_int("shift", shift)
    if shift % vocab == 0:
        raise ValueError(f"shift={shift} is a multiple of V={vocab}, so the edit changes nothing")
    shift %= vocab  # the same edit; keeps the arithmetic within int64
    if data.keys.shape[1] < 3:
        raise ValueError(f"data needs at least 2 context records per row, got {data.keys.shape}")
    if vocab < 3:
        raise ValueError(
            f"model predicts V={vocab} values; specificity needs V >= 3 (old, answer, a third)"
        )
    n, r = data.keys.shape[0], data.keys.shape[1] - 1
    j = (data.evidence + 1) % r  # (N,) a record that does not match
    rows = torch.arange(n)
    old = data.values[rows, j]
    new = torch.full_like(old, -1)
    for k in range(shift, shift + 3):  # three tries: at most two values are ruled out
        trial = (old + k) % vocab
        new = torch.where((new < 0) & (trial != old) & (trial != data.answers), trial, new)
    values = data.values.clone()
    values[rows, j] = new
    with torch.no_grad():
        before = final_logits(model, data).argmax(-1)
        after = model(data.keys, values)[0][:, -1].argmax(-1)
    return (before == after).float().mean().item()


def train(config: RetrievalConfig, data: RetrievalData) -> tuple[TinyRetriever, list[float], float]:
    """Train a fresh :class:`TinyRetriever` with AdamW, scoring the final position only.

    The global RNG is used only inside a forked state seeded by ``config.seed``, so the run is
    reproducible and leaves the caller's random state untouched. Use one CPU thread for
    bit-identical runs.

    Returns:
        ``(model in eval mode, per-step training losses, initial loss on the first 128 rows)``.
    """
    require_instance("config", config, RetrievalConfig)
    require_instance("data", data, RetrievalData)
    _require_ids("data.keys", data.keys, config.keys)  # checked once here, not at every step
    _require_ids("data.values", data.values, config.values + 1)
    _require_answers(data, config.values)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = TinyRetriever(config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    sampler = torch.Generator().manual_seed(config.seed + 1)
    head = RetrievalData(
        data.keys[:128], data.values[:128], data.answers[:128], data.evidence[:128]
    )
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
