"""Runtime health of a training run: activations, gradient norm, memory and attention entropy.

These are measurements, not pass/fail contracts (those live in :mod:`attnbook.diagnostics`):
which module first produced a non-finite output, what clipping sees before it clips, which
part of a training step's memory grows with what, and how spread out each attention row is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._checks import (
    require_callable,
    require_instance,
    require_scalar,
    require_tensor,
    require_values,
)
from attnbook.attention import _working_dtype

__all__ = [
    "MemoryReport",
    "attention_entropy",
    "grad_norm",
    "measure_memory",
    "watch_activations",
]


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row, ``(..., Tq, Tk) -> (..., Tq)``; ``0 log 0 = 0``.

    ``weights`` must be non-negative (``ValueError`` otherwise). 16-bit weights are evaluated
    in float32 (in float16 the tiny floor below ``log`` would round to 0) and the result cast
    back. NaN weights give NaN entropy.
    """
    weights = require_tensor(
        "weights", weights, min_rank=1, dtype="floating", shape_hint="(..., Tq, Tk)"
    )
    if not weights.is_meta and bool((weights < 0).any()):
        raise ValueError(
            f"weights must be >= 0 (a distribution per row), got a minimum of "
            f"{weights.min().item():.3g} in shape {tuple(weights.shape)}"
        )
    work = weights.to(_working_dtype(weights.dtype))
    return (-(work * work.clamp_min(1e-30).log()).sum(-1)).to(weights.dtype)


def watch_activations(model: nn.Module, *inputs: torch.Tensor) -> list[tuple[str, float, bool]]:
    """Run ``model(*inputs)`` and record ``(module name, max |output|, all finite)`` per module,
    in the order the modules ran, so the first non-finite entry names where a blow-up begins.

    Only floating tensor outputs are recorded; a NaN counts as an infinite ``max |output|``.
    Runs without gradients and removes its hooks afterwards, even if the model raises."""
    require_instance("model", model, nn.Module)
    for i, x in enumerate(inputs):
        require_values(f"inputs[{i}]", require_tensor(f"inputs[{i}]", x))
    records, handles = [], []

    def hook(name: str):
        def record(_module, _args, out) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                finite = bool(torch.isfinite(out).all())
                largest = (
                    out.detach().abs().nan_to_num(math.inf).amax().item() if out.numel() else 0.0
                )
                records.append((name, largest, finite))

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
    """Global L2 norm of the current gradients: what clipping sees *before* it clips.

    Each gradient's norm is taken in float32 at least (a float16 gradient's norm overflows
    above 65504, where ``clip_grad_norm_`` itself would report inf) and on the CPU, so
    parameters may live on several devices. 0.0 when no parameter has a gradient.
    """
    require_instance("model", model, nn.Module)
    grads = [
        require_values(f"model.{name}.grad", p.grad.detach())
        for name, p in model.named_parameters()
        if p.grad is not None
    ]
    norms = [g.to(_working_dtype(g.dtype)).norm().cpu() for g in grads]
    if not norms:
        return 0.0
    if len({n.dtype for n in norms}) > 1:  # mixed precisions: combine in float64
        norms = [n.double() for n in norms]
    return torch.stack(norms).norm().item()


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
    ``loss_fn()`` must return a scalar tensor.
    """
    require_instance("model", model, nn.Module)
    require_instance("optimizer", optimizer, torch.optim.Optimizer)
    require_callable("loss_fn", loss_fn)

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
        loss = require_scalar("loss_fn()", loss_fn())
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
