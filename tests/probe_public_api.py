"""An outside probe of every public function of the core ``attnbook`` modules.

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
  a model fed the wrong dtype), which ``attnbook`` passes on unchanged, as it should.

``tests/test_probe.py`` runs it and requires no ``unnamed``, ``raw`` or ``wrong`` outcome.
Run ``python tests/probe_public_api.py`` for the counts per module and kind.

What it does not try: sizes whose allocation would be huge (``causal_mask(10**6)`` asks torch
for a terabyte); those fail inside torch's allocator, not in ``attnbook``.
"""

from __future__ import annotations

import inspect
import math
import re
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbook import attention as attention_module
from attnbook import costs, diagnostics, heads, masks, online_softmax, plots, retrieval, rope
from attnbook import retrieval_model as model_module
from attnbook import training_health as health

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
            if _raised_in_callback(error):
                self.outcomes.append(Outcome(module, function, label, "passed on", message[:160]))
                return
            known = (*params, *names)
            named = any(re.search(rf"(?<![\w.]){re.escape(n)}\b", message) for n in known)
            kind = "clear" if named else "unnamed"
            self.outcomes.append(Outcome(module, function, label, kind, message[:160]))
            return
        except Exception as error:  # the probe's point: anything else is a defect
            detail = f"{type(error).__name__}: {str(error)[:160]}"
            kind = "passed on" if _raised_in_callback(error) else "raw"
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
    from attnbook.masks import causal_mask
    from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge, tiled_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 3, 4, 8, generator=g),
        torch.randn(2, 3, 7, 8, generator=g),
        torch.randn(2, 3, 7, 5, generator=g),
    )
    base = {"q": q, "k": k, "v": v}

    def oracle(args, causal):
        qq, kk, vv = args["q"], args["k"], args["v"]
        tq, tk = qq.shape[-2], kk.shape[-2]
        if causal and tq and tk:
            mask = causal_mask(tq, tk, device=qq.device)
        elif causal and tk:
            mask = torch.ones(0, tk, dtype=torch.bool, device=qq.device)
        else:
            mask = None
        return oracle_attention(qq, kk, vv, mask)

    for causal in (False, True):
        for name in ("q", "k", "v"):
            for label, variant in tensor_variants(base[name]):
                args = {**base, name: variant}
                check = None
                if all(isinstance(x, torch.Tensor) for x in args.values()):
                    check = check_tensor_result(
                        lambda a=args, c=causal: oracle(a, c), args["q"].dtype
                    )
                p.call(
                    tiled_attention,
                    f"causal={causal} {name}: {label}",
                    lambda a=args, c=causal: tiled_attention(**a, block_size=3, causal=c),
                    check,
                )
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


def probe_runtime(p: Probe) -> None:
    from attnbook.runtime import setup

    threads = torch.get_num_threads()
    try:
        for label, value in number_variants(7):
            if label in ("numpy int", "huge int"):
                continue  # numpy int is valid and changes global state; huge is tried below
            p.call(setup, f"seed {label}", lambda v=value: setup(v))
        p.call(setup, "seed 2**32", lambda: setup(2**32))
        p.call(setup, "threads 2**40", lambda: setup(0, threads=2**40))
        p.call(setup, "threads 0", lambda: setup(0, threads=0))
    finally:
        torch.set_num_threads(threads)


KINDS = ("ok", "clear", "passed on", "unnamed", "raw", "wrong")
PROBES = [
    probe_attention,
    probe_online_softmax,
    probe_masks,
    probe_rope,
    probe_heads,
    probe_costs,
    probe_diagnostics,
    probe_retrieval,
    probe_health,
    probe_plots,
    probe_runtime,
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
]


def run_all() -> list[Outcome]:
    p = Probe()
    for probe in PROBES:
        probe(p)
    return p.outcomes


def public_functions() -> set[str]:
    """Every callable named in the probed modules' ``__all__`` (classes and constants aside)."""
    names = set()
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or name in (
                "RetrievalConfig",
                "RetrievalData",
                "TinyRetriever",
            ):
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
