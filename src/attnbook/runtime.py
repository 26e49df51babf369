"""Reproducible notebook runtime: one call at the top of every chapter."""

from __future__ import annotations

import os
import random

from attnbook._checks import require_int

__all__ = ["CPU_PATHS", "SEED_OVERRIDE", "setup", "training_seed"]


SEED_OVERRIDE = "ATTNBOOK_SEED"  # environment variable: the robustness sweep's seed

# CPU code paths, selected by environment variables read before torch runs its first op.
# "declared" produced the stored outputs: every x86-64 CPU since 2013 (Haswell, Zen) can take
# it, and it gives the same digits on AVX2 and AVX-512 machines. "no-vector" is PyTorch's own
# kernels without SIMD, MKL's and oneDNN's most compatible paths. A machine's own "native"
# path sets none of these (AVX-512 where the CPU has it).
CPU_PATHS = {
    "declared": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "no-vector": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
    "native": {},
}


def training_seed(default: int) -> int:
    """The seed a chapter trains its models from: ``default``, unless the environment
    variable ``ATTNBOOK_SEED`` holds an integer, which replaces it. The robustness sweep
    (``benchmarks/sweep.py``) re-runs the training chapters that way, on other seeds, to check
    their claims; :func:`setup` honours the same variable for the global generators.

    Raises:
        TypeError, ValueError: ``default`` not an int in ``[0, 2**32)``, or ``ATTNBOOK_SEED``
            set to anything but an integer in that range.
    """
    default = require_int("default", default, minimum=0, maximum=2**32 - 1)
    override = os.environ.get(SEED_OVERRIDE, "").strip()
    if not override:
        return default
    if not (override.isascii() and override.isdigit()):
        raise ValueError(f"{SEED_OVERRIDE} must be a non-negative integer, got {override!r}")
    return require_int(SEED_OVERRIDE, int(override), minimum=0, maximum=2**32 - 1)


def setup(seed: int = 0, *, threads: int = 1) -> None:
    """Seed every generator a chapter uses, pin the CPU thread count and apply the figure style.

    Args:
        seed: seed for ``random``, NumPy and PyTorch, an int in ``[0, 2**32)`` (NumPy's range).
            ``ATTNBOOK_SEED``, when set (by the robustness sweep), replaces it, as in
            :func:`training_seed`.
        threads: intra-op threads for PyTorch. One thread keeps float reductions in a fixed
            order, so a run repeats digit for digit on one CPU code path, and the chapters are
            small enough not to miss the others.

    Raises:
        TypeError, ValueError: ``seed`` or ``threads`` out of range, or ``ATTNBOOK_SEED`` set
            to anything but an integer in ``[0, 2**32)``.
    """
    seed = training_seed(require_int("seed", seed, minimum=0, maximum=2**32 - 1))
    threads = require_int("threads", threads, minimum=1, maximum=2**31 - 1)  # a C int in torch

    import numpy as np
    import torch

    from attnbook.plots import use_style

    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    _inline_figures()  # first: it may reset rcParams that the book's style then sets
    use_style()
    _colab_widgets()


def _inline_figures() -> None:
    # In a kernel, turn on inline figures now rather than when pyplot is first used: a
    # chapter may display a bare matplotlib Figure (a widget's static frames) before any
    # plt call, and without this it would print as "<Figure size ...>" instead of an image.
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")
        # Twice the pixels, shown at the same size: sharp on hi-DPI screens (the site stores
        # figures as 256-colour PNGs, so a 2x figure weighs no more than a 1x one did).
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")


def _colab_widgets() -> None:
    # Colab draws third-party widgets (the book's anywidgets) only with its custom widget
    # manager turned on. anywidget does this when a widget is built; doing it here as well
    # makes it explicit. Only in Colab, and never an error: elsewhere this does nothing.
    import sys

    if "google.colab" not in sys.modules:  # not in Colab
        return
    try:
        from google.colab import output

        output.enable_custom_widget_manager()
    except Exception:  # an older or changed Colab: the HTML face still shows
        pass
