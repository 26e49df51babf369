"""Count the tensor memory an operation allocates, deterministically, on any device.

Wall-clock memory readings on a shared CPU change from run to run, and PyTorch's CPU
allocator keeps no peak statistics. :class:`AllocationCounter` instead watches every operator
through PyTorch's dispatcher and adds up the storage bytes of the tensors it creates, so the
same code gives the same count on every run, and on ``meta`` tensors (shapes without data)
gives the count a real run would reach without doing the arithmetic.

What it cannot see: scratch buffers a fused kernel allocates inside itself (SDPA's CPU
kernel, for one), allocator rounding and caching, and Python object overhead.

:func:`saved_bytes` counts a different quantity: the memory that autograd keeps alive between
the forward and the backward pass, which is what training pays for on top of the forward peak.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["AllocationCounter", "peak_bytes", "saved_bytes"]


class AllocationCounter(TorchDispatchMode):
    """Peak and live bytes of tensor storage allocated inside a ``with`` block.

    Inputs (and views of them) are free; an operator's result is counted the first time its
    storage appears and uncounted when Python frees that storage. ``peak`` is the high-water
    mark of ``live``, so it includes the outputs still alive at the end.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._known: weakref.WeakSet = weakref.WeakSet()  # storages seen as inputs or counted

    def _freed(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self._known.update(t.untyped_storage() for t in inputs)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            if storage not in self._known:
                self._known.add(storage)
                self.live += storage.nbytes()
                weakref.finalize(storage, self._freed, storage.nbytes())
        self.peak = max(self.peak, self.live)
        return out


def peak_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes that ``fn(*args, **kwargs)`` allocates beyond its inputs (see above)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with AllocationCounter() as counter:
        fn(*args, **kwargs)
    return counter.peak


def saved_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Bytes of tensor storage that autograd saves for the backward pass of ``fn(*args)``.

    Every tensor an operation saves for backward passes through
    :func:`torch.autograd.graph.saved_tensors_hooks`; each distinct storage is counted once,
    and storages of the tensor arguments (and their views) are free, since the caller holds
    them anyway. Works on ``meta`` tensors. Arguments that should receive gradients must have
    ``requires_grad=True``, or nothing is saved.

    Returns:
        ``int`` bytes; 0 if no argument requires grad.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    given = tree_flatten((args, kwargs))[0]
    inputs = {t.untyped_storage()._cdata for t in given if isinstance(t, torch.Tensor)}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in inputs:  # the C++ storage's address: unique while alive
            saved[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)  # noqa: F841 (kept alive, so the saved storages are too)
    return sum(saved.values())
