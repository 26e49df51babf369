"""One figure style for the whole book: readable at phone width, colour-blind safe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnbook._checks import require_positive_int, require_real

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

    ``nrows`` and ``ncols`` are ints ``>= 1``; ``width`` and ``height`` are inches ``> 0``.
    """
    import matplotlib.pyplot as plt

    nrows, ncols = require_positive_int("nrows", nrows), require_positive_int("ncols", ncols)
    width = require_real("width", width, positive=True)
    if height is not None:
        height = require_real("height", height, positive=True)
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
    values = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix)
    if values.ndim != 2 or values.size == 0:
        raise ValueError(f"matrix must be 2-D (rows, cols) and non-empty, got shape {values.shape}")
    if values.dtype.kind not in "biuf":  # bool, signed, unsigned, floating
        raise TypeError(f"matrix must hold numbers or bools, got dtype {values.dtype}")
    for name, labels, count in (
        ("row_labels", row_labels, values.shape[0]),
        ("col_labels", col_labels, values.shape[1]),
    ):
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
