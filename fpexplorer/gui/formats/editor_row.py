"""One stacked bit editor: format picker, class badge, stepping buttons and the bit row."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import FloatFormat
from fpexplorer.gui.formats.bit_row import BitRow
from fpexplorer.gui.formats.saturation import p3109_saturation
from fpexplorer.gui.formats.state import EditorState, FormatsSession
from fpexplorer.gui.formats.text import keep_numbers_whole, short, value_and_typed
from fpexplorer.gui.theme import best_text_on, class_color, class_hex, role_hex

CUSTOM_ITEM = "__custom__"

CLASS_HELP = {
    "zero": "Zero: exponent and fraction all zeros. The sign bit still makes +0 and −0.",
    "subnormal": "Subnormal: exponent field 0, so the significand is 0.f and the power is "
    "fixed at 1 − bias. Subnormals fill the gap between 0 and the smallest normal number "
    "evenly, so that x − y = 0 only when x = y (gradual underflow).",
    "normal": "Normal: significand 1.f times 2^(E − bias). Relative precision is the same "
    "across the whole normal range.",
    "inf": "Infinity: what a too-large result becomes under IEEE overflow.",
    "nan": "NaN (not a number): the result of 0/0, ∞ − ∞, … Some formats (FP8 E4M3FN) have "
    "a single NaN pattern and no infinity; FP6 and FP4 have neither.",
}


class FormatPicker(QComboBox):
    """Every named format, the session's custom formats, and “Custom format…”."""

    format_chosen = Signal(object)  # FloatFormat
    custom_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.setMaxVisibleItems(30)
        self.setToolTip("Format of this editor. “Custom format…” builds your own eXmY format.")
        # The formats themselves, by item index: a spec string would lose a custom name.
        self._formats: list[FloatFormat] = []
        self.activated.connect(self._on_activated)

    def populate(self, formats: list[FloatFormat], current: FloatFormat) -> None:
        self.blockSignals(True)
        self.clear()
        shown = list(formats)
        if current not in shown:
            shown.append(current)
        self._formats = shown
        for fmt in shown:
            label = fmt.name if fmt.name else fmt.spec
            self.addItem(label, fmt.spec)
            self.setItemData(self.count() - 1, fmt.description, Qt.ItemDataRole.ToolTipRole)
        self.insertSeparator(self.count())
        self.addItem("Custom format…", CUSTOM_ITEM)
        self.setCurrentIndex(shown.index(current))
        self.blockSignals(False)

    def _on_activated(self, index: int) -> None:
        data = self.itemData(index)
        if data == CUSTOM_ITEM:
            self.custom_requested.emit()
        elif 0 <= index < len(self._formats):
            self.format_chosen.emit(self._formats[index])


