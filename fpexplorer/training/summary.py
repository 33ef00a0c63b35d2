"""Summaries of run logs (`fpexplorer runs`). Torch-free, like the reader it builds on.

A summary is made in one pass over the records with a fixed amount of state
(`RunSummarizer`), so `fpexplorer runs summarize|compare|check` read a log of any size in
constant memory. The one figure that needs the end first, the final loss (the mean of the
last 10% of the steps), comes from a second, short read: the summarizer keeps the byte
offsets of at most `CHECKPOINTS` evenly spaced steps, and re-reads the file from the last
one before the tail (at most a further 1/CHECKPOINTS of it).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

from fpexplorer.formats.decimal import approximate_decimal, display_decimal, figure_text
from fpexplorer.training.config import options_before_logged
from fpexplorer.training.precision import PRECISION_NAMES, precision_mode
from fpexplorer.training.records import (
    SCHEMA_VERSION,
    EndRecord,
    HeaderRecord,
    Histogram,
    LayerStats,
    LostUpdates,
    Memory,
    Record,
    StepRecord,
)
from fpexplorer.training.runlog import NO_HEADER, RecordStream, Run, RunAssembly

CHECKPOINTS = 64  # step offsets kept for the final-loss pass (halved when full)
READ_CHUNK_BYTES = 256 * 1024  # what is read, parsed and let go at a time


@dataclass(frozen=True, slots=True)
class QuantWorst:
    """The largest share of one quantized tensor's values that saturated (or flushed to
    zero) on any statistics step of a run (fp8, MX and NVFP4 modes): where and when."""

    share: float
    layer: str
    role: str  # input | weight | grad_output
    format: str
    step: int


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The figures of one run that answer "did mixed precision work here, and why not"."""

    path: str
    task: str
    precision: str
    device: str
    status: str  # the end record's status, or "incomplete" (no end record: killed)
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
    steps_per_s: float  # steps after the first over the time they took
    memory_bytes: dict[str, int]  # last statistics step: part -> bytes (all dtypes)
    problems: tuple[str, ...]
    # Quantized linears (StepStats.quant): the tensor that saturated / flushed the most.
    worst_saturated: QuantWorst | None = None
    worst_flushed: QuantWorst | None = None
    quantized: bool = False  # the run recorded quantized-layer statistics
    # The precision with the options that change its numerics, "nvfp4 (no Hadamard)".
    precision_label: str = ""
    lost_update_steps: int = 0  # the statistics steps the lost-update share is a mean of
    # Statistics steps left out of that mean because FP16 cannot hold some updated weights
    # (|w| > 65504, or inf/NaN): there FP16 weights would overflow, not lose updates.
    lost_update_unholdable_steps: int = 0
    # A loop watched with several optimizers: the steps the scaler skipped each one (in
    # the order given); () with one optimizer.
    skipped_by_optimizer: tuple[int, ...] = ()
    # Every problem found: `problems` shows at most the reader's MAX_PROBLEMS lines.
    problem_count: int = 0
    # No end record and a torn last line: the job was killed while writing it (ignored).
    torn_last_line: bool = False
    # Why statistics steps left the activation statistics out ("compiled model"), if any did.
    activations_not_measured: str | None = None
    # Why the file holds no run this fpexplorer can read (no header, step or end record in
    # it): "empty file", "not a run log ...", "schema 3 is newer ...", "cannot read ...".
    # None for a run log. `runs summarize` and `compare` name such a file in one line
    # instead of a summary of nothing.
    unreadable: str | None = None

    @property
    def complete(self) -> bool:
        """The log ends with its `end` record (a killed job's does not)."""
        return self.status != "incomplete"


