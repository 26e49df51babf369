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
