"""attnbook.practice against readers: independent correct solutions pass, every catalogued
mistake planted in reader-style code is named by its own id, and wrong code that matches no
catalogued mistake fails with ``mistake is None`` and a message that points somewhere."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from torch.utils.flop_counter import FlopCounterMode

import attnbook.attention
import attnbook.costs
import attnbook.heads
import attnbook.induction
import attnbook.masks
import attnbook.online_softmax
import attnbook.rope
from attnbook.practice import EXERCISES, MISTAKES, check

# --- correct solutions, written independently ------------------------------------------------


def attention_einsum(q, k, v):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("...qk,...kv->...qv", scores.softmax(-1), v)


def attention_loop(q, k, v):
    """One query at a time with a hand-written stable softmax; leading dims flattened."""
    lead, (tq, dk), (tk, dv) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    n = math.prod(lead)
    qf, kf, vf = q.reshape(n, tq, dk), k.reshape(n, tk, dk), v.reshape(n, tk, dv)
    out = torch.zeros(qf.shape[0], tq, dv, dtype=q.dtype)
    for b in range(qf.shape[0]):
        for i in range(tq):
            if tk == 0:
                continue
            s = [float(qf[b, i] @ kf[b, j]) / math.sqrt(dk) for j in range(tk)]
            top = max(s)
            e = [math.exp(x - top) for x in s]
            out[b, i] = sum(e[j] / sum(e) * vf[b, j].double() for j in range(tk)).to(q.dtype)
    return out.reshape(*lead, tq, dv)


def attention_logsumexp_fp64(q, k, v):
    s = q.double() @ k.double().mT * q.shape[-1] ** -0.5
    w = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
    return (w @ v.double()).to(q.dtype)


def attention_tiled(q, k, v):
    return attnbook.online_softmax.tiled_attention(q, k, v, block_size=2)


def scores_einsum(q, k):
    return torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5


def scores_prescaled(q, k):
    return (q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2)


def scores_fp64(q, k):
    return (q.double() @ k.double().mT / math.sqrt(q.shape[-1])).to(q.dtype)


def split_chunks(x, heads):
    return torch.stack(x.chunk(heads, dim=-1), dim=1)


def split_view(x, heads):
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)


def split_loop(x, heads):
    dh = x.shape[-1] // heads
    return torch.stack([x[..., h * dh : (h + 1) * dh] for h in range(heads)], dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


def merge_contiguous_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * dh)


def merge_permute(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def kv_bytes_meta(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    """Allocate the cache on the meta device (no memory) and add up its bytes."""
    shape = (batch, kv_heads, positions, head_dim)
    return sum(torch.empty(shape, dtype=dtype, device="meta").nbytes for _ in range(2 * layers))


def kv_bytes_itemsize(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return 2 * batch * layers * positions * kv_heads * head_dim * dtype.itemsize


def kv_bytes_package(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    size = torch.finfo(dtype).bits // 8
    return attnbook.costs.kv_cache_bytes(
        batch=batch, layers=layers, positions=positions, kv_heads=kv_heads,
        head_dim=head_dim, bytes_per_element=size,
    )  # fmt: skip


def causal_tril(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)


def causal_sdpa_bias(t_q, t_k):
    return causal_lower_right(t_q, t_k)._materialize()


def causal_loop(t_q, t_k):
    rows = [[j <= t_k - t_q + i for j in range(t_k)] for i in range(t_q)]
    return torch.tensor(rows, dtype=torch.bool).reshape(t_q, t_k)


def padding_arange(lengths, t):
    return (torch.arange(t) < torch.tensor(lengths).unsqueeze(1))[:, None, None, :]


def padding_loop(lengths, t):
    mask = torch.zeros(len(lengths), 1, 1, t, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, ..., :n] = True
    return mask


def rope_rotate_half_fp32(x, positions):
    """Hugging Face's recipe: float32 frequencies and angles, cos/sin cast to x's dtype."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    return x * emb.cos().to(x.dtype) + rotated * emb.sin().to(x.dtype)


def rope_complex(x, positions):
    """Each pair (p, p + d/2) as one complex number turned by multiplication."""
    d = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64),
                       positions.double()[:, None] * freqs)  # fmt: skip
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double()) * turn
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)


