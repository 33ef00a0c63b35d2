"""Range and precision of the chosen formats on one log2 magnitude axis.

Top: one row per format with the values that underflow to zero, the subnormal range, the
normal range and overflow. Bottom: the relative spacing ulp(x)/|x| (log2) across the
range, so range is read off against precision at a glance: BF16 spans FP32's range with
FP16-or-worse precision; FP16 is precise but narrow.

Spacings come from the engine (`ulp` of codes at binade edges), cached per format.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import FloatFormat
from fpexplorer.gui.formats.plotting import LazyView, style_plot
from fpexplorer.gui.formats.state import FormatsSession
from fpexplorer.gui.formats.tables import chosen_formats
from fpexplorer.gui.theme import (
    MIN_GRAPHIC_CONTRAST,
    class_color,
    plot_colors,
    readable,
    text_backgrounds,
)

# Curve colours stay clear of the class colours of the bars (green, purple, red, grey).
CURVE_COLORS = (
    "#4f7fe0",
    "#e08a1e",
    "#17a2b8",
    "#e377c2",
    "#8c6d31",
    "#bcbd22",
    "#1f3b73",
    "#7f7f7f",
    "#ff9f6b",
    "#5ad1e8",
)
GRAPHICS_MIN_HEIGHT = 200
PLOT_OVERHEAD = 24  # the bottom axis's tick labels (20 px) and margins, per plot
MAX_BINADES = 400  # wider formats are sampled every few binades (the curve is periodic)


def curve_color(index: int) -> str:
    """The colour of the index-th spacing curve and of its swatch in the legend, with the
    contrast a line needs on the current theme's backgrounds (navy #1f3b73 vanished on the
    dark theme, olive #bcbd22 nearly on the light one)."""
    base = QColor(CURVE_COLORS[index % len(CURVE_COLORS)])
    return str(readable(base, text_backgrounds(), MIN_GRAPHIC_CONTRAST).name())


def log2_fraction(value: Fraction) -> float:
    return math.log2(value.numerator) - math.log2(value.denominator)


def floor_log2(value: Fraction) -> int:
    """Exact floor(log2(value)) for value > 0 (math.log2 rounds 2^1024 - tiny up to 1024)."""
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    if Fraction(2) ** exponent > value:
        exponent -= 1
    return exponent


