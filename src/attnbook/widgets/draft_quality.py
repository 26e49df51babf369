"""Speculative decoding: draft quality, draft length and draft cost against tokens and speed.

Under independent acceptance, each of ``k`` draft tokens is accepted with the same probability
``alpha``, so a target pass emits ``(1 - alpha**(k + 1)) / (1 - alpha)`` tokens on average
(:func:`attnbook.speculative.expected_tokens_iid`), at most ``1 / (1 - alpha)`` however large
``k`` is. A step costs ``k * c + 1`` target passes of wall-clock time when one draft token
costs ``c`` target passes, so the expected speed-up over decoding with the target alone is
their ratio (Leviathan et al., 2023). The widget draws both against ``k``.
"""

from __future__ import annotations

from attnbook._checks import require_integral, require_real
from attnbook.speculative import expected_tokens_iid
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["K_MAX", "SPEC", "speculative_speedup", "speculative_state"]

K_MAX = 10  # the curves run over k = 1 .. K_MAX, the range of the k slider
# Two speed-ups this close count as a tie, won by the smaller k (fewer draft tokens to waste);
# far above the last-bit differences between Python's and JavaScript's powers.
TIE = 1e-12


def speculative_state(*, alpha: float, k: int, c: float) -> dict:
    """Tokens per target pass and wall-clock speed-up of speculative decoding, for every
    ``k`` in ``1 .. K_MAX``, under independent acceptance.

    ``tokens(k) = (1 - alpha**(k + 1)) / (1 - alpha)`` (from
    :func:`attnbook.speculative.expected_tokens_iid`) and
    ``speedup(k) = tokens(k) / (k * c + 1)``.

    Args:
        alpha: probability that one draft token is accepted, the same for every draft token
            and independent of the others; a real number in ``[0, 1)``.
        k: draft tokens proposed per target pass, a whole number in ``[1, K_MAX]`` (``4.0``
            counts as 4).
        c: the cost of one draft token in target passes, a real number ``>= 0`` (0: a free
            draft; 1: a draft as slow as the target).

    Returns:
        A dict echoing ``alpha``, ``k`` and ``c``, with ``ks`` (``1 .. K_MAX``) and, at each of
        them, ``tokens`` (tokens per target pass) and ``speedups``; at this ``k``,
        ``tokens_per_pass``, ``drafts_kept`` (the fraction of draft tokens emitted,
        ``(tokens - 1) / k``), ``step_cost`` (``k * c + 1`` target passes) and ``speedup``;
        ``ceiling`` (``1 / (1 - alpha)``, the tokens per pass as ``k`` grows), and ``best_k``
        (the smallest ``k`` of the largest speed-up, ties within ``1e-12`` relative) with
        ``best_speedup``.

    Raises:
        TypeError: ``alpha``, ``k`` or ``c`` not a number.
        ValueError: ``alpha`` outside ``[0, 1)``, ``k`` fractional or outside ``[1, K_MAX]``,
            ``c`` negative, or a non-finite value, naming the argument.
    """
    alpha = require_real("alpha", alpha)
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha must lie in [0, 1), got {alpha!r}")
    k = require_integral("k", k, minimum=1)
    if k > K_MAX:
        raise ValueError(f"k must lie in [1, {K_MAX}], got {k!r}")
    c = require_real("c", c)
    if c < 0:
        raise ValueError(f"c must be >= 0, got {c!r}")
    ks = list(range(1, K_MAX + 1))
    tokens = [expected_tokens_iid(alpha, j) for j in ks]
    speedups = [t / (j * c + 1) for j, t in zip(ks, tokens, strict=True)]
    top = max(speedups)
    best_k = next(j for j, s in zip(ks, speedups, strict=True) if s >= top * (1 - TIE))
    return {
        "alpha": alpha,
        "k": k,
        "c": c,
        "ks": ks,
        "tokens": tokens,
        "speedups": speedups,
        "tokens_per_pass": tokens[k - 1],
        "drafts_kept": (tokens[k - 1] - 1) / k,
        "step_cost": k * c + 1,
        "speedup": speedups[k - 1],
        "ceiling": 1 / (1 - alpha),
        "best_k": best_k,
        "best_speedup": speedups[best_k - 1],
    }


def _tokens_axes(state: dict, ax) -> None:
    ax.plot(state["ks"], state["tokens"], "o-", color="#0072B2", markersize=4)
    ax.axhline(state["ceiling"], color="0.4", linestyle="--", linewidth=1)
    ax.scatter([state["k"]], [state["tokens_per_pass"]], color="#D55E00", s=60, zorder=3)
    ax.set_ylim(0, max(2.0, 1.2 * state["ceiling"]))
    ax.set_xticks(state["ks"])
    ax.set_xlabel("draft tokens per step k")
    ax.set_ylabel("tokens per target pass")
    ax.set_title(
        f"α = {state['alpha']:.2f}: {state['tokens_per_pass']:.2f} at k = {state['k']} "
        f"(dashed: 1/(1−α) = {state['ceiling']:.2f})"
    )


def _speedup_axes(state: dict, ax, title: str) -> None:
    ax.plot(state["ks"], state["speedups"], "o-", color="#0072B2", markersize=4)
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    ax.scatter([state["k"]], [state["speedup"]], color="#D55E00", s=60, zorder=3)
    ax.scatter(
        [state["best_k"]],
        [state["best_speedup"]],
        s=180,
        facecolors="none",
        edgecolors="#009E73",
        linewidths=2,
        zorder=4,
    )
    ax.set_ylim(0, max(1.5, 1.2 * state["best_speedup"]))
    ax.set_xticks(state["ks"])
    ax.set_xlabel("draft tokens per step k")
    ax.set_ylabel("speed-up over the target alone")
    ax.set_title(title)


def _draw(state: dict, fig) -> None:
    left, right = fig.subplots(1, 2)
    _tokens_axes(state, left)
    _speedup_axes(
        state,
        right,
        f"c = {state['c']:.2f}: {state['speedup']:.2f}× at k = {state['k']}, "
        f"best k = {state['best_k']} (ring)",
    )
    for ax in (left, right):
        ax.title.set_fontsize(9)


def _panel(state: dict, ax) -> None:
    _speedup_axes(
        state,
        ax,
        f"α = {state['alpha']:.2f}, c = {state['c']:.2f}\n"
        f"best k = {state['best_k']}: {state['best_speedup']:.2f}×",
    )
    ax.title.set_fontsize(10)


SPEC = WidgetSpec(
    name="speculative_speedup",
    title="Speculative decoding: draft quality against acceptance and speed",
    controls=(
        Control("alpha", "acceptance α", "range", 0.8, min=0.0, max=0.95, step=0.01),
        Control("k", "draft tokens k", "range", 4, min=1, max=K_MAX, step=1, integer=True),
        Control("c", "draft cost c", "range", 0.1, min=0.0, max=1.0, step=0.01),
    ),
    compute=speculative_state,
    draw=_draw,
    panel=_panel,
    data={"k_max": K_MAX, "tie": TIE},
)


def speculative_speedup(*, alpha: float = 0.8, k: int = 4, c: float = 0.1) -> LiveWidget:
    """Sliders for the acceptance probability ``alpha``, the draft length ``k`` and the draft
    cost ``c``; shows tokens per target pass and the wall-clock speed-up against ``k``. See
    :func:`speculative_state`."""
    return LiveWidget(SPEC, alpha=alpha, k=k, c=c)
