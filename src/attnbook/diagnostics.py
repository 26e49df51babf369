"""Runnable checks for a transformer run: each one turns a contract into a pass/fail with evidence.

Every ``check_*`` function returns a :class:`Check`; it never raises for a failed contract (a
diagnosis should report, not crash), only for arguments it cannot use. The tests are
interventions, not inspections: change what must not matter, and measure whether it mattered.

Extra shape names: ``V`` vocabulary size; ``...`` any trailing feature dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._checks import require_tensor

__all__ = [
    "Check",
    "MemoryReport",
    "attention_entropy",
    "check_attention_rows",
    "check_cache",
    "check_causality",
    "check_isolation",
    "check_label_shift",
    "check_loss_masking",
    "grad_norm",
    "measure_memory",
    "watch_activations",
]

Fn = Callable[[torch.Tensor], torch.Tensor]  # (B, T, d) -> (B, T, ...)


@dataclass(frozen=True)
class Check:
    """The outcome of one diagnostic."""

    name: str  # which contract was tested
    passed: bool  # whether it held
    detail: str  # the measured evidence, one line

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.detail}"


def check_label_shift(inputs: torch.Tensor, labels: torch.Tensor, *, ignore: int = -100) -> Check:
    """Next-token labels must be the inputs shifted left by exactly one position.

    Args:
        inputs, labels: integer ids ``(B, T)``; ``labels[b, t]`` should equal ``inputs[b, t + 1]``
            wherever it is not ``ignore`` (the last label is the token after the window, so it
            cannot be compared).
    """
    inputs = require_tensor("inputs", inputs, rank=2, dtype="integer", shape_hint="(B, T)")
    labels = require_tensor("labels", labels, rank=2, dtype="integer", shape_hint="(B, T)")
    if inputs.shape != labels.shape or inputs.shape[1] < 2:
        raise ValueError(
            f"need equal shapes with T >= 2, got {tuple(inputs.shape)} and {tuple(labels.shape)}"
        )
    known = labels[:, :-1] != ignore  # (B, T - 1)
    next_ok = (labels[:, :-1] == inputs[:, 1:])[known].float().mean().item()
    same = (labels == inputs)[labels != ignore].float().mean().item()
    detail = f"labels match the next input at {next_ok:.0%}, the same input at {same:.0%}"
    return Check("labels shifted once", next_ok == 1.0, detail)


def check_loss_masking(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    labels: torch.Tensor,
    valid: torch.Tensor,
    vocab: int,
    *,
    atol: float = 1e-5,
) -> Check:
    """Padding must be out of the loss: out of its numerator *and* its denominator.

    Two interventions: (1) uniform logits give every valid token loss ``log V``, so a mean over
    valid tokens is exactly ``log V``; counting padding in the denominator shrinks it. (2)
    changing the logits at padded positions must not change the loss.

    Args:
        loss_fn: the pipeline's loss, ``(B, T, V) logits, (B, T) labels -> scalar``.
        labels: ``(B, T)`` as the pipeline produces them (padding included).
        valid: bool ``(B, T)``, True where a label should be trained on.
        vocab: ``V``.
    """
    valid = require_tensor("valid", valid, rank=2, dtype="bool", shape_hint="(B, T)")
    gen = torch.Generator().manual_seed(0)
    uniform = loss_fn(torch.zeros(*valid.shape, vocab), labels).item()
    logits = torch.randn(*valid.shape, vocab, generator=gen)  # (B, T, V)
    noisy = logits + 10 * torch.randn(logits.shape, generator=gen) * (~valid)[..., None]
    moved = abs(loss_fn(noisy, labels).item() - loss_fn(logits, labels).item())
    ok = abs(uniform - math.log(vocab)) <= atol and moved <= atol
    detail = (
        f"uniform-logit loss {uniform:.4f} (log V = {math.log(vocab):.4f}); "
        f"moving padded logits changes it by {moved:.4f}"
    )
    return Check("padding out of the loss", ok, detail)


def _effect(fn: Fn, x: torch.Tensor, edit: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Largest output change ``(B, T)`` when the inputs at ``edit`` (bool ``(B, T)``) change."""
    noise = torch.randn(x.shape, generator=gen) * edit[..., None]
    with torch.no_grad():
        delta = (fn(x + noise) - fn(x)).abs()  # (B, T, ...)
    return delta.flatten(2).amax(-1)  # (B, T)


def check_causality(fn: Fn, x: torch.Tensor, *, atol: float = 1e-6, seed: int = 0) -> Check:
    """Perturb every future position in turn; outputs up to ``t`` must not move.

    Args:
        fn: the layer or model, ``(B, T, d) -> (B, T, ...)``.
        x: a floating input ``(B, T, d)`` (embeddings, so it can be perturbed smoothly).
    """
    x = require_tensor("x", x, rank=3, dtype="floating", shape_hint="(B, T, d)")
    gen, t_len = torch.Generator().manual_seed(seed), x.shape[1]
    leaks = []  # leaks[t]: how far output t moves when every position after t changes
    for t in range(t_len - 1):
        future = (torch.arange(t_len) > t).expand(x.shape[0], t_len)  # (B, T)
        leaks.append(_effect(fn, x, future, gen)[:, t].max().item())
    bad = [t for t, leak in enumerate(leaks) if leak > atol]
    detail = f"max move of an earlier output {max(leaks, default=0.0):.3g}; " + (
        f"first leak: output {bad[0]} sees positions > {bad[0]}" if bad else "no leak"
    )
    return Check("causality under future edits", not bad, detail)


