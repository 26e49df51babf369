"""``attnbook.measured.claim`` and the seed override of ``attnbook.setup``: what the
robustness sweep relies on."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.measured import CLAIMS_LOG, claim
from attnbook.runtime import SEED_OVERRIDE, setup, training_seed


def test_a_claim_inside_its_bounds_passes_and_outside_fails():
    claim("x", 0.5, above=0.4, below=0.6)
    claim("x", torch.tensor([[0.45, 0.55]]), above=0.4, below=0.6)
    claim("x", [1, 2.5], above=0)
    for value in (0.4, 0.6, [0.5, 0.61], torch.tensor([0.5, 0.3])):
        with pytest.raises(AssertionError, match="x: measured"):
            claim("x", value, above=0.4, below=0.6)


def test_nan_is_never_a_pass():
    for value in (math.nan, [0.5, math.nan], torch.tensor([0.5, math.nan])):
        with pytest.raises(AssertionError, match="nan"):
            claim("x", value, above=0.0)
    for value in (math.inf, [1.0, -math.inf], torch.tensor([math.inf])):
        with pytest.raises(AssertionError):  # a diverged value supports no bound
            claim("x", value, above=0.0)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=8), st.floats(-1e6, 1e6))
def test_a_claim_holds_exactly_when_every_element_is_above(values, bound):
    holds = all(v > bound for v in values)
    if holds:
        claim("x", values, above=bound)
        claim("x", torch.tensor(values, dtype=torch.float64), above=bound)
    else:
        with pytest.raises(AssertionError):
            claim("x", values, above=bound)


def test_under_the_sweep_claims_are_recorded_not_raised(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(CLAIMS_LOG, str(log))
    claim("good", torch.tensor([0.5, 0.7]), above=0.4)
    claim("bad", 0.3, above=0.4, below=1.0)
    claim("nan", math.nan, below=1.0)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["name"], r["held"]) for r in records] == [
        ("good", True),
        ("bad", False),
        ("nan", False),
    ]
    assert records[0]["min"] == pytest.approx(0.5) and records[0]["max"] == pytest.approx(0.7)
    assert (records[1]["above"], records[1]["below"]) == (0.4, 1.0)


def test_the_training_seed_is_the_chapters_unless_the_sweep_overrides_it(monkeypatch):
    monkeypatch.delenv(SEED_OVERRIDE, raising=False)
    assert training_seed(12) == 12 and setup(12) is None
    first = torch.rand(3)
    monkeypatch.setenv(SEED_OVERRIDE, "7")
    assert training_seed(12) == 7
    setup(12)
    assert not torch.equal(torch.rand(3), first)  # the global generators follow the override
    setup(7)
    second = torch.rand(3)
    setup(0)
    assert torch.equal(torch.rand(3), second)  # under the override every seed is 7
    monkeypatch.setenv(SEED_OVERRIDE, "")
    assert training_seed(3) == 3  # empty: no override
