"""Train :class:`attnbook.gpt.TinyGPT` on a stream of token ids, and score it per position.

Every window of ``T`` inputs gives ``T`` next-token predictions in one causal forward pass,
and the loss averages all of them: the decoder trains on every position at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbook._checks import (
    require_instance,
    require_int,
    require_real,
    require_seed,
    require_tensor,
    require_values,
)
from attnbook.corpus import random_windows
from attnbook.gpt import GPTConfig, TinyGPT

__all__ = ["TrainConfig", "position_losses", "train_lm"]


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation recipe; the defaults are chapter 13's run. The architecture is a
    :class:`attnbook.gpt.GPTConfig`.

    Raises ``TypeError`` or ``ValueError`` naming the field for ``steps`` or ``batch`` < 1,
    ``warmup`` < 0, a non-positive or non-finite ``lr`` or ``clip``, a negative
    ``weight_decay``, or a ``seed`` outside ``[0, 2**64 - 2]`` (``seed + 1`` seeds the
    windows)."""

    steps: int = 300  # optimizer steps
    batch: int = 16  # windows per step, each of config.context inputs
    lr: float = 1e-2  # AdamW's peak learning rate
    warmup: int = 20  # steps of linear warmup, then cosine decay to lr / 10
    weight_decay: float = 0.0  # AdamW's decoupled weight decay, on matrices only
    clip: float = 1.0  # gradient-norm clipping threshold
    seed: int = 0  # seeds the initial weights and (seed + 1) the window offsets

    def __post_init__(self) -> None:
        for name in ("steps", "batch"):
            require_int(name, getattr(self, name), minimum=1)
        require_int("warmup", self.warmup, minimum=0)
        require_seed("seed", self.seed, offset=1)  # train_lm also seeds with seed + 1
        require_real("lr", self.lr, positive=True)
        require_real("clip", self.clip, positive=True)
        if require_real("weight_decay", self.weight_decay) < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based; past ``steps`` it stays at lr/10)."""
        step = require_int("step", step, minimum=0)
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_lm(
    config: GPTConfig,
    recipe: TrainConfig,
    ids: torch.Tensor,
    *,
    callback: Callable[[int, TinyGPT], None] | None = None,
) -> tuple[TinyGPT, list[float]]:
    """Train a fresh model on random windows of ``ids`` with AdamW.

    The global RNG is touched only inside a forked state seeded by ``recipe.seed``, so runs
    are reproducible (with one CPU thread, bit for bit) and leave the caller's state alone.

    Args:
        config: the architecture; windows have ``config.context`` inputs.
        recipe: steps, batch, learning-rate schedule, clipping and seed.
        ids: the training stream ``(N,)`` of ids in ``[0, config.vocab)``.
        callback: called as ``callback(step, model)`` before the first step (``step = 0``)
            and after every step (``step`` = steps done), with the model in eval mode, no
            gradients and the global RNG saved and restored around it: a held-out
            evaluation there leaves the run bit for bit as it is without one. It must not
            change the model's parameters.

    Returns:
        ``(model in eval mode, per-step training losses in nats per token)``.

    Raises:
        TypeError: ``config`` or ``recipe`` of the wrong type, ``ids`` not a 1-D integer
            tensor, ``callback`` not callable.
        ValueError: ``ids`` with ``context`` or fewer ids, ids outside ``[0, config.vocab)``,
            or no values (``meta``); checked before any training step.
    """
    require_instance("config", config, GPTConfig)
    require_instance("recipe", recipe, TrainConfig)
    ids = require_tensor("ids", ids, rank=1, dtype="integer", shape_hint="(N,)")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")
    require_values("ids", ids)
    if len(ids) <= config.context:
        raise ValueError(f"ids must hold more than context={config.context} ids, got {len(ids)}")
    if ids.min() < 0 or ids.max() >= config.vocab:
        raise ValueError(
            f"ids must lie in [0, vocab={config.vocab}), got {ids.min().item()} to "
            f"{ids.max().item()}"
        )
    ids = ids.long()  # cross_entropy takes int64 targets
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = TinyGPT(config)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    gains = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": recipe.weight_decay}, {"params": gains}],
        lr=recipe.lr,
        weight_decay=0.0,
        betas=(0.9, 0.95),
    )
    sampler, losses = torch.Generator().manual_seed(recipe.seed + 1), []

    def report(step: int) -> None:
        if callback is not None:
            model.eval()
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                callback(step, model)
        model.train()

    report(0)
    for step in range(recipe.steps):
        inputs, labels = random_windows(ids, recipe.batch, config.context, sampler)  # (B, T)
        logits = model(inputs)  # (B, T, V): a prediction at every position
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr_at(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        optimizer.step()
        losses.append(loss.item())
        report(step + 1)
    return model.eval(), losses


def position_losses(
    model: TinyGPT, ids: torch.Tensor, *, stride: int | None = None, batch: int = 64
) -> torch.Tensor:
    """Mean next-token loss at each position of windows of ``ids`` that start every
    ``stride`` ids.

    Args:
        model: the language model; windows have ``T = model.config.context`` inputs.
        ids: a held-out stream ``(N,)`` with ``N > T``; a tail that fills no window is dropped.
        stride: ids between window starts; defaults to ``T`` (each id predicted once). A
            smaller stride predicts each id at several positions, so every position's mean
            averages over more of the text.
        batch: windows per forward pass (memory only; the result does not depend on it).

    Returns:
        Float tensor ``(T,)``: entry ``t`` is the loss in nats of predicting character
        ``t + 1`` of a window from characters ``0 .. t``. With the default stride, its mean
        is the mean loss per predicted id.

    Raises:
        TypeError: ``model`` not a :class:`TinyGPT`, ``ids`` not a 1-D integer tensor, a
            non-int ``stride`` or ``batch``.
        ValueError: ``stride`` or ``batch`` < 1, ``ids`` with ``T`` or fewer ids, outside
            ``[0, V)`` or without values (``meta``).
    """
    require_instance("model", model, TinyGPT)
    ids = require_tensor("ids", ids, rank=1, dtype="integer", shape_hint="(N,)")
    require_values("ids", ids)
    batch = require_int("batch", batch, minimum=1)
    t = model.config.context
    stride = t if stride is None else require_int("stride", stride, minimum=1)
    if len(ids) <= t:
        raise ValueError(f"ids must hold more than context={t} ids, got {len(ids)}")
    vocab = model.config.vocab
    if ids.min() < 0 or ids.max() >= vocab:
        raise ValueError(
            f"ids must lie in [0, vocab={vocab}), got {ids.min().item()} to {ids.max().item()}"
        )
    # A stride beyond N gives the one window at 0 (and would overflow unfold's int64).
    windows = ids.long().unfold(0, t + 1, min(stride, len(ids)))  # (windows, T + 1)
    count = len(windows)
    total = torch.zeros(t, dtype=torch.float64)
    with torch.no_grad():
        for chunk in windows.split(min(batch, count)):
            logits = model(chunk[:, :-1])  # (b, T, V)
            loss = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")
            total += loss.sum(0).double()  # (T,)
    return (total / count).float()
