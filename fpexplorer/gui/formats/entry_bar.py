"""The value entry line with its rounding-mode and overflow-policy pickers."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import BARE_HEX_RULE, OVERFLOW_POLICIES, ROUNDING_MODES
from fpexplorer.gui.formats.state import (
    DEFAULT_OVERFLOW_LABEL,
    FormatsSession,
    entry_placeholder,
)
from fpexplorer.gui.formats.text import keep_numbers_whole
from fpexplorer.gui.theme import role_color

ENTRY_HELP = (
    "Type a number and press Enter: 0.1, -2.5e-8, 1/3, 0x1.8p3 (hex float), inf, -inf, nan, "
    "-0, max, min_normal, min_subnormal, eps — or a raw code, read in the active editor's "
    "format (0x3C00, 0b0011110000000000, 0|01111|0000000000) or in the format named before "
    "it (fp16:0x3C00, e5m2:0x7C, bf16:0x3F80). "
    f"The rule, the same in every field and on the command line: {BARE_HEX_RULE}."
)
ROUNDING_HELP = {
    "nearest_even": "Round to the nearest value; ties go to the even significand (IEEE "
    "default; with no fraction bits, to the larger magnitude; P3109: the even code).",
    "nearest_away": "Round to the nearest value; ties go away from zero.",
    "toward_zero": "Truncate: always the neighbour nearer to zero.",
    "toward_positive": "Always the neighbour above (ceiling).",
    "toward_negative": "Always the neighbour below (floor).",
    "stochastic": "Up or down at random with probability proportional to closeness "
    "(a fixed seed here, so the picture is repeatable).",
    "round_to_odd": "Truncate, then set the last bit when the result is inexact (so that a "
    "later rounding into a narrower format is correct).",
}
OVERFLOW_HELP = {
    DEFAULT_OVERFLOW_LABEL: "What ml_dtypes does for this format (IEEE for formats with "
    "infinity; NaN or saturation for FP8/FP6/FP4 flavours).",
    "ieee": "Too large becomes ±infinity (or NaN when the format has no infinity).",
    "saturate": "Too large is clamped to ±max, infinity included.",
    "saturate_propagate": "Finite values too large are clamped to ±max; ±inf stays ±inf "
    "(NaN where the format has no infinity).",
    "nan": "Too large becomes NaN.",
}


class EntryBar(QWidget):
    """Entry field, error message beside it, rounding/overflow pickers, stack controls."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.field = QLineEdit()
        self.field.setToolTip(ENTRY_HELP)
        self.field.setClearButtonEnabled(True)
        self.field.setMinimumWidth(140)
        self.field.setAccessibleName("value entry")
        self.message = QLabel()
        self.message.setObjectName("entryError")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        # Which format a raw code was read in: said on screen, not only in a tooltip.
        self.note = QLabel()
        self.note.setObjectName("entryNote")
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.rounding = QComboBox()
        for mode in ROUNDING_MODES:
            self.rounding.addItem(mode, mode)
            self.rounding.setItemData(
                self.rounding.count() - 1,
                ROUNDING_HELP.get(mode, mode),
                Qt.ItemDataRole.ToolTipRole,
            )
        self.rounding.setToolTip("Rounding mode used for typed values")
        self.overflow = QComboBox()
        self.overflow.addItem(DEFAULT_OVERFLOW_LABEL, "")
        for policy in OVERFLOW_POLICIES:
            self.overflow.addItem(policy, policy)
        for index in range(self.overflow.count()):
            label = self.overflow.itemText(index)
            self.overflow.setItemData(
                index, OVERFLOW_HELP.get(label, label), Qt.ItemDataRole.ToolTipRole
            )
        self.overflow.setToolTip("What happens to values beyond the format's max")
        self.linked = QCheckBox("linked")
        self.linked.setToolTip(
            "When on, a value typed or clicked in one editor is shown rounded in every "
            "stacked editor."
        )
        self.add_button = QPushButton("+ Add format")
        self.add_button.setToolTip("Stack another editor to compare formats")

        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Value"))
        row.addWidget(self.field, 2)
        row.addWidget(QLabel("Rounding"))
        row.addWidget(self.rounding)
        row.addWidget(QLabel("Overflow"))
        row.addWidget(self.overflow)
        row.addWidget(self.linked)
        row.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.message)
        layout.addWidget(self.note)

        self.field.returnPressed.connect(lambda: self.session.enter_text(self.field.text()))
        # Escape abandons an edit in progress: the field shows again what was last entered
        # (what the editors show), instead of keeping half-typed text that nothing applied.
        revert = QAction(self.field)
        revert.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        revert.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        revert.triggered.connect(self.revert_field)
        self.field.addAction(revert)
        self.rounding.activated.connect(
            lambda _: self.session.set_rounding(self.rounding.currentData())
        )
        self.overflow.activated.connect(
            lambda _: self.session.set_overflow(self.overflow.currentData() or None)
        )
        self.linked.toggled.connect(self.session.set_linked)
        session.entry_changed.connect(self.refresh)
        session.changed.connect(self.refresh)
        self.refresh()

    def revert_field(self) -> None:
        """Put back the text last entered, dropping what was typed since."""
        self.field.setText(self.session.entry_text)

    def refresh(self) -> None:
        session = self.session
        if self.field.text() != session.entry_text and not self.field.hasFocus():
            self.field.setText(session.entry_text)
        self.field.setPlaceholderText(entry_placeholder(session.active.format))
        palette = self.message.palette()
        palette.setColor(QPalette.ColorRole.WindowText, role_color("error"))
        self.message.setPalette(palette)
        self.message.setText(session.entry_error or "")
        self.message.setVisible(bool(session.entry_error))
        self.note.setText(keep_numbers_whole(session.entry_note or ""))
        self.note.setVisible(bool(session.entry_note) and not session.entry_error)
        self.rounding.setCurrentIndex(max(self.rounding.findData(session.rounding), 0))
        self.overflow.setCurrentIndex(max(self.overflow.findData(session.overflow or ""), 0))
        if self.linked.isChecked() != session.linked:
            self.linked.blockSignals(True)
            self.linked.setChecked(session.linked)
            self.linked.blockSignals(False)
