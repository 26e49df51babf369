"""The outside probe of the public API (tests/probe_public_api.py) finds no defect.

Every probe must end in a result an oracle confirms, a ValueError/TypeError that names an
argument, or an error passed on unchanged from the reader's own callable. A raw traceback from
inside attnbook, a message naming no argument, or a silent wrong answer fails this test, and
the failure lists each one.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections import Counter
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")


def _load():
    path = Path(__file__).with_name("probe_public_api.py")
    spec = importlib.util.spec_from_file_location("probe_public_api", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


probe = _load()


@pytest.fixture(scope="module")
def outcomes():
    # Run once, when a test asks for it (not at import: every pytest run collects this file).
    return probe.run_all()


def test_no_raw_traceback_unnamed_error_or_wrong_answer(outcomes):
    defects = [o for o in outcomes if o.kind in ("unnamed", "raw", "wrong")]
    assert not defects, probe.summary(outcomes)


def test_every_public_function_is_probed_both_ways(outcomes):
    """Each public function is called at least once successfully and, if it takes arguments,
    rejected at least once."""
    kinds = {}
    for o in outcomes:
        kinds.setdefault(o.function.split(".")[0], set()).add(o.kind)
    for name in probe.public_functions():
        assert name in kinds, f"{name} is never probed"
        assert "ok" in kinds[name], f"{name} never returns in the probe"
        takes_arguments = bool(inspect.signature(probe.public_object(name)).parameters)
        assert "clear" in kinds[name] or not takes_arguments, f"{name} is never rejected"


def test_the_probe_is_large_and_checks_results(outcomes):
    counts = Counter(o.kind for o in outcomes)
    assert sum(counts.values()) > 1000 and counts["ok"] > 400 and counts["clear"] > 700


def test_the_probe_tells_a_wrong_answer_from_a_right_one():
    """The probe itself can fail: a planted wrong result and a raw error are both caught."""
    p = probe.Probe()
    p.call(len, "planted wrong", lambda: 3, probe.equals(4))
    p.call(len, "planted raw", lambda: [][1])
    p.call(len, "planted unnamed", lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert [o.kind for o in p.outcomes] == ["wrong", "raw", "unnamed"]
