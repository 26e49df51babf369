"""Causal linear attention in its three equal forms: quadratic, recurrent and chunked.

Replacing ``exp(q . k)`` by ``phi(q) . phi(k)`` for a positive feature map ``phi``
(Katharopoulos et al., 2020, use ``elu(x) + 1``) makes the output of query ``t``

``o_t = phi(q_t) S_t / (phi(q_t) . z_t)``, with ``S_t = sum_{j<=t} phi(k_j) v_j^T`` and
``z_t = sum_{j<=t} phi(k_j)``.

The *quadratic* form builds the masked ``(T, T)`` matrix ``phi(Q) phi(K)^T``; the *recurrent*
form carries ``(S, z)``, a state of ``dk * dv + dk`` numbers per head whatever ``T`` is; the
*chunked* form (how such models train) carries the state across chunks of ``C`` tokens and uses
the masked matrix inside each chunk. All three are the same function of the inputs.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from attnbook._checks import require_positive_int, require_qkv

__all__ = ["causal_linear_attention", "elu_feature_map"]

Form = Literal["quadratic", "recurrent", "chunked"]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``elu(x) + 1``: positive everywhere, so every denominator below is positive."""
    return F.elu(x) + 1


def causal_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    form: Form = "recurrent",
    chunk_size: int = 64,
) -> torch.Tensor:
    """Causal linear attention with the feature map :func:`elu_feature_map`.

    Args:
        q: queries ``(..., H, T, dk)``.
        k, v: keys ``(..., H, T, dk)`` and values ``(..., H, T, dv)``: as many as queries,
            query ``t`` reading keys ``0 .. t``.
        form: ``"quadratic"``, ``"recurrent"`` or ``"chunked"``; equal up to rounding.
        chunk_size: ``C``, tokens per chunk of the chunked form (an int >= 1; need not
            divide ``T``); ignored by the other forms.

    Returns:
        ``(..., H, T, dv)``; with ``T == 0`` an empty tensor.

    Raises:
        TypeError, ValueError: as :func:`attnbook.attention.attention` for ``q, k, v`` (equal
            head counts here), ``Tq != Tk``, an unknown ``form`` or a bad ``chunk_size``.
    """
    q, k, v = require_qkv(q, k, v, allow_gqa=False)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"causal linear attention needs Tq == Tk, got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if form not in ("quadratic", "recurrent", "chunked"):
        raise ValueError(f"form must be 'quadratic', 'recurrent' or 'chunked', got {form!r}")
    chunk_size = require_positive_int("chunk_size", chunk_size)
    fq, fk = elu_feature_map(q), elu_feature_map(k)  # (..., H, T, dk)
    t = q.shape[-2]
    if form == "quadratic":
        sim = (fq @ fk.transpose(-2, -1)).tril()  # (..., H, T, T): key j <= query i only
        return (sim @ v) / sim.sum(-1, keepdim=True)
    state = q.new_zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]))  # S: (..., H, dk, dv)
    norm = q.new_zeros(q.shape[:-2] + q.shape[-1:])  # z: (..., H, dk)
    if form == "recurrent":  # one token a step, the state updated before its query reads it
        rows = []
        for i in range(t):
            fki, vi, fqi = fk[..., i, :], v[..., i, :], fq[..., i, :]  # (..., H, dk|dv)
            state = state + fki.unsqueeze(-1) * vi.unsqueeze(-2)  # S_t = S_{t-1} + phi(k_t) v_t^T
            norm = norm + fki  # z_t = z_{t-1} + phi(k_t)
            numer = (fqi.unsqueeze(-1) * state).sum(-2)  # phi(q_t)^T S_t: (..., H, dv)
            rows.append(numer / (fqi * norm).sum(-1, keepdim=True))
        return torch.stack(rows, dim=-2) if rows else v.new_zeros(v.shape)
    out = []  # the chunked form: the state across chunks, the masked matrix inside each
    for start in range(0, t, chunk_size):
        cq, ck, cv = (x[..., start : start + chunk_size, :] for x in (fq, fk, v))  # (..., C, .)
        inside = (cq @ ck.transpose(-2, -1)).tril()  # (..., H, C, C)
        numer = cq @ state + inside @ cv  # (..., H, C, dv): earlier chunks, then this one
        denom = cq @ norm.unsqueeze(-1) + inside.sum(-1, keepdim=True)  # (..., H, C, 1)
        out.append(numer / denom)
        state = state + ck.transpose(-2, -1) @ cv  # (..., H, dk, dv)
        norm = norm + ck.sum(-2)  # (..., H, dk)
    return torch.cat(out, dim=-2) if out else v.new_zeros(v.shape)
