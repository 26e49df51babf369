"""One figure style for the whole book: readable at phone width, colour-blind safe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnbook._checks import require_bool, require_int, require_real

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["OKABE_ITO", "SEQUENTIAL_CMAP", "heatmap", "new_figure", "use_style"]

# Okabe & Ito's palette: distinguishable under the common colour-vision deficiencies.
OKABE_ITO = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # green
    "#D55E00",  # vermillion
    "#CC79A7",  # purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
SEQUENTIAL_CMAP = "viridis"  # perceptually uniform and colour-blind safe

# A narrow default (6.4 in at 100 dpi is 640 px) that still reads on a phone once the
# page scales it down; fonts are large for the same reason.
_RC = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "savefig.bbox": "tight",
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 10,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 2.0,
    "figure.constrained_layout.use": True,
    "image.cmap": SEQUENTIAL_CMAP,
    "svg.hashsalt": "attnbook",  # stable SVG ids, so re-running a chapter rewrites nothing
}


_MAX_PANELS = 100  # subplots per row or column
_MAX_INCHES = 100.0  # 10,000 px at the book's 100 dpi; matplotlib refuses 2**16 px


def _require_inches(name: str, value: object) -> float:
    value = require_real(name, value, positive=True)
    if value > _MAX_INCHES:
        raise ValueError(f"{name} must be <= {_MAX_INCHES:g} inches, got {value}")
    return value


def use_style() -> None:
    """Apply the book's matplotlib style (idempotent)."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(_RC)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=list(OKABE_ITO))


def new_figure(
    nrows: int = 1, ncols: int = 1, *, width: float = 6.4, height: float | None = None
) -> tuple[Figure, Axes | Sequence[Axes]]:
    """A figure in the book's style; ``height`` defaults to a 16:9-ish panel per row.

    ``nrows`` and ``ncols`` are ints in ``[1, 100]``; ``width`` and ``height`` are inches in
    ``(0, 100]`` (larger figures exceed what matplotlib can render or take minutes to lay out).
    """
    import matplotlib.pyplot as plt

    nrows = require_int("nrows", nrows, minimum=1, maximum=_MAX_PANELS)
    ncols = require_int("ncols", ncols, minimum=1, maximum=_MAX_PANELS)
    width = _require_inches("width", width)
    if height is not None:
        height = _require_inches("height", height)
    use_style()
    if height is None:
        height = 3.0 * nrows if ncols > 1 else 3.6 * nrows
    return plt.subplots(nrows, ncols, figsize=(width, height))


def heatmap(
    ax: Axes,
    matrix,
    *,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    xlabel: str = "key position",
    ylabel: str = "query position",
    title: str | None = None,
    annotate: bool = True,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    colorbar: bool = True,
):
    """Draw a small matrix (attention weights, a mask) with optional cell annotations.

    Args:
        ax: the axes to draw on.
        matrix: a 2-D tensor or array ``(rows, cols)`` of numbers, at least 1x1; bool masks are
            drawn as 0/1.
        row_labels, col_labels: tick labels, one per row / column; default to indices.
        vmin, vmax: the colour range; ``vmin < vmax`` when both are given.
        annotate: print each value (two decimals) in its cell; skipped past 12x12 cells.

    Returns:
        The ``AxesImage``.
    """
    import numpy as np
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    annotate, colorbar = require_bool("annotate", annotate), require_bool("colorbar", colorbar)
    for name, text in (("xlabel", xlabel), ("ylabel", ylabel), ("title", title)):
        if text is not None and not isinstance(text, str):
            raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    if getattr(matrix, "is_meta", False):
        raise ValueError(f"matrix is a meta tensor (shape {tuple(matrix.shape)}), with no values")
    if hasattr(matrix, "detach"):  # a tensor; bfloat16 has no NumPy dtype, so widen it
        matrix = matrix.detach().cpu()
        matrix = matrix.float() if matrix.is_floating_point() else matrix
    values = np.asarray(matrix)
    if values.ndim != 2 or values.size == 0:
        raise ValueError(f"matrix must be 2-D (rows, cols) and non-empty, got shape {values.shape}")
    if values.dtype.kind not in "biuf":  # bool, signed, unsigned, floating
        raise TypeError(f"matrix must hold numbers or bools, got dtype {values.dtype}")
    for name, labels, count in (
        ("row_labels", row_labels, values.shape[0]),
        ("col_labels", col_labels, values.shape[1]),
    ):
        if labels is not None and not hasattr(labels, "__len__"):
            raise TypeError(f"{name} must be a sequence of labels, got {labels!r}")
        if labels is not None and len(labels) != count:
            raise ValueError(
                f"{name} has {len(labels)} labels for {count} {name[:3]}s of matrix {values.shape}"
            )
    vmin = None if vmin is None else require_real("vmin", vmin)
    vmax = None if vmax is None else require_real("vmax", vmax)
    if vmin is not None and vmax is not None and vmin >= vmax:
        raise ValueError(f"vmin must be < vmax, got vmin={vmin}, vmax={vmax}")
    values = values.astype(float)
    image = ax.imshow(values, vmin=vmin, vmax=vmax, cmap=SEQUENTIAL_CMAP, aspect="equal")
    rows, cols = values.shape
    ax.set_xticks(range(cols), col_labels if col_labels is not None else range(cols))
    ax.set_yticks(range(rows), row_labels if row_labels is not None else range(rows))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    if title:
        ax.set_title(title)
    if annotate and rows <= 12 and cols <= 12:
        lo = values.min() if vmin is None else vmin
        hi = values.max() if vmax is None else vmax
        middle = (lo + hi) / 2
        for i in range(rows):
            for j in range(cols):
                colour = "black" if values[i, j] > middle else "white"
                ax.text(
                    j, i, f"{values[i, j]:.2f}", ha="center", va="center", color=colour, fontsize=9
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return image
