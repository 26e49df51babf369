"""Softmax saturation: how the logit scale, d_k and the 1/sqrt(d_k) factor shape the weights."""

from __future__ import annotations

import math

from attnbook._checks import require_bool, require_integral, require_real
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["SPEC", "softmax_saturation", "softmax_state"]

# Eight keys' scores for one query, standardised to mean 0 and (population) standard
# deviation 1, so that "score std" in the readout is the actual spread of the logits: what
# q.k / sqrt(d_k) looks like for one fixed draw. Unscaled, a dot product of d_k unit-variance
# coordinates has standard deviation sqrt(d_k), so the widget multiplies these by sqrt(d_k)
# before any division.
_RAW_SCORES = (1.3, 0.8, 0.35, 0.1, -0.15, -0.55, -0.9, -1.25)
_MEAN = sum(_RAW_SCORES) / len(_RAW_SCORES)
_STD = math.sqrt(sum((z - _MEAN) ** 2 for z in _RAW_SCORES) / len(_RAW_SCORES))
STANDARD_SCORES = tuple((z - _MEAN) / _STD for z in _RAW_SCORES)
SCALE_GRID = tuple(round(10 ** (-1 + 2 * i / 40), 12) for i in range(41))  # 0.1 .. 10


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)  # subtracting the max changes nothing but keeps exp() finite
    exps = [math.exp(s - top) for s in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _jacobian_norm(p: list[float]) -> float:
    # J_ij = p_i (delta_ij - p_j); its Frobenius norm collapses as p approaches one-hot.
    return math.sqrt(
        sum((p[i] * ((i == j) - p[j])) ** 2 for i in range(len(p)) for j in range(len(p)))
    )


def softmax_state(*, scale: float, d_k: int, divide: bool) -> dict:
    """Everything the widget shows for one setting.

    Args:
        scale: multiplier on the logits (an inverse temperature), > 0.
        d_k: key dimension (a whole number; ``64.0`` is 64); the unscaled scores have
            standard deviation sqrt(d_k).
        divide: whether to divide the scores by sqrt(d_k) (the standard attention scaling).

    Returns:
        A dict echoing ``scale``, ``d_k`` and ``divide``, with ``logits`` and ``probs`` (8
        each), ``entropy`` (nats), ``max_entropy``,
        ``jacobian_norm`` (Frobenius), ``score_std`` and the curve ``curve_scale`` /
        ``curve_jacobian`` of the Jacobian norm over :data:`SCALE_GRID` at this d_k.
    """
    scale = require_real("scale", scale)
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    d_k = require_integral("d_k", d_k, minimum=1)
    divide = require_bool("divide", divide)
    std = 1.0 if divide else math.sqrt(d_k)

    def logits_at(s: float) -> list[float]:
        return [s * std * z for z in STANDARD_SCORES]

    logits = logits_at(scale)
    probs = _softmax(logits)
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    return {
        "scale": scale,
        "d_k": d_k,
        "divide": divide,
        "logits": logits,
        "probs": probs,
        "entropy": entropy,
        "max_entropy": math.log(len(probs)),
        "jacobian_norm": _jacobian_norm(probs),
        "score_std": scale * std,
        "curve_scale": list(SCALE_GRID),
        "curve_jacobian": [_jacobian_norm(_softmax(logits_at(s))) for s in SCALE_GRID],
    }


def _bars(state: dict, ax, title: str) -> None:
    keys = range(len(state["probs"]))
    ax.bar(keys, state["probs"], color="#0072B2")
    ax.set_ylim(0, 1)
    ax.set_xticks(list(keys))
    ax.set_xlabel("key")
    ax.set_ylabel("softmax weight")
    ax.set_title(title)


def _draw(state: dict, fig) -> None:
    left, right = fig.subplots(1, 2)
    _bars(state, left, f"H = {state['entropy']:.2f} nats (max {state['max_entropy']:.2f})")
    right.plot(state["curve_scale"], state["curve_jacobian"], color="#009E73")
    right.scatter([state["scale"]], [state["jacobian_norm"]], color="#D55E00", zorder=3)
    right.set_xscale("log")
    # Three labelled decades and no minor ticks: enough to read, and cheap to redraw.
    right.set_xticks([0.1, 1, 10], ["0.1", "1", "10"])
    right.minorticks_off()
    right.set_xlabel("logit scale")
    right.set_ylabel("Jacobian norm ‖J‖F")
    right.set_ylim(bottom=0)
    right.set_title(f"‖J‖F = {state['jacobian_norm']:.3f} (dot: this setting)")


def _panel(state: dict, ax) -> None:
    _bars(
        state,
        ax,
        f"score std {state['score_std']:.3g}\n"
        f"H={state['entropy']:.2f}, ‖J‖={state['jacobian_norm']:.2f}",
    )
    ax.title.set_fontsize(10)


SPEC = WidgetSpec(
    name="softmax_saturation",
    title="Softmax saturation: logit scale, d_k and the 1/√d_k factor",
    controls=(
        Control("scale", "logit scale", "range", 1.0, min=0.1, max=10.0, step=0.1),
        Control("d_k", "d_k", "select", 64, options=(1, 4, 16, 64, 128, 256, 512)),
        Control("divide", "divide by √d_k", "checkbox", True),
    ),
    compute=softmax_state,
    draw=_draw,
    panel=_panel,
    data={"scores": list(STANDARD_SCORES), "grid": list(SCALE_GRID)},
)


def softmax_saturation(*, scale: float = 1.0, d_k: int = 64, divide: bool = True) -> LiveWidget:
    """Sliders for the logit scale, d_k and the 1/sqrt(d_k) factor; shows the softmax bars,
    the entropy and the Jacobian norm updating together. See :func:`softmax_state`."""
    return LiveWidget(SPEC, scale=scale, d_k=d_k, divide=divide)
