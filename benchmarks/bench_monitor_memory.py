"""The monitor's extra peak memory, as a multiple of the parameter bytes, on a model of more
than 30M parameters.

A 33.6M-parameter MLP (two 4096x4096 layers, float32 parameters, BF16 autocast, Adam) runs
a few steps in its own process, bare or watched by AmpMonitor with statistics on every step;
the peak resident memory of each process is read from the kernel (ru_maxrss), or the CUDA
allocator's peak on a GPU. Runs alternate, the median of the repeats is taken, and the
figure is (peak with statistics - bare peak) / parameter bytes.

    python benchmarks/bench_monitor_memory.py             # target: <= 1.0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH = 4096


def child(variant: str, steps: int, batch: int, device_name: str) -> None:
    import resource

    import torch
    from torch import nn

    from fpexplorer.training.monitor import AmpMonitor

    torch.set_num_threads(1)
    device = torch.device(device_name)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    params = sum(p.numel() for p in model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    inputs = torch.randn(batch, WIDTH, device=device)
    target = torch.randn(batch, WIDTH, device=device)
    with tempfile.TemporaryDirectory() as folder:
        monitor = None
        if variant == "statistics":
            monitor = AmpMonitor(model, optimizer, None, out=Path(folder) / "run.jsonl",
                                 stats_every=1, precision="bf16")  # fmt: skip
        for _ in range(steps):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = (model(inputs).float() - target).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            if monitor is not None:
                monitor.step(loss)
            else:
                loss.item()
        if monitor is not None:
            monitor.close()
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(json.dumps({"peak": peak, "params": params, "param_bytes": param_bytes}))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--child", metavar="VARIANT")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.batch, args.device)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    peaks: dict[str, list[int]] = {"bare": [], "statistics": []}
    info: dict[str, int] = {}
    for repeat in range(args.repeats):
        order = ["bare", "statistics"] if repeat % 2 == 0 else ["statistics", "bare"]
        for variant in order:
            command = [sys.executable, __file__, "--child", variant, "--steps", str(args.steps),
                       "--batch", str(args.batch), "--device", args.device]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
            info = json.loads(done.stdout.strip().splitlines()[-1])
            peaks[variant].append(info["peak"])
    bare = statistics.median(peaks["bare"])
    watched = statistics.median(peaks["statistics"])
    mib = 2.0**20
    print(f"MLP 2 x {WIDTH}x{WIDTH}: {info['params'] / 1e6:.1f}M parameters "
          f"({info['param_bytes'] / mib:.0f} MiB, float32), BF16 autocast, Adam, batch "
          f"{args.batch}, {args.steps} steps, {args.device}; median of {args.repeats}")  # fmt: skip
    print(f"peak bare {bare / mib:.0f} MiB, with statistics every step {watched / mib:.0f} MiB")
    print(f"extra peak / parameter bytes: {(watched - bare) / info['param_bytes']:.2f} "
          "(target <= 1.0)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
