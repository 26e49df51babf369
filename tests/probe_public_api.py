"""An outside probe of every public function and class of the ``attnbook`` modules: the core
ones (attention, masks, RoPE, costs, diagnostics, retrieval, ...) and the newer ones (the tiny
GPT with its norm, KV cache, sampling, corpus and training; induction; the recomputing tiled
backward; the batched retrieval seeds; the practice checker and its ``Result``).

Each probe calls one function the way a new reader might (another dtype, NaN or inf, an empty
or huge size, a meta tensor, a transposed layout, a number written as ``70e9``, a string where
a bool belongs) and sorts the outcome into one of five kinds:

* ``ok``: it returned, and the result agrees with an independent oracle (SDPA in float64,
  ``torch.softmax``, a closed-form formula, a known-healthy or known-broken setup);
* ``clear``: it raised ``ValueError`` or ``TypeError`` naming one of its arguments;
* ``unnamed``: it raised ``ValueError`` or ``TypeError`` that names no argument;
* ``raw``: it raised anything else (an ``IndexError``, a torch ``RuntimeError``, ...);
* ``wrong``: it returned something the oracle disagrees with: a silent wrong answer;
* ``passed on``: an error raised inside the reader's own callable or module (a ``loss_fn``,
  a model fed the wrong dtype), which ``attnbook`` passes on unchanged, as it should. Probes
  of attnbook's own ``nn.Module`` classes pass ``callbacks=False``: there an error from
  inside ``torch.nn`` is attnbook's, so it counts as ``raw``.

Every probe that returns in the newer modules is checked: against SDPA, ``nn.RMSNorm`` and
``rms_norm``, a float64 re-derivation of the model, ``FlopCounterMode``, autograd, sampling
written out step by step, n-gram counts in plain Python, or the documented formula. An input
that must be refused and is not (``return_weights="no"``) counts as ``wrong``.

``tests/test_probe.py`` runs it and requires no ``unnamed``, ``raw`` or ``wrong`` outcome.
Run ``python tests/probe_public_api.py`` for the counts per module and kind.

What it does not try: sizes whose allocation would be huge (``causal_mask(10**6)`` asks torch
for a terabyte); those fail inside torch's allocator, not in ``attnbook``.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import random
import re
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook import attention as attention_module
from attnbook import (
    corpus,
    costs,
    diagnostics,
    gpt,
    heads,
    induction,
    induction_baselines,
    induction_model,
    kv_cache,
    lm_training,
    masks,
    measured,
    norm,
    online_softmax,
    plots,
    practice,
    retrieval,
    retrieval_seeds,
    rope,
    runtime,
    sampling,
    tiled_backward,
)
from attnbook import retrieval_model as model_module
from attnbook import training_health as health
from attnbook.masks import causal_mask

NAN, INF = float("nan"), float("inf")
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Output tolerance per dtype: 16-bit results are rounded to 16 bits at the end.
TOL = {
    torch.float16: 3e-3,
    torch.bfloat16: 2e-2,
    torch.float32: 2e-5,
    torch.float64: 1e-9,
}


@dataclass(frozen=True)
class Outcome:
    module: str
    function: str
    label: str
    kind: str  # ok, clear, unnamed, raw, wrong
    detail: str = ""


class WrongAnswerError(AssertionError):
    """An oracle disagrees with a returned value."""


def expect(condition: bool, why: str) -> None:
    if not condition:
        raise WrongAnswerError(why)


def close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """Values agree within the dtype's tolerance (NaN where the oracle has NaN)."""
    expect(isinstance(actual, torch.Tensor), f"returned {type(actual).__name__}, not a tensor")
    expect(
        tuple(actual.shape) == tuple(expected.shape),
        f"shape {tuple(actual.shape)} != {tuple(expected.shape)}",
    )
    if actual.is_meta or expected.is_meta:
        return
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    expect(torch.equal(a.isnan(), e.isnan()), "NaN where the oracle has none, or the reverse")
    both = ~e.isnan()
    if not both.any():
        return
    tol = TOL.get(dtype, 1e-5)
    gap = (a[both] - e[both]).abs()
    bound = tol * (1 + e[both].abs())
    same_inf = (a[both] == e[both]) | gap.le(bound)
    expect(bool(same_inf.all()), f"max error {gap.nan_to_num(INF).max().item():.3g} > tol {tol}")


class Probe:
    """Collects outcomes; ``call`` runs one probe."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def call(
        self,
        fn: Callable,
        label: str,
        thunk: Callable[[], object],
        check: Callable[[object], None] | None = None,
        names: tuple[str, ...] = (),
        callbacks: bool = True,
    ) -> None:
        module = fn.__module__.rsplit(".", 1)[-1] if hasattr(fn, "__module__") else "?"
        function = getattr(fn, "__qualname__", repr(fn))
        try:
            params = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = ()
        try:
            result = thunk()
        except (ValueError, TypeError) as error:
            message = str(error)
            if callbacks and _raised_in_callback(error):
                self.outcomes.append(Outcome(module, function, label, "passed on", message[:160]))
                return
            known = (*params, *names)
            named = any(re.search(rf"(?<![\w.]){re.escape(n)}\b", message) for n in known)
            kind = "clear" if named else "unnamed"
            self.outcomes.append(Outcome(module, function, label, kind, message[:160]))
            return
        except Exception as error:  # the probe's point: anything else is a defect
            detail = f"{type(error).__name__}: {str(error)[:160]}"
            kind = "passed on" if callbacks and _raised_in_callback(error) else "raw"
            self.outcomes.append(Outcome(module, function, label, kind, detail))
            return
        if check is not None:
            try:
                check(result)
            except WrongAnswerError as error:
                self.outcomes.append(Outcome(module, function, label, "wrong", str(error)))
                return
        self.outcomes.append(Outcome(module, function, label, "ok"))


def _raised_in_callback(error: BaseException) -> bool:
    """Whether ``error`` came from the caller's own code that attnbook called back into.

    After the first frame inside ``attnbook``, a frame in this file (a probe's ``fn`` or
    ``loss_fn``) or in ``torch.nn.modules`` (a reader's model) means the callback raised.
    """
    inside = False
    for frame in traceback.extract_tb(error.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/attnbook/" in path and "/tests/" not in path:
            inside = True
        elif inside and (path.endswith("probe_public_api.py") or "torch/nn/modules" in path):
            return True
    return False


# --- variants of a valid tensor --------------------------------------------------------------


def tensor_variants(base: torch.Tensor) -> list[tuple[str, object]]:
    """Ways a reader's tensor differs from the one a docstring shows."""
    out: list[tuple[str, object]] = []
    if base.is_floating_point():
        out += [(f"dtype {d}", base.to(d)) for d in FLOATS if d != base.dtype]
        out += [("dtype int64", base.to(torch.int64)), ("dtype bool", base > 0)]
        out += [("dtype complex64", base.to(torch.complex64))]
        for name, value in (("nan", NAN), ("+inf", INF), ("-inf", -INF)):
            poisoned = base.clone()
            poisoned[(0,) * base.dim()] = value
            out.append((name, poisoned))
        out.append(("huge values", base * 1e4))
    else:
        out += [("dtype float32", base.float()), ("dtype int32", base.int())]
    out.append(("meta", base.to("meta")))
    if base.dim() >= 2:
        out.append(("transposed (wrong layout)", base.transpose(-1, -2)))
        strided = base.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values
        out.append(("non-contiguous", strided))
    for dim in range(base.dim()):
        out.append((f"empty dim {dim}", base.narrow(dim, 0, 0)))
    out.append(("extra leading dim", base.unsqueeze(0)))
    if base.dim() >= 1:
        out.append(("one dim fewer", base[0]))
    out.append(("python list", base.tolist()))
    out.append(("numpy array", base.numpy()))
    out.append(("none", None))
    return out


def number_variants(value: int) -> list[tuple[str, object]]:
    return [
        ("float", float(value)),
        ("numpy int", np.int64(value)),
        ("numpy float", np.float64(value)),
        ("fraction", value + 0.5),
        ("zero", 0),
        ("negative", -value),
        ("bool", True),
        ("string", str(value)),
        ("none", None),
        ("nan", NAN),
        ("inf", INF),
        ("huge int", 10**30),
        ("float above 2**53", 1e23),
    ]


def bool_variants() -> list[tuple[str, object]]:
    return [
        ("string 'no'", "no"),
        ("int 1", 1),
        ("none", None),
        ("numpy bool", np.bool_(True)),
    ]


# --- oracles ----------------------------------------------------------------------------------


def oracle_attention(q, k, v, mask=None, scale=None):
    """SDPA in float64 (math kernel), with zero rows where no key is allowed."""
    q64, k64, v64 = (x.double() for x in (q, k, v))
    if k.shape[-2] == 0:
        return q64.new_zeros((*q.shape[:-1], v.shape[-1]))
    out = sdpa(q64, k64, v64, attn_mask=mask, scale=scale, enable_gqa=True)
    if mask is not None and not out.is_meta:
        dead = ~mask.expand(*out.shape[:-1], k.shape[-2]).any(-1)  # (..., Tq)
        out = out.masked_fill(dead[..., None], 0.0)
    return out


def oracle_causal_attention(args, causal, scale=None):
    """:func:`oracle_attention` of ``args`` (q, k, v), with the causal mask when asked."""
    q, k, v = args["q"], args["k"], args["v"]
    tq, tk = q.shape[-2], k.shape[-2]
    mask = None
    if causal and tq and tk:
        mask = causal_mask(tq, tk, device=q.device)
    elif causal and tk:  # no queries: an empty mask row
        mask = torch.ones(0, tk, dtype=torch.bool, device=q.device)
    return oracle_attention(q, k, v, mask, scale)


def probe_qkv_variants(p, fn, base) -> None:
    """Call ``fn(q, k, v, block_size=3, causal=...)`` with each of q, k, v replaced by each
    tensor variant; whenever all three are tensors, check against the causal oracle."""
    for causal in (False, True):
        for name in ("q", "k", "v"):
            for label, variant in tensor_variants(base[name]):
                args = {**base, name: variant}
                check = None
                if all(isinstance(x, torch.Tensor) for x in args.values()):
                    check = check_tensor_result(
                        lambda a=args, c=causal: oracle_causal_attention(a, c), args["q"].dtype
                    )
                p.call(
                    fn,
                    f"causal={causal} {name}: {label}",
                    lambda a=args, c=causal: fn(**a, block_size=3, causal=c),
                    check,
                )


def oracle_softmax(x, dim=-1):
    x64 = x.double()
    p = torch.softmax(x64, dim)
    if x.is_meta or x.shape[dim] == 0:
        return p
    dead = (x64 == -INF).all(dim, keepdim=True).expand_as(p)
    return p.masked_fill(dead, 0.0)


def check_tensor_result(expected_fn, dtype_of):
    def check(result):
        try:
            expected = expected_fn()
        except Exception as error:
            raise WrongAnswerError(f"accepted, but the oracle refuses the input: {error}") from None
        close(result, expected, dtype_of)
        expect(result.dtype == dtype_of, f"dtype {result.dtype}, expected {dtype_of}")

    return check


# --- the probes ---------------------------------------------------------------------------------


def probe_attention(p: Probe) -> None:
    from attnbook.attention import attention, softmax

    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 4, 3, 8, generator=g),
        torch.randn(1, 2, 5, 8, generator=g),
        torch.randn(1, 2, 5, 6, generator=g),
    )
    mask = torch.rand(3, 5, generator=g) < 0.6
    base = {"q": q, "k": k, "v": v}

    def run(args, mask_=None, **kw):
        return lambda: attention(args["q"], args["k"], args["v"], mask_, **kw)

    p.call(
        attention,
        "valid GQA",
        run(base),
        check_tensor_result(lambda: oracle_attention(q, k, v), torch.float32),
    )
    for name in ("q", "k", "v"):
        for label, variant in tensor_variants(base[name]):
            args = {**base, name: variant}
            if all(isinstance(x, torch.Tensor) for x in args.values()):
                dtype = args["q"].dtype
                check = check_tensor_result(
                    lambda args=args: oracle_attention(args["q"], args["k"], args["v"]), dtype
                )
            else:
                check = None
            p.call(attention, f"{name}: {label}", run(args), check)
    # all three in one dtype, with and without a mask, across magnitudes (the fp16 overflow)
    for dtype in FLOATS:
        for magnitude in (1.0, 30.0, 300.0):
            args = {n: (x * magnitude if n != "v" else x).to(dtype) for n, x in base.items()}
            for m in (None, mask, torch.zeros(3, 5, dtype=torch.bool)):
                label = f"{dtype} x{magnitude:g} mask={'none' if m is None else int(m.sum())}"
                p.call(
                    attention,
                    label,
                    run(args, m),
                    check_tensor_result(
                        lambda args=args, m=m: oracle_attention(args["q"], args["k"], args["v"], m),
                        dtype,
                    ),
                )
    for label, variant in tensor_variants(mask.float()):
        m = (
            variant > 0
            if isinstance(variant, torch.Tensor) and variant.dtype == torch.bool
            else variant
        )
        p.call(attention, f"mask: {label}", run(base, m))
    p.call(attention, "mask meta bool", run(base, mask.to("meta")))
    for label, scale in (
        ("scale int", 1),
        ("scale numpy", np.float32(0.5)),
        ("scale str", "0.5"),
        ("scale nan", NAN),
        ("scale inf", INF),
        ("scale 0", 0.0),
        ("scale negative", -1.0),
    ):
        ok = isinstance(scale, (int, float, np.floating)) and math.isfinite(float(scale))
        check = (
            check_tensor_result(
                lambda s=scale: oracle_attention(q, k, v, scale=float(s)), torch.float32
            )
            if ok
            else None
        )
        p.call(attention, label, run(base, scale=scale), check)
    for label, value in bool_variants():
        p.call(attention, f"return_weights {label}", run(base, return_weights=value))

    x = torch.randn(3, 5, generator=g)
    p.call(
        softmax,
        "valid",
        lambda: softmax(x),
        check_tensor_result(lambda: oracle_softmax(x), torch.float32),
    )
    for label, variant in tensor_variants(x):
        check = None
        if isinstance(variant, torch.Tensor) and variant.is_floating_point() and variant.dim():
            check = check_tensor_result(lambda v=variant: oracle_softmax(v), variant.dtype)
        p.call(softmax, f"scores: {label}", lambda v=variant: softmax(v), check)
    for label, dim in (
        ("dim 0", 0),
        ("dim -2", -2),
        ("dim 5", 5),
        ("dim -3", -3),
        ("dim 1.5", 1.5),
        ("dim numpy", np.int64(1)),
        ("dim None", None),
        ("dim bool", True),
    ):
        valid = isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and -2 <= dim < 2
        check = (
            check_tensor_result(lambda d=dim: oracle_softmax(x, int(d)), torch.float32)
            if valid
            else None
        )
        p.call(softmax, label, lambda d=dim: softmax(x, d), check)
    rows = torch.tensor([[0.0, -INF], [-INF, -INF], [INF, 0.0], [NAN, 0.0]])
    p.call(
        softmax,
        "rows: -inf, all -inf, +inf, nan",
        lambda: softmax(rows),
        check_tensor_result(lambda: oracle_softmax(rows), torch.float32),
    )
    p.call(softmax, "rank 0", lambda: softmax(torch.tensor(1.0)))


def probe_online_softmax(p: Probe) -> None:
    from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge, tiled_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 3, 4, 8, generator=g),
        torch.randn(2, 3, 7, 8, generator=g),
        torch.randn(2, 3, 7, 5, generator=g),
    )
    base = {"q": q, "k": k, "v": v}
    oracle = oracle_causal_attention
    probe_qkv_variants(p, tiled_attention, base)
    for label, value in bool_variants():
        p.call(
            tiled_attention, f"causal {label}", lambda c=value: tiled_attention(q, k, v, causal=c)
        )
    for label, value in number_variants(3):
        check = None
        if label in ("numpy int",):
            check = check_tensor_result(lambda: oracle(base, False), torch.float32)
        p.call(
            tiled_attention,
            f"block_size {label}",
            lambda b=value: tiled_attention(q, k, v, block_size=b),
            check,
        )
    for dtype in (torch.float16, torch.bfloat16):
        args = {n: (x * 300 if n != "v" else x).to(dtype) for n, x in base.items()}
        p.call(
            tiled_attention,
            f"{dtype} x300 causal",
            lambda a=args: tiled_attention(**a, block_size=2, causal=True),
            check_tensor_result(lambda a=args: oracle(a, True), dtype),
        )

    scores, values = torch.randn(4, 6, generator=g), torch.randn(6, 3, generator=g)

    def finalized(s, vals):
        return lambda: finalize(block_state(s, vals))

    p.call(
        block_state,
        "valid",
        finalized(scores, values),
        check_tensor_result(lambda: oracle_softmax(scores) @ values.double(), torch.float32),
    )
    for label, variant in tensor_variants(scores):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.dtype == torch.float32
            and variant.shape == scores.shape
        ):
            check = check_tensor_result(
                lambda s=variant: oracle_softmax(s) @ values.double(), torch.float32
            )
        p.call(block_state, f"scores: {label}", finalized(variant, values), check)
    for label, variant in tensor_variants(values):
        p.call(block_state, f"values: {label}", lambda v_=variant: block_state(scores, v_))
    left, right = block_state(scores[:, :2], values[:2]), block_state(scores[:, 2:], values[2:])
    p.call(
        merge,
        "valid",
        lambda: finalize(merge(left, right)),
        check_tensor_result(lambda: oracle_softmax(scores) @ values.double(), torch.float32),
    )
    empty = block_state(torch.full((4, 3), -INF), torch.ones(3, 3))
    p.call(
        merge,
        "with an all-masked block",
        lambda: finalize(merge(left, empty)),
        check_tensor_result(
            lambda: oracle_softmax(scores[:, :2]) @ values[:2].double(), torch.float32
        ),
    )
    broken = [
        ("floats for fields", SoftmaxState(0.0, 1.0, left.u)),
        ("tuple", tuple(left)),
        ("integer field", SoftmaxState(left.m, left.l.long(), left.u)),
        ("float64 fields", SoftmaxState(*(x.double() for x in left))),
        ("wrong u shape", SoftmaxState(left.m, left.l, left.u[:2])),
        ("none", None),
    ]
    for label, state in broken:
        p.call(merge, f"a: {label}", lambda s=state: merge(s, right))
        p.call(finalize, f"state: {label}", lambda s=state: finalize(s))


def probe_masks(p: Probe) -> None:
    from attnbook.masks import causal_mask, padding_mask, segment_mask, sliding_window_mask

    def causal_oracle(tq, tk, offset):
        i = torch.arange(tq)[:, None] + offset
        return torch.arange(tk)[None, :] <= i

    def equal(expected):
        def check(result):
            expect(torch.equal(result.cpu(), expected), "mask differs from the formula")

        return check

    for label, value in number_variants(4):
        check = equal(causal_oracle(4, 4, 0)) if label == "numpy int" else None
        p.call(causal_mask, f"t_q {label}", lambda v=value: causal_mask(v), check)
        p.call(
            causal_mask,
            f"t_k {label}",
            lambda v=value: causal_mask(2, v),
            equal(causal_oracle(2, 4, 2)) if label == "numpy int" else None,
        )
        p.call(
            sliding_window_mask, f"window {label}", lambda v=value: sliding_window_mask(4, window=v)
        )
    for offset in (-10, -1, 0, 3, 100):
        p.call(
            causal_mask,
            f"offset {offset}",
            lambda o=offset: causal_mask(3, 5, offset=o),
            equal(causal_oracle(3, 5, offset)),
        )
    for label, device in (
        ("device 'gpu'", "gpu"),
        ("device 'meta'", "meta"),
        ("device 'cuda:99'", "cuda:99"),
        ("device 0", 0),
        ("device []", []),
        ("device 'cpu'", "cpu"),
        ("device torch.device", torch.device("cpu")),
    ):
        p.call(causal_mask, label, lambda d=device: causal_mask(3, device=d))
    lengths = torch.tensor([3, 0, 5])
    expected = (torch.arange(5)[None, :] < lengths[:, None])[:, None, None, :]
    p.call(padding_mask, "valid", lambda: padding_mask(lengths, 5), equal(expected))
    for label, variant in tensor_variants(lengths):
        p.call(padding_mask, f"lengths: {label}", lambda v=variant: padding_mask(v, 5))
    for label, value in (
        ("list with float", [1, 2.0]),
        ("tuple", (1, 2)),
        ("numpy ints", np.array([1, 2])),
        ("too long", [6]),
        ("negative", [-1]),
        ("string", "12"),
    ):
        p.call(padding_mask, f"lengths {label}", lambda v=value: padding_mask(v, 5))
    for label, value in number_variants(5):
        p.call(padding_mask, f"t {label}", lambda v=value: padding_mask([1, 2], v))
    ids = torch.tensor([[0, 0, 1], [2, 2, 2]])
    seg = ids[:, None, :, None] == ids[:, None, None, :]
    p.call(segment_mask, "valid", lambda: segment_mask(ids), equal(seg))
    for label, variant in tensor_variants(ids):
        p.call(segment_mask, f"segment_ids: {label}", lambda v=variant: segment_mask(v))


