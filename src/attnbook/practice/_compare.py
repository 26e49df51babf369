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

A count computed in a fixed-width type is told so: one that equals the exact count wrapped
into 32 bits (a ``torch.int32`` or ``numpy.int32`` product overflows silently above
2,147,483,647), or rounded to float32 (which holds whole numbers exactly only up to 2**24),
is described that way on each case, and the cases include counts beyond 2**31.

Printing: what the function writes to ``sys.stdout`` and ``sys.stderr`` during a call is
captured, not shown (a correct function that prints 20,000 lines of debugging would flood
the notebook); the verdict quotes the first lines and says how many there were.

Time limit: each call of the reader's function gets :data:`TIME_LIMIT_S` seconds. The first
call that runs out is tried once more with the same limit, since a first use of a library
may spend seconds importing it; the verdict then says it was tried twice, so a function that
never returns keeps the reader waiting two limits (6 s), and the cases after it are not run.
All the calls after the first case together get :data:`TOTAL_LIMIT_S` seconds, so a check
never takes much longer than the first call plus that, whatever the function does (a verdict
that hit it says so). In the main
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
import inspect
import io
import linecache
import math
import numbers
import os
import re
import signal
import struct
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
    the call changed in place; ``timed_out`` says it was stopped at the time limit.
    ``attempts`` and ``waited``: how many times the case was called (2 when a first time-out
    was tried again) and the seconds the time limits allowed those calls together.
    ``printed``: the first lines the calls wrote to stdout or stderr (captured, not shown),
    and ``printed_lines`` how many lines there were in all. ``bad_call``: the error is a
    ``TypeError`` of the call itself (parameters the function does not take), not one raised
    inside its body; ``raised_at``: where in the reader's code the error was raised
    (``"line 3, in f: return torch.softmax(s) @ v"``), or ``""``."""

    value: Any = None
    error: BaseException | None = None
    mutated: str | None = None
    timed_out: bool = False
    attempts: int = 1
    waited: float = 0.0
    printed: tuple[str, ...] = ()
    printed_lines: int = 0
    bad_call: bool = False
    raised_at: str = ""


class _Printed(io.TextIOBase):
    """A stream that keeps the first ``keep`` lines written to it (each cut at ``width``
    characters) and counts the rest, so that any amount of printing costs little memory."""

    def __init__(self, keep: int = 5, width: int = 200) -> None:
        super().__init__()
        self.keep, self.width = keep, width
        self.kept: list[str] = []
        self._line = ""  # the line being written, while fewer than `keep` are kept
        self._newlines = 0
        self._open = False  # the last character written was not a newline

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "replace"

    @property
    def buffer(self) -> Any:
        """For code that writes bytes (``sys.stdout.buffer.write``)."""
        return _BytesTo(self)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: Any) -> int:
        text = text if isinstance(text, str) else str(text)
        if not text:
            return 0
        self._newlines += text.count("\n")
        self._open = not text.endswith("\n")
        if len(self.kept) < self.keep:
            *done, self._line = (self._line + text).split("\n")
            self.kept.extend(line[: self.width] for line in done[: self.keep - len(self.kept)])
            self._line = self._line[: self.width]
        return len(text)

    def lines(self) -> tuple[tuple[str, ...], int]:
        """The kept lines (a last one without its newline included) and the count."""
        total = self._newlines + (1 if self._open else 0)
        kept = list(self.kept)
        if self._open and len(kept) < self.keep:
            kept.append(self._line)
        return tuple(kept), total


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
    put back afterwards the global state it may change (default dtype, grad mode, the
    deterministic-algorithms setting); :func:`call` puts back the patched namespaces."""
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


