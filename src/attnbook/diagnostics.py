"""Data and mask contracts of a transformer run, each turned into a pass/fail with evidence.

Labels shifted once, padding out of the loss, packed documents isolated, attention rows that
sum to one, causality, and a KV cache that reproduces the full pass. Every ``check_*``
function returns a :class:`Check`; it never raises for a failed contract (a diagnosis should
report, not crash), only for arguments it cannot use. The checks are interventions: change
what must not matter, and measure whether it mattered. A NaN or infinite value where a check
measures is a FAIL, never a PASS: ``NaN > atol`` is False, so each check tests finiteness
explicitly. Default tolerances are for float32 (and float64) and widen with the resolution of
16-bit dtypes (see :func:`attnbook._checks.tolerance_for`). Meta tensors are rejected: they
have no values to check. Runtime health lives in :mod:`attnbook.training_health`.

Extra shape names: ``V`` vocabulary size; ``...`` any trailing feature dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._checks import (
    require_bool,
    require_broadcastable,
    require_callable,
    require_int,
    require_nonempty,
    require_real,
    require_same_shape,
    require_scalar,
    require_tensor,
    require_values,
    tolerance_for,
    too_large,
)
from attnbook.attention import _working_dtype

__all__ = [
    "Check",
    "check_accumulation",
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
    """The outcome of one diagnostic: PASS, FAIL, or UNTESTED.

    UNTESTED means the input gave the check nothing to test (a batch without padding for
    :func:`check_loss_masking`, rows that each hold one document for :func:`check_isolation`,
    the same tensor twice for :func:`check_cache`), so no bug could have shown. It is never a
    pass: ``passed`` is False, and ``detail`` says what input would test the contract.
    """

    name: str  # which contract was tested
    passed: bool  # whether it held
    detail: str  # the measured evidence, one line
    tested: bool = True  # False: the input could not have revealed a violation

    def __post_init__(self) -> None:
        if not self.tested and self.passed:
            raise ValueError("a Check that tested nothing cannot have passed")

    @property
    def verdict(self) -> str:
        return "UNTESTED" if not self.tested else "PASS" if self.passed else "FAIL"

    def __str__(self) -> str:
        return f"{self.verdict}  {self.name}: {self.detail}"


def _untested(name: str, why: str) -> Check:
    return Check(name, False, why, tested=False)


def _size(value: float, atol: float, digits: str = ".3g") -> str:
    """A measured deviation as the detail prints it: exact zero as 0, a value within ``atol``
    (rounding noise, whose digits vary between CPUs and builds) as that bound, else the value."""
    if value == 0:
        return "0"
    if value <= atol:
        return f"within {atol:.0e}"
    return format(value, digits)


def check_label_shift(
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    ignore: int = -100,
    shift_in_loss: bool = False,
) -> Check:
    """Next-token labels must be the inputs shifted left by exactly one position, once.

    Two conventions are correct. Either the data pipeline shifts (``labels[b, t]`` is
    ``inputs[b, t + 1]``; the loss compares position ``t``'s logits with ``labels[b, t]``), or,
    as Hugging Face models do, ``labels`` equal the inputs and the loss shifts them
    (``shift_in_loss=True``). Each convention's bug is the other's correct data, so say which
    one the loss uses.

    Args:
        inputs, labels: integer ids ``(B, T)``. With ``shift_in_loss=False``, ``labels[b, t]``
            should equal ``inputs[b, t + 1]`` wherever it is not ``ignore`` (the last label is
            the token after the window, so it cannot be compared); with ``True``,
            ``labels[b, t]`` should equal ``inputs[b, t]``.
        ignore: the label id the loss skips.
        shift_in_loss: whether the loss shifts the labels itself (Hugging Face's convention).

    Raises:
        ValueError: besides shapes, when every comparable label is ``ignore``: there is
            nothing to check.
    """
    inputs = require_tensor("inputs", inputs, rank=2, dtype="integer", shape_hint="(B, T)")
    labels = require_tensor("labels", labels, rank=2, dtype="integer", shape_hint="(B, T)")
    ignore = require_int("ignore", ignore)
    shift_in_loss = require_bool("shift_in_loss", shift_in_loss)
    require_same_shape("inputs", inputs, "labels", labels)
    if inputs.shape[0] < 1 or inputs.shape[1] < 2:
        raise ValueError(f"inputs must have B >= 1 and T >= 2, got shape {tuple(inputs.shape)}")
    require_values("inputs", inputs)
    require_values("labels", labels)
    known = labels[:, :-1] != ignore  # (B, T - 1)
    if not known.any():
        raise ValueError(
            f"labels {tuple(labels.shape)} are all ignore={ignore} before the last position; "
            "there is no label to compare with the next input"
        )
    next_ok = (labels[:, :-1] == inputs[:, 1:])[known].float().mean().item()
    same = (labels == inputs)[labels != ignore].float().mean().item()
    detail = f"labels match the next input at {next_ok:.0%}, the same input at {same:.0%}"
    if shift_in_loss:
        detail += " (the loss shifts them: they must match the same input)"
        return Check("labels shifted once, in the loss", same == 1.0, detail)
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
        valid: bool ``(B, T)``, True where a label should be trained on. Derive it from what
            says where the real tokens are (sequence lengths, the attention mask), **never
            from the labels** (``labels != -100``): a pipeline that forgot to mark its padding
            would then mark every position valid, and the check would have nothing to test.
        vocab: ``V``.
        atol: tolerance (> 0) for both interventions.

    Returns:
        PASS or FAIL; UNTESTED when ``valid`` is True everywhere: a batch without padding
        cannot show whether padding is kept out (test on a batch with padding).
    """
    require_callable("loss_fn", loss_fn)
    labels = require_tensor("labels", labels, rank=2, dtype="integer", shape_hint="(B, T)")
    valid = require_tensor("valid", valid, rank=2, dtype="bool", shape_hint="(B, T)")
    vocab = require_int("vocab", vocab, minimum=1, maximum=2**62)  # int64 comparisons below
    atol = require_real("atol", atol, positive=True)
    require_same_shape("labels", labels, "valid", valid)
    require_values("labels", labels)
    require_values("valid", valid)
    if not valid.any():
        raise ValueError(f"valid of shape {tuple(valid.shape)} has no True entry to train on")
    trained = labels[valid.to(labels.device)]
    if bool(((trained < 0) | (trained >= vocab)).any()):
        raise ValueError(
            f"labels where valid is True must lie in [0, vocab={vocab}), got ids from "
            f"{trained.min().item()} to {trained.max().item()}"
        )

    def loss(logits: torch.Tensor) -> float:
        return require_scalar("loss_fn(logits, labels)", loss_fn(logits, labels)).item()

    gen = torch.Generator().manual_seed(0)
    with too_large(f"vocab={vocab} for labels of shape {tuple(labels.shape)}"):
        uniform = loss(torch.zeros(*valid.shape, vocab).to(labels.device))
        logits = torch.randn(*valid.shape, vocab, generator=gen)  # (B, T, V)
    if valid.all():  # checked after one call, so a broken loss_fn still raises
        return _untested(
            "padding out of the loss",
            "valid is True everywhere: no padding to keep out, so no bug could show; test a "
            "batch with padding, with valid taken from the lengths, not the labels",
        )
    noisy = logits + 10 * torch.randn(logits.shape, generator=gen) * (~valid.cpu())[..., None]
    moved = abs(loss(noisy.to(labels.device)) - loss(logits.to(labels.device)))
    # Written so that a NaN loss fails: NaN <= atol is False.
    ok = abs(uniform - math.log(vocab)) <= atol and moved <= atol
    detail = (
        f"uniform-logit loss {uniform:.4f} (log V = {math.log(vocab):.4f}); "
        f"moving padded logits changes it by {moved:.4f}"
    )
    return Check("padding out of the loss", ok, detail)


def check_accumulation(
    accumulate: Callable[[list[torch.Tensor], list[torch.Tensor]], torch.Tensor],
    labels: torch.Tensor,
    valid: torch.Tensor,
    vocab: int,
    micro: int,
    *,
    atol: float = 1e-5,
) -> Check:
    """Gradient accumulation must weight every valid token of the whole batch alike.

    A batch split into ``micro`` micro-batches (along ``B``) is accumulated by the pipeline's
    rule, e.g. ``sum(loss_fn(l, y) for l, y in zip(...)) / micro``. Averaging per-micro-batch
    means that way gives each micro-batch equal weight, so a token in a micro-batch with few
    valid tokens counts for more. The intervention: logits that are right with certainty on
    the first micro-batch's valid tokens (loss 0) and uniform elsewhere (loss ``log V``). A
    token-weighted mean is then exactly ``log V`` times the share of valid tokens outside the
    first micro-batch.

    Args:
        accumulate: the pipeline's accumulated loss, ``(list of (b, T, V) logits, list of
            (b, T) labels) -> scalar``, as it would call backward on it (the sum of what each
            micro-batch backpropagates).
        labels: ``(B, T)`` labels as the pipeline produces them (padding as ``-100`` or however
            its loss skips it); valid: bool ``(B, T)``, from the lengths, not the labels.
        vocab: ``V``. micro: the number of micro-batches, ``1 <= micro <= B``; ``B`` is split
            as ``torch.tensor_split`` does.
        atol: tolerance (> 0).

    Returns:
        PASS or FAIL; UNTESTED when every micro-batch holds the same number of valid tokens
        (equal weights are then right by accident, so the bug cannot show) or when the first
        micro-batch or the rest holds none.
    """
    require_callable("accumulate", accumulate)
    labels = require_tensor("labels", labels, rank=2, dtype="integer", shape_hint="(B, T)")
    valid = require_tensor("valid", valid, rank=2, dtype="bool", shape_hint="(B, T)")
    vocab = require_int("vocab", vocab, minimum=2, maximum=2**62)
    require_same_shape("labels", labels, "valid", valid)
    micro = require_int("micro", micro, minimum=1, maximum=max(labels.shape[0], 1))
    atol = require_real("atol", atol, positive=True)
    require_values("labels", labels)
    require_values("valid", valid)
    name = "accumulation weights tokens alike"
    trained = labels[valid]
    if bool(((trained < 0) | (trained >= vocab)).any()):
        raise ValueError(f"labels where valid is True must lie in [0, vocab={vocab})")
    chunks = list(zip(labels.tensor_split(micro), valid.tensor_split(micro), strict=True))
    counts = [int(v.sum()) for _, v in chunks]
    if len(set(counts)) == 1 or counts[0] == 0 or sum(counts[1:]) == 0:
        return _untested(
            name,
            f"valid tokens per micro-batch {counts}: equal (or empty) counts cannot show a "
            "reweighting; use micro-batches with different numbers of valid tokens",
        )
    with too_large(f"vocab={vocab} for labels of shape {tuple(labels.shape)}"):
        logits = [torch.zeros(*y.shape, vocab) for y, _ in chunks]
    first_labels, first_valid = chunks[0]
    rows, cols = first_valid.nonzero(as_tuple=True)
    logits[0][rows, cols] = -1e4  # certain of the label: loss exactly 0 there
    logits[0][rows, cols, first_labels[rows, cols]] = 1e4
    got = require_scalar("accumulate(logits, labels)", accumulate(logits, [y for y, _ in chunks]))
    expected = math.log(vocab) * sum(counts[1:]) / sum(counts)
    ok = abs(got.item() - expected) <= atol  # NaN fails
    detail = (
        f"valid tokens per micro-batch {counts}; accumulated loss {got.item():.4f}, "
        f"token-weighted mean {expected:.4f}"
    )
    return Check(name, ok, detail)


def _outputs(fn: Fn, x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` without gradients, checked to be a ``(B, T, ...)`` tensor."""
    with torch.no_grad():
        out = fn(x)
    if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[:2] != x.shape[:2]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"fn(x) must return (B, T, ...) = {tuple(x.shape[:2])}, got {got}")
    return out


def _non_finite(out: torch.Tensor) -> str | None:
    """``None`` if every output is finite, else a sentence naming the first bad position."""
    if not out.is_floating_point() and not out.is_complex():
        return None
    bad = ~torch.isfinite(out).flatten(2).all(-1)  # (B, T)
    if not bad.any():
        return None
    position = int(bad.any(0).nonzero()[0])
    return (
        f"fn(x) is not finite (NaN or inf first at position {position}), so no edit can be measured"
    )


def _effect(
    fn: Fn, x: torch.Tensor, out: torch.Tensor, edit: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    """Largest output change ``(B, T)`` when the inputs at ``edit`` (bool ``(B, T)``) change.

    A change to NaN or inf counts as an infinite move, so it can never pass as "no effect".
    """
    noise = torch.randn(x.shape, generator=gen).to(device=x.device, dtype=x.dtype)
    noise = noise * edit.to(x.device)[..., None]
    moved = _outputs(fn, x + noise)
    delta = (moved - out).abs().nan_to_num(nan=math.inf)  # (B, T, ...)
    return delta.flatten(2).amax(-1)  # (B, T)


@contextmanager
def _eval_mode(fn: object) -> Iterator[None]:
    """Run a module (or a bound method of one) in eval mode, and restore its modes after:
    dropout in training mode moves outputs at random, which would read as a leak."""
    owner = fn if isinstance(fn, nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(owner, nn.Module):
        yield
        return
    modes = [(m, m.training) for m in owner.modules()]
    owner.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _stable_outputs(fn: Fn, x: torch.Tensor) -> torch.Tensor:
    """``fn(x)``, refused unless a second call gives the same outputs (a stochastic ``fn``,
    dropout in a plain function or sampling, would make any edit look like a leak)."""
    out = _outputs(fn, x)
    again = _outputs(fn, x)
    same = out.shape == again.shape and bool(((out == again) | (out.isnan() & again.isnan())).all())
    if not same:
        raise ValueError(
            "fn gives different outputs for the same x (dropout or sampling?): an edit could "
            "not be told from noise; make fn deterministic (for a module: model.eval())"
        )
    return out


def _require_input(fn: object, x: object, atol: object, seed: object) -> tuple[torch.Tensor, float]:
    """The arguments shared by the perturbation checks; returns ``x`` and the tolerance."""
    require_callable("fn", fn)
    x = require_tensor("x", x, rank=3, dtype="floating", shape_hint="(B, T, d)")
    require_nonempty("x", x, "B, T, d")
    require_values("x", x)
    atol = (
        tolerance_for(1e-6, x.dtype) if atol is None else require_real("atol", atol, positive=True)
    )
    require_int("seed", seed, minimum=0)
    return x, atol


def check_causality(fn: Fn, x: torch.Tensor, *, atol: float | None = None, seed: int = 0) -> Check:
    """Perturb every future position in turn; outputs up to ``t`` must not move.

    Args:
        fn: the layer or model, ``(B, T, d) -> (B, T, ...)``.
        x: a floating input ``(B, T, d)`` (embeddings, so it can be perturbed smoothly), ``T >= 2``.
            The perturbation has ``x``'s dtype and device, so a float16 model gets float16 input.
        atol: how far (> 0) an earlier output may move before it counts as a leak; defaults to
            ``1e-6`` for float32/float64 ``x``, widened for 16-bit dtypes.
        seed: seeds the perturbations.

    Returns:
        A FAIL if any earlier output moves by more than ``atol``, changes to NaN or inf, or if
        ``fn(x)`` itself is not finite (a NaN output cannot show that it did not move).
    """
    x, atol = _require_input(fn, x, atol, seed)
    if x.shape[1] < 2:
        raise ValueError(f"x needs T >= 2 positions to have a future, got shape {tuple(x.shape)}")
    name = "causality under future edits"
    with _eval_mode(fn):
        out = _stable_outputs(fn, x)
        if (why := _non_finite(out)) is not None:
            return Check(name, False, why)
        gen, t_len = torch.Generator().manual_seed(seed), x.shape[1]
        leaks = []  # leaks[t]: how far output t moves when every position after t changes
        for t in range(t_len - 1):
            future = (torch.arange(t_len) > t).expand(x.shape[0], t_len)  # (B, T)
            leaks.append(_effect(fn, x, out, future, gen)[:, t].max().item())
    bad = [t for t, leak in enumerate(leaks) if not leak <= atol]
    detail = f"max move of an earlier output {_size(max(leaks, default=0.0), atol)}; " + (
        f"first leak: output {bad[0]} sees positions > {bad[0]}" if bad else "no leak"
    )
    return Check(name, not bad, detail)


def check_isolation(
    fn: Fn, x: torch.Tensor, segment_ids: torch.Tensor, *, atol: float | None = None, seed: int = 0
) -> Check:
    """Packed documents: editing the other documents must not move a document's outputs.

    Args:
        fn, x, atol, seed: as in :func:`check_causality` (non-finite outputs FAIL likewise; a
            module runs in eval mode, and a stochastic ``fn`` is refused).
        segment_ids: integer ``(B, T)``; equal ids form one document.

    Returns:
        PASS or FAIL; UNTESTED when no row holds two documents: documents in different rows
        never meet in attention, so a layer without any mask would pass too.
    """
    x, atol = _require_input(fn, x, atol, seed)
    ids = require_tensor("segment_ids", segment_ids, rank=2, dtype="integer", shape_hint="(B, T)")
    require_same_shape("segment_ids", ids, "x's (B, T)", x[..., 0])
    require_values("segment_ids", ids)
    name = "packed documents isolated"
    if not any(row.unique().numel() > 1 for row in ids):
        return _untested(
            name,
            "every row holds one document, so nothing shares a row to leak from; pack two "
            "or more documents into a row",
        )
    with _eval_mode(fn):
        out = _stable_outputs(fn, x)
        if (why := _non_finite(out)) is not None:
            return Check(name, False, why)
        gen, worst = torch.Generator().manual_seed(seed), 0.0
        for s in ids.unique().tolist():
            inside = (ids == s).to(x.device)  # (B, T)
            worst = max(worst, _effect(fn, x, out, ~inside, gen)[inside].max().item())
    detail = f"editing other documents moves a document's outputs by up to {_size(worst, atol)}"
    return Check(name, worst <= atol, detail)


def check_attention_rows(
    weights: torch.Tensor, allowed: torch.Tensor, *, atol: float | None = None
) -> Check:
    """Rows with an allowed key sum to 1; forbidden entries are exactly 0.

    A row with no allowed key is not a failure: it must be all zeros (the book's convention,
    see :func:`attnbook.attention.attention`), which the forbidden-weight test covers.

    Args:
        weights: ``(..., Tq, Tk)``; allowed: bool, broadcastable to it (True = may attend).
        atol: tolerance (> 0) on each row sum; forbidden weights must be exactly 0. Defaults
            to ``1e-6`` for float32/float64 weights and widens for 16-bit ones (a correct
            float16 row sums to 1 only within about ``5e-4``; the default there is ``8.2e-3``).

    Returns:
        A FAIL if a row sum is off by more than ``atol``, a forbidden weight is not 0, or any
        weight is NaN or infinite.
    """
    weights = require_tensor(
        "weights", weights, min_rank=2, dtype="floating", shape_hint="(..., Tq, Tk)"
    )
    require_nonempty("weights", weights, "Tq, Tk")
    allowed = require_tensor("allowed", allowed, dtype="bool")
    allowed = require_broadcastable("allowed", allowed, "weights", tuple(weights.shape))
    require_values("weights", weights)
    require_values("allowed", allowed)
    atol = (
        tolerance_for(1e-6, weights.dtype)
        if atol is None
        else require_real("atol", atol, positive=True)
    )
    sums = weights.to(_working_dtype(weights.dtype)).sum(-1)  # (..., Tq); 16-bit summed in fp32
    live = allowed.any(-1)  # (..., Tq)
    row_error = (sums - 1).abs()[live].max().item() if live.any() else 0.0
    leaked = weights.masked_fill(allowed, 0).abs().max().item()
    bad_values = int((~torch.isfinite(weights)).sum())
    detail = (
        f"max |row sum - 1| {_size(row_error, atol, '.2g')}, "
        f"max forbidden weight {_size(leaked, 0.0, '.2g')}"
    )
    if bad_values:
        detail += f"; {bad_values} weights are NaN or inf"
    ok = row_error <= atol and leaked == 0 and not bad_values
    return Check("attention rows", ok, detail)


def check_cache(full: torch.Tensor, cached: torch.Tensor, *, atol: float | None = None) -> Check:
    """Cached decoding must reproduce full-sequence logits ``(B, T, V)`` at identical positions.

    Args:
        full, cached: floating logits ``(B, T, V)`` of the full pass and of cached decoding.
        atol: largest allowed ``|full - cached|`` (> 0); defaults to ``1e-5`` for float32 and
            float64 logits and widens for 16-bit ones (``0.08`` for float16).

    Returns:
        A FAIL naming the first position where the gap exceeds ``atol`` or where either side
        holds NaN or inf (a NaN never agrees, not even with another NaN); UNTESTED when
        ``full`` and ``cached`` are the same tensor (nothing was compared).
    """
    full = require_tensor("full", full, rank=3, dtype="floating", shape_hint="(B, T, V)")
    cached = require_tensor("cached", cached, rank=3, dtype="floating", shape_hint="(B, T, V)")
    require_same_shape("full", full, "cached", cached)
    require_nonempty("full", full, "B, T, V")
    require_values("full", full)
    require_values("cached", cached)
    atol = (
        tolerance_for(1e-5, full.dtype, cached.dtype)
        if atol is None
        else require_real("atol", atol, positive=True)
    )
    if full is cached or (
        full.data_ptr() == cached.data_ptr() and full.stride() == cached.stride()
    ):
        return _untested("cached = full logits", "full and cached are the same tensor")
    finite = torch.isfinite(full) & torch.isfinite(cached)  # (B, T, V)
    gap = (full - cached).abs().masked_fill(~finite, math.inf)  # (B, T, V)
    gap = gap.flatten(2).amax(-1).amax(0)  # (T,)
    bad = (gap > atol).nonzero().flatten().tolist()
    first = f"first divergence at position {bad[0]}" if bad else "no divergence"
    detail = f"max gap {_size(gap.max().item(), atol, '.2g')}; {first}"
    if not finite.all():
        counts = [int((~torch.isfinite(z)).sum()) for z in (full, cached)]
        detail += f" (NaN or inf: {counts[0]} in full, {counts[1]} in cached)"
    return Check("cached = full logits", not bad, detail)
