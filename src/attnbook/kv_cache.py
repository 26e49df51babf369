"""A key/value cache for autoregressive decoding: each layer keeps the keys and values it has
already computed, so a new token costs one row of projections instead of the whole prefix.

The buffers are allocated once, for ``max_positions`` positions, so their size is known in
advance and equals :func:`attnbook.costs.kv_cache_bytes` for the same sizes. Keys are stored
after RoPE (they never need rotating again); values as projected.
"""

from __future__ import annotations

import torch

from attnbook._checks import (
    require_device,
    require_int,
    require_positive_int,
    require_tensor,
    too_large,
)

__all__ = ["KVCache"]


class KVCache:
    """Preallocated per-layer key and value buffers ``(L, B, Hkv, max_positions, dk)``.

    Args:
        layers: ``L``, layers that store into the cache.
        batch: ``B``, sequences decoded together.
        kv_heads: ``Hkv``, key/value heads per layer (fewer than query heads under GQA).
        head_dim: ``dk``, features per key and per value.
        max_positions: how many positions the buffers hold; appending past it raises.
        dtype, device: of the buffers (``dtype`` must be floating).

    A forward pass with a cache appends the same number of new positions to every layer; the
    cache :attr:`length` counts positions that every layer holds.

    Raises:
        TypeError: a size that is not an int, a non-floating ``dtype``, or a ``device`` of the
            wrong type.
        ValueError: a size < 1, buffers too large to allocate, or an unusable ``device``.
    """

    def __init__(
        self,
        *,
        layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_positions: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        sizes = {"layers": layers, "batch": batch, "kv_heads": kv_heads, "head_dim": head_dim}
        sizes = {name: require_positive_int(name, value) for name, value in sizes.items()}
        self.max_positions = require_positive_int("max_positions", max_positions)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        device = require_device("device", device)
        shape = (
            sizes["layers"],
            sizes["batch"],
            sizes["kv_heads"],
            self.max_positions,
            sizes["head_dim"],
        )
        sizes_text = ", ".join(f"{n}={v}" for n, v in sizes.items())
        with too_large(f"{sizes_text}, max_positions={self.max_positions}"):
            self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, Hkv, P, dk)
            self.values = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, Hkv, P, dk)
        self._filled = [0] * sizes["layers"]  # positions stored by each layer

    @property
    def length(self) -> int:
        """Positions stored by every layer: the absolute position of the next new token."""
        return min(self._filled)

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers (allocated in full at construction)."""
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def append(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a layer's new keys and values and return everything it has stored so far.

        Args:
            layer: which layer, ``0 <= layer < L``.
            k, v: the new positions' keys and values ``(B, Hkv, Tnew, dk)``.

        Returns:
            ``(keys, values)``, views ``(B, Hkv, Tk, dk)`` with ``Tk`` the layer's positions
            after the append (old ones first). Later appends overwrite nothing they return.

        Raises:
            TypeError: a non-int ``layer``; ``k`` or ``v`` not a floating tensor of the
                cache's dtype.
            ValueError: a layer out of range, shapes that differ from the buffers', ``k`` or
                ``v`` on another device (a ``meta`` tensor, say), or more positions than
                ``max_positions`` in total.
        """
        layer = require_int("layer", layer, minimum=0)
        if layer >= len(self._filled):
            raise ValueError(f"layer must be < layers={len(self._filled)}, got {layer}")
        expected = f"(B, Hkv, Tnew, dk) = {(*self.keys.shape[1:3], 'Tnew', self.keys.shape[4])}"
        for name, x in (("k", k), ("v", v)):
            x = require_tensor(name, x, rank=4, dtype="floating", shape_hint="(B, Hkv, Tnew, dk)")
            if x.shape[:2] != self.keys.shape[1:3] or x.shape[3] != self.keys.shape[4]:
                raise ValueError(f"{name} must have shape {expected}, got {tuple(x.shape)}")
            if x.device != self.keys.device:
                raise ValueError(f"{name} is on {x.device} but the cache is on {self.keys.device}")
        if k.shape != v.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have equal shapes")
        if not k.dtype == v.dtype == self.keys.dtype:
            raise TypeError(
                f"k and v must have the cache's dtype {self.keys.dtype}, got {k.dtype}, {v.dtype}"
            )
        start, new = self._filled[layer], k.shape[2]
        if start + new > self.max_positions:
            raise ValueError(
                f"appending {new} positions to the {start} of layer {layer} exceeds "
                f"max_positions={self.max_positions}"
            )
        self.keys[layer, :, :, start : start + new] = k
        self.values[layer, :, :, start : start + new] = v
        self._filled[layer] = start + new
        return self.keys[layer, :, :, : start + new], self.values[layer, :, :, : start + new]
