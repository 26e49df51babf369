"""benchmarks/gpu_attention.py runs end to end on the CPU (--dry-run), so it is ready for a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_attention.py"


def load():
    spec = importlib.util.spec_from_file_location("gpu_attention", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_computes_every_table(capsys):
    result = load().main(["--dry-run"])
    printed = capsys.readouterr().out
    ran = [row for row in result["attention"] if "forward s" in row]
    names = {row["impl"] for row in ran}
    assert {"sdpa math", "attnbook tiled", "attnbook recomputing"} <= names
    assert all(row["max error"] < 1e-5 for row in ran)  # each checked against float32 SDPA
    assert all(row["fwd+bwd s"] > 0 and row["forward TFLOP/s"] > 0 for row in ran)
    refused = [row for row in result["attention"] if "forward s" not in row]
    assert all(row["note"] for row in refused)  # a backend that does not run says why
    assert [row["batch"] for row in result["decode"]] == [1, 2]
    assert all(row["tokens/s"] > 0 and row["roofline tokens/s"] > 0 for row in result["decode"])
    assert result["bandwidth"] > 0 and "| n | impl |" in printed and "Decoding:" in printed


def test_without_a_gpu_it_says_so(monkeypatch):
    module = load()
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        module.main([])
