"""Summaries of run logs (`fpexplorer runs`). Torch-free, like the reader it builds on."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fpexplorer.training.runlog import Run


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The figures of one run that answer "did mixed precision work here, and why not"."""

    path: str
    task: str
    precision: str
    device: str
    status: str
    error: str | None
    steps: int
    first_loss: float
    final_loss: float  # mean finite loss of the last 10% of the steps; NaN when none is finite
    min_loss: float
    nonfinite_losses: int
    skipped_steps: int
    scale_min: float
    scale_max: float
    scale_final: float
    act_zero_share: float | None  # zeros / all activation-gradient values over the stats steps
    act_dtype: str | None
    grad_zero_share: float | None
    lost_update_share: float | None  # mean over statistics steps
    lost_update_kind: str | None
    first_nonfinite: tuple[tuple[str, int], ...]  # module -> statistics steps it started
    first_nonfinite_forward: tuple[tuple[str, int], ...]
    steps_per_s: float  # median
    memory_bytes: dict[str, int]  # last statistics step: part -> bytes (all dtypes)
    problems: tuple[str, ...]


def summarize(run: Run) -> RunSummary:
    steps = run.steps
    losses = [s.loss for s in steps]
    finite = [loss for loss in losses if math.isfinite(loss)]
    # Skipped steps with an inf/NaN loss say nothing about how well the model trains.
    tail = [x for x in losses[-max(1, len(losses) // 10) :] if math.isfinite(x)]
    scales = [s.scale for s in steps]
    stats = [s for s in steps if s.has_stats]
    act_zero = act_total = grad_zero = grad_total = 0
    act_dtypes: Counter[str] = Counter()
    for s in stats:
        if s.act_hist is not None:
            act_zero += s.act_hist.zero
            act_total += s.act_hist.total
            act_dtypes[s.act_hist.dtype or "?"] += s.act_hist.total
        if s.grad_hist is not None:
            grad_zero += s.grad_hist.zero
            grad_total += s.grad_hist.total
    lost = [s.lost_updates for s in stats if s.lost_updates is not None]
    origins = Counter(s.first_nonfinite for s in steps if s.first_nonfinite)
    forward_origins = Counter(s.first_nonfinite_forward for s in steps if s.first_nonfinite_forward)
    memory: dict[str, int] = {}
    last_memory = next((s.memory for s in reversed(stats) if s.memory is not None), None)
    if last_memory is not None:
        for part in ("params", "grads", "optimizer", "activations"):
            memory[part] = sum(getattr(last_memory, part).values())
        if last_memory.peak_device is not None:
            memory["peak_device"] = last_memory.peak_device
    header = run.header
    rates = [s.steps_per_s for s in steps if math.isfinite(s.steps_per_s)]
    return RunSummary(
        path=str(run.path),
        task=header.task if header else "?",
        precision=header.precision if header else "?",
        device=f"{header.device_type} ({header.device_name})" if header else "?",
        status=run.status,
        error=run.end.error if run.end else None,
        steps=len(steps),
        first_loss=losses[0] if losses else math.nan,
        final_loss=statistics.fmean(tail) if tail else math.nan,
        min_loss=min(finite) if finite else math.nan,
        nonfinite_losses=len(losses) - len(finite),
        skipped_steps=sum(s.skipped for s in steps),
        scale_min=min(scales) if scales else math.nan,
        scale_max=max(scales) if scales else math.nan,
        scale_final=scales[-1] if scales else math.nan,
        act_zero_share=act_zero / act_total if act_total else None,
        act_dtype=act_dtypes.most_common(1)[0][0] if act_dtypes else None,
        grad_zero_share=grad_zero / grad_total if grad_total else None,
        lost_update_share=statistics.fmean(u.share for u in lost) if lost else None,
        lost_update_kind=lost[-1].kind if lost else None,
        first_nonfinite=tuple(origins.most_common()),
        first_nonfinite_forward=tuple(forward_origins.most_common()),
        steps_per_s=statistics.median(rates) if rates else math.nan,
        memory_bytes=memory,
        problems=run.problems,
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return str(count)


def _finite_or(value: float, text: str) -> str:
    return f"{value:.4g}" if math.isfinite(value) else text


def format_summary(summary: RunSummary) -> str:
    """The text `fpexplorer runs summarize` prints."""
    lines = [
        f"run        {summary.path}",
        f"task       {summary.task}   precision {summary.precision}   device {summary.device}",
        f"status     {summary.status} after {summary.steps} steps"
        + (f": {summary.error}" if summary.error else ""),
    ]
    if not summary.steps:
        # No step: "loss nan, scale nan .. nan" would read as a run that diverged.
        lines.append("loss       no steps recorded")
        lines.extend(f"problem    {problem}" for problem in summary.problems)
        return "\n".join(lines)
    lines += [
        # The first loss as recorded (a NaN there is news); final and min over finite ones.
        f"loss       first {summary.first_loss:.4g}"
        f"   final {_finite_or(summary.final_loss, 'none finite')}"
        f"   min {_finite_or(summary.min_loss, 'none finite')}"
        f"   non-finite {summary.nonfinite_losses}",
        f"scale      {summary.scale_min:g} .. {summary.scale_max:g} (final {summary.scale_final:g})"
        f"   skipped steps {summary.skipped_steps}",
        f"act grads  zero {_share(summary.act_zero_share)} ({summary.act_dtype or '-'})"
        f"   param grads zero {_share(summary.grad_zero_share)}",
    ]
    if summary.lost_update_share is not None:
        kind = "lost" if summary.lost_update_kind == "actual" else "FP16 weights would lose"
        lines.append(f"updates    {kind}: {_share(summary.lost_update_share)} (mean per step)")
    if summary.first_nonfinite_forward:
        origins = ", ".join(f"{n} ({c})" for n, c in summary.first_nonfinite_forward[:5])
        lines.append(f"overflow   first inf/NaN output in forward: {origins}")
    if summary.first_nonfinite:
        origins = ", ".join(f"{n} ({c})" for n, c in summary.first_nonfinite[:5])
        lines.append(f"overflow   first inf/NaN gradient in backward: {origins}")
    if summary.memory_bytes:
        parts = "   ".join(f"{k} {_bytes(v)}" for k, v in summary.memory_bytes.items())
        lines.append(f"memory     {parts}")
    if math.isfinite(summary.steps_per_s):
        lines.append(f"speed      {summary.steps_per_s:.2f} steps/s (median)")
    lines.extend(f"problem    {problem}" for problem in summary.problems)
    return "\n".join(lines)


TABLE_COLUMNS = (
    "precision", "final loss", "act-grad zeros", "skipped", "loss scale", "steps/s",
)  # fmt: skip


def format_table(summaries: Sequence[RunSummary]) -> str:
    """A Markdown table comparing runs (the underflow table of the README)."""
    rows = [list(TABLE_COLUMNS)]
    for s in summaries:
        if not s.steps:
            scale = "-"  # no step, no scale (not "nan–nan")
        elif s.scale_min == s.scale_max:
            scale = f"{s.scale_min:g}"
        else:
            scale = f"{s.scale_min:g}–{s.scale_max:g}"
        rows.append(
            [
                s.precision,
                f"{s.final_loss:.4g}",
                _share(s.act_zero_share),
                str(s.skipped_steps),
                scale,
                f"{s.steps_per_s:.1f}" if math.isfinite(s.steps_per_s) else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
