"""Read-outs of the active editor's code, and the side note that explains what is shown."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontDatabase, QPalette, QResizeEvent, QTextOption
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QTextBrowser,
    QWidget,
)

from fpexplorer.gui.formats.notes import side_note
from fpexplorer.gui.formats.state import CodeReadout, FormatsSession
from fpexplorer.gui.formats.text import keep_numbers_whole, short, value_and_typed
from fpexplorer.gui.theme import role_hex

FIELD_MIN_WIDTH = 80
# A line edit's frame and inner margins around its text, in pixels (as the hex field's).
FIELD_TEXT_MARGINS = 16


def _read_only_line(tip: str) -> QLineEdit:
    line = QLineEdit()
    line.setReadOnly(True)
    line.setToolTip(tip)
    line.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    line.setMinimumWidth(FIELD_MIN_WIDTH)
    return line


class ExactValueBox(QPlainTextEdit):
    """Every digit of the exact value: wraps anywhere, selectable, grows to 3 lines."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAnywhere)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setToolTip(
            "The exact value of this code, every digit (a binary fraction always has a "
            "finite decimal expansion). Select and copy freely."
        )
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self._height_for(1))

    def _height_for(self, lines: int) -> int:
        margins = self.contentsMargins()
        line = self.fontMetrics().lineSpacing()
        return (
            lines * line
            + margins.top()
            + margins.bottom()
            + 2 * int(self.document().documentMargin())
            + 2
        )

    def show_text(self, text: str) -> None:
        if text != self.toPlainText():
            self.setPlainText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        width = max(self.viewport().width() - 2 * int(self.document().documentMargin()), 40)
        per_line = max(width // max(self.fontMetrics().horizontalAdvance("0"), 1), 1)
        lines = min(max(-(-len(self.toPlainText()) // per_line), 1), 3)
        height = self._height_for(lines)
        if height != self.height():
            self.setFixedHeight(height)


class ReadoutPanel(QFrame):
    """Exact decimal, shortest, scientific, hex, binary, formula, gaps, rounding error."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.title = QLabel()
        self.title.setWordWrap(True)  # a long description must not widen the window
        self.exact = ExactValueBox()
        self.shortest = _read_only_line(
            "The shortest decimal that converts back to exactly this code (what print() "
            "shows). It reads back to the code but is not its value: the value is above."
        )
        self.scientific = _read_only_line(
            "The exact value in scientific notation, up to 21 digits (… marks digits left "
            "out: the Exact field has every one)."
        )
        self.hex_code = _read_only_line("The code as an unsigned integer, in hexadecimal.")
        self.binary_code = _read_only_line("The code in binary: sign | exponent | fraction.")
        self.formula = QLabel()
        self.formula.setWordWrap(True)
        self.formula.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.formula.setToolTip(
            "value = (−1)^sign × 2^(E − bias) × 1.f for normals; subnormals use 0.f and "
            "the power 2^(1 − bias)."
        )
        self.gaps = QLabel()
        self.gaps.setTextFormat(Qt.TextFormat.RichText)
        self.gaps.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.gaps.setWordWrap(True)
        self.gaps.setToolTip(
            "Distance to the next representable value below and above: nothing in between "
            "can be stored in this format."
        )
        self.error = QLabel()
        self.error.setTextFormat(Qt.TextFormat.RichText)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setWordWrap(True)
        # The side note scrolls when it is longer than the read-outs are tall.
        self.note = QTextBrowser()
        self.note.setObjectName("sideNote")
        self.note_bar = QFrame()  # a thin bar in the highlight colour marks the side note
        self.note_bar.setFixedWidth(3)
        self.note_bar.setAutoFillBackground(True)
        self.note_bar.setBackgroundRole(QPalette.ColorRole.Highlight)
        self.note.setOpenExternalLinks(False)
        self.note.setFrameShape(QFrame.Shape.NoFrame)
        self.note.viewport().setAutoFillBackground(False)
        # Narrower in a small window (the read-outs keep their room), 340 px when there is.
        self.note.setMinimumWidth(200)
        self.note.setMaximumWidth(340)
        self.note.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)

        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(2)
        grid.addWidget(self.title, 0, 0, 1, 6)
        grid.addWidget(QLabel("Exact"), 1, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.exact, 1, 1, 1, 5)
        for column, (name, widget) in enumerate(
            (
                ("Shortest round-trip", self.shortest),
                ("Scientific", self.scientific),
                ("Hex", self.hex_code),
            )
        ):
            grid.addWidget(QLabel(name), 2, 2 * column)
            grid.addWidget(widget, 2, 2 * column + 1)
        grid.addWidget(QLabel("Binary"), 3, 0)
        grid.addWidget(self.binary_code, 3, 1, 1, 5)
        grid.addWidget(QLabel("Formula"), 4, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.formula, 4, 1, 1, 5)
        grid.addWidget(QLabel("Gaps"), 5, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.gaps, 5, 1, 1, 5)
        grid.addWidget(QLabel("Rounding"), 6, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.error, 6, 1, 1, 5)
        for column, stretch in ((1, 3), (3, 4), (5, 2)):
            grid.setColumnStretch(column, stretch)
        digit = self.hex_code.fontMetrics().horizontalAdvance("0")
        # A 64-bit code, 0x and 16 digits.
        self.hex_code.setMinimumWidth(digit * 18 + FIELD_TEXT_MARGINS)

        # A row taller than its text (a wide window gives the wrapped rows spare height)
        # kept the text in the middle, below its name, which is aligned to the top.
        for label in (self.formula, self.gaps, self.error):
            label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(grid, 1)
        layout.addWidget(self.note_bar)
        layout.addWidget(self.note)
        self._needed_height = 0
        session.changed.connect(self.refresh)
        self.refresh()

    # The description, the formula and the rounding line wrap, so the height the read-outs
    # need depends on their width; QSplitter sizes its panes by minimumSizeHint alone, which
    # for word-wrapped labels is one line each, so in a low window the splitter squeezed
    # them (the description under "Exact", the rounding's second line cut). Their minimum
    # is the height their text needs at their present width: when the window is lower than
    # that, the Formats panel scrolls instead.
    def _height_needed(self) -> int:
        layout = self.layout()
        assert layout is not None  # set in __init__
        width = self.width() if self.width() > 0 else layout.sizeHint().width()
        return max(layout.totalHeightForWidth(width), layout.totalMinimumSize().height())

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(hint.width(), max(hint.height(), self._height_needed()))

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width(), max(hint.height(), self._height_needed()))

    def _update_needed_height(self) -> None:
        needed = self._height_needed()
        if needed != self._needed_height:
            self._needed_height = needed
            self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._update_needed_height()

    def refresh(self) -> None:
        editor = self.session.active
        readout = editor.readout()
        fmt = readout.format
        self.title.setText(
            f"<b>{fmt.name}</b> — {fmt.description} &nbsp; <span style='color:{role_hex('muted')}'>"
            f"spec {fmt.spec}, bias {fmt.bias}</span>"
        )
        self.exact.show_text(readout.exact)
        for field, text in (
            (self.shortest, readout.shortest),
            (self.scientific, readout.scientific),
        ):
            field.setText(text)
            field.setCursorPosition(0)
            # Wide enough for its whole text: at 1024 px FP64's min normal read
            # "-2.2250738585072014e-3", its exponent's last digits cut off.
            advance = field.fontMetrics().horizontalAdvance(text)
            field.setMinimumWidth(max(FIELD_MIN_WIDTH, advance + FIELD_TEXT_MARGINS))
        self.hex_code.setText(readout.hex_code)
        self.hex_code.setCursorPosition(0)
        self.binary_code.setText(readout.binary_code)
        self.binary_code.setCursorPosition(0)
        self.formula.setText(keep_numbers_whole(readout.formula))
        self.gaps.setText(keep_numbers_whole(self._gaps_text(readout)))
        self.error.setText(keep_numbers_whole(self._error_text(readout, editor.input is not None)))
        self.note.setHtml(side_note(fmt, readout.kind))
        self._update_needed_height()

    @staticmethod
    def _gaps_text(readout: CodeReadout) -> str:
        if readout.gap_down is None and readout.gap_up is None:
            return "— (not a finite value)"
        down = short(readout.gap_down) if readout.gap_down is not None else "— (none below)"
        up = short(readout.gap_up) if readout.gap_up is not None else "— (none above)"
        ulp = readout.format.ulp(readout.code)
        ulp_text = f" &nbsp;&nbsp; ulp {short(ulp)}" if ulp is not None else ""
        return f"↓ {down} &nbsp;&nbsp; ↑ {up}{ulp_text}"

    @staticmethod
    def _error_text(readout: CodeReadout, was_typed: bool) -> str:
        rounded = readout.rounded
        if rounded is None or not was_typed:
            return (
                f"<span style='color:{role_hex('muted')}'>type a value above to see how it "
                "rounds</span>"
            )
        shown, typed_text = value_and_typed(readout.value, rounded.input)
        parts = [
            f"input {typed_text} → {shown} ({rounded.rounding}"
            f", overflow: {rounded.overflow_policy}) &nbsp; error abs "
            f"{short(rounded.error_abs)}, rel {short(rounded.error_rel)}, "
            f"{short(rounded.error_ulps)} ulp",
        ]
        flags = []
        for name in ("inexact", "overflow", "underflow"):
            on = bool(getattr(rounded, name))
            role = ("error" if name != "inexact" else "warning") if on else "muted"
            color = role_hex(role)
            mark = "●" if on else "○"
            flags.append(f"<span style='color:{color}'>{mark} {name}</span>")
        if rounded.invalid:
            flags.insert(
                0,
                f"<b style='color:{role_hex('error')}'>invalid: {readout.format.name} has no "
                "code for this value</b>",
            )
        elif not rounded.inexact:
            flags.insert(0, "<b>exact</b>")
        return "<br>".join(parts) + "<br>" + " &nbsp; ".join(flags)
