"""On a CUDA machine: run the `transformer` task in fp32, fp16, bf16 and every quantized
mode on the GPU, check each runs there, and print the speed-up of each over fp32.

    python benchmarks/gpu_check.py                  # 300 steps, width 512, 4 layers
    python benchmarks/gpu_check.py --steps 1000 --width 1024 --batch-size 128

Without CUDA it says so and exits 0 (nothing to measure); `--device cpu` runs the same
check on the CPU (a dry run of this script: every quantized matmul emulated). Otherwise
the exit status is 1 when any mode fails on the device. Steps/s are over the steps after
the first 10% (warm-up: kernel selection, torchao's first casts); statistics are off, so
this times the training step alone. The task is widened (--width, --layers: the built-in
one, width 64, would time kernel launches, not arithmetic). fp8 uses FP8 tensor cores from
compute capability 8.9 (Ada, Hopper), fp8-rowwise from 9.0; below that torchao emulates
them and the speed-up is not a hardware figure (the table says so).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

WANTED = ("fp32", "fp16", "bf16", "fp8", "fp8-rowwise", "mxfp8", "mxfp6", "mxfp4", "nvfp4")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="training steps per mode (300)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument(
        "--device", default="cuda", help="cuda, cuda:N, or cpu for a dry run (cuda)"
    )
    parser.add_argument("--width", type=int, default=512, help="the model's width (512)")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (4)")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences per step (64)")
    args = parser.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine: nothing measured")
        return 0
    import functools

    from fpexplorer.training import tasks
    from fpexplorer.training.config import TrainConfig
    from fpexplorer.training.job import JobSetupError, RunState, run_job
    from fpexplorer.training.lowprec.fp8 import needs_emulation
    from fpexplorer.training.precision import PRECISION_MODES
    from fpexplorer.training.runlog import load_run

    device = torch.device(args.device)
    # The jobs run in this process: the transformer task, widened.
    tasks.BUILTIN_TASKS["transformer"] = functools.partial(
        tasks.make_transformer, width=args.width, layers=args.layers
    )
    names = [mode.name for mode in PRECISION_MODES if mode.name in WANTED]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else "-"
    print(f"device {device_name}, capability {capability}, transformer task width {args.width}, "
          f"{args.layers} layers, batch {args.batch_size}, {args.steps} steps")  # fmt: skip
    rates: dict[str, float] = {}
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            out = Path(folder) / f"{name}.jsonl"
            config = TrainConfig(task="transformer", precision=name, device=args.device,
                                 steps=args.steps, stats_every=0, seed=args.seed, out=str(out),
                                 batch_size=args.batch_size)  # fmt: skip
            try:
                result = run_job(config, stderr=io.StringIO())
            except JobSetupError as error:  # e.g. torchao missing
                failed.append(name)
                print(f"{name:12} cannot start: {error}")
                continue
            run = load_run(out)
            if result.state is not RunState.COMPLETED or run.header is None:
                failed.append(name)
                print(f"{name:12} FAILED on {args.device}: {result.error}")
                continue
            if run.header.device_type != device.type:
                failed.append(name)
                print(f"{name:12} ran on {run.header.device_type}, not {device.type}")
                continue
            warm = run.steps[len(run.steps) // 10 :]
            span = warm[-1].time - warm[0].time
            rates[name] = (len(warm) - 1) / span if span > 0 else float("nan")
    reference = rates.get("fp32")
    print("| mode | steps/s | speed-up over fp32 | note |")
    print("|---|---|---|---|")
    for name, rate in rates.items():
        speedup = f"{rate / reference:.2f}x" if reference else "-"
        note = ""
        rowwise = "rowwise" in name
        emulated = needs_emulation(device, "rowwise") if rowwise else needs_emulation(device)
        if name.startswith("fp8") and emulated:
            note = "emulated (no FP8 units for this recipe)"
        elif name.startswith(("mx", "nv")):
            note = "emulated (quantize-dequantize, FP32 matmuls)"
        print(f"| {name} | {rate:.1f} | {speedup} | {note} |")
    if failed:
        print(f"failed on the GPU: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
