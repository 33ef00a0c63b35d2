"""The training panel's plots. Each view creates its items once and redraws from RunModels.

Views never keep numbers of their own: `refresh(...)` reads the models and pushes the
arrays into existing items with setData / setOpts / setImage. The panel calls refresh from
one QTimer (at most ~30 times a second) and only when a model's revision moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFrame,
    QGraphicsItem,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QRadioButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.gui.theme import plot_colors
from fpexplorer.gui.training.run_model import (
    FORMAT_LABELS,
    HEAT_BINS,
    HEAT_HI,
    HEAT_LO,
    Histogram,
    RunModel,
    WhatIf,
    format_ranges,
    what_if,
)

# Distinct colours for overlaid runs (colour-blind friendly, Okabe-Ito).
RUN_COLOURS: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
)
FORMAT_COLOURS: dict[str, str] = {
    "float16": "#D55E00",
    "bfloat16": "#0072B2",
    "float8_e4m3fn": "#009E73",
    "float8_e5m2": "#CC79A7",
}


def run_colour(index: int) -> str:
    return RUN_COLOURS[index % len(RUN_COLOURS)]


class PowerOfTwoAxis(pg.AxisItem):
    """An axis over log2(value) whose ticks read 2^k."""

    def tickStrings(self, values: Sequence[float], scale: float, spacing: float) -> list[str]:
        return [f"2^{round(v):d}" if abs(v - round(v)) < 1e-6 else "" for v in values]


class CountAxis(pg.AxisItem):
    """An axis over log10(1 + count) whose ticks read counts."""

    def tickStrings(self, values: Sequence[float], scale: float, spacing: float) -> list[str]:
        out = []
        for v in values:
            if v < 0 or abs(v - round(v)) > 1e-6:
                out.append("")
            else:
                out.append(
                    "0" if v == 0 else f"1e{round(v):d}" if v >= 4 else f"{10 ** round(v):d}"
                )
        return out


class Card(QFrame):
    """A titled box: the title, a one-paragraph explanation, and the content under them."""

    def __init__(self, title: str, explanation: str, details: str, content: QWidget) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        self.title_label = QLabel(f"<b>{title}</b>")
        self.explanation_label = QLabel(explanation)
        self.explanation_label.setToolTip(f"<p>{explanation} {details}</p>")
        self.explanation_label.setWordWrap(True)
        font = self.explanation_label.font()
        font.setPointSizeF(max(font.pointSizeF() - 1.0, 7.0))
        self.explanation_label.setFont(font)
        self.title_label.setToolTip(f"<p>{explanation} {details}</p>")
        title_row = QHBoxLayout()
        title_row.setSpacing(6)
        title_row.addWidget(self.title_label)
        title_row.addStretch(1)
        # A view's own controls (e.g. a log-axis switch) sit in the title row: no row of
        # its own is taken from the plot.
        for widget in getattr(content, "header_widgets", ()):
            title_row.addWidget(widget)
        layout.addLayout(title_row)
        layout.addWidget(self.explanation_label)
        layout.addWidget(content, 1)
        self.content = content


def _plot_widget(left_axis: pg.AxisItem | None = None) -> pg.PlotWidget:
    axis_items = {"left": left_axis} if left_axis is not None else None
    colours = plot_colors()  # the app's light or dark palette, read once: items are made once
    widget = pg.PlotWidget(axisItems=axis_items, background=colours.background)
    widget.setMinimumSize(200, 110)
    widget.showGrid(x=True, y=True, alpha=0.2)
    item = widget.getPlotItem()
    item.setMenuEnabled(False)
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setPen(colours.foreground)
        axis.setTextPen(colours.foreground)
    cache_axes(item)
    return widget


def cache_axes(item: pg.PlotItem) -> None:
    """Cache each axis (with its grid) as a pixmap, redrawn only when the axis changes.

    With the grid on, an axis item covers the whole view, so every curve update repainted
    it from its QPicture: the most expensive part of a frame while a job streams.
    """
    for name in ("left", "bottom", "right", "top"):
        axis = item.getAxis(name)
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)


class StickyRange:
    """Keeps a plot's view range still until the data leaves it (or fills < 40% of it).

    pyqtgraph's auto-range moves the view on nearly every frame of a live run (the loss
    falls, the x extent grows), and every move repaints the axes, which costs more than
    drawing the curves. A range that only moves when it must keeps the event loop free.
    """

    def __init__(self, plot: pg.PlotWidget) -> None:
        self.view = plot.getPlotItem().getViewBox()
        self.view.disableAutoRange()
        self._last: tuple[float, float, float, float, pg.LegendItem | None] | None = None
        self.view.sigResized.connect(self._on_view_resized)
        self.x: tuple[float, float] | None = None
        self.y: tuple[float, float] | None = None
        self._view_height = 0.0

    @staticmethod
    def _settle(
        current: tuple[float, float] | None, lo: float, hi: float, pad: float
    ) -> tuple[float, float] | None:
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        # Near float64's end (a loss of 1e308) the padded range would be inf, and
        # pyqtgraph raises on it: such values are shown clipped instead.
        lo, hi = max(lo, -1e300), min(hi, 1e300)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        span = hi - lo
        if current is not None:
            inside = current[0] <= lo and hi <= current[1]
            if inside and span >= 0.4 * (current[1] - current[0]):
                return None
        return (lo - pad * span, hi + pad * span)

    def show(
        self,
        x_lo: float,
        x_hi: float,
        y_lo: float,
        y_hi: float,
        legend: pg.LegendItem | None = None,
    ) -> None:
        """Show [x_lo, x_hi] x [y_lo, y_hi], with room on top for `legend` (it sits in the
        top corner) so that it never covers a curve."""
        self._last = (x_lo, x_hi, y_lo, y_hi, legend)
        view_height = self.view.boundingRect().height()
        if legend is not None and abs(view_height - self._view_height) > 1:
            self.y = None  # the room the legend needs changed with the plot's height
        self._view_height = view_height
        x = self._settle(self.x, x_lo, x_hi, 0.0)
        y = self._settle(self.y, y_lo, y_hi, 0.08)
        if y is not None and legend is not None:
            legend_height = legend.boundingRect().height() + 14
            free = max(view_height - legend_height, 0.25 * view_height, 1.0)
            y = (y[0], y[1] + (y[1] - y[0]) * legend_height / free)
        if x is not None:
            self.x = x
        if y is not None:
            self.y = y
        if x is not None or y is not None:
            self.view.setRange(xRange=self.x, yRange=self.y, padding=0)

    def reset(self) -> None:
        self.x = self.y = None

    def _on_view_resized(self, *_args: object) -> None:
        if self._last is not None and self._last[4] is not None:
            self.show(*self._last)  # the legend's share of the height changed


class EmptyNote:
    """A line of text in the middle of a plot that says why the plot is empty.

    An empty frame with bare axes looks like a broken panel; the note tells what is
    missing (no steps yet, a failed run, only non-finite values). Hidden when there is data.
    """

    def __init__(self, plot: pg.PlotWidget, height_fraction: float = 0.62) -> None:
        # Below the middle by default: legends sit in the top corner.
        self.height_fraction = height_fraction
        self.view = plot.getPlotItem().getViewBox()
        background = QColor(plot_colors().background)
        background.setAlpha(220)
        self.item = pg.TextItem(
            "", color=plot_colors().foreground, anchor=(0.5, 0.5), fill=pg.mkBrush(background)
        )
        self.item.setParentItem(self.view)  # view (pixel) coordinates: placed, not plotted
        self.item.setVisible(False)
        self.view.sigResized.connect(self._place)

    @property
    def text(self) -> str | None:
        return self.item.toPlainText() if self.item.isVisible() else None

    def show(self, text: str | None) -> None:
        if text is None:
            self.item.setVisible(False)
            return
        if self.item.toPlainText() != text:
            self.item.setText(text)
        self.item.setVisible(True)
        self._place()

    def _place(self, *_args: object) -> None:
        rect = self.view.boundingRect()
        self.item.setPos(rect.center().x(), rect.top() + self.height_fraction * rect.height())


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
        if model.latest_stats is None and model.config.get("stats_every") == 0:
            return "statistics were off for this run (stats-every 0)"
        return "no statistics step yet"
    return f"no finite non-zero gradient: {hist.zero:,} zero, {hist.inf:,} inf, {hist.nan:,} NaN"


def x_extent(runs: Sequence[tuple[int, RunModel, str, bool]]) -> float:
    """The last step the x axis must show for the visible runs.

    A finished run shows its length. A live run shows its planned length while it is
    within 4x of what has arrived, else room for 1.5x what has arrived: the axis then
    moves a logarithmic number of times, not on every frame.
    """
    extent = 1.0
    for _key, model, _colour, visible in runs:
        if not visible:
            continue
        seen = float(model.scalars.steps[-1] + 1) if len(model.scalars) else 0.0
        planned = float(model.planned_steps or 0)
        if model.end is not None or model.closed or not planned:
            wanted = seen  # finished (or no plan): exactly what is there
        elif planned <= 4 * max(seen, 1.0):
            wanted = planned
        else:
            wanted = 1.5 ** math.ceil(math.log(max(seen, 16.0) * 1.5, 1.5))
        extent = max(extent, wanted)
    return extent


class RunCurves:
    """One curve per run in a plot; curves are created when a run appears and kept."""

    def __init__(
        self, plot: pg.PlotWidget, legend_offset: tuple[int, int] | None = (-10, 10)
    ) -> None:
        self.plot = plot
        self.curves: dict[int, pg.PlotDataItem] = {}
        self.legend = None
        if legend_offset is not None:
            self.legend = plot.getPlotItem().addLegend(offset=legend_offset)
            background = QColor(plot_colors().background)
            background.setAlpha(200)
            self.legend.setBrush(pg.mkBrush(background))
            self.legend.setLabelTextColor(plot_colors().foreground)

    def curve_for(self, key: int, name: str, colour: str) -> pg.PlotDataItem:
        curve = self.curves.get(key)
        if curve is None:
            curve = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5), name=name)
            curve.setDownsampling(auto=True, method="peak")
            curve.setClipToView(True)
            self.plot.addItem(curve)
            self.curves[key] = curve
        elif curve.name() != name:
            # A live run is named from the form until its header arrives with the job's
            # own settings (e.g. the task's learning rate): the legend follows.
            curve.opts["name"] = name
            if self.legend is not None:
                label = self.legend.getLabel(curve)
                if label is not None:
                    label.setText(name)
        return curve

    def drop_missing(self, keys: set[int]) -> None:
        for key in list(self.curves):
            if key not in keys:
                curve = self.curves.pop(key)
                if self.legend is not None:
                    self.legend.removeItem(curve)
                self.plot.removeItem(curve)


class LossPlot(QWidget):
    """Loss per step, one curve per run, with a log-axis switch."""

    def __init__(self) -> None:
        super().__init__()
        self.plot = _plot_widget()
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "loss")
        self.curves = RunCurves(self.plot)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.log_box = QCheckBox("log axis")
        self.log_box.toggled.connect(self._on_log_toggled)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.header_widgets = (self.log_box,)
        layout.addWidget(self.plot, 1)

    def _on_log_toggled(self, checked: bool) -> None:
        self.plot.getPlotItem().setLogMode(x=False, y=checked)
        self.range.reset()
        self._show_range()

    def refresh(self, runs: Sequence[tuple[int, RunModel, str, bool]]) -> None:
        self._runs = runs
        for key, model, colour, visible in runs:
            curve = self.curves.curve_for(key, model.label, colour)
            curve.setVisible(visible)
            steps = model.scalars.steps
            loss = model.scalars.column("loss")
            # Non-finite losses (an overflowed forward) would break the line; they are
            # left out of the curve and show up as skipped steps in the scale plot.
            finite = np.isfinite(loss)
            curve.setData(steps[finite], loss[finite])
        self.curves.drop_missing({key for key, *_ in runs})
        self._show_range()

    _runs: Sequence[tuple[int, RunModel, str, bool]] = ()

    def _show_range(self) -> None:
        log = self.log_box.isChecked()
        lo, hi = math.inf, -math.inf
        for _key, model, _colour, visible in self._runs:
            if not visible or not len(model.scalars):
                continue
            loss = model.scalars.column("loss")
            loss = loss[np.isfinite(loss) & (loss > 0)] if log else loss[np.isfinite(loss)]
            if len(loss):
                lo, hi = min(lo, float(loss.min())), max(hi, float(loss.max()))
        if log and math.isfinite(lo):
            lo, hi = math.log10(lo), math.log10(hi)
        self.range.show(0.0, x_extent(self._runs), lo, hi, legend=self.curves.legend)
        self.empty_note.show(None if math.isfinite(lo) else self._empty_reason(log))

    def _empty_reason(self, log: bool) -> str:
        models = [model for _key, model, _colour, visible in self._runs if visible]
        steps = sum(len(model.scalars) for model in models)
        if not steps:
            return no_steps_reason(models)
        if log:
            return f"no positive finite loss in {steps:,} steps to show on a log axis"
        return f"no finite loss: all {steps:,} losses are inf or NaN"


class LossScalePlot(QWidget):
    """log2(loss scale) per step, skipped steps marked, growth tracker vs growth interval."""

    def __init__(self) -> None:
        super().__init__()
        self.plot = _plot_widget(PowerOfTwoAxis("left"))
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "loss scale")
        self.curves = RunCurves(self.plot)
        self.skips = pg.ScatterPlotItem(
            symbol="x", size=9, pen=pg.mkPen("#c00000", width=2), brush=None, name="skipped step"
        )
        self.plot.addItem(self.skips)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.growth_bar = QProgressBar()
        self.growth_bar.setTextVisible(True)
        self.growth_bar.setMaximumHeight(18)
        self.growth_label = QLabel("growth tracker: –")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        row = QHBoxLayout()
        row.addWidget(self.growth_label)
        row.addWidget(self.growth_bar, 1)
        layout.addLayout(row)

    def refresh(
        self, runs: Sequence[tuple[int, RunModel, str, bool]], current: RunModel | None
    ) -> None:
        lo, hi = math.inf, -math.inf
        for key, model, colour, visible in runs:
            curve = self.curves.curve_for(key, model.label, colour)
            curve.setVisible(visible)
            scale = model.scalars.column("scale")
            with np.errstate(divide="ignore", invalid="ignore"):
                log_scale = np.log2(scale)
            finite = np.isfinite(log_scale)
            curve.setData(model.scalars.steps[finite], log_scale[finite])
            if visible and finite.any():
                lo = min(lo, float(log_scale[finite].min()))
                hi = max(hi, float(log_scale[finite].max()))
        self.curves.drop_missing({key for key, *_ in runs})
        shown = [model for _key, model, _colour, visible in runs if visible]
        self.empty_note.show(
            None
            if math.isfinite(lo)
            else no_steps_reason(shown)
            if not any(len(model.scalars) for model in shown)
            else "no finite loss scale recorded"
        )
        if math.isfinite(lo):
            # Whole powers of two at the ends, so the 2^k ticks are always there.
            self.range.show(
                0.0, x_extent(runs), math.floor(lo) - 1, math.ceil(hi) + 1,
                legend=self.curves.legend,
            )  # fmt: skip
        # Skipped steps of every visible run (each run keeps its first MAX_SKIP_EVENTS).
        events = [e for _k, model, _c, visible in runs if visible for e in model.skip_events]
        if events:
            xs = np.fromiter((e.step for e in events), dtype=np.float64, count=len(events))
            ys = np.fromiter((e.scale for e in events), dtype=np.float64, count=len(events))
            with np.errstate(divide="ignore", invalid="ignore"):
                ys = np.log2(ys)
            keep = np.isfinite(ys)
            self.skips.setData(xs[keep], ys[keep])
        else:
            self.skips.setData([], [])
        self._show_skips_in_legend(bool(events))

    def _show_skips_in_legend(self, shown: bool) -> None:
        # A "skipped step" entry on a run that skipped nothing reads as a skip: list it
        # only when there is one to see.
        legend = self.curves.legend
        if legend is None:
            return
        listed = legend.getLabel(self.skips) is not None
        if shown and not listed:
            legend.addItem(self.skips, "skipped step")
        elif listed and not shown:
            legend.removeItem(self.skips)

    def refresh_growth(self, current: RunModel | None) -> None:
        """The growth tracker read-out (slow cadence: a progress bar repaints at once)."""
        growth = current.growth() if current is not None else None
        dynamic = current is not None and current.precision == "fp16"
        if growth is None or not dynamic:
            self.growth_bar.setRange(0, 1)
            self.growth_bar.setValue(0)
            self.growth_bar.setFormat("no dynamic scaling")
            self.growth_label.setText("growth tracker:")
        else:
            tracker, interval = growth
            self.growth_bar.setRange(0, max(interval, 1))
            self.growth_bar.setValue(min(tracker, interval))
            self.growth_bar.setFormat(f"{tracker} / {interval} clean steps")
            self.growth_bar.setToolTip("clean steps since the last change, of growth_interval")
            skipped = current.skipped_count if current is not None else 0
            self.growth_label.setText(f"skipped: {skipped} · growth tracker:")


class GradientHistogramPlot(QWidget):
    """The latest statistics step's gradient exponents on a log2|g| axis, against formats.

    Parameter gradients or activation gradients (switchable). Under the bars each format's
    range is drawn as a ruler: thin from the smallest subnormal to the smallest normal,
    thick from there to the largest finite value. The shaded window is what FP16 can hold
    at the what-if loss scale 2**k; it can be dragged sideways or set with the spin box.
    """

    what_if_changed = Signal(int)

    RULER_STEP = 0.6  # vertical distance between format rulers, in log10(count) units
    FORMAT_ORDER = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")

    def __init__(self) -> None:
        super().__init__()
        self.plot = _plot_widget(CountAxis("left"))
        self.plot.setLabel("bottom", "log2 |g|  (binade)")
        self.plot.setLabel("left", "count")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.9, brush="#4a7fb5", pen=None)
        self.plot.addItem(self.bars)
        self._rulers: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem, pg.TextItem]] = {}
        self._ruler_step = self.RULER_STEP
        for row, name in enumerate(self.FORMAT_ORDER):
            colour = FORMAT_COLOURS[name]
            y = -self.RULER_STEP * (row + 1)
            thin = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine))
            thick = pg.PlotDataItem(pen=pg.mkPen(colour, width=5))
            label = pg.TextItem(
                FORMAT_LABELS[name], color=colour, anchor=(0.0, 0.5),
                fill=pg.mkBrush(plot_colors().background),
            )  # fmt: skip
            label.setFont(QFont("DejaVu Sans", 7))
            for item in (thin, thick, label):
                self.plot.addItem(item)
            self._rulers[name] = (thin, thick, label)
            thin.setData([0, 0], [y, y])
        self.window = pg.LinearRegionItem(
            values=(-24, 16), brush=pg.mkBrush(255, 170, 0, 40), pen=pg.mkPen("#e69f00")
        )
        self.window.setMovable(True)
        for line in self.window.lines:
            line.setMovable(False)  # the window keeps FP16's width; it only slides
        self.window.setZValue(-10)
        self.plot.addItem(self.window)
        self.window.sigRegionChangeFinished.connect(self._on_window_dragged)
        self.plot.getPlotItem().getViewBox().sigResized.connect(self._on_view_resized)
        self.empty_note = EmptyNote(self.plot, height_fraction=0.25)  # above the rulers

        self.param_button = QRadioButton("parameters")
        self.act_button = QRadioButton("activations")
        self.param_button.setToolTip("parameter gradients, unscaled")
        self.act_button.setToolTip("activation gradients, scaled, in the dtype backward used")
        self.param_button.setChecked(True)
        self.param_button.toggled.connect(self._on_source_toggled)
        self.scale_spin = QSpinBox()
        self.scale_spin.setRange(-40, 60)
        self.scale_spin.setPrefix("what-if 2^")
        self.scale_spin.setToolTip("A loss scale to try on the recorded counts")
        self.scale_spin.valueChanged.connect(self._on_scale_changed)
        self.counts_label = QLabel("zero: –  inf: –  NaN: –")
        self.what_if_label = QLabel("")
        self.what_if_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.header_widgets = (self.param_button, self.act_button, self.scale_spin)
        layout.addWidget(self.plot, 1)
        self.ranges_label = QLabel(
            "ranges: "
            + " ".join(
                f"<b style='color:{FORMAT_COLOURS[name]}'>{FORMAT_LABELS[name]}</b>"
                for name in self.FORMAT_ORDER
            )
            + " (top to bottom; dashed: subnormal)"
        )
        layout.addWidget(self.ranges_label)
        layout.addWidget(self.counts_label)
        layout.addWidget(self.what_if_label)
        self._model: RunModel | None = None
        self._shown_revision = -1
        self._scale_set_by_user = False
        self.last_what_if: WhatIf | None = None

    # ----- slots hand off -------------------------------------------------------------

    def _on_source_toggled(self, _checked: bool) -> None:
        self.refresh(self._model, force=True)

    def _on_scale_changed(self, value: int) -> None:
        self._scale_set_by_user = True
        self._show_what_if()
        self.what_if_changed.emit(value)

    def _on_window_dragged(self, _region: object) -> None:
        lo, _hi = self.window.getRegion()
        self.scale_spin.setValue(round(self._recorded_log2_scale() - 24 - lo))

    # ----- drawing --------------------------------------------------------------------

    @property
    def showing_activations(self) -> bool:
        return self.act_button.isChecked()

    def current_histogram(self) -> Histogram | None:
        stats = self._model.latest_stats if self._model is not None else None
        if stats is None:
            return None
        return stats.act_hist if self.showing_activations else stats.grad_hist

    def _recorded_log2_scale(self) -> float:
        """log2 of the scale the shown histogram was recorded at.

        Parameter gradients are recorded after GradScaler has unscaled them (scale 1);
        activation gradients are recorded as backward saw them, times the step's scale.
        """
        stats = self._model.latest_stats if self._model is not None else None
        if not self.showing_activations:
            return 0.0
        if stats is None or not (stats.scale > 0 and math.isfinite(stats.scale)):
            return 0.0
        return math.log2(stats.scale)

    def refresh(self, model: RunModel | None, force: bool = False) -> None:
        if model is self._model and not force and model is not None:
            if model.revision == self._shown_revision:
                return
        if model is not self._model:
            self._scale_set_by_user = False
        self._model = model
        self._shown_revision = model.revision if model is not None else -1
        # With no run, the formats' own ranges: the rulers are the reference, never blank.
        ranges = model.ranges if model is not None else format_ranges(None)
        hist = self.current_histogram()
        x_lo, x_hi, y_hi = -30.0, 20.0, 1.0
        if hist is None or not len(hist.counts):
            self.bars.setOpts(x=[], height=[])
            reason = no_histogram_reason(model, hist)
            self.empty_note.show(reason)
            stats = model.latest_stats if model is not None else None
            if hist is None or stats is None:
                self.counts_label.setText(reason)
            else:
                # Every value was zero, inf or NaN: the counts are the whole story.
                dtype = f" ({hist.dtype})" if hist.dtype else ""
                self.counts_label.setText(
                    f"step {stats.step}{dtype}: {hist.total:,} values · "
                    f"zero {hist.zero:,} · inf {hist.inf:,} · NaN {hist.nan:,}"
                )
        else:
            self.empty_note.show(None)
            # The view holds the bars and FP16's window at the scale the step ran with.
            stats = model.latest_stats if model is not None else None
            used = stats.scale if stats is not None else 1.0
            shift = self._recorded_log2_scale() - (
                math.log2(used) if used > 0 and math.isfinite(used) else 0.0
            )
            # FP16's whole range [2**-24, 65504] stays in view: it is the reference.
            x_lo = min(float(hist.lo), -24.0 + shift, -24.0) - 2
            x_hi = max(float(hist.lo + len(hist.counts)), 16.0 + shift, 16.0) + 2
            counts = np.asarray(hist.counts, dtype=np.float64)
            y_hi = max(float(np.log10(1.0 + counts.max())), 1.0)
            x = np.arange(hist.lo, hist.lo + len(counts), dtype=np.float64) + 0.5
            self.bars.setOpts(x=x, height=np.log10(1.0 + counts), width=0.9)
            stats = model.latest_stats if model is not None else None
            dtype = f" ({hist.dtype})" if hist.dtype else ""
            self.counts_label.setText(
                f"step {stats.step if stats else '?'}{dtype}: {hist.total:,} values · "
                f"zero {hist.zero:,} · inf {hist.inf:,} · NaN {hist.nan:,}"
            )
        # Fixed by the data, not auto-ranged: BF16's ruler would stretch the view to ±130.
        x_lo -= 0.12 * (x_hi - x_lo)  # room for the format names on the left
        # The rulers keep about a third of the height however tall the bars are (counts of
        # 10^5 would otherwise squeeze them into hairlines and hide their names).
        self._ruler_step = max(self.RULER_STEP, 0.18 * y_hi - 0.075)
        for name, (thin, thick, label) in self._rulers.items():
            y = -self._ruler_step * (self.FORMAT_ORDER.index(name) + 1)
            if name in ranges:
                sub, normal, top = ranges[name]
                thin.setData([sub, normal], [y, y])
                thick.setData([normal, top], [y, y])
            label.setPos(x_lo, y)
        self.plot.getPlotItem().setRange(
            xRange=(x_lo, x_hi),
            yRange=(-self._ruler_step * len(self.FORMAT_ORDER) - 0.3, y_hi * 1.08),
            padding=0,
        )
        self._on_view_resized()
        if not self._scale_set_by_user and model is not None and model.latest_stats is not None:
            scale = model.latest_stats.scale
            if scale > 0 and math.isfinite(scale):
                self.scale_spin.blockSignals(True)
                self.scale_spin.setValue(round(math.log2(scale)))
                self.scale_spin.blockSignals(False)
        self._show_what_if()

    def _on_view_resized(self, *_args: object) -> None:
        # In-plot format names only where a ruler row is tall enough for text; the
        # coloured line under the plot names them in any case.
        view = self.plot.getPlotItem().getViewBox()
        (_x_range, (y_lo, y_hi)) = view.viewRange()
        pixels_per_unit = view.height() / max(y_hi - y_lo, 1e-9)
        room = pixels_per_unit * self._ruler_step >= 13
        for _thin, _thick, label in self._rulers.values():
            label.setVisible(room)

    def _show_what_if(self) -> None:
        k = self.scale_spin.value()
        recorded = self._recorded_log2_scale()
        # FP16's window [2**-24, 2**16) in the units the histogram was recorded in.
        lo = -24 - (k - recorded)
        self.window.blockSignals(True)
        self.window.setRegion((lo, lo + 40))
        self.window.blockSignals(False)
        hist = self.current_histogram()
        if hist is None:
            self.what_if_label.setText(f"What-if: {no_histogram_reason(self._model, None)}.")
            self.last_what_if = None
            return
        result = what_if(hist, k, recorded)
        self.last_what_if = result
        self.what_if_label.setText(
            f"What-if at loss scale 2^{k} in FP16: "
            f"<b>{100 * result.share(result.underflow):.3g}%</b> underflow "
            f"({result.underflow:,}), {100 * result.share(result.subnormal):.3g}% subnormal, "
            f"<b>{100 * result.share(result.overflow):.3g}%</b> overflow ({result.overflow:,}); "
            f"already zero {result.zero:,}, non-finite {result.nonfinite:,}."
        )


class HeatmapPlot(QWidget):
    """Gradient exponent histograms over time: step x binade, colour = log10 share."""

    def __init__(self) -> None:
        super().__init__()
        self.plot = _plot_widget(PowerOfTwoAxis("left"))
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "|g|")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.image.setLevels((-8.0, 0.0))  # fixed: a share of 1e-8 .. 1, never auto
        self.plot.addItem(self.image)
        self.colour_bar = pg.ColorBarItem(
            values=(-8.0, 0.0), colorMap=pg.colormap.get("viridis"), interactive=False,
            width=12, label="log10 share",
        )  # fmt: skip
        self.colour_bar.setImageItem(self.image, insert_in=self.plot.getPlotItem())
        for y, colour in ((-24, "#D55E00"), (math.log2(65504.0), "#D55E00")):
            line = pg.InfiniteLine(
                pos=y, angle=0, pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine)
            )
            self.plot.addItem(line)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.note = QLabel("dashed: FP16 smallest subnormal and largest value")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)
        self._key: tuple[int, int, bool] | None = None

    def refresh(self, model: RunModel | None, activations: bool) -> None:
        key = (id(model), model.revision if model else -1, activations)
        if key == self._key:
            return
        self._key = key
        heat = None if model is None else (model.act_heat if activations else model.grad_heat)
        if heat is None or not len(heat):
            self.image.clear()
            self.empty_note.show(no_histogram_reason(model, None))
            self.range.show(0.0, x_extent([(0, model, "", True)] if model else []), -28, 18)
            return
        img = heat.image()  # (columns, bins): transpose so rows are binades
        self.image.setImage(img.T, autoLevels=False, levels=(-8.0, 0.0))
        first, last = heat.step_span
        width = max(last - first, 1.0)
        columns = img.shape[0]
        per_column = width / max(columns - 1, 1) if columns > 1 else 1.0
        self.image.setRect(QRectF(first, HEAT_LO, width + per_column, HEAT_BINS))
        occupied = np.nonzero(img.max(axis=0) > -8.0)[0]
        x_hi = max(x_extent([(0, model, "", True)]), last + per_column)
        if len(occupied):
            lo = HEAT_LO + int(occupied[0]) - 4
            hi = HEAT_LO + int(occupied[-1]) + 5
            lo, hi = min(lo, -28), max(hi, 18)
            self.range.show(0.0, x_hi, max(lo, HEAT_LO), min(hi, HEAT_HI))
            self.empty_note.show(None)
        else:
            # Statistics steps whose gradients were all zero, inf or NaN: no binade to colour.
            self.range.show(0.0, x_hi, -28, 18)
            stats = model.latest_stats if model is not None else None
            hist = None if stats is None else stats.act_hist if activations else stats.grad_hist
            self.empty_note.show(
                no_histogram_reason(model, hist)
                if hist is not None and not len(hist.counts)
                else "no finite non-zero gradient in any statistics step"
            )


class LayerTable(QWidget):
    """Each layer's gradients on the latest statistics step; the first non-finite marked."""

    COLUMNS = ("layer", "‖g‖", "max |g|", "headroom", "< 2^-24", "inf/NaN")
    TOOLTIPS = (
        "module name",
        "L2 norm of the layer's unscaled gradient",
        "largest scaled gradient magnitude",
        "log2(65504 / max |g|): how many doublings of the scale before FP16 overflows",
        "share of the layer's scaled gradients below FP16's smallest subnormal",
        "the layer's gradient held inf or NaN",
    )

    def __init__(self) -> None:
        super().__init__()
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(list(self.COLUMNS))
        for column, tip in enumerate(self.TOOLTIPS):
            header_item = self.table.horizontalHeaderItem(column)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.first_label = QLabel("")
        self.first_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.first_label)
        layout.addWidget(self.table, 1)
        self._key: tuple[int, int] | None = None

    def refresh(self, model: RunModel | None) -> None:
        key = (id(model), model.revision if model else -1)
        if key == self._key:
            return
        self._key = key
        stats = model.latest_stats if model is not None else None
        layers = stats.layers if stats is not None else []
        event = model.first_nonfinite_event if model is not None else None
        if event is not None:
            self.first_label.setText(
                f"<span style='color:#c00000'><b>First non-finite layer: {event.first_nonfinite}"
                f"</b> (step {event.step} skipped at scale {_scale_text(event.scale)}; "
                "first in backward order)"
                + (
                    "; the overflow began in the forward pass at "
                    f"<b>{event.first_nonfinite_forward}</b>"
                    if event.first_nonfinite_forward
                    else ""
                )
                + "</span>"
            )
        elif model is not None and model.skipped_count:
            self.first_label.setText(f"{model.skipped_count} skipped steps; no layer named.")
        else:
            self.first_label.setText("No non-finite gradients so far.")
        marked = stats.first_nonfinite if stats is not None else None
        if marked is None and event is not None:
            marked = event.first_nonfinite
        self.table.setRowCount(len(layers))
        for row, layer in enumerate(layers):
            name = layer.name
            headroom = layer.headroom_log2
            norm = layer.grad_norm
            cells = (
                name + ("  ◀ first non-finite" if name == marked else ""),
                # + 0.0: a recorded -0.0 (all-zero gradient) reads 0, magnitudes have no sign.
                "" if norm is None else f"{norm + 0.0:.3g}",
                f"{layer.amax + 0.0:.3g}",
                "–" if headroom is None else f"2^{headroom:.1f}",
                f"{100 * layer.underflow_share:.3g}%",
                "yes" if layer.nonfinite else "",
            )
            for column, text in enumerate(cells):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(text)
                bad = bool(layer.get("nonfinite")) or name == marked
                if bad:
                    item.setBackground(QColor("#ffd6d6"))
                    item.setForeground(QColor("#000000"))
                else:  # the palette's own colours (light or dark theme)
                    item.setData(Qt.ItemDataRole.BackgroundRole, None)
                    item.setData(Qt.ItemDataRole.ForegroundRole, None)


