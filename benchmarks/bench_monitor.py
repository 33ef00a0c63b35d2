"""The monitor's overhead: the same training job with statistics every step vs statistics off.

Both variants run in ONE process, on the same model, interleaved in blocks of steps, so that
a busy machine slows both alike; the figure is the ratio of the median step times. On a
shared machine two more readings help: the ratio of the fastest steps (the least disturbed)
and of the median CPU times of the stepping thread (the work itself, not the waiting). A
third variant without any monitor shows what the hooks cost when statistics are off.

    python benchmarks/bench_monitor.py                  # transformer, width 256, fp32 and bf16
    python benchmarks/bench_monitor.py --model mlp --width 1024 --layers 4 --batch 1024

Aim: statistics every step cost at most 5% (ratio <= 1.05) on a model whose bare step takes
at least 20 ms. Only CPU is measured here when no GPU is present.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fpexplorer.training.job import PLANS, amp_step, make_optimizer
from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.tasks import Task, make_transformer


def wide_mlp(width: int, layers: int, batch: int) -> Task:
    """A wide MLP on random regression data: much compute per activation element."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(batch * 4, width, generator=generator)
    targets = torch.randn(batch * 4, width, generator=generator)
    torch.manual_seed(0)
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*modules, nn.Linear(width, width))

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            for start in range(0, len(inputs), batch):
                yield inputs[start : start + batch], targets[start : start + batch]

    return Task("wide-mlp", model, batches(), F.mse_loss, 1e-3, batch, "adam")


def step_times(precision: str, blocks: int, block_steps: int, device: torch.device,
               model_name: str, width: int, layers: int, batch: int,
               ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:  # fmt: skip
    plan = PLANS[precision]
    if model_name == "mlp":
        task = wide_mlp(width, layers, batch)
    else:
        task = make_transformer(0, batch, width=width, layers=layers, context=64)
    model = task.model.to(device=device, dtype=plan.params_dtype)
    optimizer = make_optimizer("adam", model.parameters(), 1e-3, plan.params_dtype == torch.float16)
    scaler = torch.amp.GradScaler(device.type) if plan.scaler == "dynamic" else None
    times: dict[str, list[float]] = {"bare": [], "stats off": [], "stats every step": []}
    cpu_times: dict[str, list[float]] = {"bare": [], "stats off": [], "stats every step": []}

    def one_step(monitor: AmpMonitor | None) -> tuple[float, float]:
        inputs, target = (t.to(device) for t in next(task.batches))
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        cpu_start = time.thread_time()
        loss = amp_step(model, optimizer, scaler, task.loss_fn, inputs, target, plan, device)
        if monitor is not None:
            monitor.step(loss)  # ends with the monitor's host sync
        else:
            loss.item()  # the bare loop reads its loss too
        return time.perf_counter() - start, time.thread_time() - cpu_start

    with tempfile.TemporaryDirectory() as folder:
        for _ in range(3):  # warm-up
            one_step(None)
        for block in range(blocks):
            order = ["bare", "stats off", "stats every step"]
            if block % 2:
                order.reverse()
            for variant in order:
                monitor = None
                if variant != "bare":
                    monitor = AmpMonitor(
                        model, optimizer, scaler, out=Path(folder) / f"{variant}-{block}.jsonl",
                        stats_every=1 if variant == "stats every step" else 0,
                    )  # fmt: skip
                one_step(monitor)  # the first step of a block pays for set-up: not timed
                for _ in range(block_steps):
                    wall, cpu = one_step(monitor)
                    times[variant].append(wall)
                    cpu_times[variant].append(cpu)
                if monitor is not None:
                    monitor.close()
    return times, cpu_times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32,bf16", help="comma-separated modes")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--block-steps", type=int, default=8)
    parser.add_argument("--model", choices=("transformer", "mlp"), default="transformer")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shape = "x 64 tokens" if args.model == "transformer" else "rows"
    threads = torch.get_num_threads()
    print(f"{args.model} width {args.width}, {args.layers} layers, batch {args.batch} {shape} "
          f"on {device} ({threads} thread(s)), torch {torch.__version__}")  # fmt: skip
    print(f"{'precision':10} {'bare ms':>8} {'off ms':>8} {'every ms':>9} {'every/off':>10}"
          f" {'off/bare':>9} {'best every/off':>15} {'cpu every/off':>14}")  # fmt: skip
    for precision in args.precision.split(","):
        times, cpu_times = step_times(precision, args.blocks, args.block_steps, device, args.model,
                           args.width, args.layers, args.batch)  # fmt: skip
        bare, off, every = (statistics.median(times[k]) for k in
                            ("bare", "stats off", "stats every step"))  # fmt: skip
        best = min(times["stats every step"]) / min(times["stats off"])
        cpu = statistics.median(cpu_times["stats every step"]) / statistics.median(
            cpu_times["stats off"]
        )
        print(f"{precision:10} {bare * 1e3:8.1f} {off * 1e3:8.1f} {every * 1e3:9.1f}"
              f" {every / off:10.3f} {off / bare:9.3f} {best:15.3f} {cpu:14.3f}")  # fmt: skip
    if device.type != "cuda":
        print("CUDA: not measured (no GPU on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
