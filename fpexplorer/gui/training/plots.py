"""The training panel's plots. Each view creates its items once and redraws from RunModels.

Views never keep numbers of their own: `refresh(...)` reads the models and pushes the
arrays into existing items with setData / setOpts / setImage. The panel calls refresh from
one QTimer (at most ~30 times a second) and only when a model's revision moved.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPaintEvent, QTextOption
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDoubleSpinBox,
    QFrame,
    QGraphicsItem,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QRadioButton,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.gui.theme import plot_colors, role_hex
from fpexplorer.gui.training.run_model import (
    HEAT_BINS,
    HEAT_HI,
    HEAT_LO,
    HeatmapBuffer,
    RunModel,
    WhatIf,
    what_if,
)
from fpexplorer.gui.training.sizing import (
    READABLE_VIEW_HEIGHT,
    ReadablePlotWidget,
    SpacedTicksAxis,
    fit_minimum_height,
    is_layout_event,
    table_minimum_height,
)
from fpexplorer.gui.training.view_model import (
    DEFAULT_RULER_FORMATS,
    MAX_TOOLTIP,
    FloatArray,
    HoverLine,
    OverlayRun,
    RunMarker,
    counts_text,
    data_range,
    elide,
    elide_name,
    elide_words,
    first_nonfinite_view,
    format_range,
    format_ranges_log2,
    has_dynamic_scaling,
    heat_layout,
    heatmap_hover_text,
    heatmap_limits,
    histogram_hover_text,
    hover_plain,
    hover_text,
    layer_table_view,
    lost_updates_text,
    name_word_counts,
    no_histogram_reason,
    no_steps_reason,
    ruler_formats,
    run_colour,
    run_markers,
    scale_text,
    skipped_text,
    smoothed,
    step_axis_label,
    throughput_text,
    what_if_text,
    x_extent,
)
from fpexplorer.training.records import Histogram
from fpexplorer.training.scaler_rules import steps_toward_growth
from fpexplorer.training.summary import bytes_text

__all__ = ["run_colour"]

FORMAT_COLOURS: dict[str, str] = {
    "float16": "#D55E00",
    "bfloat16": "#0072B2",
    "float8_e4m3fn": "#009E73",
    "float8_e5m2": "#CC79A7",
}
_MORE_FORMAT_COLOURS = ("#56B4E9", "#E69F00", "#999999", "#F0E442", "#882255", "#44AA99")


def format_colour(name: str, index: int) -> str:
    """A format's ruler colour: fixed for the usual four, then from a colour-blind-safe list."""
    return FORMAT_COLOURS.get(name, _MORE_FORMAT_COLOURS[index % len(_MORE_FORMAT_COLOURS)])


class ElidedLabel(QLabel):
    """A one-line label that shows as much of its text as fits, ending in '…'."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(0)

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QPainter(self)
        metrics = self.fontMetrics()
        rect = self.contentsRect()
        text = metrics.elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(self.alignment()), text)
        painter.end()

    def shown_text(self) -> str:
        """The text as painted now (elided to the label's width)."""
        width = self.contentsRect().width()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, width)


def file_text_label(text: str = "", word_wrap: bool = True) -> QLabel:
    """A label for text that comes from a run file: it never asks for more width.

    Its horizontal size hint is ignored by the layouts, so a 309-digit number or a long name
    in a run file cannot widen the window; the texts are elided by the view model as well.
    """
    label = QLabel(text)
    label.setWordWrap(word_wrap)
    policy = label.sizePolicy()
    policy.setHorizontalPolicy(QSizePolicy.Policy.Ignored)
    label.setSizePolicy(policy)
    label.setMinimumWidth(0)
    return label


# FP16's window in binades, from the engine: values in [2**FP16_LOW, 2**FP16_HIGH) are held
# (2**-24, its smallest subnormal, up to the binade of 65504, its largest value).
_FP16 = format_range("float16")
FP16_LOW = math.floor(_FP16.log2_min_positive)  # -24
FP16_HIGH = math.floor(_FP16.log2_max) + 1  # 16


def alarm_colour() -> str:
    """The text colour of an alarm (a non-finite layer, an error): the theme's "error" role,
    made readable (>= 4.5:1) on the light and the dark palette."""
    return role_hex("error")


class PowerOfTwoAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """An axis over log2(value) whose ticks read 2^k."""

    def tickStrings(self, values: Sequence[float], scale: float, spacing: float) -> list[str]:
        return [f"2^{round(v):d}" if abs(v - round(v)) < 1e-6 else "" for v in values]


class CountAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
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
        self.title = title  # also what an export of the content says it shows
        self.explanation = explanation
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 3, 6, 3)
        layout.setSpacing(2)
        self.title_label = QLabel(f"<b>{title}</b>")
        # One line, elided: on a small screen the plots keep the height (the whole text is
        # in the tooltip).
        self.explanation_label = ElidedLabel(explanation)
        self.explanation_label.setToolTip(f"<p>{explanation} {details}</p>")
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

    def event(self, event: QEvent) -> bool:
        handled = super().event(event)
        # The splitter that holds a card reads its minimum height, which counts a wrapped
        # text as one line: the card asks for the height its texts need at its width.
        if is_layout_event(event):
            fit_minimum_height(self)
        return bool(handled)


def add_colour_bar(plot: pg.PlotWidget, image: pg.ImageItem, bar: pg.ColorBarItem) -> None:
    """`bar` beside `plot`'s image, with room above the plot for the label of its top tick
    (the bar reaches the plot's top edge, which cut its "1.0" or "0" in half)."""
    bar.setImageItem(image, insert_in=plot.getPlotItem())
    layout = plot.getPlotItem().layout
    left, _top, right, bottom = layout.getContentsMargins()
    layout.setContentsMargins(left, QFontMetrics(QFont()).height() / 2, right, bottom)


