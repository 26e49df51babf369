"""Attention on a CUDA GPU: SDPA's three backends against the book's tiled loops, and decoding
against the bandwidth roofline.

    python benchmarks/gpu_attention.py                # on a CUDA device: prints markdown tables
    python benchmarks/gpu_attention.py --dry-run      # anywhere: tiny sizes on the CPU

Part 1, causal attention of ``B x H`` heads of width ``d`` at several ``n``, forward and
forward + backward, in bf16 (float32 in the dry run):

* SDPA restricted with ``torch.nn.attention.sdpa_kernel`` to FLASH_ATTENTION,
  EFFICIENT_ATTENTION and MATH in turn (a backend that refuses the shape says so);
* ``attnbook.online_softmax.tiled_attention`` (query and key tiles, causal tiles skipped) and
  ``attnbook.tiled_backward.recomputing_attention`` for the backward pass.

Each row gives the median time and the achieved TFLOP/s of the causal matmul work
(``2 d n (n + b)`` per head forward, as counted in chapter 07; 3.5 times that for forward +
backward, the recomputing backward's five products on top of the forward's two, so the
backends that keep the weights instead do less work than this rate credits).

Part 2, decoding: the tiny GPT of chapter 13 scaled up (``--decode-width`` etc.) generates
tokens one at a time with a KV cache; the tokens per second are set against the roofline
``bandwidth / bytes read per token`` (all weights plus the cache so far), with the bandwidth
measured by a device copy (and the datasheet figure given with ``--bandwidth``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnbook.gpt import GPTConfig, TinyGPT
from attnbook.online_softmax import tiled_attention
from attnbook.tiled_backward import recomputing_attention

BACKENDS = {
    "sdpa flash": SDPBackend.FLASH_ATTENTION,
    "sdpa mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa math": SDPBackend.MATH,
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device: torch.device, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def attention_rows(args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    rows = []
    for n in args.ns:
        shape = (args.batch, args.heads, n, args.d)
        g = torch.Generator(device=device).manual_seed(n)
        q, k, v = (torch.randn(shape, device=device, dtype=dtype, generator=g) for _ in range(3))
        flops_fwd = args.batch * args.heads * 2 * args.d * n * (n + args.tile)
        impls = {
            name: (lambda b=b: contextlib.nullcontext() if b is None else sdpa_kernel([b]),
                   lambda q, k, v: scaled_dot_product_attention(q, k, v, None, is_causal=True))
            for name, b in BACKENDS.items()
        }  # fmt: skip
        impls["attnbook tiled"] = (
            contextlib.nullcontext,
            lambda q, k, v: tiled_attention(
                q, k, v, block_size=args.tile, query_block_size=args.tile, causal=True
            ),
        )
        impls["attnbook recomputing"] = (
            contextlib.nullcontext,
            lambda q, k, v: recomputing_attention(
                q, k, v, block_size=args.tile, query_block_size=args.tile, causal=True
            ),
        )
        reference = scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        for name, (context, fn) in impls.items():
            row = {"n": n, "impl": name}
            try:
                with context():
                    out = fn(q, k, v)
                    row["max error"] = (out.float() - reference).abs().max().item()
                    row["forward s"] = median_seconds(
                        lambda fn=fn, q=q, k=k, v=v: fn(q, k, v), device, args.repeats
                    )
                    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

                    def step(fn=fn, qg=qg, kg=kg, vg=vg):
                        fn(qg, kg, vg).sum().backward()

                    row["fwd+bwd s"] = median_seconds(step, device, args.repeats)
            except RuntimeError as error:  # a backend that does not take this shape or device
                row["note"] = str(error).splitlines()[0][:60]
            if "forward s" in row:
                row["forward TFLOP/s"] = flops_fwd / row["forward s"] / 1e12
                row["fwd+bwd TFLOP/s"] = 3.5 * flops_fwd / row["fwd+bwd s"] / 1e12
            rows.append(row)
    return rows


def measured_bandwidth(device: torch.device, numbers: int, repeats: int) -> float:
    """Bytes per second of a device-to-device copy (read + write)."""
    x = torch.empty(numbers, device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    seconds = median_seconds(lambda: y.copy_(x), device, repeats)
    return 2 * x.numel() * x.element_size() / seconds


def decode_rows(args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    config = GPTConfig(
        vocab=args.decode_vocab, width=args.decode_width, layers=args.decode_layers,
        heads=args.decode_heads, kv_heads=args.decode_kv_heads, context=args.decode_context,
    )  # fmt: skip
    torch.manual_seed(0)
    model = TinyGPT(config).to(device=device, dtype=dtype).eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = measured_bandwidth(device, args.bandwidth_numbers, args.repeats)
    kv_per_position = 2 * config.layers * config.kv_heads * config.head_dim * dtype.itemsize
    rows = []
    for batch in args.decode_batches:
        cache = model.new_cache(batch=batch, max_positions=config.context)
        prompt = torch.randint(0, config.vocab, (batch, args.decode_prompt), device=device)
        with torch.no_grad():
            logits = model(prompt, cache=cache)
            token = logits[:, -1:].argmax(-1)
            _sync(device)
            start = time.perf_counter()
            for _ in range(args.decode_tokens):
                token = model(token, cache=cache)[:, -1:].argmax(-1)
            _sync(device)
            seconds = time.perf_counter() - start
        mean_cached = args.decode_prompt + args.decode_tokens / 2
        step_bytes = weight_bytes + batch * kv_per_position * mean_cached
        rows.append({
            "batch": batch,
            "tokens/s": batch * args.decode_tokens / seconds,
            "roofline tokens/s": batch * bandwidth / step_bytes,
            "MB per step": step_bytes / 1e6,
        })  # fmt: skip
    for row in rows:
        row["share of roofline"] = row["tokens/s"] / row["roofline tokens/s"]
    return rows, bandwidth, weight_bytes


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))

    def cell(x):
        if isinstance(x, float):
            return f"{x:.3g}"
        return str(x)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(row.get(k, "")) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, float32")
    p.add_argument("--ns", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--tile", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="datasheet bytes/s, printed beside the measured copy bandwidth",
    )
    p.add_argument("--bandwidth-numbers", type=int, default=2**28)
    p.add_argument("--decode-vocab", type=int, default=32000)
    p.add_argument("--decode-width", type=int, default=2048)
    p.add_argument("--decode-layers", type=int, default=16)
    p.add_argument("--decode-heads", type=int, default=16)
    p.add_argument("--decode-kv-heads", type=int, default=4)
    p.add_argument("--decode-context", type=int, default=2048)
    p.add_argument("--decode-prompt", type=int, default=1024)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--decode-batches", type=int, nargs="+", default=[1, 8, 32])
    args = p.parse_args(argv)
    if args.dry_run:  # everything tiny, so that a CPU test runs it in seconds
        args.ns, args.batch, args.heads, args.d, args.tile, args.repeats = [64, 96], 1, 2, 16, 32, 1
        args.bandwidth_numbers = 2**16
        args.decode_vocab, args.decode_width, args.decode_layers = 64, 32, 2
        args.decode_heads, args.decode_kv_heads, args.decode_context = 4, 2, 48
        args.decode_prompt, args.decode_tokens, args.decode_batches = 8, 4, [1, 2]
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    if args.dry_run:
        device, dtype = torch.device("cpu"), torch.float32
    elif torch.cuda.is_available():
        device, dtype = torch.device("cuda"), torch.bfloat16
    else:
        raise SystemExit("no CUDA device: run with --dry-run to check the script on the CPU")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    print(f"## GPU attention and decoding: {name}, torch {torch.__version__}, {dtype}\n")
    attn = attention_rows(args, device, dtype)
    print(
        f"Causal attention, B = {args.batch}, H = {args.heads}, d = {args.d}, "
        f"tiles of {args.tile} (median of {args.repeats}):\n"
    )
    print(table(attn) + "\n")
    dec, bandwidth, weight_bytes = decode_rows(args, device, dtype)
    datasheet = "" if args.bandwidth is None else f" (datasheet {args.bandwidth / 1e9:.0f} GB/s)"
    print(
        f"Decoding: {weight_bytes / 1e6:.1f} MB of weights; measured copy bandwidth "
        f"{bandwidth / 1e9:.1f} GB/s{datasheet}; roofline = bandwidth / bytes per step:\n"
    )
    print(table(dec))
    return {"attention": attn, "decode": dec, "bandwidth": bandwidth}


if __name__ == "__main__":
    main()