def probe_rope(p: Probe) -> None:
    from attnbook.rope import apply_rope, rope_angles, rope_frequencies

    def rope_oracle(x, positions, base=10000.0, layout="half"):
        d = x.shape[-1]
        freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        positions = positions.to(x.device) if x.is_meta else positions
        angle = positions.double()[..., None] * freqs.to(x.device)
        x64 = x.double()
        if layout == "half":
            a, b = x64[..., : d // 2], x64[..., d // 2 :]
        else:
            a, b = x64[..., 0::2], x64[..., 1::2]
        z = torch.complex(a, b) * torch.polar(torch.ones_like(angle), angle)
        if layout == "half":
            return torch.cat((z.real, z.imag), -1)
        return torch.stack((z.real, z.imag), -1).flatten(-2)

    g = torch.Generator().manual_seed(2)
    x, pos = torch.randn(2, 3, 5, 8, generator=g), torch.arange(5)
    for layout in ("half", "interleaved"):
        p.call(
            apply_rope,
            f"valid {layout}",
            lambda lay=layout: apply_rope(x, pos, layout=lay),
            check_tensor_result(lambda lay=layout: rope_oracle(x, pos, layout=lay), torch.float32),
        )
    for label, variant in tensor_variants(x):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.is_floating_point()
            and variant.shape[-2:] == (5, 8)
        ):
            check = check_tensor_result(lambda v=variant: rope_oracle(v, pos), variant.dtype)
        p.call(apply_rope, f"x: {label}", lambda v=variant: apply_rope(v, pos), check)
    for label, variant in tensor_variants(pos):
        p.call(apply_rope, f"positions: {label}", lambda v=variant: apply_rope(x, v))
    big = torch.tensor([0, 10**6, 10**9, 2**40, 2**52])
    xb = torch.randn(5, 8, generator=g, dtype=torch.float64)
    p.call(
        apply_rope,
        "huge positions (float64 x)",
        lambda: apply_rope(xb, big),
        check_tensor_result(lambda: rope_oracle(xb, big), torch.float64),
    )
    p.call(apply_rope, "d = 0", lambda: apply_rope(torch.zeros(3, 0), torch.arange(3)))
    p.call(apply_rope, "odd d", lambda: apply_rope(torch.zeros(3, 5), torch.arange(3)))
    for label, base in (
        ("base int", 500),
        ("base str", "1e4"),
        ("base 0", 0.0),
        ("base inf", INF),
        ("base numpy", np.float64(500.0)),
    ):
        check = None
        if label in ("base int", "base numpy"):
            check = check_tensor_result(lambda b=base: rope_oracle(x, pos, float(b)), torch.float32)
        p.call(apply_rope, label, lambda b=base: apply_rope(x, pos, base=b), check)
    p.call(apply_rope, "layout 'neox'", lambda: apply_rope(x, pos, layout="neox"))
    for label, value in number_variants(8):
        p.call(rope_frequencies, f"d {label}", lambda v=value: rope_frequencies(v))
        p.call(rope_angles, f"d {label}", lambda v=value: rope_angles(pos, v))
    p.call(
        rope_frequencies,
        "valid",
        lambda: rope_frequencies(8),
        check_tensor_result(
            lambda: 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8), torch.float64
        ),
    )
    for label, variant in tensor_variants(pos):
        p.call(rope_angles, f"positions: {label}", lambda v=variant: rope_angles(v, 8))
    # scaling, rotary_dim and rope_attention_factor (issue 28)
    from attnbook.rope import rope_attention_factor

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    p.call(
        rope_attention_factor,
        "valid yarn",
        lambda: rope_attention_factor(yarn),
        lambda got: expect(abs(got - (0.1 * math.log(4.0) + 1.0)) < 1e-12, f"got {got}"),
    )
    p.call(rope_attention_factor, "valid none", lambda: rope_attention_factor(None),
           lambda got: expect(got == 1.0, f"got {got}"))  # fmt: skip
    from attnbook.rope import rope_softmax_factor

    v3 = {**yarn, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    p.call(
        rope_softmax_factor,
        "valid DeepSeek-V3 form",
        lambda: rope_softmax_factor(v3),
        lambda got: expect(abs(got - (0.1 * math.log(40.0) + 1.0) ** 2) < 1e-12, f"got {got}"),
    )
    p.call(rope_softmax_factor, "valid plain yarn", lambda: rope_softmax_factor(yarn),
           lambda got: expect(got == 1.0, f"got {got}"))  # fmt: skip
    for label, bad in (
        ("str", "yarn"),
        ("mscale_all_dim str", {**v3, "mscale_all_dim": "1"}),
        ("factor below 1", {**v3, "factor": 0.5}),
        ("betas inverted", {**v3, "beta_fast": 1.0, "beta_slow": 32.0}),
    ):
        p.call(rope_softmax_factor, f"scaling {label}", lambda b=bad: rope_softmax_factor(b))
    p.call(apply_rope, "positions size 1 for T = 5", lambda: apply_rope(x, torch.tensor([3])))
    for label, bad in (
        ("str", "yarn"),
        ("unknown type", {"rope_type": "ntk"}),
        ("missing key", {"rope_type": "yarn", "factor": 4.0}),
        ("factor 0", {"rope_type": "linear", "factor": 0.0}),
        ("factor nan", {"rope_type": "linear", "factor": NAN}),
        ("factor str", {"rope_type": "linear", "factor": "4"}),
    ):
        p.call(rope_attention_factor, f"scaling {label}", lambda b=bad: rope_attention_factor(b))
        p.call(apply_rope, f"scaling {label}", lambda b=bad: apply_rope(x, pos, scaling=b))
    for label, value in number_variants(4):
        check = None
        if label in ("numpy int",):
            check = check_tensor_result(
                lambda: torch.cat((rope_oracle(x[..., :4], pos), x[..., 4:]), -1), torch.float32
            )
        p.call(apply_rope, f"rotary_dim {label}", lambda v=value: apply_rope(x, pos, rotary_dim=v),
               check)  # fmt: skip


def probe_heads(p: Probe) -> None:
    from attnbook.heads import merge_heads, split_heads

    x = torch.randn(2, 5, 12)

    def split_oracle(t, h):
        return t.reshape(*t.shape[:-1], h, t.shape[-1] // h).transpose(-3, -2)

    p.call(
        split_heads,
        "valid",
        lambda: split_heads(x, 3),
        check_tensor_result(lambda: split_oracle(x, 3), torch.float32),
    )
    for label, variant in tensor_variants(x):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.dim() >= 2
            and variant.shape[-1] == 12
            and variant.is_floating_point()
        ):
            check = check_tensor_result(lambda v=variant: split_oracle(v, 3), variant.dtype)
        p.call(split_heads, f"x: {label}", lambda v=variant: split_heads(v, 3), check)
    for label, value in number_variants(3):
        p.call(split_heads, f"heads {label}", lambda v=value: split_heads(x, v))
    y = split_heads(x, 3)
    for label, variant in tensor_variants(y):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.shape == y.shape
            and variant.is_floating_point()
        ):
            check = check_tensor_result(
                lambda v=variant: v.transpose(-3, -2).reshape(2, 5, 12), variant.dtype
            )
        p.call(merge_heads, f"x: {label}", lambda v=variant: merge_heads(v), check)


