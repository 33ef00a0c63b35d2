"""The monitor's cost on the built-in tasks: a bare loop vs the same loop watched by AmpMonitor.

Each run is one process (`--child`): the built-in task (`fpexplorer.training.tasks`), seed 0,
the job's own `amp_step`, one torch thread, timed over the whole loop. Runs are interleaved
(every variant of a configuration, in rotating order, then the next repeat), and each
figure is the median of the repeats; the ratios are against the bare loop measured in the
same invocation.

Variants:
  bare      the loop alone (it reads its loss on the host every step, as loops that log do)
  cheap     AmpMonitor(stats_every=0): loss, scale, skipped, growth tracker, grad norm, every step
  defaults  AmpMonitor() as it comes (statistics within a 4% time budget: about 1.05x in all)
  every     AmpMonitor(stats_every=1): full statistics on every step, so every/bare is the
            cost of one statistics step relative to a bare step

    python benchmarks/bench_monitor.py                    # transformer and mlp, fp32 and bf16
    python benchmarks/bench_monitor.py --tasks mlp --precisions bf16 --repeats 5
    python benchmarks/bench_monitor.py --tasks transformer --precisions fp8,mxfp8
    python benchmarks/bench_monitor.py --in-process      # the same, in one process (see below)

--in-process measures in one process, without the spread between processes (steadier on a
shared machine): bare, cheap-signal and statistics steps in rotating blocks (median step),
then whole runs of bare, cheap and defaults in rotating order (median run; the defaults'
statistics steps and the cadence's own measure of its share).

Targets: cheap <= 1.02, defaults <= 1.05, every <= 1.5 (transformer) and <= 2 (mlp).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VARIANTS = ("bare", "cheap", "defaults", "every")
CLOCKS = ("wall", "cpu", "wall_steady", "cpu_steady")
STEPS = {"transformer": 150, "mlp": 300}
# The "steady" rows leave out the first steps of each run (torch's and the monitor's
# first-call costs, and the monitor's statistics on step 0): the per-step cost of a long run.
WARM_UP = {"transformer": 15, "mlp": 30}
TARGETS = {"cheap": 1.02, "defaults": 1.05}
EVERY_TARGETS = {"transformer": 1.5, "mlp": 2.0}


@dataclass(frozen=True)
class Loop:
    """A built-in task ready to time (one torch thread, seed 0, on the CPU): the model (the
    fp8/MX/NVFP4 modes quantize its linears, as the job does, so statistics steps measure
    every quantized layer's casts too), its optimizer and scaler, and `steps` batches made
    before any clock starts."""

    task: Any
    model: Any
    optimizer: Any
    scaler: Any
    plan: Any
    device: Any
    batches: list[Any]
    amp_step: Any  # the job's own step function (looked up once: the loop is timed)

    def step(self, inputs: Any, target: Any) -> Any:
        """One training step of the job's `amp_step`; returns the loss tensor."""
        return self.amp_step(
            self.model, self.optimizer, self.scaler, self.task.loss_fn, inputs, target,
            self.plan, self.device,
        )  # fmt: skip


def prepared(task_name: str, precision: str, steps: int) -> Loop:
    import torch

    from fpexplorer.training.config import TrainConfig
    from fpexplorer.training.job import PLANS, amp_step, make_optimizer
    from fpexplorer.training.lowprec.recipes import apply_recipe
    from fpexplorer.training.precision import precision_mode
    from fpexplorer.training.tasks import make_task

    torch.set_num_threads(1)
    device = torch.device("cpu")
    plan = PLANS[precision]
    torch.manual_seed(0)
    task = make_task(task_name, 0, None, device)
    model = task.model.to(device=device, dtype=plan.params_dtype)
    apply_recipe(model, precision_mode(precision), TrainConfig(precision=precision), device)
    optimizer = make_optimizer(task.optimizer, model.parameters(), task.lr, False)
    scaler = torch.amp.GradScaler("cpu") if plan.scaler == "dynamic" else None
    batches = [next(task.batches) for _ in range(steps)]
    return Loop(task, model, optimizer, scaler, plan, device, batches, amp_step)


def child(task_name: str, precision: str, variant: str, steps: int) -> None:
    from fpexplorer.training.monitor import AmpMonitor

    loop = prepared(task_name, precision, steps)
    with tempfile.TemporaryDirectory() as folder:
        monitor = None
        if variant != "bare":
            settings = {"cheap": {"stats_every": 0}, "every": {"stats_every": 1}}.get(variant, {})
            monitor = AmpMonitor(loop.model, loop.optimizer, loop.scaler,
                                 out=Path(folder) / "run.jsonl", **settings)  # type: ignore[arg-type]  # fmt: skip
        start, cpu_start = time.perf_counter(), time.thread_time()
        steady = (start, cpu_start)
        for index, (inputs, target) in enumerate(loop.batches):
            if index == WARM_UP[task_name]:
                steady = (time.perf_counter(), time.thread_time())
            loss = loop.step(inputs, target)
            if monitor is not None:
                monitor.step(loss)  # ends with the monitor's one host copy
            else:
                loss.item()
        end, cpu_end = time.perf_counter(), time.thread_time()
        wall, cpu = end - start, cpu_end - cpu_start
        wall_steady, cpu_steady = end - steady[0], cpu_end - steady[1]
        statistics_steps = None
        if monitor is not None:
            run_log = (Path(folder) / "run.jsonl").read_text().splitlines()
            statistics_steps = sum('"grad_hist"' in line for line in run_log)
            monitor.close()
    print(json.dumps({"wall": wall, "cpu": cpu, "wall_steady": wall_steady,
                      "cpu_steady": cpu_steady, "statistics_steps": statistics_steps}))  # fmt: skip


def in_process(task_name: str, precision: str, steps: int, block: int = 20) -> None:
    """Bare, cheap-signal and statistics steps in rotating blocks of `block` steps in one
    process: the monitor's per-step cost without the spread between processes (a monitor
    is made for each watched block and closed after it, so its hooks are gone in the bare
    ones). Each figure is the median step over the blocks of its kind. Two more kinds are
    floors: the bare loop plus one tiny torch operation (`torch.zeros(1)`), under any
    monitor that runs a torch operation after each step, and the bare loop plus one fused
    gradient norm read to the host and nothing else, under any monitor that records the
    norm on every step."""
    import torch

    from fpexplorer.training.monitor import AmpMonitor

    loop = prepared(task_name, precision, steps)
    kinds = ("bare", "op", "norm", "cheap", "every")
    params = list(loop.model.parameters())
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        monitor = None
        for index, (inputs, target) in enumerate(loop.batches):
            kind = kinds[(index // block) % len(kinds)]
            if index % block == 0:
                if monitor is not None:
                    monitor.close()
                    monitor = None
                if kind in ("cheap", "every"):
                    monitor = AmpMonitor(loop.model, loop.optimizer, loop.scaler,
                                         precision=precision,
                                         stats_every=0 if kind == "cheap" else 1,
                                         out=Path(folder) / f"run-{index}.jsonl")  # fmt: skip
            start, cpu_start = time.perf_counter(), time.thread_time()
            loss = loop.step(inputs, target)
            if monitor is not None:
                monitor.step(loss)
            elif kind == "op":  # one torch operation, the least any such monitor does
                torch.zeros(1)
                loss.item()
            elif kind == "norm":  # the least any monitor of the gradient norm does
                grads = [p.grad for p in params if p.grad is not None]
                [norm.item() for norm in torch._foreach_norm(grads, 2)]
                loss.item()
            else:
                loss.item()
            if index % block:  # a block's first step pays for the switch: not counted
                times.setdefault((kind, "wall"), []).append(time.perf_counter() - start)
                times.setdefault((kind, "cpu"), []).append(time.thread_time() - cpu_start)
        if monitor is not None:
            monitor.close()
    for clock in ("wall", "cpu"):
        median = {kind: statistics.median(times[(kind, clock)]) for kind in kinds}
        print(f"{task_name} {precision}, one process, blocks of {block} steps, {clock}: median"
              f" step bare {median['bare'] * 1e3:.3f} ms, one torch operation"
              f" {median['op'] * 1e3:.3f} ms (ratio {median['op'] / median['bare']:.3f}),"
              " gradient norm alone"
              f" {median['norm'] * 1e3:.3f} ms (ratio {median['norm'] / median['bare']:.3f}),"
              " cheap signals"
              f" {median['cheap'] * 1e3:.3f} ms (ratio {median['cheap'] / median['bare']:.3f}),"
              f" statistics {median['every'] * 1e3:.3f} ms (ratio"
              f" {median['every'] / median['bare']:.3f})")  # fmt: skip


def in_process_runs(task_name: str, precision: str, steps: int, rounds: int) -> None:
    """Whole runs of `steps` steps, bare, cheap (stats_every=0) and defaults (AmpMonitor()
    as it comes: the 4% budget), in rotating order in one process, `rounds` of each: what a
    run with the defaults costs, statistics on step 0 and the budget's cadence included,
    without the spread between processes. Each watched run has its own monitor, made before
    its clock starts (as in the process-per-run rows), with no precision given (its header
    waits for the first step). Each figure is the median over the rounds; the defaults' line
    gives its statistics steps and the cadence's own measure of its share (`spent_share`)."""
    from fpexplorer.training.monitor import AmpMonitor

    loop = prepared(task_name, precision, steps)
    kinds = ("bare", "cheap", "defaults")
    times: dict[tuple[str, str], list[float]] = {}
    statistics_steps: list[int] = []
    shares: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for number in range(rounds):
            for kind in kinds[number % 3 :] + kinds[: number % 3]:
                monitor = None
                if kind != "bare":
                    settings = {"stats_every": 0} if kind == "cheap" else {}
                    monitor = AmpMonitor(loop.model, loop.optimizer, loop.scaler,
                                         out=Path(folder) / f"{kind}-{number}.jsonl",
                                         **settings)  # type: ignore[arg-type]  # fmt: skip
                start, cpu_start = time.perf_counter(), time.thread_time()
                for inputs, target in loop.batches:
                    loss = loop.step(inputs, target)
                    if monitor is not None:
                        monitor.step(loss)
                    else:
                        loss.item()
                times.setdefault((kind, "wall"), []).append(time.perf_counter() - start)
                times.setdefault((kind, "cpu"), []).append(time.thread_time() - cpu_start)
                if monitor is not None:
                    if kind == "defaults":
                        shares.append(monitor.cadence.spent_share)
                        log = (Path(folder) / f"{kind}-{number}.jsonl").read_text()
                        statistics_steps.append(log.count('"grad_hist"'))
                    monitor.close()
    for clock in ("wall", "cpu"):
        median = {kind: statistics.median(times[(kind, clock)]) for kind in kinds}
        print(f"{task_name} {precision}, one process, whole runs of {steps} steps, median of"
              f" {rounds}, {clock}: bare {median['bare']:.3f} s, cheap signals ratio"
              f" {median['cheap'] / median['bare']:.3f}, defaults ratio"
              f" {median['defaults'] / median['bare']:.3f} (statistics steps"
              f" {statistics.median(statistics_steps):g}, the cadence's own share"
              f" {statistics.median(shares):.3f})")  # fmt: skip


def run_child(task: str, precision: str, variant: str, steps: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--child", task, precision, variant, str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="transformer,mlp")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=4, metavar=("TASK", "PRECISION", "VARIANT", "STEPS"))
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="bare, cheap-signal and statistics steps in blocks in one process, then whole"
        " runs of bare, cheap and defaults in one process",
    )
    parser.add_argument(
        "--runs", type=int, default=6, help="with --in-process: whole runs of each kind"
    )
    args = parser.parse_args()
    from fpexplorer.training.job import PLANS

    for given, known, what in ((args.tasks, STEPS, "task"), (args.precisions, PLANS, "precision")):
        unknown = [name for name in given.split(",") if name not in known]
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)} (one of {', '.join(known)})")
    if args.in_process:
        for task in args.tasks.split(","):
            for precision in args.precisions.split(","):
                in_process(task, precision, 10 * STEPS[task])  # 15 blocks of each kind
                in_process_runs(task, precision, STEPS[task], args.runs)
        return 0
    if args.child:
        task, precision, variant, steps = args.child
        child(task, precision, variant, int(steps))
        return 0
    configurations = [(t, p) for t in args.tasks.split(",") for p in args.precisions.split(",")]
    times: dict[tuple[str, str, str, str], list[float]] = {}
    stats_steps: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats):
        for number, (task, precision) in enumerate(configurations):
            shift = (repeat + number) % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                result = run_child(task, precision, variant, STEPS[task])
                for clock in CLOCKS:
                    times.setdefault((task, precision, variant, clock), []).append(result[clock])
                if variant == "defaults":
                    stats_steps.setdefault((task, precision), []).append(result["statistics_steps"])
    import torch

    print(f"built-in tasks on cpu, 1 thread, torch {torch.__version__}; seed 0; one process per"
          f" run, interleaved; median of {args.repeats}. 'cpu': the same ratios from the loop"
          " thread's CPU time (steadier on a shared machine); '_steady': without each run's"
          f" first steps ({', '.join(f'{t} {n}' for t, n in WARM_UP.items())}), the per-step"
          " cost of a long run")  # fmt: skip
    names = " ".join(f"{v + ' s':>10}" for v in VARIANTS)
    print(f"{'task':12} {'prec':5} {'steps':>5} {names}  {'clock':11} cheap/bare defaults/bare"
          " every/bare  stats steps (defaults)")  # fmt: skip
    verdicts = []
    for task, precision in configurations:
        for clock in CLOCKS:
            median = {v: statistics.median(times[(task, precision, v, clock)]) for v in VARIANTS}
            ratio = {v: median[v] / median["bare"] for v in VARIANTS}
            steps_taken = statistics.median(stats_steps[(task, precision)])
            print(f"{task:12} {precision:5} {STEPS[task]:5} "
                  + " ".join(f"{median[v]:10.3f}" for v in VARIANTS)
                  + f"  {clock:11} {ratio['cheap']:10.3f} {ratio['defaults']:13.3f}"
                  f" {ratio['every']:10.3f}  {steps_taken:g}")  # fmt: skip
            if clock == "wall":
                verdicts.append(ratio["cheap"] <= TARGETS["cheap"])
                verdicts.append(ratio["defaults"] <= TARGETS["defaults"])
                verdicts.append(ratio["every"] <= EVERY_TARGETS[task])
    print(f"targets met (wall, whole runs): {sum(verdicts)} of {len(verdicts)} (cheap <= 1.02,"
          " defaults <= 1.05, every <= 1.5 transformer / 2 mlp)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
