"""Speculative decoding: draft quality, draft length and draft cost against tokens and speed.

Under independent acceptance, each of ``k`` draft tokens is accepted with the same probability
``alpha``, so a target pass emits ``(1 - alpha**(k + 1)) / (1 - alpha)`` tokens on average
(:func:`attnbook.speculative.expected_tokens_iid`), at most ``1 / (1 - alpha)`` however large
``k`` is. A step costs ``k * c + 1`` target passes of wall-clock time when one draft token
costs ``c`` target passes, so the expected speed-up over decoding with the target alone is
their ratio (Leviathan et al., 2023). The widget draws both against ``k = 1 .. K_MAX`` and
rings the best ``k`` in that range. It says so when the speed-up is still rising at
``K_MAX`` (the true optimum lies beyond the slider: a free draft, or ``alpha`` near 1), and
when no ``k`` gains at all (``alpha <= c``), where the ring is only the least loss.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from attnbook._checks import require_integral, require_real
from attnbook.speculative import expected_tokens_iid
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["K_MAX", "SPEC", "speculative_speedup", "speculative_state"]

K_MAX = 10  # the curves run over k = 1 .. K_MAX, the range of the k slider
# Two speed-ups this close (relative) count as a tie, won by the smaller k (fewer draft tokens
# to waste); a speed-up this close to 1 neither gains nor loses. Far above the last-bit
# differences between Python's and JavaScript's powers.
TIE = 1e-12
# The widget opens at the chapter's setting: its bigram draft's measured acceptance (0.560,
# rounded), four draft tokens, and a draft token costing 5% of a target pass.
ALPHA, K, C = 0.56, 4, 0.05


def _fmt(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, written as the JavaScript twin writes it
    (``ab.fmt``: ``Number(x.toPrecision(digits))``, halves away from zero, no trailing zeros),
    so both faces print the same text. Meant for numbers between 1e-4 and 1e15."""
    exact = Decimal(x)  # the float's exact value, which toPrecision rounds
    if exact == 0:
        return "0"
    unit = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    rounded = float(exact.quantize(unit, rounding=ROUND_HALF_UP))
    return str(int(rounded)) if rounded.is_integer() else repr(rounded)


def _verdict(best_k: int, best: float, gains: bool, rising_at_end: bool) -> tuple[str, str]:
    """The ring's label, and the same with the ringed speed-up always said (the readout's and
    the titles'); where no ``k`` gains the label says the speed-up too."""
    value = f"{_fmt(best)}×"
    if not gains:
        if best >= 1 - TIE:  # alpha == c at k = 1, or alpha = 0 with a free draft
            head = f"no k gains; k = {best_k} breaks even"
        else:
            head = f"no k gains; least loss at k = {best_k}"
        return f"{head} ({value})", f"{head} ({value})"  # the ring says the speed-up too
    if rising_at_end and best_k == K_MAX:
        head = f"best in 1–{K_MAX}: k = {best_k}"
        return f"{head} (still rising)", f"{head} ({value}, still rising)"
    return f"best k = {best_k}", f"best k = {best_k} ({value})"


