"""Time and peak memory of naive, tiled and fused (SDPA) attention across sequence lengths.

    .venv/bin/python benchmarks/tiled_attention.py            # n = 512 ... 4096, under a minute
    .venv/bin/python benchmarks/tiled_attention.py --quick    # n = 256 ... 1024, a few seconds

One head, d = 64, float32, on the CPU. Not a test: numbers depend on the machine and its load.

* time: the best of ``--repeats`` runs (the minimum is the least disturbed by other work).
* memory: peak bytes of the tensors each call allocates beyond its inputs, counted by
  ``attnbook.memory.AllocationCounter``, which sees every operator's results (the method of
  the chapter ``notebooks/08_flash_attention``). It is deterministic, but blind to buffers a
  fused kernel allocates inside itself: SDPA's CPU kernel keeps its per-thread score tiles
  out of sight, so its column is a lower bound (its output and log-sum-exp are counted).

Ratios are printed against the naive implementation (``attnbook.attention.attention``), so
``0.25`` means four times less time or memory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.nn.functional import scaled_dot_product_attention

from attnbook.attention import attention
from attnbook.memory import peak_bytes
from attnbook.online_softmax import tiled_attention

sys.path.insert(0, str(Path(__file__).parent))
from _report import report, table


def best_time(fn, q, k, v, repeats: int) -> float:
    fn(q, k, v)  # warm-up: first calls pay for allocation and dispatch caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(q, k, v)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small n only (a few seconds)")
    parser.add_argument("--sizes", type=int, nargs="+", help="sequence lengths to run")
    parser.add_argument("--block-size", type=int, default=128, help="keys per tile")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per cell")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--write", action="store_true", help="record in RESULTS.md")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([256, 512, 1024] if args.quick else [512, 1024, 2048, 4096])
    repeats = args.repeats or (2 if args.quick else 3)
    torch.set_num_threads(args.threads)

    algorithms = {
        "naive": attention,
        "tiled": lambda q, k, v: tiled_attention(q, k, v, block_size=args.block_size),
        "sdpa": scaled_dot_product_attention,
    }
    title = (
        f"Naive, tiled and SDPA attention: one head, d = 64, float32, {args.threads} "
        f"thread(s), tiles of {args.block_size} keys, best of {repeats} runs"
    )
    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        q, k, v = (torch.randn(1, 1, n, 64, generator=gen) for _ in range(3))  # (B, H, T, d)
        torch.testing.assert_close(algorithms["tiled"](q, k, v), attention(q, k, v))
        secs = {name: best_time(fn, q, k, v, repeats) for name, fn in algorithms.items()}
        mem = {name: peak_bytes(fn, q, k, v) for name, fn in algorithms.items()}
        rows.append(
            [
                n,
                f"{secs['naive'] * 1e3:.2f}",
                f"{secs['tiled'] / secs['naive']:.2f}",
                f"{secs['sdpa'] / secs['naive']:.2f}",
                f"{mem['naive'] / 2**20:.1f}",
                f"{mem['tiled'] / mem['naive']:.3f}",
                f"{mem['sdpa'] / mem['naive']:.3f}",
            ]
        )
        print(f"n = {n} done", flush=True)
    headers = [
        "n",
        "naive ms",
        "tiled/naive time",
        "sdpa/naive time",
        "naive MiB",
        "tiled/naive memory",
        "sdpa/naive memory (lower bound)",
    ]
    report("tiled_attention", title, table(headers, rows), write=args.write)


if __name__ == "__main__":
    main()
