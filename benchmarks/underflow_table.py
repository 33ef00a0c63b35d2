"""The paper's underflow effect, measured: the `underflow` task in FP32, FP16 without loss
scaling, FP16 with dynamic loss scaling and BF16, as one table.

    python benchmarks/underflow_table.py                 # 300 steps each, CPU
    python benchmarks/underflow_table.py --steps 600 --keep runs/
    python benchmarks/underflow_table.py --head-init 1   # the output layer's default init

Columns: final loss (mean finite loss of the last 10% of steps) and its ratio to FP32's,
the share of activation-gradient values that are exactly zero (over all statistics steps,
in the dtype backward actually used), skipped steps, and the loss-scale range.

Below the table, the activation gradients' binades for fp32 and fp16 (as recorded: fp16's
are scaled by the loss scale): smallest, median and largest binade of the non-zero values
at step 0, and the median over every statistics step.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

from fpexplorer.training import tasks
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import run_job
from fpexplorer.training.records import Histogram
from fpexplorer.training.runlog import Run, load_run
from fpexplorer.training.summary import RunSummary, summarize

PRECISIONS = ("fp32", "fp16-noscale", "fp16", "bf16")


def table(summaries: list[RunSummary]) -> str:
    reference = summaries[0].final_loss
    header = ("precision", "final loss", "vs fp32", "act-grad zeros", "skipped", "loss scale",
              "steps/s")  # fmt: skip
    rows = [header]
    for s in summaries:
        low, high = f"{s.scale_min:g}", f"{s.scale_max:g}"
        scale = low if low == high else f"{low}–{high}"
        zeros = "-" if s.act_zero_share is None else f"{100 * s.act_zero_share:.1f}%"
        rows.append((s.precision, f"{s.final_loss:.3g}", f"{s.final_loss / reference:.2f}x",
                     f"{zeros} ({s.act_dtype})", str(s.skipped_steps), scale,
                     f"{s.steps_per_s:.0f}"))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in rows]  # fmt: skip
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _median_binade(hists: list[Histogram]) -> int | None:
    """floor(log2 |x|) of the median non-zero finite value over the histograms."""
    counts: dict[int, int] = {}
    for hist in hists:
        for exponent, count in zip(hist.exponents, hist.counts, strict=True):
            counts[exponent] = counts.get(exponent, 0) + count
    total = sum(counts.values())
    seen = 0
    for exponent in sorted(counts):
        seen += counts[exponent]
        if 2 * seen >= total:
            return exponent
    return None


def gradient_ranges(run: Run) -> str:
    """Activation-gradient binades at step 0 and the median over all statistics steps."""
    hists = [s.act_hist for s in run.steps if s.act_hist is not None]
    first = hists[0]
    nonzero = [e for e, c in zip(first.exponents, first.counts, strict=True) if c]
    return (
        f"step 0: 2^{min(nonzero)} .. 2^{max(nonzero)}, median 2^{_median_binade([first])}; "
        f"all {len(hists)} statistics steps: median 2^{_median_binade(hists)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--stats-every", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the run logs in this folder")
    parser.add_argument(
        "--head-init", type=float, default=tasks.UNDERFLOW_HEAD_INIT,
        help="the output layer's initial weights times this (the task: 2**-10; 1: default)",
    )  # fmt: skip
    args = parser.parse_args()
    tasks.UNDERFLOW_HEAD_INIT = args.head_init  # the jobs run in this process
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        summaries = []
        ranges: list[str] = []
        for precision in PRECISIONS:
            out = folder / f"underflow-{precision}.jsonl"
            config = TrainConfig(task="underflow", precision=precision, device=args.device,
                                 steps=args.steps, stats_every=args.stats_every, seed=args.seed,
                                 out=str(out))  # fmt: skip
            run_job(config, stderr=io.StringIO())
            run = load_run(out)
            summaries.append(summarize(run))
            if precision in ("fp32", "fp16"):
                ranges.append(f"{precision:5} activation gradients, {gradient_ranges(run)}")
    print(
        f"underflow task, {args.steps} steps, seed {args.seed}, device {args.device}, "
        f"head init x{args.head_init:g}"
    )
    print(table(summaries))
    print("\n".join(ranges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
