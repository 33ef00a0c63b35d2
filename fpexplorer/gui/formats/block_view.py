"""The block editor view: one block of an MX/NVFP4 format as bars, its scale's bits, every
element's code, bits and error, and (for a loaded .npy tensor) the per-block error histogram.

It renders a `BlockEditorState` and hands every user action to it in one line; it holds no
numbers of its own. Drag a bar up or down to change that element's input value; toggle the
scale's bits to force a scale and watch every element move.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QPointF, Qt, QThreadPool, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import BARE_HEX_RULE
from fpexplorer.formats.decimal import approximate_decimal, display_decimal
from fpexplorer.gui.formats.bit_row import BitRow
from fpexplorer.gui.formats.block_state import (
    FLOAT32,
    BlockEditorState,
    BlockReadout,
    TensorAnalysis,
    block_format_names,
    rounding_modes_for,
    scale_rules_for,
)
from fpexplorer.gui.formats.clipboard import CopyValue, set_copy_value
from fpexplorer.gui.formats.plotting import LazyView, style_plot
from fpexplorer.gui.formats.state import FormatsSession
from fpexplorer.gui.formats.text import keep_numbers_whole
from fpexplorer.gui.theme import class_color, plot_colors, role_color

ELEMENT_COLUMNS = ("#", "input", "value", "error", "code", "bits", "element", "")
INPUT_COLUMN = 1
BITS_COLUMN = 5
STATUS_COLUMN = 7
WORST_COLUMNS = ("block", "SQNR", "max |error|", "amax")
SCALE_RULE_HELP = {
    "floor": "OCP MX v1.0: shared exponent = floor(log2 amax) − emax of the element",
    "ceil": "ceil(log2 amax) − emax: never saturates, may waste the top binade",
    "even": "amax rounded to the element's precision first (torchao's EVEN)",
    "rceil": "ceil(log2(amax / max_elem)): Transformer Engine and cuBLAS",
    "nearest": "NVFP4: (amax / 6) / per-tensor scale rounded to the nearest E4M3",
}
BAR_WIDTH = 0.8
PLOT_MIN_HEIGHT = 150  # the bars stay draggable; a shorter window scrolls
VALUE_BAR_WIDTH = 0.36
EDGE_SHARE = 0.05  # a drag this close to the plot's top or bottom grows the range
DRAG_REACH = 0.45  # a press this close to a bar's centre (in elements) grabs it

# The class whose colour marks an input bar that saturates, is not finite or has a NaN scale.
SPECIAL_INPUT_CLASS = "nan"


class BarDragViewBox(pg.ViewBox):  # type: ignore[misc]  # pyqtgraph is untyped
    """A ViewBox whose left-button drags move the bar under the cursor (no panning).

    `on_drag(index, y)` is called on every move of a drag that started on a bar; the range
    stays still while dragging (else the bar would chase the cursor), grows when the drag
    reaches an edge, and fits the bars when it ends.
    """

    def __init__(self) -> None:
        super().__init__(enableMenu=False)
        self.bar_count = 0
        self.on_drag: Any = None
        self.dragged: int | None = None
        self.setMouseEnabled(x=False, y=False)

    def bar_at(self, scene_x: float) -> int | None:
        index = round(scene_x)
        if 0 <= index < self.bar_count and abs(scene_x - index) <= DRAG_REACH:
            return index
        return None

    def mouseDragEvent(self, ev: Any, axis: int | None = None) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        if ev.isStart():
            start = self.mapToView(ev.buttonDownPos())
            self.dragged = self.bar_at(start.x())
            if self.dragged is not None:
                self.disableAutoRange()
        if self.dragged is None:
            ev.ignore()
            return
        ev.accept()
        y = self.mapToView(ev.pos()).y()
        index = self.dragged
        if not ev.isFinish():
            self._grow_at_edges(y)
        if ev.isFinish():
            self.dragged = None
        if self.on_drag is not None:
            self.on_drag(index, y)
        if ev.isFinish():
            self.enableAutoRange(y=True)

    def _grow_at_edges(self, y: float) -> None:
        """A drag pushed to the top or bottom edge doubles the range that way, so that a
        bar can be pulled out to an outlier many times the block's amax."""
        low, high = self.viewRange()[1]
        span = high - low
        if y > high - EDGE_SHARE * span:
            self.setYRange(low, low + 2 * span, padding=0)
        elif y < low + EDGE_SHARE * span:
            self.setYRange(high - 2 * span, high, padding=0)


