"""What the training panel shows, decided without Qt (tested without a window).

The panel and its plots only render what this module computes:

- `RunList`: the runs shown, which one is selected, which are overlaid, what each is
  called in the list (and whether it is still live), which runs are kept when a job ends,
  and the selected run's settings for the form and the code view (`settings_of`);
- the read-outs of one run: the first non-finite step and layer (`first_nonfinite_view`),
  the layer table (`layer_table_view`), lost updates (`lost_updates_text`), the histogram's
  counts and what-if lines, the progress bar (`progress_view`);
- what the plots draw besides the curves: ranges from the data alone (`data_range`),
  the optional smoothing of the loss (`smoothed`), markers at the first NaN loss and the
  first non-finite gradients (`run_markers`), hover read-outs (`hover_text` and friends),
  the format rulers of the histogram (`ruler_formats`) and the limits drawn over the
  heatmap (`heatmap_limits`), with ranges computed exactly by `fpexplorer.formats` for any
  format, and what each precision mode implies read from `training.precision`.

A run file is data from outside: every text made from it is elided (`elide`) so that
nothing a run contains can widen the window.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fpexplorer.formats import get_format
from fpexplorer.formats.decimal import display_decimal, figure_text
from fpexplorer.gui.training.run_model import (
    HEAT_BINS,
    HEAT_LO,
    HeatmapBuffer,
    RunModel,
    WhatIf,
    distinguishing_details,
)
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.precision import find_precision_mode
from fpexplorer.training.records import Histogram
from fpexplorer.training.summary import lost_share_means_something

FloatArray = npt.NDArray[np.float64]

# Distinct colours for overlaid runs (colour-blind friendly, Okabe-Ito). No black: it
# vanishes on the dark theme's plot background.
RUN_COLOURS: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#999999",
    "#F0E442",
)

# Texts from a run file (names, settings, numbers) are cut to this many characters.
MAX_TEXT = 80
MAX_TOOLTIP = 400  # a tooltip holds a whole name, up to this (a damaged file's could be MBs)
ELLIPSIS = "…"


def run_colour(index: int) -> str:
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def elide(text: str, limit: int = MAX_TEXT) -> str:
    """`text` cut in the middle to at most `limit` characters, the cut marked with '…'.

    The middle goes: a run's name starts with its task and ends with what tells it apart.
    """
    text = " ".join(text.split())  # a newline in a file's string must not add a line
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + ELLIPSIS + text[len(text) - tail :]


# A number as run names write them ("0.0002", "1e-05", "65536", "fp16"'s 16): never cut
# inside one, since the part left reads as another number ("lr=0…2").
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# A run name's words; a bracketed tag ("[rank 0]") is one word.
_NAME_WORD = re.compile(r"\[[^\]]*\]|\S+")
_STATUS_SEPARATOR = "—"  # the run list's "name — status"
_ROUTINE_STATUSES = frozenset({"— completed", "— running"})  # the first statuses to go
_MIN_WORD_HEAD = 3  # a first word cut shorter than this says nothing: it goes whole


def _word_cuts(word: str) -> list[int]:
    """Where `word` may be cut (keeping word[:k]), longest first: not inside a number."""
    inside = {k for m in _NUMBER.finditer(word) for k in range(m.start() + 1, m.end())}
    return [k for k in range(len(word) - 1, _MIN_WORD_HEAD - 1, -1) if k not in inside]


def name_word_counts(names: Iterable[str]) -> Counter[str]:
    """For `elide_words`' `shared`: in how many of `names` each word occurs."""
    return Counter(word for name in names for word in set(_NAME_WORD.findall(name)))


def elide_words(
    text: str, fits: Callable[[str], bool], shared: Mapping[str, int] | None = None
) -> str:
    """`text` (a run's name, with " — status" in the run list) shortened until `fits` says
    it fits, a word at a time, each cut marked '…'; a number is never cut.

    What goes first tells runs apart least: the first word (the task, or a file's name)
    is cut at its end, then dropped; then the status after ' — ' where it is a routine one
    ("completed", "running"); then the settings, those that most runs shown with it also
    hold first (`shared`: `name_word_counts` of all the names shown together), from the
    left among equals (so the distinguishing end stays: "… lr=0.0002 seed=1"); then a
    status that says something went wrong ("failed", "incomplete", "stopped": a lost rank's
    must not be the first thing to go); a leading "[rank K]" tag last. Nothing that fits: '…'.
    """
    text = " ".join(text.split())
    if fits(text):
        return text
    words = _NAME_WORD.findall(text)
    tail_at = words.index(_STATUS_SEPARATOR) if _STATUS_SEPARATOR in words else len(words)
    main, tail = words[:tail_at], " ".join(words[tail_at:])  # the status goes whole
    tagged = bool(main) and main[0].startswith("[") and len(main) > 1
    first = 1 if tagged else 0  # the task's word
    shown: list[str | None] = [*main, *([tail] if tail else [])]  # None: dropped

    def joined() -> str:
        parts: list[str] = []
        for word in shown:
            if word is None:
                if not parts or parts[-1] != ELLIPSIS:
                    parts.append(ELLIPSIS)
            else:
                parts.append(word)
        return " ".join(parts)

    def shortened(step: int) -> str:
        """The candidate after `step` shortenings, in their order (below): the task cut
        at each allowed place, then dropped, then the other words dropped one by one."""
        shown[:] = original
        if step < len(cuts):
            shown[first] = task[: cuts[step]] + ELLIPSIS
            return joined()
        for index in order[: step - len(cuts) + 1]:
            shown[index] = None
        return joined()

    original = list(shown)
    task = main[first] if first < len(main) else ""
    cuts = _word_cuts(task) if task else []
    held = shared or {}
    settings = sorted(range(first + 1, len(main)), key=lambda i: -held.get(main[i], 0))
    routine = tail.split(" (")[0] in _ROUTINE_STATUSES  # "— completed", "— running (live)"
    order = [
        *([first] if task else []),
        *([len(main)] if tail and routine else []),
        *settings,
        *([len(main)] if tail and not routine else []),
        *([0] if tagged else []),
    ]
    # Each shortening leaves the text no longer (a word becomes '…' or joins one), so the
    # first that fits is found by bisection: a name of 100,000 characters or 5,000 words
    # (a damaged file's) took a second per call, on every redraw.
    low, high = 0, len(cuts) + len(order) - 1
    if high < 0 or not fits(shortened(high)):
        return ELLIPSIS
    while low < high:
        middle = (low + high) // 2
        if fits(shortened(middle)):
            high = middle
        else:
            low = middle + 1
    return shortened(low)


