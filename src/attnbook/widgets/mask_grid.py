"""Mask explorer: which keys each query may read under the causal, padding and packing rules.

The rules are those of :mod:`attnbook.masks`, restated on plain integers so that the widget's
JavaScript twin can reproduce them exactly: query ``i`` sits at absolute position
``offset + i``, key ``j`` at position ``j``, and a cell is allowed when every active rule
allows it (causal: ``j <= offset + i``; padding: ``j < length``; packing: both positions lie
in the same document, documents being consecutive runs of ``doc_len`` positions).
"""

from __future__ import annotations

from attnbook._checks import require_bool, require_integral
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["REASONS", "SPEC", "mask_explorer", "mask_state"]

# What a cell shows: allowed, or the first rule (in this order) that forbids it.
REASONS = ("allowed", "future", "padding", "segment")
COLOURS = {"allowed": "#0072B2", "future": "#DDDDDD", "padding": "#E69F00", "segment": "#CC79A7"}


def mask_state(*, t_q: int, t_k: int, causal: bool, offset: int, length: int, doc_len: int) -> dict:
    """The allowed-key grid for one setting.

    Args:
        t_q: number of queries ``Tq``; query ``i`` sits at absolute position ``offset + i``.
        t_k: number of keys ``Tk``; key ``j`` sits at position ``j``.
        causal: forbid keys after the query's position.
        offset: absolute position of query 0 (``t_k - t_q`` puts the queries last, as when
            decoding new tokens against a cache).
        length: real tokens in the sequence; keys at positions ``>= length`` are padding.
        doc_len: packed documents are consecutive runs of ``doc_len`` positions; a query reads
            only its own document (``doc_len >= t_k`` means one document).

    Returns:
        A dict with the positions, each position's document id, ``allowed`` and ``reason``
        (``Tq x Tk`` grids, reason one of :data:`REASONS`), ``row_counts``, ``empty_rows``
        (queries with no allowed key), ``padded_queries`` (query positions ``>= length``,
        whose outputs a loss mask must drop) and ``bottom_right_offset`` (``t_k - t_q``).

    Raises:
        ValueError: a size below its minimum or with a fractional part (``2.5``; whole floats
            such as ``6.0`` are accepted), or ``length > t_k``.
        TypeError: a size that is not a number, or ``causal`` that is not a bool.
    """
    t_q, t_k = require_integral("t_q", t_q, minimum=1), require_integral("t_k", t_k, minimum=1)
    length = require_integral("length", length, minimum=0)
    doc_len = require_integral("doc_len", doc_len, minimum=1)
    offset = require_integral("offset", offset)
    causal = require_bool("causal", causal)
    if length > t_k:
        raise ValueError(
            f"length={length} exceeds t_k={t_k}: a sequence cannot hold more "
            f"real tokens than there are key slots"
        )

    query_pos = [offset + i for i in range(t_q)]
    key_pos = list(range(t_k))
    query_doc = [p // doc_len for p in query_pos]  # floor division, also for p < 0
    key_doc = [p // doc_len for p in key_pos]
    reason = []
    for qp, qd in zip(query_pos, query_doc, strict=True):
        row = []
        for kp, kd in zip(key_pos, key_doc, strict=True):
            if causal and kp > qp:
                row.append("future")
            elif kp >= length:
                row.append("padding")
            elif kd != qd:
                row.append("segment")
            else:
                row.append("allowed")
        reason.append(row)
    allowed = [[r == "allowed" for r in row] for row in reason]
    row_counts = [sum(row) for row in allowed]
    return {
        "t_q": t_q,
        "t_k": t_k,
        "query_pos": query_pos,
        "key_pos": key_pos,
        "query_doc": query_doc,
        "key_doc": key_doc,
        "allowed": allowed,
        "reason": reason,
        "row_counts": row_counts,
        "n_allowed": sum(row_counts),
        "empty_rows": [i for i, n in enumerate(row_counts) if n == 0],
        "padded_queries": [i for i, p in enumerate(query_pos) if p >= length],
        "bottom_right_offset": t_k - t_q,
    }


def _grid(state: dict, ax, *, ticks: bool = True) -> None:
    from matplotlib.colors import ListedColormap

    codes = [[REASONS.index(r) for r in row] for row in state["reason"]]
    cmap = ListedColormap([COLOURS[r] for r in REASONS])
    ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(REASONS) - 0.5, aspect="equal")
    t_q, t_k = state["t_q"], state["t_k"]
    ax.set_xticks(range(t_k), state["key_pos"] if ticks else [""] * t_k)
    rows = [
        f"{p}*" if i in state["padded_queries"] else str(p)
        for i, p in enumerate(state["query_pos"])
    ]
    ax.set_yticks(range(t_q), rows if ticks else [""] * t_q)
    ax.set_xticks([x - 0.5 for x in range(1, t_k)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, t_q)], minor=True)
    ax.grid(False)
    ax.grid(True, which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    for i in state["empty_rows"]:
        ax.text(t_k - 0.5, i, " empty", va="center", ha="left", fontsize=9, color="#D55E00")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")


def _draw(state: dict, fig) -> None:
    from matplotlib.patches import Patch

    ax = fig.subplots()
    _grid(state, ax)
    ax.set_title(
        f"{state['n_allowed']} of {state['t_q'] * state['t_k']} cells allowed (* = padded query)"
    )
    handles = [
        Patch(color=COLOURS[r], label=r if r == "allowed" else f"blocked: {r}") for r in REASONS
    ]
    fig.legend(handles=handles, loc="outside right center", frameon=False)


def _panel(state: dict, ax) -> None:
    _grid(state, ax)
    ax.set_title(f"{state['n_allowed']} allowed", fontsize=10)


SPEC = WidgetSpec(
    name="mask_explorer",
    title="Mask explorer: which keys may each query read?",
    controls=(
        Control("t_q", "queries Tq", "range", 6, min=1, max=8, step=1, integer=True),
        Control("t_k", "keys Tk", "range", 6, min=1, max=8, step=1, integer=True),
        Control("causal", "causal", "checkbox", True),
        Control(
            "offset",
            "offset (position of query 0)",
            "range",
            0,
            min=-2,
            max=8,
            step=1,
            integer=True,
        ),
        Control(
            "length", "real tokens (padding after)", "range", 6, min=0, max=8, step=1, integer=True
        ),
        Control(
            "doc_len", "document length (packing)", "range", 8, min=1, max=8, step=1, integer=True
        ),
    ),
    compute=mask_state,
    draw=_draw,
    panel=_panel,
    data={"reasons": list(REASONS), "colours": COLOURS},
)


def mask_explorer(
    *,
    t_q: int = 6,
    t_k: int = 6,
    causal: bool = True,
    offset: int = 0,
    length: int = 6,
    doc_len: int = 8,
) -> LiveWidget:
    """Controls for the causal rule, the padding length, document packing and the query
    offset; draws the allowed-key grid and colours each blocked cell by the rule that blocks
    it. See :func:`mask_state`."""
    return LiveWidget(
        SPEC, t_q=t_q, t_k=t_k, causal=causal, offset=offset, length=length, doc_len=doc_len
    )