def speculative_state(*, alpha: float = ALPHA, k: int = K, c: float = C) -> dict:
    """Tokens per target pass and wall-clock speed-up of speculative decoding, for every
    ``k`` in ``1 .. K_MAX``, under independent acceptance.

    ``tokens(k) = (1 - alpha**(k + 1)) / (1 - alpha)`` (from
    :func:`attnbook.speculative.expected_tokens_iid`) and
    ``speedup(k) = tokens(k) / (k * c + 1)``. The best ``k`` is the best in ``1 .. K_MAX``
    only: where the speed-up still rises at ``K_MAX`` the optimum lies beyond it, and where no
    ``k`` gains (exactly when ``alpha <= c``) it is the least loss.

    Args:
        alpha: probability that one draft token is accepted, the same for every draft token
            and independent of the others; a real number in ``[0, 1)``. Default 0.56, the
            chapter's measured acceptance.
        k: draft tokens proposed per target pass, a whole number in ``[1, K_MAX]`` (``4.0``
            counts as 4). Default 4.
        c: the cost of one draft token in target passes, a real number ``>= 0`` (0: a free
            draft; 1: a draft as slow as the target). Default 0.05.

    Returns:
        A dict echoing ``alpha``, ``k`` and ``c``, with:

        * ``ks`` (``1 .. K_MAX``) and, at each of them, ``tokens`` (tokens per target pass)
          and ``speedups``;
        * at this ``k``: ``tokens_per_pass``, ``drafts_kept`` (the fraction of draft tokens
          emitted, ``(tokens - 1) / k``), ``step_cost`` (``k * c + 1`` target passes) and
          ``speedup``;
        * ``ceiling``: ``1 / (1 - alpha)``, the tokens per pass as ``k`` grows;
        * ``best_k``: the smallest ``k`` of the largest speed-up in ``1 .. K_MAX`` (ties
          within ``TIE``, 1e-12 relative), and ``best_speedup``, its speed-up;
        * ``gains``: whether ``best_speedup`` exceeds 1 by more than ``TIE`` (some ``k``
          beats the target alone);
        * ``rising_at_end``: whether the speed-up at ``K_MAX`` exceeds that at ``K_MAX - 1``
          by more than ``TIE`` (the tie rule's test, so it holds exactly when ``best_k`` is
          ``K_MAX``: the curve rises to its peak and falls after it);
        * ``best_label``: what the ring's label says: ``"best k = 4"``, ``"best in 1–10: k =
          10 (still rising)"``, ``"no k gains; least loss at k = 1 (0.75×)"``, or ``"no k
          gains; k = 1 breaks even (1×)"`` (a best speed-up of 1 within ``TIE``);
        * ``best_text``: the same with ``best_speedup`` always said (3 significant digits), as
          the readout and the figures' titles say it: ``"best k = 4 (1.79×)"``, ``"best in
          1–10: k = 10 (6.86×, still rising)"``; where no ``k`` gains, ``best_label``.

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
    best = speedups[best_k - 1]
    gains = best > 1 + TIE
    rising_at_end = speedups[-2] < speedups[-1] * (1 - TIE)
    best_label, best_text = _verdict(best_k, best, gains, rising_at_end)
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
        "best_speedup": best,
        "gains": gains,
        "rising_at_end": rising_at_end,
        "best_label": best_label,
        "best_text": best_text,
    }


def _two_lines(text: str) -> str:
    """``text`` broken after its first ``": "`` or ``"; "`` (a narrow panel's title)."""
    for mark in ("; ", ": "):
        head, sep, tail = text.partition(mark)
        if sep:
            return f"{head}{sep.rstrip()}\n{tail}"
    return text


def _tokens_axes(state: dict, ax) -> None:
    ax.plot(state["ks"], state["tokens"], "o-", color="#0072B2", markersize=4)
    ax.axhline(state["ceiling"], color="0.4", linestyle="--", linewidth=1)
    ax.scatter([state["k"]], [state["tokens_per_pass"]], color="#D55E00", s=60, zorder=3)
    ax.set_ylim(0, max(2.0, 1.2 * state["ceiling"]))
    ax.set_xticks(state["ks"])
    ax.set_xlabel("draft tokens per step k")
    ax.set_ylabel("tokens per target pass")
    ax.set_title(
        f"α = {state['alpha']:.2f}: {state['tokens_per_pass']:.2f} at k = {state['k']}\n"
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
        f"c = {state['c']:.2f}: {_fmt(state['speedup'])}× at k = {state['k']}\n"
        f"ring: {state['best_text']}",
    )
    for ax in (left, right):
        ax.title.set_fontsize(9)


def _panel(state: dict, ax) -> None:
    _speedup_axes(
        state,
        ax,
        f"α = {state['alpha']:.2f}, c = {state['c']:.2f}\n{_two_lines(state['best_text'])}",
    )
    ax.title.set_fontsize(10)


SPEC = WidgetSpec(
    name="speculative_speedup",
    title="Speculative decoding: draft quality against acceptance and speed",
    controls=(
        Control("alpha", "acceptance α", "range", ALPHA, min=0.0, max=0.95, step=0.01),
        Control("k", "draft tokens k", "range", K, min=1, max=K_MAX, step=1, integer=True),
        Control("c", "draft cost c (target passes/token)", "range", C, min=0.0, max=1.0, step=0.01),
    ),
    compute=speculative_state,
    draw=_draw,
    panel=_panel,
    data={"k_max": K_MAX, "tie": TIE},
)


def speculative_speedup(*, alpha: float = ALPHA, k: int = K, c: float = C) -> LiveWidget:
    """Sliders for the acceptance probability ``alpha``, the draft length ``k`` and the draft
    cost ``c``; shows tokens per target pass and the wall-clock speed-up against ``k``, the
    best ``k`` in ``1 .. K_MAX`` ringed.

    Args:
        alpha: as :func:`speculative_state`; default 0.56 (the chapter's measured acceptance).
        k: as :func:`speculative_state`; default 4.
        c: as :func:`speculative_state`; default 0.05.

    Returns:
        A :class:`~attnbook.widgets.LiveWidget`; display it as the last expression of a cell.
        Its ``state()`` is :func:`speculative_state`'s dict.

    Raises:
        TypeError, ValueError: as :func:`speculative_state`, and for a value outside a
            slider's range (``alpha`` above 0.95, ``c`` above 1).
    """
    return LiveWidget(SPEC, alpha=alpha, k=k, c=c)
