"""Running a function on a case without letting it crash or hang the checker, and comparing.

Tolerances follow the dtype of the reference output (float16 is loose, float64 is not tight
either: a correct solution may compute angles or sums in float32). NaN is never equal to a
reference number; when two *wrong* answers are compared (the reader's and a catalogued
variant's), every non-finite entry counts as the same failure.

Rules for what a function returns (stated once here, applied to every exercise):

* a tensor answer must have the reference's shape and dtype (the dtype each exercise's
  contract names, usually that of its main input; computing inside in a wider dtype is fine
  when the result is cast back); views, non-contiguous tensors and subclasses are accepted;
* a tuple answer may be a tuple, a list or a namedtuple of the right length;
* a count (an integer answer) may be any real scalar: a Python ``int`` or ``float``, a NumPy
  scalar or 0-d array, or a 0-d tensor; it passes when it equals the exact count (every count
  in the cases is below 2**53, so float arithmetic represents it exactly). A ``bool``, a
  string or a tensor with a dimension is not a count.

Time limit: each call of the reader's function gets :data:`TIME_LIMIT_S` seconds (the first
call that runs out is tried once more, since a first use of a library may spend seconds
importing it; a second time-out ends the check and the cases left are not run), and all the
calls after the first case together get :data:`TOTAL_LIMIT_S` seconds, so a check never
takes much longer than the first call plus that, whatever the function does (a verdict that
hit it says so). In the main
thread of a Linux or macOS process (a Jupyter kernel, a script) an interval timer (SIGALRM)
raises inside the function when the time is up; elsewhere (Windows, a worker thread) the
function runs in a daemon thread that the checker stops waiting for, and asks to stop, at
the limit. Either way the limit is checked between Python steps: one single C call (a huge
integer power, say) finishes before the function can be stopped, and so does an import in
progress (stopping one half-way can break the library for the rest of the kernel).

``KeyboardInterrupt`` is the one exception that is passed on: it is how Jupyter's interrupt
button (SIGINT) reaches running code, and a checker that swallowed it would make a slow check
impossible to stop. Everything else the function raises, ``SystemExit`` and other
``BaseException`` subclasses included, is reported, never propagated.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import math
import numbers
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# Bound at import, so that a reader's function that patches torch cannot grade itself.
_EQUAL, _ISCLOSE = torch.equal, torch.isclose

TIME_LIMIT_S = 3.0
"""Seconds one call of the reader's function may take before it is stopped."""

TOTAL_LIMIT_S = 10.0
"""Seconds the calls of one check after its first case may take together; the cases left are
then not run and the verdict says how many finished (a function taking 2.9 s a call once took
32 s to check). The first case is left out of it because a first call may spend seconds
importing (``torch.utils.flop_counter``: 6 s on a loaded 2-core machine), which the per-call
limit also waits for; a check of a function that never returns takes at most two calls'
:data:`TIME_LIMIT_S`, and any other at most the first call plus ``TOTAL_LIMIT_S``."""

