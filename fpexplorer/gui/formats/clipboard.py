"""What the Formats panel puts on the clipboard: what another program reads.

A table cell shows a value by the display rule ("3.40282346…e38", "≈7.22", "4,278,190,080"
with its thousands separators); pasted into a spreadsheet or Python those are text, or the
wrong number. A cell that shows a number keeps the number itself under `COPY_VALUE_ROLE`,
and a copy writes it out in full, plain digits, every one (`exact_decimal`): written when
copied, never on each render (a value of e16m47 has thousands of digits).
"""

from __future__ import annotations

from fractions import Fraction

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QTableWidgetItem, QWidget

from fpexplorer.formats import ExactValue, exact_decimal

# The item-data role holding a cell's number (Fraction, ExactValue, int or float).
COPY_VALUE_ROLE = Qt.ItemDataRole.UserRole + 1

CopyValue = Fraction | ExactValue | int | float


def set_copy_value(item: QTableWidgetItem, value: CopyValue | None) -> None:
    """Copy `value` (None: the text as shown) when the cell `item` is copied."""
    # An int past 64 bits would not survive Qt's QVariant: kept as a Fraction.
    item.setData(COPY_VALUE_ROLE, Fraction(value) if isinstance(value, int) else value)


def copy_text(value: CopyValue) -> str:
    """A number as plain text another program reads: every digit, no separators, no "…"
    but for a fraction whose decimal does not end (1/3: its first 60 digits and "…");
    "inf", "-inf", "nan" as Python and numpy read them."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a number to copy")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, ExactValue) and not value.is_finite:
        return str(value)
    return exact_decimal(value)


def selected_cells_text(widget: QWidget | None) -> str | None:
    """The selected cells of a focused table as tab-separated rows, None when `widget` is
    not a table or nothing is selected. A cell copies its number (`COPY_VALUE_ROLE`) when
    it holds one, else its text as shown."""
    if not isinstance(widget, QAbstractItemView) or widget.model() is None:
        return None
    indexes = sorted(widget.selectionModel().selectedIndexes(), key=lambda i: (i.row(), i.column()))
    if not indexes:
        return None
    rows: dict[int, list[str]] = {}
    for index in indexes:
        value = index.data(COPY_VALUE_ROLE)
        text = copy_text(value) if value is not None else str(index.data() or "")
        rows.setdefault(index.row(), []).append(text)
    return "\n".join("\t".join(cells) for cells in rows.values())