def _scale_text(scale: float) -> str:
    if scale > 0 and math.isfinite(scale) and math.log2(scale).is_integer():
        return f"2^{int(math.log2(scale))}"
    return f"{scale:g}"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class MemoryReadout(QWidget):
    """Memory by dtype, throughput and (pure-fp16) the share of updates lost to rounding."""

    PARTS = (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer state"),
             ("activations", "saved activations"))  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["what", "dtype", "bytes"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.throughput = QLabel("")
        self.lost = QLabel("")
        self.lost.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.throughput)
        layout.addWidget(self.lost)
        layout.addWidget(self.table, 1)
        self._key: tuple[int, int] | None = None

    def refresh(self, model: RunModel | None) -> None:
        key = (id(model), model.revision if model else -1)
        if key == self._key:
            return
        self._key = key
        rate = model.steps_per_second() if model is not None else None
        done, planned = model.progress() if model is not None else (0, None)
        self.throughput.setText(
            f"throughput: {rate:.1f} steps/s · step {done}" + (f" of {planned}" if planned else "")
            if rate is not None
            else "throughput: –"
        )
        stats = model.latest_stats if model is not None else None
        lost = stats.lost_updates if stats is not None else None
        if lost:
            share = lost.share
            if lost.kind == "actual":
                text = f"<b>{100 * share:.3g}%</b> of weight updates lost to FP16 rounding."
            else:
                text = f"FP16 weights would lose {100 * share:.3g}% of these updates to rounding."
            self.lost.setText(text)
        else:
            self.lost.setText("lost updates: –")
        rows: list[tuple[str, str, str]] = []
        memory = stats.memory if stats is not None else None
        if memory is not None:
            for key_name, title in self.PARTS:
                by_dtype: dict[str, int] = getattr(memory, key_name)
                for dtype, nbytes in sorted(by_dtype.items()):
                    rows.append((title, dtype, _human_bytes(float(nbytes))))
            if memory.peak_device is not None:
                rows.append(("device peak", "", _human_bytes(float(memory.peak_device))))
        self.table.setRowCount(len(rows))
        for row, cells in enumerate(rows):
            for column, text in enumerate(cells):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(text)