class Unreadable:
    """Stands for a returned tensor the checker could not turn into a plain one (a subclass
    whose data cannot be read): it is no tensor, so it never passes."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<unreadable tensor: {self.why}>"


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` with every tensor in it (one level of tuple or list) made a plain, detached
    ``torch.Tensor`` on the same data, read with torch functions disabled: a subclass whose
    ``__torch_function__`` or methods answer comparisons (``allclose`` always True, ``==``
    all True) cannot grade itself, since the checker never calls the reader's tensor code."""
    if isinstance(value, torch.Tensor):
        try:
            with torch._C.DisableTorchFunction():
                out = torch.Tensor.as_subclass(torch.Tensor.detach(value), torch.Tensor)
        except Exception as error:  # a subclass without readable data
            return Unreadable(f"{type(error).__name__}")
        return out if type(out) is torch.Tensor else Unreadable("not a plain tensor")
    if depth < 2 and isinstance(value, tuple):
        return tuple(plain(v, depth + 1) for v in tuple.__iter__(value))
    if depth < 2 and isinstance(value, list):
        return [plain(v, depth + 1) for v in list.__iter__(value)]
    return value


# Namespaces whose attributes a reader's function might replace (``torch.allclose = ...``,
# ``torch.Tensor.softmax = ...``, ``torch.Tensor.__matmul__ = ...``): put back after every
# call, so that no later comparison, reference, catalogued variant or hint runs the reader's
# version, and nothing the reader patched survives ``check``.
_GUARDED: tuple[Any, ...] = (
    torch,
    torch.Tensor,
    torch.special,
    torch.linalg,
    torch.fft,
    torch.nn.functional,
    torch.testing,
    math,
)
_MISSING = object()


def _snapshot() -> list[tuple[Any, dict[str, Any]]]:
    return [(obj, dict(vars(obj))) for obj in _GUARDED]


def _shadows_base(cls: type, name: str) -> bool:
    """Whether ``name`` is defined by a base class of ``cls`` (``torch.Tensor.softmax`` and
    ``__matmul__`` come from its C base ``torch._C.TensorBase``, not from ``vars(Tensor)``)."""
    return any(name in vars(base) for base in cls.__mro__[1:])


def _restore(snapshot: list[tuple[Any, dict[str, Any]]]) -> None:
    """Put back every attribute that was there before and was replaced or deleted. New
    attributes stay on modules (a submodule the call imported), but on a class (``torch.Tensor``)
    one that shadows a base class's method (``torch.Tensor.softmax = f``, which lands in
    ``vars(torch.Tensor)`` over ``TensorBase.softmax``) is deleted, which brings the base's
    method back."""
    for obj, saved in snapshot:
        current = dict(vars(obj))
        for name, value in saved.items():
            if current.get(name, _MISSING) is not value:
                with contextlib.suppress(Exception):
                    setattr(obj, name, value)
        if isinstance(obj, type):
            for name in current.keys() - saved.keys():
                if _shadows_base(obj, name):
                    with contextlib.suppress(Exception):
                        delattr(obj, name)


def _binds(fn: Callable[..., Any], args: dict[str, Any], keyword: bool) -> bool | None:
    """Whether ``fn``'s signature accepts the checker's call; None when it cannot be read."""
    try:
        signature = inspect.signature(fn)
    except Exception:
        return None
    try:
        signature.bind(**args) if keyword else signature.bind(*args.values())
    except TypeError:
        return False
    except Exception:
        return None
    return True


_NOT_READERS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (torch.__file__, __file__, os.__file__, contextlib.__file__)
)


def _reader_frames(error: BaseException, code: Any) -> list[Any] | None:
    """The traceback entries below the checker's call (``code`` is the frame that calls the
    reader's function), or None when that frame is not in the traceback."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        return None
    frames = []
    tb = tb.tb_next
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


def _where(frames: list[Any]) -> str:
    """``line N, in name: source`` of the deepest frame in the reader's own code (not in
    torch, the standard library or the checker), else of the reader's function itself."""
    try:
        mine = [
            tb
            for tb in frames
            if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_NOT_READERS)
        ]
        tb = mine[-1] if mine else frames[0]
        code = tb.tb_frame.f_code
        line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
        text = f"line {tb.tb_lineno}, in {code.co_name}"
        return f"{text}: {line[:120]}" if line else text
    except Exception:
        return ""


