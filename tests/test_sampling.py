"""Sampling: the cached and the uncached path draw the same tokens from the same logits, and
those logits are the full pass's logits at the same positions."""

from __future__ import annotations

import pytest
import torch

from attnbook.diagnostics import check_cache
from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.sampling import generate

CONFIG = GPTConfig(vocab=13, width=16, layers=2, heads=4, kv_heads=2, context=20)


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(CONFIG).eval()


def test_cached_and_uncached_sampling_agree():
    model, prompt = _model(), torch.randint(13, (2, 4))
    runs = [
        generate(model, prompt, 12, generator=torch.Generator().manual_seed(5), use_cache=flag)
        for flag in (True, False)
    ]
    (ids, logits), (ids_full, logits_full) = runs
    assert ids.shape == (2, 16) and logits.shape == (2, 12, 13)
    assert torch.equal(ids[:, :4], prompt) and torch.equal(ids, ids_full)
    assert check_cache(logits_full, logits).passed


def test_step_logits_are_the_full_pass_logits_at_the_same_positions():
    model, prompt = _model(), torch.randint(13, (1, 3))
    ids, logits = generate(model, prompt, 10, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)[:, 2:-1]  # position t predicts token t + 1
    assert check_cache(full, logits).passed


def test_low_temperature_is_greedy():
    model, prompt = _model(), torch.randint(13, (1, 2))
    ids, logits = generate(model, prompt, 8, temperature=1e-6)
    assert torch.equal(ids[0, 2:], logits[0].argmax(-1))


def test_top_k_draws_only_among_the_k_largest_logits():
    model, prompt = _model(), torch.randint(13, (4, 2), generator=torch.Generator().manual_seed(2))
    for k in (1, 3):
        ids, logits = generate(
            model, prompt, 10, top_k=k, temperature=5.0, generator=torch.Generator().manual_seed(k)
        )
        rank = (logits > logits.gather(-1, ids[:, 2:, None])).sum(-1)  # (B, steps) larger logits
        assert rank.max() < k  # each draw is among the k largest of its own logits
        if k == 1:  # greedy, whatever the temperature
            assert torch.equal(ids[:, 2:], logits.argmax(-1))
    hot = generate(model, prompt, 10, temperature=5.0, generator=torch.Generator().manual_seed(3))
    hot_ids, hot_logits = hot
    drawn = hot_logits.gather(-1, hot_ids[:, 2:, None])  # (B, steps, 1)
    assert (drawn < hot_logits.topk(3).values[..., -1:]).any(), (
        "without top_k a hot sampler leaves the top 3 (the test above could not fail)"
    )
    every = generate(model, prompt, 10, top_k=13, generator=torch.Generator().manual_seed(4))
    plain = generate(model, prompt, 10, generator=torch.Generator().manual_seed(4))
    assert torch.equal(every[0], plain[0])  # top_k = V keeps every token


@pytest.mark.parametrize(
    "prompt", [torch.zeros(0, 3, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long),
               torch.tensor([[0, 13]]), torch.tensor([[-1, 2]])],
)  # fmt: skip
@pytest.mark.parametrize("use_cache", [True, False])
def test_a_bad_prompt_is_rejected_by_name(prompt, use_cache):
    with pytest.raises(
        ValueError, match=r"prompt must be a non-empty \(B, P\) of ids in \[0, 13\)"
    ):
        generate(_model(), prompt, 2, use_cache=use_cache)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"steps": 17}, ValueError, "exceeds the model's context=20"),
        ({"steps": 0}, ValueError, "steps must be >= 1"),
        ({"temperature": 0.0}, ValueError, "temperature must be > 0"),
        ({"use_cache": 1}, TypeError, "use_cache must be True or False"),
        ({"generator": 3}, TypeError, "generator must be a Generator"),
        ({"top_k": 0}, ValueError, "top_k must be >= 1"),
        ({"top_k": 14}, ValueError, "top_k must be <= 13"),
        ({"top_k": 2.0}, TypeError, "top_k must be an int"),
    ],
)
def test_bad_input(kwargs, error, match):
    with pytest.raises(TypeError, match=r"prompt must be a torch\.Tensor"):
        generate(_model(), [[1, 2]], 2)
    with pytest.raises(error, match=match):
        generate(_model(), torch.zeros(1, 4, dtype=torch.long), **{"steps": 2, **kwargs})
