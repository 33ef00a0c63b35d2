"""The numbers behind the training panel: one run's records in bounded numpy buffers.

Qt-free on purpose (tested without a GUI). Records arrive typed (`runlog.Record`, from the
one `RecordStream`) from a live job or a replayed file; the model keeps

- per-step scalars (loss, scale, growth tracker, ...) in a decimating buffer: when the
  buffer is full every other point is dropped and only every 2nd, 4th, ... step is kept
  from then on, so memory stays bounded however long the run (the run file keeps all);
- the latest statistics step in full (histograms, layers, memory, format shares);
- the gradient exponent histograms over time as a (columns x binades) image, also
  decimating (pairs of columns are merged when full).

`what_if` answers "how much of this histogram would underflow / overflow in FP16 at loss
scale 2**k" from the recorded counts.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpexplorer.gui.training.growing import INITIAL_ROWS, grown_rows
from fpexplorer.gui.training.quant_model import QuantHistory
from fpexplorer.training.config import options_before_logged
from fpexplorer.training.precision import find_precision_mode
from fpexplorer.training.records import (
    EndRecord,
    FormatShares,
    HeaderRecord,
    Histogram,
    LayerStats,
    LostUpdates,
    Memory,
    Record,
    StepRecord,
    StepStats,
    decode_float,
    from_schema1_dict,
)
from fpexplorer.training.replay_scaler import EvidenceBuffer
from fpexplorer.training.runlog import RunAssembly
from fpexplorer.training.summary import count_optimizer_skips

# The binade axis of the heatmap: fixed, so the image never reshapes. It covers FP32's
# subnormals (2**-149) up to FP32's largest binade (2**127).
HEAT_LO = -150
HEAT_HI = 128
HEAT_BINS = HEAT_HI - HEAT_LO


def scalar_fields(step_record: type = StepRecord) -> tuple[str, ...]:
    """The per-step scalars of the step record (numbers and flags besides `step`), derived
    from it: a scalar field added to `StepRecord` gets its column here and in the CSV
    export with no change to this module."""
    return tuple(
        name
        for name, hint in typing.get_type_hints(step_record).items()
        if name != "step" and hint in (float, int, bool)
    )


SCALAR_FIELDS: tuple[str, ...] = scalar_fields()


def to_float(value: Any) -> float:
    """A free-form setting (a header's config value) as a float; NaN when it is none.

    Numbers and the run log's spellings "NaN", "Infinity", "-Infinity" (`decode_float`,
    the one decoder); booleans count as 0/1, anything else is NaN."""
    if isinstance(value, bool):
        return float(value)
    try:
        return decode_float(value)
    except ValueError:
        return math.nan


@dataclass(frozen=True, slots=True)
class WhatIf:
    """What a histogram would become in FP16 at loss scale 2**log2_scale."""

    log2_scale: int
    total: int
    zero: int  # already exactly zero: stays zero at any scale
    underflow: int  # would fall below FP16's smallest subnormal (2**-24): flushed or mangled
    subnormal: int  # would land in FP16's subnormal range: loses precision
    overflow: int  # would exceed FP16's largest finite value (65504): becomes inf
    nonfinite: int  # already inf or NaN

    def share(self, count: int) -> float:
        return count / self.total if self.total else 0.0


def what_if(hist: Histogram, log2_scale: int, recorded_log2_scale: float = 0.0) -> WhatIf:
    """Classify a recorded histogram as if its values were multiplied by 2**log2_scale.

    A histogram recorded at scale 2**r (e.g. activation gradients, which are recorded
    scaled) is shifted by log2_scale - r. Power-of-two scales move whole binades, so the
    counts are exact: binade e lands on [2**(e+s), 2**(e+s+1)); it underflows when
    e + s < -24 (below 2**-24 = 5.96e-08), is subnormal when -24 <= e + s < -14, and
    overflows when e + s >= 16 (2**16 > 65504; the binade [2**15, 2**16) holds 65504 and
    rounds to at most 65504 except its last 16 units, which the counts cannot resolve).
    """
    shift = log2_scale - recorded_log2_scale
    counts = np.asarray(hist.counts, dtype=np.int64)
    shifted = np.arange(hist.lo, hist.lo + len(counts), dtype=np.float64) + shift
    underflow = int(counts[shifted < -24].sum())
    subnormal = int(counts[(shifted >= -24) & (shifted < -14)].sum())
    overflow = int(counts[shifted >= 16].sum())
    return WhatIf(
        log2_scale=log2_scale,
        total=hist.total,
        zero=hist.zero,
        underflow=underflow,
        subnormal=subnormal,
        overflow=overflow,
        nonfinite=hist.inf + hist.nan,
    )


class DecimatingSeries:
    """Columns of floats over steps, bounded: halves itself (keeps every other row) when full.

    After k halvings only every 2**k-th offered row is kept, so the rows stay evenly spread
    over the whole run and memory never exceeds `capacity` rows.
    """

    def __init__(self, names: Iterable[str], capacity: int = 4096) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError("capacity must be an even number >= 4")
        self.names = tuple(names)
        self.capacity = capacity
        # Rows are allocated as they come (doubling up to `capacity`): a short run costs
        # what it holds, not a full buffer (hundreds of small runs opened at once took
        # ~1 MB each).
        rows = min(capacity, INITIAL_ROWS)
        self._data = np.full((rows, len(self.names) + 1), np.nan, dtype=np.float64)
        self._size = 0
        self._stride = 1
        self._offered = 0

    def __len__(self) -> int:
        return self._size

    @property
    def stride(self) -> int:
        return self._stride

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def append(self, step: float, values: Iterable[float]) -> None:
        offered = self._offered
        self._offered += 1
        if offered % self._stride:
            return
        if self._size == len(self._data) < self.capacity:
            self._data = grown_rows(self._data, self.capacity, np.nan)
        if self._size == self.capacity:
            kept = self._data[0 : self._size : 2].copy()
            self._data[: len(kept)] = kept
            self._data[len(kept) :] = np.nan
            self._size = len(kept)
            self._stride *= 2
            if offered % self._stride:
                return
        row = self._data[self._size]
        row[0] = step
        row[1:] = list(values)
        self._size += 1

    @property
    def steps(self) -> np.ndarray:
        return self._data[: self._size, 0]

    def column(self, name: str) -> np.ndarray:
        return self._data[: self._size, 1 + self.names.index(name)]


class HeatmapBuffer:
    """Histograms over time as an image of (columns, HEAT_BINS) shares, bounded.

    Each column is one statistics step; the value is log10 of the share of elements in
    each binade (-inf for none, clipped at -8 for display). When full, neighbouring
    columns are merged (their counts summed), so the image covers the whole run.
    """

    def __init__(self, capacity: int = 512) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError("capacity must be an even number >= 4")
        self.capacity = capacity
        rows = min(capacity, INITIAL_ROWS)  # grown as columns come, as DecimatingSeries
        self._counts = np.zeros((rows, HEAT_BINS), dtype=np.float64)
        self._first_step = np.zeros(rows, dtype=np.float64)
        self._last_step = np.zeros(rows, dtype=np.float64)
        self._size = 0
        self._per_column = 1  # statistics steps merged into one column
        self._pending = 0  # statistics steps already merged into the open last column

    def __len__(self) -> int:
        return self._size

    def add(self, step: int, hist: Histogram) -> None:
        binned = np.zeros(HEAT_BINS, dtype=np.float64)
        counts = np.asarray(hist.counts, dtype=np.float64)
        idx = np.arange(hist.lo, hist.lo + len(counts), dtype=np.int64) - HEAT_LO
        inside = (idx >= 0) & (idx < HEAT_BINS)
        np.add.at(binned, idx[inside], counts[inside])
        # Values outside the fixed axis are piled onto its edges rather than dropped.
        binned[0] += counts[idx < 0].sum()
        binned[-1] += counts[idx >= HEAT_BINS].sum()
        if self._pending and self._pending < self._per_column:
            self._counts[self._size - 1] += binned
            self._last_step[self._size - 1] = step
            self._pending += 1
            return
        if self._size == len(self._counts) < self.capacity:
            self._counts = grown_rows(self._counts, self.capacity, 0.0)
            self._first_step = grown_rows(self._first_step, self.capacity, 0.0)
            self._last_step = grown_rows(self._last_step, self.capacity, 0.0)
        if self._size == self.capacity:
            merged = self._counts[0::2] + self._counts[1::2]
            half = self.capacity // 2
            self._counts[:half] = merged
            self._counts[half:] = 0
            self._first_step[:half] = self._first_step[0::2]
            self._last_step[:half] = self._last_step[1::2]
            self._size = half
            self._per_column *= 2
        self._counts[self._size] = binned
        self._first_step[self._size] = step
        self._last_step[self._size] = step
        self._size += 1
        self._pending = 1

    def image(self) -> np.ndarray:
        """log10(share) per (column, binade), float32, -8 where empty."""
        counts = self._counts[: self._size]
        totals = counts.sum(axis=1, keepdims=True)
        totals[totals == 0] = 1.0
        with np.errstate(divide="ignore"):
            shares = np.log10(counts / totals)
        image: np.ndarray = np.clip(shares, -8.0, 0.0).astype(np.float32)
        return image

    @property
    def column_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(first step, last step) of each column, in order: statistics steps need not be
        evenly spaced (a time budget, alarms between them, statistics off but for skips)."""
        return self._first_step[: self._size].copy(), self._last_step[: self._size].copy()

    @property
    def step_span(self) -> tuple[float, float]:
        if not self._size:
            return (0.0, 1.0)
        return (float(self._first_step[0]), float(self._last_step[self._size - 1]))


