"""A rolling (ring-buffer) KV cache for sliding-window attention.

With a window of ``w`` positions a query never reads a key more than ``w - 1`` positions back,
so the cache needs only ``w`` slots: position ``p`` is written to slot ``p % w``, overwriting
position ``p - w``, which no later query may read. The cache stops growing at the window (the
rolling buffer of Mistral 7B). Attention does not care in which order its keys come, as long
as each value stays with its key, so the slots are returned in buffer order, with their
positions for whoever needs them.
"""

from __future__ import annotations

import torch

from attnbook._checks import require_positive_int, require_tensor

__all__ = ["RollingKVCache"]


class RollingKVCache:
    """Key and value ring buffers ``(B, Hkv, w, dk)`` for one layer.

    Args:
        window: ``w``, positions each query may read counting itself (as
            :func:`attnbook.masks.sliding_window_mask`'s ``window``).
        batch, kv_heads, head_dim: ``B``, ``Hkv`` and ``dk`` of the keys and values.
        dtype: a floating dtype for the buffers.

    Raises:
        TypeError: a size that is not an int, a non-floating ``dtype``.
        ValueError: a size < 1.
    """

    def __init__(
        self,
        *,
        window: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.window = require_positive_int("window", window)
        shape = tuple(
            require_positive_int(name, value)
            for name, value in (("batch", batch), ("kv_heads", kv_heads), ("head_dim", head_dim))
        )
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.keys = torch.zeros(*shape[:2], self.window, shape[2], dtype=dtype)  # (B, Hkv, w, dk)
        self.values = torch.zeros_like(self.keys)  # (B, Hkv, w, dk)
        self.length = 0  # positions appended so far: the position of the next token

    @property
    def nbytes(self) -> int:
        """Bytes of the two buffers: fixed at construction, whatever the length."""
        return 2 * self.keys.numel() * self.keys.element_size()

    def append(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Store one new position's key and value; return what the new query may read.

        Args:
            k, v: the new position's key and value ``(B, Hkv, 1, dk)``, of the cache's dtype.

        Returns:
            ``(keys, values, positions)``: ``(B, Hkv, n, dk)`` views of the filled slots, in
            slot order, and their absolute positions ``(n,)`` (int64), where
            ``n = min(length, w)`` after the append. They are exactly the positions
            ``length - n .. length - 1``, the window of the newest query.

        Raises:
            TypeError: ``k`` or ``v`` not a floating tensor of the cache's dtype.
            ValueError: shapes other than ``(B, Hkv, 1, dk)`` of the buffers.
        """
        expected = (*self.keys.shape[:2], 1, self.keys.shape[3])
        for name, x in (("k", k), ("v", v)):
            x = require_tensor(name, x, rank=4, dtype="floating", shape_hint="(B, Hkv, 1, dk)")
            if tuple(x.shape) != expected:
                raise ValueError(
                    f"{name} must have shape (B, Hkv, 1, dk) = {expected} (one position a "
                    f"call), got {tuple(x.shape)}"
                )
            if x.dtype != self.keys.dtype:
                raise TypeError(
                    f"{name} must have the cache's dtype {self.keys.dtype}, got {x.dtype}"
                )
        slot = self.length % self.window  # overwrites position length - w, now out of reach
        self.keys[:, :, slot] = k[:, :, 0]
        self.values[:, :, slot] = v[:, :, 0]
        self.length += 1
        n = min(self.length, self.window)
        slots = torch.arange(n)  # (n,)
        # Slot s holds the latest position p <= length - 1 with p % w == s.
        positions = self.length - 1 - (self.length - 1 - slots) % self.window  # (n,)
        return self.keys[:, :, :n], self.values[:, :, :n], positions
