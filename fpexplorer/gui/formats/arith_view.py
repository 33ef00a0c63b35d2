"""The Arithmetic view: a op b in the active editor's format, the exact result, and the
result rounded under every rounding mode with its error and IEEE 754 flags.

It renders an `ArithmeticState` and hands every user action to it in one line. The format
and the overflow policy are the bit editor's (the active editor's format, the Overflow
picker), so the operands are read in the format being explored.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import BARE_HEX_RULE
from fpexplorer.gui.formats.arith_state import (
    OPERAND_NAMES,
    OPERATION_LABELS,
    ArithmeticState,
    operand_count,
    operation_names,
)
from fpexplorer.gui.formats.clipboard import CopyValue, set_copy_value
from fpexplorer.gui.formats.plotting import LazyView
from fpexplorer.gui.formats.state import FormatsSession
from fpexplorer.gui.formats.text import keep_numbers_whole
from fpexplorer.gui.theme import role_color

MODE_COLUMNS = ("rounding", "result", "code", "error |result − exact|", "error (ulps)", "flags")
OPERAND_HELP = (
    "A number: 0.1, -2.5e-3, 1/3, 0x1.8p3 (hex float), inf, nan, max, min_normal, eps. "
    "It is rounded into the format (nearest even) before the operation. "
    f"Codes: {BARE_HEX_RULE} (the selected format is the one computed in)."
)


class ArithmeticView(LazyView):
    """Operation picker and operand fields on top, the exact result, then one row per mode."""

    def __init__(
        self,
        session: FormatsSession | None = None,
        parent: QWidget | None = None,
        state: ArithmeticState | None = None,
    ) -> None:
        super().__init__(parent)
        self.session = session
        if state is None:
            state = ArithmeticState()
            if session is not None:
                state = ArithmeticState(session.active.format, overflow=session.overflow)
        self.state = state

        self.operation = QComboBox()
        for name in operation_names():
            self.operation.addItem(OPERATION_LABELS.get(name, name), name)
        self.operation.setToolTip("The operation, computed exactly and then rounded once")
        self.fields: list[QLineEdit] = []
        self.operand_labels: list[QLabel] = []
        self.compute_button = QPushButton("Compute")
        self.compute_button.setToolTip("Compute with the typed operands (Enter in a field)")
        self.format_label = QLabel()
        # Wrapped: one line of it is ~1070 px, wider than a 1024-pixel window.
        self.format_label.setWordWrap(True)
        self.message = QLabel()
        self.message.setObjectName("arithmeticProblem")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.operation)
        for name in OPERAND_NAMES:
            label = QLabel(name)
            field = QLineEdit()
            field.setToolTip(OPERAND_HELP)
            field.setAccessibleName(f"operand {name}")
            field.setMinimumWidth(90)
            top.addWidget(label)
            top.addWidget(field, 1)
            self.operand_labels.append(label)
            self.fields.append(field)
        top.addWidget(self.compute_button)

        self.operands = QLabel()
        self.operands.setTextFormat(Qt.TextFormat.RichText)
        self.operands.setWordWrap(True)
        self.operands.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.exact = QLabel()
        self.exact.setTextFormat(Qt.TextFormat.RichText)
        self.exact.setWordWrap(True)
        self.exact.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        facts = QGridLayout()
        facts.setContentsMargins(0, 0, 0, 0)
        facts.addWidget(QLabel("Operands"), 0, 0, Qt.AlignmentFlag.AlignTop)
        facts.addWidget(self.operands, 0, 1)
        facts.addWidget(QLabel("Exact"), 1, 0, Qt.AlignmentFlag.AlignTop)
        facts.addWidget(self.exact, 1, 1)
        facts.setColumnStretch(1, 1)

        self.table = QTableWidget(0, len(MODE_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(MODE_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        vertical = self.table.verticalHeader()
        vertical.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        vertical.setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.format_label)
        layout.addWidget(self.message)
        layout.addLayout(facts)
        layout.addWidget(self.table, 1)

        self.operation.activated.connect(
            lambda _: self.state.set_operation(self.operation.currentData())
        )
        for field in self.fields:
            field.returnPressed.connect(self._on_compute)
        self.compute_button.clicked.connect(self._on_compute)
        self.state.changed.connect(self.mark_stale)
        if session is not None:
            session.changed.connect(self._on_session_changed)
        for field, text in zip(self.fields, self.state.operand_texts, strict=True):
            field.setText(text)
        palette = self.message.palette()
        palette.setColor(QPalette.ColorRole.WindowText, role_color("error"))
        self.message.setPalette(palette)

    # -- hand-offs -------------------------------------------------------------------------
    def _on_compute(self) -> None:
        self.state.set_operands([field.text() for field in self.fields])

    def _on_session_changed(self) -> None:
        session = self.session
        if session is not None:
            self.state.set_format(session.active.format)
            self.state.set_overflow(session.overflow)

    # -- rendering ---------------------------------------------------------------------------
    def restyle(self) -> None:
        palette = self.message.palette()
        palette.setColor(QPalette.ColorRole.WindowText, role_color("error"))
        self.message.setPalette(palette)
        self.mark_stale()

    def render_view(self) -> None:
        state = self.state
        readout = state.readout()
        calculation = readout.calculation
        fmt = calculation.format
        self.operation.setCurrentIndex(max(self.operation.findData(calculation.operation), 0))
        count = operand_count(state.operation)
        for index, (label, field) in enumerate(zip(self.operand_labels, self.fields, strict=True)):
            label.setVisible(index < count)
            field.setVisible(index < count)
        self.format_label.setText(
            f"In <b>{fmt.name}</b> (the active editor's format), overflow policy "
            f"<b>{calculation.overflow_policy}</b> (the Overflow picker). Operands are rounded "
            "into the format first; the result is computed exactly, then rounded once."
        )
        # The results below stay those of the last operands that could be read: said, since
        # the fields now hold other text.
        shown = "" if state.problem is None else (
            f"{state.problem.rstrip('.')}. Below: the last result, for the operands it names."
        )  # fmt: skip
        self.message.setText(shown)
        self.message.setVisible(bool(state.problem))
        if state.problem is None:
            # The fields say what was computed (bad text stays in its field, to be fixed).
            for field, text in zip(self.fields, state.operand_texts, strict=True):
                if field.text() != text:
                    field.setText(text)
        operand_texts = []
        for operand in readout.operands:
            text = f"{operand.name} = <b>{operand.value_text}</b> <code>{operand.code_hex}</code>"
            if operand.note:
                text += f" ({operand.note})"
            operand_texts.append(text)
        self.operands.setText(keep_numbers_whole(" &nbsp; ".join(operand_texts)))
        self.exact.setText(
            keep_numbers_whole(
                f"{readout.expression} = <b>{readout.exact_text}</b> &nbsp; "
                f"<i>{readout.exact_note}</i>"
            )
        )
        table = self.table
        table.setRowCount(len(readout.lines))
        error_color = role_color("error")
        text_color = table.palette().color(QPalette.ColorRole.Text)
        for row, line in enumerate(readout.lines):
            texts = (
                line.rounding,
                line.value_text,
                line.code_hex,
                line.error_text,
                line.ulps_text,
                line.flags_text,
            )
            # A copy gives the numbers in full (the error of an irrational root is known
            # only approximately: copied as shown, "≈" kept).
            result = line.result
            exact_error = not result.error_is_approximate
            numbers: dict[int, CopyValue | None] = {
                1: result.value,
                3: result.error_abs if exact_error else None,
                4: result.error_ulps if exact_error else None,
            }
            for column, text in enumerate(texts):
                item = table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    if column in (1, 3, 4):
                        item.setTextAlignment(
                            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                        )
                    table.setItem(row, column, item)
                item.setText(text)
                set_copy_value(item, numbers.get(column))
            flags = line.result.flags
            alarming = flags.invalid or flags.overflow or flags.divide_by_zero
            flag_item = table.item(row, len(texts) - 1)
            if flag_item is not None:
                flag_item.setForeground(error_color if alarming else text_color)