def probe_costs(p: Probe) -> None:
    kv = {"layers": 32, "positions": 4096, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2}
    functions = [
        (
            costs.kv_cache_bytes,
            kv,
            lambda a: (
                a["layers"]
                * a["positions"]
                * a["kv_heads"]
                * 2
                * a["head_dim"]
                * a["bytes_per_element"]
            ),
        ),
        (costs.attention_flops, {"n": 1024, "d": 4096}, lambda a: 4 * a["n"] ** 2 * a["d"]),
        (costs.projection_flops, {"n": 1024, "d": 4096}, lambda a: 8 * a["n"] * a["d"] ** 2),
        (costs.ffn_flops, {"n": 1024, "d": 4096}, lambda a: 16 * a["n"] * a["d"] ** 2),
        (costs.block_params, {"d": 4096}, lambda a: 12 * a["d"] ** 2),
        (
            costs.swiglu_hidden,
            {"d": 4096, "multiple_of": 256},
            lambda a: -(-(8 * a["d"] // 3) // a["multiple_of"]) * a["multiple_of"],
        ),
        (
            costs.training_flops,
            {"params": 70 * 10**9, "tokens": 14 * 10**11},
            lambda a: 6 * a["params"] * a["tokens"],
        ),
        (costs.chinchilla_tokens, {"params": 70 * 10**9}, lambda a: 20 * a["params"]),
        (
            costs.vit_tokens,
            {"height": 224, "width": 224, "patch": 16},
            lambda a: (
                (a["height"] // a["patch"]) * (a["width"] // a["patch"]),
                a["patch"] ** 2 * 3,
            ),
        ),
    ]
    for fn, args, formula in functions:  # sizes written as readers write them
        p.call(fn, "valid", lambda f=fn, a=args: f(**a), equals(formula(args)))
        for name, value in args.items():
            for label, variant in number_variants(value):
                exact = _whole(variant)
                check = None
                if exact is not None and exact >= 1:
                    fixed = {**args, name: exact}
                    try:
                        check = equals(formula(fixed))
                    except ZeroDivisionError:
                        check = None
                if fn is costs.vit_tokens and exact is not None and exact % 16 and name != "patch":
                    check = None  # the image must divide into patches: an error is right
                p.call(
                    fn,
                    f"{name} {label}",
                    lambda f=fn, a=args, n=name, v=variant: f(**{**a, n: v}),
                    check,
                )
    for fn in (costs.ffn_flops, costs.block_params):
        for label, value in bool_variants():
            args = {"d": 64} if fn is costs.block_params else {"n": 2, "d": 64}
            check = None
            if label == "numpy bool":
                check = equals(fn(**args, gated=True))
            p.call(fn, f"gated {label}", lambda f=fn, a=args, v=value: f(**a, gated=v), check)


def _whole(value: object) -> int | None:
    """The whole number a reader meant, or None if the value is not one that must be accepted."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    if isinstance(value, (float, np.floating)) and (
        not math.isfinite(value) or value != int(value) or abs(value) > 2**53
    ):
        return None
    return int(value)


def equals(expected):
    def check(result):
        expect(result == expected and type(result) is type(expected), f"{result!r} != {expected!r}")

    return check


# --- diagnostics, retrieval, health, plots --------------------------------------------------


def _layer(mask):
    from attnbook.attention import attention

    return lambda x: attention(x[:, None], x[:, None], x[:, None], mask)[:, 0]


def verdict(expected: bool):
    def check(result):
        expect(
            result.passed is expected,
            f"{'PASS' if result.passed else 'FAIL'} where "
            f"{'PASS' if expected else 'FAIL'} is right: {result}",
        )

    return check


def probe_diagnostics(p: Probe) -> None:
    from attnbook.attention import attention
    from attnbook.diagnostics import (
        check_attention_rows,
        check_cache,
        check_causality,
        check_isolation,
        check_label_shift,
        check_loss_masking,
    )
    from attnbook.masks import causal_mask, segment_mask

    g = torch.Generator().manual_seed(3)
    leaky = torch.ones(6, 6, dtype=torch.bool).tril(1)
    ids = torch.tensor([[0, 0, 0, 1, 1, 1]])
    for dtype in FLOATS:
        x = torch.randn(1, 6, 4, generator=g).to(dtype)
        healthy, broken = _layer(causal_mask(6)), _layer(leaky)
        p.call(
            check_causality,
            f"{dtype} causal",
            lambda f=healthy, x=x: check_causality(f, x),
            verdict(True),
        )
        p.call(
            check_causality,
            f"{dtype} leaky",
            lambda f=broken, x=x: check_causality(f, x),
            verdict(False),
        )
        for name, value in (("nan", NAN), ("inf", INF)):

            def poisoned(z, f=healthy, value=value):
                out = f(z).clone()
                out[:, 3] = value
                return out

            def leaky_poisoned(z, f=broken, value=value):
                return f(z) * value

            p.call(
                check_causality,
                f"{dtype} causal fn with {name} outputs",
                lambda f=poisoned, x=x: check_causality(f, x),
                verdict(False),
            )
            p.call(
                check_causality,
                f"{dtype} leaky fn with {name} outputs",
                lambda f=leaky_poisoned, x=x: check_causality(f, x),
                verdict(False),
            )
            p.call(
                check_isolation,
                f"{dtype} leaky fn with {name} outputs",
                lambda f=leaky_poisoned, x=x: check_isolation(f, x, ids),
                verdict(False),
            )
        p.call(
            check_isolation,
            f"{dtype} isolated",
            lambda x=x: check_isolation(_layer(segment_mask(ids)), x, ids),
            verdict(True),
        )
        p.call(
            check_isolation,
            f"{dtype} not isolated",
            lambda x=x: check_isolation(_layer(None), x, ids),
            verdict(False),
        )
        nx = nn.Linear(4, 4).to(dtype)
        p.call(
            check_causality,
            f"{dtype} nn.Linear (per-position, causal)",
            lambda m=nx, x=x: check_causality(m, x),
            verdict(True),
        )

        qk = torch.randn(2, 8, 16, generator=g).to(dtype)
        allowed = causal_mask(8, 8, offset=-2)  # two rows see nothing
        w = attention(qk, qk, qk, allowed, return_weights=True)[1]
        p.call(
            check_attention_rows,
            f"{dtype} correct weights, two empty rows",
            lambda w=w, a=allowed: check_attention_rows(w, a),
            verdict(True),
        )
        p.call(
            check_attention_rows,
            f"{dtype} masked after softmax",
            lambda q=qk, a=allowed: check_attention_rows(torch.softmax(q @ q.mT, -1) * a, a),
            verdict(False),
        )
        for name, value in (("nan", NAN), ("inf", INF)):
            bad = w.clone()
            bad[0, 4, 0] = value
            p.call(
                check_attention_rows,
                f"{dtype} weights with {name}",
                lambda b=bad, a=allowed: check_attention_rows(b, a),
                verdict(False),
            )

        logits = (4 * torch.randn(2, 5, 7, generator=g)).to(dtype)
        p.call(
            check_cache,
            f"{dtype} identical",
            lambda lg=logits: check_cache(lg, lg.clone()),
            verdict(True),
        )
        for name, value in (("nan", NAN), ("inf", INF)):
            bad = logits.clone()
            bad[1, 3, 2] = value
            p.call(
                check_cache,
                f"{dtype} cached with {name}",
                lambda lg=logits, b=bad: check_cache(lg, b),
                verdict(False),
            )
            p.call(
                check_cache,
                f"{dtype} both with {name}",
                lambda b=bad: check_cache(b, b.clone()),
                verdict(False),
            )
        shifted = logits.clone()
        shifted[0, 2] += 1.0
        p.call(
            check_cache,
            f"{dtype} diverging by 1",
            lambda lg=logits, s=shifted: check_cache(lg, s),
            verdict(False),
        )

    x = torch.randn(1, 6, 4, generator=g)
    for label, variant in tensor_variants(x):
        p.call(
            check_causality,
            f"x: {label}",
            lambda v=variant: check_causality(_layer(causal_mask(6)), v),
            None,
        )
    for label, atol in (
        ("atol str", "1e-6"),
        ("atol 0", 0),
        ("atol nan", NAN),
        ("atol numpy", np.float32(1e-3)),
    ):
        p.call(
            check_causality,
            label,
            lambda a=atol: check_causality(_layer(None), x, atol=a),
            verdict(False) if label == "atol numpy" else None,
        )
    for label, variant in tensor_variants(ids):
        p.call(
            check_isolation,
            f"segment_ids: {label}",
            lambda v=variant: check_isolation(_layer(None), x, v),
        )
    w = torch.full((3, 4), 0.25)
    allowed = torch.ones(3, 4, dtype=torch.bool)
    for label, variant in tensor_variants(w):
        p.call(
            check_attention_rows,
            f"weights: {label}",
            lambda v=variant: check_attention_rows(v, allowed),
        )
    for label, variant in tensor_variants(allowed.float()):
        m = (
            variant > 0
            if isinstance(variant, torch.Tensor) and variant.dtype == torch.bool
            else variant
        )
        p.call(check_attention_rows, f"allowed: {label}", lambda m=m: check_attention_rows(w, m))
    logits = torch.randn(2, 5, 7, generator=g)
    for label, variant in tensor_variants(logits):
        p.call(check_cache, f"cached: {label}", lambda v=variant: check_cache(logits, v))

    tokens = torch.randint(10, (3, 9), generator=g)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    p.call(check_label_shift, "healthy", lambda: check_label_shift(inputs, labels), verdict(True))
    p.call(
        check_label_shift,
        "never shifted",
        lambda: check_label_shift(inputs, inputs),
        verdict(False),
    )
    p.call(
        check_label_shift,
        "all ignored",
        lambda: check_label_shift(inputs, torch.full_like(labels, -100)),
    )
    for label, variant in tensor_variants(labels):
        p.call(
            check_label_shift, f"labels: {label}", lambda v=variant: check_label_shift(inputs, v)
        )
    valid = torch.ones(3, 8, dtype=torch.bool)
    valid[0, 5:] = False
    ignored = labels.masked_fill(~valid, -100)

    def good(lg, y):
        return nn.functional.cross_entropy(lg.flatten(0, 1), y.flatten(), ignore_index=-100)

    def nan_loss(lg, y):
        return good(lg, y) * NAN

    p.call(
        check_loss_masking,
        "healthy",
        lambda: check_loss_masking(good, ignored, valid, 10),
        verdict(True),
    )
    p.call(
        check_loss_masking,
        "NaN loss",
        lambda: check_loss_masking(nan_loss, ignored, valid, 10),
        verdict(False),
    )
    p.call(
        check_loss_masking,
        "labels beyond vocab",
        lambda: check_loss_masking(good, ignored, valid, 5),
    )
    for label, variant in tensor_variants(ignored):
        p.call(
            check_loss_masking,
            f"labels: {label}",
            lambda v=variant: check_loss_masking(good, v, valid, 10),
        )
    for label, value in number_variants(10):
        p.call(
            check_loss_masking,
            f"vocab {label}",
            lambda v=value: check_loss_masking(good, ignored, valid, v),
        )


def verdict_word(word: str):
    """The check's verdict is exactly ``word``: PASS, FAIL or UNTESTED (never a pass)."""

    def check(result):
        expect(result.verdict == word, f"{result.verdict} where {word} is right: {result}")
        expect(result.tested is (word != "UNTESTED"), f"tested={result.tested}: {result}")

    return check


def probe_accumulation(p: Probe) -> None:
    import torch.nn.functional as F

    from attnbook.diagnostics import check_accumulation

    g = torch.Generator().manual_seed(21)
    valid = torch.ones(4, 6, dtype=torch.bool)
    valid[2, 2:] = False  # micro=2: 12 and 6 valid tokens; micro=4: 6, 6, 2, 4
    valid[3, 4:] = False
    labels = torch.randint(7, (4, 6), generator=g).masked_fill(~valid, -100)

    def token_sums(logits, labels, ignore=-100):
        return [
            F.cross_entropy(
                lg.flatten(0, 1), y.flatten().long(), ignore_index=ignore, reduction="sum"
            )
            for lg, y in zip(logits, labels, strict=True)
        ]

    def weighted(logits, labels):  # the fix: every valid token of the whole batch alike
        total = sum(int((y != -100).sum()) for y in labels)
        return sum(token_sums(logits, labels)) / total

    def scaled_per_micro(logits, labels):  # Hugging Face style: loss_i * n_i / N, summed
        counts = [int((y != -100).sum()) for y in labels]
        means = [s / max(n, 1) for s, n in zip(token_sums(logits, labels), counts, strict=True)]
        return sum(m * n / sum(counts) for m, n in zip(means, counts, strict=True))

    def whole_batch(logits, labels):  # no accumulation at all: one mean over the batch
        lg, y = torch.cat(logits), torch.cat(labels)
        return F.cross_entropy(lg.flatten(0, 1), y.flatten().long(), ignore_index=-100)

    def mean_of_means(logits, labels):  # the bug: each micro-batch weighs 1 / micro
        means = [
            F.cross_entropy(lg.flatten(0, 1), y.flatten().long(), ignore_index=-100)
            for lg, y in zip(logits, labels, strict=True)
        ]
        return sum(means) / len(means)

    def unnormalised(logits, labels):  # the sum of token losses, never divided
        return sum(token_sums(logits, labels))

    def padding_counted(logits, labels):  # padding labelled 0 and scored like a token
        return whole_batch(logits, [y.clamp_min(0) for y in labels])

    def nan_loss(logits, labels):
        return weighted(logits, labels) * NAN

    for micro in (2, 3, 4):
        for fn, word in (
            (weighted, "PASS"),
            (scaled_per_micro, "PASS"),
            (whole_batch, "PASS"),
            (mean_of_means, "FAIL"),
            (unnormalised, "FAIL"),
            (padding_counted, "FAIL"),
            (nan_loss, "FAIL"),
        ):
            p.call(
                check_accumulation,
                f"{fn.__name__}, micro={micro}",
                lambda f=fn, m=micro: check_accumulation(f, labels, valid, 7, m),
                verdict_word(word),
            )
    other_pad = labels.masked_fill(~valid, -1)
    p.call(
        check_accumulation,
        "padding as -1, skipped by the loss",
        lambda: check_accumulation(
            lambda lg, y: sum(token_sums(lg, y, ignore=-1)) / int(valid.sum()),
            other_pad,
            valid,
            7,
            2,
        ),
        verdict_word("PASS"),
    )
    even = torch.ones(4, 6, dtype=torch.bool)
    even[1, 3:] = even[3, 3:] = False  # micro=2: 9 and 9 valid tokens
    even_labels = labels.masked_fill(~even, -100).masked_fill(even & (labels < 0), 0)
    for fn in (weighted, mean_of_means):
        p.call(
            check_accumulation,
            f"{fn.__name__}, equal counts per micro-batch",
            lambda f=fn: check_accumulation(f, even_labels, even, 7, 2),
            verdict_word("UNTESTED"),
        )
    p.call(
        check_accumulation,
        "micro=1",
        lambda: check_accumulation(mean_of_means, labels, valid, 7, 1),
        verdict_word("UNTESTED"),
    )
    first_empty = valid.clone()
    first_empty[:2] = False
    p.call(
        check_accumulation,
        "first micro-batch has no valid token",
        lambda: check_accumulation(
            weighted, labels.masked_fill(~first_empty, -100), first_empty, 7, 2
        ),
        verdict_word("UNTESTED"),
    )
    rest_empty = valid.clone()
    rest_empty[2:] = False
    p.call(
        check_accumulation,
        "only the first micro-batch has valid tokens",
        lambda: check_accumulation(
            weighted, labels.masked_fill(~rest_empty, -100), rest_empty, 7, 2
        ),
        verdict_word("UNTESTED"),
    )
    p.call(
        check_accumulation,
        "labels int32",
        lambda: check_accumulation(weighted, labels.int(), valid, 7, 2),
        verdict_word("PASS"),
    )
    p.call(
        check_accumulation,
        "vocab larger than used",
        lambda: check_accumulation(mean_of_means, labels, valid, 50, 2),
        verdict_word("FAIL"),
    )

    for label, variant in tensor_variants(labels):
        check = None
        if isinstance(variant, torch.Tensor) and label == "non-contiguous":
            check = verdict_word("PASS")
        p.call(
            check_accumulation,
            f"labels: {label}",
            lambda v=variant: check_accumulation(weighted, v, valid, 7, 2),
            check,
        )
    for label, variant in tensor_variants(valid):
        check = None
        if isinstance(variant, torch.Tensor) and label == "non-contiguous":
            check = verdict_word("PASS")
        p.call(
            check_accumulation,
            f"valid: {label}",
            lambda v=variant: check_accumulation(weighted, labels, v, 7, 2),
            check,
        )
    for label, value in number_variants(7):
        check = verdict_word("PASS") if label == "numpy int" else None
        p.call(
            check_accumulation,
            f"vocab {label}",
            lambda v=value: check_accumulation(weighted, labels, valid, v, 2),
            check,
        )
    for label, value in number_variants(2):
        check = verdict_word("PASS") if label == "numpy int" else None
        p.call(
            check_accumulation,
            f"micro {label}",
            lambda v=value: check_accumulation(weighted, labels, valid, 7, v),
            check,
        )
    for label, atol in (
        ("atol str", "1e-6"),
        ("atol 0", 0),
        ("atol -1", -1.0),
        ("atol nan", NAN),
        ("atol inf", INF),
        ("atol bool", True),
        ("atol numpy", np.float32(1e-3)),
    ):
        p.call(
            check_accumulation,
            label,
            lambda a=atol: check_accumulation(mean_of_means, labels, valid, 7, 2, atol=a),
            verdict_word("FAIL") if label == "atol numpy" else None,
        )
    for label, args in (
        ("micro > B", (weighted, labels, valid, 7, 5)),
        ("vocab 1", (weighted, labels.clamp_max(0), valid, 1, 2)),
        ("vocab 2**62 (logits too large)", (weighted, labels.clamp_max(1), valid, 2**62, 2)),
        ("labels beyond vocab", (weighted, labels, valid, 5, 2)),
        ("label -100 where valid", (weighted, labels.masked_fill(valid, -100), valid, 7, 2)),
        ("valid of another shape", (weighted, labels, valid[:, :5], 7, 2)),
        ("accumulate not callable", (3, labels, valid, 7, 2)),
        ("accumulate returns a float", (lambda lg, y: weighted(lg, y).item(), labels, valid, 7, 2)),
        ("accumulate returns None", (lambda lg, y: None, labels, valid, 7, 2)),
        (
            "accumulate returns per-token losses",
            (lambda lg, y: torch.cat([t.flatten() for t in y]).float(), labels, valid, 7, 2),
        ),
    ):
        p.call(check_accumulation, label, lambda a=args: check_accumulation(*a))

    def broken(logits, labels):
        raise ValueError("the reader's own bug")

    p.call(
        check_accumulation,
        "accumulate raises (passed on)",
        lambda: check_accumulation(broken, labels, valid, 7, 2),
    )


def probe_retrieval(p: Probe) -> None:
    import dataclasses

    from attnbook.retrieval import RetrievalConfig, RetrievalData, make_data
    from attnbook.retrieval_model import (
        TinyRetriever,
        final_logits,
        intervention_accuracy,
        no_context_accuracy,
        score,
        train,
    )

    config = RetrievalConfig()
    for field in ("keys", "values", "records", "train_size", "width", "heads", "steps", "seed"):
        for label, value in number_variants(getattr(config, field)):
            if label == "huge int" and field in ("keys", "values", "width"):
                continue  # valid, and only building a model would allocate (not done here)
            p.call(
                RetrievalConfig,
                f"{field} {label}",
                lambda f=field, v=value: RetrievalConfig(**{f: v}),
            )
    p.call(RetrievalConfig, "seed 2**64", lambda: RetrievalConfig(seed=2**64))
    for label, value in (
        ("lr str", "1e-3"),
        ("lr nan", NAN),
        ("clip 0", 0.0),
        ("weight_decay -1", -1.0),
    ):
        field = label.split()[0]
        p.call(RetrievalConfig, label, lambda f=field, v=value: RetrievalConfig(**{f: v}))

    gen = torch.Generator().manual_seed(4)
    tiny = RetrievalConfig(keys=2, values=2, records=2)
    p.call(make_data, "more sequences than exist", lambda: make_data(2048, tiny, torch.Generator()))
    p.call(make_data, "count 10**12", lambda: make_data(10**12, config, torch.Generator()))
    for label, value in (
        ("evidence -1", -1),
        ("evidence 4", 4),
        ("evidence 1.0", 1.0),
        ("records 9", None),
    ):
        kwargs = {"records": 9} if value is None else {"evidence": value}
        p.call(make_data, label, lambda k=kwargs: make_data(4, config, gen, **k))

    def consistent(d):
        rows = torch.arange(len(d))
        expect(len(d) == 16 and len(d.signatures) == 16, "wrong count")
        expect(bool((d.keys[rows, d.evidence] == d.keys[:, -1]).all()), "evidence key")
        expect(bool((d.values[rows, d.evidence] == d.answers).all()), "answers")

    p.call(make_data, "valid", lambda: make_data(16, config, torch.Generator()), consistent)
    p.call(make_data, "evidence 2", lambda: make_data(16, config, gen, evidence=2), consistent)
    data = make_data(16, config, gen)

    def with_(**fields):
        return lambda: RetrievalData(
            **{**{f: getattr(data, f) for f in ("keys", "values", "answers", "evidence")}, **fields}
        )

    for name in ("keys", "values", "answers", "evidence"):
        for label, variant in tensor_variants(getattr(data, name)):
            p.call(RetrievalData, f"{name}: {label}", with_(**{name: variant}))
    for label, evidence in (("evidence -1", -1), ("evidence = query", 4), ("evidence 10", 10)):
        p.call(RetrievalData, label, with_(evidence=torch.full((16,), evidence)))
    p.call(RetrievalData, "answers inconsistent", with_(answers=(data.answers + 1) % 8))

    model = TinyRetriever(config).eval()
    p.call(TinyRetriever, "config", lambda: TinyRetriever(config))
    p.call(TinyRetriever, "config is a dict", lambda: TinyRetriever({"keys": 8}))
    p.call(
        TinyRetriever,
        "forward: keys beyond the vocabulary",
        lambda: model(data.keys + 8, data.values),
        names=("keys",),
    )
    bad_answers = RetrievalData(data.keys, data.values.clamp_max(7), data.answers, data.evidence)
    p.call(score, "valid", lambda: score(model, data), _finite_pair)
    p.call(
        score,
        "values beyond V",
        lambda: score(
            model, RetrievalData(data.keys, data.values + 100, data.answers + 100, data.evidence)
        ),
    )
    p.call(score, "model is a Linear", lambda: score(nn.Linear(2, 2), data))
    p.call(
        final_logits,
        "valid",
        lambda: final_logits(model, data),
        lambda r: expect(r.shape == (16, 8) and bool(torch.isfinite(r).all()), "bad logits"),
    )
    p.call(
        no_context_accuracy,
        "valid",
        lambda: no_context_accuracy(model, data),
        lambda r: expect(0 <= r <= 1, f"accuracy {r}"),
    )
    for label, shift in (
        ("shift 1", 1),
        ("shift 8", 8),
        ("shift -1", -1),
        ("shift 1.0", 1.0),
        ("shift str", "1"),
    ):
        p.call(
            intervention_accuracy,
            label,
            lambda s=shift: intervention_accuracy(model, bad_answers, s),
            (lambda r: expect(0 <= r <= 1, f"accuracy {r}"))
            if label in ("shift 1", "shift -1")
            else None,
        )
    for label, value in (
        ("head_mask float64", torch.ones(4, dtype=torch.float64)),
        ("head_mask 3 heads", torch.ones(3)),
        ("head_mask nan", torch.full((4,), NAN)),
    ):
        p.call(
            final_logits,
            label,
            lambda v=value: final_logits(model, data, head_mask=v),
            names=("head_mask",),
        )
    for fn in (final_logits, score, no_context_accuracy, intervention_accuracy):
        p.call(fn, "model is a dict", lambda f=fn: f({}, data))
        p.call(fn, "data is a tuple", lambda f=fn: f(model, (data.keys, data.values)))
    short = dataclasses.replace(config, steps=2, batch=4)
    p.call(
        train,
        "two steps",
        lambda: train(short, data),
        lambda r: expect(
            len(r[1]) == 2 and all(math.isfinite(x) for x in r[1]), "non-finite losses"
        ),
    )
    p.call(
        train,
        "data from a bigger vocabulary",
        lambda: train(
            dataclasses.replace(short, keys=4, records=2),
            make_data(4, RetrievalConfig(keys=8, records=2), gen),
        ),
    )


def _rule_retriever(config, rule):
    """A :class:`TinyRetriever` whose prediction at the query is ``rule(keys, values)`` (Python
    lists of one row), so the retrieval controls can be worked out by hand for it."""
    from attnbook.retrieval_model import TinyRetriever

    class RuleRetriever(TinyRetriever):
        def forward(self, keys, values, *, head_mask=None):
            n, t = keys.shape
            vocab = self.head.out_features
            pred = [rule(k, v) % vocab for k, v in zip(keys.tolist(), values.tolist(), strict=True)]
            logits = torch.zeros(n, t, vocab)
            logits[torch.arange(n), -1, torch.tensor(pred, dtype=torch.long)] = 1.0
            return logits, torch.zeros(n, self.heads, t, t)

    return RuleRetriever(config).eval()


RULES = {  # prediction from one row's keys and values (the query record last)
    "reads the matching record": lambda k, v: v[k[:-1].index(k[-1])],
    "reads record 0 (a position shortcut)": lambda k, v: v[0],
    "ignores the context": lambda k, v: 0,
    "sums the context's values": lambda k, v: sum(v[:-1]),
    "parity of the context's values": lambda k, v: sum(v[:-1]) % 2,
}


def key_swap_by_hand(data, rule, vocab):
    """The documented key swap, row by row: the query key becomes the key of the first record
    after the evidence (cyclically) whose value differs from the answer; rows without one are
    skipped; the fraction of rows whose prediction is that record's value."""
    hits = total = 0
    for keys, values, answer, e in zip(
        data.keys.tolist(),
        data.values.tolist(),
        data.answers.tolist(),
        data.evidence.tolist(),
        strict=True,
    ):
        r = len(keys) - 1
        others = [(e + s) % r for s in range(1, r) if values[(e + s) % r] != answer]
        if not others:
            continue
        j = others[0]
        hits += rule([*keys[:-1], keys[j]], values) % vocab == values[j]
        total += 1
    return hits / total


def specificity_by_hand(data, rule, vocab, shift=1):
    """The documented specificity, row by row: record ``(evidence + 1) % R`` gets the first of
    ``v + shift, v + shift + 1, ...`` (mod V) that is neither ``v`` nor the answer; the fraction
    of rows whose prediction is unchanged."""
    same = 0
    for keys, values, answer, e in zip(
        data.keys.tolist(),
        data.values.tolist(),
        data.answers.tolist(),
        data.evidence.tolist(),
        strict=True,
    ):
        j = (e + 1) % (len(keys) - 1)
        old = values[j]
        new = next(
            x for x in ((old + shift + i) % vocab for i in range(vocab)) if x not in (old, answer)
        )
        edited = [*values[:j], new, *values[j + 1 :]]
        same += (rule(keys, values) % vocab) == (rule(keys, edited) % vocab)
    return same / len(data)


def near_fraction(expected):
    return lambda r: expect(
        isinstance(r, float) and abs(r - expected) < 1e-6, f"{r!r} != {expected!r}"
    )


def probe_retrieval_controls(p: Probe) -> None:
    import dataclasses

    from attnbook.retrieval import RetrievalConfig, make_data
    from attnbook.retrieval_model import TinyRetriever, key_swap_accuracy, specificity

    config = RetrievalConfig()
    gen = torch.Generator().manual_seed(31)
    datasets = {
        "default data": (config, make_data(64, config, gen)),
        "evidence 0": (config, make_data(32, config, gen, evidence=0)),
        "2 context records": (config, make_data(32, config, gen, records=2)),
        "8 context records": (config, make_data(32, config, gen, records=8)),
    }
    two = RetrievalConfig(values=2)  # many rows hold one value only: key swap skips them
    three = RetrievalConfig(values=3)  # the smallest V specificity takes
    datasets["V = 2"] = (two, make_data(64, two, gen))
    datasets["V = 3"] = (three, make_data(64, three, gen))
    for data_label, (cfg, data) in datasets.items():
        for rule_label, rule in RULES.items():
            model = _rule_retriever(cfg, rule)
            p.call(
                key_swap_accuracy,
                f"{data_label}, model {rule_label}",
                lambda m=model, d=data: key_swap_accuracy(m, d),
                near_fraction(key_swap_by_hand(data, rule, cfg.values)),
            )
            if cfg.values < 3:
                continue  # specificity needs V >= 3 (refused below)
            p.call(
                specificity,
                f"{data_label}, model {rule_label}",
                lambda m=model, d=data: specificity(m, d),
                near_fraction(specificity_by_hand(data, rule, cfg.values)),
            )
    # What the docstrings promise, stated outright for the lookup and a shortcut.
    data = datasets["default data"][1]
    lookup = _rule_retriever(config, RULES["reads the matching record"])
    constant = _rule_retriever(config, RULES["ignores the context"])
    mixer = _rule_retriever(config, RULES["sums the context's values"])
    p.call(
        key_swap_accuracy,
        "lookup follows the key",
        lambda: key_swap_accuracy(lookup, data),
        near_fraction(1.0),
    )
    p.call(
        specificity,
        "lookup keeps its prediction",
        lambda: specificity(lookup, data),
        near_fraction(1.0),
    )
    p.call(specificity, "mixer always moves", lambda: specificity(mixer, data), near_fraction(0.0))
    p.call(
        specificity, "constant never moves", lambda: specificity(constant, data), near_fraction(1.0)
    )
    p.call(
        key_swap_accuracy,
        "constant scores at most its share of swapped answers",
        lambda: key_swap_accuracy(constant, data),
        lambda r: expect(r < 0.5, f"a model that ignores the key scored {r}"),
    )
    parity_rule = RULES["parity of the context's values"]
    parity = _rule_retriever(config, parity_rule)
    extra = [("2", 2), ("3", 3), ("9 (= 1 mod V)", 9), ("-7", -7), ("16 (a multiple of V)", 16)]
    for label, shift in number_variants(1) + extra:
        check = None
        accepted = label in ("numpy int", "negative") or label[0] in "0123456789-"
        if accepted and int(shift) % 8:
            check = near_fraction(specificity_by_hand(data, parity_rule, 8, int(shift)))
        p.call(
            specificity,
            f"parity model, shift {label}",
            lambda s=shift: specificity(parity, data, s),
            check,
        )
    model = TinyRetriever(config).eval()  # untrained: only the range can be checked
    in_unit = lambda r: expect(isinstance(r, float) and 0 <= r <= 1, f"fraction {r!r}")  # noqa: E731
    for fn in (key_swap_accuracy, specificity):
        p.call(fn, "untrained TinyRetriever", lambda f=fn: f(model, data), in_unit)
        p.call(
            fn,
            "untrained TinyRetriever in float16",
            lambda f=fn: f(TinyRetriever(config).half().eval(), data),
            in_unit,
        )
        p.call(
            fn,
            "untrained TinyRetriever in training mode",
            lambda f=fn: f(TinyRetriever(config).train(), data),
            in_unit,
        )
        p.call(fn, "model is a dict", lambda f=fn: f({}, data))
        p.call(fn, "model is None", lambda f=fn: f(None, data))
        p.call(fn, "model is a Linear", lambda f=fn: f(nn.Linear(2, 2), data))
        p.call(fn, "data is a tuple", lambda f=fn: f(model, (data.keys, data.values)))
        p.call(fn, "data is None", lambda f=fn: f(model, None))
        p.call(fn, "data is a dict", lambda f=fn: f(model, dataclasses.asdict(data)))
        p.call(fn, "arguments swapped", lambda f=fn: f(data, model))
        p.call(
            fn,
            "1 context record",
            lambda f=fn: f(model, make_data(4, config, gen, records=1)),
        )
        p.call(
            fn,
            "answers beyond the model's V",
            lambda f=fn: f(TinyRetriever(RetrievalConfig(values=4)).eval(), data),
        )
        p.call(
            fn,
            "keys beyond the model's vocabulary",
            lambda f=fn: f(model, make_data(4, RetrievalConfig(keys=16), gen)),
            names=("keys",),
            callbacks=False,
        )
    for label, value in (
        ("shift str", "1"),
        ("shift 1.0", 1.0),
        ("shift None", None),
        ("shift numpy float", np.float64(1.0)),
    ):
        p.call(specificity, label, lambda v=value: specificity(model, data, v))


def _finite_pair(result):
    loss, accuracy = result
    expect(math.isfinite(loss) and 0 <= accuracy <= 1, f"score {result}")


def probe_health(p: Probe) -> None:
    from attnbook.training_health import (
        attention_entropy,
        grad_norm,
        measure_memory,
        watch_activations,
    )

    w = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    expected = torch.tensor([0.0, math.log(4)], dtype=torch.float64)
    for label, variant in tensor_variants(w):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.is_floating_point()
            and variant.shape == w.shape
            and label.startswith("dtype")
        ):
            check = check_tensor_result(lambda: expected, variant.dtype)
        p.call(
            attention_entropy, f"weights: {label}", lambda v=variant: attention_entropy(v), check
        )
    for dtype in (torch.float16, torch.float32):
        model = nn.Linear(2, 1, bias=False).to(dtype)
        model.weight.grad = torch.tensor([[60000.0, 60000.0]]).to(dtype)
        p.call(
            grad_norm,
            f"{dtype} gradients of 60000",
            lambda m=model: grad_norm(m),
            lambda r: expect(abs(r / (60000 * math.sqrt(2)) - 1) < 1e-3, f"norm {r}"),
        )
    p.call(
        grad_norm,
        "no gradients",
        lambda: grad_norm(nn.Linear(2, 2)),
        lambda r: expect(r == 0.0, f"norm {r}"),
    )
    p.call(grad_norm, "model is a list of tensors", lambda: grad_norm([torch.ones(2)]))
    meta_model = nn.Linear(2, 2, device="meta")
    meta_model.weight.grad = torch.ones(2, 2, device="meta")
    p.call(grad_norm, "meta gradients", lambda: grad_norm(meta_model))
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(3, 4)
    for label, variant in tensor_variants(x):
        p.call(watch_activations, f"input: {label}", lambda v=variant: watch_activations(net, v))
    nan_net = nn.Linear(4, 4)
    with torch.no_grad():
        nan_net.weight[0, 0] = NAN
    p.call(
        watch_activations,
        "NaN weight",
        lambda: watch_activations(nan_net, x),
        lambda r: expect(r[0][2] is False and r[0][1] == INF, f"records {r}"),
    )
    opt = torch.optim.SGD(net.parameters())
    p.call(measure_memory, "valid", lambda: measure_memory(net, opt, lambda: net(x).sum()))
    p.call(measure_memory, "loss not scalar", lambda: measure_memory(net, opt, lambda: net(x)))
    p.call(measure_memory, "loss_fn not callable", lambda: measure_memory(net, opt, 3))


def probe_plots(p: Probe) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from attnbook.plots import heatmap, new_figure

    for name in ("nrows", "ncols"):
        for label, value in number_variants(2):
            if label in ("numpy int",):
                continue  # valid: draws a figure (covered by the chapters)
            p.call(new_figure, f"{name} {label}", lambda n=name, v=value: new_figure(**{n: v}))
    for label, value in (
        ("width huge", 1e4),
        ("width str", "6"),
        ("height 0", 0),
        ("height nan", NAN),
    ):
        name = label.split()[0]
        p.call(new_figure, label, lambda n=name, v=value: new_figure(**{n: v}))
    p.call(new_figure, "nrows numpy int", lambda: new_figure(np.int64(2)))
    p.call(plots.use_style, "no arguments", plots.use_style)
    plt.close("all")
    m = torch.rand(3, 4)
    for label, variant in tensor_variants(m):
        p.call(heatmap, f"matrix: {label}", lambda v=variant: heatmap(Figure().add_subplot(), v))
    for label, value in bool_variants():
        p.call(
            heatmap,
            f"annotate {label}",
            lambda v=value: heatmap(Figure().add_subplot(), m, annotate=v),
        )
    for label, kwargs in (
        ("row_labels too few", {"row_labels": ["a"]}),
        ("col_labels int", {"col_labels": 4}),
        ("vmin > vmax", {"vmin": 1, "vmax": 0}),
        ("vmin nan", {"vmin": NAN}),
        ("title int", {"title": 3}),
    ):
        p.call(heatmap, label, lambda k=kwargs: heatmap(Figure().add_subplot(), m, **k))


@contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for a block, then restore them."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def global_state_kept() -> Iterator[None]:
    """Restore the global generators, the thread count and PYTHONHASHSEED after a block
    that calls :func:`attnbook.runtime.setup`."""
    states = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    threads = torch.get_num_threads()
    try:
        with environment(PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED")):
            yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        torch.set_num_threads(threads)


def seeded_with(seed: int, threads: int = 1):
    """``setup`` seeded ``random``, NumPy and torch with ``seed`` and pinned the threads (its
    return value is not checked)."""

    def check(_result):
        expect(torch.initial_seed() == seed, f"torch seed {torch.initial_seed()} != {seed}")
        expect(torch.get_num_threads() == threads, f"{torch.get_num_threads()} threads")
        expect(random.random() == random.Random(seed).random(), "random was not seeded")
        expect(np.random.random() == np.random.RandomState(seed).random(), "NumPy was not seeded")

    return check


def probe_runtime(p: Probe) -> None:
    from attnbook.runtime import SEED_OVERRIDE, setup, training_seed

    with global_state_kept(), environment(**{SEED_OVERRIDE: None}):
        for label, value in number_variants(7):
            if label in ("numpy int", "huge int"):
                continue  # numpy int is valid and changes global state; huge is tried below
            p.call(setup, f"seed {label}", lambda v=value: setup(v))
        p.call(setup, "seed 2**32", lambda: setup(2**32))
        p.call(setup, "threads 2**40", lambda: setup(0, threads=2**40))
        p.call(setup, "threads 0", lambda: setup(0, threads=0))
        p.call(setup, "threads str", lambda: setup(0, threads="1"))
        p.call(setup, "seed 3", lambda: setup(3), seeded_with(3))
        p.call(
            setup,
            "seed numpy int, 2 threads",
            lambda: setup(np.int64(5), threads=2),
            seeded_with(5, 2),
        )
        with environment(**{SEED_OVERRIDE: "11"}):
            p.call(setup, "ATTNBOOK_SEED=11 replaces seed 3", lambda: setup(3), seeded_with(11))
        with environment(**{SEED_OVERRIDE: "eleven"}):
            p.call(setup, "ATTNBOOK_SEED='eleven'", lambda: setup(3), names=(SEED_OVERRIDE,))

        for label, value in number_variants(5):
            check = {"numpy int": equals(5), "zero": equals(0)}.get(label)
            p.call(training_seed, f"default {label}", lambda v=value: training_seed(v), check)
        for label, value in (("5", 5), ("2**32 - 1", 2**32 - 1)):
            p.call(
                training_seed, f"default {label}", lambda v=value: training_seed(v), equals(value)
            )
        p.call(training_seed, "default 2**32", lambda: training_seed(2**32))
        for label, override, expected in (
            ("9", "9", 9),
            ("' 9 ' (spaces)", " 9 ", 9),
            ("'' (empty: the default)", "", 5),
            ("'   ' (blank: the default)", "   ", 5),
            ("0", "0", 0),
            ("4294967295", "4294967295", 2**32 - 1),
            ("'007'", "007", 7),
        ):
            with environment(**{SEED_OVERRIDE: override}):
                p.call(
                    training_seed,
                    f"ATTNBOOK_SEED={label}",
                    lambda: training_seed(5),
                    equals(expected),
                )
        for override in ("abc", "-1", "4294967296", "1e3", "9.0", "0x10", "+5", "1_000", "9 9"):
            with environment(**{SEED_OVERRIDE: override}):
                p.call(
                    training_seed,
                    f"ATTNBOOK_SEED={override!r}",
                    lambda: training_seed(5),
                    names=(SEED_OVERRIDE,),
                )
        with environment(**{SEED_OVERRIDE: "9"}):
            p.call(training_seed, "ATTNBOOK_SEED=9, default str", lambda: training_seed("5"))
            p.call(training_seed, "ATTNBOOK_SEED=9, default -1", lambda: training_seed(-1))


def raises_assertion(thunk):
    """Run ``thunk``; return the ``AssertionError`` it raises (a claim that does not hold), or
    the marker ``"returned"``."""

    def run():
        try:
            thunk()
        except AssertionError as error:
            if isinstance(error, WrongAnswerError):
                raise
            return error
        return "returned"

    return run


def failed_claim(name):
    def check(result):
        expect(isinstance(result, AssertionError), f"a claim outside its bounds {result}")
        expect(name in str(result) and "measured" in str(result), f"message {result}")

    return check


def held(result):
    expect(result is None, f"a claim inside its bounds returned {result!r}")


def probe_measured(p: Probe) -> None:
    from attnbook.measured import CLAIMS_LOG, claim

    with environment(**{CLAIMS_LOG: None}):
        for label, value, bounds in (
            ("0.5 in (0, 1)", 0.5, {"above": 0, "below": 1}),
            ("int 3 above 2", 3, {"above": 2}),
            ("-2 below -1", -2.0, {"below": -1}),
            ("list in (0, 1)", [0.2, 0.5, 0.8], {"above": 0, "below": 1}),
            ("tuple", (0.2, 0.8), {"above": 0.1}),
            ("one-element list", [0.99], {"above": 0.95}),
            ("numpy float64", np.float64(0.5), {"above": 0.1}),
            ("numpy float32", np.float32(0.5), {"below": 0.6}),
            ("numpy int", np.int64(4), {"above": 3}),
            ("float32 tensor", torch.full((2, 3), 0.5), {"above": 0.4, "below": 0.6}),
            ("float16 tensor", torch.full((4,), 0.5, dtype=torch.float16), {"above": 0.4}),
            ("bfloat16 tensor", torch.full((4,), 0.5, dtype=torch.bfloat16), {"below": 0.6}),
            ("int64 tensor", torch.tensor([3, 4]), {"above": 2, "below": 5}),
            ("0-d tensor", torch.tensor(0.97), {"above": 0.95}),
            ("tensor with grad", torch.ones(3, requires_grad=True), {"above": 0.5}),
            ("non-contiguous tensor", torch.rand(3, 4).mT, {"above": -0.1, "below": 1.1}),
            ("float bounds given as ints", 0.5, {"above": 0, "below": 1}),
            ("a large finite value", 1e300, {"above": 1e299}),
        ):
            p.call(claim, label, lambda v=value, b=bounds: claim("probe", v, **b), held)
        for label, value, bounds in (
            ("0.5 above 0.9", 0.5, {"above": 0.9}),
            ("1.0 below 1.0 (strict)", 1.0, {"below": 1.0}),
            ("0.0 above 0.0 (strict)", 0.0, {"above": 0.0}),
            ("2 outside (0, 1)", 2, {"above": 0, "below": 1}),
            ("list with one element outside", [0.2, 0.5, 1.2], {"above": 0, "below": 1}),
            (
                "tensor with one element outside",
                torch.tensor([[0.5, 0.5], [0.5, -0.5]]),
                {"above": 0},
            ),
            ("NaN", NAN, {"above": 0}),
            ("NaN in a list", [0.5, NAN], {"below": 1}),
            ("NaN in a tensor", torch.tensor([0.5, NAN]), {"above": 0, "below": 1}),
            ("inf with an upper bound", INF, {"below": 1e9}),
            ("-inf with a lower bound", -INF, {"above": -1e9}),
        ):
            p.call(
                claim,
                label,
                raises_assertion(lambda v=value, b=bounds: claim("probe claim", v, **b)),
                failed_claim("probe claim"),
            )
        with tempfile.TemporaryDirectory() as folder:
            log = os.path.join(folder, "claims.jsonl")
            with environment(**{CLAIMS_LOG: log}):
                p.call(claim, "sweep: held", lambda: claim("kept", [0.4, 0.6], above=0.3), held)
                p.call(
                    claim,
                    "sweep: not held is recorded, not raised",
                    lambda: claim("broken", torch.tensor([0.1, 2.0]), above=0.0, below=1.0),
                    held,
                )
                p.call(claim, "sweep: NaN recorded", lambda: claim("nan", NAN, below=1), held)
                p.call(claim, "sweep: bad bounds still refused", lambda: claim("x", 1.0))

            def recorded(_result, log=log):
                with open(log, encoding="utf-8") as f:
                    lines = [json.loads(line) for line in f]
                expect(len(lines) == 3, f"{len(lines)} records")
                a, b, c = lines
                expect(
                    a
                    == {
                        "name": "kept",
                        "min": 0.4,
                        "max": 0.6,
                        "above": 0.3,
                        "below": None,
                        "held": True,
                    },
                    f"record {a}",
                )
                expect(
                    b["name"] == "broken"
                    and b["held"] is False
                    and abs(b["min"] - 0.1) < 1e-7
                    and b["max"] == 2.0,
                    f"record {b}",
                )
                expect(c["name"] == "nan" and c["held"] is False, f"record {c}")

            p.call(claim, "sweep: the record file", lambda: None, recorded)
        for label, args, kwargs in (
            ("no bound", ("x", 0.5), {}),
            ("both bounds None", ("x", 0.5), {"above": None, "below": None}),
            ("above = below", ("x", 0.5), {"above": 1, "below": 1}),
            ("above > below", ("x", 0.5), {"above": 1, "below": 0}),
            ("above nan", ("x", 0.5), {"above": NAN}),
            ("below inf", ("x", 0.5), {"below": INF}),
            ("above -inf", ("x", 0.5), {"above": -INF}),
            ("above str", ("x", 0.5), {"above": "0"}),
            ("above bool", ("x", 0.5), {"above": True}),
            ("below tensor", ("x", 0.5), {"below": torch.tensor(1.0)}),
            ("below list", ("x", 0.5), {"below": [1.0]}),
            ("name empty", ("", 0.5), {"above": 0}),
            ("name blank", ("  ", 0.5), {"above": 0}),
            ("name int", (3, 0.5), {"above": 0}),
            ("name None", (None, 0.5), {"above": 0}),
            ("value empty list", ("x", []), {"above": 0}),
            ("value empty tuple", ("x", ()), {"above": 0}),
            ("value empty tensor", ("x", torch.zeros(0, 3)), {"above": 0}),
            ("value complex tensor", ("x", torch.ones(2, dtype=torch.complex64)), {"above": 0}),
            ("value bool tensor", ("x", torch.ones(2, dtype=torch.bool)), {"above": 0}),
            ("value bool", ("x", True), {"above": 0}),
            ("value str", ("x", "0.5"), {"above": 0}),
            ("value None", ("x", None), {"above": 0}),
            ("value numpy array", ("x", np.array([0.5])), {"above": 0}),
            ("value nested list", ("x", [[0.5]]), {"above": 0}),
            ("value list of tensors", ("x", [torch.tensor(0.5)]), {"above": 0}),
            ("value dict", ("x", {"a": 0.5}), {"above": 0}),
            ("value complex", ("x", 1j), {"above": 0}),
        ):
            p.call(claim, label, lambda a=args, k=kwargs: claim(*a, **k))


# --- the newer modules: the tiny GPT and its parts, induction, tiled backward, practice --------


def usable_ids(v, rank=2):
    """A variant a docstring accepts as integer ids: int32/int64, with values, non-empty."""
    return (
        isinstance(v, torch.Tensor)
        and v.dtype in (torch.int32, torch.int64)
        and v.dim() == rank
        and not v.is_meta
        and v.numel() > 0
    )


def rejected(result):
    """The check for an input that must raise: any returned value is a silent acceptance."""
    raise WrongAnswerError(f"accepted an invalid input and returned {type(result).__name__}")


def _rope_ref(x, positions, base=10000.0):
    """RoPE in float64 in the rotate-half layout, written from the formula."""
    d = x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * freqs  # (T, d/2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    cos, sin = angle.cos(), angle.sin()
    return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)


def _rms_ref(x, weight, eps):
    return nn.functional.rms_norm(x, x.shape[-1:], weight.double(), eps)


def gpt_reference(model, x, start=0):
    """TinyGPT's logits from embeddings ``x (B, T, d)`` at positions ``start ..``, in float64,
    built from SDPA, ``rms_norm`` and the RoPE formula (not from attnbook's modules)."""
    c = model.config
    x = x.double()
    b, t, d = x.shape
    positions = torch.arange(start, start + t)

    def heads(z, n):
        return z.view(b, t, n, c.head_dim).transpose(1, 2)

    def mat(linear):
        return linear.weight.detach().double().T

    for blk in model.blocks:
        z = _rms_ref(x, blk.norm1.weight.detach(), c.eps)
        q = _rope_ref(heads(z @ mat(blk.q), c.heads), positions, c.rope_base)
        k = _rope_ref(heads(z @ mat(blk.k), c.kv_heads), positions, c.rope_base)
        v = heads(z @ mat(blk.v), c.kv_heads)
        out = sdpa(q, k, v, is_causal=True, enable_gqa=True)
        x = x + out.transpose(1, 2).reshape(b, t, d) @ mat(blk.o)
        z = _rms_ref(x, blk.norm2.weight.detach(), c.eps)
        f = blk.ffn
        x = x + (nn.functional.silu(z @ mat(f.gate)) * (z @ mat(f.up))) @ mat(f.down)
    return _rms_ref(x, model.norm.weight.detach(), c.eps) @ model.embed.weight.detach().double().T


def _tiny_gpt(seed=0, **fields):
    from attnbook.gpt import GPTConfig, TinyGPT

    config = GPTConfig(**{**GPT_FIELDS, **fields})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyGPT(config).eval()


GPT_FIELDS = {"vocab": 11, "width": 16, "layers": 2, "heads": 4, "kv_heads": 2, "context": 8}


def probe_norm(p: Probe) -> None:
    from attnbook.norm import RMSNorm

    g = torch.Generator().manual_seed(10)
    x = torch.randn(2, 3, 8, generator=g)
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(8, generator=g) + 0.5)
    real = nn.RMSNorm(8, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        real.weight.copy_(norm.weight.double())

    def oracle(v):
        return real(v.double())

    for label, variant in [("valid", x), *tensor_variants(x)]:
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.is_floating_point()
            and variant.dim() >= 1
            and variant.shape[-1] == 8
        ):
            check = check_tensor_result(lambda v=variant: oracle(v), variant.dtype)
        p.call(RMSNorm.forward, f"x: {label}", lambda v=variant: norm(v), check, callbacks=False)
    for label, value in (("1e20 (squares overflow)", 1e20), ("1e-30 (tiny)", 1e-30)):
        v = torch.full((2, 8), value)
        p.call(
            RMSNorm.forward,
            f"x all {label}",
            lambda v=v: norm(v),
            check_tensor_result(lambda v=v: _rms_scaled(v, norm), torch.float32),
            callbacks=False,
        )
    p.call(
        RMSNorm.forward,
        "float16 x of 300 (squares overflow float16)",
        lambda: norm(torch.full((2, 8), 300.0, dtype=torch.float16)),
        check_tensor_result(lambda: oracle(torch.full((2, 8), 300.0)), torch.float16),
        callbacks=False,
    )
    for label, value in number_variants(8):
        check = None
        if label == "numpy int":
            check = lambda r: expect(r.d == 8 and r.weight.shape == (8,), "wrong width")  # noqa: E731
        p.call(RMSNorm, f"d {label}", lambda v=value: RMSNorm(v), check)
    for label, value in (
        ("eps 0", 0.0),
        ("eps -1", -1.0),
        ("eps nan", NAN),
        ("eps inf", INF),
        ("eps str", "1e-6"),
        ("eps bool", True),
        ("eps int 1", 1),
    ):
        check = (lambda r: expect(r.eps == 1.0, "eps")) if label == "eps int 1" else None
        p.call(RMSNorm, label, lambda v=value: RMSNorm(8, eps=v), check)


def _rms_scaled(v, norm):
    """x / sqrt(mean(x^2) + eps) * w computed with a scaled mean square (no overflow)."""
    v = v.double()
    s = v.abs().amax(-1, keepdim=True)
    u = v / s
    return u / torch.sqrt(u.pow(2).mean(-1, keepdim=True) + norm.eps / s**2) * norm.weight.double()


def probe_kv_cache(p: Probe) -> None:
    from attnbook.kv_cache import KVCache

    sizes = {"layers": 2, "batch": 1, "kv_heads": 2, "head_dim": 4, "max_positions": 6}

    def built(r, **kw):
        s = {**sizes, **kw}
        shape = (s["layers"], s["batch"], s["kv_heads"], s["max_positions"], s["head_dim"])
        expect(tuple(r.keys.shape) == shape and tuple(r.values.shape) == shape, "buffer shape")
        expect(r.length == 0, f"length {r.length}")
        expect(r.nbytes == 2 * math.prod(shape) * r.keys.element_size(), f"nbytes {r.nbytes}")

    p.call(KVCache, "valid", lambda: KVCache(**sizes), built)
    for name in sizes:
        for label, value in number_variants(sizes[name]):
            check = (
                (lambda r, n=name: built(r, **{n: int(sizes[n])})) if label == "numpy int" else None
            )
            p.call(
                KVCache,
                f"{name} {label}",
                lambda n=name, v=value: KVCache(**{**sizes, n: v}),
                check,
            )
    for label, kwargs in (
        ("dtype float16", {"dtype": torch.float16}),
        ("dtype int64", {"dtype": torch.int64}),
        ("dtype str", {"dtype": "float32"}),
        ("dtype bool", {"dtype": torch.bool}),
        ("device 'cpu'", {"device": "cpu"}),
        ("device 'gpu'", {"device": "gpu"}),
        ("device 'cuda:99'", {"device": "cuda:99"}),
        ("device []", {"device": []}),
        ("device 'meta'", {"device": "meta"}),
    ):
        ok = label in ("dtype float16", "device 'cpu'", "device 'meta'")
        p.call(KVCache, label, lambda k=kwargs: KVCache(**sizes, **k), built if ok else None)

    g = torch.Generator().manual_seed(11)
    k1, v1 = torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g)
    k2, v2 = torch.randn(1, 2, 2, 4, generator=g), torch.randn(1, 2, 2, 4, generator=g)

    def two_appends():
        cache = KVCache(**sizes)
        cache.append(0, k1, v1)
        keys, values = cache.append(0, k2, v2)
        return keys.clone(), values.clone(), cache.length, cache._filled[0]

    def concatenated(r):
        expect(torch.equal(r[0], torch.cat((k1, k2), 2)), "keys are not old then new")
        expect(torch.equal(r[1], torch.cat((v1, v2), 2)), "values are not old then new")
        expect(r[2] == 0 and r[3] == 5, f"length {r[2]}, layer 0 holds {r[3]}")

    p.call(KVCache.append, "two appends", two_appends, concatenated)

    def append_to_fresh(layer=0, k=k1, v=v1, **kw):
        return lambda: KVCache(**{**sizes, **kw}).append(layer, k, v)

    def first_append(k, v):
        def same(a, b):
            return a.shape == b.shape and bool(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))

        return lambda r: expect(same(r[0], k) and same(r[1], v), "stored wrong")

    p.call(KVCache.append, "fills exactly", append_to_fresh(max_positions=3), first_append(k1, v1))
    p.call(KVCache.append, "overflows max_positions", append_to_fresh(max_positions=2))
    p.call(
        KVCache.append,
        "zero new positions",
        append_to_fresh(k=k1[:, :, :0], v=v1[:, :, :0]),
        first_append(k1[:, :, :0], v1[:, :, :0]),
    )
    for label, value in (*number_variants(1), ("layer = layers", 2)):
        check = first_append(k1, v1) if label in ("numpy int", "zero") else None
        p.call(KVCache.append, f"layer {label}", append_to_fresh(layer=value), check)
    for name in ("k", "v"):
        for label, variant in tensor_variants(k1 if name == "k" else v1):
            args = {"k": k1, "v": v1, name: variant}
            check = None
            if label == "non-contiguous" or label in ("nan", "+inf", "-inf", "huge values"):
                check = first_append(args["k"], args["v"])
            p.call(KVCache.append, f"{name}: {label}", append_to_fresh(**args), check)
    p.call(
        KVCache.append,
        "k and v differ in length",
        append_to_fresh(v=torch.randn(1, 2, 2, 4, generator=g)),
    )
    p.call(
        KVCache.append,
        "float16 cache, float32 k and v",
        append_to_fresh(dtype=torch.float16),
    )


