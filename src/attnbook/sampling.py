"""Autoregressive sampling from :class:`attnbook.gpt.TinyGPT`, with or without a KV cache.

With the cache, the prompt is run once (prefill) and each later step feeds only the newest
token; without it, every step runs the whole sequence again. Both paths see the same
positions and histories, so their logits agree up to float rounding.
"""

from __future__ import annotations

import torch

from attnbook._checks import (
    require_bool,
    require_instance,
    require_int,
    require_real,
    require_tensor,
    require_values,
)
from attnbook.gpt import TinyGPT

__all__ = ["generate"]


def generate(
    model: TinyGPT,
    prompt: torch.Tensor,
    steps: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``steps`` tokens after ``prompt``, one at a time, without gradients.

    Args:
        model: the language model (put it in eval mode first if it has dropout; this one has
            none).
        prompt: integer ids ``(B, P)`` in ``[0, V)`` with ``B, P >= 1``.
        steps: new tokens to sample (``>= 1``); ``P + steps`` must fit ``model.config.context``,
            the size of the cache.
        temperature: divides the logits before the softmax (> 0, finite); lower is greedier,
            and a temperature so small that every gap between logits overflows samples the
            argmax (ties split evenly).
        top_k: sample only among the ``top_k`` largest logits of each step (``1 <= top_k <=
            V``; ties at the cut-off are all kept); ``None`` keeps every token. Applied
            before the temperature, so ``top_k=1`` is greedy at any temperature.
        generator: the sampling noise, for reproducible text.
        use_cache: decode with a :class:`attnbook.kv_cache.KVCache` (default) or rerun the
            full sequence at every step.

    Returns:
        ``(ids, logits)``: ``ids (B, P + steps)`` is the prompt followed by the samples, and
        ``logits (B, steps, V)`` holds the logits each sample was drawn from (before the
        temperature), so that the two paths can be compared step by step.

    Raises:
        TypeError: ``model`` not a :class:`TinyGPT`, a non-int ``steps`` or ``top_k``, a non-real
            ``temperature``, a non-bool ``use_cache``, a ``generator`` that is not a
            ``torch.Generator``, or ``prompt`` not an integer tensor.
        ValueError: ``steps < 1``, ``temperature <= 0`` or not finite, ``top_k`` outside
            ``[1, V]``, ``prompt`` empty,
            outside ``[0, V)``, without values (``meta``) or too long for the context, or a
            model whose logits are not finite (a NaN weight, say): nothing can be sampled.
    """
    require_instance("model", model, TinyGPT)
    steps = require_int("steps", steps, minimum=1)
    temperature = require_real("temperature", temperature, positive=True)
    use_cache = require_bool("use_cache", use_cache)
    if generator is not None:
        require_instance("generator", generator, torch.Generator)
    prompt = require_tensor("prompt", prompt, rank=2, dtype="integer", shape_hint="(B, P)")
    require_values("prompt", prompt)
    context, vocab = model.config.context, model.config.vocab
    if top_k is not None:
        top_k = require_int("top_k", top_k, minimum=1, maximum=vocab)
    if prompt.numel() == 0 or prompt.min() < 0 or prompt.max() >= vocab:
        raise ValueError(
            f"prompt must be a non-empty (B, P) of ids in [0, {vocab}), got shape "
            f"{tuple(prompt.shape)}"
        )
    if prompt.shape[1] + steps > context:
        raise ValueError(
            f"prompt of {prompt.shape[1]} tokens plus steps={steps} exceeds the model's "
            f"context={context}"
        )
    ids, history = prompt, []
    with torch.no_grad():
        cache = model.new_cache(batch=prompt.shape[0]) if use_cache else None
        logits = model(prompt, cache=cache)[:, -1]  # (B, V): checks the prompt, too
        for step in range(steps):
            history.append(logits)
            if not torch.isfinite(logits).all():
                raise ValueError(
                    f"model gave non-finite logits at step {step} (a NaN or inf weight?); "
                    "there is no distribution to sample from"
                )
            kept = logits
            if top_k is not None:  # below the k-th largest logit: never drawn
                cut = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
                kept = logits.masked_fill(logits < cut, -torch.inf)  # (B, V)
            scaled = kept / temperature  # (B, V)
            if (torch.isfinite(scaled) | (kept == -torch.inf)).all():  # cut tokens are -inf
                probs = torch.softmax(scaled, dim=-1)  # (B, V)
            else:  # a temperature so small that the gaps overflow: the T -> 0 limit, argmax
                probs = (kept == kept.amax(-1, keepdim=True)).to(logits.dtype)  # (B, V)
            token = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            ids = torch.cat((ids, token), dim=1)  # (B, P + step + 1)
            if step + 1 < steps:
                logits = (model(token, cache=cache) if use_cache else model(ids))[:, -1]
    return ids, torch.stack(history, dim=1)  # (B, P + steps), (B, steps, V)
