"""RoPE in one plane: a query at position m and a key at n, turned by m*theta and n*theta.

The widget follows one feature pair of a ``d = 16`` head. Pair ``p`` turns by
``theta_p = base**(-2p/d)`` radians per position (:func:`attnbook.rope.rope_frequencies`), so
the score of the turned vectors is ``q . R((n - m) theta_p) k``: it depends on the offset
``n - m`` only, which the right-hand curve shows for every offset at once.
"""

from __future__ import annotations

import math

from attnbook._checks import require_integral, require_real
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["SPEC", "rope_rotation", "rope_state"]

D = 16  # head width: 8 feature pairs
Q_PAIR = (1.0, 0.0)  # the query's coordinates in the chosen pair, before any rotation
K_PAIR = (0.8, 0.6)  # the key's (unit length, 0.6435 rad from the query)
POSITIONS = 32  # the position sliders run 0..POSITIONS
OFFSETS = tuple(range(-POSITIONS, POSITIONS + 1))  # every offset n - m the sliders can make


def _turn(v: tuple[float, float] | list[float], angle: float) -> list[float]:
    c, s = math.cos(angle), math.sin(angle)
    return [c * v[0] - s * v[1], s * v[0] + c * v[1]]


def _dot(a: list[float], b: list[float]) -> float:
    return a[0] * b[0] + a[1] * b[1]


def rope_state(*, m: int, n: int, pair: int, log10_base: float) -> dict:
    """Everything the widget shows for one setting.

    Args:
        m: position of the query, a whole number >= 0 (``4.0`` counts as 4).
        n: position of the key, a whole number >= 0.
        pair: feature pair index ``p`` in ``[0, D/2)``; higher pairs turn more slowly. Pair 0
            turns by 1 radian per position whatever the base (``base**0 = 1``).
        log10_base: ``log10`` of the RoPE base (4 is the common 10000).

    Returns:
        A dict with ``theta`` (radians per position), ``wavelength`` (positions per full
        turn), the turned vectors ``q_rot`` and ``k_rot``, their ``score`` and the same score
        from the relative form ``score_relative``, the norms, and the curve ``curve_offset`` /
        ``curve_score`` of the score at each offset in :data:`OFFSETS`.

    Raises:
        ValueError: a negative or fractional position, or a pair outside ``[0, D/2)``.
        TypeError: a position or pair that is not a number.
    """
    m = require_integral("m", m, minimum=0)
    n = require_integral("n", n, minimum=0)
    pair = require_integral("pair", pair, minimum=0)
    if pair >= D // 2:
        raise ValueError(f"pair must be a whole number in [0, {D // 2}) for d={D}, got {pair!r}")
    log10_base = require_real("log10_base", log10_base)
    base = 10.0**log10_base
    theta = base ** (-2 * pair / D)
    q_rot, k_rot = _turn(Q_PAIR, m * theta), _turn(K_PAIR, n * theta)
    return {
        "m": m,
        "n": n,
        "pair": pair,
        "offset": n - m,
        "base": base,
        "theta": theta,
        "wavelength": 2 * math.pi / theta,
        "q": list(Q_PAIR),
        "k": list(K_PAIR),
        "q_rot": q_rot,
        "k_rot": k_rot,
        "q_norm": math.hypot(*q_rot),
        "k_norm": math.hypot(*k_rot),
        "score": _dot(q_rot, k_rot),
        "score_relative": _dot(list(Q_PAIR), _turn(K_PAIR, (n - m) * theta)),
        "curve_offset": list(OFFSETS),
        "curve_score": [_dot(list(Q_PAIR), _turn(K_PAIR, o * theta)) for o in OFFSETS],
    }


def _plane(state: dict, ax) -> None:
    t = [2 * math.pi * i / 100 for i in range(101)]
    ax.plot([math.cos(a) for a in t], [math.sin(a) for a in t], color="#BBBBBB", lw=1)
    for vec, colour, label in (
        (state["q"], "#0072B2", None),
        (state["k"], "#E69F00", None),
        (state["q_rot"], "#0072B2", f"q at m={state['m']}"),
        (state["k_rot"], "#E69F00", f"k at n={state['n']}"),
    ):
        faint = label is None
        ax.annotate(
            "",
            xy=vec,
            xytext=(0, 0),
            arrowprops={
                "arrowstyle": "->",
                "color": colour,
                "lw": 1 if faint else 2.5,
                "alpha": 0.35 if faint else 1.0,
            },
        )
        if label:
            ax.plot([], [], color=colour, label=label)
    ax.set_xlim(-1.25, 1.25)
    ax.set_ylim(-1.25, 1.25)
    ax.set_aspect("equal")
    ax.set_xlabel("pair coordinate 1")
    ax.set_ylabel("pair coordinate 2")


def _draw(state: dict, fig) -> None:
    left, right = fig.subplots(1, 2)
    _plane(state, left)
    left.legend(loc="lower left", fontsize=9)
    left.set_title(f"θ = {state['theta']:.3g} rad/position")
    fine = [o / 8 for o in range(8 * OFFSETS[0], 8 * OFFSETS[-1] + 1)]  # the continuous score
    score = [_dot(state["q"], _turn(state["k"], o * state["theta"])) for o in fine]
    right.plot(fine, score, color="#009E73", lw=1.5)
    right.plot(state["curve_offset"], state["curve_score"], "o", color="#009E73", ms=2.5)
    right.scatter([state["offset"]], [state["score"]], color="#D55E00", zorder=3, s=50)
    right.set_ylim(-1.1, 1.1)
    right.set_xlabel("offset n − m (positions)")
    right.set_ylabel("score q·k after rotation")
    right.set_title(f"score {state['score']:.3f} at n − m = {state['offset']} (dot)")


def _panel(state: dict, ax) -> None:
    _plane(state, ax)
    ax.set_title(
        f"n−m={state['offset']}, θ={state['theta']:.2g}\nscore {state['score']:.2f}", fontsize=10
    )


SPEC = WidgetSpec(
    name="rope_rotation",
    title="RoPE: one feature pair of a query and a key, turned by their positions",
    controls=(
        Control("m", "query position m", "range", 1, min=0, max=POSITIONS, step=1, integer=True),
        Control("n", "key position n", "range", 3, min=0, max=POSITIONS, step=1, integer=True),
        Control(
            "pair",
            "pair index p (frequency)",
            "range",
            1,
            min=0,
            max=D // 2 - 1,
            step=1,
            integer=True,
        ),
        Control("log10_base", "log10(base)", "range", 4.0, min=2.0, max=6.0, step=0.5),
    ),
    compute=rope_state,
    draw=_draw,
    panel=_panel,
    data={"d": D, "q": list(Q_PAIR), "k": list(K_PAIR), "offsets": list(OFFSETS)},
)


def rope_rotation(*, m: int = 1, n: int = 3, pair: int = 1, log10_base: float = 4.0) -> LiveWidget:
    """Sliders for the positions m and n, the pair (frequency) and the base; draws the turned
    query and key in that pair's plane and the score against the offset. See
    :func:`rope_state`. The default pair is 1, where every control moves the picture (pair 0
    turns by 1 radian per position for every base, which the widget then says)."""
    return LiveWidget(SPEC, m=m, n=n, pair=pair, log10_base=log10_base)