def probe_gpt(p: Probe) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from attnbook.gpt import GPTConfig, TinyGPT, forward_flops, param_count
    from attnbook.kv_cache import KVCache

    for name, value in GPT_FIELDS.items():
        for label, variant in number_variants(value):
            check = None
            if label in ("numpy int", "huge int"):
                check = lambda r, n=name, v=variant: expect(getattr(r, n) == v, n)  # noqa: E731
            p.call(
                GPTConfig,
                f"{name} {label}",
                lambda n=name, v=variant: GPTConfig(**{**GPT_FIELDS, n: v}),
                check,
            )
    for label, fields in (
        ("hidden -1", {"hidden": -1}),
        ("hidden 2.5", {"hidden": 2.5}),
        ("hidden str", {"hidden": "48"}),
        ("rope_base 0", {"rope_base": 0.0}),
        ("rope_base nan", {"rope_base": NAN}),
        ("rope_base str", {"rope_base": "1e4"}),
        ("eps 0", {"eps": 0.0}),
        ("eps inf", {"eps": INF}),
        ("width 12 (odd head width 3)", {"width": 12}),
        ("width 18 (not a multiple of heads)", {"width": 18}),
        ("kv_heads 3", {"kv_heads": 3}),
        ("kv_heads 8 > heads", {"kv_heads": 8}),
        ("heads 16 (head width 1)", {"heads": 16, "kv_heads": 16}),
    ):
        p.call(GPTConfig, label, lambda f=fields: GPTConfig(**{**GPT_FIELDS, **f}))
    p.call(
        GPTConfig,
        "hidden 0 means swiglu_hidden",
        lambda: GPTConfig(**GPT_FIELDS).ffn_width,
        equals(costs.swiglu_hidden(16)),
    )

    config = GPTConfig(**GPT_FIELDS)
    model = _tiny_gpt()
    p.call(TinyGPT, "config", lambda: TinyGPT(config), lambda r: expect(r.config is config, "cfg"))
    p.call(TinyGPT, "config is a dict", lambda: TinyGPT(dict(GPT_FIELDS)))
    p.call(TinyGPT, "config is None", lambda: TinyGPT(None))
    p.call(
        TinyGPT,
        "vocab 10**12 (too large to allocate)",
        lambda: TinyGPT(GPTConfig(**{**GPT_FIELDS, "vocab": 10**12})),
    )

    g = torch.Generator().manual_seed(12)
    ids = torch.randint(11, (2, 5), generator=g)

    def logits_of(i, start=0):
        return lambda: gpt_reference(model, model.embed.weight.detach()[i.long()], start)

    def fwd(v, **kw):
        return lambda: model.forward(v, **kw)

    p.call(
        TinyGPT.forward,
        "valid",
        fwd(ids),
        check_tensor_result(logits_of(ids), torch.float32),
        callbacks=False,
    )
    for label, variant in tensor_variants(ids):
        check = None
        if usable_ids(variant):
            check = check_tensor_result(logits_of(variant), torch.float32)
        p.call(TinyGPT.forward, f"ids: {label}", fwd(variant), check, callbacks=False)
    for label, value in (
        ("ids uint8", ids.to(torch.uint8)),
        ("ids = V", torch.full((1, 3), 11)),
        ("ids negative", torch.full((1, 3), -1)),
        ("ids bool", ids > 4),
        ("ids float", ids.float()),
    ):
        check = None
        if label == "ids uint8":
            check = check_tensor_result(logits_of(value), torch.float32)
        p.call(TinyGPT.forward, label, fwd(value), check, callbacks=False)
    longer = torch.randint(11, (1, 12), generator=g)  # beyond context=8: RoPE has no limit
    p.call(
        TinyGPT.forward,
        "12 tokens, beyond context 8",
        fwd(longer),
        check_tensor_result(logits_of(longer), torch.float32),
        callbacks=False,
    )

    def weights_check(r):
        expect(isinstance(r, tuple) and len(r) == 2, "not (logits, weights)")
        logits, weights = r
        close(logits, logits_of(ids)(), torch.float32)
        expect(len(weights) == 2 and weights[0].shape == (2, 4, 5, 5), "weights shape")
        expect(bool(torch.allclose(weights[0].sum(-1), torch.ones(2, 4, 5))), "rows sum")
        expect(bool((weights[0].triu(1) == 0).all()), "weights on future keys")

    p.call(
        TinyGPT.forward,
        "return_weights",
        fwd(ids, return_weights=True),
        weights_check,
        callbacks=False,
    )
    for label, value in bool_variants():
        check = weights_check if label == "numpy bool" else rejected
        p.call(
            TinyGPT.forward,
            f"return_weights {label}",
            fwd(ids, return_weights=value),
            check,
            callbacks=False,
        )

    def cached_run(prefix, rest, cache=None):
        def run():
            c = model.new_cache(batch=prefix.shape[0]) if cache is None else cache
            model(prefix, cache=c)
            return model.forward(rest, cache=c)

        return run

    whole = torch.randint(11, (2, 7), generator=g)
    p.call(
        TinyGPT.forward,
        "cache: prefix of 4, then 3",
        cached_run(whole[:, :4], whole[:, 4:]),
        check_tensor_result(lambda: logits_of(whole)()[:, 4:], torch.float32),
        callbacks=False,
    )
    p.call(
        TinyGPT.forward,
        "cache: past max_positions",
        cached_run(whole[:, :4], whole[:, :6]),
        callbacks=False,
    )
    for label, cache in (
        ("cache for batch 1", KVCache(layers=2, batch=1, kv_heads=2, head_dim=4, max_positions=8)),
        ("cache of 3 layers", KVCache(layers=3, batch=2, kv_heads=2, head_dim=4, max_positions=8)),
        (
            "cache float64",
            KVCache(
                layers=2, batch=2, kv_heads=2, head_dim=4, max_positions=8, dtype=torch.float64
            ),
        ),
        ("cache is a dict", {}),
        ("cache is a list", []),
    ):
        p.call(TinyGPT.forward, label, fwd(ids, cache=cache), callbacks=False)

    def uneven_cache():
        cache = model.new_cache(batch=2)
        cache.append(0, torch.zeros(2, 2, 3, 4), torch.zeros(2, 2, 3, 4))  # layer 0 only
        return model.forward(ids, cache=cache)

    p.call(
        TinyGPT.forward, "cache whose layers hold 3 and 0", uneven_cache, rejected, callbacks=False
    )
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        m = _tiny_gpt().to(dtype)
        p.call(
            TinyGPT.forward,
            f"model in {dtype}",
            lambda m=m: m.forward(ids),
            check_tensor_result(lambda m=m: gpt_reference(m, m.embed.weight.detach()[ids]), dtype),
            callbacks=False,
        )

    x = torch.randn(2, 5, 16, generator=g)
    for label, variant in [("valid", x), *tensor_variants(x)]:
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.dtype == torch.float32
            and variant.shape == x.shape
            and not variant.is_meta
        ):
            check = check_tensor_result(lambda v=variant: gpt_reference(model, v), torch.float32)
        p.call(
            TinyGPT.forward_embeddings,
            f"x: {label}",
            lambda v=variant: model.forward_embeddings(v),
            check,
            callbacks=False,
        )

    def new_cache_ok(batch, size):
        def check(r):
            expect(isinstance(r, KVCache) and r.length == 0, "not an empty cache")
            expect(tuple(r.keys.shape) == (2, batch, 2, size, 4), f"shape {tuple(r.keys.shape)}")

        return check

    p.call(TinyGPT.new_cache, "defaults", lambda: model.new_cache(), new_cache_ok(1, 8))
    for label, value in number_variants(3):
        check = new_cache_ok(3, 8) if label == "numpy int" else None
        p.call(TinyGPT.new_cache, f"batch {label}", lambda v=value: model.new_cache(v), check)
        check = new_cache_ok(1, 3) if label == "numpy int" else None
        check = new_cache_ok(1, 8) if label == "none" else check  # None: config.context
        p.call(
            TinyGPT.new_cache,
            f"max_positions {label}",
            lambda v=value: model.new_cache(1, v),
            check,
        )

    def numel(c):
        with torch.random.fork_rng(devices=[]):
            return sum(q.numel() for q in TinyGPT(c).parameters())

    for fields in ({}, {"hidden": 24}, {"kv_heads": 4}, {"kv_heads": 1, "layers": 3}):
        c = GPTConfig(**{**GPT_FIELDS, **fields})
        p.call(param_count, f"config {fields}", lambda c=c: param_count(c), equals(numel(c)))
    p.call(param_count, "config is a dict", lambda: param_count(dict(GPT_FIELDS)))
    p.call(param_count, "config is a model", lambda: param_count(model))

    def counted(tokens, cached):
        prefix = torch.zeros(1, cached, dtype=torch.long)
        new = torch.zeros(1, tokens, dtype=torch.long)
        cache = model.new_cache(1, tokens + cached)
        if cached:
            model(prefix, cache=cache)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(new, cache=cache)
        return counter.get_total_flops()

    for tokens, cached in ((5, 0), (1, 0), (1, 6), (3, 4)):
        p.call(
            forward_flops,
            f"tokens={tokens} cached={cached}",
            lambda t=tokens, c=cached: forward_flops(config, t, cached=c),
            equals(counted(tokens, cached)),
        )

    def formula(n, cached):
        """Written out for this config: d 16, Hkv dk 8, SwiGLU 42 wide, V 11, 2 layers."""
        per_layer = 2 * n * 16 * (2 * 16 + 2 * 8) + 4 * n * (n + cached) * 16 + 3 * 2 * n * 16 * 42
        return 2 * per_layer + 2 * n * 16 * 11

    p.call(forward_flops, "the formula, checked", lambda: counted(3, 4), equals(formula(3, 4)))
    for label, value in number_variants(5):
        check = {"numpy int": equals(counted(5, 0)), "huge int": equals(formula(10**30, 0))}
        p.call(
            forward_flops,
            f"tokens {label}",
            lambda v=value: forward_flops(config, v),
            check.get(label),
        )
        check = {
            "numpy int": equals(counted(1, 5)),
            "zero": equals(counted(1, 0)),
            "huge int": equals(formula(1, 10**30)),
        }.get(label)
        p.call(
            forward_flops,
            f"cached {label}",
            lambda v=value: forward_flops(config, 1, cached=v),
            check,
        )
    p.call(forward_flops, "config is a dict", lambda: forward_flops(dict(GPT_FIELDS), 4))