def precision_label(config: Mapping[str, Any]) -> str:
    """A run's precision mode and the options that change what its quantized layers do, as
    the low-precision table names them: "nvfp4 (1-D weight blocks, no Hadamard)", "fp8
    (delayed, BF16 first/last)". A header from before an option says what the run did then."""
    precision = str(config.get("precision", ""))
    options = {**options_before_logged(precision), **config}
    extra = []
    if options.get("fp8_scaling") == "delayed" and precision == "fp8":
        extra.append("delayed")
    if precision == "nvfp4" and options.get("nvfp4_weight_blocks") == "1d":
        extra.append("1-D weight blocks")
    if precision == "nvfp4" and options.get("hadamard") is False:
        extra.append("no Hadamard")
    if options.get("bf16_first_last") is True:
        extra.append("BF16 first/last")
    return precision + (f" ({', '.join(extra)})" if extra else "")


def _tail_length(steps: int) -> int:
    return max(1, steps // 10)


class RunSummarizer:
    """Accumulates a summary record by record, in constant memory.

    `add(record, offset)` for each record in file order (offset: where its line starts,
    for the final-loss pass; None when the records are not from a file), then `result()`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.header: HeaderRecord | None = None
        self.end: EndRecord | None = None
        self.problems: list[str] = []
        # Problems not in `problems` (the stream's beyond its MAX_PROBLEMS lines).
        self.hidden_problems = 0
        self.torn_last_line = False  # set by summarize_file: killed mid-write
        # Set by summarize_file: the file could not be read, its size, a newer schema met.
        self.read_error: str | None = None
        self.size: int | None = None
        self.refused_schema: int | None = None
        self.torn_first_line = False  # the file's one line is a record cut short
        # Records after the end or a second header: counted, one line each in the result
        # (a line per record grew without bound: two runs appended to one file).
        self.extra_headers = 0
        self.extra_ends = 0
        self.steps_after_end = 0
        self.steps_after_end_range = (0, 0)  # the first and last step number ignored
        # Which records are the run's: the rule `runlog.collect_run` follows too.
        self.assembly = RunAssembly()
        # summarize(run): the run's problems already say what is misplaced in it.
        self.assembly_reported = False
        self.steps = 0
        self.first_loss = math.nan
        self.min_loss = math.inf
        self.nonfinite_losses = 0
        self.skipped = 0
        self.skipped_by_optimizer: list[int] = []
        self.scale_min = math.inf
        self.scale_max = -math.inf
        self.scale_final = math.nan
        self.act_zero = self.act_total = self.grad_zero = self.grad_total = 0
        self.act_dtypes: Counter[str] = Counter()
        self.act_not_measured: str | None = None
        self.lost_sum = 0.0
        self.lost_count = 0
        self.lost_kind: str | None = None
        self.lost_unholdable = 0
        self.origins: Counter[str] = Counter()
        self.forward_origins: Counter[str] = Counter()
        self.last_memory: Memory | None = None
        # Saved activations are measured on full statistics steps only (the parameter-gradient
        # statistics of an alarm step between them record none): the last measured ones.
        self.last_activations: dict[str, int] | None = None
        self.first_time = math.nan
        self.last_time = math.nan
        # Checkpoints: (step index, byte offset) of every `stride`-th step.
        self.checkpoints: list[tuple[int, int]] = []
        self.stride = 1
        self.losses: list[float] | None = None  # kept only when records are not from a file
        self.worst_saturated: QuantWorst | None = None
        self.worst_flushed: QuantWorst | None = None
        self.quant_seen = False

    def add(self, record: Record, offset: int | None = None) -> None:
        place = self.assembly.place(record)
        if isinstance(record, StepRecord):
            if place == RunAssembly.STEP:
                self._add_step(record, offset)
            elif place == RunAssembly.AFTER_END:
                first = self.steps_after_end_range[0] if self.steps_after_end else record.step
                self.steps_after_end += 1
                self.steps_after_end_range = (first, record.step)
        elif isinstance(record, HeaderRecord):
            if place == RunAssembly.HEADER:
                self.header = record
            elif place == RunAssembly.SECOND_HEADER:
                self.extra_headers += 1
        elif place == RunAssembly.END:
            self.end = record
        elif place == RunAssembly.SECOND_END:
            self.extra_ends += 1

    def _add_step(self, step: StepRecord, offset: int | None) -> None:
        index = self.steps
        self.steps += 1
        if offset is None:
            if self.losses is None:
                self.losses = []
            self.losses.append(step.loss)
        elif index % self.stride == 0:
            if len(self.checkpoints) == CHECKPOINTS:
                self.checkpoints = self.checkpoints[::2]
                self.stride *= 2
            if index % self.stride == 0:
                self.checkpoints.append((index, offset))
        loss = step.loss
        if index == 0:
            self.first_loss = loss
            self.first_time = step.time
        if math.isfinite(loss):
            self.min_loss = min(self.min_loss, loss)
        else:
            self.nonfinite_losses += 1
        self.skipped += step.skipped
        count_optimizer_skips(self.skipped_by_optimizer, step)
        self.scale_min = min(self.scale_min, step.scale)
        self.scale_max = max(self.scale_max, step.scale)
        self.scale_final = step.scale
        self.last_time = step.time
        stats = step.stats
        if stats is None:
            return
        if stats.activations_not_measured is not None:
            self.act_not_measured = stats.activations_not_measured
        if stats.act_hist is not None:
            self.act_zero += stats.act_hist.zero
            self.act_total += stats.act_hist.total
            self.act_dtypes[stats.act_hist.dtype or "?"] += stats.act_hist.total
        if stats.grad_hist is not None:
            self.grad_zero += stats.grad_hist.zero
            self.grad_total += stats.grad_hist.total
        if stats.lost_updates is not None and lost_share_means_something(
            stats.lost_updates, stats.grad_hist, stats.layers
        ):
            self.lost_sum += stats.lost_updates.share
            self.lost_count += 1
            self.lost_kind = stats.lost_updates.kind
        elif stats.lost_updates is not None and stats.lost_updates.nonfinite_weights:
            self.lost_unholdable += 1
            self.lost_kind = self.lost_kind or stats.lost_updates.kind
        if stats.first_nonfinite:
            self.origins[stats.first_nonfinite] += 1
        if stats.first_nonfinite_forward:
            self.forward_origins[stats.first_nonfinite_forward] += 1
        if stats.memory is not None:
            self.last_memory = stats.memory
            if stats.act_hist is not None:
                self.last_activations = stats.memory.activations
        for quant in stats.quant:
            # Strictly larger: the first step to reach a share names it.
            if quant.saturated > (self.worst_saturated.share if self.worst_saturated else 0.0):
                self.worst_saturated = QuantWorst(
                    quant.saturated, quant.layer, quant.role, quant.format, step.step
                )
            if quant.flushed > (self.worst_flushed.share if self.worst_flushed else 0.0):
                self.worst_flushed = QuantWorst(
                    quant.flushed, quant.layer, quant.role, quant.format, step.step
                )
            self.quant_seen = True

    def tail_start(self) -> tuple[int, int] | None:
        """(step index, byte offset) of the last checkpoint at or before the final-loss
        tail; None when nothing needs re-reading (no steps, or losses kept in memory)."""
        if not self.steps or self.losses is not None:
            return None
        first = self.steps - _tail_length(self.steps)
        return max((c for c in self.checkpoints if c[0] <= first), default=None)

    def result(self, tail: tuple[float, int] = (0.0, 0)) -> RunSummary:
        """The summary; `tail`: (sum, count) of the finite losses of the last 10% of the
        steps, read again from `tail_start()` (runs from a file)."""
        if self.losses is not None:
            finite = [x for x in self.losses[-_tail_length(self.steps) :] if math.isfinite(x)]
            tail = (sum(finite), len(finite))
        problems = list(self.problems)
        if self.extra_headers:
            problems.append(_counted(self.extra_headers, "a second header record", "more "
                                     "header records") + " ignored")  # fmt: skip
        if self.steps_after_end:
            first, last = self.steps_after_end_range
            problems.append(
                f"step {first} after the end record ignored" if self.steps_after_end == 1
                else f"{self.steps_after_end} step records after the end record ignored "
                f"(steps {first} .. {last})"
            )  # fmt: skip
        if self.extra_ends:
            problems.append(_counted(self.extra_ends, "a second end record", "more end "
                                     "records") + " ignored")  # fmt: skip
        if self.header is None and (self.steps or self.end is not None):
            if not (self.assembly.late_header or self.assembly_reported):
                problems.append(NO_HEADER)
        elif self.header is None and not problems:
            problems.append("the file holds no records")
        memory: dict[str, int] = {}
        if self.last_memory is not None:
            for part in ("params", "grads", "optimizer"):
                memory[part] = sum(getattr(self.last_memory, part).values())
            if self.last_activations is not None:
                memory["activations"] = sum(self.last_activations.values())
            if self.last_memory.peak_device is not None:
                memory["device peak"] = self.last_memory.peak_device
        header = self.header
        unreadable = None
        if header is None and not self.steps and self.end is None:
            unreadable = self.read_error or no_run_reason(
                self.refused_schema, self.size, self.torn_first_line
            )
        span = self.last_time - self.first_time
        rate = (self.steps - 1) / span if self.steps > 1 and span > 0 else math.nan
        steps = self.steps
        return RunSummary(
            path=str(self.path),
            task=header.task if header else "?",
            precision=header.precision if header else "?",
            precision_label=precision_label(header.config) if header else "?",
            device=f"{header.device_type} ({header.device_name})" if header else "?",
            status=self.end.status if self.end is not None else "incomplete",
            error=self.end.error if self.end else None,
            steps=steps,
            first_loss=self.first_loss,
            final_loss=tail[0] / tail[1] if tail[1] else math.nan,
            min_loss=self.min_loss if math.isfinite(self.min_loss) else math.nan,
            nonfinite_losses=self.nonfinite_losses,
            skipped_steps=self.skipped,
            skipped_by_optimizer=tuple(self.skipped_by_optimizer),
            scale_min=self.scale_min if steps else math.nan,
            scale_max=self.scale_max if steps else math.nan,
            scale_final=self.scale_final,
            act_zero_share=self.act_zero / self.act_total if self.act_total else None,
            act_dtype=self.act_dtypes.most_common(1)[0][0] if self.act_dtypes else None,
            activations_not_measured=self.act_not_measured,
            grad_zero_share=self.grad_zero / self.grad_total if self.grad_total else None,
            lost_update_share=self.lost_sum / self.lost_count if self.lost_count else None,
            lost_update_kind=self.lost_kind,
            lost_update_steps=self.lost_count,
            lost_update_unholdable_steps=self.lost_unholdable,
            first_nonfinite=tuple(self.origins.most_common()),
            first_nonfinite_forward=tuple(self.forward_origins.most_common()),
            steps_per_s=rate,
            memory_bytes=memory,
            problems=tuple(problems),
            unreadable=unreadable,
            worst_saturated=self.worst_saturated,
            worst_flushed=self.worst_flushed,
            quantized=self.quant_seen,
            problem_count=len(problems) + self.hidden_problems,
            torn_last_line=self.torn_last_line,
        )


def no_run_reason(
    refused_schema: int | None, size: int | None, torn_first_line: bool = False
) -> str:
    """Why a file from which no header, step or end record was read holds no run: a newer
    schema (`refused_schema`, as `RecordStream` met it), nothing in it (`size` 0), its only
    line a record cut short (`torn_first_line`), or something else than a run log. The CLI
    and the panel say it in these words."""
    if refused_schema is not None:
        return (
            f"schema {refused_schema} is newer than this fpexplorer reads ({SCHEMA_VERSION}): "
            "update fpexplorer to read this run"
        )
    if size == 0:
        return "empty file (a job that has not written its header yet?)"
    if torn_first_line:
        return "its only line is a record cut short (a job killed while writing its header?)"
    return "not a run log (no header, step or end record in it)"


def _counted(count: int, one: str, many: str) -> str:
    return one if count == 1 else f"{count} {many}"


def lost_share_means_something(
    lost: LostUpdates | None, grad_hist: Histogram | None, layers: Sequence[LayerStats]
) -> bool:
    """Whether a step's lost-update share measures updates: not on a step whose gradients
    held inf/NaN (there was no finite update to lose), nor on one where FP16 cannot hold
    some of the weights updated (|w| > 65504, or inf/NaN: an FP16 weight there overflows,
    which the share would count as an update lost, or as one applied for NaN). The panel
    says "n/a" there, and the run's mean leaves it out."""
    if lost is None or not math.isfinite(lost.share) or lost.nonfinite_weights:
        return False
    if grad_hist is not None and grad_hist.inf + grad_hist.nan > 0:
        return False
    return not any(layer.nonfinite for layer in layers)


def steps_text(count: int) -> str:
    """'1 step', '0 steps', '300 steps': a count of steps as the CLI prints it."""
    return f"{count} step" if count == 1 else f"{count} steps"


def summarize(run: Run) -> RunSummary:
    """The summary of a run already in memory (`load_run`)."""
    if not isinstance(run, Run):  # a path: 'str' object has no attribute 'path' said nothing
        raise TypeError(
            f"summarize takes a Run (load_run(path)), not a {type(run).__name__}; "
            "for a file, summarize_file(path)"
        )
    summarizer = RunSummarizer(run.path)
    records: list[Record] = [run.header] if run.header is not None else []
    records += [*run.steps, *([run.end] if run.end is not None else [])]
    for record in records:
        summarizer.add(record)
    summarizer.problems[:0] = [p for p in run.problems if p != "the file holds no records"]
    summarizer.assembly_reported = True  # (it said "no header record" twice)
    return summarizer.result()


def summarize_file(path: str | os.PathLike[str]) -> RunSummary:
    """The summary of a run log read as a stream: constant memory whatever its size.
    Never raises on a damaged or unreadable file (problems say what was wrong)."""
    summarizer = RunSummarizer(path)
    stream = RecordStream()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(READ_CHUNK_BYTES):
                for record, offset in zip(stream.feed(chunk), stream.offsets, strict=True):
                    summarizer.add(record, offset)
            for record, offset in zip(stream.finish(), stream.offsets, strict=True):
                summarizer.add(record, offset)
            tail = (0.0, 0)
            start = summarizer.tail_start()
            if start is not None:
                first = summarizer.steps - _tail_length(summarizer.steps)
                tail = _tail_of(handle, start, first, summarizer.steps, stream.schema)
    except OSError as error:
        summarizer.read_error = f"cannot read it: {error.strerror or error}"
        summarizer.problems.append(f"cannot read {path}: {error.strerror or error}")
        tail = (0.0, 0)
    summarizer.size = stream.bytes_fed
    summarizer.refused_schema = stream.refused_schema
    problems, count = list(stream.problems), stream.problem_count
    held_records = summarizer.header is not None or summarizer.steps > 0
    summarizer.torn_first_line = stream.torn_last_line is not None and stream.line_number == 1
    if stream.torn_last_line is not None and summarizer.end is None and held_records:
        # A run with no end record whose last line is torn was killed while writing it:
        # incomplete, not damaged (every record before it is whole). Not so a file with
        # no record at all (a binary file without a newline is one "torn" line).
        count -= 1
        problems.remove(stream.torn_last_line)
        summarizer.torn_last_line = True
    summarizer.problems[:0] = problems
    summarizer.hidden_problems = count - len(problems)
    return summarizer.result(tail)


def existing_file_text(path: str | os.PathLike[str]) -> str:
    """What a file about to be replaced holds, in a few words: "a run log of 300 steps,
    completed", or why it holds no run ("not a run log (...)"). Reads the whole file."""
    summary = summarize_file(path)
    if summary.unreadable is not None:
        return summary.unreadable
    return f"a run log of {steps_text(summary.steps)}, {summary.status}"


def _tail_of(
    handle: BinaryIO, start: tuple[int, int], first: int, steps: int, schema: int
) -> tuple[float, int]:
    """(sum, count) of the finite losses of steps first..steps-1, reading from the
    checkpoint `start` = (its step index, its byte offset)."""
    handle.seek(start[1])
    stream = RecordStream()
    stream.schema = schema  # the header is behind us: its schema still holds
    index, total, count = start[0], 0.0, 0
    while True:
        chunk = handle.read(READ_CHUNK_BYTES)
        records = stream.feed(chunk) if chunk else stream.finish()
        for record in records:
            if isinstance(record, StepRecord):
                if first <= index < steps and math.isfinite(record.loss):
                    total += record.loss
                    count += 1
                index += 1
        if not chunk:
            return total, count


def _share(value: float | None) -> str:
    """A share as a percentage to a tenth (three significant digits below 10%), exact or
    marked as rounded: "19.5%" only where it is 19.5%, else "≈19.5%"."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "n/a"
    return f"{figure_text(Fraction(value) * 100)}%"


def bytes_text(count: float) -> str:
    """A byte count in B, KiB, MiB or GiB: exact ("512 B", "64 KiB"), or rounded to a tenth
    and marked ("≈48.2 KiB"); a damaged file's 1e300 in the display notation, not 301
    digits; "?" for inf or NaN."""
    if not math.isfinite(count):
        return "?"
    size = Fraction(count)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{figure_text(size, decimals=0 if unit == 'B' else 1)} {unit}"
        size /= 1024
    return f"{figure_text(size)} GiB"


def loss_text(value: float) -> str:
    """A recorded loss in four significant digits, exact or marked as rounded ("≈0.6084");
    inf and NaN as "inf", "nan"."""
    return approximate_decimal(value, keep=4, shown=4)


def _act_zeros(summary: RunSummary) -> str:
    """'zero ≈86.5% (float16)'; 'not measured (compiled model)' when the statistics steps
    said why they left them out; 'not recorded' when no statistics step saw them."""
    if summary.act_zero_share is None:
        if summary.activations_not_measured is not None:
            return f"not measured ({summary.activations_not_measured})"
        return "not recorded"
    return f"zero {_share(summary.act_zero_share)} ({summary.act_dtype or '?'})"


def _finite_or(value: float, text: str) -> str:
    return loss_text(value) if math.isfinite(value) else text


def _quant_worst(worst: QuantWorst | None) -> str:
    """'12.5% of blocks.0.up input (float8_e4m3fn) at step 40' (exact, or marked '≈');
    'none' when no value was."""
    if worst is None:
        return "none"
    # Three significant digits: a share of 0.0004 must not read as 0.0%.
    where = f"{worst.layer} {worst.role} ({worst.format})"
    share = approximate_decimal(Fraction(worst.share) * 100, keep=3, shown=3)
    return f"{share}% of {where} at step {worst.step}"


def scale_text(value: float) -> str:
    """A loss scale exactly, as the app shows numbers (Megatron's 2^32 must not read
    "4.29497e+09"), with the power of two beside a large or small one."""
    if not math.isfinite(value) or value <= 0:
        return f"{value:g}"
    text = display_decimal(Fraction(value))  # a float's exact value
    mantissa, exponent = math.frexp(value)
    if mantissa == 0.5 and not 0 <= exponent - 1 <= 10:
        text += f" (2^{exponent - 1})"
    return text


def _loss_scaled(summary: RunSummary) -> bool:
    """Whether the run scaled its loss: its precision mode says so, or its scale ever
    differed from 1 (a loop of the user's own: its precision, labelled from the autocast
    dtype, is "bf16" under an enabled GradScaler too)."""
    if summary.precision in PRECISION_NAMES and precision_mode(summary.precision).scaled:
        return True
    return not summary.scale_min == summary.scale_max == 1.0


def count_optimizer_skips(counts: list[int], step: StepRecord) -> None:
    """Add a skipped step of a monitor watching several optimizers to `counts` (one per
    optimizer, grown as optimizers appear): the optimizers its record says were skipped (a
    step may skip more than one). Nothing for a step that was not skipped, or a run of one
    optimizer (its records have no outcomes). The run summary and the panel count alike."""
    outcomes = step.optimizer_outcomes
    if outcomes is None or not step.skipped:
        return
    counts += [0] * (len(outcomes) - len(counts))
    for position, outcome in enumerate(outcomes):
        counts[position] += outcome == "skipped"


def _skipped_by_optimizer(counts: Sequence[int]) -> str:
    """' (optimizer 0: 2, optimizer 1: 3)': the skips of each of several optimizers (a step
    may skip more than one); '' with one optimizer (no counts)."""
    if not counts:
        return ""
    return " (" + ", ".join(f"optimizer {i}: {n}" for i, n in enumerate(counts)) + ")"


def _scale_range(summary: RunSummary) -> str:
    """'1024 .. 65536 (final 32768)'; 'none (no loss scaling)' for a run without a scaler
    (a constant "1 .. 1" read as a scale that never moved)."""
    if not _loss_scaled(summary):
        return "none (no loss scaling)"
    low, high, final = (
        scale_text(value) for value in (summary.scale_min, summary.scale_max, summary.scale_final)
    )
    return f"{low} .. {high} (final {final})"


def incomplete_reason(summary: RunSummary) -> str:
    """Why a log without its end record ends where it does."""
    if summary.torn_last_line:
        return "no end record: the job was killed while writing its last line, which is ignored"
    return "no end record: the job was killed or still runs"


def format_summary(summary: RunSummary) -> str:
    """The text `fpexplorer runs summarize` prints."""
    lines = [
        f"run        {summary.path}",
        f"task       {summary.task}   precision {summary.precision_label or summary.precision}"
        f"   device {summary.device}",
        f"status     {summary.status} after {steps_text(summary.steps)}"
        + (f": {summary.error}" if summary.error else "")
        + ("" if summary.complete else f" ({incomplete_reason(summary)})"),
    ]
    if not summary.steps:
        # No step: "loss nan, scale nan .. nan" would read as a run that diverged.
        lines.append("loss       no steps recorded")
        lines.extend(f"problem    {problem}" for problem in summary.problems)
        return "\n".join(lines)
    lines += [
        # The first loss as recorded (a NaN there is news); final and min over finite ones.
        f"loss       first {loss_text(summary.first_loss)}"
        f"   final {_finite_or(summary.final_loss, 'none finite')}"
        f"   min {_finite_or(summary.min_loss, 'none finite')}"
        f"   non-finite {summary.nonfinite_losses}",
        f"scale      {_scale_range(summary)}   skipped steps {summary.skipped_steps}"
        + _skipped_by_optimizer(summary.skipped_by_optimizer),
        f"act grads  {_act_zeros(summary)}   param grads zero {_share(summary.grad_zero_share)}",
    ]
    unholdable = summary.lost_update_unholdable_steps
    # Weights FP16 cannot hold: an overflow of the FP16 weights, not a rounding loss.
    beyond = (
        f"{unholdable} statistics step{'' if unholdable == 1 else 's'} had weights FP16 "
        + ("holds as inf/NaN" if summary.lost_update_kind == "actual" else "cannot hold")
        + " (|w| > 65504, or inf/NaN), left out"
    )
    if summary.lost_update_share is not None:
        kind = "lost" if summary.lost_update_kind == "actual" else "FP16 weights would lose"
        # Skipped steps made no update and have no share: a run that skipped all but one
        # step must not read as one that lost nothing.
        count = summary.lost_update_steps
        over = f"{count} statistics step{'' if count == 1 else 's'} with finite updates"
        if unholdable:
            over += f"; {beyond}"
        lines.append(f"updates    {kind}: {_share(summary.lost_update_share)} (mean of {over})")
    elif unholdable:
        lines.append(f"updates    lost to rounding: n/a ({beyond})")
    if summary.first_nonfinite_forward:
        origins = ", ".join(f"{n} ({c})" for n, c in summary.first_nonfinite_forward[:5])
        lines.append(f"overflow   first inf/NaN output in forward: {origins}")
    if summary.first_nonfinite:
        origins = ", ".join(f"{n} ({c})" for n, c in summary.first_nonfinite[:5])
        lines.append(f"overflow   first inf/NaN gradient in backward: {origins}")
    if summary.memory_bytes:
        parts = "   ".join(f"{k} {bytes_text(v)}" for k, v in summary.memory_bytes.items())
        lines.append(f"memory     {parts}")
    if summary.quantized:
        lines.append(f"saturated  at most {_quant_worst(summary.worst_saturated)}")
        lines.append(f"flushed    at most {_quant_worst(summary.worst_flushed)}")
    if math.isfinite(summary.steps_per_s):
        speed = figure_text(summary.steps_per_s, decimals=2)
        lines.append(f"speed      {speed} steps/s (steps over their time)")
    lines.extend(f"problem    {problem}" for problem in summary.problems)
    return "\n".join(lines)


TABLE_COLUMNS = (
    "run", "task", "precision", "status", "final loss", "act-grad zeros", "skipped",
    "loss scale", "steps/s",
)  # fmt: skip


def run_names(paths: Sequence[str]) -> list[str]:
    """Each run by its file name, or by as many trailing folders as tell it from the other
    runs of the same name (every multi-rank run's merged log is a `run.jsonl`)."""
    parts = [Path(path).parts for path in paths]
    depth = [1] * len(paths)
    while True:
        names = [str(Path(*p[-d:])) for p, d in zip(parts, depth, strict=True)]
        counts = Counter(names)
        clashing = [
            i for i, name in enumerate(names) if counts[name] > 1 and depth[i] < len(parts[i])
        ]
        if not clashing:  # unique, or the same file given twice
            return names
        for i in clashing:
            depth[i] += 1


def format_table(summaries: Sequence[RunSummary]) -> str:
    """A Markdown table comparing runs, one row each, named by file and task."""
    rows = [list(TABLE_COLUMNS)]
    names = run_names([str(s.path) for s in summaries])
    for s, name in zip(summaries, names, strict=True):
        if not s.steps:
            scale = "-"  # no step, no scale (not "nan–nan")
        elif not _loss_scaled(s):
            scale = "none"
        elif s.scale_min == s.scale_max:
            scale = scale_text(s.scale_min)
        else:
            scale = f"{scale_text(s.scale_min)}–{scale_text(s.scale_max)}"
        rows.append(
            [
                name.replace("|", "\\|"),
                s.task.replace("\\", "/").rsplit("/", 1)[-1].replace("|", "\\|"),
                (s.precision_label or s.precision).replace("|", "\\|"),
                s.status,
                loss_text(s.final_loss) if s.steps else "-",
                _share(s.act_zero_share)
                if s.act_zero_share is not None or s.activations_not_measured is None
                else "not measured",
                str(s.skipped_steps),
                scale,
                figure_text(s.steps_per_s) if math.isfinite(s.steps_per_s) else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
