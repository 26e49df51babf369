"""Slow-memory traffic of attention, counted while it runs: the IO complexity of FlashAttention.

A two-level machine: a slow memory (a GPU's HBM) that holds everything, and a fast memory (its
on-chip SRAM) of ``M`` numbers where all arithmetic happens. :class:`FastMemory` is that fast
memory: every tile an algorithm brings in is a *read* of slow memory, every tile it sends back
a *write*, and what is resident at once may never exceed ``M`` numbers (it raises otherwise).
Two schedules of one head's attention run on it, with real tensors (so the output can be
checked) or on meta tensors (shapes only: the same counts, no arithmetic):

* :func:`standard_attention_io`, three passes as a framework runs them: ``S = c Q K^T``
  written out, a row softmax that reads ``S`` and writes ``P``, then ``O = P V``. The score
  matrix crosses the slow-memory boundary four times: ``4 Tq Tk`` numbers.
* :func:`flash_attention_io`, one pass over query tiles; for each, the key and value tiles
  stream through with the online softmax (:mod:`attnbook.online_softmax`) and only ``O`` and
  the row log-sum-exp are written. ``Q`` is read once, but ``K`` and ``V`` are read once per
  query tile, so with query tiles of ``Br ~ M / (3d)`` (:func:`flash_tiles`) the traffic is
  about ``2 Tq Tk d / Br``: ``Theta(n^2 d^2 / M)`` (Dao et al., 2022, Theorem 2), not zero.

Counts are in numbers (multiply by the bytes per number for bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnbook._checks import require_bool, require_positive_int, require_tensor

__all__ = ["FastMemory", "Traffic", "flash_attention_io", "flash_tiles", "standard_attention_io"]

_NEG_INF = float("-inf")


@dataclass(frozen=True)
class Traffic:
    """Numbers moved between slow and fast memory, and the most held in fast memory at once."""

    reads: int
    writes: int
    peak: int

    @property
    def total(self) -> int:
        return self.reads + self.writes


class FastMemory:
    """A fast memory of ``capacity`` numbers that counts the traffic to the slow memory.

    ``read(x)`` brings a tile in (``x.numel()`` reads) and ``write(x)`` sends one out;
    ``hold(n)`` and ``free(n)`` account for tiles that live in fast memory (inputs brought in,
    accumulators, scores); a hold beyond ``capacity`` raises ``MemoryError``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = require_positive_int("capacity", capacity)
        self.reads = self.writes = self.resident = self.peak = 0

    def hold(self, numbers: int) -> None:
        self.resident += numbers
        if self.resident > self.capacity:
            raise MemoryError(
                f"fast memory over capacity: {self.resident} numbers resident, "
                f"capacity {self.capacity}"
            )
        self.peak = max(self.peak, self.resident)

    def free(self, numbers: int) -> None:
        self.resident -= numbers

    def read(self, x: torch.Tensor) -> torch.Tensor:
        self.reads += x.numel()
        self.hold(x.numel())
        return x

    def write(self, x: torch.Tensor) -> None:
        self.writes += x.numel()

    def traffic(self) -> Traffic:
        return Traffic(self.reads, self.writes, self.peak)