def probe_sampling(p: Probe) -> None:
    from attnbook.sampling import generate

    model = _tiny_gpt(seed=1)
    g = torch.Generator().manual_seed(13)
    prompt = torch.randint(11, (2, 3), generator=g)

    def reference(prompt_, steps, temperature=1.0, seed=5):
        """Sampling written out: the full forward pass at every step, then multinomial."""
        gen = torch.Generator().manual_seed(seed)
        ids, history = prompt_.long(), []
        with torch.no_grad():
            for _ in range(steps):
                logits = model(ids)[:, -1]
                history.append(logits)
                probs = torch.softmax(logits.double() / temperature, -1).float()
                ids = torch.cat((ids, torch.multinomial(probs, 1, generator=gen)), 1)
        return ids, torch.stack(history, 1)

    def same_as(prompt_, steps, temperature=1.0):
        def check(r):
            ids, logits = reference(prompt_, steps, temperature)
            expect(isinstance(r, tuple) and len(r) == 2, "not (ids, logits)")
            expect(torch.equal(r[0].long(), ids), f"samples {r[0].tolist()} != {ids.tolist()}")
            close(r[1], logits, torch.float32)

        return check

    def gen(prompt_=prompt, steps=4, **kw):
        return lambda: generate(
            model, prompt_, steps, generator=torch.Generator().manual_seed(5), **kw
        )

    for use_cache in (True, False):
        p.call(
            generate,
            f"valid use_cache={use_cache}",
            gen(use_cache=use_cache),
            same_as(prompt, 4),
        )
    p.call(generate, "fills the context exactly", gen(steps=5), same_as(prompt, 5))
    for label, value in number_variants(4):
        check = same_as(prompt, 4) if label == "numpy int" else None
        p.call(generate, f"steps {label}", gen(steps=value), check)
    p.call(generate, "steps past the context", gen(steps=6))

    def greedy(r):
        ids = prompt.clone()
        with torch.no_grad():
            for _ in range(4):
                ids = torch.cat((ids, model(ids)[:, -1].argmax(-1, keepdim=True)), 1)
        expect(torch.equal(r[0], ids), f"temperature -> 0 is not greedy: {r[0].tolist()}")

    for label, value in (
        ("temperature 0", 0.0),
        ("temperature -1", -1.0),
        ("temperature nan", NAN),
        ("temperature inf", INF),
        ("temperature str", "0.5"),
        ("temperature bool", True),
        ("temperature 1e-30", 1e-30),
        ("temperature 1e-300", 1e-300),
        ("temperature 5e-324", 5e-324),
        ("temperature int 2", 2),
        ("temperature numpy 0.5", np.float64(0.5)),
        ("temperature 1e300", 1e300),
    ):
        check = None
        if label in ("temperature 1e-30", "temperature 1e-300", "temperature 5e-324"):
            check = greedy
        elif label in ("temperature int 2", "temperature numpy 0.5", "temperature 1e300"):
            check = same_as(prompt, 4, float(value))
        p.call(generate, label, gen(temperature=value), check)
    for label, variant in tensor_variants(prompt):
        check = same_as(variant, 4) if usable_ids(variant) and variant.shape[1] <= 4 else None
        p.call(generate, f"prompt: {label}", gen(prompt_=variant), check)
    for label, value in (
        ("prompt = V", torch.full((1, 2), 11)),
        ("prompt negative", torch.full((1, 2), -1)),
        ("prompt bool", prompt > 3),
        ("prompt of 8 = context", torch.zeros(1, 8, dtype=torch.long)),
    ):
        p.call(generate, label, gen(prompt_=value))
    for label, value in bool_variants():
        check = same_as(prompt, 4) if label == "numpy bool" else rejected
        p.call(generate, f"use_cache {label}", gen(use_cache=value), check)
    for label, value in (("generator int", 5), ("generator str", "5")):
        p.call(generate, label, lambda v=value: generate(model, prompt, 2, generator=v))
    p.call(generate, "model is a Linear", lambda: generate(nn.Linear(2, 2), prompt, 2))
    broken = _tiny_gpt(seed=1)
    with torch.no_grad():
        broken.embed.weight[0, 0] = NAN
    p.call(
        generate,
        "model with a NaN weight",
        lambda: generate(broken, torch.zeros(1, 2, dtype=torch.long), 2),
    )


def probe_corpus(p: Probe) -> None:
    from collections import Counter as Count

    from attnbook.corpus import CharVocab, book_text, count_cross_entropy, random_windows

    p.call(
        book_text,
        "no arguments",
        book_text,
        lambda r: expect(isinstance(r, str) and len(r) > 10**4, "text"),
    )
    text = "hello, world\nhi"
    vocab = CharVocab(text)
    p.call(
        CharVocab,
        "valid",
        lambda: CharVocab(text),
        lambda r: expect(r.chars == sorted(set(text)) and len(r) == len(set(text)), "chars"),
    )
    for label, value in (
        ("text empty", ""),
        ("text bytes", b"abc"),
        ("text list", ["a", "b"]),
        ("text None", None),
        ("text int", 3),
        ("text one char", "a"),
        ("text non-ASCII", "naïve ∑ 🙂"),
    ):
        ok = label in ("text one char", "text non-ASCII")
        check = (lambda r, t=value: expect(r.chars == sorted(set(t)), "chars")) if ok else None
        p.call(CharVocab, label, lambda v=value: CharVocab(v), check)
    for label, value in (
        ("valid", "hello"),
        ("empty", ""),
        ("unknown char", "hex"),
        ("bytes", b"he"),
        ("None", None),
        ("list of chars", ["h", "e"]),
    ):
        check = None
        if isinstance(value, str) and set(value) <= set(text):
            expected = torch.tensor([sorted(set(text)).index(c) for c in value], dtype=torch.long)

            def check(r, e=expected):
                return expect(torch.equal(r, e) and r.dtype == torch.long, f"{r}")

        p.call(CharVocab.encode, f"text {label}", lambda v=value: vocab.encode(v), check)
    ids = vocab.encode(text)
    for label, variant in [("valid", ids), *tensor_variants(ids)]:
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.dim() == 1
            and variant.dtype in (torch.int64, torch.int32)
            and not variant.is_meta
        ):
            expected = "".join(sorted(set(text))[i] for i in variant.tolist())
            check = equals(expected)
        p.call(CharVocab.decode, f"ids: {label}", lambda v=variant: vocab.decode(v), check)
    for label, value in (("ids = V", torch.tensor([len(vocab)])), ("ids -1", torch.tensor([-1]))):
        p.call(CharVocab.decode, label, lambda v=value: vocab.decode(v))

    stream = torch.arange(20) % 7

    def windows_ok(batch, context):
        def check(r):
            inputs, labels = r
            expect(inputs.shape == labels.shape == (batch, context), f"shape {inputs.shape}")
            for row_in, row_lab in zip(inputs.tolist(), labels.tolist(), strict=True):
                whole = row_in + row_lab[-1:]
                starts = [
                    s for s in range(20 - context) if stream[s : s + context + 1].tolist() == whole
                ]
                expect(bool(starts) and row_lab == whole[1:], "not a window and its shift")

        return check

    def windows(ids_=stream, batch=3, context=4, generator=None):
        gen = torch.Generator().manual_seed(0) if generator is None else generator
        return lambda: random_windows(ids_, batch, context, gen)

    p.call(random_windows, "valid", windows(), windows_ok(3, 4))
    p.call(random_windows, "context = N - 1", windows(context=19), windows_ok(3, 19))
    p.call(random_windows, "context = N", windows(context=20))
    for label, value in number_variants(3):
        check = windows_ok(3, 4) if label == "numpy int" else None
        p.call(random_windows, f"batch {label}", windows(batch=value), check)
        check = windows_ok(3, 3) if label == "numpy int" else None
        p.call(random_windows, f"context {label}", windows(batch=3, context=value), check)
    for label, variant in tensor_variants(stream):
        check = None
        if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
            check = windows_ok(3, 4)
        p.call(random_windows, f"ids: {label}", windows(ids_=variant), check)
    p.call(random_windows, "batch 10**12", windows(batch=10**12))
    for label, value in (("generator int", 0), ("generator None", "none")):
        p.call(random_windows, label, lambda v=value: random_windows(stream, 2, 3, v))

    train = torch.tensor([0, 1, 2, 0, 1, 2, 2, 1, 0, 0])
    test = torch.tensor([0, 1, 2, 2, 0, 1])

    def by_hand(tr, te, v, order):
        """Add-one smoothed n-gram cross-entropy by counting tuples in Python."""
        tr, te = tr.tolist(), te.tolist()
        joint = Count(tuple(tr[i : i + order + 1]) for i in range(len(tr) - order))
        ctx = Count(tuple(tr[i : i + order]) for i in range(len(tr) - order))
        nll = [
            -math.log(
                (joint[tuple(te[i : i + order + 1])] + 1) / (ctx[tuple(te[i : i + order])] + v)
            )
            for i in range(len(te) - order)
        ]
        return sum(nll) / len(nll)

    def near(expected):
        return lambda r: expect(
            isinstance(r, float) and abs(r - expected) < 1e-9, f"{r!r} != {expected!r}"
        )

    for order in (0, 1, 2, 3):
        p.call(
            count_cross_entropy,
            f"order {order}",
            lambda o=order: count_cross_entropy(train, test, 3, o),
            near(by_hand(train, test, 3, order)),
        )
    p.call(
        count_cross_entropy,
        "vocab larger than used",
        lambda: count_cross_entropy(train, test, 50, 1),
        near(by_hand(train, test, 50, 1)),
    )
    for label, value in number_variants(3):
        check = near(by_hand(train, test, 3, 1)) if label == "numpy int" else None
        p.call(
            count_cross_entropy,
            f"vocab {label}",
            lambda v=value: count_cross_entropy(train, test, v, 1),
            check,
        )
        check = {
            "numpy int": near(by_hand(train, test, 3, 3)),
            "zero": near(by_hand(train, test, 3, 0)),
        }.get(label)
        p.call(
            count_cross_entropy,
            f"order {label}",
            lambda v=value: count_cross_entropy(train, test, 3, v),
            check,
        )
    for name in ("train", "test"):
        for label, variant in tensor_variants(train if name == "train" else test):
            args = {"train": train, "test": test, name: variant}
            check = None
            if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
                check = near(by_hand(args["train"], args["test"], 3, 1))
            p.call(
                count_cross_entropy,
                f"{name}: {label}",
                lambda a=args: count_cross_entropy(a["train"], a["test"], 3, 1),
                check,
            )
    for label, args in (
        ("test id = vocab", (train, torch.tensor([0, 3]), 3, 1)),
        ("test shorter than order + 1", (train, test[:2], 3, 2)),
        ("order 60", (train, test, 3, 60)),
    ):
        p.call(count_cross_entropy, label, lambda a=args: count_cross_entropy(*a))


