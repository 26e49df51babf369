"""A paged KV cache: fixed-size blocks from one shared pool, found through a block table.

A contiguous cache (:class:`attnbook.kv_cache.KVCache`) reserves room for the longest sequence
it might hold, for every sequence, before it knows how long each will be. A paged cache, the
idea of vLLM's PagedAttention (Kwon et al., 2023), keeps one pool of blocks of ``block_size``
positions and gives a sequence a new block only when its last one is full; the sequence's
*block table* lists its blocks in order, so they need not be adjacent in memory. Reading a
sequence gathers its blocks through the table. The memory a sequence holds but does not use is
then under one block, at its end.

Extra shape names: ``N`` blocks in the pool, ``P`` positions per block (``block_size``).
"""

from __future__ import annotations

import torch

from attnbook._checks import require_positive_int, require_tensor

__all__ = ["PagedKVCache"]


class PagedKVCache:
    """One layer's key and value pools ``(N, Hkv, P, dk)`` shared by many sequences.

    Args:
        blocks: ``N``, blocks in the pool.
        block_size: ``P``, positions per block.
        kv_heads, head_dim: ``Hkv`` and ``dk`` of the keys and values.
        dtype: a floating dtype for the pools.

    Sequences are named by any hashable id; :attr:`block_tables` maps each to its list of
    block indices and :attr:`lengths` to its positions. Free blocks are handed out lowest
    index first, so a run is reproducible.

    Raises:
        TypeError: a size that is not an int, a non-floating ``dtype``.
        ValueError: a size < 1.
    """

    def __init__(
        self,
        *,
        blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        n = require_positive_int("blocks", blocks)
        self.block_size = require_positive_int("block_size", block_size)
        heads = require_positive_int("kv_heads", kv_heads)
        dim = require_positive_int("head_dim", head_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.keys = torch.zeros(n, heads, self.block_size, dim, dtype=dtype)  # (N, Hkv, P, dk)
        self.values = torch.zeros_like(self.keys)  # (N, Hkv, P, dk)
        self.free_blocks: list[int] = list(range(n))  # kept sorted
        self.block_tables: dict[object, list[int]] = {}
        self.lengths: dict[object, int] = {}

    def append(self, seq: object, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append positions to sequence ``seq`` (a new id starts a new sequence).

        Args:
            seq: the sequence's id (hashable).
            k, v: new keys and values ``(Hkv, Tnew, dk)``, of the pool's dtype.

        Raises:
            TypeError: ``k`` or ``v`` not a floating tensor of the pool's dtype; an unhashable
                ``seq``.
            ValueError: shapes other than ``(Hkv, Tnew, dk)``, or too few free blocks (then
                nothing is written).
        """
        hash(seq)  # TypeError for an unhashable id, before anything changes
        heads, dim = self.keys.shape[1], self.keys.shape[3]
        for name, x in (("k", k), ("v", v)):
            x = require_tensor(name, x, rank=3, dtype="floating", shape_hint="(Hkv, Tnew, dk)")
            if x.shape[0] != heads or x.shape[2] != dim:
                raise ValueError(
                    f"{name} must have shape (Hkv, Tnew, dk) = ({heads}, Tnew, {dim}), "
                    f"got {tuple(x.shape)}"
                )
            if x.dtype != self.keys.dtype:
                raise TypeError(
                    f"{name} must have the pool's dtype {self.keys.dtype}, got {x.dtype}"
                )
        if k.shape != v.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have equal shapes")
        table = self.block_tables.get(seq, [])
        start, new = self.lengths.get(seq, 0), k.shape[1]
        needed = -(-(start + new) // self.block_size) - len(table)  # blocks to add
        if needed > len(self.free_blocks):
            raise ValueError(
                f"sequence {seq!r} needs {needed} more blocks but the pool has "
                f"{len(self.free_blocks)} free of {self.keys.shape[0]}"
            )
        table = table + self.free_blocks[:needed]
        del self.free_blocks[:needed]
        self.block_tables[seq], self.lengths[seq] = table, start + new
        positions = torch.arange(start, start + new)  # (Tnew,) positions within the sequence
        block = torch.tensor(table, dtype=torch.long)[
            positions // self.block_size
        ]  # (Tnew,) pool block of each
        offset = positions % self.block_size  # (Tnew,) slot within its block
        self.keys[block, :, offset] = k.transpose(0, 1)  # (Tnew, Hkv, dk) into (N, Hkv, P, dk)
        self.values[block, :, offset] = v.transpose(0, 1)

    def gather(self, seq: object) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of ``seq`` in position order, each ``(Hkv, T, dk)`` (copies).

        Raises:
            KeyError: an id that holds no positions.
        """
        if seq not in self.lengths:
            raise KeyError(f"no sequence {seq!r} in the cache")
        table, t = torch.tensor(self.block_tables[seq], dtype=torch.long), self.lengths[seq]

        def read(pool: torch.Tensor) -> torch.Tensor:
            pages = pool[table]  # (blocks, Hkv, P, dk): gather by page
            return pages.transpose(0, 1).flatten(1, 2)[:, :t]  # (Hkv, blocks * P, dk) -> T

        return read(self.keys), read(self.values)

    def free(self, seq: object) -> int:
        """Return the blocks of a finished sequence to the pool; returns how many.

        Raises:
            KeyError: an id that holds no positions.
        """
        if seq not in self.lengths:
            raise KeyError(f"no sequence {seq!r} in the cache")
        table = self.block_tables.pop(seq)
        del self.lengths[seq]
        self.free_blocks = sorted(self.free_blocks + table)
        return len(table)

    def unused_slots(self) -> int:
        """Positions held by sequences' blocks but not filled: under one block each."""
        return sum(len(self.block_tables[s]) * self.block_size - t for s, t in self.lengths.items())