def _require_head(q, k, v, fast_memory):
    q = require_tensor("q", q, rank=2, dtype="floating", shape_hint="(Tq, d)")
    k = require_tensor("k", k, rank=2, dtype="floating", shape_hint="(Tk, d)")
    v = require_tensor("v", v, rank=2, dtype="floating", shape_hint="(Tk, dv)")
    if q.shape[1] != k.shape[1] or k.shape[0] != v.shape[0]:
        raise ValueError(
            f"q (Tq, d), k (Tk, d), v (Tk, dv) do not fit: got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q, k, v, require_positive_int("fast_memory", fast_memory)


def flash_tiles(d: int, fast_memory: int, dv: int | None = None) -> tuple[int, int]:
    """Query and key tile sizes ``(Br, Bc)`` for :func:`flash_attention_io`.

    The book's own choice, made for FlashAttention-2's loop order (query tiles outside and
    resident, key and value tiles streaming past): the key tile is capped at the head width,
    ``Bc = min(d, M // (4 (d + dv)))`` (at least 1), and the query tile takes the rest of the
    fast memory: the largest ``Br`` with ``Br d`` (queries) + ``Br dv`` (the output
    accumulator) + ``2 Br`` (running max and sum) + ``Br Bc`` (scores) + ``Bc (d + dv)`` (a
    key and a value tile) <= ``M``. With ``dv = d`` and ``Bc = d`` that is
    ``Br = (M - 2 d^2) // (3 d + 2)``. So ``Br`` grows as ``M / d`` and the ``Tq / Br``
    re-reads of ``K`` and ``V`` shrink as ``d / M``. (Dao et al., 2022, Algorithm 1 caps the
    query tile instead: ``Bc = ceil(M / 4d)``, ``Br = min(ceil(M / 4d), d)``.) Raises if
    ``Br = 1`` does not fit.
    """
    d = require_positive_int("d", d)
    dv = d if dv is None else require_positive_int("dv", dv)
    m = require_positive_int("fast_memory", fast_memory)
    b_c = max(1, min(d, m // (4 * (d + dv))))
    b_r = (m - b_c * (d + dv)) // (d + dv + 2 + b_c)
    if b_r < 1:
        raise ValueError(
            f"fast_memory={m} cannot hold one query row with one key and value (d={d}, dv={dv})"
        )
    return b_r, b_c


def _standard_tile(d: int, dv: int, fast_memory: int) -> int:
    # A resident row tile (B x d of Q, or the B x dv output) + a streamed B x d tile + B x B.
    width = max(d, dv)
    b = math.isqrt(width * width + fast_memory) - width
    while b > 0 and b * b + 2 * width * b > fast_memory:
        b -= 1
    if b < 1:
        raise ValueError(f"fast_memory={fast_memory} cannot hold one row of tiles")
    return b


def standard_attention_io(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fast_memory: int
) -> tuple[torch.Tensor, Traffic]:
    """One head of ``softmax(Q K^T / sqrt(d)) V`` in three passes, each through fast memory.

    1. ``S = c Q K^T``: a query tile stays resident while the key tiles stream past; each
       ``B x B`` block of ``S`` is written out.
    2. The softmax: rows of ``S`` are read, normalised in place, written back as ``P``
       (a row must fit: ``Tk <= fast_memory``).
    3. ``O = P V``: an output tile stays resident while tiles of ``P`` and ``V`` stream past.

    Args:
        q, k, v: ``(Tq, d)``, ``(Tk, d)``, ``(Tk, dv)`` of one dtype (meta tensors count
            without computing).
        fast_memory: ``M``, numbers the fast memory holds.

    Returns:
        ``(O (Tq, dv), Traffic)``.
    """
    q, k, v, m = _require_head(q, k, v, fast_memory)
    (t_q, d), (t_k, dv) = q.shape, v.shape
    if t_k > m:
        raise ValueError(f"a row of scores ({t_k} numbers) must fit in fast_memory={m}")
    b = _standard_tile(d, dv, m)
    fast, scale = FastMemory(m), 1.0 / math.sqrt(d)
    compute = q.device.type != "meta"  # on meta tensors: the same traffic, no arithmetic
    scores = q.new_empty(t_q, t_k)  # slow memory
    for qs in range(0, t_q, b):  # pass 1: S = c Q K^T
        q_i = fast.read(q[qs : qs + b])
        for ks in range(0, t_k, b):
            k_j = fast.read(k[ks : ks + b])
            s_ij = scores[qs : qs + b, ks : ks + b]  # (B, B): computed in fast memory
            fast.hold(s_ij.numel())
            if compute:
                s_ij.copy_((q_i @ k_j.T) * scale)
            fast.write(s_ij)
            fast.free(s_ij.numel() + k_j.numel())
        fast.free(q_i.numel())
    rows = max(1, m // max(t_k, 1))
    for qs in range(0, t_q, rows):  # pass 2: P = softmax(S), row by row, in place
        s = fast.read(scores[qs : qs + rows])
        if compute:
            s.copy_(torch.softmax(s, dim=-1))
        fast.write(s)
        fast.free(s.numel())
    out = q.new_empty(t_q, dv)
    for qs in range(0, t_q, b):  # pass 3: O = P V
        o_i = out[qs : qs + b]  # (B, dv): accumulated in fast memory
        fast.hold(o_i.numel())
        if compute:
            o_i.zero_()
        for ks in range(0, t_k, b):
            p_ij, v_j = fast.read(scores[qs : qs + b, ks : ks + b]), fast.read(v[ks : ks + b])
            if compute:
                o_i += p_ij @ v_j
            fast.free(p_ij.numel() + v_j.numel())
        fast.write(o_i)
        fast.free(o_i.numel())
    return out, fast.traffic()


def flash_attention_io(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    fast_memory: int,
    *,
    causal: bool = False,
    tiles: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, Traffic]:
    """One head of attention in one pass: query tiles outside, key/value tiles inside.

    For each query tile (read once) the key and value tiles stream through fast memory and
    merge into the running ``(m, l, u)`` of the online softmax; then the output tile and its
    log-sum-exp (for the backward pass) are written. With ``causal``, key tiles that start
    after the tile's last query are skipped (neither read nor computed).

    Args:
        q, k, v: ``(Tq, d)``, ``(Tk, d)``, ``(Tk, dv)``; meta tensors count without computing.
        fast_memory: ``M``, numbers the fast memory holds.
        causal: bottom-right aligned causal mask (the queries are the newest ``Tq``).
        tiles: ``(Br, Bc)``, queries and keys per tile; defaults to :func:`flash_tiles`.

    Returns:
        ``(O (Tq, dv), Traffic)``: reads ``Tq d + Tk (d + dv) ceil(Tq / Br)`` without a mask,
        writes ``Tq (dv + 1)``.
    """
    q, k, v, m = _require_head(q, k, v, fast_memory)
    causal = require_bool("causal", causal)
    (t_q, d), (t_k, dv) = q.shape, v.shape
    if tiles is None:
        b_r, b_c = flash_tiles(d, m, dv)
    else:
        b_r, b_c = (require_positive_int(n, x) for n, x in zip(("Br", "Bc"), tiles, strict=True))
    fast, scale, offset = FastMemory(m), 1.0 / math.sqrt(d), t_k - t_q
    out = q.new_empty(t_q, dv)
    compute = q.device.type != "meta"  # on meta tensors: the same traffic, no arithmetic
    for qs in range(0, t_q, b_r):
        q_i = fast.read(q[qs : qs + b_r])  # (Br, d)
        rows = q_i.shape[0]
        fast.hold(2 * rows + rows * dv)  # running max m and sum l, accumulator u
        if compute:
            m_i, l_i = q.new_full((rows,), _NEG_INF), q.new_zeros(rows)
            u_i = q.new_zeros(rows, dv)
        for ks in range(0, t_k, b_c):
            if causal and ks > offset + qs + rows - 1:
                break  # every later key tile is fully masked for this query tile
            k_j, v_j = fast.read(k[ks : ks + b_c]), fast.read(v[ks : ks + b_c])
            cols = k_j.shape[0]
            fast.hold(rows * cols)  # the scores, in fast memory only
            if compute:
                s = (q_i @ k_j.T) * scale  # (Br, Bc)
                if causal:
                    i = torch.arange(qs, qs + rows, device=q.device)[:, None] + offset
                    j = torch.arange(ks, ks + cols, device=q.device)[None, :]
                    s = s.masked_fill(j > i, _NEG_INF)
                m_new = torch.maximum(m_i, s.amax(-1))
                shift = m_new.masked_fill(m_new == _NEG_INF, 0.0)
                p = torch.exp(s - shift[:, None])
                alpha = torch.exp(m_i - shift)
                l_i, u_i, m_i = alpha * l_i + p.sum(-1), alpha[:, None] * u_i + p @ v_j, m_new
            fast.free(rows * cols + k_j.numel() + v_j.numel())
        if compute:
            out[qs : qs + b_r] = u_i / l_i.masked_fill(l_i == 0, 1.0)[:, None]
        fast.writes += rows * dv + rows  # the output tile and its log-sum-exp
        fast.free(q_i.numel() + 2 * rows + rows * dv)
    return out, fast.traffic()