def interpolated_by_hand(tr, te, vocab, order, discount=0.75):
    """Interpolated absolute discounting written out with Python counts, recursively over the
    context length; the unigram is add-one smoothed."""
    tr, te = tr.tolist(), te.tolist()

    def prob(ctx, c):
        if not ctx:
            return (tr.count(c) + 1) / (len(tr) + vocab)
        lower = prob(ctx[1:], c)
        n = len(ctx)
        after = [tr[i + n] for i in range(len(tr) - n) if tr[i : i + n] == ctx]
        if not after:
            return lower
        seen = len(after)
        return max(after.count(c) - discount, 0) / seen + discount * len(set(after)) / seen * lower

    nll = [-math.log(prob(te[i - order : i], te[i])) for i in range(order, len(te))]
    return sum(nll) / len(nll)


def probe_interpolated(p: Probe) -> None:
    from attnbook.corpus import count_cross_entropy, interpolated_cross_entropy

    train = torch.tensor([0, 1, 2, 0, 1, 2, 2, 1, 0, 0])
    test = torch.tensor([0, 1, 2, 2, 0, 1])

    def near(expected):
        return lambda r: expect(
            isinstance(r, float) and abs(r - expected) < 1e-9, f"{r!r} != {expected!r}"
        )

    def below(bound):
        return lambda r: expect(isinstance(r, float) and r < bound, f"{r!r} is not below {bound!r}")

    p.call(
        interpolated_cross_entropy,
        "order 0 = add-one unigram",
        lambda: interpolated_cross_entropy(train, test, 3, 0),
        equals(count_cross_entropy(train, test, 3, 0)),
    )
    for order in range(0, 5):
        for discount in (0.75, 0.1, 0.999):
            p.call(
                interpolated_cross_entropy,
                f"order {order}, discount {discount}",
                lambda o=order, d=discount: interpolated_cross_entropy(train, test, 3, o, d),
                near(interpolated_by_hand(train, test, 3, order, discount)),
            )
    g = torch.Generator().manual_seed(8)
    text_train = torch.randint(6, (120,), generator=g)
    text_test = torch.randint(6, (40,), generator=g)
    for order in (1, 3, 8):
        p.call(
            interpolated_cross_entropy,
            f"random stream, V = 9 (3 unused), order {order}",
            lambda o=order: interpolated_cross_entropy(text_train, text_test, 9, o),
            near(interpolated_by_hand(text_train, text_test, 9, order)),
        )
    repetitive = torch.arange(60) % 5
    for order in (1, 2, 3, 6):
        p.call(
            interpolated_cross_entropy,
            f"repetitive stream, order {order}: below add-one",
            lambda o=order: interpolated_cross_entropy(repetitive, repetitive[:25], 5, o),
            below(count_cross_entropy(repetitive, repetitive[:25], 5, order)),
        )
        p.call(
            interpolated_cross_entropy,
            f"repetitive stream, order {order}: below the order below",
            lambda o=order: interpolated_cross_entropy(repetitive, repetitive[:25], 5, o),
            below(interpolated_cross_entropy(repetitive, repetitive[:25], 5, order - 1)),
        )
    p.call(
        interpolated_cross_entropy,
        "vocab 1 (one character: cost 0)",
        lambda: interpolated_cross_entropy(
            torch.zeros(6, dtype=torch.long), torch.zeros(4, dtype=torch.long), 1, 2
        ),
        near(
            interpolated_by_hand(
                torch.zeros(6, dtype=torch.long), torch.zeros(4, dtype=torch.long), 1, 2
            )
        ),
    )
    p.call(
        interpolated_cross_entropy,
        "test exactly order + 1 long",
        lambda: interpolated_cross_entropy(train, test[:3], 3, 2),
        near(interpolated_by_hand(train, test[:3], 3, 2)),
    )
    for label, value in number_variants(3):
        check = near(interpolated_by_hand(train, test, 3, 1)) if label == "numpy int" else None
        p.call(
            interpolated_cross_entropy,
            f"vocab {label}",
            lambda v=value: interpolated_cross_entropy(train, test, v, 1),
            check,
        )
        check = {
            "numpy int": near(interpolated_by_hand(train, test, 3, 3)),
            "zero": equals(count_cross_entropy(train, test, 3, 0)),
        }.get(label)
        p.call(
            interpolated_cross_entropy,
            f"order {label}",
            lambda v=value: interpolated_cross_entropy(train, test, 3, v),
            check,
        )
    for label, value in (
        ("discount 0", 0),
        ("discount 1", 1),
        ("discount 1.5", 1.5),
        ("discount -0.5", -0.5),
        ("discount nan", NAN),
        ("discount inf", INF),
        ("discount str", "0.75"),
        ("discount None", None),
        ("discount bool", True),
        ("discount tensor", torch.tensor([0.75, 0.5])),
        ("discount numpy float", np.float64(0.5)),
        ("discount numpy float32", np.float32(0.5)),
        ("discount int-like 1.0", 1.0),
    ):
        check = None
        if label.startswith("discount numpy"):
            check = near(interpolated_by_hand(train, test, 3, 2, float(value)))
        p.call(
            interpolated_cross_entropy,
            label,
            lambda v=value: interpolated_cross_entropy(train, test, 3, 2, v),
            check,
        )
    for name in ("train", "test"):
        for label, variant in tensor_variants(train if name == "train" else test):
            args = {"train": train, "test": test, name: variant}
            check = None
            if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
                check = near(interpolated_by_hand(args["train"], args["test"], 3, 1))
            p.call(
                interpolated_cross_entropy,
                f"{name}: {label}",
                lambda a=args: interpolated_cross_entropy(a["train"], a["test"], 3, 1),
                check,
            )
    for label, args in (
        ("test id = vocab", (train, torch.tensor([0, 3]), 3, 1)),
        ("train id -1", (torch.tensor([0, -1, 2]), test, 3, 1)),
        ("test shorter than order + 1", (train, test[:2], 3, 2)),
        ("train shorter than order + 1", (train[:3], test, 3, 3)),
        ("order 9", (train, test, 3, 9)),
        ("order 60", (train, test, 3, 60)),
        ("vocab 2**31, order 2 (V ** 3 beyond int64)", (train, test, 2**31, 2)),
    ):
        p.call(interpolated_cross_entropy, label, lambda a=args: interpolated_cross_entropy(*a))


def probe_lm_training(p: Probe) -> None:
    import torch.nn.functional as F

    from attnbook.corpus import random_windows
    from attnbook.gpt import GPTConfig, TinyGPT
    from attnbook.lm_training import TrainConfig, position_losses, train_lm

    defaults = TrainConfig()
    for name in ("steps", "batch", "warmup", "seed"):
        for label, value in number_variants(getattr(defaults, name) or 3):
            check = None
            if label in ("numpy int", "huge int", "zero"):
                check = lambda r, n=name, v=value: expect(getattr(r, n) == v, n)  # noqa: E731
            p.call(
                TrainConfig, f"{name} {label}", lambda n=name, v=value: TrainConfig(**{n: v}), check
            )
    p.call(TrainConfig, "seed 2**64", lambda: TrainConfig(seed=2**64))
    p.call(
        TrainConfig,
        "seed 2**63 - 1",
        lambda: TrainConfig(seed=2**63 - 1),
        lambda r: expect(r.seed == 2**63 - 1, "seed"),
    )
    for label, value in (
        ("lr 0", 0.0),
        ("lr nan", NAN),
        ("lr str", "1e-3"),
        ("clip -1", -1.0),
        ("clip inf", INF),
        ("weight_decay -0.1", -0.1),
        ("weight_decay nan", NAN),
        ("weight_decay bool", True),
    ):
        field = label.split()[0]
        p.call(TrainConfig, label, lambda f=field, v=value: TrainConfig(**{f: v}))

    recipe = TrainConfig(steps=10, warmup=4, lr=1.0)

    def schedule(step):
        if step < 4:
            return (step + 1) / 4
        progress = min(1.0, (step - 4) / 6)
        return 0.1 + 0.9 * (1 + math.cos(math.pi * progress)) / 2

    for step in (0, 3, 4, 7, 10, 10**6):
        p.call(
            TrainConfig.lr_at,
            f"step {step}",
            lambda s=step: recipe.lr_at(s),
            lambda r, s=step: expect(abs(r - schedule(s)) < 1e-12, f"lr {r} != {schedule(s)}"),
        )
    for label, value in number_variants(3):
        check = None
        if label in ("numpy int", "zero", "huge int"):
            s = {"numpy int": 3, "zero": 0, "huge int": 10**30}[label]
            check = lambda r, s=s: expect(abs(r - schedule(s)) < 1e-12, f"lr {r}")  # noqa: E731
        p.call(TrainConfig.lr_at, f"step {label}", lambda v=value: recipe.lr_at(v), check)
    p.call(
        TrainConfig.lr_at,
        "warmup 0, step 0",
        lambda: TrainConfig(steps=10, warmup=0, lr=1.0).lr_at(0),
        lambda r: expect(abs(r - 1.0) < 1e-12, f"lr {r}"),
    )

    config = GPTConfig(vocab=5, width=8, layers=1, heads=2, kv_heads=1, context=4)
    short = TrainConfig(steps=2, batch=3, warmup=1, seed=3)
    stream = torch.arange(40) % 5

    def first_loss(r):
        model, losses = r
        expect(len(losses) == 2 and all(math.isfinite(x) for x in losses), f"losses {losses}")
        expect(not model.training, "model left in training mode")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            fresh = TinyGPT(config)
        inputs, labels = random_windows(stream, 3, 4, torch.Generator().manual_seed(4))
        with torch.no_grad():
            expected = F.cross_entropy(fresh(inputs).flatten(0, 1), labels.flatten()).item()
        expect(abs(losses[0] - expected) < 1e-5, f"first loss {losses[0]} != {expected}")

    p.call(train_lm, "two steps", lambda: train_lm(config, short, stream), first_loss)
    for label, variant in tensor_variants(stream):
        check = None
        if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
            check = first_loss
        p.call(train_lm, f"ids: {label}", lambda v=variant: train_lm(config, short, v), check)
    for label, value in (
        ("ids = vocab in the stream", torch.cat((stream, torch.tensor([5])))),
        ("ids shorter than context + 1", stream[:4]),
        ("ids negative", -stream),
    ):
        p.call(train_lm, label, lambda v=value: train_lm(config, short, v))
    p.call(train_lm, "config is a dict", lambda: train_lm({}, short, stream))
    p.call(train_lm, "recipe is a dict", lambda: train_lm(config, {}, stream))
    p.call(
        TrainConfig, "seed 2**64 - 1 (train_lm seeds seed + 1)", lambda: TrainConfig(seed=2**64 - 1)
    )
    p.call(
        train_lm,
        "seed 2**64 - 2, the largest",
        lambda: train_lm(config, TrainConfig(steps=1, seed=2**64 - 2), stream),
        lambda r: expect(len(r[1]) == 1 and math.isfinite(r[1][0]), f"losses {r[1]}"),
    )

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        model = TinyGPT(config).eval()
    held = torch.tensor([0, 1, 2, 3, 4, 0, 2, 4, 1, 3, 0, 0, 1])

    def per_position(ids, stride):
        t = 4
        starts = range(0, len(ids) - t, stride)
        rows = []
        with torch.no_grad():
            for s in starts:
                window = ids[s : s + t + 1].long()
                logits = model(window[None, :-1])[0]
                rows.append(F.cross_entropy(logits.double(), window[1:], reduction="none"))
        return torch.stack(rows).mean(0).float()

    def losses_like(stride):
        return check_tensor_result(lambda: per_position(held, stride), torch.float32)

    p.call(position_losses, "valid", lambda: position_losses(model, held), losses_like(4))
    for label, value in number_variants(2):
        check = {"numpy int": losses_like(2), "none": losses_like(4), "huge int": losses_like(100)}
        check = check.get(label)
        p.call(
            position_losses,
            f"stride {label}",
            lambda v=value: position_losses(model, held, stride=v),
            check,
        )
        check = losses_like(4) if label in ("numpy int", "huge int") else None
        p.call(
            position_losses,
            f"batch {label}",
            lambda v=value: position_losses(model, held, batch=v),
            check,
        )
    p.call(
        position_losses,
        "stride 100",
        lambda: position_losses(model, held, stride=100),
        losses_like(100),
    )
    for label, variant in tensor_variants(held):
        check = None
        if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
            check = losses_like(4)
        p.call(position_losses, f"ids: {label}", lambda v=variant: position_losses(model, v), check)
    for label, value in (("ids = vocab", torch.full((9,), 5)), ("ids of length T", held[:4])):
        p.call(position_losses, label, lambda v=value: position_losses(model, v))
    p.call(position_losses, "model is a Linear", lambda: position_losses(nn.Linear(2, 2), held))


def _repeat_oracle(tokens, lengths, vocab, max_len):
    for row, length in zip(tokens.tolist(), lengths.tolist(), strict=True):
        first = row[:length]
        expect(len(row) == 2 * max_len, "row length")
        expect(len(set(first)) == length and all(0 <= x < vocab for x in first), "first half")
        expect(row[length : 2 * length] == first, "second half is not a copy")
        expect(all(x == vocab for x in row[2 * length :]), "padding")


def probe_induction(p: Probe) -> None:
    from attnbook.induction import (
        induction_score,
        make_repeats,
        previous_token_score,
        repeated_queries,
    )

    args = {"n": 6, "vocab": 9, "min_len": 2, "max_len": 4}

    def repeats(**kw):
        a = {**args, **kw}
        return lambda: make_repeats(
            a["n"],
            vocab=a["vocab"],
            min_len=a["min_len"],
            max_len=a["max_len"],
            generator=torch.Generator(),
        )

    def repeats_ok(**kw):
        a = {**args, **kw}

        def check(r):
            tokens, lengths = r
            expect(tokens.shape == (a["n"], 2 * a["max_len"]), f"shape {tokens.shape}")
            expect(bool(((a["min_len"] <= lengths) & (lengths <= a["max_len"])).all()), "L")
            _repeat_oracle(tokens, lengths, a["vocab"], a["max_len"])

        return check

    p.call(make_repeats, "valid", repeats(), repeats_ok())
    p.call(make_repeats, "vocab = max_len", repeats(vocab=4), repeats_ok(vocab=4))
    p.call(
        make_repeats,
        "min_len = max_len = 1",
        repeats(min_len=1, max_len=1),
        repeats_ok(min_len=1, max_len=1),
    )
    for name in args:
        for label, value in number_variants(args[name]):
            check = repeats_ok() if label == "numpy int" else None
            p.call(make_repeats, f"{name} {label}", repeats(**{name: value}), check)
    p.call(make_repeats, "min_len > max_len", repeats(min_len=5))
    p.call(make_repeats, "vocab < max_len", repeats(vocab=3))
    p.call(make_repeats, "n 10**12", repeats(n=10**12))
    p.call(
        make_repeats,
        "generator int",
        lambda: make_repeats(2, vocab=4, min_len=1, max_len=2, generator=0),
    )

    lengths = torch.tensor([1, 3, 2, 4])

    def queries_by_hand(ls, t):
        return torch.tensor(
            [[length <= q <= 2 * length - 2 for q in range(t)] for length in ls.tolist()]
        )

    p.call(
        repeated_queries,
        "valid",
        lambda: repeated_queries(lengths, 8),
        lambda r: expect(torch.equal(r, queries_by_hand(lengths, 8)), "queries"),
    )
    for label, variant in tensor_variants(lengths):
        check = None
        if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
            check = lambda r: expect(torch.equal(r, queries_by_hand(lengths, 8)), "queries")  # noqa: E731
        p.call(
            repeated_queries, f"lengths: {label}", lambda v=variant: repeated_queries(v, 8), check
        )
    for label, value in number_variants(8):
        check = None
        if label == "numpy int":
            check = lambda r: expect(torch.equal(r, queries_by_hand(lengths, 8)), "queries")  # noqa: E731
        p.call(repeated_queries, f"t {label}", lambda v=value: repeated_queries(lengths, v), check)
    p.call(repeated_queries, "lengths beyond t/2", lambda: repeated_queries(lengths, 6))
    p.call(repeated_queries, "lengths 0", lambda: repeated_queries(torch.tensor([0, 1]), 6))

    g = torch.Generator().manual_seed(14)
    t = 8
    raw = torch.randn(4, 2, t, t, generator=g).masked_fill(
        ~torch.ones(t, t, dtype=torch.bool).tril(), -INF
    )
    weights = raw.softmax(-1)  # (N, H, T, T)

    def score_by_hand(w, ls, kind):
        w = w.double()
        total = torch.zeros((*w.shape[:-4], w.shape[-3]), dtype=torch.float64)
        count = 0
        for i, length in enumerate(ls.tolist()):
            if kind == "previous":
                pairs = [(q, q - 1) for q in range(1, 2 * length)]
            else:
                pairs = [(q, q - length + 1) for q in range(length, 2 * length)]
            for q, key in pairs:
                total += w[..., i, :, q, key]
                count += 1
        return total / count

    for fn, kind in ((previous_token_score, "previous"), (induction_score, "induction")):
        p.call(
            fn,
            "valid",
            lambda f=fn: f(weights, lengths),
            check_tensor_result(lambda k=kind: score_by_hand(weights, lengths, k), torch.float32),
        )
        seeds = torch.stack((weights, weights.flip(1)))  # (S, N, H, T, T)
        p.call(
            fn,
            "leading seed axis",
            lambda f=fn, s=seeds: f(s, lengths),
            check_tensor_result(
                lambda k=kind, s=seeds: score_by_hand(s, lengths, k), torch.float32
            ),
        )
        unscored = weights.clone()
        unscored[0, :, 2:] = NAN  # sequence 0 has L = 1: positions 2.. are padding
        p.call(
            fn,
            "NaN weights on padding queries (not scored)",
            lambda f=fn, u=unscored: f(u, lengths),
            check_tensor_result(lambda k=kind: score_by_hand(weights, lengths, k), torch.float32),
        )
        for label, variant in tensor_variants(weights):
            check = None
            if (
                isinstance(variant, torch.Tensor)
                and variant.is_floating_point()
                and variant.dim() >= 4
                and variant.shape[-4] == 4
                and variant.shape[-2:] == (8, 8)
                and not variant.is_meta
            ):
                check = check_tensor_result(
                    lambda v=variant, k=kind: score_by_hand(v, lengths, k), variant.dtype
                )
            p.call(fn, f"weights: {label}", lambda f=fn, v=variant: f(v, lengths), check)
        for label, variant in tensor_variants(lengths):
            check = None
            if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
                check = check_tensor_result(
                    lambda k=kind: score_by_hand(weights, lengths, k), torch.float32
                )
            p.call(fn, f"lengths: {label}", lambda f=fn, v=variant: f(weights, v), check)
        p.call(fn, "lengths 5 > T/2", lambda f=fn: f(weights, torch.tensor([1, 3, 2, 5])))
        p.call(fn, "lengths of 3 sequences", lambda f=fn: f(weights, lengths[:3]))
        p.call(fn, "non-square weights", lambda f=fn: f(weights[..., :7], lengths))
    p.call(
        previous_token_score,
        "T = 2, every L = 1",
        lambda: previous_token_score(weights[..., :2, :2], torch.tensor([1, 1, 1, 1])),
        check_tensor_result(
            lambda: score_by_hand(weights[..., :2, :2], torch.tensor([1, 1, 1, 1]), "previous"),
            torch.float32,
        ),
    )