def elide_name(text: str, limit: int = MAX_TEXT) -> str:
    """A run's name in at most `limit` characters, by `elide_words` (numbers kept whole)."""
    return elide_words(text, lambda candidate: len(candidate) <= limit)


def count_text(count: int) -> str:
    """A count (steps) as the app shows numbers: whole when short, else in the display
    rule's notation ("1.234…e29"), never cut in its middle ("1000000000…0000000000" read as
    another number; a damaged header can plan 10**30 steps)."""
    text = str(count)
    return text if len(text) <= 12 else display_decimal(Fraction(count), cut_digits=4)


def share_text(share: float) -> str:
    """A share as a percentage; 'n/a' where it was computed over inf/NaN (it means nothing)."""
    if not math.isfinite(share):
        return "n/a"
    # The app's one notation (the engine's display rule), cut to 3 digits: "1.52…e-5%".
    return f"{display_decimal(Fraction(share) * 100, cut_digits=3)}%"


def number_text(value: float) -> str:
    """A recorded float in 4 significant digits (marked '…' where that rounds it)."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    value += 0.0  # -0.0 reads 0: these are magnitudes and losses
    # The engine's display rule, as everywhere in the app: exact when short ("65536",
    # "0.25"), else 4 of the value's own digits and "…" ("0.1234…", "1.525…e-5").
    return display_decimal(Fraction(value), cut_digits=4)


# ----- the formats gradients are held in ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ExactRange:
    """A format's positive range as exact Fractions, and their log2 for plotting."""

    name: str
    label: str
    min_positive: Fraction  # the smallest subnormal, or the smallest normal without them
    min_normal: Fraction
    max: Fraction

    @property
    def log2_min_positive(self) -> float:
        return _log2(self.min_positive)

    @property
    def log2_min_normal(self) -> float:
        return _log2(self.min_normal)

    @property
    def log2_max(self) -> float:
        return _log2(self.max)


def _log2(value: Fraction) -> float:
    # math.log2 takes ints of any size: exact powers of two come out exact.
    return math.log2(value.numerator) - math.log2(value.denominator)


_SHORT_LABELS = {
    "float64": "FP64",
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float8_e4m3fn": "E4M3",
    "float8_e5m2": "E5M2",
}


@lru_cache(maxsize=64)
def format_range(name: str) -> ExactRange:
    """The exact range of format `name` (any name or spec `fpexplorer.formats` knows)."""
    fmt = get_format(name)
    min_normal = Fraction(fmt.min_normal)
    subnormal = fmt.min_subnormal
    return ExactRange(
        name=fmt.name,
        label=_SHORT_LABELS.get(fmt.name, fmt.name),
        min_positive=Fraction(subnormal) if subnormal is not None else min_normal,
        min_normal=min_normal,
        max=Fraction(fmt.max),
    )


