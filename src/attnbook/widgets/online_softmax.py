"""Online softmax stepper: one query reads its keys block by block, as FlashAttention does.

After each block the running state ``(m, l, u)`` (max score, sum of ``exp(s - m)``, and sum of
``exp(s - m) * v``) is merged with the block's own state, and ``u / l`` is the output so far.
When the last block is in, ``u / l`` is the softmax-weighted mean of the values over all keys.
"""

from __future__ import annotations

import math
import random

from attnbook._checks import require_integral
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["SPEC", "online_softmax_state", "online_softmax_stepper"]

N_KEYS = 16
BLOCK_SIZES = (1, 2, 3, 4, 5, 8, 16)  # 3 and 5 do not divide 16: the last block is shorter
ORDERS = ("left to right", "right to left")
_SPIKE = 12  # a late key with the top score and a distinct value: the max jumps, the output moves


def _make_data(seed: int = 8) -> dict:
    """One query's scores and (scalar) values; pure Python so that the data is fixed everywhere."""
    rng = random.Random(seed)
    scores = [round(rng.gauss(0.0, 1.0), 3) for _ in range(N_KEYS)]
    scores[_SPIKE] = round(max(scores) + 1.5, 3)
    values = [round(rng.uniform(-1.0, 1.0), 3) for _ in range(N_KEYS)]
    values[_SPIKE] = 0.9
    return {"scores": scores, "values": values}


DATA = _make_data()


def _block_state(scores: list[float], values: list[float]) -> tuple[float, float, float]:
    m = max(scores)
    p = [math.exp(s - m) for s in scores]
    return m, sum(p), sum(pi * vi for pi, vi in zip(p, values, strict=True))


def online_softmax_state(*, step: int, block_size: int, order: str, data=None) -> dict:
    """Everything the stepper shows after ``step`` blocks have been merged.

    Args:
        step: blocks merged so far, ``0 <= step <= n_keys``; clamped to ``n_blocks``. Whole
            floats (``3.0``) count as ints.
        block_size: keys per block (the last block may be shorter), a whole number >= 1.
        order: ``"left to right"`` or ``"right to left"``: the order the blocks are visited.
        data: ``{"scores": [...], "values": [...]}``; defaults to the widget's fixed query.

    Returns:
        A dict with the block boundaries in visiting order (``blocks``), the query's
        ``scores`` and ``values``, the running state
        ``m, l, u`` and output ``out = u / l`` after ``step`` blocks (``None`` at step 0),
        ``rescale`` (the factor ``exp(m_old - m_new)`` applied to the old state at this step;
        ``None`` before step 2), their traces over every step (``m_trace`` ...), the
        provisional ``weights`` ``exp(s_j - m) / l`` of the keys seen so far (0 for unseen
        keys), ``seen`` flags, and the full-softmax answer ``exact`` and ``exact_weights``.
    """
    data = DATA if data is None else data
    scores, values = list(data["scores"]), list(data["values"])
    n = len(scores)
    block_size = require_integral("block_size", block_size, minimum=1)
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {list(ORDERS)}, got {order!r}")
    blocks = [[start, min(start + block_size, n)] for start in range(0, n, block_size)]
    if order == "right to left":
        blocks.reverse()
    step = require_integral("step", step)
    if not 0 <= step <= n:
        raise ValueError(f"step must be a whole number in [0, {n}], got {step!r}")
    # The slider's range follows the block count (max_from="n_blocks"); from Python, a step
    # past the last block shows the finished state.
    step = min(step, len(blocks))

    m, l, u = -math.inf, 0.0, 0.0  # noqa: E741 (the letter the literature uses); no keys yet
    m_trace, l_trace, u_trace, rescale_trace = [], [], [], []
    for start, stop in blocks:
        mb, lb, ub = _block_state(scores[start:stop], values[start:stop])
        m_new = max(m, mb)
        ca, cb = math.exp(m - m_new), math.exp(mb - m_new)  # both <= 1; ca = 0 for the empty set
        m, l, u = m_new, ca * l + cb * lb, ca * u + cb * ub  # noqa: E741
        m_trace.append(m)
        l_trace.append(l)
        u_trace.append(u)
        rescale_trace.append(ca)
    out_trace = [ui / li for ui, li in zip(u_trace, l_trace, strict=True)]

    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    exact_weights = [e / total for e in exps]
    exact = sum(w * v for w, v in zip(exact_weights, values, strict=True))

    seen = [False] * n
    for start, stop in blocks[:step]:
        seen[start:stop] = [True] * (stop - start)
    now = step - 1
    m_now = m_trace[now] if step else None
    l_now = l_trace[now] if step else 0.0
    weights = [
        math.exp(s - m_now) / l_now if flag else 0.0 for s, flag in zip(scores, seen, strict=True)
    ]
    return {
        "step": step,
        "n_blocks": len(blocks),
        "blocks": blocks,
        "scores": scores,
        "values": values,
        "current": blocks[now] if step else None,
        "seen": seen,
        "m": m_now,
        "l": l_now,
        "u": u_trace[now] if step else 0.0,
        "out": out_trace[now] if step else None,
        "rescale": rescale_trace[now] if step >= 2 else None,
        "m_trace": m_trace,
        "l_trace": l_trace,
        "u_trace": u_trace,
        "out_trace": out_trace,
        "weights": weights,
        "exact": exact,
        "exact_weights": exact_weights,
        "exact_max": top,
        "exact_l": total,
    }