def copying_by_hand(ov):
    """``trace / sum |eigenvalues|`` per matrix, with NumPy in float64."""
    a = ov.detach().double().numpy()
    flat = a.reshape(-1, *a.shape[-2:])
    out = [np.trace(m) / np.abs(np.linalg.eigvals(m)).sum() for m in flat]
    return torch.tensor(out, dtype=torch.float64).reshape(a.shape[:-2])


def probe_copying_score(p: Probe) -> None:
    from attnbook.induction import copying_score

    g = torch.Generator().manual_seed(17)
    exact = {
        "identity 1x1": (torch.eye(1), 1.0),
        "identity 5x5": (torch.eye(5), 1.0),
        "minus identity": (-torch.eye(5), -1.0),
        "3 x identity (scale)": (3 * torch.eye(4), 1.0),
        "rotation by 90 degrees (eigenvalues +-i)": (torch.tensor([[0.0, -1.0], [1.0, 0.0]]), 0.0),
        "diag(2, -1)": (torch.diag(torch.tensor([2.0, -1.0])), 1 / 3),
        "diag(1, 1, -1, -1)": (torch.diag(torch.tensor([1.0, 1.0, -1.0, -1.0])), 0.0),
        "all ones (one eigenvalue V)": (torch.ones(4, 4), 1.0),
        "permutation swapping two tokens": (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 0.0),
        "1x1 of -2": (torch.tensor([[-2.0]]), -1.0),
    }
    for label, (ov, expected) in exact.items():
        p.call(
            copying_score,
            label,
            lambda m=ov: copying_score(m),
            check_tensor_result(
                lambda e=expected: torch.tensor(e, dtype=torch.float64), torch.float64
            ),
        )
    for size in (2, 5, 16):
        ov = torch.randn(size, size, generator=g, dtype=torch.float64)
        p.call(
            copying_score,
            f"random float64 {size}x{size}",
            lambda m=ov: copying_score(m),
            check_tensor_result(lambda m=ov: copying_by_hand(m), torch.float64),
        )
    batch = torch.randn(3, 2, 6, 6, generator=g)
    batch[0, 1] = torch.eye(6)
    p.call(
        copying_score,
        "batch (3, 2, 6, 6) with an identity",
        lambda: copying_score(batch),
        check_tensor_result(lambda: copying_by_hand(batch), torch.float64),
    )
    p.call(
        copying_score,
        "empty batch (0, 4, 4)",
        lambda: copying_score(torch.zeros(0, 4, 4)),
        check_tensor_result(lambda: torch.zeros(0, dtype=torch.float64), torch.float64),
    )
    grad = torch.randn(4, 4, generator=g, requires_grad=True)
    p.call(
        copying_score,
        "requires_grad",
        lambda: copying_score(grad),
        check_tensor_result(lambda: copying_by_hand(grad), torch.float64),
    )
    # A head's real OV circuit: W_E W_V W_O W_U of a random low-rank head (rank 3 of V = 10).
    w_e, w_v = torch.randn(10, 8, generator=g), torch.randn(8, 3, generator=g)
    w_o, w_u = torch.randn(3, 8, generator=g), torch.randn(8, 10, generator=g)
    circuit = w_e @ w_v @ w_o @ w_u
    p.call(
        copying_score,
        "low-rank OV circuit W_E W_V W_O W_U",
        lambda: copying_score(circuit),
        check_tensor_result(lambda: copying_by_hand(circuit), torch.float64),
    )
    base = torch.randn(4, 4, generator=g)
    for label, variant in tensor_variants(base):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.is_floating_point()
            and not variant.is_meta
            and variant.dim() >= 2
            and variant.shape[-1] == variant.shape[-2] > 0
            and bool(torch.isfinite(variant).all())
        ):
            check = check_tensor_result(lambda v=variant: copying_by_hand(v), torch.float64)
        p.call(copying_score, f"ov: {label}", lambda v=variant: copying_score(v), check)
    for label, ov in (
        ("non-square (3, 4)", torch.randn(3, 4, generator=g)),
        ("all zeros", torch.zeros(3, 3)),
        ("one zero matrix in a batch", torch.stack((torch.eye(3), torch.zeros(3, 3)))),
        ("nilpotent (every eigenvalue 0)", torch.tensor([[0.0, 1.0], [0.0, 0.0]])),
        ("(0, 0)", torch.zeros(0, 0)),
        ("rank 1", torch.ones(4)),
        ("rank 0", torch.tensor(1.0)),
        ("complex128", torch.eye(3, dtype=torch.complex128)),
        ("nan in a batch", torch.stack((torch.eye(3), torch.full((3, 3), NAN)))),
        ("-inf", torch.full((2, 2), -INF)),
        ("float64 meta", torch.eye(3, dtype=torch.float64, device="meta")),
        ("float16 overflow to inf", torch.full((2, 2), 7e4).half()),
    ):
        p.call(copying_score, label, lambda m=ov: copying_score(m))


INDUCTION_FIELDS = {
    "vocab": 6,
    "min_len": 2,
    "max_len": 3,
    "width": 8,
    "layers": 2,
    "heads": 2,
    "seeds": 2,
    "steps": 2,
    "batch": 3,
    "eval_every": 1,
    "eval_size": 4,
}


def attention_only_reference(model, tokens, head_mask=None):
    """The attention-only model seed by seed, in float64, from SDPA and plain matmuls."""
    c = model.config
    if tokens.dim() == 2:
        tokens = tokens.expand(c.seeds, *tokens.shape)
    t = tokens.shape[-1]
    out = []
    for s in range(c.seeds):
        x = model.embed[s].double()[tokens[s]] + model.position[s, :t].double()
        for layer in range(c.layers):
            q, k, v = (x @ model.qkv[layer][s].double()).chunk(3, -1)
            n = x.shape[0]
            dh = c.width // c.heads
            q, k, v = (z.reshape(n, t, c.heads, dh).transpose(1, 2) for z in (q, k, v))
            heads = sdpa(q, k, v, is_causal=True)  # (N, H, T, dh)
            if head_mask is not None:
                heads = heads * head_mask[layer].double()[:, None, None]
            x = x + heads.transpose(1, 2).reshape(n, t, c.width) @ model.out[layer][s].double()
        out.append(x @ model.unembed[s].double())
    return torch.stack(out).detach()


def probe_induction_baselines(p: Probe) -> None:
    import dataclasses

    from attnbook.induction import make_repeats
    from attnbook.induction_baselines import (
        answer_candidates,
        earliest_candidate_head,
        label_priority_head,
    )
    from attnbook.induction_model import InductionConfig, evaluate

    g = torch.Generator().manual_seed(3)
    tokens, lengths = make_repeats(64, vocab=24, min_len=6, max_len=12, generator=g)

    def candidates_by_hand(found) -> None:  # every query's candidates, in plain Python
        rows, queries = found.rows.tolist(), found.queries.tolist()
        expect(len(rows) == sum(n - 1 for n in lengths.tolist()), "one query per copy")
        for i, (r, t) in enumerate(zip(rows, queries, strict=True)):
            row = tokens[r].tolist()
            for k, ell in enumerate(range(6, 13)):
                ok = ell <= t <= 2 * ell - 2
                expect(bool(found.consistent[i, k]) == ok, "consistent lengths")
                if ok:
                    expect(bool(found.own[i, k]) == (row[t - ell + 1] == row[t]), "own token")
            expect(found.truth[i].nonzero().item() == lengths[r].item() - 6, "true length")

    p.call(answer_candidates, "64 sequences", lambda: answer_candidates(tokens, lengths, 6, 12),
           candidates_by_hand)  # fmt: skip
    for label, args in (
        ("float tokens", (tokens.float(), lengths, 6, 12)),
        ("1-d tokens", (tokens[0], lengths, 6, 12)),
        ("lengths below min_len", (tokens, lengths, 7, 12)),
        ("min_len > max_len", (tokens, lengths, 12, 6)),
        ("max_len beyond T/2", (tokens, lengths, 6, 13)),
        ("lengths of other N", (tokens, lengths[:3], 6, 12)),
        ("float lengths", (tokens, lengths.float(), 6, 12)),
        ("min_len 6.0", (tokens, lengths, 6.0, 12)),
        ("meta tokens", (tokens.to("meta"), lengths, 6, 12)),
        ("every length 1", (torch.zeros(4, 2, dtype=torch.long), torch.ones(4).long(), 1, 1)),
        ("tokens not a repeat", (tokens.roll(1, dims=1), lengths, 6, 12)),
        ("lengths not the tokens' own", (tokens, (lengths % 12) + 1, 1, 12)),
        ("a pattern repeating a token", (torch.full((4, 24), 5), torch.full((4,), 6), 6, 12)),
    ):
        p.call(answer_candidates, label, lambda a=args: answer_candidates(*a))

    one_layer = dataclasses.replace(InductionConfig(), layers=1, seeds=1)

    def matches_the_rule(model) -> None:
        found = answer_candidates(tokens, lengths, 6, 12)
        accuracy = evaluate(model, tokens, lengths)["accuracy"].item()
        expect(abs(accuracy - found.earliest_accuracy()) < 1e-6, "the earliest-candidate rule")

    p.call(earliest_candidate_head, "one layer, one head",
           lambda: earliest_candidate_head(one_layer), matches_the_rule)  # fmt: skip
    for label, value in (
        ("two layers", InductionConfig()),
        ("width 26 < vocab + 4", dataclasses.replace(one_layer, width=26)),
        ("two heads", dataclasses.replace(one_layer, heads=2)),
        ("a dict", {"layers": 1}),
    ):
        p.call(earliest_candidate_head, label, lambda v=value: earliest_candidate_head(v))

    wide = dataclasses.replace(one_layer, width=73)

    def beats_the_rule(model) -> None:  # right wherever the ranking is, and on more
        found = answer_candidates(tokens, lengths, 6, 12)
        accuracy = evaluate(model, tokens, lengths)["accuracy"].item()
        expect(accuracy > found.earliest_accuracy() + 0.05, "above the earliest-candidate rule")

    p.call(label_priority_head, "one layer, one head, width 73",
           lambda: label_priority_head(wide), beats_the_rule)  # fmt: skip
    for label, value in (
        ("two layers", dataclasses.replace(wide, layers=2)),
        ("width 72", dataclasses.replace(one_layer, width=72)),
        ("two heads", dataclasses.replace(wide, width=74, heads=2)),
        ("a dict", {"layers": 1}),
    ):
        p.call(label_priority_head, label, lambda v=value: label_priority_head(v))


def probe_induction_model(p: Probe) -> None:
    from attnbook.induction_model import AttentionOnly, InductionConfig, evaluate, train

    for name in INDUCTION_FIELDS:
        for label, value in number_variants(INDUCTION_FIELDS[name]):
            if label == "huge int" and name in (
                "vocab",
                "steps",
                "eval_every",
                "batch",
                "eval_size",
            ):
                continue  # valid; only training or building a model would allocate or loop
            check = None
            if label in ("numpy int", "huge int"):
                check = lambda r, n=name, v=value: expect(getattr(r, n) == v, n)  # noqa: E731
            p.call(
                InductionConfig,
                f"{name} {label}",
                lambda n=name, v=value: InductionConfig(**{**INDUCTION_FIELDS, n: v}),
                check,
            )
    for label, value in (
        ("seed -1", -1),
        ("seed 2**64", 2**64),
        ("seed 2**63", 2**63),
        ("seed 1.0", 1.0),
    ):
        check = (lambda r: expect(r.seed == 2**63, "seed")) if label == "seed 2**63" else None
        p.call(
            InductionConfig,
            label,
            lambda v=value: InductionConfig(**INDUCTION_FIELDS, seed=v),
            check,
        )
    for label, value in (("lr 0", 0.0), ("lr nan", NAN), ("lr str", "0.01")):
        p.call(InductionConfig, label, lambda v=value: InductionConfig(**INDUCTION_FIELDS, lr=v))
    for label, fields in (
        ("width 9 not a multiple of heads", {"width": 9}),
        ("min_len > max_len", {"min_len": 4}),
        ("max_len > vocab", {"max_len": 7, "min_len": 2}),
    ):
        p.call(
            InductionConfig, label, lambda f=fields: InductionConfig(**{**INDUCTION_FIELDS, **f})
        )
    config = InductionConfig(**INDUCTION_FIELDS)
    p.call(InductionConfig, "t", lambda: config.t, equals(6))

    def data_ok(n):
        def check(r):
            tokens, lengths = r
            expect(tokens.shape == (n, 6), "shape")
            _repeat_oracle(tokens, lengths, 6, 3)

        return check

    p.call(InductionConfig.data, "valid", lambda: config.data(5, 0), data_ok(5))
    for label, value in number_variants(3):
        p.call(
            InductionConfig.data,
            f"n {label}",
            lambda v=value: config.data(v, 0),
            data_ok(3) if label == "numpy int" else None,
        )
        p.call(
            InductionConfig.data,
            f"seed {label}",
            lambda v=value: config.data(2, v),
            data_ok(2) if label in ("numpy int", "zero") else None,
        )
    p.call(InductionConfig.data, "seed 2**64", lambda: config.data(2, 2**64))
    p.call(InductionConfig.data, "seed 2**63", lambda: config.data(2, 2**63), data_ok(2))

    model = AttentionOnly(config)
    p.call(
        AttentionOnly,
        "config",
        lambda: AttentionOnly(config),
        lambda r: expect(r.embed.shape == (2, 7, 8), "embed shape"),
    )
    p.call(AttentionOnly, "config is a dict", lambda: AttentionOnly(dict(INDUCTION_FIELDS)))
    p.call(
        InductionConfig,
        "seed 2**64 - 2 (train seeds seed + 2000)",
        lambda: InductionConfig(**INDUCTION_FIELDS, seed=2**64 - 2),
    )
    p.call(
        AttentionOnly,
        "seed 2**64 - 2001, the largest",
        lambda: AttentionOnly(InductionConfig(**INDUCTION_FIELDS, seed=2**64 - 2001)),
        lambda r: expect(r.embed.shape == (2, 7, 8), "embed shape"),
    )
    p.call(
        AttentionOnly,
        "vocab 10**12",
        lambda: AttentionOnly(InductionConfig(**{**INDUCTION_FIELDS, "vocab": 10**12})),
    )
    tokens, lengths = config.data(4, 1)

    def forward_like(tok, head_mask=None, dtype=torch.float32):
        def check(r):
            logits, weights = r
            close(logits, attention_only_reference(model, tok, head_mask), dtype)
            n, t = tok.shape[-2:]
            expect(weights.shape == (2, 2, n, 2, t, t), f"weights shape {weights.shape}")
            finite_mask = head_mask is None or bool(head_mask.isfinite().all())
            if n and t and finite_mask:  # a NaN or inf head_mask makes later weights NaN
                expect(bool(torch.allclose(weights.sum(-1), torch.ones(()))), "rows sum")

        return check

    def fwd(tok, **kw):
        return lambda: model.forward(tok, **kw)

    p.call(
        AttentionOnly.forward, "valid (N, T)", fwd(tokens), forward_like(tokens), callbacks=False
    )
    per_seed = torch.stack((tokens, tokens.flip(0)))
    p.call(
        AttentionOnly.forward,
        "valid (S, N, T)",
        fwd(per_seed),
        forward_like(per_seed),
        callbacks=False,
    )
    p.call(
        AttentionOnly.forward,
        "T shorter than 2 max_len",
        fwd(tokens[:, :4]),
        forward_like(tokens[:, :4]),
        callbacks=False,
    )
    for label, variant in tensor_variants(tokens):
        check = None
        if (
            isinstance(variant, torch.Tensor)
            and variant.dtype in (torch.int32, torch.int64)
            and variant.dim() == 2
            and not variant.is_meta
            and 1 <= variant.shape[1] <= 6
        ):
            check = forward_like(variant)
        p.call(AttentionOnly.forward, f"tokens: {label}", fwd(variant), check, callbacks=False)
    for label, value in (
        ("tokens = V + 1", torch.full((2, 6), 7)),
        ("tokens negative", torch.full((2, 6), -1)),
        ("tokens longer than T", torch.zeros(2, 7, dtype=torch.long)),
        ("tokens (3, N, T): wrong seed count", tokens.expand(3, -1, -1)),
        ("tokens bool", tokens > 2),
    ):
        p.call(AttentionOnly.forward, label, fwd(value), callbacks=False)
    mask = torch.tensor([[1.0, 0.0], [0.5, 1.0]])
    p.call(
        AttentionOnly.forward,
        "head_mask",
        fwd(tokens, head_mask=mask),
        forward_like(tokens, mask),
        callbacks=False,
    )
    for label, variant in tensor_variants(mask):
        check = None
        if label == "none":
            check = forward_like(tokens)
        elif label == "huge values":
            # Heads scaled by 1e4 make the second layer's scores ~1e6: float32 rounding then
            # moves its softmax, so float32 and float64 differ by design. Same run, same data:
            # the first layer (before any scaled head) must still match, and nothing is NaN.
            def check(r, v=variant):
                first = model(tokens)[1][:, 0]
                close(r[1][:, 0], first, torch.float32)
                expect(bool(r[0].isfinite().all()), "non-finite logits")
        elif (
            isinstance(variant, torch.Tensor)
            and variant.is_floating_point()
            and variant.shape == (2, 2)
            and not variant.is_meta
        ):
            check = forward_like(tokens, variant)
        p.call(
            AttentionOnly.forward,
            f"head_mask: {label}",
            fwd(tokens, head_mask=variant),
            check,
            callbacks=False,
        )

    def evaluated_by_hand(tok, ls, head_mask=None):
        logits = attention_only_reference(model, tok, head_mask)  # (S, N, T, V)
        n, t = tok.shape
        keep = torch.tensor(
            [[length <= q <= 2 * length - 2 for q in range(t - 1)] for length in ls.tolist()]
        )
        targets = tok[:, 1:].long().clamp(max=5)
        ce = nn.functional.cross_entropy(
            logits[:, :, :-1].flatten(0, 2), targets.expand(2, -1, -1).flatten(), reduction="none"
        ).view(2, n, t - 1)
        right = (logits[:, :, :-1].argmax(-1) == tok[:, 1:].long()).double()
        return (ce * keep).sum((1, 2)) / keep.sum(), (right * keep).sum((1, 2)) / keep.sum()

    def evaluate_ok(tok, ls, head_mask=None):
        def check(r):
            loss, accuracy = evaluated_by_hand(tok, ls, head_mask)
            close(r["loss"], loss, torch.float32)
            expect(bool((r["accuracy"].double() - accuracy).abs().max() < 1e-6), "accuracy")
            w = model(tok, head_mask=head_mask)[1]
            close(r["previous"], score_reference(w, ls, "previous"), torch.float32)
            close(r["induction"], score_reference(w, ls, "induction"), torch.float32)

        return check

    p.call(
        evaluate, "valid", lambda: evaluate(model, tokens, lengths), evaluate_ok(tokens, lengths)
    )
    p.call(
        evaluate,
        "head_mask",
        lambda: evaluate(model, tokens, lengths, head_mask=mask),
        evaluate_ok(tokens, lengths, mask),
    )
    for label, variant in tensor_variants(tokens):
        check = None
        if usable_ids(variant) and variant.shape == tokens.shape:
            check = evaluate_ok(variant, lengths)
        p.call(evaluate, f"tokens: {label}", lambda v=variant: evaluate(model, v, lengths), check)
    for label, variant in tensor_variants(lengths):
        check = None
        if isinstance(variant, torch.Tensor) and variant.dtype == torch.int32:
            check = evaluate_ok(tokens, lengths)
        p.call(evaluate, f"lengths: {label}", lambda v=variant: evaluate(model, tokens, v), check)
    for label, ls in (
        ("lengths of 1 sequence", lengths[:1]),
        ("lengths of 3 sequences", lengths[:3]),
    ):
        p.call(evaluate, label, lambda v=ls: evaluate(model, tokens, v))
    p.call(evaluate, "model is a Linear", lambda: evaluate(nn.Linear(2, 2), tokens, lengths))

    def history_ok(r):
        trained, history = r
        expect(torch.equal(history["step"], torch.tensor([0, 1, 2])), f"steps {history['step']}")
        expect(history["loss"].shape == (3, 2) and bool(history["loss"].isfinite().all()), "loss")
        expect(not trained.training, "model left in training mode")
        final = evaluate(trained, *config.data(4, 2000))
        for name, value in final.items():
            close(history[name][-1], value, torch.float32)

    p.call(train, "two steps", lambda: train(config), history_ok)
    p.call(train, "config is a dict", lambda: train(dict(INDUCTION_FIELDS)))