def check_isolation(
    fn: Fn, x: torch.Tensor, segment_ids: torch.Tensor, *, atol: float = 1e-6, seed: int = 0
) -> Check:
    """Packed documents: editing the other documents must not move a document's outputs.

    Args:
        fn, x: as in :func:`check_causality`.
        segment_ids: integer ``(B, T)``; equal ids form one document.
    """
    x = require_tensor("x", x, rank=3, dtype="floating", shape_hint="(B, T, d)")
    ids = require_tensor("segment_ids", segment_ids, rank=2, dtype="integer", shape_hint="(B, T)")
    gen, worst = torch.Generator().manual_seed(seed), 0.0
    for s in ids.unique().tolist():
        inside = ids == s  # (B, T)
        worst = max(worst, _effect(fn, x, ~inside, gen)[inside].max().item())
    detail = f"editing other documents moves a document's outputs by up to {worst:.3g}"
    return Check("packed documents isolated", worst <= atol, detail)


def check_attention_rows(
    weights: torch.Tensor, allowed: torch.Tensor, *, atol: float = 1e-6
) -> Check:
    """Rows with an allowed key sum to 1; forbidden entries are exactly 0.

    Args:
        weights: ``(..., Tq, Tk)``; allowed: bool, broadcastable to it (True = may attend).
    """
    weights = require_tensor("weights", weights, min_rank=2, dtype="floating")
    allowed = require_tensor("allowed", allowed, dtype="bool").expand_as(weights)
    live = allowed.any(-1)  # (..., Tq)
    row_error = (weights.sum(-1) - 1).abs()[live].max().item() if live.any() else 0.0
    leaked = weights.masked_fill(allowed, 0).abs().max().item()
    detail = f"max |row sum - 1| = {row_error:.2g}, max forbidden weight = {leaked:.2g}"
    return Check("attention rows", row_error <= atol and leaked == 0, detail)


def check_cache(full: torch.Tensor, cached: torch.Tensor, *, atol: float = 1e-5) -> Check:
    """Cached decoding must reproduce full-sequence logits ``(B, T, V)`` at identical positions."""
    full = require_tensor("full", full, rank=3, dtype="floating", shape_hint="(B, T, V)")
    cached = require_tensor("cached", cached, rank=3, dtype="floating", shape_hint="(B, T, V)")
    if full.shape != cached.shape:
        raise ValueError(f"full {tuple(full.shape)} and cached {tuple(cached.shape)} differ")
    gap = (full - cached).abs().flatten(2).amax(-1).amax(0)  # (T,)
    bad = (gap > atol).nonzero().flatten().tolist()
    first = f"first divergence at position {bad[0]}" if bad else "no divergence"
    return Check("cached = full logits", not bad, f"max gap {gap.max().item():.2g}; {first}")


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row, ``(..., Tq, Tk) -> (..., Tq)``; ``0 log 0 = 0``."""
    weights = require_tensor("weights", weights, min_rank=1, dtype="floating")
    return -(weights * weights.clamp_min(1e-30).log()).sum(-1)


def watch_activations(model: nn.Module, *inputs: torch.Tensor) -> list[tuple[str, float, bool]]:
    """Run ``model(*inputs)`` and record ``(module name, max |output|, all finite)`` per module,
    in the order the modules ran, so the first non-finite entry names where a blow-up begins."""
    records, handles = [], []

    def hook(name: str):
        def record(_module, _args, out) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                finite = bool(torch.isfinite(out).all())
                records.append((name, out.detach().abs().nan_to_num(math.inf).max().item(), finite))

        return record

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(hook(name or "<model>")))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return records


def grad_norm(model: nn.Module) -> float:
    """Global L2 norm of the current gradients: what clipping sees *before* it clips."""
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(norms).norm().item() if norms else 0.0


@dataclass(frozen=True)
class MemoryReport:
    """Bytes held during one training step, by what holds them."""

    parameters: int  # the weights
    gradients: int  # one gradient per trainable weight
    optimizer: int  # optimizer state (AdamW: two moments per weight)
    activations: int  # tensors autograd saved for backward (scales with batch and T)


def measure_memory(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[[], torch.Tensor]
) -> MemoryReport:
    """Run one training step (``loss_fn()``, backward, ``optimizer.step()``) and count bytes.

    Activations are the distinct storages autograd saves during ``loss_fn()``, excluding the
    parameters themselves. The step changes the model, so measure on a copy if that matters.
    """

    def size(t: torch.Tensor) -> int:
        return t.untyped_storage().nbytes()

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            saved[ptr] = size(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    params = list(model.parameters())
    state = [
        t
        for s in optimizer.state.values()
        for t in s.values()
        if isinstance(t, torch.Tensor) and t.dim() > 0
    ]
    return MemoryReport(
        sum(size(p) for p in params),
        sum(size(p.grad) for p in params if p.grad is not None),
        sum(size(t) for t in state),
        sum(saved.values()),
    )
