"""Time `FloatFormat.from_float_array` against ml_dtypes' `astype` on the same array.

    python benchmarks/bench_formats.py [--size 10000000] [--repeat 7] [--cli-only]

10 million float32 values (normal, spread over many binades, with some zeros, subnormals,
huge values, inf and NaN) are rounded (nearest_even, default overflow) into float16,
bfloat16 and float8_e4m3fn. Each conversion is timed `--repeat` times, alternating with
ml_dtypes (best taken), the codes are checked to agree with ml_dtypes, and the ratio
ours / ml_dtypes is printed.

Then the command line: wall time of `fpexplorer inspect` and `fpexplorer formats` in fresh
processes (best of --repeat), next to a bare `python -c pass` as the reference.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from fpexplorer.formats import get_format

TARGETS = (
    ("float16", np.float16),
    ("bfloat16", ml_dtypes.bfloat16),
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn),
)


def best_times(
    first: Callable[[], Any], second: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """Best wall time of each, the two run alternately so that load from other processes on
    a shared machine hits both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for function, record in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            function()
            record.append(time.perf_counter() - start)
    return min(times[0]), min(times[1])


def make_input(size: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(size) * 2.0 ** rng.integers(-20, 20, size)).astype(np.float32)
    specials = np.array(
        [0.0, -0.0, 1e-40, -1e-42, 1e30, -1e30, np.inf, -np.inf, np.nan], dtype=np.float32
    )
    x[:: max(1, size // 1000)] = np.resize(specials, x[:: max(1, size // 1000)].size)
    return x


def best_process_time(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def cli_figures(repeat: int) -> None:
    python = sys.executable
    reference = best_process_time([python, "-c", "pass"], repeat)
    print(f"\ncommand line, fresh process, best of {repeat}")
    print(f"{'python -c pass (reference)':<48}{reference * 1e3:>8.0f}ms")
    for arguments in (
        ["inspect", "0.1"],
        ["inspect", "0.1", "--all", "--json"],
        ["inspect", "--bits", "0x3c00", "--format", "fp16"],
        ["formats"],
    ):
        seconds = best_process_time([python, "-m", "fpexplorer", *arguments], repeat)
        print(f"{'fpexplorer ' + ' '.join(arguments):<48}{seconds * 1e3:>8.0f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cli-only", action="store_true", help="only the command-line figures")
    args = parser.parse_args()
    if args.cli_only:
        cli_figures(args.repeat)
        return
    x = make_input(args.size)
    print(f"{args.size:,} float32 values, best of {args.repeat}")
    print(f"{'target':<16}{'fpexplorer':>12}{'ml_dtypes':>12}{'ratio':>8}")
    for name, dtype in TARGETS:
        fmt = get_format(name)
        storage = np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8
        with np.errstate(over="ignore", invalid="ignore"):
            reference = x.astype(dtype).view(storage)
            ours = fmt.from_float_array(x)
            not_nan = ~np.isnan(x)
            assert np.array_equal(ours[not_nan], reference[not_nan]), f"{name}: codes differ"
            t_ours, t_ref = best_times(
                lambda: fmt.from_float_array(x),  # noqa: B023
                lambda: x.astype(dtype),  # noqa: B023
                args.repeat,
            )
        print(f"{name:<16}{t_ours * 1e3:>10.1f}ms{t_ref * 1e3:>10.1f}ms{t_ours / t_ref:>7.2f}x")
    cli_figures(args.repeat)


if __name__ == "__main__":
    main()