def score_reference(w, ls, kind):
    w = w.double()
    total, count = 0, 0
    for i, length in enumerate(ls.tolist()):
        if kind == "previous":
            pairs = [(q, q - 1) for q in range(1, 2 * length)]
        else:
            pairs = [(q, q - length + 1) for q in range(length, 2 * length)]
        for q, key in pairs:
            total = total + w[..., i, :, q, key]
            count += 1
    return total / count


def probe_tiled_backward(p: Probe) -> None:
    from attnbook.tiled_backward import TiledAttention, recomputing_attention

    g = torch.Generator().manual_seed(15)
    q, k, v = (
        torch.randn(2, 2, 5, 4, generator=g),
        torch.randn(2, 2, 7, 4, generator=g),
        torch.randn(2, 2, 7, 3, generator=g),
    )
    base = {"q": q, "k": k, "v": v}

    oracle = oracle_causal_attention
    for causal in (False, True):
        p.call(
            recomputing_attention,
            f"valid causal={causal}",
            lambda c=causal: recomputing_attention(q, k, v, block_size=3, causal=c),
            check_tensor_result(lambda c=causal: oracle(base, c), torch.float32),
        )
    probe_qkv_variants(p, recomputing_attention, base)
    p.call(
        recomputing_attention,
        "GQA (2 query heads per kv head)",
        lambda: recomputing_attention(torch.randn(2, 4, 5, 4), k, v),
    )
    p.call(
        recomputing_attention,
        "causal with Tq > Tk",
        lambda: recomputing_attention(k, q, q[..., :3], causal=True),
        check_tensor_result(lambda: oracle({"q": k, "k": q, "v": q[..., :3]}, True), torch.float32),
    )
    for label, value in number_variants(3):
        check = (
            check_tensor_result(lambda: oracle(base, False), torch.float32)
            if label in ("numpy int", "huge int")
            else None
        )
        p.call(
            recomputing_attention,
            f"block_size {label}",
            lambda b=value: recomputing_attention(q, k, v, block_size=b),
            check,
        )
    for label, value in bool_variants():
        check = (
            check_tensor_result(lambda: oracle(base, True), torch.float32)
            if label == "numpy bool"
            else rejected
        )
        p.call(
            recomputing_attention,
            f"causal {label}",
            lambda c=value: recomputing_attention(q, k, v, causal=c),
            check,
        )
    for label, scale in (
        ("scale int", 1),
        ("scale numpy", np.float32(0.5)),
        ("scale 0", 0.0),
        ("scale negative", -1.0),
        ("scale str", "0.5"),
        ("scale nan", NAN),
        ("scale inf", INF),
        ("scale bool", True),
    ):
        check = None
        if label in ("scale int", "scale numpy", "scale 0", "scale negative"):
            check = check_tensor_result(
                lambda s=scale: oracle(base, False, float(s)), torch.float32
            )
        p.call(
            recomputing_attention,
            label,
            lambda s=scale: recomputing_attention(q, k, v, scale=s),
            check,
        )

    def gradients(dtype, causal, block):
        def run():
            a = {n: x.detach().clone().to(dtype).requires_grad_() for n, x in base.items()}
            out = recomputing_attention(a["q"], a["k"], a["v"], block_size=block, causal=causal)
            out.backward(torch.ones_like(out))
            return tuple(a[n].grad for n in ("q", "k", "v"))

        def check(r):
            a = {n: x.detach().double().requires_grad_() for n, x in base.items()}
            out = oracle(a, causal)
            out.backward(torch.ones_like(out))
            for got, name in zip(r, ("q", "k", "v"), strict=True):
                close(got, a[name].grad, dtype)

        return run, check

    for dtype in (torch.float32, torch.float64):
        for causal in (False, True):
            for block in (1, 3, 100):
                run, check = gradients(dtype, causal, block)
                p.call(
                    recomputing_attention,
                    f"gradients {dtype} causal={causal} block={block}",
                    run,
                    check,
                )
    for dtype in (torch.float16, torch.bfloat16):
        args = {n: (x * 300 if n != "v" else x).to(dtype) for n, x in base.items()}
        p.call(
            recomputing_attention,
            f"{dtype} x300 causal",
            lambda a=args: recomputing_attention(**a, block_size=2, causal=True),
            check_tensor_result(lambda a=args: oracle(a, True), dtype),
        )

    names = ("q", "k", "v", "block_size", "causal", "scale")
    p.call(
        TiledAttention,
        "apply, valid",
        lambda: TiledAttention.apply(q, k, v, 3, True, 0.5),
        check_tensor_result(lambda: oracle(base, True, 0.5), torch.float32),
        names=names,
    )
    for label, call_args in (
        ("apply, block_size 0", (q, k, v, 0, False, 0.5)),
        ("apply, block_size -1", (q, k, v, -1, False, 0.5)),
        ("apply, block_size 2.5", (q, k, v, 2.5, False, 0.5)),
        ("apply, causal 'no'", (q, k, v, 3, "no", 0.5)),
        ("apply, scale None", (q, k, v, 3, False, None)),
        ("apply, scale nan", (q, k, v, 3, False, NAN)),
        ("apply, k transposed", (q, k.mT, v, 3, False, 0.5)),
        ("apply, int q", (q.long(), k, v, 3, False, 0.5)),
        ("apply, lists", (q.tolist(), k, v, 3, False, 0.5)),
    ):
        p.call(TiledAttention, label, lambda a=call_args: TiledAttention.apply(*a), names=names)


def probe_retrieval_seeds(p: Probe) -> None:
    import dataclasses

    from attnbook.retrieval import RetrievalConfig, RetrievalData, make_data
    from attnbook.retrieval_model import TinyRetriever, final_logits, score
    from attnbook.retrieval_model import train as train_one
    from attnbook.retrieval_seeds import stacked_accuracy, train_seeds

    config = RetrievalConfig(steps=2, batch=4)
    data = make_data(12, config, torch.Generator().manual_seed(16))
    models = []
    for seed in (0, 1):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            models.append(TinyRetriever(config).eval())

    def accuracies(ms, d=data):
        def check(r):
            expected = torch.tensor([score(m, d)[1] for m in ms])
            expect(isinstance(r, torch.Tensor) and r.shape == (len(ms),), f"shape {r}")
            expect(bool((r.double() - expected.double()).abs().max() < 1e-6), f"{r} != {expected}")

        return check

    p.call(
        stacked_accuracy, "two models", lambda: stacked_accuracy(models, data), accuracies(models)
    )
    p.call(
        stacked_accuracy,
        "tuple of models",
        lambda: stacked_accuracy(tuple(models), data),
        accuracies(models),
    )
    p.call(
        stacked_accuracy,
        "one model",
        lambda: stacked_accuracy(models[:1], data),
        accuracies(models[:1]),
    )
    for label, value in (
        ("models empty", []),
        ("models a model", models[0]),
        ("models a generator", (m for m in models)),
        ("models with a Linear", [models[0], nn.Linear(2, 2)]),
        (
            "models of two configs",
            [models[0], TinyRetriever(dataclasses.replace(config, width=32, heads=2))],
        ),
        ("models None", None),
    ):
        p.call(stacked_accuracy, label, lambda v=value: stacked_accuracy(v, data))
    p.call(
        stacked_accuracy,
        "data is a tuple",
        lambda: stacked_accuracy(models, (data.keys, data.values)),
    )
    bigger = make_data(12, RetrievalConfig(keys=16, records=4), torch.Generator().manual_seed(17))
    p.call(
        stacked_accuracy,
        "data from a bigger key vocabulary",
        lambda: stacked_accuracy(models, bigger),
    )
    wide = RetrievalData(data.keys, data.values + 8, data.answers + 8, data.evidence)
    p.call(stacked_accuracy, "data values beyond V", lambda: stacked_accuracy(models, wide))

    def separate_runs(seeds):
        def check(r):
            trained, losses, initial = r
            expect(losses.shape == (len(seeds), 2) and initial.shape == (len(seeds),), "shapes")
            for i, seed in enumerate(seeds):
                one, one_losses, _ = train_one(dataclasses.replace(config, seed=seed), data)
                expect(
                    bool(
                        (losses[i].double() - torch.tensor(one_losses).double()).abs().max() < 1e-4
                    ),
                    f"seed {seed}: losses {losses[i].tolist()} != {one_losses}",
                )
                # Parameters agree only to ~lr: Adam divides gradients near 0 (a bias whose
                # true gradient is ~1e-9) by their own size, which amplifies rounding. The
                # logits must still agree.
                gap = (final_logits(trained[i], data) - final_logits(one, data)).abs().max()
                expect(bool(gap < 1e-2), f"seed {seed}: logits differ by {gap}")

        return check

    p.call(
        train_seeds,
        "seeds [0, 3]",
        lambda: train_seeds(config, data, [0, 3]),
        separate_runs([0, 3]),
    )
    for label, seeds in (
        ("seeds []", []),
        ("seeds [1, 1]", [1, 1]),
        ("seeds [-1]", [-1]),
        ("seeds [1.0]", [1.0]),
        ("seeds [True]", [True]),
        ("seeds ['1']", ["1"]),
        ("seeds 3", 3),
        ("seeds None", None),
        ("seeds [2**64]", [2**64]),
        ("seeds numpy array", np.array([0, 1])),
    ):
        p.call(train_seeds, label, lambda s=seeds: train_seeds(config, data, s))

    def initial_loss_of(seed):
        def check(r):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                fresh = TinyRetriever(config)
            with torch.no_grad():
                logits = fresh(data.keys[:128], data.values[:128])[0][:, -1]
            expected = nn.functional.cross_entropy(logits, data.answers[:128]).item()
            expect(abs(r[2][0].item() - expected) < 1e-4, f"initial {r[2]} != {expected}")
            expect(r[1].shape == (1, 2) and bool(r[1].isfinite().all()), "losses")

        return check

    p.call(
        train_seeds,
        "seeds [2**64 - 2], the largest",
        lambda: train_seeds(config, data, [2**64 - 2]),
        initial_loss_of(2**64 - 2),
    )
    p.call(
        train_seeds,
        "seeds [2**64 - 1] (seed + 1 seeds the batches)",
        lambda: train_seeds(config, data, [2**64 - 1]),
    )
    p.call(
        train_seeds,
        "seeds (numpy int,)",
        lambda: train_seeds(config, data, (np.int64(0),)),
        separate_runs([0]),
    )
    p.call(train_seeds, "config is a dict", lambda: train_seeds({}, data, [0]))
    p.call(train_seeds, "data is a tuple", lambda: train_seeds(config, (data.keys,), [0]))
    p.call(
        train_seeds,
        "data from a bigger key vocabulary",
        lambda: train_seeds(dataclasses.replace(config, keys=8), bigger, [0, 1]),
    )


def probe_practice(p: Probe) -> None:
    from attnbook.practice import EXERCISES, Result, check, describe, hint, progress, solution
    from attnbook.practice._attention import attention as reference_attention

    def verdict_is(passed, status, mistake=None):
        def check_(r):
            expect(isinstance(r, Result), f"returned {type(r).__name__}")
            expect(
                r.passed is passed and r.status == status,
                f"{r.status} / {r.passed}: {r.message[:120]}",
            )
            expect(r.mistake == mistake, f"mistake {r.mistake!r}, expected {mistake!r}")
            expect(isinstance(str(r), str) and isinstance(r._repr_html_(), str), "display")

        return check_

    def mine(q, k, v):  # what a reader writes: SDPA-free, from the formula
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if k.shape[-2] == 0:
            return q.new_zeros((*q.shape[:-1], v.shape[-1]))
        return torch.softmax(scores, dim=-1) @ v

    def no_scale(q, k, v):
        if k.shape[-2] == 0:
            return q.new_zeros((*q.shape[:-1], v.shape[-1]))
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v

    def stub(q, k, v):
        raise NotImplementedError

    def crashes(q, k, v):
        raise ZeroDivisionError("oops")

    def mutates(q, k, v):
        q.mul_(2)
        return mine(q / 2, k, v)

    def nan_out(q, k, v):
        return mine(q, k, v) * NAN

    p.call(
        check,
        "attention: the reference",
        lambda: check("attention", reference_attention),
        verdict_is(True, "correct"),
    )
    p.call(
        check,
        "attention: a correct solution",
        lambda: check("attention", mine),
        verdict_is(True, "correct"),
    )
    p.call(
        check,
        "attention: no scale",
        lambda: check("attention", no_scale),
        verdict_is(False, "known mistake", "no_scale"),
    )
    p.call(
        check,
        "attention: stub",
        lambda: check("attention", stub),
        verdict_is(True, "not attempted"),
    )
    for label, fn in (
        ("raises ZeroDivisionError", crashes),
        ("mutates its input", mutates),
        ("returns NaN", nan_out),
        ("returns None", lambda q, k, v: None),
        ("returns a string", lambda q, k, v: "out"),
        ("takes no arguments", lambda: 0),
        ("returns float16", lambda q, k, v: mine(q, k, v).half()),
        ("returns a list", lambda q, k, v: mine(q, k, v).tolist()),
        ("not callable: a tensor", torch.ones(2)),
        ("not callable: None", None),
        ("not callable: a string", "attention"),
    ):
        p.call(
            check,
            f"attention: {label}",
            lambda f=fn: check("attention", f),
            verdict_is(False, "wrong"),
        )
    for name in EXERCISES:
        p.call(
            check,
            f"{name}: stub",
            lambda n=name: check(n, lambda *a, **kw: (_ for _ in ()).throw(NotImplementedError())),
            verdict_is(True, "not attempted"),
        )
        p.call(
            describe,
            name,
            lambda n=name: describe(n),
            lambda r, n=name: expect(isinstance(r, str) and n in r, "no signature"),
        )
        p.call(
            hint,
            name,
            lambda n=name: hint(n),
            lambda r, n=name: expect(isinstance(r, str) and r.startswith("Hint for"), "no hint"),
        )
        p.call(
            solution,
            name,
            lambda n=name: solution(n),
            lambda r: expect(isinstance(r, str) and r.startswith("def "), "no source"),
        )
        # The book's own solution, and each catalogued mistake's own function, must be told
        # apart: the first passes, the second is named (the registry is the answer key).
        exercise = practice._REGISTRY[name]
        p.call(
            check,
            f"{name}: the reference",
            lambda e=exercise: check(e.name, e.reference),
            verdict_is(True, "correct"),
        )
        mistake = exercise.mistakes[0]
        p.call(
            check,
            f"{name}: mistake {mistake.id}",
            lambda e=exercise, m=mistake: check(e.name, m.wrong),
            verdict_is(False, "known mistake", mistake.id),
        )
    for label, name in (
        ("int", 3),
        ("None", None),
        ("capitalised", "Attention"),
        ("empty", ""),
        ("list", ["attention"]),
        ("bytes", b"attention"),
    ):
        p.call(check, f"name {label}", lambda n=name: check(n, mine))
        p.call(describe, f"name {label}", lambda n=name: describe(n))
        p.call(hint, f"name {label}", lambda n=name: hint(n))
        p.call(solution, f"name {label}", lambda n=name: solution(n))
    p.call(
        progress,
        "after the checks above",
        progress,
        lambda r: expect(isinstance(r, str) and r.startswith("Passed in this kernel"), "text"),
    )

    p.call(
        Result,
        "valid",
        lambda: Result("attention", True, None, "fine", "correct"),
        lambda r: expect(r.title.startswith("✓") and "attention" in str(r), "display"),
    )
    p.call(
        Result,
        "known mistake",
        lambda: str(Result("attention", False, "no_scale", "m", "known mistake")),
        lambda r: expect("no_scale" in r, "mistake not shown"),
    )
    for label, args in (
        ("status 'bogus'", ("attention", True, None, "m", "bogus")),
        ("passed 'yes'", ("attention", "yes", None, "m", "correct")),
        ("passed False with status correct", ("attention", False, None, "m", "correct")),
        ("message None", ("attention", True, None, None, "correct")),
        ("exercise 3", (3, True, None, "m", "correct")),
        ("mistake 3", ("attention", False, 3, "m", "known mistake")),
        ("known mistake without its id", ("attention", False, None, "m", "known mistake")),
    ):
        p.call(Result, label, lambda a=args: (str(Result(*a)), Result(*a)._repr_html_()))


KINDS = ("ok", "clear", "passed on", "unnamed", "raw", "wrong")
PROBES = [
    probe_attention,
    probe_online_softmax,
    probe_masks,
    probe_rope,
    probe_heads,
    probe_costs,
    probe_diagnostics,
    probe_accumulation,
    probe_retrieval,
    probe_retrieval_controls,
    probe_health,
    probe_plots,
    probe_runtime,
    probe_measured,
    probe_norm,
    probe_kv_cache,
    probe_gpt,
    probe_sampling,
    probe_corpus,
    probe_interpolated,
    probe_lm_training,
    probe_induction,
    probe_copying_score,
    probe_induction_model,
    probe_induction_baselines,
    probe_tiled_backward,
    probe_retrieval_seeds,
    probe_practice,
]

PUBLIC_MODULES = [
    attention_module,
    online_softmax,
    masks,
    rope,
    heads,
    costs,
    diagnostics,
    retrieval,
    model_module,
    health,
    plots,
    runtime,
    measured,
    norm,
    kv_cache,
    gpt,
    sampling,
    corpus,
    lm_training,
    induction,
    induction_baselines,
    induction_model,
    tiled_backward,
    retrieval_seeds,
    practice,
]


def run_all() -> list[Outcome]:
    p = Probe()
    for probe in PROBES:
        probe(p)
    return p.outcomes


PUBLIC_CLASSES = (
    "RetrievalConfig",
    "RetrievalData",
    "TinyRetriever",
    "RMSNorm",
    "KVCache",
    "GPTConfig",
    "TinyGPT",
    "CharVocab",
    "TrainConfig",
    "InductionConfig",
    "AttentionOnly",
    "TiledAttention",
    "Result",
)


def public_functions() -> set[str]:
    """Every callable named in the probed modules' ``__all__`` (classes and constants aside)."""
    names = set()
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or name in PUBLIC_CLASSES:
                names.add(name)
    return names


def public_object(name: str) -> object:
    return next(getattr(m, name) for m in PUBLIC_MODULES if name in m.__all__)


def summary(outcomes: list[Outcome]) -> str:
    by_kind = Counter(o.kind for o in outcomes)
    by_module = Counter((o.module, o.kind) for o in outcomes)
    lines = [f"{len(outcomes)} probes: " + ", ".join(f"{k} {by_kind[k]}" for k in KINDS)]
    for module in sorted({o.module for o in outcomes}):
        counts = ", ".join(f"{k} {by_module[module, k]}" for k in KINDS if by_module[module, k])
        lines.append(f"  {module}: {counts}")
    for o in outcomes:
        if o.kind in ("unnamed", "raw", "wrong"):
            lines.append(f"  {o.kind.upper()} {o.function} [{o.label}]: {o.detail}")
    return "\n".join(lines)


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(summary(run_all()))