def plot_widget(
    left_axis: pg.AxisItem | None = None,
    bottom_axis: pg.AxisItem | None = None,
    view_height: int = READABLE_VIEW_HEIGHT,
) -> ReadablePlotWidget:
    """A plot in the panel's style: theme colours, grid, no menu, cached axes, and a
    minimum height that keeps `view_height` pixels of data area under its axes."""
    axis_items = {"left": left_axis} if left_axis is not None else {}
    # Steps, binades, dB: labels that must not run into each other on a narrow plot.
    axis_items["bottom"] = bottom_axis if bottom_axis is not None else SpacedTicksAxis("bottom")
    colours = plot_colors()  # the app's light or dark palette, read once: items are made once
    widget = ReadablePlotWidget(
        view_height, axisItems=axis_items or None, background=colours.background
    )
    widget.showGrid(x=True, y=True, alpha=0.2)
    item = widget.getPlotItem()
    item.setMenuEnabled(False)
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setPen(colours.foreground)
        axis.setTextPen(colours.foreground)
        # No "(x1e+27)" or "(x0.001)" multiplier folded into the axis title: tick labels
        # carry the values themselves, so the title never depends on the data shown.
        axis.enableAutoSIPrefix(False)
    cache_axes(item)
    return widget


_plot_widget = plot_widget


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
    The range comes from the data alone: legends sit outside the view and never change it.
    """

    def __init__(self, plot: pg.PlotWidget) -> None:
        self.view = plot.getPlotItem().getViewBox()
        self.view.disableAutoRange()
        self.x: tuple[float, float] | None = None
        self.y: tuple[float, float] | None = None

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

    def show(self, x_lo: float | None, x_hi: float | None, y_lo: float, y_hi: float) -> None:
        """Show [x_lo, x_hi] x [y_lo, y_hi]; x None: the x range follows a linked plot."""
        x = None if x_lo is None or x_hi is None else self._settle(self.x, x_lo, x_hi, 0.0)
        y = self._settle(self.y, y_lo, y_hi, 0.08)
        if x is not None:
            self.x = x
        if y is not None:
            self.y = y
        if x is not None or y is not None:
            self.view.setRange(xRange=x, yRange=y, padding=0)

    def reset(self) -> None:
        self.x = self.y = None


class LinkedSteps:
    """Plots over steps share one x range: zoom or pan one, the others show the same steps.

    The range is copied as it is. (pyqtgraph's own `setXLink` lines linked views up by their
    position on screen, meant for plots stacked in a column; for plots side by side in
    different columns it showed other steps than the loss plot.)
    """

    def __init__(self, plots: Sequence[pg.PlotWidget]) -> None:
        self.views = [plot.getPlotItem().getViewBox() for plot in plots]
        self._copying = False
        for view in self.views:
            view.sigXRangeChanged.connect(self._on_view_x_range_changed)

    def _on_view_x_range_changed(self, source: object, x_range: Sequence[float]) -> None:
        if self._copying:
            return
        self._copying = True
        try:
            for view in self.views:
                if view is not source:
                    view.setXRange(float(x_range[0]), float(x_range[1]), padding=0)
        finally:
            self._copying = False


class HoverReadout:
    """The values under the cursor, in the view's top-left corner while the mouse is over it."""

    def __init__(
        self, plot: pg.PlotWidget, read: Callable[[float, float], list[HoverLine]]
    ) -> None:
        self.plot = plot
        self.view = plot.getPlotItem().getViewBox()
        self.read = read  # (x, y) in data units -> lines (from the view model)
        self.lines: list[HoverLine] = []
        background = QColor(plot_colors().background)
        background.setAlpha(225)
        self.item = pg.TextItem(
            "", color=plot_colors().foreground, anchor=(0.0, 0.0), fill=pg.mkBrush(background)
        )
        self.item.setParentItem(self.view)
        self.item.setVisible(False)
        self.item.setZValue(1000)
        plot.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)

    @property
    def text(self) -> str | None:
        """What the read-out says now (plain text), or None while it is hidden."""
        return hover_plain(self.lines) if self.item.isVisible() else None

    def show_at(self, x: float | None, y: float = 0.0) -> None:
        self.lines = self.read(x, y) if x is not None else []
        if not self.lines:
            self.item.setVisible(False)
            return
        rows = [
            (f"<span style='color:{line.colour}'>■</span> " if line.colour else "")
            + html.escape(line.text)
            for line in self.lines
        ]
        self.item.setHtml(f"<span style='font-size:8pt'>{'<br>'.join(rows)}</span>")
        self.item.setPos(self.view.boundingRect().topLeft() + QPointF(4, 2))
        self.item.setVisible(True)

    def _on_scene_mouse_moved(self, position: QPointF) -> None:
        if not self.view.sceneBoundingRect().contains(position):
            self.show_at(None)
            return
        point = self.view.mapSceneToView(position)
        self.show_at(float(point.x()), float(point.y()))


EMPTY_NOTE_MARGIN = 4  # pixels between an empty plot's note and the plot's edges


class EmptyNote:
    """A line of text in the middle of a plot that says why the plot is empty.

    An empty frame with bare axes looks like a broken panel; the note tells what is
    missing (no steps yet, a failed run, only non-finite values). Hidden when there is data.
    """

    def __init__(self, plot: pg.PlotWidget, height_fraction: float = 0.62) -> None:
        # Below the middle by default: legends sit in the top corner.
        self.height_fraction = height_fraction
        self.plot_item = plot.getPlotItem()
        self.view = self.plot_item.getViewBox()
        background = QColor(plot_colors().background)
        background.setAlpha(220)
        self.item = pg.TextItem(
            "", color=plot_colors().foreground, anchor=(0.5, 0.5), fill=pg.mkBrush(background)
        )
        # In the plot item's (pixel) coordinates, placed, not plotted, over the view box and
        # not clipped by it: a note taller than a small view (the heatmap's at 1024x640)
        # lost its last lines, the counts ("no finite non-zero gradient:" and no more).
        self.item.setParentItem(self.plot_item)
        self.item.setZValue(1000)
        centred = QTextOption(Qt.AlignmentFlag.AlignHCenter)
        centred.setWrapMode(QTextOption.WrapMode.WordWrap)
        self.item.textItem.document().setDefaultTextOption(centred)
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
        rect = self.view.geometry()  # the view box, in the plot item's coordinates
        # Wrapped to the view's width, lines centred: in a narrow plot (the heatmap beside
        # the histogram at 1024 px) one line was cut at both ends.
        text = self.item.textItem
        for area in (rect, self.plot_item.boundingRect()):
            # Over the axes too when the view is too small to hold the note whole.
            rect = area
            text.setTextWidth(-1)
            room = rect.width() - 2 * EMPTY_NOTE_MARGIN
            if text.boundingRect().width() > room > 0:
                self.item.setTextWidth(room)
            else:
                self.item.updateTextPos()
            if text.boundingRect().height() <= rect.height() - 2 * EMPTY_NOTE_MARGIN:
                break
        # Inside the area however short: centred at the height asked for where it fits.
        half = text.boundingRect().height() / 2
        y = rect.top() + self.height_fraction * rect.height()
        y = max(min(y, rect.bottom() - half), rect.top() + half)
        self.item.setPos(rect.center().x(), y)


