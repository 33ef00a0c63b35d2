"""The training panel's Low precision page: how each quantized tensor fares (FP8/MX/NVFP4).

Cards like the Mixed precision page's (`plots.Card`), fed by each run's `QuantHistory`
(`quant_model`, held by `RunModel.quant`):

- amax and scale over steps for one chosen layer and role, one pair of curves per overlaid
  run in its run colour (delayed and current scaling side by side), on a log2 axis;
- the flushed-to-zero and the saturated share as layer x step heatmaps for the chosen role
  (fixed levels 0..1, a colour bar, layer names on the y axis);
- SQNR per layer (latest statistics step, and the run's minimum) and the block scales of
  the chosen tensor by binade;
- one line naming the tensor that hurts most, by a criterion the line states.

Items are created once and updated with setData / setOpts / setImage. The texts (hover
read-outs, the notes, the "hurts most" line) are made by the Qt-free functions at the top
of this module, from the numbers `quant_model` computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGraphicsLayout,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats.decimal import display_decimal
from fpexplorer.gui.theme import is_dark, plot_colors
from fpexplorer.gui.training.export import PlotCaption
from fpexplorer.gui.training.plots import (
    Card,
    CountAxis,
    ElidedLabel,
    EmptyNote,
    HoverReadout,
    LinkedSteps,
    PowerOfTwoAxis,
    RunCurves,
    StickyRange,
    add_colour_bar,
    file_text_label,
    plot_widget,
)
from fpexplorer.gui.training.quant_model import (
    CRITERIA,
    Criterion,
    FloatArray,
    QuantHistory,
    Worst,
    layer_choices,
    role_choices,
)
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.sizing import PageScrollArea
from fpexplorer.gui.training.view_model import (
    HoverLine,
    OverlayRun,
    elide,
    elide_name,
    format_range,
    histogram_hover_text,
    number_text,
    share_text,
    value_at,
    x_extent,
)
from fpexplorer.training.precision import PRECISION_MODES, find_precision_mode
from fpexplorer.training.records import Histogram

# ----- texts (Qt-free) -------------------------------------------------------------------

ROLE_TITLES = {"input": "input", "weight": "weight", "grad_output": "output gradient"}


def quantized_mode_names() -> list[str]:
    """The precision modes with quantized linear layers, from the precision table."""
    return [mode.name for mode in PRECISION_MODES if mode.quantized]


def no_quant_note(models: Sequence[RunModel]) -> str:
    """What the page says when none of the runs shown has quantized layers."""
    names = quantized_mode_names()
    hint = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    if not models:
        return f"No run yet. Choose precision {hint} and start a job (or open a run file)."
    if len(models) == 1:
        model = models[0]
        precision = model.precision or "?"
        mode = find_precision_mode(precision)
        quantized = mode is not None and mode.quantized
        if quantized and not model.steps_seen:
            return f"Waiting for the first statistics step of this {precision} run…"
        if quantized:
            return (
                f"This {precision} run has recorded no quantized-layer statistics yet "
                "(they come on statistics steps; stats-every 0 turns them off)."
            )
        return (
            f"This run ({elide(precision, 24)}) has no FP8/MX layers: choose precision "
            f"{hint} to see how each tensor fares."
        )
    return (
        f"None of the {len(models)} runs shown has FP8/MX layers: choose precision "
        f"{hint} to see how each tensor fares."
    )


def sqnr_text(db: float) -> str:
    """An SQNR in dB; inf reads "exact" (no quantization error at all)."""
    if math.isnan(db):
        return "not measured"
    if math.isinf(db):
        return "exact (∞ dB)" if db > 0 else "-∞ dB"
    return f"{display_decimal(Fraction(db), cut_digits=3)} dB"


def exponent_text(value: float) -> str:
    """A positive value as a power of two: "2^6" exactly, else "2^6.73…"."""
    if not (math.isfinite(value) and value > 0):
        return number_text(value)
    exponent = math.log2(value)
    if exponent == round(exponent):
        return f"2^{round(exponent)}"
    return f"2^{display_decimal(Fraction(exponent), cut_digits=3)}"


def power_text(value: float) -> str:
    """A positive value with its log2: "105.9… (2^6.73…)"; non-finite values as such."""
    if not (math.isfinite(value) and value > 0):
        return number_text(value)
    return f"{number_text(value)} ({exponent_text(value)})"


def tensor_name(layer: str, role: str) -> str:
    return f"{elide(layer, 40)} {role}"


def detail_text(
    runs: Sequence[OverlayRun], detailed: RunModel | None, selected: RunModel | None
) -> str:
    """Which run the one-run cards (heatmaps, SQNR, block scales, "hurts most") show,
    said where that is not obvious: several runs with quantized layers are shown, or the
    selected run has none and another one's are shown instead."""
    if detailed is None:
        return ""
    if detailed is selected and len(runs) <= 1:
        return ""
    name = next((run.name for run in runs if run.model is detailed), detailed.label)
    text = f"Details: {elide_name(name, 48)}"
    if selected is not None and selected is not detailed:
        text += " (the selected run has no quantized layers)"
    return text


def hurts_most_text(
    worst: Worst | None, criterion: Criterion, over_run: bool,
    nonfinite: tuple[int, str, str] | None = None,
) -> str:  # fmt: skip
    """The "hurts most" line, its criterion stated: "Hurts most (largest flushed share,
    latest step): blocks.2.attn.wo grad_output, 31.2…% flushed (step 480)". A tensor that
    held inf/NaN (`nonfinite`: the first, (step, layer, role)) is named first: its SQNR and
    shares are not measured, so no criterion would point at it."""
    first = ""
    if nonfinite is not None:
        step, layer, role = nonfinite
        first = f"inf/NaN first in {tensor_name(layer, role)} (step {step}). "
    return first + _worst_text(worst, criterion, over_run)