class _WorkerResults(QObject):
    """Runs the state's slow work (quantizing a whole tensor) on the thread pool and hands
    each outcome back on the GUI thread, where the state and the widgets live."""

    arrived = Signal(object, object)  # done callback, outcome

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.running = 0
        self.arrived.connect(self._on_arrived, Qt.ConnectionType.QueuedConnection)

    def run(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        self.running += 1

        def job() -> None:
            outcome = _outcome(work)
            try:
                self.arrived.emit(done, outcome)
            except RuntimeError:
                pass  # the view was closed meanwhile: nobody waits for this outcome

        QThreadPool.globalInstance().start(job)

    def _on_arrived(self, done: Callable[[Any], None], outcome: Any) -> None:
        self.running -= 1
        done(outcome)


def _outcome(work: Callable[[], Any]) -> Any:
    try:
        return work()
    except ValueError as error:
        return error


class BlockEditorView(LazyView):
    """The block editor: pickers and loaders on top, the scale bit editors and the bars on
    the left, the elements (or the loaded tensor's block errors) on the right."""

    def __init__(
        self,
        session: FormatsSession | None = None,
        parent: QWidget | None = None,
        state: BlockEditorState | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state or BlockEditorState()
        self._updating = False

        # -- pickers and loaders ------------------------------------------------------------
        self.format_picker = QComboBox()
        for name in block_format_names():
            self.format_picker.addItem(name, name)
        self.format_picker.setToolTip("Block format: element format, block size, scale format")
        self.rule_picker = QComboBox()
        self.rule_picker.setToolTip("How the block scale is chosen from the block's amax")
        self.rounding_picker = QComboBox()
        self.rounding_picker.setToolTip("How elements round (the specs: nearest_even)")
        self.values_field = QLineEdit()
        self.values_field.setPlaceholderText(
            "values, e.g. 0.1, -2.5, 1e-3, 1/3 … (up to a block), Enter loads them"
        )
        self.values_field.setToolTip(
            "Numbers separated by commas or spaces: 0.1, -2.5e-3, 1/3, 0x1.8p3 (hex float), inf, "
            f"nan. Codes: {BARE_HEX_RULE}; here no one format is selected, so name it."
        )
        self.values_field.setClearButtonEnabled(True)
        self.load_button = QPushButton("Load")
        self.load_button.setToolTip("Load the typed values as the block")
        self.paste_button = QPushButton("Paste")
        self.paste_button.setToolTip("Load the block from the clipboard's text")
        self.open_button = QPushButton("Open .npy…")
        self.open_button.setToolTip(
            "Quantize a whole tensor from a .npy file (blocks along its last axis): "
            "per-block errors, the worst blocks, and one block in the editor"
        )
        self.block_spin = QSpinBox()
        self.block_spin.setPrefix("block ")
        self.block_spin.setToolTip("Which block of the loaded tensor is in the editor")
        self.source = QLabel()
        self.source.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message = QLabel()
        self.message.setObjectName("blockProblem")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        pickers = QHBoxLayout()
        pickers.setContentsMargins(0, 0, 0, 0)
        pickers.addWidget(QLabel("Block format"))
        pickers.addWidget(self.format_picker)
        pickers.addWidget(QLabel("Scale rule"))
        pickers.addWidget(self.rule_picker)
        pickers.addWidget(QLabel("Rounding"))
        pickers.addWidget(self.rounding_picker)
        pickers.addWidget(self.source, 1)
        loaders = QHBoxLayout()
        loaders.setContentsMargins(0, 0, 0, 0)
        loaders.addWidget(self.values_field, 1)
        loaders.addWidget(self.load_button)
        loaders.addWidget(self.paste_button)
        loaders.addWidget(self.open_button)
        loaders.addWidget(self.block_spin)

        # -- scale bit editors ----------------------------------------------------------------
        self.scale_bits = BitRow(window_shortcuts=False)  # the keys copy the editor's code
        self.scale_label = QLabel()
        self.scale_label.setTextFormat(Qt.TextFormat.RichText)
        self.scale_label.setWordWrap(True)
        self.rule_scale_button = QPushButton("Scale by rule")
        self.rule_scale_button.setToolTip("Drop the forced scale: the scale rule picks it again")
        self.scale_box = QGroupBox("Block scale")
        scale_layout = QHBoxLayout(self.scale_box)
        scale_layout.setContentsMargins(6, 0, 6, 2)
        self.scale_bits.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        scale_layout.addWidget(self.scale_bits)
        scale_layout.addWidget(self.scale_label, 1)
        scale_layout.addWidget(self.rule_scale_button)
        self.tensor_bits = BitRow(window_shortcuts=False)  # the keys copy the editor's code
        self.tensor_bits.set_format(FLOAT32)
        self.tensor_label = QLabel()
        self.tensor_label.setWordWrap(True)
        self.tensor_reset_button = QPushButton("Default")
        self.tensor_reset_button.setToolTip(
            "The per-tensor scale from the loaded tensor's amax (or this block's)"
        )
        self.tensor_box = QGroupBox("Per-tensor scale (FP32)")
        tensor_layout = QVBoxLayout(self.tensor_box)
        tensor_layout.setContentsMargins(6, 0, 6, 2)
        tensor_layout.setSpacing(0)
        tensor_head = QHBoxLayout()
        tensor_head.addWidget(self.tensor_label, 1)
        tensor_head.addWidget(self.tensor_reset_button)
        tensor_layout.addLayout(tensor_head)
        tensor_layout.addWidget(self.tensor_bits)

        # -- bars ---------------------------------------------------------------------------
        self.view_box = BarDragViewBox()
        self.view_box.on_drag = self._on_bar_dragged
        self.plot_widget = pg.PlotWidget(viewBox=self.view_box)
        self.plot_widget.setMinimumHeight(PLOT_MIN_HEIGHT)
        # Its size hint (a 640×480 picture) would make the left column scroll even when
        # the window is tall enough: it takes the height there is, at least the minimum.
        self.plot_widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.plot: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=False, y=True, alpha=0.2)
        self.plot.getAxis("left").setWidth(56)
        self.input_bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH)
        self.value_bars = pg.BarGraphItem(x=[], height=[], width=VALUE_BAR_WIDTH)
        self.plot.addItem(self.input_bars)
        self.plot.addItem(self.value_bars)
        # ±max element × scale as two segments of one curve in data coordinates: an
        # InfiniteLine at 2.8e-30 was drawn at 0 (Qt finds the view's transform at that
        # scale not invertible), where the bars, drawn like this, stay right.
        self.limit_lines = pg.PlotDataItem(connect="pairs")
        self.plot.addItem(self.limit_lines)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.setSpacing(2)
        left_layout.addWidget(self.scale_box)
        left_layout.addWidget(self.tensor_box)
        left_layout.addWidget(self.legend)
        left_layout.addWidget(self.plot_widget, 1)
        left_layout.addWidget(self.summary)

        # -- elements table and the tensor tab --------------------------------------------------
        self.table = QTableWidget(0, len(ELEMENT_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(ELEMENT_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setToolTip("Double-click an input to type a new value for that element")
        _compact_rows(self.table)
        header = self.table.horizontalHeader()
        # Columns are fitted once per render (resizeColumnsToContents): ResizeToContents
        # would re-measure the column on each of the 256 cell updates of a scale toggle.
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.tensor_summary = QLabel("Open a .npy file to see the error of every block.")
        self.tensor_summary.setWordWrap(True)
        self.tensor_summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.histogram_widget = pg.PlotWidget()
        self.histogram_widget.setMinimumHeight(100)
        self.histogram: pg.PlotItem = self.histogram_widget.getPlotItem()
        self.histogram.hideButtons()
        self.histogram.setMenuEnabled(False)
        self.histogram.setMouseEnabled(x=False, y=False)
        self.histogram.setLabel("bottom", "per-block SQNR (dB)")
        self.histogram.setLabel("left", "blocks")
        self.histogram_bars = pg.BarGraphItem(x0=[], x1=[], height=[])
        self.histogram.addItem(self.histogram_bars)
        self.worst_table = QTableWidget(0, len(WORST_COLUMNS))
        self.worst_table.setHorizontalHeaderLabels(list(WORST_COLUMNS))
        self.worst_table.verticalHeader().setVisible(False)
        self.worst_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.worst_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.worst_table.setToolTip("The blocks with the lowest SQNR; click one to edit it")
        _compact_rows(self.worst_table)
        self.worst_table.setMinimumWidth(self.fontMetrics().horizontalAdvance("0" * 44))
        self.worst_table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        # Not stretched: a stretched last column (amax) gets what room is left and Qt cuts
        # its numbers with its own "…", which reads as the display rule's mark.
        self.worst_table.horizontalHeader().setStretchLastSection(False)
        tensor_page = QWidget()
        tensor_layout = QVBoxLayout(tensor_page)
        tensor_layout.setContentsMargins(2, 2, 2, 2)
        tensor_layout.addWidget(self.tensor_summary)
        tensor_split = QSplitter(Qt.Orientation.Horizontal)
        tensor_split.addWidget(self.histogram_widget)
        tensor_split.addWidget(self.worst_table)
        tensor_split.setStretchFactor(0, 1)
        tensor_split.setStretchFactor(1, 1)
        tensor_layout.addWidget(tensor_split, 1)
        self.side_tabs = QTabWidget()
        self.side_tabs.setDocumentMode(True)
        self.side_tabs.addTab(self.table, "Elements")
        self.side_tabs.addTab(tensor_page, "Tensor")

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        # A short window scrolls the scale editors and the bars rather than squeeze them
        # into each other (NVFP4 has two scale editors).
        self.left_scroll = QScrollArea()
        self.left_scroll.setWidgetResizable(True)
        self.left_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.left_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.left_scroll.setWidget(left)
        self.splitter.addWidget(self.left_scroll)
        self.splitter.addWidget(self.side_tabs)
        self.splitter.setStretchFactor(0, 4)
        self.splitter.setStretchFactor(1, 5)
        self.splitter.setSizes([400, 500])  # scaled to the width: bars 4/9, table 5/9
        self.splitter.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(pickers)
        layout.addLayout(loaders)
        layout.addWidget(self.message)
        layout.addWidget(self.splitter, 1)

        # -- hand-offs (one line each) ---------------------------------------------------------
        state = self.state
        self.format_picker.activated.connect(
            lambda _: state.set_format(self.format_picker.currentData())
        )
        self.rule_picker.activated.connect(
            lambda _: state.set_scale_rule(self.rule_picker.currentData())
        )
        self.rounding_picker.activated.connect(
            lambda _: state.set_rounding(self.rounding_picker.currentData())
        )
        self.values_field.returnPressed.connect(self._on_load_clicked)
        self.load_button.clicked.connect(self._on_load_clicked)
        self.paste_button.clicked.connect(self.paste_block)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.block_spin.editingFinished.connect(
            lambda: state.load_tensor_block(self.block_spin.value())
        )
        self.scale_bits.bit_toggled.connect(state.toggle_scale_bit)
        self.scale_bits.bit_painted.connect(state.paint_scale_bit)
        self.scale_bits.step_requested.connect(state.step_scale)
        self.rule_scale_button.clicked.connect(state.use_rule_scale)
        self.tensor_bits.bit_toggled.connect(state.toggle_tensor_scale_bit)
        self.tensor_bits.bit_painted.connect(state.paint_tensor_scale_bit)
        self.tensor_reset_button.clicked.connect(state.use_block_tensor_scale)
        self.table.itemChanged.connect(self._on_table_item_changed)
        self.worst_table.cellClicked.connect(
            lambda row, _: state.load_tensor_block(self._worst_block(row))
        )
        state.changed.connect(self.mark_stale)
        self._worker_results = _WorkerResults(self)
        state.runner = self._worker_results.run
        self._shown_tensor: TensorAnalysis | None = None
        self.restyle()

    # -- actions that need Qt (clipboard, file dialog) -----------------------------------------
    def paste_block(self) -> None:
        """Load the block from the clipboard's text."""
        self.state.load_text(QGuiApplication.clipboard().text(), source="clipboard")

    def open_npy(self, path: str) -> bool:
        return self.state.load_npy(path, block=0)

    def take_dropped_files(self, paths: list[str]) -> bool:
        """A .npy file dropped on the editor loads as Open .npy… loads it (FileDropTaker)."""
        if len(paths) != 1 or not paths[0].lower().endswith(".npy"):
            return False
        self.open_npy(paths[0])
        return True

    def _on_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a tensor", "", "NumPy arrays (*.npy)")
        if path:
            self.open_npy(path)

    def _on_load_clicked(self) -> None:
        self.state.load_text(self.values_field.text(), source="typed")

    def _on_bar_dragged(self, index: int, y: float) -> None:
        self.state.drag_element(index, y)

    def _on_table_item_changed(self, item: QTableWidgetItem) -> None:
        if not self._updating and item.column() == INPUT_COLUMN:
            self.state.set_element(item.row(), item.text())

    def _worst_block(self, row: int) -> int:
        tensor = self.state.tensor
        return tensor.worst[row].index if tensor is not None and row < len(tensor.worst) else -1

    # -- rendering -------------------------------------------------------------------------------
    def restyle(self) -> None:
        colors = plot_colors()
        for widget in (self.plot_widget, self.histogram_widget):
            widget.setBackground(colors.background)
        style_plot(self.plot)
        style_plot(self.histogram)
        self.limit_lines.setPen(pg.mkPen(colors.accent, width=1, style=Qt.PenStyle.DashLine))
        self.histogram_bars.setOpts(brush=class_color("normal"), pen=None)
        self.legend.setText(
            f"<span style='color:{_hex(class_color('normal'))}'>■</span> input &nbsp; "
            f"<span style='color:{_hex(class_color(SPECIAL_INPUT_CLASS))}'>■</span> input "
            "saturated, non-finite or under a NaN scale &nbsp; "
            f"<span style='color:{_hex(colors.accent)}'>■</span> quantized &nbsp; "
            f"<span style='color:{_hex(colors.accent)}'>- -</span> ±max element × scale "
            "&nbsp; <i>drag a bar to change its input</i>"
        )
        palette = self.message.palette()
        palette.setColor(QPalette.ColorRole.WindowText, role_color("error"))
        self.message.setPalette(palette)
        self.mark_stale()

    def render_view(self) -> None:
        state = self.state
        readout = state.readout()
        fmt = readout.format
        self._updating = True
        try:
            self._render_pickers()
            self.source.setText(f"values: {state.source}")
            message = state.problem or state.note or state.busy or ""
            self.message.setText(message)
            self.message.setVisible(bool(message))
            self._render_scales(readout)
            self._render_bars(readout)
            self._render_table(readout)
            self._render_tensor(state.tensor)
            saturated = f", {readout.saturated} saturated" if readout.saturated else ""
            flushed = f", {readout.flushed} flushed to zero" if readout.flushed else ""
            self.summary.setText(
                keep_numbers_whole(
                    f"amax {readout.amax_text} · holds {readout.limit_text} · max |error| "
                    f"{readout.max_abs_error_text} · SQNR {readout.sqnr_text}{saturated}"
                    f"{flushed} · {fmt.bits_per_element:g} bits per element"
                )
            )
        finally:
            self._updating = False

    def _render_pickers(self) -> None:
        state = self.state
        fmt = state.format
        self.format_picker.setCurrentIndex(max(self.format_picker.findData(fmt.name), 0))
        rules = scale_rules_for(fmt)
        if [self.rule_picker.itemData(i) for i in range(self.rule_picker.count())] != list(rules):
            self.rule_picker.clear()
            for rule in rules:
                self.rule_picker.addItem(rule, rule)
                self.rule_picker.setItemData(
                    self.rule_picker.count() - 1,
                    SCALE_RULE_HELP.get(rule, ""),
                    Qt.ItemDataRole.ToolTipRole,
                )
        self.rule_picker.setCurrentIndex(max(self.rule_picker.findData(fmt.scale_rule), 0))
        modes = rounding_modes_for(fmt)
        shown = [self.rounding_picker.itemData(i) for i in range(self.rounding_picker.count())]
        if shown != list(modes):
            self.rounding_picker.clear()
            for mode in modes:
                self.rounding_picker.addItem(mode, mode)
        self.rounding_picker.setCurrentIndex(max(self.rounding_picker.findData(state.rounding), 0))

    def _render_scales(self, readout: BlockReadout) -> None:
        scale_format = readout.scale_format
        self.scale_box.setTitle(f"Block scale ({scale_format.name})")
        self.scale_bits.set_format(scale_format)
        self.scale_bits.set_code(readout.scale_code)
        hex_code = scale_format.code_to_hex(readout.scale_code)
        text = f"<b>{readout.scale_text}</b> &nbsp; <code>{hex_code}</code>"
        if readout.scale_forced:
            text += f" &nbsp; forced (the {readout.format.scale_rule} rule gives "
            text += f"{readout.rule_scale_text})"
        else:
            text += f" &nbsp; by the {readout.format.scale_rule} rule"
        self.scale_label.setText(keep_numbers_whole(text))
        self.rule_scale_button.setEnabled(readout.scale_forced)
        has_tensor_scale = readout.tensor_scale_code is not None
        self.tensor_box.setVisible(has_tensor_scale)
        if readout.tensor_scale_code is not None:
            self.tensor_bits.set_code(readout.tensor_scale_code)
            self.tensor_label.setText(
                keep_numbers_whole(
                    f"{readout.tensor_scale_text}  "
                    f"{FLOAT32.code_to_hex(readout.tensor_scale_code)}  "
                    f"{readout.tensor_scale_source}"
                )
            )

    def _render_bars(self, readout: BlockReadout) -> None:
        count = len(readout.rows)
        xs = np.arange(count, dtype=float)
        limit = float(readout.limit) if readout.limit is not None else math.nan
        top = _bar_top(readout, limit)
        inputs = np.array([_bar_height(row.input, top) for row in readout.rows])
        values = np.array([_bar_height(row.value, top) for row in readout.rows])
        colors = plot_colors()
        normal = class_color("normal")
        # Not the quantized bars' red: a saturated input drawn in it read as its own result.
        special = class_color(SPECIAL_INPUT_CLASS)
        brushes = [
            special
            if row.status in ("saturated", "NaN scale") or not row.input.is_finite
            else normal
            for row in readout.rows
        ]
        self.input_bars.setOpts(x=xs, height=inputs, width=BAR_WIDTH, brushes=brushes, pen=None)
        self.value_bars.setOpts(
            x=xs, height=values, width=VALUE_BAR_WIDTH, brush=colors.accent, pen=None
        )
        self.view_box.bar_count = count
        left, right = -0.6, max(count, 1) - 0.4
        if math.isfinite(limit):
            self.limit_lines.setData([left, right, left, right], [limit, limit, -limit, -limit])
        else:
            self.limit_lines.setData([], [])
        self.plot.setXRange(left, right, padding=0)
        if self.view_box.dragged is None:
            self.view_box.enableAutoRange(y=True)
        self.plot.getAxis("bottom").setTicks(
            [[(i, str(i)) for i in range(0, count, 4 if count > 16 else 2)]]
        )

    def _render_table(self, readout: BlockReadout) -> None:
        table = self.table
        table.setUpdatesEnabled(False)
        try:
            self._fill_table(readout)
        finally:
            table.resizeColumnsToContents()
            table.setUpdatesEnabled(True)

    def _fill_table(self, readout: BlockReadout) -> None:
        table = self.table
        if table.rowCount() != len(readout.rows):
            table.setRowCount(len(readout.rows))
        error_color = role_color("error")
        for row in readout.rows:
            texts = (
                str(row.index),
                row.input_text,
                row.value_text,
                row.error_text,
                row.code_hex,
                row.bits,
                row.element_text,
                row.status,
            )
            # A copy gives the numbers in full, not their cut display.
            numbers: dict[int, CopyValue | None] = {1: row.input, 2: row.value, 3: row.error}
            for column, text in enumerate(texts):
                item = table.item(row.index, column)
                if item is None:
                    item = QTableWidgetItem()
                    if column != INPUT_COLUMN:
                        item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                    if column not in (BITS_COLUMN, STATUS_COLUMN):
                        item.setTextAlignment(
                            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                        )
                    table.setItem(row.index, column, item)
                if item.text() != text:
                    item.setText(text)
                set_copy_value(item, numbers.get(column))
                if column == STATUS_COLUMN:
                    foreground = error_color if text in ("saturated", "NaN scale") else None
                    item.setForeground(foreground or table.palette().color(QPalette.ColorRole.Text))

    def _render_tensor(self, tensor: TensorAnalysis | None) -> None:
        state = self.state
        loaded = state.loaded
        self.block_spin.setEnabled(loaded is not None)
        if loaded is None:
            self.block_spin.setRange(0, 0)
        else:
            self.block_spin.setRange(0, loaded.block_count(state.format.block_size) - 1)
            if state.tensor_block is not None:
                self.block_spin.setValue(state.tensor_block)
        self.side_tabs.setTabEnabled(1, loaded is not None)
        if tensor is None:
            if self._shown_tensor is not None:
                self.histogram_bars.setOpts(x0=[], x1=[], height=[])
                self.worst_table.setRowCount(0)
                self._shown_tensor = None
            self.tensor_summary.setText(
                state.busy or "Open a .npy file to see the error of every block."
            )
            return
        if tensor is self._shown_tensor:
            return
        if self._shown_tensor is None:
            self.side_tabs.setCurrentIndex(1)
        self._shown_tensor = tensor
        left_out = []
        if tensor.exact_blocks:
            left_out.append(f"{tensor.exact_blocks} blocks with no error (SQNR ∞)")
        if tensor.nan_blocks:
            left_out.append(f"{tensor.nan_blocks} blocks with a NaN scale")
        extra = f" Not in the histogram: {', '.join(left_out)}." if left_out else ""
        self.tensor_summary.setText(keep_numbers_whole(tensor.summary + "." + extra))
        edges = tensor.histogram_edges
        if len(edges):
            self.histogram_bars.setOpts(
                x0=edges[:-1], x1=edges[1:], height=tensor.histogram_counts.astype(float)
            )
        else:
            self.histogram_bars.setOpts(x0=[], x1=[], height=[])
        self.histogram.enableAutoRange()
        table = self.worst_table
        table.setRowCount(len(tensor.worst))
        for row, worst in enumerate(tensor.worst):
            sqnr = "NaN scale" if worst.sqnr_db == -math.inf else f"≈ {worst.sqnr_db:.1f} dB"
            texts = (
                str(worst.index),
                sqnr,
                _approx(worst.max_abs_error),
                # Nine digits at most (cut and marked by the display rule): the column stays
                # narrow enough to show whole beside the histogram.
                display_decimal(_fraction(worst.amax), exact_digits=9)
                if math.isfinite(worst.amax)
                else "inf/NaN",
            )
            for column, text in enumerate(texts):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                table.setItem(row, column, item)

    def bar_point(self, index: int, y: float) -> QPointF:
        """Where bar `index` at height `y` is on the plot widget (tests drag from there)."""
        scene = self.view_box.mapViewToScene(QPointF(index, y))
        point: QPointF = self.plot_widget.mapFromScene(scene).toPointF()
        return point


def _compact_rows(table: QTableWidget) -> None:
    """Rows one line high: a block of 32 elements should mostly fit on screen."""
    header = table.verticalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    header.setDefaultSectionSize(table.fontMetrics().height() + 6)


def _bar_top(readout: BlockReadout, limit: float) -> float:
    """The height ±inf bars stand above: the block's limit, or under a NaN scale (no limit)
    the largest finite input, so that inf never looks smaller than a finite element (it
    was drawn at 1.2 whatever the others were: below an input of 2)."""
    if math.isfinite(limit) and limit > 0:
        return limit
    heights = [abs(row.input.to_float()) for row in readout.rows if row.input.is_finite]
    return max((h for h in heights if math.isfinite(h)), default=0.0) or 1.0


def _bar_height(value: Any, top: float) -> float:
    """A bar's height: ±inf, and finite values past float64 (1e400), stand at ±1.2 x top."""
    if value.is_nan:
        return 0.0
    height = float(value.to_float())
    if math.isinf(height):
        return math.copysign(1.2 * top, height)
    return height


def _fraction(value: float) -> Any:
    from fractions import Fraction

    return Fraction(value)


def _approx(value: float) -> str:
    if math.isinf(value):
        return "∞ (NaN)"
    if value == 0:
        return "0"
    return approximate_decimal(value, keep=4, shown=4, inexact=True)


def _hex(color: QColor) -> str:
    return str(color.name())