def run_label(config: Mapping[str, Any] | None, fallback: str = "run") -> str:
    """A short name for a run made of its settings, e.g. 'mlp fp16 lr=0.001 seed=0'."""
    if not config:
        return fallback
    task = str(config.get("task", "?"))
    if ":" in task:  # a user's file: its file name says enough
        task = task.replace("\\", "/").rsplit("/", 1)[-1]
    precision = str(config.get("precision", "?"))
    parts = [task, precision]
    mode = find_precision_mode(precision)
    scaler = mode.scaler if mode is not None else None
    if scaler == "static" and config.get("loss_scale") is not None:
        parts.append(f"scale={setting_number(to_float(config['loss_scale']))}")
    elif scaler == "dynamic" and to_float(config.get("init_scale", 65536.0)) != 65536.0:
        parts.append(f"init={setting_number(to_float(config['init_scale']))}")
    if config.get("lr") is not None:  # None: the task's default, not known until the header
        parts.append(f"lr={setting_number(to_float(config['lr']))}")
    if "seed" in config:
        parts.append(f"seed={config['seed']}")
    return " ".join(parts)


# Settings already in every label, or that say nothing about the run's numerics.
_LABEL_BASE_KEYS = frozenset({"task", "precision", "out", "stream"})


def distinguishing_details(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """For runs whose labels (run_label) coincide, the settings that tell them apart.

    Overlaid runs are named by their settings; two fp16 runs that differ only in, say,
    growth_interval would otherwise carry the same name in the legend. Runs with the same
    label and the same settings are numbered in the order given.
    """
    # An option missing from an older header is what the run did then (an nvfp4 run from
    # before NVIDIA's recipe: 1-D blocks, no Hadamard), not "default": today's is another.
    configs = [{**options_before_logged(config.get("precision")), **config} for config in configs]
    details = [""] * len(configs)
    groups: dict[str, list[int]] = {}
    for index, config in enumerate(configs):
        groups.setdefault(run_label(config), []).append(index)
    for indices in groups.values():
        if len(indices) < 2:
            continue
        keys = sorted(
            {key for i in indices for key in configs[i]} - _LABEL_BASE_KEYS,
        )
        differing = [key for key in keys if len({repr(configs[i].get(key)) for i in indices}) > 1]
        texts = [
            " ".join(f"{key}={_setting_text(configs[i].get(key))}" for key in differing)
            for i in indices
        ]
        for position, (i, text) in enumerate(zip(indices, texts, strict=True)):
            if texts.count(text) > 1:  # the same settings twice: numbered, in order
                number = texts[: position + 1].count(text)
                text = f"{text} #{number}".strip()
            details[i] = text
    return details


def setting_number(value: float) -> str:
    """A number setting as it was given: the shortest decimal that reads back as the same
    float (what was typed, "0.0003"), in the app's notation ("1e-5", "65536"); never rounded
    to six digits, which gave two runs of lr 0.0001234567 and 0.0001234568 one name."""
    if not math.isfinite(value):
        return repr(value)
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    mantissa = mantissa.removesuffix(".0")
    return f"{mantissa}e{int(exponent)}" if e else mantissa


def _setting_text(value: Any) -> str:
    if isinstance(value, float):
        return setting_number(value)
    return "default" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class SkipEvent:
    """A skipped step and, where the job found it, the first layer that went non-finite."""

    step: int
    scale: float
    first_nonfinite: str | None
    # The first module whose forward output went inf/NaN: where an activation overflow
    # starts (the backward-order name is often just the loss's last layer).
    first_nonfinite_forward: str | None = None
    # A run of several ranks (the merged log): the rank where it started (the lowest, when
    # several started at once); then `first_nonfinite` is that rank's layer.
    first_nonfinite_rank: int | None = None


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """Everything a statistics step carried (the latest one is kept in full): the step's
    number and loss scale beside its `StepStats`, field for field."""

    step: int
    scale: float
    grad_hist: Histogram | None = None
    act_hist: Histogram | None = None
    act_zero_share: float | None = None
    layers: tuple[LayerStats, ...] = ()
    first_nonfinite: str | None = None
    format_shares: dict[str, FormatShares] = field(default_factory=dict)
    lost_updates: LostUpdates | None = None
    memory: Memory | None = None
    activations_not_measured: str | None = None  # why act_hist is None ("compiled model")

    @classmethod
    def of(cls, record: StepRecord, stats: StepStats) -> StatsSnapshot:
        return cls(
            step=record.step,
            scale=record.scale,
            grad_hist=stats.grad_hist,
            act_hist=stats.act_hist,
            act_zero_share=stats.act_zero_share,
            layers=stats.layers,
            first_nonfinite=stats.first_nonfinite,
            format_shares=stats.format_shares,
            lost_updates=stats.lost_updates,
            memory=stats.memory,
            activations_not_measured=stats.activations_not_measured,
        )


class RunModel:
    """One run (live or replayed): header, bounded per-step scalars, latest statistics."""

    MAX_SKIP_EVENTS = 2000
    MAX_PROBLEMS = 100

    def __init__(self, scalar_capacity: int = 4096, heat_capacity: int = 512) -> None:
        self.header: HeaderRecord | None = None
        self.end: EndRecord | None = None
        self.scalars = DecimatingSeries(SCALAR_FIELDS, scalar_capacity)
        self.grad_heat = HeatmapBuffer(heat_capacity)
        self.act_heat = HeatmapBuffer(heat_capacity)
        self.quant = QuantHistory()  # the quantized linear layers (FP8/MX/NVFP4 modes)
        self.latest_step: StepRecord | None = None
        self.latest_stats: StatsSnapshot | None = None
        # Skips: the first MAX_SKIP_EVENTS are kept (a collapse usually starts there),
        # later ones only counted, so memory stays bounded.
        self.skip_events: list[SkipEvent] = []
        self.skipped_count = 0
        self.skipped_by_optimizer: list[int] = []  # with several optimizers, each one's skips
        self.first_nonfinite_event: SkipEvent | None = None  # the first step naming a layer
        self.first_nonfinite_step: int | None = None  # inf/NaN gradients, named or not
        self.first_nan_loss_step: int | None = None  # the first inf/NaN loss
        self.steps_seen = 0
        # Which records are the run's, as the run log's reader decides (runlog.collect_run);
        # a later header before any step replaces a live job's provisional one (the form's).
        self.assembly = RunAssembly(replace_header=True)
        # A step whose loss scale was not 1: a user's loop labelled "bf16" (its autocast
        # dtype) that runs a GradScaler all the same scales its loss.
        self.scale_other_than_one = False
        # A growth tracker that counted, or a scale that moved: a dynamic scaler ran (in a
        # user's loop whose label, its autocast dtype, does not say so).
        self.scale_moved = False
        # Every step's overflow evidence, 26 bytes a step: what a loss-scale replay needs.
        self.scaler_evidence = EvidenceBuffer()
        self.problems: list[str] = []
        self.source: str | None = None
        # Set by whoever shows several runs together: what tells this run from the others.
        self.label_detail = ""
        self.closed = False  # no more records will come (replay read, or job gone)
        self.revision = 0  # bumped on every change; views redraw when it moved

    # ----- identity -------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.header.config) if self.header is not None else {}

    @property
    def label(self) -> str:
        label = run_label(self.config, fallback=self.source or "run")
        ranks = self.header.ranks if self.header is not None else None
        if ranks is not None:
            # A run of several ranks: its logs share every setting, so the tag comes first
            # (the run list elides long names in the middle).
            tag = f"ranks 0-{ranks.world_size - 1}" if ranks.merged else f"rank {ranks.rank}"
            label = f"[{tag}] {label}"
        return f"{label} {self.label_detail}" if self.label_detail else label

    @property
    def rank_text(self) -> str:
        """'merged, 4 ranks' or 'rank 2' for a log of a run of several ranks; else ''."""
        ranks = self.header.ranks if self.header is not None else None
        if ranks is None:
            return ""
        return f"merged, {ranks.world_size} ranks" if ranks.merged else f"rank {ranks.rank}"

    @property
    def planned_steps(self) -> int | None:
        steps = self.config.get("steps")
        return int(steps) if isinstance(steps, (int, float)) and steps > 0 else None

    @property
    def precision(self) -> str:
        return str(self.config.get("precision", ""))

    @property
    def status(self) -> str:
        if self.end is not None:
            return self.end.status
        if self.closed:
            return "incomplete"  # the file or the job ended without an `end` record
        return "running" if self.header is not None else "empty"

    # ----- input ----------------------------------------------------------------------

    def add_problem(self, message: str) -> None:
        if len(self.problems) < self.MAX_PROBLEMS:
            self.problems.append(message)
        self.revision += 1

    def add_records(self, records: Iterable[Record | Mapping[str, Any]]) -> int:
        """Append typed records (header, steps, end); returns how many were used.

        Hand-built dicts (tests) go through the run log's one decoder first
        (`from_schema1_dict`); records of unknown types are skipped, as the contract allows.
        """
        used = 0
        for item in records:
            record: Any = item
            if isinstance(item, Mapping):
                try:
                    record = from_schema1_dict(item)
                except ValueError as error:
                    self.add_problem(f"not a record ({error}): {str(item)[:80]}")
                    continue
                if record is None:
                    continue
            # As the run log's own reader assembles a run (runlog.collect_run, what `fpexplorer
            # runs` reads): the header is one before any step (a live job's provisional one,
            # from the form, is replaced by the job's), the end the first, and steps after it
            # are not the run's. The panel took each header, end and step as it came: a log
            # of two runs concatenated showed the second's settings and end over both runs'
            # steps, where `runs summarize` showed the first's.
            # As there too, a first header after step records is not the run's, and a step
            # whose number is not above the one before it ends the run's records (a second
            # run's, or a repeat): the reader's stream says so, with the line, and these
            # are left out without a word more.
            if not isinstance(record, StepRecord | HeaderRecord | EndRecord):
                self.add_problem(f"not a record: {record!r:.80}")
                continue
            place = self.assembly.place(record)
            if isinstance(record, StepRecord):
                if place == RunAssembly.AFTER_END:
                    self.add_problem(f"step {record.step} after the end record ignored")
                if place != RunAssembly.STEP:
                    continue
                self._add_step(record)
            elif isinstance(record, HeaderRecord):
                if place == RunAssembly.SECOND_HEADER:
                    self.add_problem("a second header record ignored")
                if place != RunAssembly.HEADER:
                    continue
                self.header = record
            else:
                if place == RunAssembly.SECOND_END:
                    self.add_problem("a second end record ignored")
                if place != RunAssembly.END:
                    continue
                self.end = record
            used += 1
        if used:
            self.revision += 1
        return used

    def _add_step(self, record: StepRecord) -> None:
        self.steps_seen += 1
        if record.scale != 1.0:
            self.scale_other_than_one = True
        previous = self.latest_step
        if record.growth_tracker > 0 or (previous is not None and previous.scale != record.scale):
            self.scale_moved = True
        self.scaler_evidence.add(record)  # for the loss-scale what-if (scaler_whatif)
        self.scalars.append(record.step, (float(getattr(record, name)) for name in SCALAR_FIELDS))
        stats = record.stats
        first_nonfinite = stats.first_nonfinite if stats is not None else None
        ranks = record.ranks
        origin_rank = ranks.first_nonfinite_rank if ranks is not None else None
        if origin_rank is not None and ranks is not None and ranks.first_nonfinite_layer:
            first_nonfinite = ranks.first_nonfinite_layer
        event = SkipEvent(
            record.step,
            record.scale,
            first_nonfinite,
            stats.first_nonfinite_forward if stats is not None else None,
            origin_rank,
        )
        if record.skipped:
            self.skipped_count += 1
            count_optimizer_skips(self.skipped_by_optimizer, record)
            if len(self.skip_events) < self.MAX_SKIP_EVENTS:
                self.skip_events.append(event)
        # Runs without a scaler never skip, yet their gradients go inf/NaN all the same: the
        # first non-finite step and layer are kept whatever the precision.
        if first_nonfinite and self.first_nonfinite_event is None:
            self.first_nonfinite_event = event
        # A missing grad_norm reads NaN, so only an inf norm is taken as a sign on its own.
        nonfinite = record.skipped or first_nonfinite is not None or math.isinf(record.grad_norm)
        if stats is not None:
            hist = stats.grad_hist
            nonfinite = nonfinite or any(layer.nonfinite for layer in stats.layers)
            nonfinite = nonfinite or (hist is not None and hist.inf + hist.nan > 0)
        if nonfinite and self.first_nonfinite_step is None:
            self.first_nonfinite_step = record.step
        if not math.isfinite(record.loss) and self.first_nan_loss_step is None:
            self.first_nan_loss_step = record.step
        self.latest_step = record
        if stats is not None:
            self.latest_stats = StatsSnapshot.of(record, stats)
            if stats.grad_hist is not None:
                self.grad_heat.add(record.step, stats.grad_hist)
            if stats.act_hist is not None:
                self.act_heat.add(record.step, stats.act_hist)
            if stats.quant:
                self.quant.add(record.step, stats.quant)

    # ----- read-outs ------------------------------------------------------------------

    def progress(self) -> tuple[int, int | None]:
        """(steps done, steps planned or None)."""
        done = self.latest_step.step + 1 if self.latest_step else 0
        return done, self.planned_steps

    def steps_per_second(self) -> float | None:
        if not self.latest_step:
            return None
        value = self.latest_step.steps_per_s
        return value if math.isfinite(value) and value > 0 else None

    def seconds_left(self) -> float | None:
        done, planned = self.progress()
        rate = self.steps_per_second()
        if planned is None or rate is None:
            return None
        return max(planned - done, 0) / rate

    def growth(self) -> tuple[int, int] | None:
        """(growth tracker now, growth interval) for dynamic scaling, else None."""
        if not self.latest_step:
            return None
        interval = self.config.get("growth_interval")
        tracker = self.latest_step.growth_tracker
        if not isinstance(interval, (int, float)):
            return None
        if not (math.isfinite(interval) and math.isfinite(tracker)):
            return None
        # Qt's progress bar holds 32-bit ints: a damaged file's 1e30 must not raise there.
        limit = 2**31 - 1
        return min(max(int(tracker), 0), limit), min(max(int(interval), 1), limit)

    def memory_nbytes(self) -> int:
        """Bytes held by this model's numpy buffers (for the bounded-memory check)."""
        return (
            self.scalars.nbytes
            + self.grad_heat._counts.nbytes
            + self.act_heat._counts.nbytes
            + self.quant.nbytes
        )
