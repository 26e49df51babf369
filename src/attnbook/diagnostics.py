"""Data and mask contracts of a transformer run, each turned into a pass/fail with evidence.

Labels shifted once, padding out of the loss, packed documents isolated, attention rows that
sum to one, causality, and a KV cache that reproduces the full pass. Every ``check_*``
function returns a :class:`Check`; it never raises for a failed contract (a diagnosis should
report, not crash), only for arguments it cannot use. The checks are interventions: change
what must not matter, and measure whether it mattered. Runtime health lives in
:mod:`attnbook.training_health`.

Extra shape names: ``V`` vocabulary size; ``...`` any trailing feature dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnbook._checks import (
    require_broadcastable,
    require_callable,
    require_int,
    require_nonempty,
    require_real,
    require_same_shape,
    require_scalar,
    require_tensor,
)

__all__ = [
    "Check",
    "check_attention_rows",
    "check_cache",
    "check_causality",
    "check_isolation",
    "check_label_shift",
    "check_loss_masking",
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
    ignore = require_int("ignore", ignore)
    require_same_shape("inputs", inputs, "labels", labels)
    if inputs.shape[0] < 1 or inputs.shape[1] < 2:
        raise ValueError(f"inputs must have B >= 1 and T >= 2, got shape {tuple(inputs.shape)}")
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
        atol: tolerance (> 0) for both interventions.
    """
    require_callable("loss_fn", loss_fn)
    labels = require_tensor("labels", labels, rank=2, dtype="integer", shape_hint="(B, T)")
    valid = require_tensor("valid", valid, rank=2, dtype="bool", shape_hint="(B, T)")
    vocab = require_int("vocab", vocab, minimum=1)
    atol = require_real("atol", atol, positive=True)
    require_same_shape("labels", labels, "valid", valid)
    if not valid.any():
        raise ValueError(f"valid of shape {tuple(valid.shape)} has no True entry to train on")

    def loss(logits: torch.Tensor) -> float:
        return require_scalar("loss_fn(logits, labels)", loss_fn(logits, labels)).item()

    gen = torch.Generator().manual_seed(0)
    uniform = loss(torch.zeros(*valid.shape, vocab))
    logits = torch.randn(*valid.shape, vocab, generator=gen)  # (B, T, V)
    noisy = logits + 10 * torch.randn(logits.shape, generator=gen) * (~valid)[..., None]
    moved = abs(loss(noisy) - loss(logits))
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
        out = fn(x)
        if not isinstance(out, torch.Tensor) or out.shape[:2] != x.shape[:2]:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"fn(x) must return (B, T, ...) = {tuple(x.shape[:2])}, got {got}")
        delta = (fn(x + noise) - out).abs()  # (B, T, ...)
    return delta.flatten(2).amax(-1)  # (B, T)


def _require_input(fn: object, x: object, atol: object, seed: object) -> torch.Tensor:
    """The arguments shared by the perturbation checks; returns ``x``."""
    require_callable("fn", fn)
    x = require_tensor("x", x, rank=3, dtype="floating", shape_hint="(B, T, d)")
    require_nonempty("x", x, "B, T, d")
    require_real("atol", atol, positive=True)
    require_int("seed", seed, minimum=0)
    return x


def check_causality(fn: Fn, x: torch.Tensor, *, atol: float = 1e-6, seed: int = 0) -> Check:
    """Perturb every future position in turn; outputs up to ``t`` must not move.

    Args:
        fn: the layer or model, ``(B, T, d) -> (B, T, ...)``.
        x: a floating input ``(B, T, d)`` (embeddings, so it can be perturbed smoothly), ``T >= 2``.
        atol: how far (> 0) an earlier output may move before it counts as a leak.
    """
    x = _require_input(fn, x, atol, seed)
    if x.shape[1] < 2:
        raise ValueError(f"x needs T >= 2 positions to have a future, got shape {tuple(x.shape)}")
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
    x = _require_input(fn, x, atol, seed)
    ids = require_tensor("segment_ids", segment_ids, rank=2, dtype="integer", shape_hint="(B, T)")
    require_same_shape("segment_ids", ids, "x's (B, T)", x[..., 0])
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
        atol: tolerance (> 0) on each row sum; forbidden weights must be exactly 0.
    """
    weights = require_tensor(
        "weights", weights, min_rank=2, dtype="floating", shape_hint="(..., Tq, Tk)"
    )
    require_nonempty("weights", weights, "Tq, Tk")
    allowed = require_tensor("allowed", allowed, dtype="bool")
    allowed = require_broadcastable("allowed", allowed, "weights", tuple(weights.shape))
    atol = require_real("atol", atol, positive=True)
    live = allowed.any(-1)  # (..., Tq)
    row_error = (weights.sum(-1) - 1).abs()[live].max().item() if live.any() else 0.0
    leaked = weights.masked_fill(allowed, 0).abs().max().item()
    detail = f"max |row sum - 1| = {row_error:.2g}, max forbidden weight = {leaked:.2g}"
    return Check("attention rows", row_error <= atol and leaked == 0, detail)


def check_cache(full: torch.Tensor, cached: torch.Tensor, *, atol: float = 1e-5) -> Check:
    """Cached decoding must reproduce full-sequence logits ``(B, T, V)`` at identical positions."""
    full = require_tensor("full", full, rank=3, dtype="floating", shape_hint="(B, T, V)")
    cached = require_tensor("cached", cached, rank=3, dtype="floating", shape_hint="(B, T, V)")
    require_same_shape("full", full, "cached", cached)
    require_nonempty("full", full, "B, T, V")
    atol = require_real("atol", atol, positive=True)
    gap = (full - cached).abs().flatten(2).amax(-1).amax(0)  # (T,)
    bad = (gap > atol).nonzero().flatten().tolist()
    first = f"first divergence at position {bad[0]}" if bad else "no divergence"
    return Check("cached = full logits", not bad, f"max gap {gap.max().item():.2g}; {first}")