def call(
    fn: Callable[..., Any], inputs: dict[str, Any], *, keyword: bool, limit: float | None = None
) -> Outcome:
    """Call ``fn`` on copies of ``inputs``; never raise (but for KeyboardInterrupt), whatever
    ``fn`` does, and stop it after ``limit`` seconds. What it returns is made plain
    (:func:`plain`). Afterwards the default dtype and grad mode are put back, and so is every
    attribute the call replaced or deleted in ``torch``, ``torch.Tensor`` (dunder methods
    included; an attribute it set over one of ``torch._C.TensorBase``'s methods is deleted),
    ``torch.special``, ``torch.linalg``, ``torch.fft``, ``torch.nn.functional``,
    ``torch.testing`` and ``math`` (:data:`_GUARDED`)."""
    args = copy.deepcopy(inputs)

    def thunk():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(**args) if keyword else fn(*args.values())

    printed = _Printed()
    snapshot = _snapshot()
    try:
        # Set and put back in this thread: a call stopped by the time limit may go on in its
        # own thread, and must not leave the state changed after check returns. What the
        # function prints is captured (sys.stdout and sys.stderr are process-wide, so this
        # holds in the worker thread too, and ends when the call does).
        with (
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
            _torch_state_kept(),
        ):
            value = run_limited(thunk, limit)
    except KeyboardInterrupt:
        _restore(snapshot)
        raise  # the reader pressed interrupt: stop the check, as any cell stops
    except TimeUp:
        _restore(snapshot)
        return Outcome(timed_out=True, waited=limit or 0.0, **_output(printed))
    except BaseException as error:  # SystemExit and the rest: report, never crash
        _restore(snapshot)
        frames = _reader_frames(error, thunk.__code__)
        bad_call = False
        if isinstance(error, TypeError):
            binds = _binds(fn, args, keyword)
            # A TypeError of the call itself: the signature refuses the arguments, or (when
            # it cannot be read) the error comes from the call site, not from inside fn.
            bad_call = binds is False or (binds is None and frames == [])
        where = _where(frames) if frames and not bad_call else ""
        return Outcome(error=error, bad_call=bad_call, raised_at=where, **_output(printed))
    _restore(snapshot)
    value = plain(value)
    for name, original in inputs.items():
        if not _same_input(plain(args[name]), original):
            return Outcome(value=value, mutated=name, **_output(printed))
    return Outcome(value=value, **_output(printed))


class _BytesTo(io.RawIOBase):
    """A bytes stream that decodes into a :class:`_Printed`."""

    def __init__(self, text: _Printed) -> None:
        super().__init__()
        self.text = text

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)


