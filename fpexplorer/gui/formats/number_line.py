"""The number line around the current value: neighbours, midpoints, input, result, modes.

The x axis counts gaps (ulps) from the rounded value, computed exactly and only then
turned into floats, so FP64 neighbours 2^-52 apart plot as clearly as FP4 ones. Every
plot item is created once and updated with setData.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from itertools import pairwise

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from fpexplorer.formats import ExactValue, FloatFormat
from fpexplorer.gui.formats.plotting import LazyView, style_plot
from fpexplorer.gui.formats.state import STOCHASTIC_SEED, FormatsSession, display_text
from fpexplorer.gui.formats.text import typed as typed_text
from fpexplorer.gui.theme import plot_colors

DETERMINISTIC_MODES = (
    "nearest_even",
    "nearest_away",
    "toward_zero",
    "toward_positive",
    "toward_negative",
)
NEIGHBOURS_EACH_SIDE = 3
# A typed value further than this (in gaps) beyond the outermost neighbour is drawn at that
# distance and marked off scale: 1e10 typed into FP16 would otherwise squash the neighbours
# into one dot, and 1e99999 into a 16-exponent-bit format does not even fit a float.
OFF_SCALE_MARGIN = 1.5
STAGGER_LABELS_LONGER_THAN = 12  # characters
MIN_SEPARATION = Fraction(1, 3)  # units: closer neighbours are not drawn (they would overlap)
MAX_STEP = 8  # units: neither are neighbours this far beyond the previous one

FINITE = ("zero", "subnormal", "normal")


class NumberLineView(LazyView):
    """Representable neighbours and how each rounding mode maps the typed value."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setMenuEnabled(False)
        self.plot_widget.setMinimumHeight(120)
        plot = self.plot_widget.getPlotItem()
        plot.hideButtons()
        plot.setMouseEnabled(x=True, y=False)
        plot.setLabel("bottom", "distance from the rounded value, in gaps (ulps)")
        plot.getAxis("left").setTicks(
            [[(0, "values")] + [(i + 1, mode) for i, mode in enumerate(DETERMINISTIC_MODES)]]
        )
        plot.getAxis("left").setWidth(110)
        self.plot = plot
        self._bottom = -1.1  # lower end of the y range: lower when labels take two lines
        colors = plot_colors()
        self.axis_line = pg.PlotDataItem(pen=pg.mkPen(colors.foreground, width=2))
        self.midpoints = pg.PlotDataItem(
            pen=pg.mkPen(colors.muted, width=1, style=Qt.PenStyle.DashLine), connect="pairs"
        )
        self.neighbours = pg.ScatterPlotItem(
            symbol="s", size=9, pen=pg.mkPen(colors.foreground), brush=pg.mkBrush(colors.muted)
        )
        self.result = pg.ScatterPlotItem(
            symbol="o", size=15, pen=pg.mkPen(colors.foreground), brush=pg.mkBrush(colors.accent)
        )
        self.input_line = pg.InfiniteLine(
            angle=90, pen=pg.mkPen(colors.input, width=2, style=Qt.PenStyle.DashLine)
        )
        self.mode_arrows = pg.PlotDataItem(pen=pg.mkPen(colors.input, width=1.5), connect="pairs")
        self.mode_picks = pg.ScatterPlotItem(
            symbol="t2", size=12, pen=pg.mkPen(colors.foreground), brush=pg.mkBrush(colors.accent)
        )
        for item in (
            self.axis_line,
            self.midpoints,
            self.input_line,
            self.mode_arrows,
            self.neighbours,
            self.mode_picks,
            self.result,
        ):
            plot.addItem(item)
        small = QFont()
        small.setPointSizeF(max(small.pointSizeF() * 0.85, 7.0))
        self.value_labels: list[pg.TextItem] = []
        for _ in range(2 * NEIGHBOURS_EACH_SIDE + 1):
            label = pg.TextItem(anchor=(0.5, 0.0), color=colors.foreground)
            label.setFont(small)
            plot.addItem(label)
            self.value_labels.append(label)
        self.input_label = pg.TextItem(anchor=(0.0, 0.5), color=colors.input)
        self.input_label.setFont(small)
        plot.addItem(self.input_label)
        self.message = pg.TextItem(anchor=(0.5, 0.5), color=colors.foreground)
        plot.addItem(self.message)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.caption)
        layout.addWidget(self.plot_widget, 1)
        self.restyle()
        session.changed.connect(self.mark_stale)

    def restyle(self) -> None:
        """Colours from the current palette (also called when it changes, light <-> dark)."""
        colors = plot_colors()
        self.plot_widget.setBackground(colors.background)
        style_plot(self.plot)
        self.axis_line.setPen(pg.mkPen(colors.foreground, width=2))
        self.midpoints.setPen(pg.mkPen(colors.muted, width=1, style=Qt.PenStyle.DashLine))
        self.neighbours.setPen(pg.mkPen(colors.foreground))
        self.neighbours.setBrush(pg.mkBrush(colors.muted))
        self.result.setPen(pg.mkPen(colors.foreground))
        self.mode_picks.setPen(pg.mkPen(colors.foreground))
        for label in self.value_labels:
            label.setColor(colors.foreground)
        self.message.setColor(colors.foreground)

    # -- rendering -----------------------------------------------------------------------
    def render_view(self) -> None:
        editor = self.session.active
        fmt = editor.format
        readout = editor.readout()
        typed = editor.input
        anchor_code = readout.code
        if readout.kind not in FINITE:
            if typed is None or typed.kind != "finite":
                self._show_message(f"{readout.shortest} has no place on the number line")
                return
            anchor_code = fmt.from_value(self._anchor_for(fmt, typed))
            if fmt.classify(anchor_code) not in FINITE:
                self._show_message(f"{fmt.name} has no finite values to show")
                return
        codes = self._neighbour_codes(fmt, anchor_code)
        values = [fmt.to_fraction(code) for code in codes]
        center = fmt.to_fraction(anchor_code)
        # The unit is the smaller gap next to the value shown: around a flushed zero (no
        # subnormals) that gap is 2**23 times the next ones, and counting in those would
        # push min_normal millions of units out.
        here = [gap for gap in (fmt.gap_down(anchor_code), fmt.gap_up(anchor_code)) if gap]
        gaps = [b - a for a, b in pairwise(values) if b != a]
        unit = min(here) if here else (min(gaps) if gaps else Fraction(1))

        def x_of(value: Fraction) -> float:
            return float((value - center) / unit)

        codes, values = self._apart(codes, values, codes.index(anchor_code), unit)
        xs = np.array([x_of(v) for v in values])
        self.message.setText("")
        self.neighbours.setData(xs, np.zeros_like(xs))
        mids = [(a + b) / 2 for a, b in pairwise(values)]
        mid_x = np.repeat([x_of(m) for m in mids], 2)
        mid_y = np.tile([-0.25, 0.25], len(mids))
        self.midpoints.setData(mid_x, mid_y)
        texts = [display_text(fmt, code) for code in codes]
        # Long values (FP64's 17 digits) overlap their neighbours' in a window of 1024 px:
        # every other one goes on a second line.
        staggered = max(len(text) for text in texts) > STAGGER_LABELS_LONGER_THAN
        for index, (label, text, x) in enumerate(zip(self.value_labels, texts, xs, strict=False)):
            label.setText(text)
            label.setPos(x, -0.8 if staggered and index % 2 else -0.35)
        self._bottom = -1.55 if staggered else -1.1
        for label in self.value_labels[len(codes) :]:
            label.setText("")
        left, right = float(xs.min()) - 0.6, float(xs.max()) + 0.6
        low_reach = float(xs.min()) - OFF_SCALE_MARGIN
        high_reach = float(xs.max()) + OFF_SCALE_MARGIN

        def clamped_x(value: Fraction) -> tuple[float, bool]:
            """x of a value, or the edge of the scale (and True) when it lies beyond."""
            offset = (value - center) / unit
            if offset > high_reach:
                return high_reach, True
            if offset < low_reach:
                return low_reach, True
            return float(offset), False

        result_x = x_of(center) if readout.kind in FINITE else right - 0.1
        self.result.setData([result_x], [0.0])
        arrows_x: list[float] = []
        arrows_y: list[float] = []
        picks_x: list[float] = []
        picks_y: list[float] = []
        if typed is not None and typed.kind == "finite":
            input_x, off_scale = clamped_x(typed.fraction)
            left, right = min(left, input_x - 0.3), max(right, input_x + 0.3)
            self.input_line.setValue(input_x)
            self.input_line.show()
            where = " (far right, off scale)" if input_x > 0 else " (far left, off scale)"
            self.input_label.setText(f" typed {typed_text(typed)}{where if off_scale else ''}")
            self.input_label.setAnchor((1.0, 0.5) if off_scale and input_x > 0 else (0.0, 0.5))
            self.input_label.setPos(input_x, len(DETERMINISTIC_MODES) + 0.55)
            for row, mode in enumerate(DETERMINISTIC_MODES, start=1):
                pick_x = self._pick_x(fmt, typed, mode, clamped_x, left, right)
                arrows_x += [input_x, pick_x]
                arrows_y += [row, row]
                picks_x.append(pick_x)
                picks_y.append(row)
            self.caption.setText(
                f"{fmt.name}: typed value (dashed line) between its neighbours; dashed ticks "
                "are midpoints (where round-to-nearest changes its mind); each row shows the "
                "neighbour a rounding mode picks."
            )
        else:
            self.input_line.hide()
            self.input_label.setText("")
            self.caption.setText(
                f"{fmt.name}: the current value (red) and its representable neighbours; "
                "dashed ticks are midpoints. Type a value above to see where each rounding "
                "mode sends it."
            )
        self.mode_arrows.setData(arrows_x, arrows_y)
        # Each triangle points the way its mode moved the typed value.
        symbols = [
            "t3" if arrows_x[2 * i + 1] < arrows_x[2 * i] else "t2" for i in range(len(picks_x))
        ]
        self.mode_picks.setData(picks_x, picks_y, symbol=symbols)
        self.axis_line.setData([left, right], [0, 0])
        self.plot.setXRange(left, right, padding=0)
        self.plot.setYRange(self._bottom, len(DETERMINISTIC_MODES) + 0.9, padding=0)

    def _pick_x(
        self,
        fmt: FloatFormat,
        typed: ExactValue,
        mode: str,
        clamped_x: Callable[[Fraction], tuple[float, bool]],
        left: float,
        right: float,
    ) -> float:
        rounded = fmt.round(typed, mode, self.session.overflow, seed=STOCHASTIC_SEED)
        if rounded.value.kind != "finite":
            return right - 0.1 if not rounded.value.negative else left + 0.1
        return clamped_x(rounded.value.fraction)[0]

    @staticmethod
    def _anchor_for(fmt: FloatFormat, typed: ExactValue) -> Fraction:
        """Where to look when the typed value has no finite code: the end of the range
        it fell off (overflow), or the smallest value when the format cannot hold it at all
        (a negative value or zero in an unsigned format such as E8M0)."""
        if (typed.negative and not fmt.signed) or typed.is_zero:
            return fmt.min_subnormal or fmt.min_normal
        return -fmt.max if typed.negative else fmt.max

    @staticmethod
    def _apart(
        codes: list[int], values: list[Fraction], anchor: int, unit: Fraction
    ) -> tuple[list[int], list[Fraction]]:
        """The neighbours out to the first one that would sit on top of the previous one
        (less than MIN_SEPARATION units on: min_normal, min_normal + 2**-149, ... beyond a
        flushed zero) or far off (more than MAX_STEP units: zero, seen from min_normal).
        Cut, not thinned, so adjacent points stay adjacent codes."""

        def fits(step: Fraction) -> bool:
            return MIN_SEPARATION <= step / unit <= MAX_STEP

        low, high = anchor, anchor
        while low > 0 and fits(values[low] - values[low - 1]):
            low -= 1
        while high < len(values) - 1 and fits(values[high + 1] - values[high]):
            high += 1
        return codes[low : high + 1], values[low : high + 1]

    @staticmethod
    def _neighbour_codes(fmt: FloatFormat, code: int) -> list[int]:
        below: list[int] = []
        current = code
        for _ in range(NEIGHBOURS_EACH_SIDE):
            step = fmt.next_down(current)
            if step == current or fmt.classify(step) not in FINITE:
                break
            below.append(step)
            current = step
        above: list[int] = []
        current = code
        for _ in range(NEIGHBOURS_EACH_SIDE):
            step = fmt.next_up(current)
            if step == current or fmt.classify(step) not in FINITE:
                break
            above.append(step)
            current = step
        return [*reversed(below), code, *above]

    def _show_message(self, text: str) -> None:
        for item in (self.neighbours, self.result, self.mode_picks):
            item.setData([], [])
        self.midpoints.setData([], [])
        self.mode_arrows.setData([], [])
        self.axis_line.setData([], [])
        self.input_line.hide()
        self.input_label.setText("")
        for label in self.value_labels:
            label.setText("")
        self.plot.setXRange(-1, 1, padding=0)
        self.plot.setYRange(-1.1, len(DETERMINISTIC_MODES) + 0.9, padding=0)
        self.message.setText(text)
        self.message.setPos(0, 2.5)
        self.caption.setText(
            "NaN and infinity are codes without a position among the finite values."
        )