def rope_matrices(x, positions):
    """A 2 x 2 rotation matrix per position and pair, applied with einsum."""
    d = x.shape[-1]
    ang = positions.double()[:, None] * 10000.0 ** (-2 * torch.arange(d // 2).double() / d)
    rot = torch.stack([torch.stack([ang.cos(), -ang.sin()], -1),
                       torch.stack([ang.sin(), ang.cos()], -1)], -2)  # fmt: skip
    pairs = torch.stack([x[..., : d // 2], x[..., d // 2 :]], -1).double()  # (..., T, d/2, 2)
    out = torch.einsum("tpij,...tpj->...tpi", rot, pairs)
    return torch.cat([out[..., 0], out[..., 1]], -1).to(x.dtype)


def flops_counted(*, t_q, t_k, heads, d_k, d_v):
    """FlopCounterMode on meta tensors: no memory, the counter's own arithmetic."""
    q = torch.empty(heads, t_q, d_k, device="meta")
    k = torch.empty(heads, t_k, d_k, device="meta")
    v = torch.empty(heads, t_k, d_v, device="meta")
    with FlopCounterMode(display=False) as counter:
        attnbook.attention.attention(q, k, v)
    return counter.get_total_flops()


def flops_per_matmul(*, t_q, t_k, heads, d_k, d_v):
    scores = 2 * t_q * d_k * t_k
    mix = 2 * t_q * t_k * d_v
    return heads * (scores + mix)


def merge_package(a, b):
    return attnbook.online_softmax.merge(
        attnbook.online_softmax.SoftmaxState(*a), attnbook.online_softmax.SoftmaxState(*b)
    )


def merge_nan_to_num(a, b):
    m = torch.maximum(a[0], b[0])
    ca, cb = torch.exp(a[0] - m).nan_to_num(0.0), torch.exp(b[0] - m).nan_to_num(0.0)
    return m, ca * a[1] + cb * b[1], ca[..., None] * a[2] + cb[..., None] * b[2]


def merge_where(a, b):
    m = torch.stack([a[0], b[0]]).amax(0)
    empty = torch.isinf(m)
    ca = torch.where(empty, 0.0, torch.exp(a[0] - m.masked_fill(empty, 0)))
    cb = torch.where(empty, 0.0, torch.exp(b[0] - m.masked_fill(empty, 0)))
    return m, ca * a[1] + cb * b[1], ca.unsqueeze(-1) * a[2] + cb.unsqueeze(-1) * b[2]


def masked_sdpa_guarded(q, k, v, mask):
    out = F.scaled_dot_product_attention(q, k, v, mask)  # attn_mask, positional
    return torch.where(mask.any(-1, keepdim=True), out, 0.0)  # SDPA gives NaN on empty rows


def masked_package(q, k, v, mask):
    return attnbook.attention.attention(q, k, v, mask)


def masked_where(q, k, v, mask):
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    s = torch.where(mask, s, float("-inf"))
    top = s.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0) if s.shape[-1] else s
    e = torch.exp(s - top)
    return e / e.sum(-1, keepdim=True).clamp(min=torch.finfo(e.dtype).tiny) @ v


def gqa_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def gqa_expand(q, k, v):
    b, hkv, t, d = k.shape
    g = q.shape[1] // hkv
    k = k[:, :, None].expand(b, hkv, g, t, d).reshape(b, hkv * g, t, d)
    v = v[:, :, None].expand(b, hkv, g, t, v.shape[-1]).reshape(b, hkv * g, t, v.shape[-1])
    return attnbook.attention.attention(q, k, v)


def gqa_grouped_queries(q, k, v):
    b, hq, tq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, hq // hkv, tq, d)  # (B, Hkv, g, Tq, d): neighbours share a kv head
    w = torch.softmax(qg @ k[:, :, None].mT / math.sqrt(d), -1)
    return (w @ v[:, :, None]).reshape(b, hq, tq, v.shape[-1])


def decode_with_package(q, k, v, cache_k, cache_v):
    pos = torch.tensor([cache_k.shape[-2]])
    keys = torch.cat([cache_k, attnbook.rope.apply_rope(k, pos)], -2)
    values = torch.cat([cache_v, v], -2)
    out = attnbook.attention.attention(attnbook.rope.apply_rope(q, pos), keys, values)
    return out, keys, values


def decode_sdpa_fp32_angles(q, k, v, cache_k, cache_v):
    d, p = q.shape[-1], cache_k.shape[-2]
    inv = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
    ang = torch.cat([p * inv, p * inv])
    cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)

    def rot(x):
        return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin

    keys, values = torch.cat([cache_k, rot(k)], -2), torch.cat([cache_v, v], -2)
    return F.scaled_dot_product_attention(rot(q), keys, values), keys, values


def backward_autograd(q, k, v, out, lse, d_out):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v)
    return torch.autograd.grad(o, (q, k, v), d_out)


def backward_einsum(q, k, v, out, lse, d_out):
    c = q.shape[-1] ** -0.5
    p = torch.exp(torch.einsum("...id,...jd->...ij", q, k) * c - lse.unsqueeze(-1))
    dp = torch.einsum("...id,...jd->...ij", d_out, v)
    ds = p * (dp - torch.einsum("...id,...id->...i", d_out, out).unsqueeze(-1))
    return (torch.einsum("...ij,...jd->...id", ds, k) * c,
            torch.einsum("...ij,...id->...jd", ds, q) * c,
            torch.einsum("...ij,...id->...jd", p, d_out))  # fmt: skip


def score_package(weights, lengths):
    return attnbook.induction.induction_score(weights, lengths)


def score_loops(weights, lengths):
    total = torch.zeros(weights.shape[:-4] + weights.shape[-3:-2], dtype=torch.float64)
    count = 0
    for i, n in enumerate(lengths.tolist()):
        for t in range(n, 2 * n):
            total += weights[..., i, :, t, t - n + 1].double()
            count += 1
    return (total / count).to(weights.dtype)


CORRECT = {
    "attention": [F.scaled_dot_product_attention, attention_einsum, attention_loop,
                  attention_logsumexp_fp64, attention_tiled, attnbook.attention.attention],
    "scaled_scores": [scores_einsum, scores_prescaled, scores_fp64],
    "split_heads": [attnbook.heads.split_heads, split_chunks, split_view, split_loop],
    "merge_heads": [attnbook.heads.merge_heads, merge_cat, merge_contiguous_view, merge_permute],
    "kv_cache_bytes": [kv_bytes_meta, kv_bytes_itemsize, kv_bytes_package],
    "causal_mask": [attnbook.masks.causal_mask, causal_tril, causal_sdpa_bias, causal_loop],
    "padding_mask": [attnbook.masks.padding_mask, padding_arange, padding_loop],
    "apply_rope": [attnbook.rope.apply_rope, rope_rotate_half_fp32, rope_complex,
                   rope_matrices],
    "attention_flops": [flops_counted, flops_per_matmul],
    "merge": [merge_package, merge_nan_to_num, merge_where],
    "masked_attention": [masked_sdpa_guarded, masked_package, masked_where],
    "gqa_attention": [gqa_sdpa, gqa_expand, gqa_grouped_queries],
    "decode_step": [decode_with_package, decode_sdpa_fp32_angles],
    "attention_backward": [backward_autograd, backward_einsum],
    "induction_score": [score_package, score_loops],
}  # fmt: skip


def test_every_exercise_has_several_independent_solutions():
    assert set(CORRECT) == set(EXERCISES)
    assert all(len(fns) >= 2 for fns in CORRECT.values())
    assert len(CORRECT["attention"]) >= 3


@pytest.mark.parametrize(
    ("name", "fn"),
    [(name, fn) for name, fns in CORRECT.items() for fn in fns],
    ids=[f"{name}-{fn.__name__}" for name, fns in CORRECT.items() for fn in fns],
)
def test_a_correct_solution_is_never_called_wrong(name, fn):
    result = check(name, fn)
    assert result.passed and result.mistake is None and result.status == "correct", result


# --- catalogued mistakes, planted the way a reader would write them ---------------------------


def _sm(s):
    return torch.softmax(s, dim=-1)


def _naive_softmax(q, k, v):
    e = (q @ k.mT / math.sqrt(q.shape[-1])).exp()
    return e / e.sum(-1, keepdim=True) @ v


def _manual_max(q, k, v):
    s = q @ k.mT / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True) @ v


def _rope(x, positions, sign=1, exponent=2, interleaved=False, cos_only=False, ignore=False):
    d = x.shape[-1]
    pos = torch.arange(x.shape[-2]) if ignore else positions
    freqs = 10000.0 ** (-exponent * torch.arange(d // 2).double() / d)
    ang = sign * pos.double()[:, None] * freqs
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    sin = 0 * sin if cos_only else sin
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def _kv(c, **change):
    c = {**c, **change}
    size = torch.empty((), dtype=c["dtype"]).element_size()
    return 2 * c["batch"] * c["layers"] * c["positions"] * c["kv_heads"] * c["head_dim"] * size


def _merge(a, b, *, l_scale=True, u_scale=True, inverted=False, guard=True, m=None):
    m = torch.maximum(a[0], b[0]) if m is None else m
    shift = torch.where(torch.isinf(m), 0.0, m) if guard else m
    ca, cb = (shift - a[0]).exp(), (shift - b[0]).exp()
    if not inverted:
        ca, cb = (a[0] - shift).exp(), (b[0] - shift).exp()
    la, lb = (ca, cb) if l_scale else (1.0, 1.0)
    ua, ub = (ca[..., None], cb[..., None]) if u_scale else (1.0, 1.0)
    return m, la * a[1] + lb * b[1], ua * a[2] + ub * b[2]


def _masked(q, k, v, mask, fill=float("-inf"), after=False, guard=True, invert=False, c=None,
            dim=-1):  # fmt: skip
    keep = ~mask if invert else mask
    s = q @ k.mT * (1 / math.sqrt(q.shape[-1]) if c is None else c)
    if after:
        return (torch.softmax(s, -1) * keep) @ v
    w = torch.softmax(s.masked_fill(~keep, fill), dim)
    return (w.nan_to_num(0.0) if guard else w) @ v


def _masked_naive(q, k, v, mask):  # exp of raw scores; empty rows zeroed through nan_to_num
    e = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf")).exp()
    return torch.nan_to_num(e / e.sum(-1, keepdim=True)) @ v


def _gqa_by_hand(q, k, v, c=None, dim=-1, soft=True, naive=False, weights=False, keys=False):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.mT * (q.shape[-1] ** -0.5 if c is None else c)
    w = s.softmax(dim) if soft else s
    if naive:
        w = s.exp() / s.exp().sum(-1, keepdim=True)
    return w if weights else w @ (k if keys else v)


def _rot(x, p):
    return attnbook.rope.apply_rope(x, torch.tensor([p]))


def _decode(q, k, v, ck, cv, off=0, rq=True, rk=True, append=True, read_new=True, again=False):
    p = max(ck.shape[-2] + off, 0)
    qq, kk = (_rot(q, p) if rq else q), (_rot(k, p) if rk else k)
    keys, values = torch.cat([ck, kk], -2), torch.cat([cv, v], -2)
    if again:
        keys = attnbook.rope.apply_rope(keys, torch.arange(keys.shape[-2]))
    out = attnbook.attention.attention(qq, keys if read_new else ck, values if read_new else cv)
    return (out, keys, values) if append else (out, ck, cv)


def _decode_by_hand(q, k, v, ck, cv, sign=1, exponent=2, cos_only=False, angles=None, c=None,
                    dim=-1, soft=True, naive=False, weights=False, keys_read=False):  # fmt: skip
    d, p = q.shape[-1], ck.shape[-2]  # p: a Python int
    if angles == "half_freqs":  # a Python int times float16 frequencies: rounded to float16
        ang = p * 10000.0 ** (-torch.arange(0, d, 2, dtype=q.dtype) / d)
    elif angles == "half_position":  # the position held in q's dtype, the rest in float32
        inv = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
        ang = torch.tensor(p).to(q.dtype).float() * inv
    else:
        ang = sign * p * 10000.0 ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
    cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)
    sin = sin * 0 if cos_only else sin

    def turn(x):
        a, b = x.chunk(2, -1)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    keys, values = torch.cat([ck, turn(k)], -2), torch.cat([cv, v], -2)
    s = turn(q) @ keys.mT * (d**-0.5 if c is None else c)
    w = s.softmax(dim) if soft else s
    if naive:
        w = s.exp() / s.exp().sum(-1, keepdim=True)
    return (w if weights else w @ (keys if keys_read else values)), keys, values


def _rope16(x, positions, only_positions=False):  # angles or positions in x's own dtype
    d = x.shape[-1]
    if only_positions:
        ang = positions.to(x.dtype).double()[:, None] * 10000.0 ** (
            -torch.arange(0, d, 2).double() / d)  # fmt: skip
    else:
        ang = positions[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def _decode_interleaved(q, k, v, ck, cv):  # adjacent pairs for the new token only
    at = torch.tensor([ck.shape[-2]])
    qq, kk = (attnbook.rope.apply_rope(x, at, layout="interleaved") for x in (q, k))
    keys, values = torch.cat([ck, kk], -2), torch.cat([cv, v], -2)
    return attnbook.attention.attention(qq, keys, values), keys, values


def _bwd(q, k, v, out, lse, d_out, row=True, total=False, scale_s=True, use_lse=True, sg=True,
         c=None, exp_over_exp=False):  # fmt: skip
    c = 1 / math.sqrt(q.shape[-1]) if c is None else c
    s = q @ k.mT * (c if scale_s else 1)
    p = (s - lse[..., None]).exp() if use_lse else s.exp()
    if exp_over_exp:  # mathematically exp(s - lse), but exp(s) overflows first
        p = s.exp() / lse.exp()[..., None]
    d = (d_out * out).sum((-2, -1) if total else -1, keepdim=True) if row else 0
    ds = p * (d_out @ v.mT - d)
    g = c if sg else 1
    return ds @ k * g, ds.mT @ q * g, p.mT @ d_out


def _ind(w, n, shift=1, prev=False, last=1, pad=False, pooled=True, product=False, tr=False):
    if tr:
        w = w.mT
    t = w.shape[-1]
    pos = torch.arange(t)
    keep = (pos >= n[:, None]) & ((pos <= 2 * n[:, None] - 2 + last) | pad)
    tgt = (pos - 1 if prev else pos - n[:, None] + shift).clamp(0, t - 1).expand(len(n), t)
    on = torch.take_along_dim(w, tgt[:, None, :, None].expand(*w.shape[:-1], 1), -1)[..., 0]
    kept = on * keep[:, None] if product else torch.where(keep[:, None], on, 0.0)
    if pooled:
        return kept.sum((-3, -1)) / keep.sum()
    return (kept.sum(-1) / keep.sum(-1)[:, None]).mean(-2)


T_ = torch.ones
PLANTED = {
    "attention": {
        "no_scale": lambda q, k, v: _sm(q @ k.mT) @ v,
        "scale_by_dk": lambda q, k, v: _sm((q / math.sqrt(q.shape[-1])) @ (
            k / math.sqrt(k.shape[-1])).mT) @ v,
        "scale_multiplies": lambda q, k, v: _sm(q @ k.mT * q.shape[-1] ** 0.5) @ v,
        "precedence_half": lambda q, k, v: _sm(q @ k.mT / (q.shape[-1] ** 1 / 2)) @ v,
        "scale_uses_token_count": lambda q, k, v: _sm(q @ k.mT / max(k.shape[-2], 1) ** 0.5)
        @ v,
        "softmax_over_queries": lambda q, k, v: torch.softmax(
            q @ k.mT / q.shape[-1] ** 0.5, dim=-2) @ v,
        "no_softmax": lambda q, k, v: (q @ k.mT / q.shape[-1] ** 0.5) @ v,
        "returns_weights": lambda q, k, v: _sm(q @ k.mT / q.shape[-1] ** 0.5),
        "keys_as_values": lambda q, k, v: _sm(q @ k.mT / q.shape[-1] ** 0.5) @ k,
        "queries_keys_swapped": lambda q, k, v: _sm(k @ q.mT / q.shape[-1] ** 0.5) @ v,
        "unstable_softmax": _naive_softmax,
        "crashes_without_keys": _manual_max,
    },
    "scaled_scores": {
        "no_scale": lambda q, k: q @ k.mT,
        "scale_by_dk": lambda q, k: q @ k.mT / q.shape[-1],
        "scale_multiplies": lambda q, k: q @ k.mT * math.sqrt(q.shape[-1]),
        "precedence_half": lambda q, k: q @ k.mT / q.shape[-1] ** 1 / 2,
        "scale_uses_token_count": lambda q, k: q @ k.mT / math.sqrt(max(k.shape[-2], 1)),
        "transposed": lambda q, k: k @ q.mT / math.sqrt(q.shape[-1]),
    },
    "split_heads": {
        "reshape_without_transpose": lambda x, h: x.view(x.shape[0], h, x.shape[1], -1),
        "heads_strided": lambda x, h: x.unflatten(-1, (-1, h)).permute(0, 3, 1, 2),
        "missing_transpose": lambda x, h: x.view(x.shape[0], x.shape[1], h, -1),
        "transpose_before_reshape": lambda x, h: x.mT.reshape(x.shape[0], h, x.shape[1], -1),
    },
    "merge_heads": {
        "reshape_without_transpose": lambda x: x.reshape(x.shape[0], x.shape[2], -1),
        "heads_interleaved": lambda x: x.permute(0, 2, 3, 1).flatten(2),
        "view_after_transpose": lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1),
        "not_flattened": lambda x: x.permute(0, 2, 1, 3),
    },
    "kv_cache_bytes": {
        "keys_only": lambda **c: _kv(c) // 2,
        "query_heads": lambda **c: _kv(c, kv_heads=c["heads"]),
        "bits_not_bytes": lambda **c: _kv(c) * 8,
        "forgot_layers": lambda **c: _kv(c, layers=1),
        "forgot_batch": lambda **c: _kv(c, batch=1),
        "quadratic_in_positions": lambda **c: _kv(c) * c["positions"],
        "not_in_bytes": lambda **c: _kv(c) / 1024**2,
    },
    "causal_mask": {
        "inverted": lambda t_q, t_k: T_(t_q, t_k).triu(t_k - t_q + 1).bool(),
        "diagonal_excluded": lambda t_q, t_k: T_(t_q, t_k).tril(t_k - t_q - 1).bool(),
        "sees_next_token": lambda t_q, t_k: T_(t_q, t_k).tril(t_k - t_q + 1).bool(),
        "top_left": lambda t_q, t_k: T_(t_q, t_k).tril().bool(),
        "offset_sign_flipped": lambda t_q, t_k: T_(t_q, t_k).tril(t_q - t_k).bool(),
        "future_not_past": lambda t_q, t_k: T_(t_q, t_k).triu(t_k - t_q).bool(),
        "float_mask": lambda t_q, t_k: torch.full((t_q, t_k), float("-inf")).triu(
            t_k - t_q + 1),
    },
    "padding_mask": {
        "inverted": lambda n, t: (torch.arange(t) >= torch.tensor(n)[:, None])[:, None, None],
        "includes_first_pad": lambda n, t: (torch.arange(t) <= torch.tensor(n)[:, None])[
            :, None, None],
        "masks_queries": lambda n, t: (torch.arange(t) < torch.tensor(n)[:, None])[
            :, None, :, None],
        "not_broadcastable": lambda n, t: torch.arange(t) < torch.tensor(n)[:, None],
        "left_padded": lambda n, t: (torch.arange(t) >= t - torch.tensor(n)[:, None])[
            :, None, None],
        "float_mask": lambda n, t: torch.where(
            torch.arange(t) < torch.tensor(n)[:, None], 0.0, float("-inf"))[:, None, None],
    },
    "apply_rope": {
        "rotates_backwards": lambda x, p: _rope(x, p, sign=-1),
        "interleaved_pairs": lambda x, p: _rope(x, p, interleaved=True),
        "frequency_exponent_halved": lambda x, p: _rope(x, p, exponent=1),
        "frequency_not_inverted": lambda x, p: _rope(x, p, exponent=-2),
        "ignores_positions": lambda x, p: _rope(x, p, ignore=True),
        "missing_sine_term": lambda x, p: _rope(x, p, cos_only=True),
        "angles_in_16_bit": _rope16,
        "positions_in_16_bit": lambda x, p: _rope16(x, p, only_positions=True),
    },
    "attention_flops": {
        "macs_not_flops": lambda t_q, t_k, heads, d_k, d_v: heads * t_q * t_k * (d_k + d_v),
        "scores_only": lambda t_q, t_k, heads, d_k, d_v: 2 * heads * t_q * d_k * t_k,
        "values_use_d_k": lambda t_q, t_k, heads, d_k, d_v: 2 * 2 * heads * t_q * t_k * d_k,
        "quadratic_in_keys": lambda t_q, t_k, heads, d_k, d_v: 2 * heads * t_k**2 * (d_k + d_v),
        "forgot_heads": lambda t_q, t_k, heads, d_k, d_v: 2 * t_q * t_k * (d_k + d_v),
        "widths_divided_by_heads": lambda t_q, t_k, heads, d_k, d_v: heads * (
            2 * t_q * t_k * (d_k // heads) + 2 * t_q * t_k * (d_v // heads)),
    },
    "merge": {
        "no_rescale": lambda a, b: _merge(a, b, l_scale=False, u_scale=False),
        "rescale_inverted": lambda a, b: _merge(a, b, inverted=True),
        "u_not_rescaled": lambda a, b: _merge(a, b, u_scale=False),
        "l_not_rescaled": lambda a, b: _merge(a, b, l_scale=False),
        "nan_on_empty": lambda a, b: _merge(a, b, guard=False),
        "max_not_kept": lambda a, b: _merge(a, b, m=b[0]),
    },
    "masked_attention": {
        "mask_after_softmax": lambda q, k, v, m: _masked(q, k, v, m, after=True),
        "nan_on_fully_masked": lambda q, k, v, m: _masked(q, k, v, m, guard=False),
        "empty_row_reads_average": lambda q, k, v, m: _masked(q, k, v, m, torch.finfo(q.dtype).min),
        "inverted": lambda q, k, v, m: _masked(q, k, v, m, invert=True),
        "added_as_numbers": lambda q, k, v, m: torch.softmax(
            q @ k.mT / math.sqrt(q.shape[-1]) + m, -1) @ v,
        "mask_ignored": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v),
        "no_scale": lambda q, k, v, m: _masked(q, k, v, m, c=1.0),
        "scale_by_dk": lambda q, k, v, m: _masked(q, k, v, m, c=1 / q.shape[-1]),
        "scale_multiplies": lambda q, k, v, m: _masked(q, k, v, m, c=q.shape[-1] ** 0.5),
        "precedence_half": lambda q, k, v, m: _masked(q, k, v, m, c=1 / (q.shape[-1] ** 1 / 2)),
        "scale_uses_token_count": lambda q, k, v, m: _masked(q, k, v, m,
                                                             c=k.shape[-2] ** -0.5),
        "softmax_over_queries": lambda q, k, v, m: _masked(q, k, v, m, dim=-2),
        "no_softmax": lambda q, k, v, m: (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(
            ~m, 0.0) @ v,
        "returns_weights": lambda q, k, v, m: torch.softmax(
            (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~m, float("-inf")), -1
        ).nan_to_num(0.0),
        "keys_as_values": lambda q, k, v, m: _masked(q, k, k, m),
        "unstable_softmax": _masked_naive,
    },
    "gqa_attention": {
        "repeat_not_interleave": lambda q, k, v: F.scaled_dot_product_attention(
            q, k.repeat(1, q.shape[1] // k.shape[1], 1, 1),
            v.repeat(1, q.shape[1] // k.shape[1], 1, 1)),
        "first_kv_head_only": lambda q, k, v: F.scaled_dot_product_attention(
            q, k[:, :1].expand(-1, q.shape[1], -1, -1), v[:, :1].expand(-1, q.shape[1], -1, -1)),
        "kv_heads_not_expanded": lambda q, k, v: F.scaled_dot_product_attention(
            q, k.repeat_interleave(q.shape[1] // k.shape[1], 2),
            v.repeat_interleave(q.shape[1] // k.shape[1], 2)),
        "group_size_inverted": lambda q, k, v: F.scaled_dot_product_attention(
            q, k.repeat_interleave(k.shape[1] // q.shape[1], 1),
            v.repeat_interleave(k.shape[1] // q.shape[1], 1)),
        "no_scale": lambda q, k, v: F.scaled_dot_product_attention(
            q, k.repeat_interleave(q.shape[1] // k.shape[1], 1),
            v.repeat_interleave(q.shape[1] // k.shape[1], 1), scale=1.0),
        "scale_by_dk": lambda q, k, v: _gqa_by_hand(q, k, v, c=1 / q.shape[-1]),
        "scale_multiplies": lambda q, k, v: _gqa_by_hand(q, k, v, c=math.sqrt(q.shape[-1])),
        "precedence_half": lambda q, k, v: _gqa_by_hand(q, k, v, c=1 / (q.shape[-1] ** 1 / 2)),
        "scale_uses_token_count": lambda q, k, v: _gqa_by_hand(q, k, v, c=k.shape[-2] ** -0.5),
        "softmax_over_queries": lambda q, k, v: _gqa_by_hand(q, k, v, dim=-2),
        "no_softmax": lambda q, k, v: _gqa_by_hand(q, k, v, soft=False),
        "returns_weights": lambda q, k, v: _gqa_by_hand(q, k, v, weights=True),
        "keys_as_values": lambda q, k, v: _gqa_by_hand(q, k, v, keys=True),
        "unstable_softmax": lambda q, k, v: _gqa_by_hand(q, k, v, naive=True),
    },
    "decode_step": {
        "position_zero": lambda *a: _decode(*a, off=-10**6),
        "position_after_append": lambda *a: _decode(*a, off=1),
        "position_of_last_cached": lambda *a: _decode(*a, off=-1),
        "cache_not_appended": lambda *a: _decode(*a, append=False),
        "new_token_not_read": lambda *a: _decode(*a, read_new=False),
        "key_not_rotated": lambda *a: _decode(*a, rk=False),
        "query_not_rotated": lambda *a: _decode(*a, rq=False),
        "cache_rotated_again": lambda *a: _decode(*a, again=True),
        "interleaved_layout": lambda q, k, v, ck, cv: _decode_interleaved(q, k, v, ck, cv),
        "rotates_backwards": lambda *a: _decode_by_hand(*a, sign=-1),
        "frequency_exponent_halved": lambda *a: _decode_by_hand(*a, exponent=1),
        "frequency_not_inverted": lambda *a: _decode_by_hand(*a, exponent=-2),
        "missing_sine_term": lambda *a: _decode_by_hand(*a, cos_only=True),
        "angles_in_16_bit": lambda *a: _decode_by_hand(*a, angles="half_freqs"),
        "positions_in_16_bit": lambda *a: _decode_by_hand(*a, angles="half_position"),
        "no_scale": lambda *a: _decode_by_hand(*a, c=1.0),
        "scale_by_dk": lambda *a: _decode_by_hand(*a, c=1 / a[0].shape[-1]),
        "scale_multiplies": lambda *a: _decode_by_hand(*a, c=math.sqrt(a[0].shape[-1])),
        "precedence_half": lambda *a: _decode_by_hand(*a, c=1 / (a[0].shape[-1] ** 1 / 2)),
        "scale_uses_token_count": lambda *a: _decode_by_hand(
            *a, c=(a[3].shape[-2] + 1) ** -0.5),
        "softmax_over_queries": lambda *a: _decode_by_hand(*a, dim=-2),
        "no_softmax": lambda *a: _decode_by_hand(*a, soft=False),
        "returns_weights": lambda *a: _decode_by_hand(*a, weights=True),
        "keys_as_values": lambda *a: _decode_by_hand(*a, keys_read=True),
        "unstable_softmax": lambda *a: _decode_by_hand(*a, naive=True),
    },
    "attention_backward": {
        "no_row_term": lambda *a: _bwd(*a, row=False),
        "row_term_summed_over_everything": lambda *a: _bwd(*a, total=True),
        "scores_not_scaled": lambda *a: _bwd(*a, scale_s=False),
        "lse_ignored": lambda *a: _bwd(*a, use_lse=False),
        "grads_not_scaled": lambda *a: _bwd(*a, sg=False),
        "no_scale": lambda *a: _bwd(*a, c=1.0),
        "scale_by_dk": lambda *a: _bwd(*a, c=1 / a[0].shape[-1]),
        "scale_multiplies": lambda *a: _bwd(*a, c=math.sqrt(a[0].shape[-1])),
        "precedence_half": lambda *a: _bwd(*a, c=1 / (a[0].shape[-1] ** 1 / 2)),
        "scale_uses_token_count": lambda *a: _bwd(*a, c=a[1].shape[-2] ** -0.5),
        "unstable_softmax": lambda *a: _bwd(*a, exp_over_exp=True),
    },
    "induction_score": {
        "targets_previous_occurrence": lambda w, n: _ind(w, n, shift=0),
        "previous_token_target": lambda w, n: _ind(w, n, prev=True),
        "last_query_left_out": lambda w, n: _ind(w, n, last=0),
        "padding_scored": lambda w, n: _ind(w, n, pad=True),
        "mean_of_sequence_means": lambda w, n: _ind(w, n, pooled=False),
        "nan_from_padding": lambda w, n: _ind(w, n, product=True),
        "weights_transposed": lambda w, n: _ind(w, n, tr=True),
    },
}  # fmt: skip


def test_every_catalogued_mistake_is_planted():
    assert {name: set(p) for name, p in PLANTED.items()} == {
        name: {i for i, _ in MISTAKES[name]} for name in EXERCISES
    }


@pytest.mark.parametrize(
    ("name", "mistake"),
    [(name, i) for name in EXERCISES for i, _ in MISTAKES[name]],
    ids=[f"{name}-{i}" for name in EXERCISES for i, _ in MISTAKES[name]],
)
def test_a_planted_mistake_is_named_by_its_id(name, mistake):
    result = check(name, PLANTED[name][mistake])
    assert not result.passed and result.mistake == mistake, result
    assert result.message.startswith("On the ") and "Hint: " in result.message


# --- wrong in ways nobody catalogued ------------------------------------------------------------


UNCATALOGUED = {
    "attention": [
        lambda q, k, v: v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1]),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + 0.01,
        lambda q, k, v: _sm(q @ k.mT / 2.0) @ v,  # a fixed scale that is right only for dk=4
        lambda q, k, v: torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype),
    ],
    "scaled_scores": [lambda q, k: q @ k.mT / 3.0, lambda q, k: (q @ k.mT).abs()],
    "split_heads": [lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1).flip(1)],
    "merge_heads": [lambda x: x.sum(1)],
    "kv_cache_bytes": [lambda **c: 12345, lambda **c: 3 * _kv(c)],
    "causal_mask": [lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.bool)],
    "padding_mask": [lambda n, t: torch.ones(len(n), 1, 1, t, dtype=torch.bool)],
    "apply_rope": [lambda x, p: _rope(x, p + 1), lambda x, p: x],
    "attention_flops": [lambda **s: 4 * s["t_q"] * s["t_k"] * s["heads"] * s["d_k"] ** 2],
    "merge": [lambda a, b: a, lambda a, b: tuple(x + y for x, y in zip(a, b, strict=True))],
}


@pytest.mark.parametrize(
    ("name", "fn"),
    [(name, fn) for name, fns in UNCATALOGUED.items() for fn in fns],
    ids=[f"{name}-{i}" for name, fns in UNCATALOGUED.items() for i in range(len(fns))],
)
def test_an_uncatalogued_mistake_fails_without_a_name(name, fn):
    result = check(name, fn)
    assert not result.passed and result.mistake is None and result.status == "wrong", result
    # The message names an input, says what differs there, and gives the exercise's hint.
    assert result.message.startswith("On the ") and " case" in result.message
    assert "cases fail" in result.message and "Hint: " in result.message