def _scores_panel(state: dict, ax) -> None:
    keys = list(range(len(state["scores"])))
    lo, hi = state["current"] or (0, 0)
    colours = [
        "#D55E00" if lo <= j < hi else "#0072B2" if seen else "#CCCCCC"
        for j, seen in zip(keys, state["seen"], strict=True)
    ]
    ax.bar(keys, state["scores"], color=colours)
    if state["m"] is not None:
        ax.axhline(
            state["m"],
            color="#000000",
            linestyle="--",
            linewidth=1.2,
            label=f"running max m = {state['m']:.2f}",
        )
        ax.legend(loc="lower right")
    ax.set_xlabel("key (orange: just merged; grey: unseen)")
    ax.set_ylabel("score q·k/√d")
    ax.set_title(f"after {state['step']} of {state['n_blocks']} blocks")


def _draw(state: dict, fig) -> None:
    left, right = fig.subplots(1, 2)
    _scores_panel(state, left)
    steps = list(range(1, state["n_blocks"] + 1))
    right.plot(steps, state["out_trace"], color="#CCCCCC", marker="o", label="all steps")
    done = state["step"]
    if done:
        right.plot(
            steps[:done],
            state["out_trace"][:done],
            color="#0072B2",
            marker="o",
            label="merged so far",
        )
    right.axhline(state["exact"], color="#009E73", linestyle="--", label="full softmax")
    right.legend(loc="best")
    right.set_xlabel("blocks merged")
    right.set_ylabel("output u / l")
    title = "nothing merged yet" if state["out"] is None else f"u/l = {state['out']:.4f}"
    right.set_title(f"{title} (exact {state['exact']:.4f})")


def _panel(state: dict, ax) -> None:
    keys = list(range(len(state["weights"])))
    lo, hi = state["current"] or (0, 0)
    colours = ["#D55E00" if lo <= j < hi else "#0072B2" for j in keys]
    ax.bar(keys, state["weights"], color=colours)
    ax.plot(
        keys, state["exact_weights"], linestyle="none", marker="_", markersize=9, color="#000000"
    )
    ax.set_ylim(0, 1)
    ax.set_xlabel("key")
    ax.set_ylabel("weight e^(s−m)/l")
    out = "—" if state["out"] is None else f"{state['out']:.3f}"
    ax.set_title(
        f"{state['step']}/{state['n_blocks']} blocks: m={state['m']:.2f}, out={out}"
        if state["m"] is not None
        else "no block merged",
        fontsize=10,
    )


SPEC = WidgetSpec(
    name="online_softmax_stepper",
    title="Online softmax: one query reads its keys a block at a time",
    controls=(
        Control(
            "step",
            "blocks merged",
            "range",
            2,
            min=0,
            max=N_KEYS,
            step=1,
            integer=True,
            max_from="n_blocks",  # the slider runs from 0 to the block count
        ),
        Control("block_size", "keys per block", "select", 4, options=BLOCK_SIZES),
        Control("order", "block order", "select", ORDERS[0], options=ORDERS),
    ),
    compute=online_softmax_state,
    draw=_draw,
    panel=_panel,
    data=DATA,
)


def online_softmax_stepper(
    *, step: int = 2, block_size: int = 4, order: str = "left to right"
) -> LiveWidget:
    """Step through the key blocks of one query and watch ``m``, ``l`` and ``u / l`` converge
    to the full softmax. See :func:`online_softmax_state`."""
    return LiveWidget(SPEC, step=step, block_size=block_size, order=order)
