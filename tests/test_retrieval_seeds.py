"""Batched multi-seed training of the retrieval model: each seed is the run `train` would do.

The chapter's recipe is re-run at its ten seeds and its regression thresholds asserted; they
are forgiving checks that the recipe still works, not guarantees.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnbook.retrieval import RetrievalConfig, RetrievalData, make_data
from attnbook.retrieval_model import (
    TinyRetriever,
    final_logits,
    intervention_accuracy,
    no_context_accuracy,
    score,
    train,
)
from attnbook.retrieval_seeds import _stack, _stacked_forward, stacked_accuracy, train_seeds

CONFIG = RetrievalConfig()
RECIPE = dataclasses.replace(CONFIG, steps=80, lr=1e-2)  # the chapter's
SEEDS = list(range(12, 22))


def _data(count, config=CONFIG, seed=120, **kwargs) -> RetrievalData:
    return make_data(count, config, torch.Generator().manual_seed(seed), **kwargs)


@pytest.mark.parametrize("records", [1, 4, 9])
def test_query_logits_equal_the_full_models_last_position(records):
    config = dataclasses.replace(CONFIG, keys=16, records=records)
    data = _data(40, config)
    models = [TinyRetriever(config) for _ in range(3)]
    with torch.no_grad():
        got = _stacked_forward(
            _stack(models), config.heads, *(x.expand(3, -1, -1) for x in (data.keys, data.values))
        )
        want = torch.stack([final_logits(m, data) for m in models])
    torch.testing.assert_close(got, want)


def test_each_seed_is_the_run_train_does():
    config = dataclasses.replace(CONFIG, steps=25)
    data = _data(CONFIG.train_size)
    models, losses, initial = train_seeds(config, data, [12, 30])
    for i, seed in enumerate((12, 30)):
        alone, alone_losses, alone_initial = train(dataclasses.replace(config, seed=seed), data)
        torch.testing.assert_close(losses[i], torch.tensor(alone_losses), rtol=1e-4, atol=1e-5)
        assert abs(initial[i].item() - alone_initial) < 1e-5
        for (name, a), b in zip(models[i].named_parameters(), alone.parameters(), strict=True):
            if name == "qkv.bias":  # the key bias shifts every score of a row equally, so its
                d = config.width  # true gradient is 0; AdamW magnifies rounding noise there
                a, b = a[torch.arange(3 * d) // d != 1], b[torch.arange(3 * d) // d != 1]
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)


def test_seeds_do_not_interact_even_when_clipping_acts():
    config = dataclasses.replace(CONFIG, steps=15, clip=0.05)  # clipping acts on every step
    data = _data(256)
    together = train_seeds(config, data, [3, 4, 5])[1]
    for i, seed in enumerate((3, 4, 5)):
        torch.testing.assert_close(together[i], train_seeds(config, data, [seed])[1][0])


def test_stacked_accuracy_equals_score():
    data = _data(CONFIG.train_size)
    models = train_seeds(dataclasses.replace(CONFIG, steps=20), data, [0, 1])[0]
    test = _data(200, seed=9, exclude=data.signatures)
    expected = torch.tensor([score(m, test)[1] for m in models])
    torch.testing.assert_close(stacked_accuracy(models, test), expected)


@pytest.mark.slow
def test_the_chapter_recipe_meets_the_lab_thresholds_at_every_seed():
    torch.set_num_threads(1)
    train_set = _data(CONFIG.train_size)
    test_set = _data(CONFIG.test_size, seed=121, exclude=train_set.signatures)
    models, losses, initial = train_seeds(RECIPE, train_set, SEEDS)
    assert losses.shape == (len(SEEDS), RECIPE.steps)
    for model, first in zip(models, initial, strict=True):
        test_loss, accuracy = score(model, test_set)
        assert test_loss < first / 4 and accuracy > 0.90
        assert no_context_accuracy(model, test_set) < 0.25
        assert intervention_accuracy(model, test_set) > 0.85
    # same seeds, same run: deterministic on one thread
    assert torch.equal(train_seeds(RECIPE, train_set, SEEDS[:2])[1], losses[:2])


def test_bad_arguments():
    data = _data(64)
    with pytest.raises(ValueError, match="seeds"):
        train_seeds(CONFIG, data, [])
    with pytest.raises(ValueError, match="distinct"):
        train_seeds(CONFIG, data, [1, 1])
    with pytest.raises(ValueError, match="seeds"):
        train_seeds(CONFIG, data, [-1])
    with pytest.raises(TypeError, match="config"):
        train_seeds("config", data, [1])
    with pytest.raises(TypeError, match="data"):
        train_seeds(CONFIG, "data", [1])
    with pytest.raises(TypeError, match="models"):
        stacked_accuracy([], data)
    with pytest.raises(TypeError, match="configuration"):
        stacked_accuracy(
            [TinyRetriever(CONFIG), TinyRetriever(dataclasses.replace(CONFIG, keys=9))], data
        )
