"""What a statistics step's activation-gradient counts cost on the built-in transformer, and
the floor under them: where the 1.5x target for one statistics step is lost.

One process, one torch thread, the built-in task (seed 0) as `bench_monitor.py --in-process`
runs it: bare steps and statistics steps (`stats_every=1`) in rotating blocks of 20 steps,
the median step's thread CPU time of each kind, as a ratio to the bare step. The kinds of
statistics step differ only in what each backward hook does with its activation gradient:

  exact      as AmpMonitor does it (`kernels.segment_of`): the record's counts
  reused     no counting: each layer's first segment is handed back on every later step
             (what everything else in a statistics step costs: forward checks, step(),
             the hooks themselves)
  no_checks  `reused` without the forward outputs' finiteness checks either
  ops        `reused`, plus the four torch operations the exact count is made of (|x| or
             the 15 magnitude bits, their maximum, the shift to exponent field and two
             mantissa bits, one bincount): the floor of counting every element this way
  sample     `reused`, plus what a sampled count would do instead: the exact extremes (one
             aminmax pass, for max |x| and inf/NaN) and the same four operations on 4096
             elements gathered at fixed random positions

Only `exact` records what it measured; the other kinds reuse its first segments, so their
records are not the step's (their logs are thrown away). Each ratio is a median step of its
kind; `exact - reused` is what counting costs, `ops - reused` the part of it no exact count
by these operations avoids.

    python benchmarks/bench_activation_counts.py               # fp32 and bf16
    python benchmarks/bench_activation_counts.py --precisions bf16 --steps 2000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KINDS = ("bare", "exact", "reused", "no_checks", "ops", "sample")
BLOCK = 20
SAMPLE = 4096


def measure(precision: str, steps: int) -> dict[str, float]:
    """Median step (thread CPU seconds) of each kind, in rotating blocks of BLOCK steps."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_monitor import prepared

    from fpexplorer.training.monitor import AmpMonitor, amp_monitor

    loop = prepared("transformer", precision, steps)
    exact: Callable[..., Any] = amp_monitor.segment_of
    all_finite: Callable[[Any], bool] = amp_monitor._all_finite
    first: dict[int, Any] = {}
    positions: dict[int, Any] = {}
    generator = torch.Generator().manual_seed(0)

    def reused(layer: int, tensor: Any, **hint: bool) -> Any:
        segment = first.get(layer)
        if segment is None:
            segment = first[layer] = exact(layer, tensor)
        return segment

    def count_ops(values: Any) -> None:
        if values.dtype == torch.bfloat16:
            work, shift = torch.bitwise_and(values.view(torch.int16), 0x7FFF).reshape(-1), 5
        else:
            work, shift = torch.abs(values.float().reshape(-1)).view(torch.int32), 21
        work.max()
        torch.bincount(work.bitwise_right_shift_(shift), minlength=1024)

    def ops(layer: int, tensor: Any, **hint: bool) -> Any:
        count_ops(tensor.detach())
        return reused(layer, tensor)

    def sample(layer: int, tensor: Any, **hint: bool) -> Any:
        flat = tensor.detach().reshape(-1)
        chosen = positions.get(flat.numel())
        if chosen is None:
            order = torch.randperm(flat.numel(), generator=generator)
            chosen = positions[flat.numel()] = order[:SAMPLE].sort().values
        torch.aminmax(flat)
        count_ops(flat.index_select(0, chosen))
        return reused(layer, tensor)

    hooks = {"exact": exact, "reused": reused, "no_checks": reused, "ops": ops, "sample": sample}
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as folder:
        monitor = None
        try:
            for index, (inputs, target) in enumerate(loop.batches):
                kind = KINDS[(index // BLOCK) % len(KINDS)]
                if index % BLOCK == 0:
                    if monitor is not None:
                        monitor.close()
                        monitor = None
                    amp_monitor.segment_of = hooks.get(kind, exact)  # type: ignore[assignment]
                    amp_monitor._all_finite = (  # type: ignore[assignment]
                        (lambda tensor: True) if kind == "no_checks" else all_finite
                    )
                    if kind != "bare":
                        monitor = AmpMonitor(loop.model, loop.optimizer, loop.scaler,
                                             precision=precision, stats_every=1,
                                             out=Path(folder) / f"run-{index}.jsonl")  # fmt: skip
                start = time.thread_time()
                loss = loop.step(inputs, target)
                if monitor is not None:
                    monitor.step(loss)
                else:
                    loss.item()
                if index % BLOCK:  # a block's first step pays for the switch: not counted
                    times[kind].append(time.thread_time() - start)
        finally:
            if monitor is not None:
                monitor.close()
            amp_monitor.segment_of = exact  # type: ignore[assignment]
            amp_monitor._all_finite = all_finite  # type: ignore[assignment]
    return {kind: statistics.median(values) for kind, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--steps", type=int, default=1440, help="steps in all (default 1440)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    for precision in args.precisions.split(","):
        median = measure(precision, args.steps)
        bare = median["bare"]
        ratios = ", ".join(f"{kind} {median[kind] / bare:.3f}" for kind in KINDS[1:])
        above = {kind: (median[kind] - median["reused"]) / bare for kind in KINDS[1:]}
        print(f"transformer {precision}, cpu, median step: bare {bare * 1e3:.3f} ms; {ratios};"
              f" counting costs {above['exact']:.3f}, of which its operations' floor"
              f" {above['ops']:.3f}; a sample's operations {above['sample']:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
