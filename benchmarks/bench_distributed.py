"""The monitor's cost with 2 CPU ranks (gloo, DDP or FSDP2): a bare loop vs the same loop
watched by AmpMonitor, which under a process group writes one log per rank and the merged
log.

Each run is one `python -m torch.distributed.run --standalone --nproc-per-node 2` of this
file (`--child`): the built-in task sharded by rank (every 2nd batch), DDP (or FSDP2's
`fully_shard` on each layer and the model, as `fpexplorer train --parallel fsdp`), the job's own
`amp_step`, one torch thread per rank. Both ranks time the loop after a warm-up and a
barrier; the figure of a run is the slower rank's (the job moves at its pace). Runs are
interleaved (every variant, in rotating order, then the next repeat); each figure is the
median of the repeats and the ratios are against the bare loop of the same invocation.

Variants:
  bare      DDP loop alone (its loss read on the host every step, as loops that log do)
  cheap     AmpMonitor(stats_every=0): the cheap signals every step; the ranks exchange
            nothing (only a skipped step would be exchanged). Every monitor variant is given
            the wrapped model, as a user's loop gives it, so it includes the check below
  unchecked AmpMonitor(stats_every=0, check_reduction=False): `cheap` without the check,
            so cheap/unchecked is what the check adds to a monitored loop
  every10   AmpMonitor(stats_every=10): statistics and one all-reduce every 10th step
  every     AmpMonitor(stats_every=1): statistics and one all-reduce on every step
  check     the bare loop with the monitor's check that flags each rank's own non-finite
            gradients before they are communicated (`reduction.PreReductionCheck`: DDP's
            communication hook, or FSDP2's custom reduce-scatter), alone

    python benchmarks/bench_distributed.py                  # mlp, bf16, 3 repeats
    python benchmarks/bench_distributed.py --task transformer --steps 60 --repeats 3
    python benchmarks/bench_distributed.py --parallel fsdp --variants bare check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("bare", "check", "cheap", "unchecked", "every10", "every")
EVERY = {"cheap": 0, "unchecked": 0, "every10": 10, "every": 1}
WARMUP_STEPS = 5


def child(
    task_name: str, precision: str, variant: str, steps: int, folder: str, parallel: str
) -> None:
    import torch
    import torch.distributed as dist

    from fpexplorer.training.distributed import (
        RankSetup,
        make_sharded_scaler,
        shard_batches,
        wrap_model,
    )
    from fpexplorer.training.job import PLANS, amp_step, make_optimizer
    from fpexplorer.training.monitor import AmpMonitor
    from fpexplorer.training.monitor.ranks import RankContext
    from fpexplorer.training.monitor.reduction import check_before_reduction
    from fpexplorer.training.scaler_rules import ScalerSettings
    from fpexplorer.training.tasks import make_task

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    plan = PLANS[precision]
    torch.manual_seed(0)
    task = make_task(task_name, 0, None, device)
    inner = task.model.to(device=device, dtype=plan.params_dtype)
    context = RankContext.current()
    assert context is not None
    setup = RankSetup(context, parallel, device)
    model = wrap_model(inner, setup)
    optimizer = make_optimizer(task.optimizer, model.parameters(), task.lr, False)
    scaler = None
    if plan.scaler == "dynamic":
        scaler = (make_sharded_scaler(ScalerSettings(), setup) if parallel == "fsdp"
                  else torch.amp.GradScaler("cpu"))  # fmt: skip
    stream = shard_batches(task.batches, rank, world)
    batches = [next(stream) for _ in range(steps + WARMUP_STEPS)]  # made before the clock
    monitor = None
    check = check_before_reduction(model) if variant == "check" else None
    if variant not in ("bare", "check"):
        monitor = AmpMonitor(model, optimizer, scaler, out=str(Path(folder) / "run.jsonl"),
                             stats_every=EVERY[variant], precision=precision,
                             check_reduction=variant != "unchecked")  # fmt: skip
    start = time.perf_counter()
    for index, (inputs, target) in enumerate(batches):
        if index == WARMUP_STEPS:
            dist.barrier()
            start = time.perf_counter()
        if check is not None:
            check.clear()
        loss = amp_step(model, optimizer, scaler, task.loss_fn, inputs, target, plan, device)
        if monitor is not None:
            monitor.step(loss)
        else:
            loss.item()
    elapsed = time.perf_counter() - start
    if monitor is not None:
        monitor.close()
    times = [0.0] * world
    dist.all_gather_object(times, elapsed)
    if rank == 0:
        print(json.dumps({"seconds": max(times)}), flush=True)
    dist.destroy_process_group()


def run_once(task: str, precision: str, variant: str, steps: int, parallel: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc-per-node", "2", __file__, "--child", task, precision, variant,
             str(steps), folder, parallel],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            return float(json.loads(line)["seconds"])
    raise SystemExit(f"{variant}: the run failed:\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="mlp")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument(
        "--child", nargs=6, metavar=("TASK", "PRECISION", "VARIANT", "STEPS", "DIR", "PARALLEL")
    )
    args = parser.parse_args()
    if args.child:
        task, precision, variant, steps, folder, parallel = args.child
        child(task, precision, variant, int(steps), folder, parallel)
        return
    variants = tuple(dict.fromkeys(["bare", *args.variants]))  # ratios need the bare loop
    seconds: dict[str, list[float]] = {variant: [] for variant in variants}
    for repeat in range(args.repeats):
        order = variants[repeat % len(variants) :] + variants[: repeat % len(variants)]
        for variant in order:
            seconds[variant].append(
                run_once(args.task, args.precision, variant, args.steps, args.parallel)
            )
    bare = statistics.median(seconds["bare"])
    label = "DDP" if args.parallel == "ddp" else "FSDP2"
    print(f"{args.task} {args.precision}, 2 CPU ranks (gloo, {label}), {args.steps} steps, "
          f"median of {args.repeats}:")  # fmt: skip
    for variant in variants:
        median = statistics.median(seconds[variant])
        print(f"  {variant:9} {median:7.3f} s   {args.steps / median:7.1f} steps/s   "
              f"ratio to bare {median / bare:.3f}")  # fmt: skip
    if "cheap" in seconds and "unchecked" in seconds:
        ratio = statistics.median(seconds["cheap"]) / statistics.median(seconds["unchecked"])
        print(f"  cheap / unchecked (the check in a monitored loop): {ratio:.3f}")


if __name__ == "__main__":
    main()
