"""The paper's underflow effect, measured: the `underflow` task in FP32, FP16 without loss
scaling, FP16 with dynamic loss scaling and BF16, as one table.

    python benchmarks/underflow_table.py                 # 300 steps each, CPU
    python benchmarks/underflow_table.py --steps 600 --keep runs/

Columns: final loss (mean finite loss of the last 10% of steps) and its ratio to FP32's,
the share of activation-gradient values that are exactly zero (over all statistics steps,
in the dtype backward actually used), skipped steps, and the loss-scale range.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import run_job
from fpexplorer.training.runlog import load_run
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--stats-every", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the run logs in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        summaries = []
        for precision in PRECISIONS:
            out = folder / f"underflow-{precision}.jsonl"
            config = TrainConfig(task="underflow", precision=precision, device=args.device,
                                 steps=args.steps, stats_every=args.stats_every, seed=args.seed,
                                 out=str(out))  # fmt: skip
            run_job(config, stderr=io.StringIO())
            summaries.append(summarize(load_run(out)))
    print(f"underflow task, {args.steps} steps, seed {args.seed}, device {args.device}")
    print(table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