class _ResizeFilter(QObject):
    """Calls back after its watched widget was resized (an event filter that eats nothing)."""

    def __init__(self, callback: Callable[[], None]) -> None:
        super().__init__()
        self._callback = callback

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self._callback()
        return False


# The most of a plot's height its legend of overlaid runs may take.
LEGEND_HEIGHT_SHARE = 0.3
# Below this many pixels per name, a legend is hidden rather than shown unreadable.
LEGEND_MIN_TEXT_WIDTH = 90
# Pixels a legend takes beyond its rows of names (its samples and margins).
LEGEND_MARGIN = 8


class RunCurves:
    """One curve per overlaid run; curves are created when a run appears and kept.

    The legend sits under the plot, outside the data (a row of the plot item's own layout,
    so exports carry it too): it never covers a curve and never changes a range. Only runs
    with steps are listed.
    """

    def __init__(self, plot: pg.PlotWidget, legend: bool = True) -> None:
        self.plot = plot
        self.curves: dict[int, pg.PlotDataItem] = {}
        self.legend: pg.LegendItem | None = None
        if legend:
            item = plot.getPlotItem()
            self.legend = pg.LegendItem(colCount=1)
            self.legend.setParentItem(None)
            self.legend.setLabelTextColor(plot_colors().foreground)
            self.legend.setLabelTextSize("8pt")
            # Compact: every pixel of height it takes is taken from the data.
            self.legend.layout.setVerticalSpacing(-4)
            self.legend.layout.setContentsMargins(2, 0, 2, 0)
            item.layout.addItem(self.legend, 4, 1)
            # The legend's columns and elided names depend on the plot's size: redo them
            # when it changes (a window resized, a splitter dragged).
            self._resize_filter = _ResizeFilter(lambda: self.show_legend(self._legend_wanted))
            plot.installEventFilter(self._resize_filter)
        self._legend_shown = legend
        self._legend_wanted = legend  # as last asked for; shown only where names fit
        # Curves made since the last show_legend(): added to the legend there, together.
        # pyqtgraph lays the whole legend out again for each item added: one at a time,
        # 30 runs added to 300 took 1.2 s of one redraw (hundreds of files opened at once).
        self._legend_pending: list[pg.PlotDataItem] = []
        # What each curve was last given (see changed()): a redraw re-sets only curves
        # whose run moved. With 200 runs open, re-setting all of them on every tick of a
        # live job took 75 ms of each 105 ms redraw.
        self._signatures: dict[int, object] = {}

    def curve_for(self, run: OverlayRun) -> pg.PlotDataItem:
        curve = self.curves.get(run.key)
        if curve is None:
            curve = pg.PlotDataItem(pen=pg.mkPen(run.colour, width=1.5), name=run.name)
            curve.opts["full_name"] = run.full_name or run.name  # the legend's tooltip
            curve.setDownsampling(auto=True, method="peak")
            curve.setClipToView(True)
            self.plot.addItem(curve)
            self.curves[run.key] = curve
            if self.legend is not None:
                self._legend_pending.append(curve)
        elif curve.name() != run.name or curve.opts.get("full_name") != (run.full_name or run.name):
            # A live run is named from the form until its header arrives with the job's
            # own settings (e.g. the task's learning rate): the legend follows.
            curve.opts["name"] = run.name
            curve.opts["full_name"] = run.full_name or run.name
            if self.legend is not None:
                label = self.legend.getLabel(curve)
                if label is not None:
                    label.setText(run.name)
        return curve

    def show_legend(self, shown: bool) -> None:
        """Legends name runs apart: one run is named in the run list and gets the height."""
        if self.legend is None:
            return
        self._add_pending_to_legend()
        self._legend_wanted = shown
        # As many columns as the longest name allows in the plot's width (names whole), or
        # more, with names elided a word at a time (numbers whole, the task first, their
        # distinguishing end kept; the whole name in the label's tooltip), when whole
        # names would need more rows than LEGEND_HEIGHT_SHARE of the plot: with many runs on
        # a small screen the legend must not squash the data into a strip.
        metrics = QFontMetrics(QFont(self.plot.font().family(), 8))
        names = [curve.name() or "" for curve in self.curves.values()]
        entry = max((metrics.horizontalAdvance(name) for name in names), default=0) + 48
        width = int(self.plot.width() - 60)
        fit = max(1, width // max(entry, 1))
        row_height = max(8, metrics.height() - 2)
        rows = int(self.plot.height() * LEGEND_HEIGHT_SHARE) // row_height
        plot = self.plot
        spare = plot.spare_height() if isinstance(plot, ReadablePlotWidget) else plot.height()
        # The legend only takes height above the plot's readable minimum: a smaller plot
        # keeps its data area and the run list names the colours.
        rows = min(rows, max(0, spare - LEGEND_MARGIN) // row_height)
        if rows < 1:
            shown = False
        rows = max(rows, 1)
        columns = max(1, min(len(names), max(fit, math.ceil(len(names) / rows))))
        if self.legend.columnCount != columns:
            self.legend.setColumnCount(columns)
        text_width = width // columns - 48
        if text_width < LEGEND_MIN_TEXT_WIDTH:
            # Names cut to a few letters say nothing: the run list beside the plots names
            # each run with its colour swatch, and the data keeps the height.
            shown = False
        room = max(text_width, LEGEND_MIN_TEXT_WIDTH)
        shared = name_word_counts(names)
        for sample, label in self.legend.items:
            full = getattr(sample.item, "name", lambda: None)() or label.text
            shown_text = elide_words(
                full, lambda text: metrics.horizontalAdvance(text) <= room, shared
            )
            if label.text != shown_text:
                label.setText(shown_text)
            whole = getattr(sample.item, "opts", {}).get("full_name") or full
            if label.toolTip() != whole:
                label.setToolTip(whole)
        if self._legend_shown == shown:
            return
        self._legend_shown = shown
        layout = self.plot.getPlotItem().layout
        if shown:
            layout.addItem(self.legend, 4, 1)
        else:
            layout.removeItem(self.legend)
        self.legend.setVisible(shown)

    def changed(self, key: int, signature: object) -> bool:
        """Whether the curve of run `key` must be given its data again: True the first
        time and whenever `signature` (e.g. the model's revision and the smoothing)
        differs from the last call's."""
        if key in self._signatures and self._signatures[key] == signature:
            return False
        self._signatures[key] = signature
        return True

    def _add_pending_to_legend(self) -> None:
        """Add the curves made since the last call to the legend, with one layout."""
        legend = self.legend
        if legend is None or not self._legend_pending:
            return
        pending, self._legend_pending = self._legend_pending, []
        legend.updateSize = lambda: None  # laid out once, below
        try:
            for curve in pending:
                legend.addItem(curve, curve.name() or "")
        finally:
            del legend.updateSize  # the class's own again
        legend.updateSize()

    @property
    def legend_names(self) -> list[str]:
        if self.legend is None:
            return []
        return [label.text for _sample, label in self.legend.items]

    def drop_missing(self, keys: set[int]) -> None:
        for key in list(self.curves):
            if key not in keys:
                curve = self.curves.pop(key)
                self._signatures.pop(key, None)
                if curve in self._legend_pending:
                    self._legend_pending.remove(curve)
                elif self.legend is not None:
                    self.legend.removeItem(curve)
                self.plot.removeItem(curve)


def _markers_to_label(markers: Sequence[RunMarker]) -> set[int]:
    """Indices of the markers whose lines carry their text. Each run's own markers are all
    labelled when one run is shown; with several runs, only the earliest marker of each kind
    (the first NaN loss, the first non-finite gradients) is, so labels of runs that went
    wrong at nearby steps do not pile on each other (each line keeps its run's colour)."""
    if len({marker.key for marker in markers}) <= 1:
        return set(range(len(markers)))
    earliest: dict[str, int] = {}
    for index, marker in enumerate(markers):
        kind = "loss" if marker.text.startswith("first NaN loss") else "gradients"
        if kind not in earliest or marker.step < markers[earliest[kind]].step:
            earliest[kind] = index
    return set(earliest.values())


class RunMarkers:
    """Vertical dashed lines at each run's first NaN loss and first non-finite gradients."""

    TOP = 0.85  # the first label's place along the line (0: the view's bottom, 1: its top)
    STACK_STEP = 0.16  # the next labels' distance below it, where the view is tall

    def __init__(self, plot: pg.PlotWidget) -> None:
        self.plot = plot
        self.lines: list[pg.InfiniteLine] = []
        self.labelled: list[pg.InfiniteLine] = []  # in stacking order
        self.shown: list[RunMarker] = []
        self.view = plot.getPlotItem().getViewBox()
        self.view.sigResized.connect(self._stack_labels)
        self.view.sigResized.connect(self._fit_labels)
        self.view.sigXRangeChanged.connect(self._fit_labels)

    def show(self, markers: list[RunMarker]) -> None:
        if markers == self.shown:
            return
        for line in self.lines:
            self.plot.removeItem(line)
        self.lines = []
        self.labelled = []
        labelled = _markers_to_label(markers)
        for index, marker in enumerate(markers):
            line = pg.InfiniteLine(
                pos=marker.step,
                angle=90,
                pen=pg.mkPen(marker.colour, width=1, style=Qt.PenStyle.DashLine),
                label=marker.text if index in labelled else None,
                labelOpts={
                    "position": self.TOP,
                    "color": plot_colors().foreground,
                    "fill": pg.mkBrush(QColor(plot_colors().background)),
                    "anchors": [(0, 0.5), (0, 0.5)],  # moved inside by _fit_labels
                },
            )
            line.setZValue(-5)
            self.plot.addItem(line)
            self.lines.append(line)
            if index in labelled:
                self.labelled.append(line)
        self.shown = list(markers)
        self._stack_labels()
        self._fit_labels()

    def _fit_labels(self, *_args: object) -> None:
        """Each label right of its line where it fits, else moved left just enough to end
        at the view's right edge (over its line: the label is filled), so a marker near
        the end ("first inf/NaN: rank 3, layer 5.wo") is not cut off by the view."""
        view = self.view.sceneBoundingRect()
        for line in self.labelled:
            width = line.label.boundingRect().width()
            x = self.view.mapViewToScene(QPointF(float(line.value()), 0.0)).x()
            overhang = x + width - view.right()
            shift = min(max(overhang / width, 0.0), 1.0) if width > 0 else 0.0
            if line.label.anchors[0][0] != shift:
                line.label.anchors = [(shift, 0.5), (shift, 0.5)]
                line.label.updatePosition()

    def _stack_labels(self, *_args: object) -> None:
        """Labels stacked by their order among the labelled lines, a text line apart
        however short the plot (a fixed share of its height laid them over each other at
        1024x640), so two never share a height."""
        if not self.labelled:
            return
        height = max(float(self.view.height()), 1.0)
        text = max(line.label.boundingRect().height() for line in self.labelled)
        step = max(self.STACK_STEP, text / height)
        places = max(1, int(self.TOP / step) + 1)  # that fit between TOP and the bottom
        for order, line in enumerate(self.labelled):
            line.label.setPosition(self.TOP - step * (order % places))


def _label_step_axis(plot: pg.PlotWidget, overlay: Sequence[OverlayRun]) -> None:
    label = step_axis_label(overlay)
    axis = plot.getPlotItem().getAxis("bottom")
    if axis.labelText != label:  # setLabel lays the axis out again: only on a change
        plot.setLabel("bottom", label)


class LossPlot(QWidget):
    """Loss per step, one curve per run, with a log-axis switch and optional smoothing."""

    def __init__(self) -> None:
        super().__init__()
        # Its own left axis: on a log scale its labels are spaced to fit the plot's height.
        self.plot = _plot_widget(SpacedTicksAxis("left"))
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "loss")
        self.curves = RunCurves(self.plot)
        self.markers = RunMarkers(self.plot)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.log_box = QCheckBox("log axis")
        self.log_box.toggled.connect(self._on_log_toggled)
        # The weight itself, to the hundredth (was an integer behind "0.": 5 read 0.5).
        self.smooth_spin = QDoubleSpinBox()
        self.smooth_spin.setDecimals(2)
        self.smooth_spin.setRange(0.0, 0.99)
        self.smooth_spin.setSingleStep(0.1)
        self.smooth_spin.setPrefix("smooth ")
        self.smooth_spin.setSpecialValueText("no smoothing")
        self.smooth_spin.setToolTip(
            "Exponential moving average of the loss (weight 0.NN); inf/NaN points are left out"
        )
        self.smooth_spin.valueChanged.connect(self._on_smooth_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.header_widgets = (self.smooth_spin, self.log_box)
        layout.addWidget(self.plot, 1)
        self._overlay: Sequence[OverlayRun] = ()
        self._shown: Sequence[RunModel] = ()
        self._smoothed_cache: dict[int, tuple[tuple[int, float, int], FloatArray]] = {}

    @property
    def smoothing(self) -> float:
        return round(self.smooth_spin.value(), 2)

    def _on_log_toggled(self, checked: bool) -> None:
        self.plot.getPlotItem().setLogMode(x=False, y=checked)
        self.range.reset()
        self._show_range()

    def _on_smooth_changed(self, _value: float) -> None:
        self.refresh(self._overlay, self._shown)

    def _hover_text(self, step: float, _y: float) -> list[HoverLine]:
        lines = hover_text(self._overlay, step, "loss")
        if lines and self.smoothing:
            # The read-out gives the recorded losses, not the smoothed curve: it says so.
            lines[0] = HoverLine(f"{lines[0].text} (recorded, not smoothed)")
        return lines

    def refresh(self, overlay: Sequence[OverlayRun], shown: Sequence[RunModel]) -> None:
        self._overlay, self._shown = overlay, shown
        weight = self.smoothing
        for run in overlay:
            curve = self.curves.curve_for(run)
            if not self.curves.changed(run.key, (run.model.revision, weight)):
                continue
            steps = run.model.scalars.steps
            loss = self._smoothed_loss(run, weight)
            # Non-finite losses (an overflowed forward) would break the line; they are
            # left out of the curve and marked where they start.
            finite = np.isfinite(loss)
            curve.setData(steps[finite], loss[finite])
        self.curves.drop_missing({run.key for run in overlay})
        self.curves.show_legend(len(overlay) > 1)
        self.markers.show(run_markers(overlay))
        _label_step_axis(self.plot, overlay)
        self._show_range()

    def _smoothed_loss(self, run: OverlayRun, weight: float) -> FloatArray:
        """The run's loss, smoothed once per change of the run or the weight (the average
        is a Python loop: not paid again on every frame)."""
        raw = run.model.scalars.column("loss")
        if not weight:
            return raw
        key = (run.model.revision, weight, len(raw))
        cached = self._smoothed_cache.get(run.key)
        if cached is None or cached[0] != key:
            cached = (key, smoothed(raw, weight))
            self._smoothed_cache[run.key] = cached
        return cached[1]

    def _show_range(self) -> None:
        log = self.log_box.isChecked()
        found = data_range([run.model.scalars.column("loss") for run in self._overlay], log=log)
        extent = x_extent([run.model for run in self._overlay] or list(self._shown))
        if found is None:
            self.range.show(0.0, extent, math.inf, math.inf)
        else:
            self.range.show(0.0, extent, *found)
        self.empty_note.show(None if found is not None else self._empty_reason(log))

    def _empty_reason(self, log: bool) -> str:
        models = list(self._shown)
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
        # The what-if (scaler_whatif): the scale another policy would have had, dashed.
        self.prediction = pg.PlotDataItem(
            pen=pg.mkPen(plot_colors().foreground, width=1.5, style=Qt.PenStyle.DashLine)
        )
        self.prediction.setDownsampling(auto=True, method="peak")
        self.prediction.setClipToView(True)
        self.plot.addItem(self.prediction)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.growth_bar = QProgressBar()
        self.growth_bar.setTextVisible(True)
        self.growth_bar.setMaximumHeight(18)
        self.growth_bar.setMinimumWidth(60)
        # Wrapped, not cut: with a hysteresis policy the line ("skipped: 25 · hysteresis 2 ·
        # growth tracker:") is longer than half the card at 1024 px, and lost its caption.
        self.growth_label = file_text_label("growth tracker: –", word_wrap=True)
        self.growth_label.setMinimumWidth(60)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.plot, 1)
        row = QHBoxLayout()
        row.addWidget(self.growth_label, 1)
        row.addWidget(self.growth_bar, 1)
        layout.addLayout(row)
        self._overlay: Sequence[OverlayRun] = ()
        self._prediction_log: np.ndarray = np.zeros(0)
        self._prediction_steps: np.ndarray | None = None

    def _hover_text(self, step: float, _y: float) -> list[HoverLine]:
        return hover_text(self._overlay, step, "scale", show=scale_text)

    def show_prediction(self, steps: np.ndarray, scales: np.ndarray) -> None:
        """Draw the what-if's predicted scale (log2, as the runs' curves); empty: none."""
        if steps is self._prediction_steps:
            return  # the same curve (the what-if copies it once per change): nothing to do
        self._prediction_steps = steps
        with np.errstate(divide="ignore", invalid="ignore"):
            log_scale = np.log2(scales)
        finite = np.isfinite(log_scale)
        self._prediction_log = log_scale[finite]
        self.prediction.setData(steps[finite], self._prediction_log)

    def refresh(self, overlay: Sequence[OverlayRun], shown: Sequence[RunModel]) -> None:
        self._overlay = overlay
        logs = []
        for run in overlay:
            curve = self.curves.curve_for(run)
            with np.errstate(divide="ignore", invalid="ignore"):
                log_scale = np.log2(run.model.scalars.column("scale"))
            logs.append(log_scale)
            if self.curves.changed(run.key, run.model.revision):
                finite = np.isfinite(log_scale)
                curve.setData(run.model.scalars.steps[finite], log_scale[finite])
        self.curves.drop_missing({run.key for run in overlay})
        self.curves.show_legend(len(overlay) > 1)
        _label_step_axis(self.plot, overlay)
        found = data_range([*logs, self._prediction_log] if overlay else logs)
        self.empty_note.show(
            None
            if found is not None
            else no_steps_reason(list(shown))
            if not any(len(model.scalars) for model in shown)
            else "no finite loss scale recorded"
        )
        if found is not None:
            # Whole powers of two at the ends, so the 2^k ticks are always there. The x
            # range follows the loss plot (linked).
            self.range.show(None, None, math.floor(found[0]) - 1, math.ceil(found[1]) + 1)
        # Skipped steps of every overlaid run (each run keeps its first MAX_SKIP_EVENTS).
        events = [event for run in overlay for event in run.model.skip_events]
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
        dynamic = current is not None and has_dynamic_scaling(current)
        if growth is None or not dynamic:
            self.growth_bar.setRange(0, 1)
            self.growth_bar.setValue(0)
            self.growth_bar.setFormat("no dynamic scaling")
            self.growth_label.setText("growth tracker:")
        else:
            tracker, interval = growth
            policy = str(current.config.get("scaler") or "torch") if current else "torch"
            tracker = steps_toward_growth(policy, tracker, interval)
            self.growth_bar.setRange(0, max(interval, 1))
            self.growth_bar.setValue(min(tracker, interval))
            self.growth_bar.setFormat(f"{tracker} / {interval} clean steps")
            self.growth_bar.setToolTip("clean steps toward the next growth, of growth_interval")
            skipped = skipped_text(current) if current is not None else "skipped: 0"
            latest = current.latest_step if current is not None else None
            # DeepSpeed's and Megatron's policies: overflows left before a backoff.
            left = latest.hysteresis if latest is not None else None
            hysteresis = f" · hysteresis {left}" if left is not None else ""
            self.growth_label.setText(f"{skipped}{hysteresis} · growth tracker:")


RULER_LABEL_CHARS = 16  # a ruler's label beside the plot and in the line under it
RANGES_TOOLTIP = (
    "Each format's range under the bars, top to bottom: dashed from its smallest "
    "subnormal to its smallest normal, solid from there to its largest value"
)


def _ruler_label(label: str) -> str:
    """A format's label cut to RULER_LABEL_CHARS by the run names' rule (`elide_name`):
    never inside a number ("e4m3:bias=11" must not read "bias=1…"); the tooltip has it
    whole."""
    return elide_name(label, RULER_LABEL_CHARS)


class GradientHistogramPlot(QWidget):
    """The latest statistics step's gradient exponents on a log2|g| axis, against formats.

    Parameter gradients or activation gradients (switchable). Under the bars each format's
    range is drawn as a ruler: thin from the smallest subnormal to the smallest normal,
    thick from there to the largest finite value. The shaded window is what FP16 can hold
    at the what-if loss scale 2**k; it can be dragged sideways or set with the spin box.
    """

    what_if_changed = Signal(int)

    RULER_STEP = 0.6  # vertical distance between format rulers, in log10(count) units
    # The bars and, under them, a ruler per format (four or more) share the data area.
    VIEW_HEIGHT = 64

    def __init__(self) -> None:
        super().__init__()
        self.plot = _plot_widget(CountAxis("left"), view_height=self.VIEW_HEIGHT)
        self.plot.setLabel("bottom", "log2 |g|  (binade)")
        self.plot.setLabel("left", "count")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.9, brush="#4a7fb5", pen=None)
        self.plot.addItem(self.bars)
        # A ruler per format the run reports (the monitor's list, FP6/FP4/E8M0/custom
        # included), made when first needed and kept; ranges exact from the engine.
        self._rulers: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem, pg.TextItem]] = {}
        self._ruler_step = self.RULER_STEP
        self.formats: tuple[str, ...] = ()
        self.format_ranges: dict[str, tuple[float, float, float]] = {}
        self.fp16_window = pg.LinearRegionItem(
            values=(FP16_LOW, FP16_HIGH), brush=pg.mkBrush(255, 170, 0, 40), pen=pg.mkPen("#e69f00")
        )
        self.fp16_window.setMovable(True)
        for line in self.fp16_window.lines:
            line.setMovable(False)  # the window keeps FP16's width; it only slides
        self.fp16_window.setZValue(-10)
        self.plot.addItem(self.fp16_window)
        self.fp16_window.sigRegionChangeFinished.connect(self._on_window_dragged)
        self.plot.getPlotItem().getViewBox().sigResized.connect(self._on_view_resized)
        self.empty_note = EmptyNote(self.plot, height_fraction=0.25)  # above the rulers
        self.hover = HoverReadout(self.plot, self._hover_text)

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
        self.counts_label = file_text_label("zero: –  inf: –  NaN: –")
        self.what_if_label = file_text_label("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)  # three read-outs under the plot: their gaps are its height
        self.header_widgets = (self.param_button, self.act_button, self.scale_spin)
        layout.addWidget(self.plot, 1)
        # Wrapped (a run with FP6/FP4/E8M0 rulers names more formats than a line holds).
        self.ranges_label = file_text_label("")
        self.ranges_label.setToolTip(RANGES_TOOLTIP)
        self._show_formats(DEFAULT_RULER_FORMATS)
        layout.addWidget(self.ranges_label)
        layout.addWidget(self.counts_label)
        layout.addWidget(self.what_if_label)
        self._model: RunModel | None = None
        self._shown_revision = -1
        self._scale_set_by_user = False
        self.last_what_if: WhatIf | None = None

    def _hover_text(self, x: float, _y: float) -> list[HoverLine]:
        return histogram_hover_text(self.current_histogram(), x)

    def _ruler(self, name: str) -> tuple[pg.PlotDataItem, pg.PlotDataItem, pg.TextItem]:
        ruler = self._rulers.get(name)
        if ruler is None:
            colour = format_colour(name, len(self._rulers))
            thin = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine))
            thick = pg.PlotDataItem(pen=pg.mkPen(colour, width=5))
            whole = format_range(name).label
            label = pg.TextItem(
                _ruler_label(whole), color=colour, anchor=(0.0, 0.5),
                fill=pg.mkBrush(plot_colors().background),
            )  # fmt: skip
            label.setToolTip(whole)
            label.setFont(QFont("DejaVu Sans", 7))
            for item in (thin, thick, label):
                self.plot.addItem(item)
            ruler = self._rulers[name] = (thin, thick, label)
        return ruler

    def _show_formats(self, names: tuple[str, ...]) -> None:
        """Rulers for `names` (top to bottom), the others hidden; the line under the plot."""
        if names == self.formats:
            return
        self.formats = names
        self.format_ranges = format_ranges_log2(names)
        for name, (thin, thick, label) in self._rulers.items():
            for item in (thin, thick, label):
                item.setVisible(name in names)
        for name in names:
            for item in self._ruler(name):
                item.setVisible(True)
        # Swatches carry the colour; the names are in the palette's text colour (readable
        # on both themes).
        self.ranges_label.setText(
            "ranges: "
            + " ".join(
                f"<span style='color:{self._ruler(name)[1].opts['pen'].color().name()}'>■</span> "
                f"{html.escape(_ruler_label(format_range(name).label))}"
                for name in names
            )
        )
        cut = [format_range(name).label for name in names]
        cut = [label for label in cut if _ruler_label(label) != label]
        self.ranges_label.setToolTip(
            RANGES_TOOLTIP + "".join(f"\n{elide(label, MAX_TOOLTIP)}" for label in cut)
        )

    # ----- slots hand off -------------------------------------------------------------

    def _on_source_toggled(self, _checked: bool) -> None:
        self.refresh(self._model, force=True)

    def _on_scale_changed(self, value: int) -> None:
        self._scale_set_by_user = True
        self._show_what_if()
        self.what_if_changed.emit(value)

    def _on_window_dragged(self, _region: object) -> None:
        lo, _hi = self.fp16_window.getRegion()
        self.scale_spin.setValue(round(self._recorded_log2_scale() + FP16_LOW - lo))

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
        # The formats the run reports, ranges from the engine: the rulers are the reference,
        # never blank.
        self._show_formats(ruler_formats(model))
        ranges = self.format_ranges
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
                self.counts_label.setText(counts_text(stats.step, hist))
        else:
            self.empty_note.show(None)
            # The view holds the bars and FP16's window at the scale the step ran with.
            stats = model.latest_stats if model is not None else None
            used = stats.scale if stats is not None else 1.0
            shift = self._recorded_log2_scale() - (
                math.log2(used) if used > 0 and math.isfinite(used) else 0.0
            )
            # FP16's whole range [2**-24, 65504] stays in view: it is the reference.
            x_lo = min(float(hist.lo), FP16_LOW + shift, FP16_LOW) - 2
            x_hi = max(float(hist.lo + len(hist.counts)), FP16_HIGH + shift, FP16_HIGH) + 2
            counts = np.asarray(hist.counts, dtype=np.float64)
            y_hi = max(float(np.log10(1.0 + counts.max())), 1.0)
            x = np.arange(hist.lo, hist.lo + len(counts), dtype=np.float64) + 0.5
            self.bars.setOpts(x=x, height=np.log10(1.0 + counts), width=0.9)
            stats = model.latest_stats if model is not None else None
            self.counts_label.setText(counts_text(stats.step if stats else None, hist))
        # Fixed by the data, not auto-ranged: BF16's ruler would stretch the view to ±130.
        x_lo -= 0.12 * (x_hi - x_lo)  # room for the format names on the left
        # The rulers keep about a third of the height however tall the bars are (counts of
        # 10^5 would otherwise squeeze them into hairlines and hide their names).
        self._ruler_step = max(self.RULER_STEP, 0.18 * y_hi - 0.075)
        for row, name in enumerate(self.formats):
            thin, thick, label = self._ruler(name)
            y = -self._ruler_step * (row + 1)
            if name in ranges:
                sub, normal, top = ranges[name]
                thin.setData([sub, normal], [y, y])
                thick.setData([normal, top], [y, y])
            label.setPos(x_lo, y)
        self.plot.getPlotItem().setRange(
            xRange=(x_lo, x_hi),
            yRange=(-self._ruler_step * len(self.formats) - 0.3, y_hi * 1.08),
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
        lo = FP16_LOW - (k - recorded)
        self.fp16_window.blockSignals(True)
        self.fp16_window.setRegion((lo, lo + FP16_HIGH - FP16_LOW))
        self.fp16_window.blockSignals(False)
        hist = self.current_histogram()
        if hist is None:
            self.what_if_label.setText(f"What-if: {no_histogram_reason(self._model, None)}.")
            self.last_what_if = None
            return
        result = what_if(hist, k, recorded)
        self.last_what_if = result
        self.what_if_label.setText(what_if_text(result))


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
        add_colour_bar(self.plot, self.image, self.colour_bar)
        # The limits of the format the shown gradients were held in, where they apply to
        # the data (fixed for scaled activation gradients, limit / scale per step for the
        # unscaled parameter gradients of a scaled run).
        self.limit_curves = [
            pg.PlotDataItem(pen=pg.mkPen("#D55E00", width=1.5, style=Qt.PenStyle.DashLine))
            for _ in range(2)
        ]
        for curve in self.limit_curves:
            self.plot.addItem(curve)
        self.range = StickyRange(self.plot)
        self.empty_note = EmptyNote(self.plot)
        self.hover = HoverReadout(self.plot, self._hover_text)
        self.note = file_text_label("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.note)
        self._key: tuple[int, int, bool] | None = None
        self._heat: HeatmapBuffer | None = None

    def _hover_text(self, step: float, log2_value: float) -> list[HoverLine]:
        return heatmap_hover_text(self._heat, step, log2_value)

    def refresh(self, model: RunModel | None, activations: bool) -> None:
        key = (id(model), model.revision if model else -1, activations)
        if key == self._key:
            return
        self._key = key
        note, limits = heatmap_limits(model, activations)
        self.note.setText(note)
        for curve, limit in zip(self.limit_curves, limits, strict=False):
            curve.setData(limit.steps, limit.log2)
        for curve in self.limit_curves[len(limits) :]:
            curve.setData([], [])
        heat = None if model is None else (model.act_heat if activations else model.grad_heat)
        self._heat = heat
        if heat is None or not len(heat):
            self.image.clear()
            self.empty_note.show(no_histogram_reason(model, None))
            self.range.show(None, None, -28, 18)
            return
        img = heat.image()  # (columns, bins): transpose so rows are binades
        # Each column at its own steps, however unevenly the statistics steps fell.
        layout = heat_layout(heat)
        self.image.setImage(img[layout.columns].T, autoLevels=False, levels=(-8.0, 0.0))
        width = len(layout.columns) * layout.cell
        self.image.setRect(QRectF(layout.start, HEAT_LO, width, HEAT_BINS))
        occupied = np.nonzero(img.max(axis=0) > -8.0)[0]
        # The x range follows the loss plot (linked); y from the data and the limits shown.
        if len(occupied):
            lo = HEAT_LO + int(occupied[0]) - 4
            hi = HEAT_LO + int(occupied[-1]) + 5
            for limit in limits:
                if len(limit.log2):
                    lo = min(lo, math.floor(float(np.min(limit.log2))) - 2)
                    hi = max(hi, math.ceil(float(np.max(limit.log2))) + 2)
            self.range.show(None, None, max(lo, HEAT_LO), min(hi, HEAT_HI))
            self.empty_note.show(None)
        else:
            # Statistics steps whose gradients were all zero, inf or NaN: no binade to colour.
            self.range.show(None, None, -28, 18)
            stats = model.latest_stats if model is not None else None
            hist = None if stats is None else stats.act_hist if activations else stats.grad_hist
            self.empty_note.show(
                no_histogram_reason(model, hist)
                if hist is not None and not len(hist.counts)
                else "no finite non-zero gradient in any statistics step"
            )


class LayerTable(QWidget):
    """Each layer's gradients on the latest statistics step; the first non-finite marked."""

    def __init__(self) -> None:
        super().__init__()
        empty = layer_table_view(None)
        self.table = QTableWidget(0, len(empty.columns))
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        # Numbers at their full width (names are elided by the view model, so no cell can
        # ask for more than a few hundred pixels; the table scrolls, the window never grows).
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setMinimumWidth(120)
        self.table.setMinimumHeight(table_minimum_height(self.table))
        self.first_label = file_text_label("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.first_label)
        layout.addWidget(self.table, 1)
        self._key: tuple[int, int] | None = None
        self._columns: tuple[str, ...] = ()
        self._show_columns(empty.columns, empty.tooltips)

    def _show_columns(self, columns: tuple[str, ...], tooltips: tuple[str, ...]) -> None:
        if columns == self._columns:
            return
        self._columns = columns
        self.table.setHorizontalHeaderLabels(list(columns))
        for column, tip in enumerate(tooltips):
            header_item = self.table.horizontalHeaderItem(column)
            if header_item is not None:
                header_item.setToolTip(tip)

    def refresh(self, model: RunModel | None) -> None:
        key = (id(model), model.revision if model else -1)
        if key == self._key:
            return
        self._key = key
        first = first_nonfinite_view(model)
        self.first_label.setText(first.text)
        self.first_label.setToolTip(first.text)
        # An alarm colour from the theme: readable on the light and the dark background.
        self.first_label.setStyleSheet(
            f"color: {alarm_colour()}; font-weight: bold;" if first.alarm else ""
        )
        view = layer_table_view(model)
        self._show_columns(view.columns, view.tooltips)
        self.table.setRowCount(len(view.rows))
        for row, layer in enumerate(view.rows):
            for column, text in enumerate(layer.cells):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(text)
                if column == 0:
                    item.setToolTip(text)
                else:  # why a cell holds "–" (no tooltip over a figure)
                    item.setToolTip(layer.tips[column] if column < len(layer.tips) else "")
                if layer.alarm:
                    item.setForeground(QColor(alarm_colour()))
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                else:  # the palette's own colours (light or dark theme)
                    item.setData(Qt.ItemDataRole.ForegroundRole, None)
                    item.setData(Qt.ItemDataRole.FontRole, None)
                item.setData(Qt.ItemDataRole.BackgroundRole, None)


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
        self.throughput = file_text_label("", word_wrap=False)
        self.lost = file_text_label("")
        self.table.setMinimumHeight(table_minimum_height(self.table))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.throughput)
        layout.addWidget(self.lost)
        layout.addWidget(self.table, 1)
        self._key: tuple[int, int] | None = None

    def refresh(self, model: RunModel | None) -> None:
        key = (id(model), model.revision if model else -1)
        if key == self._key:
            return
        self._key = key
        self.throughput.setText(throughput_text(model))
        stats = model.latest_stats if model is not None else None
        self.lost.setText(lost_updates_text(model))
        rows: list[tuple[str, str, str]] = []
        memory = stats.memory if stats is not None else None
        if memory is not None:
            for key_name, title in self.PARTS:
                by_dtype: dict[str, int] = getattr(memory, key_name)
                for dtype, nbytes in sorted(by_dtype.items()):
                    rows.append((title, elide(dtype, 16), bytes_text(float(nbytes))))
            if memory.peak_device is not None:
                rows.append(("device peak", "", bytes_text(float(memory.peak_device))))
        self.table.setRowCount(len(rows))
        for row, cells in enumerate(rows):
            for column, text in enumerate(cells):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(text)