def _worst_text(worst: Worst | None, criterion: Criterion, over_run: bool) -> str:
    scope = "over the run" if over_run else "latest step"
    head = f"Hurts most ({CRITERIA[criterion]}, {scope}):"
    if worst is None:
        nothing = {
            "sqnr": "no finite SQNR recorded",
            "saturated": "no tensor saturated",
            "flushed": "no tensor flushed a value to zero",
        }[criterion]
        return f"{head} {nothing}."
    if criterion == "sqnr":
        value = f"SQNR {sqnr_text(worst.value)}"
    else:
        value = f"{share_text(worst.value)} {criterion}"
    return f"{head} {tensor_name(worst.layer, worst.role)}, {value} (step {worst.step})"


def history_hover_lines(
    runs: Sequence[OverlayRun], layer: str, role: str, step: float
) -> list[HoverLine]:
    """amax and scale of the chosen tensor under the cursor, one line per run."""
    lines: list[HoverLine] = []
    at_step: int | None = None
    for run in runs:
        history = run.model.quant
        if not history.has(layer, role):
            continue
        amax = value_at(history.steps, history.series(layer, role, "amax"), step)
        if amax is None:
            continue
        scale = value_at(history.steps, history.series(layer, role, "scale"), step)
        at_step = amax[0] if at_step is None else max(at_step, amax[0])
        text = f"{elide_name(run.name, 28)}: amax {number_text(amax[1])}"
        if scale is not None and not math.isnan(scale[1]):
            text += f", scale {power_text(scale[1])}"
        lines.append(HoverLine(text, run.colour))
    if at_step is None:
        return []
    return [HoverLine(f"step {at_step} · {tensor_name(layer, role)}"), *lines]


@dataclass(frozen=True, slots=True)
class ShareImage:
    """A layer x step share matrix as drawn: columns spread evenly over their steps."""

    layers: list[str]
    steps: np.ndarray  # the statistics step of each column
    matrix: np.ndarray  # (layers, columns); NaN: not measured

    @property
    def per_column(self) -> float:
        if len(self.steps) < 2:
            return 1.0
        return max(float(self.steps[-1] - self.steps[0]), 1.0) / (len(self.steps) - 1)

    @property
    def left(self) -> float:
        return float(self.steps[0]) - self.per_column / 2 if len(self.steps) else 0.0

    def cell_at(self, step: float, row: float) -> tuple[int, int] | None:
        """(layer row, column) of the cell drawn under (step, row), or None."""
        if not len(self.steps) or not (math.isfinite(step) and math.isfinite(row)):
            return None
        column = math.floor((step - self.left) / self.per_column)
        layer = math.floor(row + 0.5)
        if 0 <= column < len(self.steps) and 0 <= layer < len(self.layers):
            return layer, column
        return None


