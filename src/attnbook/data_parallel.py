"""Chapter 13's training loop, data-parallel: one replica of the model per process.

:func:`train_lm_ddp` is :func:`attnbook.lm_training.train_lm` with the model wrapped in
``torch.nn.parallel.DistributedDataParallel``. Every process draws the same global batch of
``recipe.batch`` windows and keeps its own contiguous share of ``batch / world`` windows;
DDP's backward pass all-reduces the gradients and divides by the number of processes. Since
every window holds the same number of predicted tokens, the mean of the per-process mean
losses is the global mean loss, so the averaged gradient is the single-process gradient of
the whole batch, and clipping and AdamW then make the same step on every replica.

That argument fails as soon as the processes hold different numbers of valid tokens
(padding, ``ignore_index``): averaging per-process means weights a token by
``1 / (world * n_rank)`` instead of ``1 / n_total``, the gradient-accumulation denominator
bug of chapter 12 across processes. :func:`global_token_mean` is the fix: each process
divides its summed loss by the all-reduced token count, times the world size that DDP's
averaging divides by again.

Run it with ``torchrun`` (``scripts/ddp_train.py``); a process group must be initialised.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from attnbook._checks import require_instance, require_tensor
from attnbook.corpus import random_windows
from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.lm_training import TrainConfig

__all__ = ["global_token_mean", "local_token_mean", "train_lm_ddp"]


def _require_group() -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("no torch.distributed process group: start the script with torchrun")
    return dist.get_rank(), dist.get_world_size()


def train_lm_ddp(
    config: GPTConfig, recipe: TrainConfig, ids: torch.Tensor
) -> tuple[TinyGPT, list[float]]:
    """:func:`attnbook.lm_training.train_lm` (no callback), data-parallel over the group.

    Returns:
        ``(model in eval mode, per-step global mean losses)``: on every process the same
        model (up to rounding) and the losses of the whole batch, as ``train_lm`` reports
        them.

    Raises:
        RuntimeError: no process group. ValueError: ``recipe.batch`` not a multiple of the
            world size. TypeError, ValueError: as ``train_lm`` for its arguments.
    """
    rank, world = _require_group()
    require_instance("config", config, GPTConfig)
    require_instance("recipe", recipe, TrainConfig)
    ids = require_tensor("ids", ids, rank=1, dtype="integer", shape_hint="(N,)").long()
    if recipe.batch % world:
        raise ValueError(f"recipe.batch={recipe.batch} must be a multiple of world={world}")
    share = recipe.batch // world
    with torch.random.fork_rng(devices=[]):  # the same initial weights as train_lm
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
    replica = DistributedDataParallel(model)  # broadcasts rank 0's weights; all-reduces grads
    sampler, losses = torch.Generator().manual_seed(recipe.seed + 1), []
    model.train()
    for step in range(recipe.steps):
        inputs, labels = random_windows(ids, recipe.batch, config.context, sampler)  # (B, T)
        mine = slice(rank * share, (rank + 1) * share)  # this process's windows
        logits = replica(inputs[mine])  # (B / world, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), labels[mine].flatten())
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr_at(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP: gradients summed over processes, divided by world
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)  # the global mean loss, for the log
        losses.append(total.item() / world)
    return model.eval(), losses


def local_token_mean(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over this process's valid tokens (labels != -100): under DDP's
    averaging, a mean of per-process means (the bug when token counts differ)."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def global_token_mean(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy summed over this process's valid tokens and divided by the valid tokens
    of the whole global batch, times the world size: after DDP divides the summed gradients
    by the world size, the gradient is that of the global token mean."""
    _, world = _require_group()
    summed = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
    )
    count = (labels != -100).sum().to(torch.float64)
    dist.all_reduce(count)  # every process's valid tokens
    return summed * world / count.to(summed.dtype)