def format_ranges_log2(names: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """log2 (smallest positive, smallest normal, largest finite) per format, from the engine."""
    out: dict[str, tuple[float, float, float]] = {}
    for name in names:
        try:
            fmt = format_range(name)
        except (KeyError, ValueError):
            continue  # a name this version does not know: no ruler rather than a wrong one
        out[name] = (fmt.log2_min_positive, fmt.log2_min_normal, fmt.log2_max)
    return out


# The formats whose ranges the gradient histogram draws when a run names none.
DEFAULT_RULER_FORMATS: tuple[str, ...] = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
MAX_RULERS = 6  # more would leave the bars no height


def ruler_formats(model: RunModel | None) -> tuple[str, ...]:
    """The formats the run's header reports (the monitor's list: FP6, FP4, E8M0 or a custom
    spec included), as far as the engine knows them; the usual four otherwise."""
    reported = model.header.formats if model is not None and model.header is not None else {}
    names: list[str] = []
    for name in reported:
        try:
            canonical = format_range(str(name)).name
        except (KeyError, ValueError):
            continue
        if canonical not in names:
            names.append(canonical)
    return tuple(names[:MAX_RULERS]) or DEFAULT_RULER_FORMATS


def gradient_format(model: RunModel) -> str:
    """The format the run's (activation) gradients were held in.

    What the data says first (the histogram's dtype), else what the precision mode implies.
    """
    stats = model.latest_stats
    dtype = stats.act_hist.dtype if stats is not None and stats.act_hist is not None else None
    if dtype:
        try:
            return format_range(dtype).name
        except (KeyError, ValueError):
            pass
    mode = find_precision_mode(model.precision)
    return mode.gradient_dtype if mode is not None else "float32"


def is_scaled(model: RunModel) -> bool:
    """Backward ran on a scaled loss: the precision table says which modes do, and a run
    whose scale was ever not 1 did (a user's loop labelled by its autocast dtype, "bf16",
    under a GradScaler)."""
    mode = find_precision_mode(model.precision)
    return (mode is not None and mode.scaled) or model.scale_other_than_one


def has_dynamic_scaling(model: RunModel) -> bool:
    """The run's scale is a dynamic scaler's (it grows and backs off): its precision mode's,
    or a user's loop whose growth tracker counted or whose scale moved (labelled "bf16", its
    autocast dtype, under a GradScaler)."""
    mode = find_precision_mode(model.precision)
    if mode is not None and mode.scaler != "none":
        return mode.scaler == "dynamic"
    return model.scale_moved


# ----- the run list --------------------------------------------------------------------


@dataclass(slots=True)
class RunEntry:
    """A run shown by the panel: its model, colour, run file and whether its curves show."""

    key: int
    model: RunModel
    colour: str
    path: Path | None
    visible: bool = True
    live: bool = False  # fed by the running job (until the job ends)


@dataclass(frozen=True, slots=True)
class OverlayRun:
    """A run drawn in the plots and named in their legends."""

    key: int
    name: str  # elided
    colour: str
    model: RunModel
    full_name: str = ""  # the whole name, for tooltips (bounded: MAX_TOOLTIP); "": `name`


class RunList:
    """The runs in the panel, the selected one and the overlay. Qt-free.

    Every change is made here; the panel re-renders its list widget, plots and form from
    `runs`, `current`, `overlay()` and `title()`.
    """

    def __init__(self) -> None:
        self.runs: list[RunEntry] = []
        self.current: RunEntry | None = None
        self._next_key = 0

    def add(self, model: RunModel, path: Path | None, live: bool = False) -> RunEntry:
        entry = RunEntry(self._next_key, model, run_colour(self._next_key), path, live=live)
        self._next_key += 1
        self.runs.append(entry)
        return entry

    def remove(self, entry: RunEntry) -> int:
        """Remove `entry`; returns the row it had. The selection moves to the last run."""
        row = self.runs.index(entry)
        self.runs.pop(row)
        if self.current is entry:
            self.current = self.runs[-1] if self.runs else None
        return row

    def select(self, entry: RunEntry | None) -> bool:
        """Select `entry`; True when the selection changed."""
        changed = entry is not self.current
        self.current = entry
        return changed

    def select_row(self, row: int) -> bool:
        if 0 <= row < len(self.runs):
            return self.select(self.runs[row])
        return False

    def row_of(self, entry: RunEntry | None) -> int:
        return self.runs.index(entry) if entry in self.runs else -1

    def set_visible(self, row: int, visible: bool) -> None:
        if 0 <= row < len(self.runs):
            self.runs[row].visible = visible

    def name_runs(self) -> None:
        """Runs whose settings-names coincide get the settings that differ added."""
        details = distinguishing_details([entry.model.config for entry in self.runs])
        for entry, detail in zip(self.runs, details, strict=True):
            if entry.model.label_detail != detail:
                entry.model.label_detail = detail

    @staticmethod
    def title(entry: RunEntry, job_active: bool) -> str:
        """The run's line in the list: name, status, and "(live)" only while its job runs."""
        model = entry.model
        live = " (live)" if entry.live and job_active else ""
        return f"{elide_name(model.label, 60)} — {elide(model.status, 24)}{live}"

    @staticmethod
    def tooltip(entry: RunEntry, job_active: bool) -> str:
        """The run's line with its whole name (the list elides its text to its width, and
        `title` a long name to 60 characters)."""
        model = entry.model
        live = " (live)" if entry.live and job_active else ""
        return f"{elide_name(model.label, MAX_TOOLTIP)} — {elide(model.status, 24)}{live}"

    def end_live(self, entry: RunEntry, keep_empty: bool = False) -> bool:
        """The job feeding `entry` ended; returns whether the run stays in the list.

        A run that holds no step is not kept unless asked (its file stays on disk): quick
        Start/Stop otherwise piles up empty "incomplete" runs. The caller removes it.
        """
        entry.live = False
        entry.model.closed = True
        return entry.model.steps_seen > 0 or keep_empty

    def overlay(self) -> list[OverlayRun]:
        """The runs the plots draw and their legends name: ticked and holding a step."""
        return [
            OverlayRun(
                entry.key,
                elide_name(entry.model.label, 48),
                entry.colour,
                entry.model,
                elide_name(entry.model.label, MAX_TOOLTIP),
            )
            for entry in self.runs
            if entry.visible and len(entry.model.scalars)
        ]

    def shown_models(self) -> list[RunModel]:
        """The ticked runs, with or without steps (for the plots' "why empty" notes)."""
        return [entry.model for entry in self.runs if entry.visible]


def settings_of(model: RunModel) -> TrainConfig | str:
    """The run's configuration for the form and the code view, or why it cannot be shown."""
    config = model.config
    if not config:
        return "this run's file holds no settings"
    # A null is "not set": a user's loop with the monitor's time budget records
    # "stats_every": null, which the form shows at its default, not as a broken setting.
    config = {name: value for name, value in config.items() if value is not None}
    try:
        settings = TrainConfig.from_dict(config)
        # What the run's settings did not use (an older fpexplorer took an --init-scale
        # under bf16 and ignored it) the form shows greyed out, at its default.
        unused = settings.inapplicable()
        settings = settings.replace(**{name: getattr(TrainConfig(), name) for name in unused})
        problems = settings.validate()
    except (TypeError, ValueError, OverflowError) as error:  # a damaged file's values
        return f"this run's settings cannot be shown: {elide(str(error), 60)}"
    # A run from another machine: its task file may not exist here, which the form shows
    # at the field; any other problem means the form cannot hold these settings.
    problems.pop("task", None)
    # A user's torchrun loop on several nodes does not know where its nodes met (the
    # monitor states no endpoint it was not given): the code view shows HOST:PORT (the
    # form holds no node options).
    if isinstance(settings.nnodes, int) and settings.nnodes > 1 and not settings.rdzv_endpoint:
        problems.pop("nnodes", None)
    if problems:
        name, message = next(iter(problems.items()))
        return f"this run's settings cannot be shown ({name}: {elide(message, 60)})"
    return settings


# ----- ranges, smoothing, markers, hover -------------------------------------------------


def no_steps_reason(models: Sequence[RunModel]) -> str:
    """Why runs that hold no step show nothing."""
    if not models:
        return "no run: start a job or open a run file"
    failed = [m for m in models if m.end is not None and m.end.status == "failed"]
    if failed:
        return "no steps: the run failed before its first step"
    if any(m.end is None and not m.closed for m in models):
        return "waiting for the first step…"
    return "no steps recorded in this run"


def no_histogram_reason(model: RunModel | None, hist: Histogram | None) -> str:
    """Why the gradient histogram (or its heatmap) of `model` has no bars."""
    if model is None or not model.steps_seen:
        return no_steps_reason([model] if model is not None else [])
    if hist is None:
        stats = model.latest_stats
        if stats is not None and stats.activations_not_measured is not None:
            # A compiled model: its activation gradients are inside the compiled graph. The
            # cause only ("compiled model; forward outputs not checked" is too long for the
            # heatmap's narrow card; `runs summarize` prints it whole).
            return f"not measured: {stats.activations_not_measured.partition(';')[0]}"
        if stats is not None:
            # A statistics step always has its parameter gradients' histogram: what is
            # missing is the activation gradients', which the statistics of a skipped or
            # non-finite step between statistics steps (or with statistics off) leave out.
            # Short: the heatmap's narrow card shows it too.
            return f"step {stats.step} recorded parameter gradients only"
        if model.config.get("stats_every") == 0:
            return "statistics were off for this run (stats-every 0)"
        return "no statistics step in this run" if model.closed else "no statistics step yet"
    return f"no finite non-zero gradient: {hist.zero:,} zero, {hist.inf:,} inf, {hist.nan:,} NaN"


def skipped_text(model: RunModel) -> str:
    """ "skipped: N", and how many of them the plot marks when that is not all: a run
    keeps the first MAX_SKIP_EVENTS skips (their markers), the rest only counted (found on
    an 850,000-step log: 3,397 skips, the markers stopped at step ~500,000 unexplained),
    and with several optimizers each one's skips, in their order."""
    marked = len(model.skip_events)
    counts = model.skipped_by_optimizer
    # Shorter than `runs summarize`'s "(optimizer 0: 2, optimizer 1: 3)": the label shares
    # a narrow card with the growth tracker.
    by_optimizer = f" (per optimizer: {', '.join(map(str, counts))})" if counts else ""
    if model.skipped_count > marked:
        return f"skipped: {model.skipped_count}{by_optimizer} (× on the first {marked:,})"
    return f"skipped: {model.skipped_count}{by_optimizer}"


def step_axis_label(overlay: Sequence[OverlayRun]) -> str:
    """The step axis's title, saying when a curve is drawn from every Nth step only.

    A run model keeps a bounded number of points: after a few thousand steps it keeps
    every 2nd, 4th, ... step (`DecimatingSeries`). Zoomed in on a long run the curves show
    those steps only, and a one-step spike between them is not drawn: the axis says so
    (the run file, and the CSV export written from it, have every step)."""
    stride = max((run.model.scalars.stride for run in overlay), default=1)
    if stride == 1:
        return "step"
    suffix = (
        "th" if stride % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(stride % 10, "th")
    )
    return f"step (every {stride:,}{suffix} drawn)"


def x_extent(models: Sequence[RunModel]) -> float:
    """The last step the x axis must show for the runs drawn.

    A finished run shows its length. A live run shows its planned length while it is
    within 4x of what has arrived, else room for 1.5x what has arrived: the axis then
    moves a logarithmic number of times, not on every frame.
    """
    extent = 1.0
    for model in models:
        seen = float(model.scalars.steps[-1] + 1) if len(model.scalars) else 0.0
        # A damaged header's 10**309 steps is beyond float: capped, it is "far away".
        planned = float(min(model.planned_steps or 0, 2**1000))
        if model.end is not None or model.closed or not planned or not math.isfinite(planned):
            wanted = seen  # finished (or no plan): exactly what is there
        elif planned <= 4 * max(seen, 1.0):
            wanted = planned
        else:
            wanted = 1.5 ** math.ceil(math.log(max(seen, 16.0) * 1.5, 1.5))
        extent = max(extent, wanted)
    return min(extent, 1e300)


def data_range(arrays: Sequence[FloatArray], log: bool = False) -> tuple[float, float] | None:
    """(lo, hi) of the finite values (positive ones on a log axis, as log10); None if none.

    From the data alone: nothing else (a legend, a note) ever widens a plot's range.
    """
    lo, hi = math.inf, -math.inf
    for values in arrays:
        keep = np.isfinite(values) & (values > 0) if log else np.isfinite(values)
        if keep.any():
            lo = min(lo, float(values[keep].min()))
            hi = max(hi, float(values[keep].max()))
    if not math.isfinite(lo):
        return None
    if log:
        return math.log10(lo), math.log10(hi)
    return lo, hi


def smoothed(values: FloatArray, weight: float) -> FloatArray:
    """Exponential moving average (TensorBoard's), debiased, skipping inf/NaN points.

    `weight` in [0, 1): 0 returns the values unchanged. A non-finite point keeps NaN in
    the output and does not enter the average.
    """
    if not 0.0 < weight < 1.0:
        return values.astype(np.float64, copy=True)
    out = np.full(len(values), np.nan, dtype=np.float64)
    average = 0.0
    count = 0
    for index, value in enumerate(values.tolist()):
        if not math.isfinite(value):
            continue
        count += 1
        average = weight * average + (1.0 - weight) * value
        out[index] = average / (1.0 - weight**count)
    return out


@dataclass(frozen=True, slots=True)
class RunMarker:
    """A vertical marker at a step of one run."""

    key: int
    colour: str
    step: int
    text: str


def run_markers(overlay: Sequence[OverlayRun]) -> list[RunMarker]:
    """Markers at each overlaid run's first NaN loss and first non-finite gradients."""
    markers: list[RunMarker] = []
    for run in overlay:
        model = run.model
        if model.first_nan_loss_step is not None:
            markers.append(
                RunMarker(run.key, run.colour, model.first_nan_loss_step, "first NaN loss")
            )
        event = model.first_nonfinite_event
        step = model.first_nonfinite_step
        if event is not None and (step is None or event.step <= step):
            # "layer 2", never a bare "2": an nn.Sequential's layers are named by index, and
            # "first inf/NaN: 2" on the loss plot read as a step.
            where = f"layer {elide(event.first_nonfinite or '?', 30)}"
            if event.first_nonfinite_rank is not None:
                where = f"rank {event.first_nonfinite_rank}, {where}"
            markers.append(RunMarker(run.key, run.colour, event.step, f"first inf/NaN: {where}"))
        elif step is not None:
            markers.append(RunMarker(run.key, run.colour, step, "first inf/NaN gradient"))
    return markers


def value_at(steps: FloatArray, values: FloatArray, step: float) -> tuple[int, float] | None:
    """The recorded (step, value) at or before `step` (the nearest one kept), or None."""
    if not len(steps) or step < steps[0]:
        return None
    index = int(np.searchsorted(steps, step, side="right")) - 1
    return int(steps[index]), float(values[index])


@dataclass(frozen=True, slots=True)
class HoverLine:
    """A line of a hover read-out: plain text, and the colour of its run's swatch if any."""

    text: str
    colour: str | None = None


def hover_plain(lines: Sequence[HoverLine]) -> str:
    return "\n".join(line.text for line in lines)


def hover_text(
    overlay: Sequence[OverlayRun],
    step: float,
    column: str,
    show: Callable[[float], str] = number_text,
) -> list[HoverLine]:
    """The values of `column` under the cursor: "step 120", then one line per run.

    One line per run: the read-out sits inside the plot and must not run off its edge.
    """
    lines: list[HoverLine] = []
    at_step: int | None = None
    for run in overlay:
        found = value_at(run.model.scalars.steps, run.model.scalars.column(column), step)
        if found is None:
            continue
        at_step = found[0] if at_step is None else max(at_step, found[0])
        lines.append(HoverLine(f"{elide_name(run.name, 32)}: {show(found[1])}", run.colour))
    if at_step is None:
        return []
    return [HoverLine(f"step {at_step}"), *lines]


def histogram_hover_text(
    hist: Histogram | None,
    log2_value: float,
    *,
    quantity: str = "|g|",
    items: str = "values",
    suffix: str = "",
) -> list[HoverLine]:
    """The bar under the cursor: "2^-12 ≤ |g| < 2^-11", "1,234 of 8,680 values (14.2%)".
    `quantity` and `items` name what is counted (block scales: "block scale", "blocks");
    `suffix` ends the count line (e.g. the step the histogram is of)."""
    if hist is None or not math.isfinite(log2_value):
        return []
    binade = math.floor(log2_value)
    index = binade - hist.lo
    count = int(hist.counts[index]) if 0 <= index < len(hist.counts) else 0
    total = hist.total
    share = f" ({share_text(count / total)})" if total else ""
    return [
        HoverLine(f"2^{binade} ≤ {quantity} < 2^{binade + 1}"),
        HoverLine(f"{count:,} of {total:,} {items}{share}{suffix}"),
    ]


MAX_HEAT_CELLS = 2048  # grid cells across the steps, at most: more than the plot has pixels


@dataclass(frozen=True, slots=True)
class HeatLayout:
    """Where the heatmap's columns go on the step axis. An image item draws a uniform grid,
    while statistics steps need not be evenly spaced (a time budget, alarms, statistics off
    but for skipped steps): the grid's cells are the smallest spacing of the columns (or a
    2048th of the span), and each cell shows the column of the last statistics step at or
    before it. The last column spans as far as the columns typically do."""

    columns: npt.NDArray[np.intp]  # the column each cell shows
    start: float  # the first column's step
    cell: float  # steps per cell


def heat_layout(heat: HeatmapBuffer) -> HeatLayout:
    firsts, lasts = heat.column_steps
    if len(firsts) < 2:  # one column, as wide as its steps (an empty one is not drawn)
        first = float(firsts[0]) if len(firsts) else 0.0
        span = float(lasts[0]) - first + 1.0 if len(firsts) else 1.0
        return HeatLayout(np.zeros(len(firsts), dtype=np.intp), first, span)
    gaps = np.diff(firsts)
    start = float(firsts[0])
    stop = max(float(lasts[-1]) + 1.0, float(firsts[-1] + np.median(gaps)))
    cell = max(float(gaps.min()), 1.0)
    cells = math.ceil((stop - start) / cell - 1e-9)
    if cells > MAX_HEAT_CELLS:
        cells, cell = MAX_HEAT_CELLS, (stop - start) / MAX_HEAT_CELLS
    centres = start + (np.arange(cells) + 0.5) * cell
    columns = np.searchsorted(firsts, centres, side="right") - 1
    return HeatLayout(columns.astype(np.intp), start, cell)


def heatmap_hover_text(
    heat: HeatmapBuffer | None, step: float, log2_value: float
) -> list[HoverLine]:
    """The heatmap cell under the cursor: its steps, binade and share of the values.

    The column under the cursor is found as it was drawn (`heat_layout`).
    """
    if heat is None or not len(heat) or not (math.isfinite(step) and math.isfinite(log2_value)):
        return []
    image = heat.image()
    layout = heat_layout(heat)
    cell = math.floor((step - layout.start) / layout.cell)
    binade = math.floor(log2_value)
    row = binade - HEAT_LO
    if not (0 <= cell < len(layout.columns) and 0 <= row < HEAT_BINS):
        return []
    column = int(layout.columns[cell])
    value = float(image[column, row])
    # The image is clipped at 10^-8 (no value at all reads the same).
    # The image holds log10 of the share, rounded here to a tenth: marked as rounded.
    share = "at most 10^-8 of the values" if value <= -8.0 else f"≈10^{value:.1f} of the values"
    start = float(heat.column_steps[0][column])
    return [
        HoverLine(f"steps from {start:.0f}"),
        HoverLine(f"2^{binade} ≤ |g| < 2^{binade + 1}"),
        HoverLine(share),
    ]


def scale_text(scale: float) -> str:
    """A loss scale: 2^k when it is a power of two (exactly), else its value."""
    if scale > 0 and math.isfinite(scale):
        mantissa, exponent = math.frexp(scale)
        if mantissa == 0.5:
            return f"2^{exponent - 1}"
    return number_text(scale)


# ----- the heatmap's format limits -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeatLimit:
    """A format limit drawn over the heatmap: log2 of the limit per step, in the data's units."""

    label: str
    steps: FloatArray
    log2: FloatArray


def heatmap_limits(model: RunModel | None, activations: bool) -> tuple[str, list[HeatLimit]]:
    """The limits of the format the shown gradients were held in, where they apply.

    Activation gradients are recorded as backward held them (scaled): the format's smallest
    subnormal and largest value are fixed lines. Parameter gradients are recorded unscaled,
    while backward held them times the loss scale: in the recorded units the limits sit at
    limit / scale, a line that moves whenever the scale does.
    """
    if model is None:
        return "", []
    fmt = format_range(gradient_format(model))
    lo, hi = fmt.log2_min_positive, fmt.log2_max
    steps = model.scalars.steps
    if activations or not is_scaled(model) or not len(steps):
        span = np.array([0.0, max(float(steps[-1]) + 1.0, 1.0) if len(steps) else 1.0])
        limits = [
            HeatLimit(f"{fmt.label} smallest subnormal", span, np.array([lo, lo])),
            HeatLimit(f"{fmt.label} largest", span, np.array([hi, hi])),
        ]
        where = "scaled, as backward held them" if activations and is_scaled(model) else ""
        note = f"dashed: {fmt.label}'s smallest subnormal and largest value" + (
            f" ({where})" if where else ""
        )
        return note, limits
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.log2(model.scalars.column("scale"))
    keep = np.isfinite(shift)
    xs = steps[keep]
    limits = [
        HeatLimit(f"{fmt.label} smallest subnormal / scale", xs, lo - shift[keep]),
        HeatLimit(f"{fmt.label} largest / scale", xs, hi - shift[keep]),
    ]
    note = (
        f"dashed: {fmt.label}'s smallest subnormal and largest value divided by the loss "
        "scale (parameter gradients are shown unscaled)"
    )
    return note, limits


# ----- read-outs of one run --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstNonfiniteView:
    """The line above the layer table: plain text, and whether it is an alarm."""

    text: str
    alarm: bool


def first_nonfinite_view(model: RunModel | None) -> FirstNonfiniteView:
    """The first non-finite step and layer, for every precision (skipping or not)."""
    if model is None or not model.steps_seen:
        return FirstNonfiniteView("No steps yet.", False)
    event = model.first_nonfinite_event
    step = model.first_nonfinite_step
    if event is not None:
        layer = elide(event.first_nonfinite or "?", 40)
        if event.first_nonfinite_rank is not None:
            # A run of several ranks: where the overflow started, not where it arrived.
            rank = event.first_nonfinite_rank
            text = f"First overflow: rank {rank}, layer {layer} (step {event.step}"
        else:
            text = f"First non-finite layer: {layer} (step {event.step}"
        text += ", skipped" if event in model.skip_events else ""
        if is_scaled(model):
            text += f" at scale {scale_text(event.scale)}"
        text += "; first in backward order)"
        if event.first_nonfinite_forward:
            text += (
                "; the overflow began in the forward pass at "
                f"{elide(event.first_nonfinite_forward, 40)}"
            )
        if step is not None and step < event.step:
            text += f". Gradients first went inf/NaN at step {step} (no layer named there)"
        return FirstNonfiniteView(text + ".", True)
    if step is not None:
        count = model.skipped_count
        skipped = f"; {count} skipped step{'s' if count != 1 else ''}" if count else ""
        return FirstNonfiniteView(
            f"Gradients first went inf/NaN at step {step}{skipped}; no layer named "
            "(no statistics on those steps).",
            True,
        )
    return FirstNonfiniteView("No non-finite gradients so far.", False)


def counts_text(step: int | None, hist: Histogram) -> str:
    """The line under the histogram: its step, dtype and the zero/inf/NaN counts."""
    dtype = f" ({elide(hist.dtype, 20)})" if hist.dtype else ""
    at = "?" if step is None else str(step)
    return (
        f"step {at}{dtype}: {hist.total:,} values · zero {hist.zero:,} · inf {hist.inf:,} "
        f"· NaN {hist.nan:,}"
    )


def what_if_text(result: WhatIf) -> str:
    """The what-if read-out; shares of the finite non-zero values (n/a when there are none:
    a share over inf/NaN or zeros says nothing about the scale)."""
    head = f"What-if at loss scale 2^{result.log2_scale} in FP16: "
    tail = f"already zero {result.zero:,}, non-finite {result.nonfinite:,}."
    finite = result.total - result.zero - result.nonfinite
    if finite <= 0:
        return head + f"n/a (no finite non-zero gradient); {tail}"
    return head + (
        f"<b>{share_text(result.underflow / finite)}</b> underflow ({result.underflow:,}), "
        f"{share_text(result.subnormal / finite)} subnormal, "
        f"<b>{share_text(result.overflow / finite)}</b> overflow ({result.overflow:,}) of "
        f"{finite:,} finite non-zero; {tail}"
    )


def lost_updates_text(model: RunModel | None) -> str:
    """The share of weight updates lost (pure-fp16) or that FP16 weights would lose.

    A share over inf/NaN gradients means nothing (no update was there to lose): "n/a".
    """
    stats = model.latest_stats if model is not None else None
    lost = stats.lost_updates if stats is not None else None
    if stats is None or not lost:
        return "lost updates: –"
    share = lost.share
    if lost.nonfinite_weights:
        # An FP16 weight beyond 65504 is inf before and after the step: the share would
        # call that an update lost to rounding (100% when all are), which is untrue.
        updated = lost.sampled if lost.sampled is not None else lost.intended
        of = f" of the {updated:,}{' sampled' if lost.sampled is not None else ''}"
        what = f"{lost.nonfinite_weights:,}{of if updated else ''} weights updated"
        if lost.kind == "actual":
            return (
                f"lost updates: n/a on step {stats.step}: {what} are inf/NaN in FP16 (the "
                "weights overflowed; no update can show there)."
            )
        return (
            f"lost updates: n/a on step {stats.step}: FP16 cannot hold {what} (|w| > 65504, "
            "or inf/NaN): FP16 weights would overflow there, not lose updates to rounding."
        )
    if not lost_share_means_something(lost, stats.grad_hist, stats.layers):
        return (
            f"lost updates: n/a on step {stats.step} (its gradients held inf/NaN: there "
            "was no finite update to lose)"
        )
    # A share measured on a sample of a large model's weights is an estimate: marked "≈",
    # with its bound; an exact share is shown as it is.
    if lost.sampled is not None and lost.bound is not None and math.isfinite(lost.bound):
        shown = (
            f"≈{share_text(share)} (± {share_text(lost.bound)}, 99.9%; {lost.sampled:,} sampled)"
        )
    else:
        shown = share_text(share)
    if lost.kind == "actual":
        return f"<b>{shown}</b> of weight updates lost to FP16 rounding."
    return f"FP16 weights would lose {shown} of these updates to rounding."


@dataclass(frozen=True, slots=True)
class LayerRow:
    cells: tuple[str, ...]
    alarm: bool  # non-finite, or the first layer to go non-finite
    # Per cell, why it holds no figure ("–": nothing to measure, or not measured); "" where
    # it holds one.
    tips: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LayerTableView:
    columns: tuple[str, ...]
    tooltips: tuple[str, ...]
    rows: tuple[LayerRow, ...]


def _headroom_text(ratio: Fraction) -> str:
    """log2(largest / max |g|): "2^12" where the ratio is a power of two, else rounded to
    a tenth and marked, "≈2^139.7" (a rounded figure is never shown without its mark)."""
    if (
        ratio.numerator & (ratio.numerator - 1) == 0
        and ratio.denominator & (ratio.denominator - 1) == 0
    ):
        return f"2^{ratio.numerator.bit_length() - ratio.denominator.bit_length()}"
    return f"≈2^{math.log2(ratio.numerator) - math.log2(ratio.denominator):.1f}"


def layer_table_view(model: RunModel | None) -> LayerTableView:
    """The layer table of the latest statistics step, in the run's own format.

    ‖g‖ is of the parameter gradients, unscaled; max |g|, headroom and the underflow share
    are of the activation gradients as backward held them (scaled by the loss scale in the
    scaled modes). Headroom is measured against the largest value of the format those
    gradients were held in, computed exactly by the engine; the underflow share is recorded
    against FP16's smallest subnormal, so it is shown only where FP16 held the gradients.
    """
    fmt = format_range(gradient_format(model)) if model is not None else format_range("float16")
    scaled = model is not None and is_scaled(model)
    held = "scaled" if scaled else "as held"
    fp16 = fmt.name == "float16"
    columns = (
        "layer",
        "‖g‖ unscaled",
        f"max |g| {held}",
        f"headroom in {fmt.label}",
        "< 2^-24 (FP16)" if fp16 else "underflow",
        "inf/NaN",
    )
    tooltips = (
        "module name",
        "L2 norm of the layer's parameter gradients, unscaled; – for a module without "
        "parameters (nothing to measure)",
        "largest magnitude of the layer's activation gradient"
        + (", times the loss scale" if scaled else ""),
        f"log2({fmt.label} largest / max |g|): how many doublings before the layer overflows "
        f"{fmt.label}",
        "share of the layer's activation gradients below FP16's smallest subnormal 2^-24"
        if fp16
        else f"recorded against FP16's range, which does not apply to {fmt.label} gradients",
        "the layer's gradient held inf or NaN",
    )
    stats = model.latest_stats if model is not None else None
    if stats is None or model is None:
        return LayerTableView(columns, tooltips, ())
    event = model.first_nonfinite_event
    marked = stats.first_nonfinite or (event.first_nonfinite if event is not None else None)
    # The parameter-gradient statistics of an alarm step between statistics steps (a skip,
    # an overflow) measure no activation gradient: its layers' amax and underflow share are
    # not zeros but unknown.
    measured = stats.act_hist is not None
    unmeasured = (
        "not measured on this step: no activation gradients were recorded (a skip or an "
        "overflow between statistics steps records the parameter gradients only; a compiled "
        "model's are not measured)"
    )
    rows: list[LayerRow] = []
    for layer in stats.layers:
        name = layer.name
        norm = layer.grad_norm
        amax = layer.amax
        headroom, headroom_tip = "–", unmeasured
        if measured and amax > 0 and math.isfinite(amax):
            headroom, headroom_tip = _headroom_text(fmt.max / Fraction(amax)), ""
        elif measured and amax == 0:
            headroom_tip = "no activation gradient here is non-zero: no headroom to measure"
        elif measured:
            headroom_tip = "the activation gradient held inf/NaN: it overflowed already"
        underflow = layer.underflow_share
        nonfinite = layer.nonfinite
        cells = (
            elide(name, 48) + ("  ◀ first non-finite" if name == marked else ""),
            "–" if norm is None else number_text(abs(norm)),
            number_text(abs(amax)) if measured else "–",
            headroom,
            share_text(underflow) if fp16 and measured else "–",
            "yes" if nonfinite else "no",
        )
        tips = (
            "",
            "the module has no parameters of its own: nothing to measure" if norm is None else "",
            "" if measured else unmeasured,
            headroom_tip,
            "" if fp16 and measured else (unmeasured if fp16 else tooltips[4]),
            "",
        )
        rows.append(LayerRow(cells, nonfinite or name == marked, tips))
    return LayerTableView(columns, tooltips, tuple(rows))


@dataclass(frozen=True, slots=True)
class ProgressView:
    """The progress bar: a fraction in thousandths (Qt's bar holds 32-bit ints) and a text."""

    permille: int
    text: str


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_view(model: RunModel, job_active: bool, state: str | None) -> ProgressView:
    done, planned = model.progress()
    if planned:
        permille = min(max(done * 1000 // planned, 0), 1000)
    else:
        permille = 1000 if model.end is not None else 0
    text = f"{count_text(done)}/{count_text(planned) if planned else '?'} steps"
    rate = model.steps_per_second()
    if rate is not None:
        text += f" · {figure_text(rate)} steps/s"
    try:
        left = model.seconds_left()
    except OverflowError:  # a damaged header's 10**309 planned steps
        left = None
    if left is not None and job_active and left < 1e7:
        text += f" · {_duration(left)} left"
    if state is not None:
        text += f" · {state}"
    return ProgressView(permille, text)


def throughput_text(model: RunModel | None) -> str:
    """The latest step's rate, said to be recent: the monitor's records give it over the
    last few steps (10), while `runs compare` gives steps over the whole run's time, and
    the two differ on a run that slowed down or was paused."""
    rate = model.steps_per_second() if model is not None else None
    if model is None or rate is None:
        return "throughput: –"
    done, planned = model.progress()
    of = f" of {count_text(planned)}" if planned else ""
    # No "throughput:" before it: the card's title says so, and the line must fit 1024 px.
    return f"{figure_text(rate)} steps/s (recent) · step {count_text(done)}{of}"


def summarize_problems(problems: dict[str, str], titles: dict[str, str]) -> str:
    """One line for beside Start: which fields stop it, e.g. "Fix 2 fields: Steps, Seed"."""
    if not problems:
        return ""
    names = [titles.get(name, name) for name in problems]
    noun = "field" if len(names) == 1 else "fields"
    return f"Fix {len(names)} {noun}: " + ", ".join(names)