def max_pooled(matrix: np.ndarray, factor: int) -> np.ndarray:
    """`matrix` with each run of `factor` columns merged into one by its largest value
    (NaN, not measured, left out; a group with no measurement stays NaN).

    A heatmap with more steps than pixels would otherwise drop columns when drawn, and a
    share that saturated on one step only would vanish from the picture."""
    if factor <= 1 or matrix.shape[1] <= 1:
        return matrix
    rows, columns = matrix.shape
    groups = -(-columns // factor)
    padded = np.full((rows, groups * factor), np.nan)
    padded[:, :columns] = matrix
    pooled: np.ndarray = np.fmax.reduce(padded.reshape(rows, groups, factor), axis=2)
    return pooled


def share_image(history: QuantHistory, role: str, field: str) -> ShareImage:
    layers, matrix = history.share_matrix(role, "flushed" if field == "flushed" else "saturated")
    return ShareImage(layers, history.steps.copy(), matrix)


def heatmap_hover_lines(
    image: ShareImage | None, role: str, field: str, step: float, row: float
) -> list[HoverLine]:
    """The cell under the cursor: "blocks.1.mlp.w1 input", "step 275: 7.67…% saturated"."""
    if image is None:
        return []
    cell = image.cell_at(step, row)
    if cell is None:
        return []
    layer, column = cell
    value = float(image.matrix[layer, column])
    at = int(image.steps[column])
    what = "not measured" if math.isnan(value) else f"{share_text(value)} {field}"
    return [HoverLine(tensor_name(image.layers[layer], role)), HoverLine(f"step {at}: {what}")]


def sqnr_hover_lines(history: QuantHistory | None, role: str, row: float) -> list[HoverLine]:
    """The layer under the cursor: its latest SQNR and the run's lowest, with their steps."""
    if history is None or not math.isfinite(row):
        return []
    index = math.floor(row + 0.5)
    rows = history.sqnr_by_layer(role)
    if not 0 <= index < len(rows):
        return []
    layer = rows[index]
    lines = [HoverLine(tensor_name(layer.layer, role))]
    if layer.latest_step is None:
        return [*lines, HoverLine("not measured for this role")]
    lines.append(HoverLine(f"step {layer.latest_step}: {sqnr_text(layer.latest)}"))
    if layer.minimum_step is not None:
        lines.append(HoverLine(f"lowest: {sqnr_text(layer.minimum)} (step {layer.minimum_step})"))
    return lines


def block_scale_hover_lines(
    history: QuantHistory | None, layer: str, role: str, log2_scale: float
) -> list[HoverLine]:
    """The bar under the cursor: "scale 2^-5", "1,234 of 4,096 blocks (30.1%)"."""
    latest = history.latest(layer, role) if history is not None else None
    if latest is None:
        return []
    return histogram_hover_text(
        latest.stats.scale_hist, log2_scale, quantity="block scale", items="blocks",
        suffix=f" (step {latest.step})",
    )  # fmt: skip


def block_counts_text(step: int, hist: Histogram) -> str:
    """The line under the block scales: how many blocks, and any zero, inf or NaN scale
    (a block of zeros, or a cast that went non-finite), which the bars cannot show."""
    text = f"{hist.total:,} blocks on step {step}"
    odd = [f"{count:,} {name}" for name, count in (("zero", hist.zero), ("inf", hist.inf),
                                                  ("NaN", hist.nan)) if count]  # fmt: skip
    return f"{text}; scales {', '.join(odd)}" if odd else text


def block_scale_note(history: QuantHistory | None, layer: str, role: str) -> str | None:
    """Why the block-scale histogram is empty (None when it has bars)."""
    latest = history.latest(layer, role) if history is not None else None
    if latest is None:
        return f"{tensor_name(layer, role)}: not measured" if layer else "no quantized layer"
    stats = latest.stats
    if stats.scale_hist is not None and any(stats.scale_hist.counts):
        return None
    if stats.scale is not None:
        # Short lines: the block-scale card is the page's narrowest.
        return f"no block scales:\nper-tensor scale\n{exponent_text(stats.scale)}"
    return "no block scales recorded"


def scale_fits_log2(history: QuantHistory, layer: str, role: str) -> tuple[FloatArray, FloatArray]:
    """(steps, log2(format max / scale)): the largest |x| a per-tensor scale lets through
    unclipped, in amax's units, so that amax above it means saturation.

    Only for tensors cast with a per-tensor scale alone (FP8 tensorwise, current or
    delayed). A block-scaled tensor (MX, NVFP4, FP8 rowwise) is clipped per block: NVFP4's
    per-tensor scale then only moves the block scales into E4M3's range, and max / scale
    would be no limit of amax at all; those draw no dashed curve."""
    latest = history.latest(layer, role)
    empty = np.empty(0)
    if latest is None or latest.stats.scale_hist is not None:
        return empty, empty
    try:
        top = format_range(latest.stats.format).log2_max
    except (KeyError, ValueError):  # a format this version does not know: no dashed curve
        return empty, empty
    steps, log_scale = history.log2_series(layer, role, "scale")
    return steps, top - log_scale


FIT_MARGIN = 8  # binades beyond the amax curves that the view shows of the dashed ones


def history_range(amax: Sequence[FloatArray], fits: Sequence[FloatArray]) -> tuple[int, int] | None:
    """The log2 range the amax/scale plot shows: the amax curves whole, the dashed curves
    up to FIT_MARGIN binades beyond them (whole binades at both ends).

    A delayed scale's first step has no amax history and casts at scale 1, which puts its
    dashed point 20-30 binades away; shown whole it would flatten every curve into a line.
    The dashed curve leaves the view there instead (zoom out to follow it)."""
    found = [values for values in amax if len(values)]
    if not found:
        found = [values for values in fits if len(values)]
        if not found:
            return None
        return (
            math.floor(min(float(v.min()) for v in found)),
            math.ceil(max(float(v.max()) for v in found)),
        )
    lo = min(float(v.min()) for v in found)
    hi = max(float(v.max()) for v in found)
    for values in fits:
        near = values[(values >= lo - FIT_MARGIN) & (values <= hi + FIT_MARGIN)]
        if len(near):
            lo, hi = min(lo, float(near.min())), max(hi, float(near.max()))
    return math.floor(lo), math.ceil(hi)


def history_note(
    runs: Sequence[OverlayRun], layer: str, role: str, raw_scale: bool = False
) -> str | None:
    """What the amax/scale plot says under its curves: which runs' tensors have no dashed
    curve (block-scaled; with `raw_scale`, those without a per-tensor scale), and how many
    amaxes a log axis cannot show."""
    notes = []
    for run in runs:
        history = run.model.quant
        latest = history.latest(layer, role)
        if latest is None:
            continue
        parts = []
        if raw_scale and latest.stats.scale is None:
            parts.append("no per-tensor scale")
        elif not raw_scale and latest.stats.scale_hist is not None:
            parts.append("block scales, no dashed curve")
        amax = history.series(layer, role, "amax")
        hidden = int(np.count_nonzero(~(np.isfinite(amax) & (amax > 0))))
        if hidden:
            parts.append(f"{hidden} amax inf/NaN/0 not drawn")
        if parts:
            notes.append(f"{elide_name(run.name, 24)}: {', '.join(parts)}")
    return "; ".join(notes) or None


# ----- widgets ---------------------------------------------------------------------------

# Where the share colour map changes colour: most of its colours go to small shares (a
# 1% flush or saturation already matters), and the colour bar, drawn over the linear
# 0..1 axis, says which colour is which share.
SHARE_STOPS = (0.0, 0.001, 0.01, 0.05, 0.2, 1.0)
_SHARE_COLOURS_LIGHT = ("#fde0c5", "#f59e72", "#e0533d", "#a3123a", "#4b0055")
_SHARE_COLOURS_DARK = ("#3b1f4f", "#6b2f8f", "#c0407a", "#f07f4f", "#fde725")
NOT_MEASURED_COLOUR = "#9a9a9a"  # cells without a measurement: grey, unlike a 0 share


def share_colour_map() -> pg.ColorMap:
    """Share 0 near the plot's background colour, then ever stronger colours (per theme)."""
    colours = _SHARE_COLOURS_DARK if is_dark() else _SHARE_COLOURS_LIGHT
    # Share 0: the background tinted towards the map's first colour, so an all-zero map
    # still shows where its cells are, and a 0 never reads as the grey of "not measured"
    # (a grey tint did, in the light theme).
    back, first = plot_colors().background, QColor(colours[0])
    zero = QColor(
        round(0.6 * back.red() + 0.4 * first.red()),
        round(0.6 * back.green() + 0.4 * first.green()),
        round(0.6 * back.blue() + 0.4 * first.blue()),
    )
    return pg.ColorMap(list(SHARE_STOPS), [zero.name(), *colours])


class LayerAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """A y axis over layer rows (0, 1, ...) whose ticks read the layers' names.

    Names are elided to fit the axis width; with more layers than fit in the height, every
    k-th is named (hover names any row)."""

    MAX_WIDTH = 150
    MAX_SHARE = 0.5  # of the plot's width: the data keeps the rest

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.names: list[str] = []
        self._metrics = QFontMetrics(QFont())
        self._plot_width = 1000

    @property
    def text_width(self) -> int:
        """The pixels a name may take (names longer are elided on the left)."""
        widest = max((self._metrics.horizontalAdvance(name) for name in self.names), default=20)
        room = max(int(self.MAX_SHARE * self._plot_width), 50)
        return min(widest, self.MAX_WIDTH - 12, room)

    def set_names(self, names: Sequence[str]) -> None:
        if list(names) == self.names:
            return
        self.names = list(names)
        self._fit()

    def fit(self, plot_width: int) -> None:
        """The plot is `plot_width` pixels wide now: the names take at most MAX_SHARE."""
        if plot_width != self._plot_width:
            self._plot_width = plot_width
            self._fit()

    def _fit(self) -> None:
        self.setWidth(self.text_width + 12)
        # Lay the plot out again now, not on the next turn of the event loop: a plot
        # rendered before that (an export, a screenshot) would find the axis too narrow
        # for its names and pyqtgraph would leave them out.
        layout = getattr(self.parentItem(), "layout", None)
        if isinstance(layout, QGraphicsLayout):
            layout.activate()
        self.picture = None
        self.update()

    def tickValues(
        self, minVal: float, maxVal: float, size: float
    ) -> list[tuple[float, list[float]]]:
        if not self.names:
            return []
        first = max(math.ceil(min(minVal, maxVal)), 0)
        last = min(math.floor(max(minVal, maxVal)), len(self.names) - 1)
        if last < first:
            return []
        shown = last - first + 1
        room = max(int(size // max(self._metrics.height(), 1)), 1)
        every = max(math.ceil(shown / room), 1)
        return [(1.0, [float(row) for row in range(first, last + 1, every)])]

    def tickStrings(self, values: Sequence[float], scale: float, spacing: float) -> list[str]:
        width = self.text_width
        out = []
        for value in values:
            row = round(value)
            if abs(value - row) > 1e-6 or not 0 <= row < len(self.names):
                out.append("")
            else:
                out.append(
                    self._metrics.elidedText(self.names[row], Qt.TextElideMode.ElideLeft, width)
                )
        return out


class BinadeAxis(PowerOfTwoAxis):
    """A 2^k axis whose ticks stay at least MIN_TICK_PIXELS apart ("2^-24" labels are
    wide: pyqtgraph's own spacing lets them run into each other on a narrow plot)."""

    MIN_TICK_PIXELS = 48

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        span = abs(maxVal - minVal)
        if not (span > 0 and size > 0):
            return [(1.0, 0.0)]
        per_tick = span * self.MIN_TICK_PIXELS / size
        major = next((n for n in (1, 2, 4, 8, 16, 32, 64) if n >= per_tick), 128)
        # pyqtgraph drops a label that would stick out of the axis: a spacing whose ticks
        # all lie within half a label of the ends leaves the axis bare (9 binades over 105
        # px: ticks at both ends only). Halve it until one tick has room for its label.
        margin = span * (self.MIN_TICK_PIXELS / 2) / size
        low, high = min(minVal, maxVal) + margin, max(minVal, maxVal) - margin
        while major > 1 and math.floor(high / major) * major < low:
            major //= 2
        return [(float(major), 0.0)]


MIN_LEGEND_HEIGHT = 260  # pixels of plot below which the history plot shows no legend


class QuantHistoryPlot(QWidget):
    """amax (solid) and the amax the scale fits (dashed: format max / scale) over steps,
    for one tensor, one pair of curves per overlaid run; or, switched, the scale itself."""

    def __init__(self) -> None:
        super().__init__()
        self.plot = plot_widget(PowerOfTwoAxis("left"))
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "|x|")
        self.raw_scale_box = QCheckBox("scale itself")
        self.raw_scale_box.setToolTip(
            "Dashed: the per-tensor scale itself (x · scale is cast) instead of format max / "
            "scale; NVFP4's tensor scale included"
        )
        self.raw_scale_box.toggled.connect(self._on_raw_scale_toggled)
        self.header_widgets = (self.raw_scale_box,)
        self.amax_curves = RunCurves(self.plot)
        self.scale_curves = RunCurves(self.plot, legend=False)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.note = ElidedLabel("")  # one line, elided; the whole text in its tooltip
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)
        self._runs: Sequence[OverlayRun] = ()
        self._tensor = ("", "")
        self._legend_wanted = False

    def _hover_text(self, step: float, _y: float) -> list[HoverLine]:
        return history_hover_lines(self._runs, *self._tensor, step)

    def _on_raw_scale_toggled(self, _checked: bool) -> None:
        self.range.reset()
        self.refresh(self._runs, *self._tensor)

    def _show_legend(self) -> None:
        self.amax_curves.show_legend(
            self._legend_wanted and self.plot.height() >= MIN_LEGEND_HEIGHT
        )

    def resizeEvent(self, event: QResizeEvent) -> None:
        # The plot was resized before this (its layout runs first): decide again whether
        # the legend has room.
        super().resizeEvent(event)
        self._show_legend()

    def refresh(self, runs: Sequence[OverlayRun], layer: str, role: str) -> None:
        """Curves of `layer`'s `role` tensor for each run; the x range sets the page's
        other plots over steps (linked)."""
        self._runs, self._tensor = runs, (layer, role)
        extent = x_extent([run.model for run in runs])
        amax_arrays, fit_arrays = [], []
        drawn = [run for run in runs if run.model.quant.has(layer, role)]
        for run in drawn:
            history = run.model.quant
            new = run.key not in self.scale_curves.curves
            amax_curve = self.amax_curves.curve_for(run)
            scale_curve = self.scale_curves.curve_for(run)
            if new:
                scale_curve.setPen(pg.mkPen(run.colour, width=1.5, style=Qt.PenStyle.DashLine))
            steps, log_amax = history.log2_series(layer, role, "amax")
            amax_curve.setData(steps, log_amax)
            if self.raw_scale_box.isChecked():
                scale_steps, log_fits = history.log2_series(layer, role, "scale")
            else:
                scale_steps, log_fits = scale_fits_log2(history, layer, role)
            scale_curve.setData(scale_steps, log_fits)
            amax_arrays.append(log_amax)
            fit_arrays.append(log_fits)
        keys = {run.key for run in drawn}
        self.amax_curves.drop_missing(keys)
        self.scale_curves.drop_missing(keys)
        # Runs are told apart by a legend where the plot has the height for it; on a
        # small screen the run list (and the hover read-out) name the colours.
        self._legend_wanted = len(drawn) > 1
        self._show_legend()
        # The scale itself is the quantity asked for: shown whole, like amax.
        raw = self.raw_scale_box.isChecked()
        shown = history_range(amax_arrays + fit_arrays if raw else amax_arrays, fit_arrays)
        if shown is not None:
            self.range.show(0.0, extent, shown[0] - 1, shown[1] + 1)
            self.empty_note.show(None)
        else:
            self.range.show(0.0, extent, -1.0, 1.0)
            self.empty_note.show(f"{tensor_name(layer, role)}: not measured in the runs shown")
        note = history_note(drawn, layer, role, raw) or ""
        self.note.setText(note)
        self.note.setToolTip(note)


class ShareHeatmap(QWidget):
    """One share (flushed or saturated) of one role, layer x statistics step, 0..1."""

    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field
        self.layer_axis = LayerAxis("left")
        self.plot = plot_widget(self.layer_axis)
        self.plot.setLabel("bottom", "step")
        self.plot.showGrid(x=False, y=False)
        self.plot.getPlotItem().invertY(True)  # the first layer (forward order) on top
        colour_map = share_colour_map()
        # Behind the image: cells not measured (NaN, drawn transparent) show this grey.
        self.not_measured = QGraphicsRectItem(0, 0, 0, 0)
        self.not_measured.setBrush(QBrush(QColor(NOT_MEASURED_COLOUR)))
        self.not_measured.setPen(pg.mkPen(None))
        self.not_measured.setZValue(-20)
        self.plot.addItem(self.not_measured)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(colour_map)
        self.image.setLevels((0.0, 1.0))  # fixed: a share of 0 .. 1, never auto
        self.plot.addItem(self.image)
        self.colour_bar = pg.ColorBarItem(
            values=(0.0, 1.0), colorMap=colour_map, interactive=False, width=12,
            label=f"{field} share",
        )  # fmt: skip
        add_colour_bar(self.plot, self.image, self.colour_bar)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        self.shown: ShareImage | None = None
        self.pooling = 1  # steps merged into each drawn column (by their maximum)
        self._role = ""
        self._key: tuple[int, int, str] | None = None
        view = self.plot.getPlotItem().getViewBox()
        view.sigXRangeChanged.connect(self._on_view_changed)
        view.sigResized.connect(self._on_view_changed)

    def _hover_text(self, step: float, row: float) -> list[HoverLine]:
        return heatmap_hover_lines(self.shown, self._role, self.field, step, row)

    def _wanted_pooling(self) -> int:
        image = self.shown
        if image is None or not len(image.steps):
            return 1
        view = self.plot.getPlotItem().getViewBox()
        (x_lo, x_hi), _y = view.viewRange()
        visible = float(x_hi - x_lo) / image.per_column
        pixels = max(float(view.width()), 1.0)
        return max(math.ceil(visible / pixels), 1)

    def _on_view_changed(self, *_args: object) -> None:
        # Zoomed in or resized: as many steps per drawn column as the pixels require.
        if self.shown is not None and self._wanted_pooling() != self.pooling:
            self._draw_image()

    def _draw_image(self) -> None:
        image = self.shown
        if image is None:
            return
        self.pooling = self._wanted_pooling()
        pooled = max_pooled(image.matrix, self.pooling)
        # NaN cells (not measured) are drawn transparent by pyqtgraph: the grey behind shows.
        self.image.setImage(pooled.astype(np.float32), autoLevels=False, levels=(0.0, 1.0))
        width = image.per_column * self.pooling * pooled.shape[1]
        rect = QRectF(image.left, -0.5, width, len(image.layers))
        self.image.setRect(rect)
        self.not_measured.setRect(rect)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.layer_axis.fit(self.width())

    def refresh(self, model: RunModel | None, role: str) -> None:
        key = (id(model), model.revision if model is not None else -1, role)
        if key == self._key:
            return
        self._key = key
        self._role = role
        history = model.quant if model is not None else None
        if history is None or not history or not len(history):
            self.shown = None
            self.image.clear()
            self.not_measured.setRect(QRectF())
            self.layer_axis.set_names([])
            self.empty_note.show("no quantized layers in the selected run")
            return
        image = share_image(history, role, self.field)
        self.shown = image
        self.layer_axis.set_names(image.layers)
        self._draw_image()
        self.range.show(None, None, -0.5, len(image.layers) - 0.5)
        measured = np.isfinite(image.matrix)
        if not measured.any():
            self.empty_note.show(f"no layer has a {ROLE_TITLES.get(role, role)} tensor")
        else:
            self.empty_note.show(None)


class SqnrPlot(QWidget):
    """SQNR per layer for one role: bars at the latest statistics step, ticks at the
    run's lowest. An exact tensor (inf dB) gets a bar to the plot's edge, marked."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_axis = LayerAxis("left")
        self.plot = plot_widget(self.layer_axis)
        self.plot.setLabel("bottom", "SQNR (dB)")
        self.plot.getPlotItem().invertY(True)
        self.bars = pg.BarGraphItem(x0=[], y=[], width=[], height=0.7, brush="#4a7fb5", pen=None)
        self.exact_bars = pg.BarGraphItem(
            x0=[], y=[], width=[], height=0.7, brush="#8fb8de", pen=None
        )
        self.minimum = pg.ScatterPlotItem(
            symbol="|", size=14, pen=pg.mkPen("#D55E00", width=2.5), brush=None
        )
        for item in (self.bars, self.exact_bars, self.minimum):
            self.plot.addItem(item)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.legend_label = file_text_label(
            "bar: latest; <span style='color:#D55E00'>|</span>: lowest; pale: exact",
            word_wrap=False,
        )
        self.legend_label.setToolTip(
            "Bar: the SQNR on the layer's latest statistics step. Orange tick: the lowest "
            "over the run. Pale bar: quantized exactly (∞ dB), drawn to the plot's edge."
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend_label)
        self._history: QuantHistory | None = None
        self._role = ""
        self._key: tuple[int, int, str] | None = None

    def _hover_text(self, _x: float, row: float) -> list[HoverLine]:
        return sqnr_hover_lines(self._history, self._role, row)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.layer_axis.fit(self.width())

    def refresh(self, model: RunModel | None, role: str) -> None:
        key = (id(model), model.revision if model is not None else -1, role)
        if key == self._key:
            return
        self._key = key
        history = model.quant if model is not None and model.quant else None
        self._history, self._role = history, role
        rows = history.sqnr_by_layer(role) if history is not None else []
        self.layer_axis.set_names([row.layer for row in rows])
        finite = [v for row in rows for v in (row.latest, row.minimum) if math.isfinite(v)]
        if not finite:
            for bars in (self.bars, self.exact_bars):
                bars.setOpts(x0=[], y=[], width=[])
            self.minimum.setData([], [])
            self.empty_note.show(
                "no quantized layers in the selected run" if history is None
                else f"no SQNR recorded for the {ROLE_TITLES.get(role, role)}"
            )  # fmt: skip
            return
        self.empty_note.show(None)
        top = max(max(finite), 0.0) * 1.1 + 1.0  # where an exact (inf dB) bar ends
        low = min(min(finite), 0.0)
        y = np.arange(len(rows), dtype=np.float64)
        latest = np.array([row.latest for row in rows])
        exact = np.isposinf(latest)
        shown = np.isfinite(latest)
        self.bars.setOpts(x0=np.zeros(int(shown.sum())), y=y[shown], width=latest[shown])
        self.exact_bars.setOpts(
            x0=np.zeros(int(exact.sum())), y=y[exact], width=np.full(int(exact.sum()), top)
        )
        minimum = np.array([row.minimum for row in rows])
        keep = np.isfinite(minimum)
        self.minimum.setData(minimum[keep], y[keep])
        self.plot.getPlotItem().setRange(
            xRange=(low, top), yRange=(-0.5, len(rows) - 0.5), padding=0.02
        )


class BlockScalePlot(QWidget):
    """The block scales of the chosen tensor on its latest statistics step, by binade."""

    def __init__(self) -> None:
        super().__init__()
        self.plot = plot_widget(CountAxis("left"), BinadeAxis("bottom"))
        self.plot.setLabel("bottom", "block scale")
        self.plot.setLabel("left", "blocks")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.9, brush="#4a7fb5", pen=None)
        self.plot.addItem(self.bars)
        self.empty_note = EmptyNote(self.plot, height_fraction=0.5)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.counts_label = ElidedLabel("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.counts_label)
        self._history: QuantHistory | None = None
        self._tensor = ("", "")

    def _hover_text(self, x: float, _y: float) -> list[HoverLine]:
        return block_scale_hover_lines(self._history, *self._tensor, x)

    def refresh(self, model: RunModel | None, layer: str, role: str) -> None:
        history = model.quant if model is not None and model.quant else None
        self._history, self._tensor = history, (layer, role)
        note = block_scale_note(history, layer, role)
        self.empty_note.show(note)
        latest = history.latest(layer, role) if history is not None else None
        hist = latest.stats.scale_hist if latest is not None else None
        self.counts_label.setText(block_counts_text(latest.step, hist) if latest and hist else "")
        if note is not None or hist is None:
            self.bars.setOpts(x=[], height=[])
            return
        counts = np.asarray(hist.counts, dtype=np.float64)
        x = np.arange(hist.lo, hist.lo + len(counts), dtype=np.float64) + 0.5
        self.bars.setOpts(x=x, height=np.log10(1.0 + counts), width=0.9)
        self.plot.getPlotItem().setRange(
            xRange=(hist.lo - 1, hist.lo + len(counts) + 1),
            yRange=(0, max(float(np.log10(1.0 + counts.max())), 1.0) * 1.08),
            padding=0,
        )


EXPLAIN_HISTORY = (
    "amax (solid) and the largest |x| the scale fits (dashed: format max / scale), log2.",
    "For the chosen layer and tensor, one pair of curves per run shown. Per-tensor scaling "
    "multiplies the tensor by scale before the cast: values above max / scale saturate. "
    "Current scaling sets the scale from this step's amax (solid and dashed meet); delayed "
    "scaling from earlier steps' amaxes, so after a spike the solid curve rises above the "
    "dashed one (saturation) and afterwards the scale stays too small for a while (more "
    "values flush to zero). Block-scaled recipes (MX) have no per-tensor scale. 'scale "
    "itself' plots the scale instead of max / scale. The view "
    "shows the dashed curve up to 8 binades beyond the amax curves (a delayed scale's "
    "first step, at scale 1, lies far off): zoom out to follow it.",
)
EXPLAIN_FLUSHED = (
    "Share of non-zero values flushed to zero, by layer and step (0..1).",
    "For the chosen tensor role. A value flushes when, after scaling, it lies below half of "
    "the format's smallest subnormal. Palest: none flushed; grey: not measured on that "
    "step. Where the steps "
    "outnumber the pixels, a drawn column shows the largest share of its steps (zoom in, "
    "or hover: the read-out gives each step's own share).",
)
EXPLAIN_SATURATED = (
    "Share of values clamped to the format's largest finite value, by layer and step.",
    "For the chosen tensor role (the view FP8 analyzers give). With delayed scaling a spike "
    "saturates until the amax history catches up. Palest: none saturated; grey: not "
    "measured on that step. Where "
    "the steps outnumber the pixels, a drawn column shows the largest share of its steps.",
)
EXPLAIN_SQNR = (
    "Quantization SQNR per layer: 10·log10(Σx² / Σ(x − q(x))²).",
    "For the chosen role; higher is better (every 6 dB is about one bit). The bar is the "
    "latest statistics step, the tick the lowest over the run.",
)
EXPLAIN_BLOCKS = (
    "The block scales of the chosen tensor by binade (latest statistics step).",
    "Block-scaled recipes (MX: blocks of 32 with a power-of-two E8M0 scale; NVFP4: blocks "
    "of 16) give each block its own scale. A wide spread means the tensor's magnitudes "
    "vary a lot between blocks.",
)

# The "hurts most" choices: (criterion, over the run), in the order the box lists them.
HURT_CHOICES: tuple[tuple[Criterion, bool], ...] = (
    ("sqnr", True),
    ("sqnr", False),
    ("saturated", True),
    ("saturated", False),
    ("flushed", True),
    ("flushed", False),
)


class QuantPage(QWidget):
    """The Low precision page: controls, the "hurts most" line and the five cards; a note
    instead when no run shown has quantized layers."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_box = QComboBox()
        self.layer_box.setToolTip("The layer whose amax, scale and block scales are shown")
        # A layer name can be longer than any width: the layer box is the one that gives
        # way on a small window (12 characters at least) and grows, up to 40, on a wide one.
        # The tensor and criterion boxes have a few fixed texts and always show them whole
        # (at 1024x640 the tensor box was squeezed to "output g").
        self.layer_box.setMinimumContentsLength(12)
        self.layer_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.layer_box.setMaximumWidth(
            self.layer_box.minimumSizeHint().width()
            + self.layer_box.fontMetrics().horizontalAdvance("x" * 28)
        )
        self.role_box = QComboBox()
        self.role_box.setToolTip("Which tensor of the linear: its input, weight or output gradient")
        self.role_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.hurt_box = QComboBox()
        for criterion, over_run in HURT_CHOICES:
            self.hurt_box.addItem(f"{CRITERIA[criterion]}, {'run' if over_run else 'latest'}")
        self.hurt_box.setToolTip("How the tensor that hurts most is chosen")
        self.layer_box.activated.connect(self._on_tensor_chosen)
        self.role_box.activated.connect(self._on_tensor_chosen)
        self.hurt_box.currentIndexChanged.connect(self._on_hurt_changed)
        self.hurts_label = ElidedLabel("")
        font = self.hurts_label.font()
        font.setBold(True)
        self.hurts_label.setFont(font)

        self.history_plot = QuantHistoryPlot()
        self.flushed_map = ShareHeatmap("flushed")
        self.saturated_map = ShareHeatmap("saturated")
        self.sqnr_plot = SqnrPlot()
        self.block_plot = BlockScalePlot()
        self.linked_steps = LinkedSteps(
            [self.history_plot.plot, self.flushed_map.plot, self.saturated_map.plot]
        )
        self.cards = {
            "history": Card("amax and scale", *EXPLAIN_HISTORY, self.history_plot),
            "flushed": Card("Flushed to zero", *EXPLAIN_FLUSHED, self.flushed_map),
            "saturated": Card("Saturated", *EXPLAIN_SATURATED, self.saturated_map),
            "sqnr": Card("SQNR per layer", *EXPLAIN_SQNR, self.sqnr_plot),
            "blocks": Card("Block scales", *EXPLAIN_BLOCKS, self.block_plot),
        }
        controls = QHBoxLayout()
        controls.setContentsMargins(4, 2, 4, 0)
        for text, box in (("Layer", self.layer_box), ("Tensor", self.role_box),
                          ("Hurts most by", self.hurt_box)):  # fmt: skip
            controls.addWidget(QLabel(text))
            controls.addWidget(box, 1 if box is self.layer_box else 0)
        controls.addStretch(0)  # beyond the layer box's widest: space after the boxes
        # Which run the one-run cards show, on a line of its own where that needs saying.
        self.detail_label = ElidedLabel("")
        self.detail_label.setVisible(False)

        rows = QSplitter(Qt.Orientation.Vertical)
        rows.setChildrenCollapsible(False)
        for names, stretches in (
            (("history", "sqnr", "blocks"), (4, 3, 2)),
            (("flushed", "saturated"), (1, 1)),
        ):
            row = QSplitter(Qt.Orientation.Horizontal)
            row.setChildrenCollapsible(False)
            for index, (name, stretch) in enumerate(zip(names, stretches, strict=True)):
                row.addWidget(self.cards[name])
                row.setStretchFactor(index, stretch)
            rows.addWidget(row)
        for index, stretch in enumerate((5, 4)):
            rows.setStretchFactor(index, stretch)
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(2, 2, 2, 2)
        content_layout.setSpacing(2)
        content_layout.addLayout(controls)
        content_layout.addWidget(self.hurts_label)
        content_layout.addWidget(self.detail_label)
        # On a short window the cards keep their readable heights and scroll (the controls
        # and the "hurts most" line stay above them).
        self.rows_scroll = PageScrollArea(rows)
        content_layout.addWidget(self.rows_scroll, 1)

        self.note_label = QLabel()
        self.note_label.setWordWrap(True)
        self.note_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note_label.setMargin(40)
        font = self.note_label.font()
        font.setPointSizeF(font.pointSizeF() + 2)  # the page's one message: read from afar
        self.note_label.setFont(font)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.note_label)
        self.stack.addWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)

        self._chosen_by_user = False
        self._runs: Sequence[OverlayRun] = ()
        self._current: RunModel | None = None
        self.refresh([], [], None)

    # ----- state ----------------------------------------------------------------------

    @property
    def layer(self) -> str:
        return self.layer_box.currentText()

    @property
    def role(self) -> str:
        return str(self.role_box.currentData() or "")

    @property
    def hurt_choice(self) -> tuple[Criterion, bool]:
        return HURT_CHOICES[max(self.hurt_box.currentIndex(), 0)]

    def export_plots(self) -> dict[str, tuple[pg.PlotWidget, PlotCaption]]:
        """The page's plots by export file name, each with what its export says it shows
        (the card's title with the tensor, the runs drawn); none while the page shows its
        note instead."""
        if self.stack.currentIndex() == 0:
            return {}
        tensor = ROLE_TITLES.get(self.role, self.role)
        # The one-run cards draw the run `_redraw` chose; the history draws every run.
        current = self._shown_current()
        one = (current.label,) if current is not None else ()
        every = tuple(run.full_name or run.name for run in self._runs)
        chosen = f"{self.layer}, {tensor}"
        plots = {
            "quant_amax_scale": ("history", self.history_plot.plot, chosen, every),
            "quant_flushed_heatmap": ("flushed", self.flushed_map.plot, f"{tensor} tensors", one),
            "quant_saturated_heatmap": (
                "saturated",
                self.saturated_map.plot,
                f"{tensor} tensors",
                one,
            ),
            "quant_sqnr": ("sqnr", self.sqnr_plot.plot, f"{tensor} tensors", one),
            "quant_block_scales": ("blocks", self.block_plot.plot, chosen, one),
        }
        exports: dict[str, tuple[pg.PlotWidget, PlotCaption]] = {}
        for name, (card_name, plot, what, runs) in plots.items():
            card = self.cards[card_name]
            caption = PlotCaption(f"{card.title}: {what}", runs, card.explanation)
            exports[name] = (plot, caption)
        return exports

    def _shown_current(self) -> RunModel | None:
        """The run the one-run cards show: the selected one when it has quantized layers,
        else the first quantized run shown."""
        if self._current is not None and self._current.quant:
            return self._current
        return self._runs[0].model if self._runs else None

    @property
    def note(self) -> str | None:
        """The page's note when it shows one instead of the cards."""
        return self.note_label.text() if self.stack.currentIndex() == 0 else None

    def _on_tensor_chosen(self, _index: int) -> None:
        self._chosen_by_user = True
        self._redraw()

    def _on_hurt_changed(self, _index: int) -> None:
        self._redraw()

    def choose(self, layer: str, role: str) -> None:
        """Show `layer`'s `role` tensor (as picking them in the boxes does)."""
        self._set_box(self.layer_box, layer)
        index = self.role_box.findData(role)
        if index >= 0:
            self.role_box.setCurrentIndex(index)
        self._chosen_by_user = True
        self._redraw()

    @staticmethod
    def _set_box(box: QComboBox, text: str) -> None:
        index = box.findText(text)
        if index >= 0:
            box.setCurrentIndex(index)

    # ----- drawing --------------------------------------------------------------------

    def refresh(
        self, overlay: Sequence[OverlayRun], shown: Sequence[RunModel], current: RunModel | None
    ) -> None:
        """Redraw from the runs shown (ticked) and the selected one."""
        quantized = [run for run in overlay if run.model.quant]
        self._runs = quantized
        self._current = current
        if not quantized and not (current is not None and current.quant):
            text = no_quant_note(list(shown))
            if self.note_label.text() != text:
                self.note_label.setText(text)
            self.stack.setCurrentIndex(0)
            return
        self.stack.setCurrentIndex(1)
        histories = [run.model.quant for run in quantized]
        if current is not None and current.quant and current.quant not in histories:
            histories.append(current.quant)
        self._fill_boxes(layer_choices(histories), role_choices(histories))
        self._redraw()

    def _fill_boxes(self, layers: list[str], roles: list[str]) -> None:
        if [self.layer_box.itemText(i) for i in range(self.layer_box.count())] != layers:
            chosen = self.layer
            self.layer_box.blockSignals(True)
            self.layer_box.clear()
            self.layer_box.addItems(layers)
            self._set_box(self.layer_box, chosen)
            self.layer_box.blockSignals(False)
        if [self.role_box.itemData(i) for i in range(self.role_box.count())] != roles:
            chosen = self.role
            self.role_box.blockSignals(True)
            self.role_box.clear()
            for role in roles:
                self.role_box.addItem(ROLE_TITLES.get(role, role), role)
            index = self.role_box.findData(chosen)
            self.role_box.setCurrentIndex(max(index, 0))
            self.role_box.blockSignals(False)

    def _redraw(self) -> None:
        current = self._shown_current()
        text = detail_text(self._runs, current, self._current)
        self.detail_label.setText(text)
        self.detail_label.setToolTip(text)
        self.detail_label.setVisible(bool(text))
        criterion, over_run = self.hurt_choice
        worst = current.quant.hurts_most(criterion, over_run) if current is not None else None
        nonfinite = current.quant.first_nonfinite if current is not None else None
        hurts = hurts_most_text(worst, criterion, over_run, nonfinite)
        self.hurts_label.setText(hurts)
        self.hurts_label.setToolTip(hurts)
        if not self._chosen_by_user and worst is not None:
            # Until a person picks a tensor, the page shows the one that hurts most.
            self._set_box(self.layer_box, worst.layer)
            index = self.role_box.findData(worst.role)
            if index >= 0:
                self.role_box.setCurrentIndex(index)
        layer, role = self.layer, self.role
        self.history_plot.refresh(self._runs, layer, role)
        self.flushed_map.refresh(current, role)
        self.saturated_map.refresh(current, role)
        self.sqnr_plot.refresh(current, role)
        self.block_plot.refresh(current, layer, role)