class ClassBadge(QLabel):
    """The class of the code in white on its colour (painted: no style sheet, stays fast)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumWidth(80)
        font = self.font()
        font.setBold(True)
        self.setFont(font)
        self.setContentsMargins(8, 1, 8, 1)
        self._color = class_color("zero")

    def set_color(self, color: QColor) -> None:
        self._color = color
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(self._color)
        painter.drawRoundedRect(self.rect().adjusted(0, 1, 0, -1), 4, 4)
        painter.setPen(best_text_on(self._color))
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.text())
        painter.end()


class EditorRow(QFrame):
    """The stacked editor of one EditorState; all edits are handed to the session."""

    custom_requested = Signal(object)  # EditorState

    def __init__(
        self, session: FormatsSession, editor: EditorState, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.session = session
        self.editor = editor
        self.setObjectName("EditorRow")
        self._active = False

        self.picker = FormatPicker()
        self.badge = ClassBadge()
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # Wrapped, not clipped: in a narrow window the end of the line (the relative error,
        # the flags) was cut off with no mark.
        self.summary.setWordWrap(True)
        self.problem = QLabel()
        self.problem.setObjectName("problem")
        self.bits = BitRow()

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.picker)
        header.addWidget(self.badge)
        header.addWidget(self.summary, 1)
        header.addWidget(self.problem)
        self.step_buttons: dict[str, QToolButton] = {}
        for how, text, tip in (
            ("down", "◀", "Next value down (Down arrow in the bits)"),
            ("up", "▶", "Next value up (Up arrow in the bits)"),
            ("exponent-", "E−", "Exponent field − 1 (halves a normal value)"),
            ("exponent+", "E+", "Exponent field + 1 (doubles a normal value)"),
            ("fraction-", "F−", "Fraction field − 1 (one ulp down, within the binade)"),
            ("fraction+", "F+", "Fraction field + 1 (one ulp up, within the binade)"),
        ):
            button = QToolButton()
            button.setText(text)
            button.setToolTip(tip)
            button.setAutoRaise(True)
            button.clicked.connect(lambda _=False, h=how: self.session.step(self.editor, h))
            header.addWidget(button)
            self.step_buttons[how] = button
        self.remove_button = QToolButton()
        self.remove_button.setText("✕")
        self.remove_button.setToolTip("Remove this editor from the stack")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.session.remove_editor(self.editor))
        header.addWidget(self.remove_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.bits)

        self.picker.format_chosen.connect(lambda fmt: self.session.set_format(self.editor, fmt))
        self.picker.custom_requested.connect(lambda: self.custom_requested.emit(self.editor))
        self.bits.bit_toggled.connect(lambda bit: self.session.toggle_bit(self.editor, bit))
        self.bits.bit_painted.connect(
            lambda bit, value: self.session.paint_bits(self.editor, [bit], value)
        )
        self.bits.step_requested.connect(lambda how: self.session.step(self.editor, how))
        self.bits.activated.connect(lambda: self.session.set_active(self.editor))
        editor.changed.connect(self.refresh)
        session.custom_formats_changed.connect(self._refresh_picker)
        self._shown_format: FloatFormat | None = None
        self.refresh()

    def focus_chain(self) -> list[QWidget]:
        """The row's keyboard stops in the order they sit on screen."""
        return [self.picker, *self.step_buttons.values(), self.remove_button, self.bits]

    def detach(self) -> None:
        """Stop listening to the model (the row is being removed)."""
        self.editor.changed.disconnect(self.refresh)
        self.session.custom_formats_changed.disconnect(self._refresh_picker)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self.session.set_active(self.editor)
        super().mousePressEvent(event)

    def set_active(self, active: bool) -> None:
        if active != self._active:
            self._active = active
            self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        # The frame is painted here rather than by a style sheet: style sheets make every
        # child widget slower to polish and paint.
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        if self._active:
            pen = QPen(palette.color(QPalette.ColorRole.Highlight), 2)
        else:
            pen = QPen(palette.color(QPalette.ColorRole.Mid), 1)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(1, 1, -1, -1), 6, 6)
        painter.end()

    def set_removable(self, removable: bool) -> None:
        self.remove_button.setEnabled(removable)

    def _refresh_picker(self) -> None:
        self.picker.populate(self.session.known_formats(), self.editor.format)
        self._shown_format = self.editor.format

    def refresh(self) -> None:
        editor = self.editor
        readout = editor.readout()
        if self._shown_format != editor.format:
            self._refresh_picker()
            self.bits.set_format(editor.format)
        self.bits.set_code(editor.code)
        color = class_hex(readout.kind)
        self.badge.setText(readout.kind)
        self.badge.setToolTip(CLASS_HELP[readout.kind])
        self.badge.set_color(QColor(color))
        rounded = readout.rounded
        typed_input = editor.input if rounded is not None and rounded.inexact else None
        if typed_input is None:
            text = f"<b>{readout.display}</b> &nbsp; <code>{readout.hex_code}</code>"
        else:
            assert rounded is not None
            shown, typed_text = value_and_typed(readout.value, typed_input)
            text = (
                f"<b>{shown}</b> &nbsp; <code>{readout.hex_code}</code> &nbsp; ← {typed_text}, "
                f"rel. error {short(rounded.error_rel)}"
            )
        flags = []
        if rounded is not None:
            flags = [
                name for name in ("invalid", "overflow", "underflow") if getattr(rounded, name)
            ]
        if flags:
            text += f" &nbsp; <b style='color:{role_hex('error')}'>" + ", ".join(flags) + "</b>"
        saturation = p3109_saturation(editor.format, editor.overflow)
        if saturation is not None:
            text += f" &nbsp; <i>{saturation}</i>"
        self.summary.setText(keep_numbers_whole(text))
        self.problem.setText(editor.problem or "")
        self.problem.setVisible(bool(editor.problem))
        for how, button in self.step_buttons.items():
            if how.startswith("fraction"):
                button.setEnabled(editor.format.mantissa_bits > 0)
