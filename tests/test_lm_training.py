"""Training the tiny GPT: the schedule, the per-position loss against a direct computation,
and reproducibility. Chapter 13's run on other seeds and CPU code paths is the robustness
sweep's job (``benchmarks/sweep.py``, checked by ``tests/test_sweep.py``)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.lm_training import TrainConfig, position_losses, train_lm


def test_schedule_warms_up_then_decays_to_a_tenth():
    recipe = TrainConfig(steps=100, warmup=10, lr=1.0)
    lrs = [recipe.lr_at(s) for s in range(100)]
    assert lrs[0] == 0.1 and lrs[9] == 1.0  # linear warmup reaches the peak at step warmup - 1
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))  # then only decays
    assert math.isclose(recipe.lr_at(100), 0.1) and min(lrs[10:]) > 0.1
    with pytest.raises(ValueError, match="step must be >= 0"):
        recipe.lr_at(-1)


def test_position_losses_average_to_the_plain_cross_entropy():
    torch.manual_seed(0)
    config = GPTConfig(vocab=7, width=8, heads=2, kv_heads=1, context=5)
    model, ids = TinyGPT(config).eval(), torch.randint(7, (23,))
    per_position = position_losses(model, ids, batch=2)
    windows = torch.stack([ids[i : i + 6] for i in range(0, 20, 5)])  # 4 windows, 1 id overlap
    with torch.no_grad():
        logits = model(windows[:, :-1])
    direct = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(0)
    torch.testing.assert_close(per_position, direct)
    torch.testing.assert_close(position_losses(model, ids, batch=3), per_position)
    with pytest.raises(ValueError, match="more than context=5"):
        position_losses(model, ids[:5])


def test_training_is_reproducible_and_leaves_the_global_rng_alone():
    config = GPTConfig(vocab=5, width=8, heads=2, kv_heads=1, context=8)
    recipe = TrainConfig(steps=6, batch=2, warmup=2)
    ids = torch.randint(5, (200,), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first, losses = train_lm(config, recipe, ids)
    assert torch.equal(torch.get_rng_state(), state)
    second, again = train_lm(config, recipe, ids)
    assert losses == again and len(losses) == 6 and not first.training
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_callback_sees_every_step_and_changes_nothing():
    config = GPTConfig(vocab=5, width=8, heads=2, kv_heads=1, context=8)
    recipe = TrainConfig(steps=6, batch=2, warmup=2)
    ids = torch.randint(5, (200,), generator=torch.Generator().manual_seed(3))
    seen = []

    def evaluate(step, model):  # draws from the global RNG and runs the model, as a reader's might
        assert not model.training and not torch.is_grad_enabled()
        seen.append((step, position_losses(model, ids).mean().item(), torch.rand(1).item()))

    plain, losses = train_lm(config, recipe, ids)
    watched, again = train_lm(config, recipe, ids, callback=evaluate)
    assert [s for s, _, _ in seen] == list(range(7)) and again == losses
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a, b)
    assert seen[-1][1] == position_losses(watched, ids).mean().item()  # the final model
    with pytest.raises(TypeError, match="callback must be callable"):
        train_lm(config, recipe, ids, callback=3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"steps": 0}, ValueError, "steps must be >= 1"),
        ({"warmup": -1}, ValueError, "warmup must be >= 0"),
        ({"lr": 0.0}, ValueError, "lr must be > 0"),
        ({"weight_decay": -0.1}, ValueError, "weight_decay must be >= 0"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
    ],
)
def test_bad_recipe(kwargs, error, match):
    with pytest.raises(error, match=match):
        TrainConfig(**kwargs)
