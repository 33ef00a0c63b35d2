"""Low-precision training, measured: the `transformer` task in FP32, BF16, FP16 and every
quantized mode (FP8 current and delayed scaling, FP8 rowwise, and the MX/NVFP4 modes where
this version has them), each quantized mode with and without its first and last linear
layer kept in BF16, as one Markdown table.

    python benchmarks/low_precision_table.py                 # 300 steps each, CPU, ~3 min
    python benchmarks/low_precision_table.py --steps 100 --keep runs/
    python benchmarks/low_precision_table.py --spike        # delayed vs current scaling
    python benchmarks/low_precision_table.py --modes nvfp4  # fp32 and the nvfp4 rows only

`--spike` runs the `overflow` task (one input token in 1024 is 128x larger) in fp8 with
current and with delayed scaling (`--amax-history 16`), statistics every step, and prints,
for each step where the first layer's input amax jumps past 8x its running level, how each
scaling cast that tensor: the scale used, the share saturated, the SQNR.

NVFP4 runs NVIDIA's recipe (16x16 weight tiles, the random Hadamard transform of the Wgrad
operands) and, to show what each part does, each part switched off
(`--nvfp4-weight-blocks 1d`, `--no-hadamard`; both off is the recipe with 1-D blocks only).

Every run has the same seed, data and steps. Columns: the final loss (mean finite loss of
the last 10% of steps) and its difference from FP32's; the largest share of one quantized
tensor's values that saturated (clamped at the format's largest value) and that flushed to
zero, over all statistics steps, with the layer and tensor (input, weight, grad_output);
steps/s. A second table gives each quantized mode's mean SQNR per tensor (input, weight,
grad_output: the mean over layers and statistics steps). On a CPU the FP8/MX/NVFP4 matmuls
are emulated (real casts, FP32 products), so their steps/s measure the emulation, not FP8
hardware.
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import RunState, run_job
from fpexplorer.training.precision import PRECISION_MODES
from fpexplorer.training.records import QUANT_ROLES
from fpexplorer.training.runlog import load_run
from fpexplorer.training.summary import QuantWorst, RunSummary, precision_label, summarize_file

WANTED = ("fp32", "bf16", "fp16", "fp8", "fp8-rowwise", "mxfp8", "mxfp6", "mxfp4", "nvfp4")


@dataclass(frozen=True, slots=True)
class Variant:
    """One row: a precision mode and the options that set it apart."""

    precision: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return precision_label({**self.options, "precision": self.precision})


def variants(only: tuple[str, ...] = ()) -> tuple[list[Variant], list[str]]:
    """The rows this version can run (fp32, the reference, and the modes in `only` when it
    names some), and the wanted modes it does not have."""
    modes = {mode.name: mode for mode in PRECISION_MODES}
    rows: list[Variant] = []
    for name in WANTED:
        mode = modes.get(name)
        if mode is None or (only and name not in only and name != "fp32"):
            continue
        if not mode.quantized:
            rows.append(Variant(name))
            continue
        scalings: list[dict[str, Any]] = [{}]
        if name == "fp8":
            scalings.append({"fp8_scaling": "delayed"})
        if name == "nvfp4":  # NVIDIA's recipe, then without each of its parts
            scalings += [{"hadamard": False}, {"nvfp4_weight_blocks": "1d"},
                         {"nvfp4_weight_blocks": "1d", "hadamard": False}]  # fmt: skip
        for scaling in scalings:
            for keep in (False, True):
                rows.append(Variant(name, {**scaling, "bf16_first_last": keep}))
    return rows, [name for name in WANTED if name not in modes]


def _where(worst: QuantWorst | None) -> str:
    if worst is None:
        return "0"
    # Three significant digits: a share of 0.0004 must not read as 0.0%.
    return f"{100 * worst.share:.3g}% {worst.layer} {worst.role}"


def table(rows: list[tuple[Variant, RunSummary]]) -> str:
    reference = rows[0][1].final_loss
    header = ("mode", "final loss", "vs fp32", "saturated (max, where)", "flushed (max, where)",
              "steps/s")  # fmt: skip
    lines_ = [header]
    for variant, s in rows:
        quantized = s.quantized
        lines_.append((
            variant.label, f"{s.final_loss:.4f}", f"{s.final_loss - reference:+.4f}",
            _where(s.worst_saturated) if quantized else "-",
            _where(s.worst_flushed) if quantized else "-",
            f"{s.steps_per_s:.1f}",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in lines_) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in lines_]  # fmt: skip
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def sqnr_table(rows: list[tuple[Variant, Path]]) -> str:
    """Each quantized mode's mean SQNR (dB) per tensor, over layers and statistics steps
    (finite values; an exact cast's +inf is left out of the mean and counted)."""
    lines = ["| mode | " + " | ".join(QUANT_ROLES) + " |", "|---|" + "---:|" * len(QUANT_ROLES)]
    for variant, path in rows:
        values: dict[str, list[float]] = {role: [] for role in QUANT_ROLES}
        for step in load_run(path).steps:
            for cast in step.stats.quant if step.stats is not None else ():
                values[cast.role].append(cast.sqnr_db)
        if not any(values.values()):
            continue
        cells = []
        for role in QUANT_ROLES:
            finite = [v for v in values[role] if math.isfinite(v)]
            exact = len(values[role]) - len(finite)
            mean = f"{statistics.fmean(finite):.2f}" if finite else "-"
            cells.append(mean + (f" ({exact} exact)" if exact else ""))
        lines.append(f"| {variant.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SPIKE_LAYER = "0.wi"  # the overflow task's first linear: its input carries the outliers


def spike_rows(folder: Path, steps: int, seed: int, device: str) -> list[str]:
    """The overflow task in fp8, current vs delayed scaling: the casts of the spikes."""
    by_scaling: dict[str, dict[int, Any]] = {}
    settings: tuple[tuple[str, dict[str, Any]], ...] = (
        ("current", {}),
        ("delayed", {"fp8_scaling": "delayed", "amax_history": 16}),
    )
    for scaling, extra in settings:
        out = folder / f"overflow-fp8-{scaling}.jsonl"
        config = TrainConfig(task="overflow", precision="fp8", device=device, steps=steps,
                             stats_every=1, seed=seed, out=str(out), **extra)  # fmt: skip
        run_job(config, stderr=io.StringIO())
        casts = {}
        for record in load_run(out).steps:
            for q in record.stats.quant if record.stats is not None else ():
                if q.layer == SPIKE_LAYER and q.role == "input":
                    casts[record.step] = q
        by_scaling[scaling] = casts
    current, delayed = by_scaling["current"], by_scaling["delayed"]
    lines = [
        "| step | amax | current: scale, saturated, SQNR | delayed: scale, saturated, SQNR |",
        "|---:|---:|---|---|",
    ]
    level = None
    for step in sorted(current):
        amax = current[step].amax
        if level is not None and amax > 8 * level and step in delayed:
            cells = [
                f"{q.scale:.4g}, {100 * q.saturated:.3g}%, {q.sqnr_db:.1f} dB"
                for q in (current[step], delayed[step])
            ]
            lines.append(f"| {step} | {amax:.5g} | {cells[0]} | {cells[1]} |")
        else:  # the running level of the ordinary steps
            level = amax if level is None else 0.9 * level + 0.1 * amax
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--stats-every", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the run logs in this folder")
    parser.add_argument("--spike", action="store_true", help="delayed vs current scaling")
    parser.add_argument(
        "--modes", nargs="+", default=(), choices=WANTED, metavar="MODE",
        help="only these modes' rows (and fp32's, the reference)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.spike:
        with tempfile.TemporaryDirectory() as scratch:
            folder = args.keep or Path(scratch)
            folder.mkdir(parents=True, exist_ok=True)
            steps = min(args.steps, 200)
            lines = spike_rows(folder, steps, args.seed, args.device)
        print(f"overflow task, fp8, {steps} steps, seed {args.seed}: {SPIKE_LAYER} input "
              "at each spike")  # fmt: skip
        print("\n".join(lines))
        return 0
    rows, missing = variants(tuple(args.modes))
    results: list[tuple[Variant, RunSummary]] = []
    logs: list[tuple[Variant, Path]] = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for index, variant in enumerate(rows):
            out = folder / f"transformer-{index:02d}-{variant.precision}.jsonl"
            config = TrainConfig(task="transformer", precision=variant.precision,
                                 device=args.device, steps=args.steps,
                                 stats_every=args.stats_every, seed=args.seed, out=str(out),
                                 **variant.options)  # fmt: skip
            result = run_job(config, stderr=io.StringIO())
            if result.state is not RunState.COMPLETED:
                print(f"{variant.label}: {result.state.value}: {result.error}", file=sys.stderr)
                return 1
            results.append((variant, summarize_file(out)))
            logs.append((variant, out))
            print(f"{variant.label}: done", file=sys.stderr)
        sqnr = sqnr_table(logs)  # read while the logs exist (a temporary folder by default)
    print(
        f"transformer task, {args.steps} steps, statistics every {args.stats_every}, "
        f"seed {args.seed}, device {args.device}"
    )
    print(table(results))
    print()
    print(sqnr)
    if missing:
        print(f"not in this version: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
