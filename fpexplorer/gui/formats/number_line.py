"""The number line around the current value: neighbours, midpoints, input, result, modes.

What is drawn comes from `number_line_picture` (Qt-free); this view only renders it. Every
plot item is created once and updated with setData. The plot never gets shorter than its
labels need (it scrolls instead), so labels do not collide in a small window.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from fpexplorer.gui.formats.number_line_model import (
    NEIGHBOURS_EACH_SIDE,
    NumberLinePicture,
    is_random,
    mode_rows,
    number_line_picture,
)
from fpexplorer.gui.formats.plotting import LazyView, NotationAxis, style_plot
from fpexplorer.gui.formats.state import FormatsSession
from fpexplorer.gui.theme import plot_colors

BOTTOM_AXIS = 50  # pixels: tick labels, the axis title and the plot's margins


class NumberLineView(LazyView):
    """Representable neighbours and how each rounding mode maps the typed value."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.modes = mode_rows()
        self.plot_widget = pg.PlotWidget(axisItems={"bottom": NotationAxis("bottom")})
        self.plot_widget.setMenuEnabled(False)
        plot = self.plot_widget.getPlotItem()
        plot.hideButtons()
        plot.setMouseEnabled(x=True, y=False)
        plot.setLabel("bottom", "distance from the value shown, in ulps of it")
        plot.getAxis("left").setTicks(
            [[(0, "values")] + [(i + 1, mode) for i, mode in enumerate(self.modes)]]
        )
        plot.getAxis("left").setWidth(110)
        self.plot = plot
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
        # Words beside picks: where non-finite results go ("→ NaN") and the probabilities
        # of stochastic rounding; two per row at most.
        self.pick_labels: list[pg.TextItem] = []
        for _ in range(2 * len(self.modes)):
            label = pg.TextItem(anchor=(0.0, 0.5), color=colors.foreground)
            label.setFont(small)
            plot.addItem(label)
            self.pick_labels.append(label)
        self.small_metrics = QFontMetrics(small)
        self.picture: NumberLinePicture | None = None
        self._labels_shown = False  # value labels are on screen (not a message)
        self.message = pg.TextItem(anchor=(0.5, 0.5), color=colors.foreground)
        plot.addItem(self.message)
        # Never shorter than its labels need: mode rows a text line apart, two lines of
        # values below the axis, the typed value's line above, the bottom axis.
        line = QFontMetrics(small).lineSpacing()
        plot.getAxis("left").setStyle(tickFont=small)
        self.plot_widget.setMinimumHeight(
            round((len(self.modes) + 0.3) * (line + 1) + 3.6 * (line + 10) + 4 + BOTTOM_AXIS)
        )
        self.plot_scroll = QScrollArea()
        self.plot_scroll.setWidgetResizable(True)
        self.plot_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.plot_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.plot_scroll.setWidget(self.plot_widget)
        # When it must scroll, the values and the axis stay in view (the top rows scroll).
        bar = self.plot_scroll.verticalScrollBar()
        bar.rangeChanged.connect(lambda _low, high: bar.setValue(high))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.caption)
        layout.addWidget(self.plot_scroll, 1)
        self.restyle()
        session.changed.connect(self.mark_stale)
        self.plot.vb.sigResized.connect(self._on_view_box_resized)
        self.plot.vb.sigXRangeChanged.connect(self._on_x_range_changed)

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
        for label in self.value_labels + self.pick_labels:
            label.setColor(colors.foreground)
        self.input_label.setColor(colors.input)
        self.input_line.setPen(pg.mkPen(colors.input, width=2, style=Qt.PenStyle.DashLine))
        self.mode_arrows.setPen(pg.mkPen(colors.input, width=1.5))
        self.message.setColor(colors.foreground)

    # -- rendering -----------------------------------------------------------------------
    def render_view(self) -> None:
        editor = self.session.active
        picture = number_line_picture(
            editor.format, editor.code, editor.input, self.session.overflow
        )
        self.picture = picture
        if picture.message is not None:
            self._show_message(picture.message)
            return
        xs = np.array(picture.xs)
        self.message.setText("")
        self.plot.getAxis("bottom").setStyle(showValues=True)
        self.plot.setLabel("bottom", picture.axis_label)
        self.neighbours.setData(xs, np.zeros_like(xs))
        self.midpoints.setData(
            np.repeat(picture.midpoint_xs, 2), np.tile([-0.25, 0.25], len(picture.midpoint_xs))
        )
        if picture.result_x is not None:
            self.result.setData([picture.result_x], [0.0])
        else:
            self.result.setData([], [])
        arrows_x: list[float] = []
        arrows_y: list[float] = []
        picks_x: list[float] = []
        picks_y: list[float] = []
        symbols: list[str] = []
        texts: list[tuple[str, float, float, bool]] = []  # text, x, y, right of the pick
        if picture.input_x is not None:
            input_x = picture.input_x
            self.input_line.setValue(input_x)
            self.input_line.show()
            self.input_label.setText(picture.input_label)
            right_side = picture.off_scale and input_x > 0
            self.input_label.setAnchor((1.0, 0.5) if right_side else (0.0, 0.5))
            self.input_label.setPos(input_x, len(self.modes) + 0.5)
            for row_number, row in enumerate(picture.rows, start=1):
                for pick in row.picks:
                    arrows_x += [input_x, pick.x]
                    arrows_y += [row_number, row_number]
                    picks_x.append(pick.x)
                    picks_y.append(row_number)
                    # Each triangle points the way its mode moved the typed value.
                    symbols.append("t3" if pick.x < input_x else "t2")
                    if pick.text:
                        # Beside the triangle, outward: the two outcomes of a row and the
                        # arrow between them never overlap.
                        texts.append((pick.text, pick.x, row_number, pick.x >= input_x))
            random_rows = [row.mode for row in picture.rows if is_random(row.mode)]
            self.caption.setText(
                f"{picture.format_name}: the typed value (dashed) among its neighbours, "
                "midpoints dashed ticks; each row: where a rounding mode sends it"
                + (
                    f" ({', '.join(random_rows)}: both outcomes, with probabilities)."
                    if random_rows
                    else "."
                )
            )
        elif editor.input is not None and not editor.input.is_finite:
            # Typed ±inf or NaN that this format stands in for with a number (FP4: ±6, -0):
            # "type a value above" would tell the user to do what they did.
            self.input_line.hide()
            self.input_label.setText("")
            self.caption.setText(
                f"{picture.format_name}: the typed {editor.input} has no place on the number "
                "line; every rounding mode gives the current value (red), what the format "
                "has for it."
            )
        else:
            self.input_line.hide()
            self.input_label.setText("")
            self.caption.setText(
                f"{picture.format_name}: the current value (red) and its representable "
                "neighbours; dashed ticks are midpoints. Type a value above to see where each "
                "rounding mode sends it."
            )
        left, right = picture.left, picture.right
        if texts:
            # Room for the words beside the outermost picks, in units at this width.
            width = max(self.small_metrics.horizontalAdvance(f"  {t[0]}") for t in texts)
            per_unit = max(self.plot.vb.width(), 200.0) / (right - left)
            room = 1.25 * width / per_unit
            if any(t[3] for t in texts):
                right = max(right, max(t[1] for t in texts if t[3]) + room)
            if any(not t[3] for t in texts):
                left = min(left, min(t[1] for t in texts if not t[3]) - room)
        for label, (text, x, y, right_side) in zip(self.pick_labels, texts, strict=False):
            label.setText(f"  {text}" if right_side else f"{text}  ")
            label.setAnchor((0.0, 0.5) if right_side else (1.0, 0.5))
            label.setPos(x, y)
        for label in self.pick_labels[len(texts) :]:
            label.setText("")
        self.mode_arrows.setData(arrows_x, arrows_y)
        self.mode_picks.setData(picks_x, picks_y, symbol=symbols)
        self._labels_shown = True
        self.axis_line.setData([left, right], [0, 0])
        self._place_value_labels(picture, left, right)
        self.plot.setXRange(left, right, padding=0)

    def _place_value_labels(self, picture: NumberLinePicture, left: float, right: float) -> None:
        """The value labels for the x range [left, right] on screen. Long values (FP64's
        20 digits) overlap their neighbours' in a window of 1024 px: they take a second line,
        and those that fit on neither are left out."""
        placed = self._value_label_lines(picture, left, right)
        bottom, top, line = self._vertical_layout(2 if 1 in placed.values() else 1)
        for index, label in enumerate(self.value_labels):
            if index in placed:
                label.setText(picture.labels[index])
                label.setPos(picture.xs[index], -0.3 - line * placed[index])
            else:
                label.setText("")
        # Above the top row's own labels (half a line high on either side of the row).
        self.input_label.setPos(self.input_label.pos().x(), len(self.modes) + 1.05 * line)
        self.plot.setYRange(bottom, top, padding=0)

    def _on_x_range_changed(self, _view_box: object, x_range: tuple[float, float]) -> None:
        # Zoomed or panned by the user: the labels are placed again for what is on screen
        # (zoomed out 1e12 times, every neighbour's label was drawn on the same spot).
        if self.picture is not None and self._labels_shown and x_range[1] > x_range[0]:
            self._place_value_labels(self.picture, x_range[0], x_range[1])

    def _value_label_lines(
        self, picture: NumberLinePicture, left: float, right: float
    ) -> dict[int, int]:
        """Which value labels are shown, and on which line (0 or 1): the shown value's
        first, then outward, each where it overlaps no other in pixels and lies inside the
        plot (one past its edge was clipped: FP64-wide "-1.000000000000021…e-9800" read
        "1.000000000000021…e-9800", its minus cut off)."""
        width = self.plot.vb.width()
        if width <= 0:
            width = max(self.plot_widget.width() - 130, 300)
        scale = width / (right - left)
        center = min(range(len(picture.xs)), key=lambda i: abs(picture.xs[i]))
        order = sorted(range(len(picture.xs)), key=lambda i: (abs(i - center), i))
        taken: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
        placed: dict[int, int] = {}
        for index in order:
            middle = (picture.xs[index] - left) * scale
            half = (self.small_metrics.horizontalAdvance(picture.labels[index]) + 16) / 2
            span = (middle - half, middle + half)
            if index != center and (span[0] < 0 or span[1] > width):
                continue
            for line_number in (0, 1):
                if all(span[1] <= a or span[0] >= b for a, b in taken[line_number]):
                    taken[line_number].append(span)
                    placed[index] = line_number
                    break
        return placed

    def _vertical_layout(self, value_lines: int) -> tuple[float, float, float]:
        """(bottom, top, one text line) in y units, from the plot's height in pixels: the
        value labels get their lines below the axis and the typed-value label its line
        above the top row, however short the plot, so that no label covers another."""
        line_px = self.small_metrics.lineSpacing() + 10  # a TextItem pads its text
        height = self.plot.vb.height()
        if height <= 0:  # not laid out yet
            height = self.plot_widget.minimumHeight() - 50
        below, above = value_lines * line_px + 4, 1.6 * line_px
        rows = len(self.modes) + 0.3
        per_unit = max((height - below - above) / rows, 1.0)
        return -0.3 - below / per_unit, len(self.modes) + above / per_unit, line_px / per_unit

    def _on_view_box_resized(self) -> None:
        if self.isVisible() and self.picture is not None:
            self.refresh_now()  # label room is in pixels: lay the rows out again

    def _show_message(self, text: str) -> None:
        self._labels_shown = False
        # No distances to read: the ticks -0.9 … 0.9 under "nan has no place" meant nothing.
        self.plot.getAxis("bottom").setStyle(showValues=False)
        self.plot.setLabel("bottom", "")
        for item in (self.neighbours, self.result, self.mode_picks):
            item.setData([], [])
        self.midpoints.setData([], [])
        self.mode_arrows.setData([], [])
        self.axis_line.setData([], [])
        self.input_line.hide()
        self.input_label.setText("")
        for label in self.value_labels + self.pick_labels:
            label.setText("")
        self.plot.setXRange(-1, 1, padding=0)
        self.plot.setYRange(-1.1, len(self.modes) + 0.9, padding=0)
        self.message.setText(text)
        self.message.setPos(0, 2.5)
        self.caption.setText(
            "NaN and infinity are codes without a position among the finite values."
        )
