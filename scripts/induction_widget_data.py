"""Retrain the induction chapter's models and rewrite the head explorer's stored attention maps.

    python scripts/induction_widget_data.py

The head explorer (``attnbook.widgets.head_rows``) shows attention rows of the models that the
induction-heads chapter trains. A page has no model to run, so the rows are stored with the
package in ``src/attnbook/widgets/data/head_explorer.json``. Run this after changing the task,
the model or its training, then `make sync` chapter 14: it prints how far its freshly trained
models are from the stored rows, and strict nbval fails if that line changes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

from attnbook.induction_model import InductionConfig, train
from attnbook.widgets.head_rows import MODELS, sample_maps

OUT = Path(__file__).resolve().parents[1] / "src/attnbook/widgets/data/head_explorer.json"


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as in the chapter: the same float reductions, the same numbers
    config = InductionConfig()
    runs = {MODELS[0]: train(config), MODELS[1]: train(dataclasses.replace(config, layers=1))}
    data = sample_maps({k: v[0] for k, v in runs.items()}, {k: v[1] for k, v in runs.items()})
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(Path.cwd())}: {OUT.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
