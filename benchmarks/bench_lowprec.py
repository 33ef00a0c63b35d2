"""What MX / NVFP4 emulation costs: the torch block quantizer against the numpy one, and an
emulated linear layer against `nn.Linear`, each measured in the same run.

  quantize    `quantize_blocks` (torch, float32) and `formats.quantize` (numpy, exact) on
              the same float32 matrix: milliseconds and the numpy/torch ratio
  linear      forward + backward of `BlockScaledLinear` and of `nn.Linear` on the same
              input: milliseconds and the ratio (the emulation's overhead on this device)
  statistics  what a statistics step adds per quantized tensor: measuring a cast and
              reading it (`lowprec.stats`) against making the cast, on the same bfloat16
              matrix, for torchao's FP8 casts as the monitor recomputes them
              (`fp8.torchao_cast`) and the MX/NVFP4 casts

Median of --repeats runs after one warm-up; one torch thread unless --threads says more.

    python benchmarks/bench_lowprec.py [--size 1024] [--batch 256] [--width 512]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def median_ms(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up: first-call allocations and dispatch
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=1024, help="the quantized matrix is size²")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from torch import nn

    from fpexplorer.formats import quantize
    from fpexplorer.training.lowprec.block_linear import BlockScaledLinear
    from fpexplorer.training.lowprec.block_torch import quantize_blocks

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    formats = ("mxfp8_e4m3", "mxfp4", "nvfp4")

    x = torch.randn(args.size, args.size)
    array = x.numpy()
    print(f"quantize a {args.size}x{args.size} float32 matrix (ms, median of {args.repeats})")
    print(f"{'format':<12}{'numpy':>10}{'torch':>10}{'numpy/torch':>14}")
    for name in formats:
        numpy_ms = median_ms(lambda name=name: quantize(array, name), args.repeats)
        torch_ms = median_ms(lambda name=name: quantize_blocks(x, name), args.repeats)
        print(f"{name:<12}{numpy_ms:>10.1f}{torch_ms:>10.1f}{numpy_ms / torch_ms:>14.2f}")

    inputs = torch.randn(args.batch, args.width)
    grad = torch.randn(args.batch, args.width)
    plain = nn.Linear(args.width, args.width)

    def step(layer: nn.Module) -> None:
        layer.zero_grad()
        data = inputs.clone().requires_grad_(True)
        layer(data).backward(grad)

    print(
        f"\nforward + backward, batch {args.batch}, {args.width}->{args.width} "
        f"(ms, median of {args.repeats})"
    )
    plain_ms = median_ms(lambda: step(plain), args.repeats)
    print(f"{'layer':<12}{'ms':>10}{'/ nn.Linear':>14}")
    print(f"{'nn.Linear':<12}{plain_ms:>10.2f}{1.0:>14.2f}")
    for name in formats:
        layer = BlockScaledLinear.from_linear(plain, name)
        emulated_ms = median_ms(lambda layer=layer: step(layer), args.repeats)
        print(f"{name:<12}{emulated_ms:>10.2f}{emulated_ms / plain_ms:>14.2f}")

    statistics_table(x.bfloat16(), args.repeats)
    return 0


def statistics_table(x: torch.Tensor, repeats: int) -> None:
    """The cost of measuring a cast, against the cast, on the same matrix."""
    from fpexplorer.training.lowprec.block_torch import quantize_blocks
    from fpexplorer.training.lowprec.fp8 import torchao_cast, torchao_config
    from fpexplorer.training.lowprec.stats import quant_stats

    casts: dict[str, Callable[[], Any]] = {}
    for recipe in ("tensorwise", "rowwise"):
        config = torchao_config(recipe, emulate=True)
        casts[f"fp8 {recipe}"] = lambda config=config: torchao_cast(config, "input", x)
    for name in ("mxfp8_e4m3", "nvfp4"):
        casts[name] = lambda name=name: quantize_blocks(x, name)
    rows, cols = x.shape
    print(
        f"\nstatistics of one {rows}x{cols} bfloat16 tensor: the cast, then measuring it and "
        f"reading the record (ms, median of {repeats})"
    )
    print(f"{'cast':<16}{'cast':>10}{'measure+read':>14}{'/ cast':>10}")
    for label, cast in casts.items():
        cast_ms = median_ms(cast, repeats)
        q = cast()
        source = q.input if label.startswith("fp8") else x  # torchao's casts flatten rows
        fmt = q.element.name if label.startswith("fp8") else label
        stats_ms = median_ms(
            lambda q=q, s=source, f=fmt: quant_stats("l", "input", s, q, f), repeats
        )
        print(f"{label:<16}{cast_ms:>10.2f}{stats_ms:>14.2f}{stats_ms / cast_ms:>10.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
