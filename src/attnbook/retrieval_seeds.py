"""Train the retrieval lab's model at several seeds at once, as one batched model.

Each seed's run is the run :func:`attnbook.retrieval_model.train` does for that seed: the same
initial weights (drawn from ``torch.manual_seed(seed)``), the same batch order (a generator
seeded ``seed + 1``), the same loss, gradient clipping per seed and AdamW. Only the arithmetic
is arranged differently: the ``S`` models' parameters are stacked along a leading seed
dimension, so one step does ``S`` steps with a few large operations instead of ``S`` times
the Python overhead of small ones. AdamW and weight decay act coordinate by coordinate and the
clipping factor is computed per seed, so the seeds do not interact; results agree with
separate runs up to floating-point rounding (summation order differs).

Extra shape names: ``S`` seeds, ``N`` examples, ``V`` values.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from attnbook._checks import require_instance, require_seed
from attnbook.retrieval import RetrievalConfig, RetrievalData
from attnbook.retrieval_model import TinyRetriever, _require_answers, _require_ids

__all__ = ["stacked_accuracy", "train_seeds"]


def _stacked_forward(p: dict[str, torch.Tensor], heads: int, keys, values) -> torch.Tensor:
    """Logits ``(S, N, V)`` at the query (last) position of ``S`` stacked models.

    ``keys`` and ``values`` are ``(S, N, T)``: each model reads its own batch. With one block,
    the query's logits depend on the other positions only through their keys and values, so
    queries, the attention output, the FFN and the readout are computed for the last
    position alone: the same numbers as the full forward pass, for a fraction of its work.
    """
    s, n, t = keys.shape
    d = p["key_emb.weight"].shape[-1]

    def linear(x, name, rows=slice(None)):  # x (S, M, in); weight (S, out, in), bias (S, out)
        w, b = p[f"{name}.weight"][:, rows], p[f"{name}.bias"][:, rows]
        return torch.baddbmm(b[:, None], x, w.transpose(-1, -2))  # (S, M, out)

    def norm(x, name):
        w, b = p[f"{name}.weight"][:, None], p[f"{name}.bias"][:, None]
        return F.layer_norm(x, x.shape[-1:]) * w + b

    vocab_k, vocab_v = p["key_emb.weight"].shape[1], p["value_emb.weight"].shape[1]
    offset = torch.arange(s)[:, None, None]  # row s * vocab + id of the flattened tables
    x = F.embedding((keys + offset * vocab_k).view(s, n * t), p["key_emb.weight"].flatten(0, 1))
    x = x + F.embedding(
        (values + offset * vocab_v).view(s, n * t), p["value_emb.weight"].flatten(0, 1)
    )  # (S, N*T, d)
    h = norm(x, "norm1")
    k, v = linear(h, "qkv", slice(d, 3 * d)).view(s, n, t, 2, heads, -1).unbind(3)  # (S,N,T,H,dk)
    last = x.view(s, n, t, d)[:, :, -1]  # (S, N, d): the query position
    q = linear(h.view(s, n, t, d)[:, :, -1], "qkv", slice(0, d)).view(s, n, 1, heads, -1)
    scores = (q * k).sum(-1) * q.shape[-1] ** -0.5  # (S, N, T, H); the query may read all T
    mixed = (scores.softmax(dim=2).unsqueeze(-1) * v).sum(2)  # (S, N, H, dk)
    y = last + linear(mixed.reshape(s, n, d), "proj")  # (S, N, d)
    y = y + linear(F.gelu(linear(norm(y, "norm2"), "ffn.0")), "ffn.2")
    return linear(norm(y, "norm_out"), "head")  # (S, N, V)


def _stack(models: list[TinyRetriever]) -> dict[str, torch.Tensor]:
    names = [name for name, _ in models[0].named_parameters()]
    return {name: torch.stack([dict(m.named_parameters())[name] for m in models]) for name in names}


def stacked_accuracy(models: list[TinyRetriever], data: RetrievalData) -> torch.Tensor:
    """Accuracy ``(S,)`` at the query position of each model on the same data, in one pass.

    Equal, up to floating-point rounding in near-ties, to
    ``[attnbook.retrieval_model.score(m, data)[1] for m in models]``.

    Raises:
        TypeError: ``models`` is not a non-empty list of :class:`TinyRetriever` with equal
            configurations, or ``data`` is not :class:`RetrievalData`.
        ValueError: ``data`` holds keys, values or answers outside the models' vocabularies.
    """
    if not isinstance(models, list | tuple) or not models:
        raise TypeError(f"models must be a non-empty list of TinyRetriever, got {models!r}")
    for i, m in enumerate(models):
        require_instance(f"models[{i}]", m, TinyRetriever)
    require_instance("data", data, RetrievalData)
    shapes = {tuple((n, tuple(p.shape)) for n, p in m.named_parameters()) for m in models}
    if len(shapes) != 1 or len({m.heads for m in models}) != 1:
        raise TypeError("models must share one configuration (the same parameter shapes)")
    # The stacked embedding tables sit end to end, so an id beyond one model's table would
    # silently read the next model's rows: check the ranges first.
    first = models[0]
    _require_ids("data.keys", data.keys, first.key_emb.num_embeddings)
    _require_ids("data.values", data.values, first.value_emb.num_embeddings)
    _require_answers(data, first.head.out_features)
    with torch.inference_mode():
        params, s = _stack(list(models)), len(models)
        keys, values = (x.expand(s, -1, -1) for x in (data.keys, data.values))
        logits = _stacked_forward(params, models[0].heads, keys, values)  # (S, N, V)
        return (logits.argmax(-1) == data.answers).float().mean(1)


def train_seeds(
    config: RetrievalConfig, data: RetrievalData, seeds: list[int]
) -> tuple[list[TinyRetriever], torch.Tensor, torch.Tensor]:
    """Train one :class:`TinyRetriever` per seed, all in one batched loop.

    Args:
        config: the task, model and training recipe; ``config.seed`` is ignored in favour of
            ``seeds``.
        data: the training set, shared by all seeds (each seed draws its own batches).
        seeds: distinct non-negative ints, at least one.

    Returns:
        ``(models, losses, initial)``: the trained models in eval mode, in the order of
        ``seeds``; per-step training losses ``(S, steps)``; the initial loss of each model on
        the first 128 training rows ``(S,)``.

    Raises:
        TypeError: ``config`` or ``data`` of the wrong type, ``seeds`` not a list or tuple,
            or a seed that is not an int.
        ValueError: no seeds, repeated seeds, a seed outside ``[0, 2**64 - 2]`` (``seed + 1``
            seeds the batches), or ``data`` with ids outside ``config``'s vocabularies.
    """
    require_instance("config", config, RetrievalConfig)
    require_instance("data", data, RetrievalData)
    if not isinstance(seeds, list | tuple):
        raise TypeError(f"seeds must be a non-empty list of ints, got {type(seeds).__name__}")
    if not seeds:
        raise ValueError("seeds must be a non-empty list of ints, got an empty one")
    seeds = [require_seed("seeds", s, offset=1) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds}")
    _require_ids("data.keys", data.keys, config.keys)  # as retrieval_model.train checks
    _require_ids("data.values", data.values, config.values + 1)
    _require_answers(data, config.values)
    models = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            models.append(TinyRetriever(config))
    params = {name: p.detach().clone().requires_grad_() for name, p in _stack(models).items()}
    optimizer = torch.optim.AdamW(
        params.values(), lr=config.lr, weight_decay=config.weight_decay, foreach=True
    )
    samplers = [torch.Generator().manual_seed(seed + 1) for seed in seeds]
    s = len(seeds)
    with torch.no_grad():
        head = _stacked_forward(
            params, config.heads, *(x[:128].expand(s, -1, -1) for x in (data.keys, data.values))
        )
        answers = data.answers[:128].expand(s, -1)
        initial = F.cross_entropy(head.transpose(1, 2), answers, reduction="none").mean(1)
    losses = torch.empty(s, config.steps)
    for step in range(config.steps):
        ids = torch.stack(
            [torch.randint(len(data), (config.batch,), generator=g) for g in samplers]
        )  # (S, batch)
        logits = _stacked_forward(params, config.heads, data.keys[ids], data.values[ids])
        per_seed = F.cross_entropy(
            logits.transpose(1, 2), data.answers[ids], reduction="none"
        ).mean(1)  # (S,)
        optimizer.zero_grad(set_to_none=True)
        per_seed.sum().backward()  # seeds share no parameter, so each gets its own gradient
        with torch.no_grad():
            grads = [p.grad for p in params.values()]
            norms = torch.cat([g.flatten(1) for g in grads], dim=1).norm(dim=1)  # (S,)
            factor = (config.clip / (norms + 1e-6)).clamp(max=1.0)  # clip_grad_norm_'s rule
            for g in grads:
                g.mul_(factor.view(-1, *[1] * (g.dim() - 1)))
        optimizer.step()
        losses[:, step] = per_seed.detach()
    for i, model in enumerate(models):
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(params[name][i])
        model.eval()
    return models, losses, initial
