"""Each diagnostic passes on a healthy setup and fails on a planted bug."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnbook.attention import attention
from attnbook.diagnostics import (
    Check,
    check_attention_rows,
    check_cache,
    check_causality,
    check_isolation,
    check_label_shift,
    check_loss_masking,
)
from attnbook.masks import causal_mask, segment_mask
from attnbook.training_health import (
    attention_entropy,
    grad_norm,
    measure_memory,
    watch_activations,
)


def _layer(mask: torch.Tensor | None):
    """Single-head self-attention on embeddings with a fixed mask, (B, T, d) -> (B, T, d)."""
    return lambda x: attention(x[:, None], x[:, None], x[:, None], mask)[:, 0]


def test_check_prints_its_verdict():
    assert str(Check("x", False, "why")) == "FAIL  x: why"


def test_label_shift():
    tokens = torch.randint(10, (3, 9))
    assert check_label_shift(tokens[:, :-1], tokens[:, 1:]).passed
    assert not check_label_shift(tokens[:, :-1], tokens[:, :-1]).passed  # never shifted
    twice = tokens[:, 2:].clone()
    assert not check_label_shift(tokens[:, :-2], twice).passed  # shifted twice
    padded = tokens[:, 1:].clone()
    padded[0, 4:] = -100  # ignored labels are not compared
    assert check_label_shift(tokens[:, :-1], padded).passed
    with pytest.raises(ValueError, match="equal shapes"):
        check_label_shift(tokens, tokens[:, 1:])


def test_loss_masking_catches_both_halves_of_the_contract():
    labels = torch.randint(5, (2, 6))
    valid = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    ignored = labels.masked_fill(~valid, -100)

    def good(logits, y):
        return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)

    def counts_padding(logits, y):  # right numerator, wrong denominator
        losses = nn.functional.cross_entropy(
            logits.flatten(0, 1), y.flatten(), ignore_index=-100, reduction="none"
        )
        return losses.sum() / y.numel()

    def trains_on_padding(logits, y):  # padding kept as real labels
        return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    assert check_loss_masking(good, ignored, valid, 5).passed
    assert not check_loss_masking(counts_padding, ignored, valid, 5).passed
    assert not check_loss_masking(trains_on_padding, labels, valid, 5).passed


def test_causality_and_isolation():
    x = torch.randn(2, 6, 4)
    assert check_causality(_layer(causal_mask(6)), x).passed
    assert not check_causality(_layer(None), x).passed
    leaky = torch.ones(6, 6, dtype=torch.bool).tril(1)  # each query also sees the next key
    result = check_causality(_layer(leaky), x)
    assert not result.passed and "output 0 sees" in result.detail
    ids = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    assert check_isolation(_layer(causal_mask(6) & segment_mask(ids)), x, ids).passed
    assert not check_isolation(_layer(causal_mask(6)), x, ids).passed


def test_attention_rows():
    q, k = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    allowed = causal_mask(5)
    _, w = attention(q, k, k, allowed, return_weights=True)
    assert check_attention_rows(w, allowed).passed
    after = torch.softmax(q @ k.transpose(-1, -2), -1) * allowed  # masked after the softmax
    assert not check_attention_rows(after, allowed).passed
    _, flipped = attention(q, k, k, ~allowed | torch.eye(5, dtype=torch.bool), return_weights=True)
    assert not check_attention_rows(flipped, allowed).passed  # MHA's convention fed to SDPA's


def test_cache_reports_the_first_diverging_position():
    full = torch.randn(2, 5, 7)
    assert check_cache(full, full.clone()).passed
    bad = full.clone()
    bad[1, 3] += 1e-2
    result = check_cache(full, bad)
    assert not result.passed and "position 3" in result.detail


def test_entropy_against_hand_values():
    w = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    torch.testing.assert_close(attention_entropy(w), torch.tensor([0.0, math.log(4)]))


def test_watch_activations_names_the_first_non_finite_module():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    with torch.no_grad():
        model[1].weight[0, 0] = float("inf")
    records = watch_activations(model, torch.ones(1, 3))
    names = [name for name, _, _ in records]
    assert names == ["0", "1", "<model>"]
    assert records[0][2] and not records[1][2]
    assert not model._forward_hooks and not model[0]._forward_hooks  # hooks removed


def test_grad_norm_is_what_clipping_reports():
    model = nn.Linear(4, 3)
    model(torch.randn(8, 4)).pow(2).sum().backward()
    before = grad_norm(model)
    reported = nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    assert before == pytest.approx(reported.item(), rel=1e-6)
    assert grad_norm(model) == pytest.approx(1e-3, rel=1e-3)


def test_memory_split_against_hand_counts():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters())

    def report(batch):
        x = torch.randn(batch, 8)
        return measure_memory(model, opt, lambda: model(x).pow(2).mean())

    small, large = report(10), report(40)
    assert small.parameters == small.gradients == 4 * n_params
    assert small.optimizer == 2 * 4 * n_params  # two AdamW moments (the step count is a scalar)
    assert large.parameters == small.parameters and large.optimizer == small.optimizer
    assert large.activations == 4 * small.activations  # every saved tensor scales with batch


# --- NaN and inf never PASS; tolerances follow the dtype --------------------------------------

NAN = float("nan")


def test_cache_fails_on_nan_on_either_side_or_both():
    full = torch.randn(2, 4, 5)
    cached = full.clone()
    cached[1, 2, 3] = NAN
    for pair in ((full, cached), (cached, full), (cached, cached.clone())):
        result = check_cache(*pair)
        assert not result.passed and "position 2" in result.detail and "NaN or inf" in result.detail
    inf = full.clone()
    inf[0, 1, 0] = float("inf")
    assert not check_cache(inf, inf.clone()).passed  # inf - inf is no agreement either


def test_cache_tolerance_is_exactly_atol():
    full = torch.zeros(1, 3, 4, dtype=torch.float64)
    for gap, passes in ((0.5e-5, True), (2e-5, False)):  # the default atol is 1e-5
        cached = full.clone()
        cached[0, 2, 1] = gap
        assert check_cache(full, cached).passed is passes
    cached[0, 2, 1] = 2e-5
    assert check_cache(full, cached, atol=3e-5).passed
    assert not check_cache(full, cached, atol=1.5e-5).passed


def test_cache_default_tolerance_widens_for_float16():
    logits = 4 * torch.randn(2, 6, 10)
    full = logits.half()
    cached = (logits + 1e-4 * torch.randn(logits.shape)).half()  # rounding-level differences
    assert (full - cached).abs().max() > 0 and check_cache(full, cached).passed
    cached[1, 4, 2] += 0.5  # a real divergence
    result = check_cache(full, cached)
    assert not result.passed and "position 4" in result.detail


def _nan_at(position, fn):
    def wrapped(x):
        out = fn(x).clone()
        out[:, position] = NAN
        return out

    return wrapped


@pytest.mark.parametrize("mask", [None, causal_mask(6)], ids=["leaky", "causal"])
def test_causality_fails_when_outputs_are_not_finite(mask):
    x = torch.randn(2, 6, 4)
    for position in (0, 3, 5):
        result = check_causality(_nan_at(position, _layer(mask)), x)
        assert not result.passed and f"first at position {position}" in result.detail


def test_causality_fails_when_a_future_edit_turns_an_earlier_output_nan():
    x = torch.randn(1, 4, 3)

    def fn(z):  # finite on x itself; output 0 turns NaN once the last position changes
        out = z.clone()
        changed = (z[:, -1] != x[:, -1]).any(-1)  # (B,)
        out[:, 0] = torch.where(changed[:, None], NAN, out[:, 0])
        return out

    result = check_causality(fn, x)
    assert not result.passed and "first leak: output 0" in result.detail


def test_isolation_fails_on_a_leaky_function_with_nan_outputs():
    x = torch.randn(2, 6, 4)
    ids = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    leaky = _layer(causal_mask(6))  # ignores the segments
    assert not check_isolation(leaky, x, ids).passed
    assert not check_isolation(_nan_at(2, leaky), x, ids).passed
    isolated = _layer(causal_mask(6) & segment_mask(ids))
    assert check_isolation(isolated, x, ids).passed
    assert not check_isolation(_nan_at(2, isolated), x, ids).passed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_perturbation_checks_run_models_in_their_own_dtype(dtype):
    x = torch.randn(2, 6, 4, dtype=dtype)
    proj = nn.Linear(4, 4).to(dtype)  # float32 noise would make the matmul fail

    def model(mask):
        return lambda z: proj(_layer(mask)(z))

    assert check_causality(model(causal_mask(6)), x).passed
    assert not check_causality(model(None), x).passed
    ids = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    assert check_isolation(model(segment_mask(ids)), x, ids).passed


def test_attention_rows_ignores_rows_with_no_allowed_key():
    q, k = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    allowed = causal_mask(5, 5, offset=-2)  # the first two queries see no key at all
    _, w = attention(q, k, k, allowed, return_weights=True)
    assert torch.all(w[:, :2] == 0)
    assert check_attention_rows(w, allowed).passed  # an empty row is zeros, not a failure
    w[0, 1, 0] = 0.5  # but an empty row must stay empty
    assert not check_attention_rows(w, allowed).passed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_rows_default_tolerance_follows_the_dtype(dtype):
    q = torch.randn(2, 4, 64, 16).to(dtype)
    allowed = causal_mask(64)
    _, w = attention(q, q, q, allowed, return_weights=True)
    assert check_attention_rows(w, allowed).passed  # rounding in 16 bits is not a bug
    assert not check_attention_rows(w, allowed, atol=1e-7).passed  # but it is there
    assert not check_attention_rows(w * 0.9, allowed).passed  # a 10% error is


def test_attention_rows_fail_on_nan_or_inf():
    w = torch.full((3, 3), 1 / 3)
    allowed = torch.ones(3, 3, dtype=torch.bool)
    assert check_attention_rows(w, allowed).passed
    for bad in (NAN, float("inf")):
        broken = w.clone()
        broken[1, 1] = bad
        result = check_attention_rows(broken, allowed)
        assert not result.passed and "1 weights are NaN or inf" in result.detail


def test_label_shift_ignores_only_ignored_labels():
    tokens = torch.randint(10, (2, 6))
    labels = torch.full((2, 5), -100)
    labels[0, 2] = tokens[0, 3]  # one comparable label is enough
    assert check_label_shift(tokens[:, :-1], labels).passed
    labels[:, :-1] = -100
    labels[:, -1] = 3  # the last label has no next input to compare with
    with pytest.raises(ValueError, match="no label to compare"):
        check_label_shift(tokens[:, :-1], labels)


def test_entropy_of_16bit_weights_with_zeros_is_finite():
    w = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    for dtype in (torch.float16, torch.bfloat16):
        got = attention_entropy(w.to(dtype))
        assert got.dtype == dtype and torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), torch.tensor([0.0, math.log(4)]), atol=1e-2, rtol=0)


def test_grad_norm_of_float16_gradients_does_not_overflow():
    model = nn.Linear(2, 1, bias=False).half()
    model.weight.grad = torch.tensor([[60000.0, 60000.0]]).half()
    assert grad_norm(model) == pytest.approx(60000 * math.sqrt(2), rel=1e-3)


def test_isolation_fails_when_editing_another_document_turns_outputs_nan():
    x = torch.randn(1, 6, 4)
    ids = torch.tensor([[0, 0, 0, 1, 1, 1]])

    def fn(z):  # finite on x; document 0's outputs turn NaN once document 1 changes
        out = z.clone()
        changed = (z[:, 3:] != x[:, 3:]).any()
        out[:, :3] = torch.where(changed, NAN, out[:, :3])
        return out

    assert not check_isolation(fn, x, ids).passed


def _token_mean(logits, y):
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)


def test_a_check_with_nothing_to_test_says_so_and_never_passes():
    """Each check's vacuous input: both classic loss bugs on a batch without padding, a
    forgotten pad label with ``valid`` derived from the labels, a layer with no mask on rows
    of one document each, the same logits twice. None may print PASS."""
    labels = torch.randint(5, (2, 6))
    everywhere = torch.ones(2, 6, dtype=torch.bool)

    def counts_padding(logits, y):
        per = nn.functional.cross_entropy(
            logits.flatten(0, 1), y.flatten(), ignore_index=-100, reduction="none"
        )
        return per.sum() / y.numel()

    for loss in (_token_mean, counts_padding):
        result = check_loss_masking(loss, labels, everywhere, 5)
        assert not result.passed and not result.tested and str(result).startswith("UNTESTED")
    lengths = torch.tensor([6, 3])
    real = torch.arange(6)[None] < lengths[:, None]  # from the lengths: the right source
    pad_trained = labels.masked_fill(~real, 0)  # the bug: padding labelled with id 0
    from_labels = pad_trained != -100  # the wrong source: True everywhere
    assert not check_loss_masking(_token_mean, pad_trained, from_labels, 5).tested
    assert not check_loss_masking(_token_mean, pad_trained, real, 5).passed  # FAIL, tested
    assert check_loss_masking(_token_mean, labels.masked_fill(~real, -100), real, 5).passed

    x = torch.randn(2, 6, 4)
    one_each = torch.tensor([[0] * 6, [1] * 6])
    result = check_isolation(_layer(None), x, one_each)
    assert not result.passed and not result.tested
    two_in_a_row = torch.tensor([[0, 0, 0, 1, 1, 1], [2] * 6])
    failed = check_isolation(_layer(None), x, two_in_a_row)
    assert failed.tested and not failed.passed

    logits = torch.randn(1, 3, 5)
    assert not check_cache(logits, logits).tested
    assert check_cache(logits, logits.clone()).passed
    with pytest.raises(ValueError, match="tested nothing"):
        Check("x", True, "why", tested=False)


def test_label_shift_accepts_the_shift_inside_the_loss_convention():
    tokens = torch.randint(10, (3, 9))
    inputs = tokens[:, :-1]
    hf = check_label_shift(inputs, inputs.clone(), shift_in_loss=True)
    assert hf.passed and "in the loss" in hf.name
    assert not check_label_shift(inputs, tokens[:, 1:], shift_in_loss=True).passed  # twice
    assert not check_label_shift(inputs, inputs.clone()).passed  # never shifted
    with pytest.raises(TypeError, match="shift_in_loss"):
        check_label_shift(inputs, inputs, shift_in_loss="yes")


def test_causality_runs_a_module_in_eval_mode_and_refuses_a_random_function():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(_layer(causal_mask(x.shape[1]))(x))

    block = Block().train()
    result = check_causality(block, torch.randn(2, 6, 4))
    assert result.passed and block.training and block.drop.training  # modes restored

    def noisy(x):  # dropout outside any module
        return nn.functional.dropout(_layer(causal_mask(x.shape[1]))(x), 0.5, training=True)

    with pytest.raises(ValueError, match="different outputs for the same x"):
        check_causality(noisy, torch.randn(2, 6, 4))


def test_accumulation_catches_the_mean_of_micro_batch_means():
    from attnbook.diagnostics import check_accumulation

    def token_mean(logits, y):
        return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)

    def mean_of_means(logits_list, labels_list):  # the bug: each micro-batch weighs the same
        pairs = zip(logits_list, labels_list, strict=True)
        return sum(token_mean(lg, y) for lg, y in pairs) / len(logits_list)

    def token_weighted(logits_list, labels_list):  # the fix: divide by all valid tokens
        total = sum(int((y != -100).sum()) for y in labels_list)
        sums = [
            nn.functional.cross_entropy(
                lg.flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum"
            )
            for lg, y in zip(logits_list, labels_list, strict=True)
        ]
        return sum(sums) / total

    labels = torch.randint(7, (4, 6))
    valid = torch.arange(6)[None] < torch.tensor([6, 6, 2, 1])[:, None]
    ignored = labels.masked_fill(~valid, -100)
    assert check_accumulation(token_weighted, ignored, valid, 7, micro=2).passed
    bug = check_accumulation(mean_of_means, ignored, valid, 7, micro=2)
    assert bug.tested and not bug.passed and "[12, 3]" in bug.detail
    even = torch.ones(4, 6, dtype=torch.bool)  # equal counts: the bug cannot show
    assert not check_accumulation(mean_of_means, labels, even, 7, micro=2).tested
    assert check_accumulation(token_weighted, ignored, valid, 7, micro=1).tested is False
    with pytest.raises(ValueError, match="micro"):
        check_accumulation(token_weighted, ignored, valid, 7, micro=5)