def _output(printed: _Printed) -> dict[str, Any]:
    kept, total = printed.lines()
    return {"printed": kept, "printed_lines": total}


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
    ``"dtype"``, ``"nan"``, ``"inf"``, ``"value"``, for a count ``"ratio"``, or ``"int32"``,
    ``"uint32"``, ``"float32"`` when it is the exact count as that type holds it) and a
    sentence ``text`` that completes "your result ..."."""

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
    width = fixed_width(expected, value)
    if width is not None:
        short = f"{_show(value)} instead of {_show(expected)}: {_WIDTH_WORDS[width][0]}"
        return Difference(width, f"{text}: {' '.join(_WIDTH_WORDS[width])}", short)
    return Difference("ratio" if r is not None else "value", text, text.removeprefix("is "))


_WIDTH_WORDS = {  # (short, the rest)
    "int32": ("the exact count wrapped around 32 bits",
              "(a signed 32-bit integer overflows above 2,147,483,647)"),
    "uint32": ("the exact count modulo 2**32", "(an unsigned 32-bit integer overflowed)"),
    "float32": ("the exact count rounded to float32",
                "(which holds whole numbers exactly only up to 2**24 = 16,777,216)"),
}  # fmt: skip


def _float32(x: float) -> float | None:
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except (OverflowError, struct.error):
        return None


def fixed_width(expected: int | float, value: int | float) -> str | None:
    """``"int32"``, ``"uint32"`` or ``"float32"`` when ``value`` is the exact count
    ``expected`` as a fixed-width type holds it (wrapped into 32 bits, or rounded to float32
    by a product computed in it), else None. Only a count that the type cannot hold counts:
    a wrong count that happens to be near a right one is not called rounding."""
    if not isinstance(expected, int) or isinstance(expected, bool) or value == expected:
        return None
    if isinstance(value, int):
        if expected >= 2**31 and value == (expected + 2**31) % 2**32 - 2**31:
            return "int32"
        if expected >= 2**32 and value == expected % 2**32:
            return "uint32"
        return None
    if not isinstance(value, float) or not math.isfinite(value) or expected <= 2**24:
        return None
    if _float32(float(expected)) == expected or _float32(value) != value:
        return None  # float32 holds this count exactly, or the answer is no float32
    # A product of whole numbers in float32 rounds at each step: a few units of the last
    # place (2**-23 of the value) off the exact count, never more.
    return "float32" if abs(value - expected) <= 2**-20 * expected else None


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
        whys = [
            (name, why)
            for name, e, g in zip(names, expected, got, strict=True)
            if (why := _tensor_difference(e, g)) is not None
        ]
        if not whys:
            return None
        # A part of the wrong type, shape or dtype is said first, even after a part with wrong
        # numbers: it is the plainer symptom, and the case that shows it is cited first.
        name, why = next(((n, w) for n, w in whys if w.kind in ("type", "shape", "dtype")), whys[0])
        return Difference(why.kind, f"has {name} that {why.text}", f"{name}: {why.short}")
    return _number_difference(expected, got)


def _finite_parts_agree(a: torch.Tensor, b: torch.Tensor, lenient: bool = False) -> bool:
    """Equal shapes and dtypes, NaN or inf in the same places and close numbers elsewhere.
    ``lenient``: ``a`` (a catalogued variant) may have NaN or inf where ``b`` has numbers: a
    guarded version of the same mistake (``nan_to_num``, a ``where`` for an empty side)
    agrees wherever the variant is defined (:func:`same_behaviour` asks that the variant
    have some finite number)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(_EQUAL(a, b))
    a64, b64 = a.detach().double(), b.detach().double()
    fa, fb = torch.isfinite(a64), torch.isfinite(b64)
    if lenient:
        if not bool(fb[fa].all()):
            return False
    elif not _EQUAL(fa, fb):
        return False
    rtol, atol = TOLERANCE.get(a.dtype, (1e-4, 1e-4))
    return bool(_ISCLOSE(a64[fa], b64[fa], rtol=rtol, atol=atol).all())


def _same_value(a: Any, b: Any, lenient: bool = False) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _finite_parts_agree(a, b, lenient)
    if isinstance(a, tuple | list):
        return (
            isinstance(b, tuple | list)
            and len(a) == len(b)
            and all(_same_value(x, y, lenient) for x, y in zip(a, b, strict=True))
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


def _any_finite(value: Any) -> bool:
    """Whether a value holds a finite float somewhere (a variant all NaN matches nothing
    leniently)."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and bool(torch.isfinite(value).any())
    if isinstance(value, tuple | list):
        return any(_any_finite(v) for v in value)
    return False


def same_behaviour(a: Outcome, b: Outcome, *, lenient: bool = False) -> bool:
    """Two calls behaved alike: both raised the same kind of error, or returned equal values
    (any non-finite entry matching any other). ``lenient``: ``a`` is a catalogued variant,
    and where it has NaN or inf ``b`` may have any number (see :func:`_finite_parts_agree`)."""
    if a.timed_out or b.timed_out:
        return a.timed_out and b.timed_out
    if (a.mutated is None) != (b.mutated is None):
        return False
    if a.error is not None or b.error is not None:
        return a.error is not None and b.error is not None and _gist(a.error) == _gist(b.error)
    try:
        return _same_value(a.value, b.value, lenient and _any_finite(a.value))
    except Exception:  # a value the comparison cannot handle is no match
        return False
