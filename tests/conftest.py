"""Shared test settings: one CPU thread and a fast, deadline-free hypothesis profile."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings

# One thread keeps float reductions in a fixed order, and small tensors gain nothing from more.
torch.set_num_threads(1)

# Torch's first call of an op can be slow, which would trip hypothesis's per-example deadline.
# derandomize: every run (each CI job, each machine) tries the same examples, so a failure
# reproduces and a pass means the same thing everywhere; with no example database, nothing
# from earlier runs changes what is tried.
settings.register_profile(
    "attnbook",
    deadline=None,
    max_examples=40,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("attnbook")


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Give every test the same random tensors, whatever ran before it."""
    torch.manual_seed(0)
