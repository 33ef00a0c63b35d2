"""Time the numpy block quantizer against torchao's emulated CPU quantization.

    python benchmarks/bench_quantize.py [--rows 78125] [--repeat 5] [--threads 1]

10 million float32 values (78125 rows × 128; normal values over many binades, a few
outliers, zeros) are quantized into MXFP8 (E4M3), MXFP4 and NVFP4 by
`fpexplorer.formats.quantize`, which returns element codes, block scales and the
dequantized values, and by torchao (`MXTensor.to_mx` / `NVFP4Tensor.to_nvfp4` plus
`dequantize(torch.float32)`, the same three results) on the same tensor in the same run.
The two run alternately `--repeat` times (best taken, after one warm-up each); codes and
scales are checked to agree, and the ratio ours / torchao is printed (below 1: ours is
faster). torchao's time without its dequantize is printed too.

numpy runs on one thread; torch uses `--threads` (default 1, for a like-for-like
comparison; `--threads 0` leaves torch's default).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import MXTensor
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

from fpexplorer.formats import quantize


def make_input(rows: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 128)) * np.exp2(rng.integers(-20, 20, (rows, 1)))
    x[rng.random(x.shape) < 0.001] *= 1000.0
    x[rng.random(x.shape) < 0.01] = 0.0
    return x.astype(np.float32)


def best_times(
    first: Callable[[], Any], second: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """Best wall time of each, run alternately so that load from other processes on a
    shared machine hits both alike (one untimed warm-up each first)."""
    first()
    second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for function, record in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            function()
            record.append(time.perf_counter() - start)
    return min(times[0]), min(times[1])


def torchao_codes(result: Any, name: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    data = result.qdata
    if name == "mxfp8_e4m3":
        return data.view(torch.uint8).numpy()
    return unpack_uint4(data.contiguous().view(torch.uint8)).numpy().reshape(shape)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=78125, help="rows of 128 values")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    x = make_input(args.rows)
    tensor = torch.from_numpy(x)
    amax = float(np.abs(x).max())
    per_tensor = torch.tensor(amax, dtype=torch.float32) / (448 * 6)
    print(
        f"{x.size:,} float32 values, numpy {np.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} thread(s)), best of {args.repeat}"
    )
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "mxfp8_e4m3",
            lambda: MXTensor.to_mx(tensor, torch.float8_e4m3fn, 32),
            lambda: MXTensor.to_mx(tensor, torch.float8_e4m3fn, 32).dequantize(torch.float32),
        ),
        (
            "mxfp4",
            lambda: MXTensor.to_mx(tensor, torch.float4_e2m1fn_x2, 32),
            lambda: MXTensor.to_mx(tensor, torch.float4_e2m1fn_x2, 32).dequantize(torch.float32),
        ),
        (
            "nvfp4",
            lambda: NVFP4Tensor.to_nvfp4(tensor, 16, per_tensor_scale=per_tensor),
            lambda: NVFP4Tensor.to_nvfp4(tensor, 16, per_tensor_scale=per_tensor).dequantize(
                torch.float32
            ),
        ),
    ]
    print(f"{'format':12s} {'ours':>9s} {'torchao':>9s} {'ratio':>7s}   torchao w/o dequantize")
    for name, torchao_quantize, torchao_both in cases:
        ours_result = quantize(x, name)
        theirs = torchao_quantize()
        codes = torchao_codes(theirs, name, x.shape)
        scales = theirs.scale.view(torch.uint8).numpy()
        agree = np.array_equal(codes, ours_result.codes) and np.array_equal(
            scales, ours_result.scale_codes
        )
        ours_time, torchao_time = best_times(
            lambda n=name: quantize(x, n), torchao_both, args.repeat
        )
        _, quantize_only = best_times(lambda: None, torchao_quantize, args.repeat)
        print(
            f"{name:12s} {ours_time * 1000:7.0f}ms {torchao_time * 1000:7.0f}ms "
            f"{ours_time / torchao_time:6.2f}x   {quantize_only * 1000:.0f}ms "
            f"(ratio {ours_time / quantize_only:.2f}x)"
            f"{'' if agree else '   CODES DIFFER'}"
        )


if __name__ == "__main__":
    main()
