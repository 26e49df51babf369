"""Chapter 13's training loop under DDP (gloo, 2 processes started by torchrun on loopback)
equals one process on the combined batch; the per-process token mean is the accumulation
denominator bug, the global token mean its fix."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnbook.corpus import CharVocab, book_text
from attnbook.data_parallel import global_token_mean, train_lm_ddp
from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.lm_training import TrainConfig, train_lm

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ddp_train.py"


def load_script():
    spec = importlib.util.spec_from_file_location("ddp_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_needs_a_process_group():
    config = GPTConfig(vocab=8)
    with pytest.raises(RuntimeError, match="torchrun"):
        train_lm_ddp(config, TrainConfig(steps=1), torch.arange(100) % 8)
    with pytest.raises(RuntimeError, match="torchrun"):
        global_token_mean(torch.zeros(1, 2, 8), torch.zeros(1, 2, dtype=torch.long))


@pytest.mark.slow
def test_two_process_ddp_matches_one_process_on_the_combined_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    subprocess.run(  # --standalone: a rendezvous on localhost, a free port; nothing leaves it
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(SCRIPT), str(out),
         "--steps", "12"],
        check=True, timeout=300, env=env, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    run = torch.load(out)
    assert run["world"] == 2
    text = book_text()[: run["text_chars"]]
    vocab = CharVocab(text)
    config = GPTConfig(vocab=len(vocab))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, losses = train_lm(config, TrainConfig(steps=run["steps"]), vocab.encode(text))
    finally:
        torch.set_num_threads(threads)
    assert len(losses) == len(run["losses"]) == 12
    assert max(abs(a - b) for a, b in zip(losses, run["losses"], strict=True)) < 1e-5
    assert losses[-1] < losses[0] - 0.5  # it trained: the comparison is not of two idle runs
    state = model.state_dict()
    gap = max((state[k] - v).abs().max().item() for k, v in run["state"].items())
    assert gap < 1e-5

    # The padded batch: one process on all of it, averaging over every valid token
    inputs, labels = load_script().padded_batch(config.vocab, config.context)
    torch.manual_seed(0)
    reference = TinyGPT(config)
    F.cross_entropy(reference(inputs).flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
    want = torch.cat([p.grad.flatten() for p in reference.parameters()])
    fixed, buggy = run["grads"]["global_mean"], run["grads"]["local_mean"]
    assert (fixed - want).abs().max() < 1e-6 * want.abs().max() * 100
    assert (buggy - want).abs().max() > 0.5 * want.abs().max()  # the mean of means is wrong
