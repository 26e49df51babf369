"""Head explorer: one head's attention row over a repeated random sequence.

The attention maps are those of the models trained in the induction-heads chapter (five seeds
of a two-layer and of a one-layer attention-only model, :mod:`attnbook.induction_model`) on
one sample sequence: 12 random tokens, then the same 12 again. They are stored with the
package (``widgets/data/head_explorer.json``, rounded to 3 decimals, about 30 KB), so both
faces show the same numbers with no model at hand: the JavaScript only looks rows up.
``scripts/induction_widget_data.py`` retrains the models and rewrites the file; the chapter
prints how far its own freshly trained models are from it, and strict nbval, which compares
that printed line with the stored one, fails when they drift apart on the build machine.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from attnbook._checks import require_int, require_integral
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["MODELS", "SPEC", "head_explorer", "head_state", "sample_maps"]

MODELS = ("two-layer", "one-layer")
SAMPLE_SEED = 5  # seeds the sample sequence (pattern length 12, no padding)
COLOURS = {"previous": "#E69F00", "induction": "#009E73", "other": "#0072B2"}


@cache
def _stored() -> dict:
    text = resources.files("attnbook.widgets").joinpath("data", "head_explorer.json")
    return json.loads(text.read_text("utf-8"))


def sample_maps(models: dict, history: dict) -> dict:
    """The widget's data from trained models: what the JSON file stores.

    Args:
        models: ``{"two-layer": AttentionOnly, "one-layer": AttentionOnly}``, trained with the
            default :class:`attnbook.induction_model.InductionConfig` (the second with
            ``layers=1``).
        history: the matching training histories from :func:`attnbook.induction_model.train`;
            the last evaluation's scores label each head.

    Returns:
        ``{"tokens", "length", "maps", "scores"}``: the sample sequence ``(T,)``, its pattern
        length, ``maps[model][seed][layer][query]`` (the causal row, ``query + 1`` weights) and
        ``scores[model]["previous"|"induction"][seed][layer]``, all rounded to 3 decimals.
    """
    import torch

    from attnbook.induction import make_repeats

    config = models[MODELS[0]].config
    generator = torch.Generator().manual_seed(SAMPLE_SEED)
    tokens, lengths = make_repeats(
        1, vocab=config.vocab, min_len=config.max_len, max_len=config.max_len, generator=generator
    )
    maps, scores = {}, {}
    for name in MODELS:
        with torch.no_grad():
            weights = models[name](tokens)[1][:, :, 0, 0]  # (S, L, T, T): the one head
        maps[name] = [
            [[[round(w, 3) for w in row[: q + 1]] for q, row in enumerate(m.tolist())] for m in s]
            for s in weights
        ]
        scores[name] = {
            kind: [[round(v, 3) for v in s] for s in history[name][kind][-1][..., 0].tolist()]
            for kind in ("previous", "induction")
        }
    return {
        "tokens": tokens[0].tolist(),
        "length": int(lengths[0]),
        "maps": maps,
        "scores": scores,
    }


def head_state(*, model: str, layer: int, query: int, seed: int) -> dict:
    """One head's attention row on the sample sequence.

    Args:
        model: ``"two-layer"`` or ``"one-layer"``.
        layer: the layer, which names the head (each layer has one): ``0`` or ``1``. The
            layer slider's range follows the model (``last_layer``), so for the one-layer
            model a layer past its last shows its last, as the slider then does.
        query: query position in ``[0, T)``; the row covers keys ``0 .. query``.
        seed: which of the trained models, in ``[0, S)``.

    Returns:
        A dict with the settings, ``tokens``, ``length``, ``weights`` (the row), the most-read
        ``top_key`` and its weight, the ``previous_key`` (``query - 1``, or None at 0) and the
        ``induction_key`` (the token after the previous occurrence of the query's token, or
        None in the first half, whose tokens are distinct) with their weights, and the head's
        ``previous_score`` and ``induction_score`` on held-out data.

    Raises:
        ValueError: an unknown model, or a layer, query or seed out of range.
        TypeError: a non-numeric setting.
    """
    data = _stored()
    if model not in MODELS:
        raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")
    seeds, layers = len(data["maps"][model]), len(data["maps"][model][0])
    t, length = len(data["tokens"]), data["length"]
    layer = require_integral("layer", layer, minimum=0)
    query = require_integral("query", query, minimum=0)
    seed = require_integral("seed", seed, minimum=0)
    most = max(len(data["maps"][m][0]) for m in MODELS)
    if layer >= most:
        raise ValueError(f"layer must be < {most} (the deepest model's layers), got {layer}")
    layer = min(layer, layers - 1)  # the slider follows the model (max_from="last_layer")
    if query >= t:
        raise ValueError(f"query must be < T={t}, got {query}")
    if seed >= seeds:
        raise ValueError(f"seed must be < {seeds} (models trained), got {seed}")
    weights = data["maps"][model][seed][layer][query]
    top_key = max(range(len(weights)), key=lambda j: (weights[j], -j))
    previous_key = query - 1 if query >= 1 else None
    induction_key = query - length + 1 if query >= length else None
    scores = data["scores"][model]
    return {
        "model": model,
        "layer": layer,
        "last_layer": layers - 1,
        "query": query,
        "seed": seed,
        "tokens": list(data["tokens"]),
        "length": length,
        "weights": list(weights),
        "top_key": top_key,
        "top_weight": weights[top_key],
        "previous_key": previous_key,
        "previous_weight": None if previous_key is None else weights[previous_key],
        "induction_key": induction_key,
        "induction_weight": None if induction_key is None else weights[induction_key],
        "previous_score": scores["previous"][seed][layer],
        "induction_score": scores["induction"][seed][layer],
    }


def _bars(state: dict, ax) -> None:
    t = len(state["tokens"])
    colours = [COLOURS["other"]] * len(state["weights"])
    if state["previous_key"] is not None:
        colours[state["previous_key"]] = COLOURS["previous"]
    if state["induction_key"] is not None:
        colours[state["induction_key"]] = COLOURS["induction"]
    ax.bar(range(len(state["weights"])), state["weights"], color=colours)
    ax.axvline(state["query"], color="grey", lw=1, ls="--")
    ax.axvline(state["length"] - 0.5, color="grey", lw=0.8, alpha=0.5)
    ax.set_xlim(-0.7, t - 0.3)
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(t), [str(tok) for tok in state["tokens"]], fontsize=7)
    ax.set_xlabel("key (token id; the second 12 repeat the first)")
    ax.set_ylabel("attention weight")


def _draw(state: dict, fig) -> None:
    from matplotlib.patches import Patch

    ax = fig.subplots()
    _bars(state, ax)
    ax.set_title(
        f"{state['model']} model, seed {state['seed']}, layer {state['layer']}, "
        f"query {state['query']} (token {state['tokens'][state['query']]})",
        fontsize=10,
    )
    handles = [
        Patch(color=COLOURS["previous"], label="previous token"),
        Patch(color=COLOURS["induction"], label="after previous occurrence"),
    ]
    ax.legend(handles=handles, loc="upper left", fontsize=8)


def _panel(state: dict, ax) -> None:
    _bars(state, ax)
    ax.set_xticks([])
    ax.set_xlabel("key position")
    ax.set_title(f"{state['model']}, layer {state['layer']}", fontsize=10)


_DATA = _stored()
_T = len(_DATA["tokens"])
_SEEDS = len(_DATA["maps"][MODELS[0]])

SPEC = WidgetSpec(
    name="head_explorer",
    title="Head explorer: where does one head look, on a sequence that repeats itself?",
    controls=(
        Control("model", "model", "select", "two-layer", options=MODELS),
        Control(
            "layer",
            "layer (one head each)",
            "range",
            0,
            min=0,
            max=1,
            step=1,
            integer=True,
            max_from="last_layer",  # the one-layer model has layer 0 only
        ),
        Control("query", "query position", "range", 17, min=0, max=_T - 1, step=1, integer=True),
        Control("seed", "seed", "range", 0, min=0, max=_SEEDS - 1, step=1, integer=True),
    ),
    compute=head_state,
    draw=_draw,
    panel=_panel,
    data=_DATA,
)


def head_explorer(
    *, model: str = "two-layer", layer: int = 1, query: int = 17, seed: int = 0
) -> LiveWidget:
    """Pick a model, a layer (its one head), a query position and a seed; see the head's
    attention row over the sample sequence, with the previous token and the token after the
    previous occurrence marked. See :func:`head_state`."""
    require_int("seed", seed, minimum=0)
    return LiveWidget(SPEC, model=model, layer=layer, query=query, seed=seed)
