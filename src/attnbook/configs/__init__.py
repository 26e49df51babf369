"""Configurations of real decoder-only models, as small JSON files, and their GPTConfig.

Each ``<name>.json`` here holds the architecture fields of one published model under the names
of its Hugging Face ``config.json`` (``hidden_size``, ``num_key_value_heads``, ...), written by
the project from the published numbers, plus three of its own: ``hf_id`` (where the model is
published), ``published_parameters`` (the parameter count its published weights hold) and,
for Meta's Llama models, ``meta_ffn`` (the ``multiple_of`` and ``ffn_dim_multiplier`` of
Meta's ``params.json``, from which :func:`attnbook.costs.swiglu_hidden` derives
``intermediate_size``). Nothing is downloaded: the files ship with the package.

:func:`gpt_config` turns one into a :class:`attnbook.gpt.GPTConfig`, so that
:func:`attnbook.gpt.param_count`, :func:`attnbook.gpt.forward_flops` and
:func:`attnbook.costs.kv_cache_bytes` apply to it as to the book's toy models. The layout
they count is shared by Llama, Mistral, Qwen2 and Gemma (Gemma's GeGLU activation and its
embedding scale change the arithmetic, not the shapes).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from attnbook._checks import require_instance
from attnbook.gpt import GPTConfig

__all__ = ["gpt_config", "load", "names"]

# Qwen2 puts biases on W_Q, W_K and W_V always; its config.json has no switch for them.
_QKV_BIAS = {"qwen2"}


def names() -> list[str]:
    """The shipped configurations, sorted: ``["gemma-2b", "gemma-7b", "llama-2-70b", ...]``."""
    folder = resources.files(__name__)
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def load(name: str) -> dict[str, Any]:
    """The fields of configuration ``name`` (one of :func:`names`), as a new dict."""
    require_instance("name", name, str)
    known = names()
    if name not in known:
        raise ValueError(f"name must be one of {known}, got {name!r}")
    return json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text())


def gpt_config(config: str | dict[str, Any]) -> GPTConfig:
    """A :class:`GPTConfig` with the sizes of a real model.

    Args:
        config: a name from :func:`names`, or a dict with Hugging Face's field names (at least
            ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
            ``intermediate_size``; ``num_key_value_heads`` defaults to the heads,
            ``head_dim`` to ``hidden_size // num_attention_heads``).

    Returns:
        The GPTConfig; its ``context`` is ``max_position_embeddings``.

    Raises:
        TypeError: ``config`` neither a str nor a dict.
        ValueError: an unknown name, or a dict without a required field.
    """
    if isinstance(config, str):
        config = load(config)
    require_instance("config", config, dict)
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size")  # fmt: skip
    missing = [key for key in required if key not in config]
    if missing:
        raise ValueError(f"config lacks the field(s) {missing}")
    heads = config["num_attention_heads"]
    return GPTConfig(
        vocab=config["vocab_size"],
        width=config["hidden_size"],
        layers=config["num_hidden_layers"],
        heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        hidden=config["intermediate_size"],
        context=config.get("max_position_embeddings", 2048),
        rope_base=config.get("rope_theta", 10000.0),
        eps=config.get("rms_norm_eps", 1e-6),
        head_width=config.get("head_dim") or 0,
        qkv_bias=config.get("model_type") in _QKV_BIAS,
        tie_embeddings=config.get("tie_word_embeddings", True),
    )