# (rtol, atol) per dtype. Catalogued mistakes miss by far more than this on some case (a test
# checks it), so a loose tolerance costs no recognition and never fails a correct solution.
TOLERANCE = {
    torch.float64: (1e-4, 1e-4),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


class TimeUp(BaseException):
    """Raised inside the reader's function when its time is up (a BaseException, so that a
    plain ``except Exception`` in the reader's code does not swallow it)."""


@dataclass(frozen=True)
class Outcome:
    """What one call did: returned ``value``, or raised ``error``; ``mutated`` names an input
    the call changed in place; ``timed_out`` says it was stopped at the time limit."""

    value: Any = None
    error: BaseException | None = None
    mutated: str | None = None
    timed_out: bool = False


def _same_input(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            both_nan = torch.isnan(a) & torch.isnan(b)
            return bool(((a == b) | both_nan).all())
        return bool(_EQUAL(a, b))
    if isinstance(a, tuple | list):
        return (
            isinstance(b, tuple | list)
            and len(a) == len(b)
            and all(_same_input(x, y) for x, y in zip(a, b, strict=True))
        )
    try:
        return bool(a == b)
    except Exception:  # an input the reader replaced by an object with an odd __eq__
        return False


def _importing(frame: Any) -> bool:
    """Whether ``frame`` or a caller of it is running an import. Stopping a function in the
    middle of a module's import (a first use of ``torch.func`` imports ``torch._dynamo``)
    can leave that library half-registered for the rest of the kernel, so the stop waits
    until the import has finished."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _with_alarm(thunk: Callable[[], Any], limit: float) -> Any:
    def on_alarm(signum, frame):
        if not _importing(frame):  # otherwise the timer fires again 0.2 s later
            raise TimeUp

    previous = signal.signal(signal.SIGALRM, on_alarm)
    start = time.monotonic()
    # Fire again every 0.2 s after the limit, in case the function swallows the first one.
    earlier = signal.setitimer(signal.ITIMER_REAL, limit, 0.2)
    try:
        return thunk()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if earlier[0] > 0:  # someone else's timer (pytest-timeout, say): put it back
            left = max(earlier[0] - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, earlier[1])


def _in_thread(thunk: Callable[[], Any], limit: float) -> Any:
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = thunk()
        except BaseException as error:  # handed to the caller below
            box["error"] = error

    worker = threading.Thread(target=target, name="attnbook-practice-call", daemon=True)
    worker.start()
    worker.join(limit)
    while worker.is_alive() and _importing(sys._current_frames().get(worker.ident)):
        worker.join(0.2)  # never stop it inside an import (see _importing)
    if worker.is_alive():  # ask it to stop at its next Python step, and stop waiting
        ident = worker.ident
        if ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                       ctypes.py_object(TimeUp))  # fmt: skip
        raise TimeUp
    if "error" in box:
        raise box["error"]
    return box.get("value")


@contextlib.contextmanager
def _torch_state_kept() -> Iterator[None]:
    """Run a reader's function with uninitialised memory filled with NaN (the largest integer
    for integer dtypes), so that an output left as ``torch.empty`` never passes by chance, and
    put back afterwards the global state it may change (default dtype, grad mode)."""
    import torch.utils.deterministic as deterministic

    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    was = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn, never refuse an op
    deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        deterministic.fill_uninitialized_memory = was[2]
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)


def run_limited(thunk: Callable[[], Any], limit: float | None) -> Any:
    """``thunk()``, stopped with :class:`TimeUp` after ``limit`` seconds (None: no limit)."""
    if limit is None:
        return thunk()
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        return _with_alarm(thunk, limit)
    return _in_thread(thunk, limit)


def call(
    fn: Callable[..., Any], inputs: dict[str, Any], *, keyword: bool, limit: float | None = None
) -> Outcome:
    """Call ``fn`` on copies of ``inputs``; never raise (but for KeyboardInterrupt), whatever
    ``fn`` does, and stop it after ``limit`` seconds."""
    args = copy.deepcopy(inputs)

    def thunk():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(**args) if keyword else fn(*args.values())

    try:
        # Set and put back in this thread: a call stopped by the time limit may go on in its
        # own thread, and must not leave the state changed after check returns.
        with _torch_state_kept():
            value = run_limited(thunk, limit)
    except KeyboardInterrupt:
        raise  # the reader pressed interrupt: stop the check, as any cell stops
    except TimeUp:
        return Outcome(timed_out=True)
    except BaseException as error:  # SystemExit and the rest: report, never crash
        return Outcome(error=error)
    for name, original in inputs.items():
        if not _same_input(args[name], original):
            return Outcome(value=value, mutated=name)
    return Outcome(value=value)


def _at(t: torch.Tensor, flat: int) -> str:
    """Index of the ``flat``-th element of ``t``, written ``[i, j, ...]``."""
    idx = []
    for size in reversed(t.shape):
        flat, i = divmod(flat, size)
        idx.append(i)
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


@dataclass(frozen=True)
class Difference:
    """How a value differs from the reference: ``kind`` (``"type"``, ``"shape"``,
    ``"dtype"``, ``"nan"``, ``"inf"``, ``"value"``) and a sentence ``text`` that completes
    "your result ..."."""

    kind: str
    text: str
    short: str = ""


def _tensor_difference(expected: torch.Tensor, got: Any) -> Difference | None:
    if not isinstance(got, torch.Tensor):
        return Difference(
            "type",
            f"is a {type(got).__name__}, not a torch.Tensor",
            f"a {type(got).__name__}, not a tensor",
        )
    if got.shape != expected.shape:
        shapes = tuple(got.shape), tuple(expected.shape)
        return Difference(
            "shape",
            f"has shape {shapes[0]}; expected {shapes[1]}",
            f"shape {shapes[0]} instead of {shapes[1]}",
        )
    if got.dtype != expected.dtype:
        return Difference(
            "dtype",
            f"has dtype {got.dtype}; expected {expected.dtype}",
            f"dtype {got.dtype} instead of {expected.dtype}",
        )
    if got.device != expected.device:
        return Difference("type", f"is on {got.device}; expected {expected.device}")
    if expected.numel() == 0:
        return None
    e, g = expected.flatten(), got.detach().flatten()
    if expected.dtype == torch.bool:
        wrong = (e != g).nonzero().flatten()
        if len(wrong) == 0:
            return None
        i = int(wrong[0])
        return Difference(
            "value",
            f"is {bool(g[i])} at {_at(expected, i)} where it should be "
            f"{bool(e[i])} ({len(wrong)} of {e.numel()} entries differ)",
            f"{len(wrong)} of {e.numel()} entries differ",
        )
    if not expected.is_floating_point():
        wrong = (e != g).nonzero().flatten()
        if len(wrong) == 0:
            return None
        i = int(wrong[0])
        return Difference("value", f"is {g[i].item()} at {_at(expected, i)} instead of "
                                   f"{e[i].item()}",
                          f"{len(wrong)} of {e.numel()} entries differ")  # fmt: skip
    nan = torch.isnan(g) & ~torch.isnan(e)
    if nan.any():
        i = int(nan.nonzero()[0])
        return Difference("nan", f"contains NaN ({int(nan.sum())} of {e.numel()} entries, the "
                                 f"first at {_at(expected, i)}, where the reference has "
                                 f"{e[i].item():.4g})",
                          f"NaN in {int(nan.sum())} of {e.numel()} entries")  # fmt: skip
    e64, g64 = e.double(), g.double()
    inf = torch.isinf(g64) & (g64 != e64)
    if inf.any():
        i = int(inf.nonzero()[0])
        return Difference("inf", f"is {g[i].item()} at {_at(expected, i)} where "
                                 f"{e[i].item():.4g} was expected",
                          f"{int(inf.sum())} entries infinite")  # fmt: skip
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-4, 1e-4))
    bad = ~_ISCLOSE(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    err = (g64 - e64).abs().nan_to_num(nan=math.inf).masked_fill(~bad, 0)
    i = int(err.argmax())
    return Difference("value",
        f"differs from the reference by up to {err[i].item():.3g} "
        f"(at {_at(expected, i)}: {g[i].item():.4g} instead of {e[i].item():.4g}; "
        f"{int(bad.sum())} of {e.numel()} entries are off)",
        f"off by up to {err[i].item():.3g} ({int(bad.sum())} of {e.numel()} entries)",
    )  # fmt: skip


def as_count(got: Any) -> tuple[int | float | None, str]:
    """``got`` as a number under the rule for counts, or None and the reason it is not one."""
    if isinstance(got, bool):
        return None, "is a bool, not a number"
    if isinstance(got, torch.Tensor):
        if got.dim() != 0:
            return None, (f"is a tensor of shape {tuple(got.shape)}; a count is a number "
                          f"(an int, a float or a 0-d tensor)")  # fmt: skip
        if got.dtype == torch.bool or got.is_complex() or got.device.type == "meta":
            return None, f"is a 0-d {got.dtype} tensor, not a real number"
        got = got.item()
    elif hasattr(got, "ndim") and hasattr(got, "item") and getattr(got, "ndim", 1) == 0:
        got = got.item()  # a NumPy scalar or 0-d array
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return None, f"is a {type(got).__name__}, not a number"
    if isinstance(got, numbers.Integral):
        return int(got), ""
    return float(got), ""


def _show(n: int | float) -> str:
    if isinstance(n, int) and n.bit_length() > 100:
        return f"a number of about {int(n.bit_length() * math.log10(2)) + 1} digits"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.6g}"
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def ratio(got: int | float, expected: int | float) -> float | None:
    """got / expected as a float, or None when it has no finite value."""
    try:
        r = got / expected
    except (ZeroDivisionError, OverflowError):
        return None
    return r if math.isfinite(r) else None


def _number_difference(expected: int | float, got: Any) -> Difference | None:
    value, why = as_count(got)
    if value is None:
        return Difference("type", why, why.removeprefix("is "))
    if isinstance(value, float) and not math.isfinite(value):
        return Difference("nan" if math.isnan(value) else "inf", f"is {value}", f"{value}")
    if value == expected:
        return None
    r = ratio(value, expected)
    text = f"is {_show(value)} instead of {_show(expected)}"
    if r is not None:  # enough digits that a ratio near 1 does not read as 1
        digits = 4 if abs(r - 1) >= 1e-3 else 4 + math.ceil(-math.log10(abs(r - 1)))
        text += f" ({r:.{min(digits, 15)}g} times the reference)"
    if isinstance(value, float) and abs(value - expected) < 1:
        text += "; a float that misses the count by rounding"
    return Difference("ratio" if r is not None else "value", text, text.removeprefix("is "))


def difference(expected: Any, got: Any, names: tuple[str, ...] = ()) -> Difference | None:
    """Say how ``got`` differs from the reference output ``expected``; None if it does not."""
    if isinstance(expected, torch.Tensor):
        return _tensor_difference(expected, got)
    if isinstance(expected, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(expected):
            return Difference(
                "type",
                f"is not a tuple of {len(expected)} ({', '.join(names)})",
                f"not a tuple of {len(expected)}",
            )
        for name, e, g in zip(names, expected, got, strict=True):
            why = _tensor_difference(e, g)
            if why:
                return Difference(why.kind, f"has {name} that {why.text}", f"{name}: {why.short}")
        return None
    return _number_difference(expected, got)


def _finite_parts_agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(_EQUAL(a, b))
    a64, b64 = a.detach().double(), b.detach().double()
    fa, fb = torch.isfinite(a64), torch.isfinite(b64)
    if not _EQUAL(fa, fb):
        return False
    rtol, atol = TOLERANCE.get(a.dtype, (1e-4, 1e-4))
    return bool(_ISCLOSE(a64[fa], b64[fb], rtol=rtol, atol=atol).all())


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _finite_parts_agree(a, b)
    if isinstance(a, tuple | list):
        return (
            isinstance(b, tuple | list)
            and len(a) == len(b)
            and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
        )
    x, _ = as_count(a)
    y, _ = as_count(b)
    if x is None or y is None:
        return False
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    if not (math.isfinite(x) and math.isfinite(y)):  # inf is within any tolerance of inf * r
        return x == y
    try:
        return x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))
    except OverflowError:
        return False


def _gist(error: BaseException) -> str:
    """The error's kind and wording without the op's name and the numbers, so that
    ``amax(): ... dim -1 ...`` and ``max(): ... dim 2 ...`` read as the same failure."""
    try:
        text = re.sub(r"^[\w.]+\(\):\s*", "", str(error).strip())
    except Exception:
        text = ""
    return f"{type(error).__name__}: {re.sub(r'-?[0-9]+', '#', text)[:40]}"


def same_behaviour(a: Outcome, b: Outcome) -> bool:
    """Two calls behaved alike: both raised the same kind of error, or returned equal values
    (any non-finite entry matching any other)."""
    if a.timed_out or b.timed_out:
        return a.timed_out and b.timed_out
    if (a.mutated is None) != (b.mutated is None):
        return False
    if a.error is not None or b.error is not None:
        return a.error is not None and b.error is not None and _gist(a.error) == _gist(b.error)
    try:
        return _same_value(a.value, b.value)
    except Exception:  # a value the comparison cannot handle is no match
        return False