@lru_cache(maxsize=64)
def spacing_curve(fmt: FloatFormat) -> tuple[np.ndarray, np.ndarray]:
    """(log2 |x|, log2 ulp(x)/|x|) at both edges of every binade of positive finite values."""
    lowest = fmt.min_subnormal if fmt.min_subnormal is not None else fmt.min_normal
    first = floor_log2(lowest)
    last = floor_log2(fmt.max)
    stride = max(1, (last - first) // MAX_BINADES)
    xs: list[float] = []
    ys: list[float] = []
    exponents = list(range(first, last + 1, stride))
    if exponents[-1] != last:
        exponents.append(last)
    for exponent in exponents:
        start = Fraction(2) ** exponent
        if start < lowest:
            start = lowest
        code = fmt.from_value(start)
        # End of the binade: the largest value below the next power of two, or max (found
        # without overflowing: in E4M3FN or FP4 the next power of two has no code at all).
        top = Fraction(2) ** (exponent + 1)
        end_code = fmt.from_value(top, rounding="toward_zero", overflow="saturate")
        if fmt.classify(end_code) in ("subnormal", "normal") and fmt.to_fraction(end_code) >= top:
            end_code = fmt.next_down(end_code)
        if fmt.classify(end_code) not in ("subnormal", "normal"):
            end_code = code
        for edge in (code, end_code):
            if fmt.classify(edge) not in ("subnormal", "normal"):
                continue
            value = fmt.to_fraction(edge)
            ulp = fmt.ulp(edge)
            if value <= 0 or ulp is None:
                continue
            xs.append(log2_fraction(value))
            ys.append(log2_fraction(ulp / value))
    return np.array(xs), np.array(ys)


@lru_cache(maxsize=64)
def range_edges(fmt: FloatFormat) -> tuple[float, float, float]:
    """log2 of min subnormal (or min normal), min normal and max."""
    lowest = fmt.min_subnormal if fmt.min_subnormal is not None else fmt.min_normal
    return log2_fraction(lowest), log2_fraction(fmt.min_normal), log2_fraction(fmt.max)


class RangeChart(LazyView):
    """Range bars and relative spacing of the chosen formats, with the current value marked."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.include_common = QCheckBox("also FP32, FP16, BF16, FP8")
        self.include_common.setChecked(True)
        self.caption = QLabel(
            "x: log2 |value|. Bars: grey rounds to 0 (none where a format has no zero, as "
            "E8M0: it rounds tiny values up to its smallest), purple subnormal (precision "
            "fades), green normal range, red overflow. Curves: relative gap ulp/|x| (lower = "
            "more precise). Dashed: the current value."
        )
        self.caption.setWordWrap(True)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setMinimumHeight(GRAPHICS_MIN_HEIGHT)
        self.bars_plot: pg.PlotItem = self.graphics.addPlot(row=0, col=0)
        self.spacing_plot: pg.PlotItem = self.graphics.addPlot(row=1, col=0)
        self.graphics.ci.layout.setRowStretchFactor(0, 1)
        self.graphics.ci.layout.setRowStretchFactor(1, 1)
        self.spacing_plot.setXLink(self.bars_plot)
        self.bars_plot.setMenuEnabled(False)
        self.spacing_plot.setMenuEnabled(False)
        self.bars_plot.hideButtons()
        self.spacing_plot.hideButtons()
        self.bars_plot.setMouseEnabled(x=True, y=False)
        self.spacing_plot.setMouseEnabled(x=True, y=False)
        self.bars_plot.getAxis("left").setWidth(110)
        self.spacing_plot.getAxis("left").setWidth(110)
        self.spacing_plot.setLabel("bottom", "log2 |x|")
        self.spacing_plot.setLabel("left", "log2 ulp/|x|")
        self.spacing_plot.showGrid(x=True, y=True, alpha=0.2)
        self.bars_plot.showGrid(x=True, y=False, alpha=0.2)
        self.underflow_bars = pg.BarGraphItem(
            x0=[], x1=[], y0=[], y1=[], brush=class_color("zero").lighter(150), pen=None
        )
        self.subnormal_bars = pg.BarGraphItem(
            x0=[], x1=[], y0=[], y1=[], brush=class_color("subnormal"), pen=None
        )
        self.normal_bars = pg.BarGraphItem(
            x0=[], x1=[], y0=[], y1=[], brush=class_color("normal"), pen=None
        )
        self.overflow_bars = pg.BarGraphItem(
            x0=[], x1=[], y0=[], y1=[], brush=class_color("inf"), pen=None
        )
        for bars in (
            self.underflow_bars,
            self.subnormal_bars,
            self.normal_bars,
            self.overflow_bars,
        ):
            self.bars_plot.addItem(bars)
        colors = plot_colors()
        dashed = pg.mkPen(colors.foreground, width=1.5, style=Qt.PenStyle.DashLine)
        self.value_lines = [pg.InfiniteLine(angle=90, pen=dashed) for _ in range(2)]
        self.bars_plot.addItem(self.value_lines[0])
        self.spacing_plot.addItem(self.value_lines[1])
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setToolTip("Colours of the relative-spacing curves")
        self.bars_plot.invertY(True)
        self.curves: list[pg.PlotDataItem] = []
        self._shown: tuple[FloatFormat, ...] = ()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.include_common)
        top.addWidget(self.legend, 1)
        layout.addLayout(top)
        layout.addWidget(self.caption)
        # The rows never squeeze below a text line each (their names would overlap): with
        # many formats in a small window the chart scrolls instead (see _show_formats).
        self.graphics_scroll = QScrollArea()
        self.graphics_scroll.setWidgetResizable(True)
        self.graphics_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.graphics_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.graphics_scroll.setWidget(self.graphics)
        layout.addWidget(self.graphics_scroll, 1)
        self.include_common.toggled.connect(lambda _: self.mark_stale())
        session.changed.connect(self.mark_stale)
        self.restyle()

    def restyle(self) -> None:
        self._shown = ()  # the curves and their legend take the new theme's colours
        colors = plot_colors()
        self.graphics.setBackground(colors.background)
        style_plot(self.bars_plot)
        style_plot(self.spacing_plot)
        for line in self.value_lines:
            line.setPen(pg.mkPen(colors.foreground, width=1.5, style=Qt.PenStyle.DashLine))

    def render_view(self) -> None:
        formats = tuple(chosen_formats(self.session, self.include_common.isChecked()))
        if formats != self._shown:
            self._show_formats(formats)
        value = self.session.active.value()
        if value.kind == "finite" and not value.is_zero:
            x = log2_fraction(value.magnitude)
            for line in self.value_lines:
                line.setValue(x)
                line.show()
        else:
            for line in self.value_lines:
                line.hide()

    def _show_formats(self, formats: tuple[FloatFormat, ...]) -> None:
        self._shown = formats
        edges = [range_edges(fmt) for fmt in formats]
        low_end = min(low for low, _, _ in edges)
        high_end = max(high for _, _, high in edges)
        # A margin of a few percent of the span, at least 6 binades: with e16m47 (2^-32813
        # .. 2^32768) six binades were invisible and its bar was green from edge to edge,
        # as if nothing underflowed or overflowed.
        margin = max(6.0, 0.03 * (high_end - low_end))
        left, right = low_end - margin, high_end + margin
        rows = np.arange(len(formats), dtype=float)
        top = rows + 0.35
        bottom = rows - 0.35
        lows = np.array([low for low, _, _ in edges])
        normals = np.array([normal for _, normal, _ in edges])
        highs = np.array([high for _, _, high in edges])
        # Nothing rounds to 0 in a format without zero (E8M0 rounds 2**-200 up to 2**-127):
        # no grey bar there, which read "rounds to 0".
        underflow_ends = np.where([fmt.has_zero for fmt in formats], lows - 1, left)
        self.underflow_bars.setOpts(
            x0=np.full(len(rows), left), x1=underflow_ends, y0=bottom, y1=top
        )
        self.subnormal_bars.setOpts(x0=lows, x1=normals, y0=bottom, y1=top)
        self.normal_bars.setOpts(x0=normals, x1=highs, y0=bottom, y1=top)
        self.overflow_bars.setOpts(x0=highs, x1=np.full(len(rows), right), y0=bottom, y1=top)
        axis = self.bars_plot.getAxis("left")
        axis.setTicks([[(i, fmt.name) for i, fmt in enumerate(formats)]])
        # Each row a text line and a little more; the two plots share the height equally,
        # each with its bottom axis.
        row_height = QFontMetrics(axis.style["tickFont"] or self.font()).lineSpacing() + 1
        plot_height = len(formats) * row_height + PLOT_OVERHEAD
        self.graphics.setMinimumHeight(max(GRAPHICS_MIN_HEIGHT, 2 * plot_height + 10))
        self.bars_plot.setYRange(-0.6, len(formats) - 0.4, padding=0)
        self.bars_plot.setXRange(left, right, padding=0)
        while len(self.curves) < len(formats):
            curve = pg.PlotDataItem()
            self.spacing_plot.addItem(curve)
            self.curves.append(curve)
        names = []
        lowest_y = 0.0
        for index, curve in enumerate(self.curves):
            if index < len(formats):
                xs, ys = spacing_curve(formats[index])
                color = curve_color(index)
                curve.setPen(pg.mkPen(color, width=1.5))
                curve.setData(xs, ys)
                curve.show()
                # The swatch in the curve's colour, the name in the text colour (it reads).
                names.append(f"<span style='color:{color}'>━━</span> {formats[index].name}")
                if len(ys):
                    lowest_y = min(lowest_y, float(ys.min()))
            else:
                curve.setData([], [])
                curve.hide()
        self.legend.setText(" &nbsp; ".join(names))
        self.spacing_plot.setYRange(lowest_y - 2, 1, padding=0)
