"""Chapter 13's training loop data-parallel over 2 processes (DDP over gloo, loopback only).

    torchrun --standalone --nproc-per-node 2 scripts/ddp_train.py OUT.pt [--steps 12]

Rank 0 saves to OUT.pt: the per-step global losses, the final weights, and the gradients of
one padded global batch under the two losses of :mod:`attnbook.data_parallel` (a mean of
per-process means, and the global token mean). ``tests/test_data_parallel.py`` runs it and
compares everything with one process on the combined batch.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from attnbook.corpus import CharVocab, book_text
from attnbook.data_parallel import global_token_mean, local_token_mean, train_lm_ddp
from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.lm_training import TrainConfig

TEXT_CHARS = 20_000  # the start of the book's text: enough windows, quick to encode


def padded_batch(vocab: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A global batch of 4 windows whose labels are padded (-100) unevenly: the first two
    (process 0's) keep 60 and 50 tokens, the last two (process 1's) keep 10 and 5."""
    g = torch.Generator().manual_seed(3)
    inputs = torch.randint(0, vocab, (4, context), generator=g)
    labels = torch.randint(0, vocab, (4, context), generator=g)
    for row, keep in enumerate((60, 50, 10, 5)):
        labels[row, keep:] = -100
    return inputs, labels


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # torchrun's env:// rendezvous, on 127.0.0.1
    rank, world = dist.get_rank(), dist.get_world_size()
    text = book_text()[:TEXT_CHARS]
    vocab = CharVocab(text)
    config = GPTConfig(vocab=len(vocab))
    recipe = TrainConfig(steps=args.steps)
    model, losses = train_lm_ddp(config, recipe, vocab.encode(text))

    inputs, labels = padded_batch(config.vocab, config.context)
    share = len(inputs) // world
    mine = slice(rank * share, (rank + 1) * share)
    grads = {}
    for name, loss_fn in (("local_mean", local_token_mean), ("global_mean", global_token_mean)):
        torch.manual_seed(0)
        replica = DistributedDataParallel(TinyGPT(config))
        loss_fn(replica(inputs[mine]), labels[mine]).backward()
        grads[name] = torch.cat([p.grad.flatten() for p in replica.module.parameters()])
    if rank == 0:
        torch.save(
            {"world": world, "losses": losses, "state": model.state_dict(), "grads": grads,
             "text_chars": TEXT_CHARS, "steps": args.steps,
             "master_addr": os.environ.get("MASTER_ADDR")},
            args.out,
        )  # fmt: skip
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
