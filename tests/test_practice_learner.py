"""attnbook.practice tried as a learner would (issue 30's acceptance test): a fresh set of
right and wrong submissions, written for this file and taken neither from the catalogue nor
from the other practice tests. Each wrong one states what it is: the catalogued mistake its
behaviour is, or None when it is a mistake nobody catalogued (then the checker must not name
one). Asserted: no false pass, no false rejection, no wrong diagnosis, no checker exception,
and fewer than a quarter of the wrong ones get only the exercise's generic hint."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook.practice import _runner, check

# --- right ------------------------------------------------------------------------------------


def att_baddbmm(q, k, v):
    lead = q.shape[:-2]
    qf, kf, vf = (t.reshape(math.prod(lead), *t.shape[-2:]) for t in (q, k, v))
    s = torch.baddbmm(qf.new_zeros(qf.shape[0], qf.shape[1], kf.shape[1]), qf, kf.mT,
                      beta=0.0, alpha=qf.shape[-1] ** -0.5)  # fmt: skip
    return (s.softmax(-1) @ vf).reshape(*lead, q.shape[-2], v.shape[-1])


def att_float64_lse(q, k, v):
    s = torch.matmul(q.double(), k.double().transpose(-1, -2)) * torch.rsqrt(
        torch.tensor(float(q.shape[-1]), dtype=torch.float64)
    )
    return (torch.exp(s - s.logsumexp(-1, keepdim=True)) @ v.double()).to(q.dtype)


def scores_rsqrt(q, k):
    return torch.matmul(q, k.transpose(-1, -2)) * (1.0 / q.size(-1)) ** 0.5


def split_unflatten(x, heads):
    return x.unflatten(-1, (heads, -1)).movedim(-2, 1)


def split_view_permute(x, heads):
    b, t, d = x.shape
    return x.reshape(b, t, heads, d // heads).permute(0, 2, 1, 3)


def merge_movedim(x):
    return x.movedim(1, 2).flatten(-2)


def kv_numpy(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return np.int64(2) * np.prod([batch, layers, positions, kv_heads, head_dim]) * (
        torch.tensor([], dtype=dtype).element_size())  # fmt: skip


def causal_compare(t_q, t_k):
    i = torch.arange(t_q).unsqueeze(1) + (t_k - t_q)
    return torch.arange(t_k).unsqueeze(0) <= i


def padding_stack(lengths, t):
    rows = [torch.cat([torch.ones(n, dtype=torch.bool), torch.zeros(t - n, dtype=torch.bool)])
            for n in lengths]  # fmt: skip
    return torch.stack(rows).view(len(lengths), 1, 1, t)


def rope_complex_fp32(x, positions):
    d = x.shape[-1]
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    rot = torch.polar(torch.ones(()), positions.float()[:, None] * inv)  # (T, d/2) complex64
    z = torch.complex(x[..., : d // 2].float(), x[..., d // 2 :].float()) * rot
    return torch.cat([z.real, z.imag], -1).to(x.dtype)


def flops_float(*, t_q, t_k, heads, d_k, d_v):
    return float(heads) * 2.0 * t_q * t_k * (d_k + d_v)  # floats are exact at these sizes


def flops_tensor(*, t_q, t_k, heads, d_k, d_v):
    return torch.tensor(2 * heads * t_q * t_k * d_k + 2 * heads * t_q * t_k * d_v)


State = namedtuple("State", ["m", "l", "u"])


def merge_logaddexp(a, b):
    m = torch.maximum(a[0], b[0])
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa, wb = (a[0] - safe).exp(), (b[0] - safe).exp()
    return State(m, a[1] * wa + b[1] * wb, a[2] * wa.unsqueeze(-1) + b[2] * wb.unsqueeze(-1))


def masked_additive(q, k, v, mask):
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    w = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]) + bias, -1)
    return torch.where(torch.isnan(w), torch.zeros_like(w), w) @ v


def gqa_einsum(q, k, v):
    b, hq, tq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, hq // hkv, tq, d)
    w = torch.einsum("bhgqd,bhkd->bhgqk", qg, k).div(math.sqrt(d)).softmax(-1)
    return torch.einsum("bhgqk,bhkv->bhgqv", w, v).reshape(b, hq, tq, v.shape[-1])


def decode_manual(q, k, v, cache_k, cache_v):
    d, pos = q.shape[-1], cache_k.shape[2]
    freq = 1.0 / 10000.0 ** (torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    c, s = torch.cos(pos * freq).to(q.dtype), torch.sin(pos * freq).to(q.dtype)

    def turn(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    keys, values = torch.cat([cache_k, turn(k)], 2), torch.cat([cache_v, v], 2)
    return F.scaled_dot_product_attention(turn(q), keys, values), keys, values


def backward_vjp(q, k, v, out, lse, d_out):
    # (torch.func.vjp is right too, but its first pullback imports torch._dynamo: seconds of
    # a shared CI machine. test_practice_contract checks that an import is never cut short.)
    def fwd(q, k, v):
        return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v

    _, pullback = torch.autograd.functional.vjp(fwd, (q, k, v), d_out)
    return pullback


def induction_indexing(weights, lengths):
    picked = []
    for i, n in enumerate(lengths.tolist()):
        t = torch.arange(n, 2 * n)
        picked.append(weights[..., i, :, t, t - n + 1])  # (..., H, n)
    return torch.cat(picked, -1).mean(-1)


RIGHT = [
    ("attention", att_baddbmm),
    ("attention", att_float64_lse),
    ("scaled_scores", scores_rsqrt),
    ("split_heads", split_unflatten),
    ("split_heads", split_view_permute),
    ("merge_heads", merge_movedim),
    ("kv_cache_bytes", kv_numpy),
    ("causal_mask", causal_compare),
    ("padding_mask", padding_stack),
    ("apply_rope", rope_complex_fp32),
    ("attention_flops", flops_float),
    ("attention_flops", flops_tensor),
    ("merge", merge_logaddexp),
    ("masked_attention", masked_additive),
    ("gqa_attention", gqa_einsum),
    ("decode_step", decode_manual),
    ("attention_backward", backward_vjp),
    ("induction_score", induction_indexing),
]


@pytest.mark.parametrize(("name", "fn"), RIGHT, ids=[f"{n}-{f.__name__}" for n, f in RIGHT])
def test_right_submissions_pass(name, fn):
    result = check(name, fn)
    assert result and result.status == "correct", result


# --- wrong ------------------------------------------------------------------------------------


def _sdpa(q, k, v, scale):
    return torch.softmax(q @ k.mT * scale, -1) @ v


def att_scale_axis_1(q, k, v):  # right only when q is 2-D
    return _sdpa(q, k, v, q.shape[1] ** -0.5)


def att_exp_direct(q, k, v):
    w = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]))
    return w / w.sum(dim=-1, keepdim=True) @ v


def att_scaled_twice(q, k, v):
    c = math.sqrt(q.shape[-1])
    return torch.softmax((q / c) @ (k / c).mT, -1) @ v


def att_transpose_wrong_axes(q, k, v):
    return _sdpa(q, k.T, v, 1) if q.dim() == 2 else _sdpa(q, k.transpose(0, 1), v, 1)


def att_in_place(q, k, v):
    q.div_(math.sqrt(q.shape[-1]))
    return torch.softmax(q @ k.mT, -1) @ v


def att_empty_loop(q, k, v):
    n = k.shape[-2]
    while n == 0:  # waits for keys that never come
        pass
    return F.scaled_dot_product_attention(q, k, v)


def kv_bits(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return 2 * batch * layers * positions * kv_heads * head_dim * torch.finfo(dtype).bits


def kv_gb(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return 2 * batch * layers * positions * kv_heads * head_dim * dtype.itemsize / 1e9


def kv_k_only_query_heads(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return batch * layers * positions * heads * head_dim * dtype.itemsize


def rope_fp16_angles(x, positions):
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    ang = positions.to(x.dtype)[:, None] * inv
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def rope_even_odd(x, positions):
    d = x.shape[-1]
    ang = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).double() / d)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    ev, od = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2], out[..., 1::2] = ev * c - od * s, ev * s + od * c
    return out


def rope_chunk_index(x, positions):
    return rope_complex_fp32(x, torch.arange(x.shape[-2]))


def flops_half_value(*, t_q, t_k, heads, d_k, d_v):
    return 2 * heads * t_q * t_k * d_k + heads * t_q * t_k * d_v


def flops_dk_twice(*, t_q, t_k, heads, d_k, d_v):
    return heads * (2 * t_q * t_k * d_k) * 2


def merge_keep_a_max(a, b):
    m = a[0]
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    ca, cb = (a[0] - shift).exp(), (b[0] - shift).exp()
    return m, ca * a[1] + cb * b[1], ca[..., None] * a[2] + cb[..., None] * b[2]


def merge_plain_sum(a, b):
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def masked_mha_convention(q, k, v, mask):
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, -1)) @ v


def masked_renormalised(q, k, v, mask):
    w = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) * mask
    return w / w.sum(-1, keepdim=True) @ v


def masked_minus_1e4(q, k, v, mask):
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~mask, -1e4)
    return torch.softmax(s, -1) @ v


def gqa_tile(q, k, v):
    reps = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, torch.cat([k] * reps, 1), torch.cat([v] * reps, 1))


def gqa_ratio_inverted(q, k, v):
    g = k.shape[1] // q.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))


def gqa_never_expanded(q, k, v):  # broadcasts only when Hkv is 1 or Hq
    return F.scaled_dot_product_attention(q, k, v)


def decode_last_position(q, k, v, cache_k, cache_v):
    pos = torch.tensor([max(cache_k.shape[2] - 1, 0)])
    from attnbook.rope import apply_rope

    keys = torch.cat([cache_k, apply_rope(k, pos)], 2)
    values = torch.cat([cache_v, v], 2)
    return F.scaled_dot_product_attention(apply_rope(q, pos), keys, values), keys, values


def decode_forgets_cache(q, k, v, cache_k, cache_v):
    out, _, _ = decode_manual(q, k, v, cache_k, cache_v)
    return out, cache_k, cache_v


def decode_fp16_angles(q, k, v, cache_k, cache_v):
    d, pos = q.shape[-1], cache_k.shape[2]
    freq = 1.0 / 10000.0 ** (torch.arange(d // 2, dtype=q.dtype) * 2 / d)
    ang = torch.tensor(pos, dtype=q.dtype) * freq
    c, s = ang.cos(), ang.sin()

    def turn(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    keys, values = torch.cat([cache_k, turn(k)], 2), torch.cat([cache_v, v], 2)
    return F.scaled_dot_product_attention(turn(q), keys, values), keys, values


def _p(q, k, lse):
    return torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - lse[..., None])


def backward_d_from_dp(q, k, v, out, lse, d_out):
    c, p = 1 / math.sqrt(q.shape[-1]), _p(q, k, lse)
    dp = d_out @ v.mT
    ds = p * (dp - dp.sum(-1, keepdim=True))  # D without the weights
    return ds @ k * c, ds.mT @ q * c, p.mT @ d_out


def backward_no_d(q, k, v, out, lse, d_out):
    c, p = 1 / math.sqrt(q.shape[-1]), _p(q, k, lse)
    ds = p * (d_out @ v.mT)
    return ds @ k * c, ds.mT @ q * c, p.mT @ d_out


def induction_on_copy(weights, lengths):
    parts = [weights[..., i, :, torch.arange(n, 2 * n), torch.arange(0, n)]
             for i, n in enumerate(lengths.tolist())]  # fmt: skip
    return torch.cat(parts, -1).mean(-1)


def induction_mean_per_sequence(weights, lengths):
    parts = [weights[..., i, :, torch.arange(n, 2 * n), torch.arange(1, n + 1)].mean(-1)
             for i, n in enumerate(lengths.tolist())]  # fmt: skip
    return torch.stack(parts, -1).mean(-1)


def induction_short_range(weights, lengths):
    parts = [weights[..., i, :, torch.arange(n, 2 * n - 1), torch.arange(1, n)]
             for i, n in enumerate(lengths.tolist())]  # fmt: skip
    return torch.cat(parts, -1).nan_to_num().mean(-1)


# The fifth learner attack (297 submissions): five false passes, fixed by cases that separate
# them (a mask cached on some of its arguments, a count held in float32, a backward without
# the max at float32 scores past 88), and one diagnosis named from a shared float16 error.
_memo: dict = {}


def causal_cached_by_t_k(t_q, t_k):
    if ("causal", t_k) not in _memo:
        _memo["causal", t_k] = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)
    return _memo["causal", t_k]


def padding_cached_by_shape(lengths, t):
    key = ("padding", len(lengths), t)
    if key not in _memo:
        real = torch.arange(t) < torch.tensor(lengths)[:, None]
        _memo[key] = real.view(len(lengths), 1, 1, t)
    return _memo[key]


def kv_float32(*, batch, layers, positions, heads, kv_heads, head_dim, dtype):
    return torch.tensor(2.0) * batch * layers * positions * kv_heads * head_dim * dtype.itemsize


def flops_float32(*, t_q, t_k, heads, d_k, d_v):
    return torch.tensor(2.0) * heads * t_q * t_k * (d_k + d_v)


def backward_without_max(q, k, v, out, lse, d_out):
    c = 1 / math.sqrt(q.shape[-1])
    e = torch.exp(q @ k.mT * c)
    p = e / e.sum(-1, keepdim=True)
    ds = p * (d_out @ v.mT - (d_out * out).sum(-1, keepdim=True))
    return ds @ k * c, ds.mT @ q * c, p.mT @ d_out


def masked_fill_too_large_for_half(q, k, v, mask):  # empty rows zeroed; -1e9 overflows fp16
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~mask, -1e9)
    return torch.softmax(s, -1) * mask.any(-1, keepdim=True) @ v


WRONG = [  # (exercise, function, the catalogued mistake it is, or None)
    ("causal_mask", causal_cached_by_t_k, None),
    ("padding_mask", padding_cached_by_shape, None),
    ("kv_cache_bytes", kv_float32, None),
    ("attention_flops", flops_float32, None),
    # The softmax slips of attention are catalogued for every exercise with the step now.
    ("attention_backward", backward_without_max, "unstable_softmax"),
    ("masked_attention", masked_fill_too_large_for_half, None),
    ("attention", att_scale_axis_1, None),
    ("attention", att_exp_direct, "unstable_softmax"),
    ("attention", att_scaled_twice, "scale_by_dk"),
    ("attention", att_transpose_wrong_axes, None),
    ("attention", att_in_place, None),
    ("attention", att_empty_loop, None),
    ("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v).float(), None),
    ("scaled_scores", lambda q, k: q @ k.mT / math.sqrt(k.shape[-2]), "scale_uses_token_count"),
    ("scaled_scores", lambda q, k: (q.double() @ k.double().mT) / q.shape[-1] ** 0.5, None),
    ("split_heads", lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
     "reshape_without_transpose"),
    ("split_heads", lambda x, h: x.unflatten(-1, (h, -1)), "missing_transpose"),
    ("merge_heads", lambda x: x.flatten(1, 2), None),
    ("merge_heads", lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
     "heads_interleaved"),
    ("kv_cache_bytes", kv_bits, "bits_not_bytes"),
    ("kv_cache_bytes", kv_gb, None),
    ("kv_cache_bytes", kv_k_only_query_heads, None),
    ("causal_mask", lambda t_q, t_k: torch.tril(torch.ones(t_q, t_k)).bool(), "top_left"),
    ("causal_mask", lambda t_q, t_k: causal_compare(t_q, t_k).int(), None),
    ("padding_mask", lambda n, t: torch.arange(t)[None] < torch.tensor(n)[:, None],
     "not_broadcastable"),
    ("padding_mask", lambda n, t: (torch.arange(t) >= t - torch.tensor(n)[:, None]).view(
        len(n), 1, 1, t), "left_padded"),
    ("apply_rope", rope_fp16_angles, "angles_in_16_bit"),
    ("apply_rope", rope_even_odd, "interleaved_pairs"),
    ("apply_rope", rope_chunk_index, "ignores_positions"),
    ("attention_flops", flops_half_value, None),
    ("attention_flops", flops_dk_twice, "values_use_d_k"),
    ("merge", merge_keep_a_max, None),
    ("merge", merge_plain_sum, "no_rescale"),
    ("masked_attention", masked_mha_convention, "inverted"),
    # NaN on empty rows, and (since the case of float32 scores up to 134) a second fault: the
    # softmax over every key underflows the allowed weights when a masked key dominates.
    ("masked_attention", masked_renormalised, None),
    ("masked_attention", masked_minus_1e4, "empty_row_reads_average"),
    ("gqa_attention", gqa_tile, "repeat_not_interleave"),
    ("gqa_attention", gqa_ratio_inverted, "group_size_inverted"),
    ("gqa_attention", gqa_never_expanded, "kv_heads_not_expanded"),
    ("decode_step", decode_last_position, "position_of_last_cached"),
    ("decode_step", decode_forgets_cache, "cache_not_appended"),
    ("decode_step", decode_fp16_angles, "angles_in_16_bit"),
    ("attention_backward", backward_d_from_dp, None),
    ("attention_backward", backward_no_d, "no_row_term"),
    ("induction_score", induction_on_copy, "targets_previous_occurrence"),
    ("induction_score", induction_mean_per_sequence, "mean_of_sequence_means"),
    ("induction_score", induction_short_range, "last_query_left_out"),
]  # fmt: skip


@pytest.fixture(scope="module")
def verdicts():
    patch = pytest.MonkeyPatch()
    patch.setattr(_runner, "TIME_LIMIT_S", 0.5)  # the hanging submission costs 0.5 s
    try:
        return [check(name, fn) for name, fn, _ in WRONG]
    finally:
        patch.undo()


def test_enough_submissions():
    assert len(RIGHT) >= 15 and len(WRONG) >= 30
    assert sum(expected is None for *_, expected in WRONG) >= 10


@pytest.mark.parametrize(
    "i", range(len(WRONG)), ids=[f"{n}-{i}" for i, (n, *_) in enumerate(WRONG)]
)
def test_wrong_submissions_fail_with_the_right_diagnosis(verdicts, i):
    _, _, expected = WRONG[i]
    result = verdicts[i]
    assert not result and not result.passed, result  # no false pass
    assert result.kind != "unreadable", result  # the checker compared it
    assert result.mistake == expected, result  # named only when its behaviour is that mistake
    assert result.message.startswith("On the ") and "Hint: " in result.message
    assert len(result.cases) == result.message.count("\n  ")


def test_few_wrong_submissions_get_only_the_generic_hint(verdicts):
    generic = [WRONG[i][0] for i, r in enumerate(verdicts) if r.kind == "generic"]
    assert len(generic) < len(WRONG) / 4, generic
