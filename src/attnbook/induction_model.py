"""A tiny attention-only transformer trained on :mod:`attnbook.induction`, several seeds at once.

The model is the one Elhage et al. (2021) analyse: token plus learned position embeddings, a
few attention-only layers writing into a residual stream, and an unembedding; no MLP, no
LayerNorm. Every parameter carries a leading seed axis ``S``, so ``S`` independent models
(each with its own initial weights and its own batches) train in one batched loop; their
losses are summed, and since no parameter is shared, each model's gradient is its own.

Extra shape names: ``S`` seeds, ``N`` sequences, ``V`` vocabulary (token ``V`` pads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._checks import (
    require_instance,
    require_int,
    require_nonempty,
    require_real,
    require_seed,
    require_tensor,
    require_values,
    too_large,
)
from attnbook.attention import attention
from attnbook.heads import merge_heads, split_heads
from attnbook.induction import induction_score, make_repeats, previous_token_score, repeated_queries
from attnbook.masks import causal_mask

__all__ = ["AttentionOnly", "InductionConfig", "evaluate", "train"]


@dataclass(frozen=True)
class InductionConfig:
    """The task, the model and its training run.

    Raises ``TypeError`` or ``ValueError`` naming the field for a size that is not an int
    ``>= 1``, a non-positive ``lr``, ``width`` not a multiple of ``heads``, lengths outside
    ``min_len <= max_len <= vocab``, or a ``seed`` whose derived seeds (up to
    ``seed + max(seeds - 1, 2000)``) exceed torch's ``2**64 - 1``."""

    vocab: int = 24  # tokens V (token V pads)
    min_len: int = 6  # shortest pattern L
    max_len: int = 12  # longest pattern; sequences have T = 2 * max_len positions
    width: int = 32  # residual stream width d
    layers: int = 2  # attention-only layers
    heads: int = 1  # heads per layer (width must be a multiple)
    seeds: int = 5  # independent models trained side by side
    steps: int = 400  # optimizer steps
    batch: int = 32  # sequences per step and seed
    lr: float = 1e-2  # Adam learning rate (constant)
    eval_every: int = 10  # steps between evaluations of the training history
    eval_size: int = 128  # held-out sequences evaluated during training
    seed: int = 0  # model s starts from seed + s; the batches come from seed + 1000

    def __post_init__(self) -> None:
        for name in ("vocab", "min_len", "max_len", "width", "layers", "heads", "seeds"):
            require_int(name, getattr(self, name), minimum=1)
        for name in ("steps", "batch", "eval_every", "eval_size"):
            require_int(name, getattr(self, name), minimum=1)
        # Models are seeded seed .. seed + seeds - 1, the batches seed + 1000, the held-out
        # data seed + 2000: all must be torch seeds.
        require_seed("seed", self.seed, offset=max(self.seeds - 1, 2000))
        require_real("lr", self.lr, positive=True)
        if self.width % self.heads:
            raise ValueError(f"width={self.width} is not a multiple of heads={self.heads}")
        if not self.min_len <= self.max_len <= self.vocab:
            raise ValueError(
                f"need min_len <= max_len <= vocab, got {self.min_len}, {self.max_len}, "
                f"{self.vocab}"
            )

    @property
    def t(self) -> int:
        """Sequence length ``T``."""
        return 2 * self.max_len

    def data(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` sequences from :func:`attnbook.induction.make_repeats`, fixed by ``seed`` (a
        torch seed, ``0 <= seed < 2**64``); raises as ``make_repeats`` does for ``n``."""
        generator = torch.Generator().manual_seed(require_seed("seed", seed))
        return make_repeats(
            n, vocab=self.vocab, min_len=self.min_len, max_len=self.max_len, generator=generator
        )


class AttentionOnly(nn.Module):
    """``S`` attention-only transformers side by side (see the module docstring)."""

    def __init__(self, config: InductionConfig) -> None:
        super().__init__()
        self.config = require_instance("config", config, InductionConfig)
        with too_large(f"config (vocab={config.vocab}, width={config.width})"):
            self._build(config)

    def _build(self, config: InductionConfig) -> None:
        d, v, t, layers = config.width, config.vocab, config.t, config.layers
        generators = [torch.Generator().manual_seed(config.seed + s) for s in range(config.seeds)]

        def stack(*shape: int) -> nn.Parameter:  # one independent draw per seed
            draws = [torch.randn(*shape, generator=g) / math.sqrt(d) for g in generators]
            return nn.Parameter(torch.stack(draws))  # (S, *shape)

        self.embed = stack(v + 1, d)  # token embeddings, the pad included
        self.position = stack(t, d)  # learned absolute positions
        self.qkv = nn.ParameterList([stack(d, 3 * d) for _ in range(layers)])
        self.out = nn.ParameterList([stack(d, d) for _ in range(layers)])
        self.unembed = stack(d, v)

    def forward(
        self, tokens: torch.Tensor, *, head_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next-token logits and every head's attention weights.

        Args:
            tokens: integer ids ``(S, N, T)`` in ``[0, V]`` (one batch per seed), or ``(N, T)``
                to show every seed the same batch.
            head_mask: optional floating ``(L, H)`` multiplier of each head's output; 0
                ablates a head (its output is replaced by zeros).

        Returns:
            ``logits (S, N, T, V)`` and ``weights (S, L, N, H, T, T)`` (causal rows).

        Raises:
            TypeError: ``tokens`` not an integer tensor, ``head_mask`` not a floating one.
            ValueError: ``tokens`` of another shape, with ``T = 0``, outside ``[0, V]`` or
                without values (``meta``); ``head_mask`` not ``(L, H)`` or not on the model's
                device. A ``head_mask`` of another floating dtype is cast to the model's.
        """
        c = self.config
        tokens = require_tensor("tokens", tokens, dtype="integer", shape_hint="(S, N, T)")
        require_values("tokens", tokens)
        if tokens.dim() == 2:
            tokens = tokens.expand(c.seeds, *tokens.shape)
        if tokens.dim() != 3 or tokens.shape[0] != c.seeds or not 1 <= tokens.shape[-1] <= c.t:
            raise ValueError(
                f"tokens must have shape (S={c.seeds}, N, 1 <= T <= {c.t}) or (N, T), "
                f"got {tuple(tokens.shape)}"
            )
        if tokens.numel() and (tokens.min() < 0 or tokens.max() > c.vocab):
            raise ValueError(f"tokens must lie in [0, {c.vocab}]")
        if head_mask is not None:
            head_mask = require_tensor("head_mask", head_mask, rank=2, dtype="floating")
            if head_mask.shape != (c.layers, c.heads):
                raise ValueError(
                    f"head_mask must have shape (L, H) = ({c.layers}, {c.heads}), "
                    f"got {tuple(head_mask.shape)}"
                )
            if head_mask.device != self.embed.device:
                raise ValueError(
                    f"head_mask is on {head_mask.device} but the model is on {self.embed.device}"
                )
            head_mask = head_mask.to(self.embed.dtype)
        t = tokens.shape[-1]
        seed = torch.arange(c.seeds)[:, None, None]  # (S, 1, 1)
        x = self.embed[seed, tokens] + self.position[:, None, :t]  # (S, N, T, d)
        mask = causal_mask(t)
        all_weights = []
        for layer in range(c.layers):
            qkv = (x @ self.qkv[layer][:, None]).chunk(3, dim=-1)  # 3 x (S, N, T, d)
            q, k, v = (split_heads(z, c.heads) for z in qkv)  # (S, N, H, T, d/H) each
            heads, weights = attention(q, k, v, mask, return_weights=True)  # (S, N, H, T, d/H)
            if head_mask is not None:
                heads = heads * head_mask[layer][:, None, None]
            x = x + merge_heads(heads) @ self.out[layer][:, None]  # (S, N, T, d)
            all_weights.append(weights)
        logits = x @ self.unembed[:, None]  # (S, N, T, V)
        return logits, torch.stack(all_weights, dim=1)  # (S, N, T, V), (S, L, N, H, T, T)


def _next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    # (S, N, T - 1) cross-entropy of predicting token t + 1 at position t (pads give 0 targets)
    targets = tokens[..., 1:].clamp(max=vocab - 1).expand(*logits.shape[:-2], -1)
    return nn.functional.cross_entropy(
        logits[..., :-1, :].flatten(0, -2), targets.flatten(), reduction="none"
    ).view(targets.shape)


def evaluate(
    model: AttentionOnly,
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    *,
    head_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Loss and accuracy on the repeated half, and every head's two scores, per seed.

    Args:
        model: the trained models.
        tokens, lengths: held-out sequences ``(N, T)`` and their pattern lengths ``(N,)``,
            as from :meth:`InductionConfig.data`; every seed sees the same ones.
        head_mask: as in :meth:`AttentionOnly.forward`.

    Returns:
        A dict of tensors: ``loss`` and ``accuracy`` ``(S,)`` over the queries
        ``L <= t <= 2L - 2`` (their next token is a copy), ``previous`` and ``induction``
        ``(S, L, H)`` (the scores of :mod:`attnbook.induction`).

    Raises:
        TypeError: ``model`` not an :class:`AttentionOnly`; ``tokens`` or ``lengths`` not
            integer tensors.
        ValueError: ``tokens`` not ``(N, T)`` with ``N >= 1`` and ``T >= 2``, ``lengths``
            not ``(N,)`` with entries in ``[1, T/2]``, and as :meth:`AttentionOnly.forward`.
    """
    require_instance("model", model, AttentionOnly)
    tokens = require_tensor("tokens", tokens, rank=2, dtype="integer", shape_hint="(N, T)")
    require_nonempty("tokens", tokens, "N, T")
    if tokens.shape[1] < 2:
        raise ValueError(f"tokens must have T >= 2 positions, got shape {tuple(tokens.shape)}")
    lengths = require_tensor("lengths", lengths, rank=1, dtype="integer", shape_hint="(N,)")
    if len(lengths) != len(tokens):
        raise ValueError(
            f"lengths has {len(lengths)} entries but tokens hold N={len(tokens)} sequences"
        )
    require_values("tokens", tokens)
    tokens = tokens.long()  # cross_entropy takes int64 targets
    keep = repeated_queries(lengths, tokens.shape[-1])[:, :-1].float()  # (N, T - 1)
    with torch.no_grad():
        logits, weights = model(tokens, head_mask=head_mask)
        loss = _next_token_loss(logits, tokens, model.config.vocab)  # (S, N, T - 1)
        right = (logits[..., :-1, :].argmax(-1) == tokens[..., 1:]).float()  # (S, N, T - 1)
        return {
            "loss": (loss * keep).sum((-2, -1)) / keep.sum(),
            "accuracy": (right * keep).sum((-2, -1)) / keep.sum(),
            "previous": previous_token_score(weights, lengths),
            "induction": induction_score(weights, lengths),
        }


def train(config: InductionConfig) -> tuple[AttentionOnly, dict[str, torch.Tensor]]:
    """Train ``config.seeds`` models with Adam on next-token prediction over real tokens.

    Every ``config.eval_every`` steps (and before the first) the models are evaluated on
    ``config.eval_size`` held-out sequences (data seed ``config.seed + 2000``). Use one CPU
    thread for bit-identical runs.

    Returns:
        The models in eval mode and their history: ``step`` ``(E,)`` and, stacked over the
        ``E`` evaluations, each entry of :func:`evaluate` (``loss`` ``(E, S)``, ...).
    """
    require_instance("config", config, InductionConfig)
    model = AttentionOnly(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    batches = torch.Generator().manual_seed(config.seed + 1000)
    held_out = config.data(config.eval_size, config.seed + 2000)
    history: dict[str, list] = {"step": []}
    for step in range(config.steps + 1):
        if step % config.eval_every == 0 or step == config.steps:
            history["step"].append(step)
            for name, value in evaluate(model, *held_out).items():
                history.setdefault(name, []).append(value)
        if step == config.steps:
            break
        tokens, _ = make_repeats(
            config.seeds * config.batch,
            vocab=config.vocab,
            min_len=config.min_len,
            max_len=config.max_len,
            generator=batches,
        )
        tokens = tokens.view(config.seeds, config.batch, config.t)  # (S, N, T)
        loss = _next_token_loss(model(tokens)[0], tokens, config.vocab)  # (S, N, T - 1)
        real = (tokens[..., 1:] != config.vocab).float()  # predict real tokens only
        per_seed = (loss * real).sum((-2, -1)) / real.sum((-2, -1))  # (S,)
        optimizer.zero_grad(set_to_none=True)
        per_seed.sum().backward()
        optimizer.step()
    stacked = {name: torch.stack(values) for name, values in history.items() if name != "step"}
    return model.eval(), {"step": torch.tensor(history["step"]), **stacked}
