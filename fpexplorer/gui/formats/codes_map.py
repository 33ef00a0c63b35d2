"""Every code of a format of 16 bits or fewer as a coloured cell; a click loads the code.

Rows hold the high half of the code, columns the low half (FP16: 256 × 256, FP8:
16 × 16). Colour says the class (zero grey, subnormal purple, inf red, NaN gold) and,
for normal numbers, sign and magnitude (blue positive, orange negative, brighter =
larger). The picture is computed once per format (engine array calls) and cached.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from fpexplorer.formats import CLASSES, FloatFormat
from fpexplorer.formats.decimal import display_decimal
from fpexplorer.gui.formats.plotting import LazyView, style_plot
from fpexplorer.gui.formats.state import FormatsSession, display_text, hex_code
from fpexplorer.gui.theme import best_text_on, plot_colors


def cell_label(fmt: FloatFormat, code: int) -> str:
    """The value written in a cell of the map: "448", "0.00195…", "-inf", "nan"."""
    return display_decimal(
        fmt.to_exact(code), exact_digits=CELL_EXACT_DIGITS, cut_digits=CELL_CUT_DIGITS
    )


MAX_MAP_BITS = 16
MAX_LABELLED_BITS = 8  # FP8 and narrower: 256 cells at most get a value label each
# Cell labels are short: exact up to 4 significant digits, else 3 and "…" (the display rule
# with fewer digits; hover and the read-outs have the rest).
CELL_EXACT_DIGITS = 4
CELL_CUT_DIGITS = 3
_CLASS_RGB = {
    "zero": (140, 140, 140),
    "inf": (217, 70, 59),
    "nan": (201, 162, 39),
}
_POSITIVE = (np.array([25, 50, 110]), np.array([140, 215, 255]))
_NEGATIVE = (np.array([95, 45, 10]), np.array([255, 190, 110]))
_SUBNORMAL = (np.array([70, 30, 95]), np.array([190, 130, 225]))


def map_shape(fmt: FloatFormat) -> tuple[int, int]:
    """(rows, columns) of the map: columns take the low half of the bits."""
    column_bits = (fmt.width + 1) // 2
    return 1 << (fmt.width - column_bits), 1 << column_bits


@lru_cache(maxsize=16)
def code_image(fmt: FloatFormat) -> np.ndarray:
    """RGBA image (rows, columns, 4) of every code of a small format."""
    rows, columns = map_shape(fmt)
    dtype = np.uint8 if fmt.width <= 8 else np.uint16
    codes = np.arange(rows * columns, dtype=np.uint32).astype(dtype)
    kinds = fmt.classify_array(codes)
    rgb = np.zeros((codes.size, 3), dtype=float)
    normal_index = CLASSES.index("normal")
    subnormal_index = CLASSES.index("subnormal")
    finite = (kinds == normal_index) | (kinds == subnormal_index)
    # Brightness from the code without its sign bit: codes order magnitudes, and it grows
    # like log2 |x| (the exponent field sits above the fraction). float64 values do not
    # serve: e15m0's or e11m4's run past float64's range, and the map was one colour.
    sign_bit = 1 << (fmt.width - 1) if fmt.signed else 0
    magnitude = (codes.astype(np.int64) & ~sign_bit).astype(float)
    negative = (codes.astype(np.int64) & sign_bit) != 0
    if finite.any():
        low, high = magnitude[finite].min(), magnitude[finite].max()
        span = high - low if high > low else 1.0
        level = np.clip((magnitude - low) / span, 0.0, 1.0)[:, None]
    else:
        level = np.zeros((codes.size, 1))
    for ramp, mask in (
        (_POSITIVE, (kinds == normal_index) & ~negative),
        (_NEGATIVE, (kinds == normal_index) & negative),
        (_SUBNORMAL, kinds == subnormal_index),
    ):
        dark, bright = ramp
        rgb[mask] = (dark + (bright - dark) * level)[mask]
    for name, color in _CLASS_RGB.items():
        rgb[kinds == CLASSES.index(name)] = color
    rgba = np.empty((codes.size, 4), dtype=np.uint8)
    rgba[:, :3] = rgb.round().astype(np.uint8)
    rgba[:, 3] = 255
    return rgba.reshape(rows, columns, 4)


class CodesMap(LazyView):
    """All codes of the active editor's format (≤ 16 bits); hover reads, click loads."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.hover = QLabel(" ")
        self.hover.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setMenuEnabled(False)
        self.plot_widget.setMinimumHeight(160)
        plot = self.plot_widget.getPlotItem()
        plot.hideButtons()
        plot.invertY(True)
        plot.setAspectLocked(True)
        self.plot = plot
        self.image = pg.ImageItem(axisOrder="row-major")
        plot.addItem(self.image)
        colors = plot_colors()
        # A ring of fixed screen size finds the code in a 256 x 256 map; a square outlines
        # the cell itself when cells are large.
        self.marker = pg.ScatterPlotItem(
            symbol="s",
            size=1.0,
            pxMode=False,
            brush=None,
            pen=pg.mkPen(colors.foreground, width=3),
        )
        self.ring = pg.ScatterPlotItem(
            symbol="o",
            size=18,
            brush=None,
            pen=pg.mkPen(colors.accent, width=3),
        )
        plot.addItem(self.marker)
        plot.addItem(self.ring)
        self.message = pg.TextItem(anchor=(0.5, 0.5), color=colors.foreground)
        plot.addItem(self.message)
        self._shown: FloatFormat | None = None
        # One label per cell of a format of up to MAX_LABELLED_BITS bits, shown where it fits.
        self.cell_font = QFont()
        self.cell_font.setPointSizeF(max(self.cell_font.pointSizeF() * 0.8, 6.5))
        self.cell_metrics = QFontMetrics(self.cell_font)
        self.cell_labels: list[pg.TextItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.caption)
        layout.addWidget(self.plot_widget, 1)
        layout.addWidget(self.hover)
        self.plot_widget.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.plot_widget.scene().sigMouseMoved.connect(self._on_scene_moved)
        session.changed.connect(self.mark_stale)
        self.plot.vb.sigResized.connect(self._fit_cell_labels)
        self.plot.vb.sigRangeChanged.connect(self._fit_cell_labels)
        self.restyle()

    def restyle(self) -> None:
        colors = plot_colors()
        self.plot_widget.setBackground(colors.background)
        style_plot(self.plot)
        self.marker.setPen(pg.mkPen(colors.foreground, width=3))
        self.message.setColor(colors.foreground)

    def render_view(self) -> None:
        editor = self.session.active
        fmt = editor.format
        if fmt.width > MAX_MAP_BITS:
            self._shown = None
            self.image.clear()
            self.marker.setData([], [])
            self.ring.setData([], [])
            self.message.setText(
                f"{fmt.name} has {fmt.width} bits: {1 << fmt.width:,} codes are too many "
                f"to draw. Pick a format of {MAX_MAP_BITS} bits or fewer (FP16, BF16, FP8 …)."
            )
            self.message.setPos(0, 0)
            self.plot.setRange(xRange=(-1, 1), yRange=(-1, 1), padding=0)
            self.caption.setText("The all-codes map shows formats of up to 16 bits.")
            self._set_cell_labels(None)
            return
        rows, columns = map_shape(fmt)
        if fmt != self._shown:
            self._shown = fmt
            self.message.setText("")
            self.image.setImage(code_image(fmt), autoLevels=False, levels=(0, 255))
            self.image.setRect(0, 0, columns, rows)
            self.plot.setRange(xRange=(0, columns), yRange=(0, rows), padding=0.02)
            self._set_ticks(fmt, rows, columns)
            self._set_cell_labels(fmt)
            if (columns.bit_length() - 1) % 4 == 0:
                how = "the row's hex digits then the column's spell the code"
            else:  # the low bits are not whole hex digits (FP4: 2 of 4; e5m5: 6 of 11)
                how = f"code = row × {columns} + column"
            self.caption.setText(
                f"All {1 << fmt.width:,} codes of {fmt.name} ({rows} rows × {columns} "
                f"columns: {how}). Blue: "
                "positive, orange: negative (brighter = larger), purple: subnormal, grey: zero, "
                "red: inf, gold: NaN. Cells show their values where they fit. Click a cell to "
                "load it."
            )
        row, column = divmod(editor.code, columns)
        self.marker.setData([column + 0.5], [row + 0.5])
        self.ring.setData([column + 0.5], [row + 0.5])

    def _set_cell_labels(self, fmt: FloatFormat | None) -> None:
        """A label per cell for narrow formats (created once per format), none otherwise."""
        wanted = 0 if fmt is None or fmt.width > MAX_LABELLED_BITS else 1 << fmt.width
        while len(self.cell_labels) < wanted:
            label = pg.TextItem(anchor=(0.5, 0.5))
            label.setFont(self.cell_font)
            self.plot.addItem(label)
            self.cell_labels.append(label)
        image = code_image(fmt) if fmt is not None and wanted else None
        for code, label in enumerate(self.cell_labels):
            if code >= wanted or fmt is None or image is None:
                label.setText("")
                label.hide()
                continue
            row, column = divmod(code, map_shape(fmt)[1])
            red, green, blue = (int(c) for c in image[row, column, :3])
            label.setText(cell_label(fmt, code))
            label.setColor(best_text_on(QColor(red, green, blue)))
            label.setPos(column + 0.5, row + 0.5)
        self._fit_cell_labels()

    def _fit_cell_labels(self) -> None:
        """Show each cell's label only where its text fits inside the cell on screen."""
        fmt = self._shown
        if fmt is None or fmt.width > MAX_LABELLED_BITS:
            return
        origin = self.plot.vb.mapViewToScene(QPointF(0, 0))
        corner = self.plot.vb.mapViewToScene(QPointF(1, 1))
        cell_width = abs(corner.x() - origin.x()) - 4
        cell_height = abs(corner.y() - origin.y()) - 2
        fits_height = self.cell_metrics.height() <= cell_height
        for label in self.cell_labels[: 1 << fmt.width]:
            text = label.textItem.toPlainText()
            fits = fits_height and self.cell_metrics.horizontalAdvance(text) <= cell_width
            label.setVisible(fits)

    def _set_ticks(self, fmt: FloatFormat, rows: int, columns: int) -> None:
        """Hex ticks at cell centres: row label then column label spell the code."""
        column_digits = (((fmt.width + 1) // 2) + 3) // 4
        row_digits = max((fmt.width - (fmt.width + 1) // 2 + 3) // 4, 1)
        column_step = 1 if columns <= 16 else columns // 8
        row_step = 1 if rows <= 16 else rows // 8
        self.plot.getAxis("bottom").setTicks(
            [
                [
                    (column + 0.5, f"{column:0{column_digits}X}")
                    for column in range(0, columns, column_step)
                ]
            ]
        )
        self.plot.getAxis("left").setTicks(
            [[(row + 0.5, f"{row:0{row_digits}X}") for row in range(0, rows, row_step)]]
        )
        self.plot.setLabel("bottom", f"low {(fmt.width + 1) // 2} bits of the code (hex)")
        self.plot.setLabel("left", f"high {fmt.width - (fmt.width + 1) // 2} bits (hex)")

    def _code_at(self, scene_pos: QPointF) -> int | None:
        fmt = self._shown
        if fmt is None or not self.plot.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.plot.vb.mapSceneToView(scene_pos)
        rows, columns = map_shape(fmt)
        column, row = int(np.floor(point.x())), int(np.floor(point.y()))
        if 0 <= column < columns and 0 <= row < rows:
            return row * columns + column
        return None

    def _on_scene_clicked(self, event: object) -> None:
        code = self._code_at(event.scenePos())  # type: ignore[attr-defined]
        if code is not None and self._shown is not None:
            self.session.load(self._shown, code)

    def _on_scene_moved(self, scene_pos: QPointF) -> None:
        code = self._code_at(scene_pos)
        fmt = self._shown
        if code is None or fmt is None:
            return
        self.hover.setText(
            f"{hex_code(fmt, code)} = {display_text(fmt, code)} ({fmt.classify(code)})"
        )
