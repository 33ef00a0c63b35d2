"""The cross-format table (one value rounded into every format) and the properties table."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import ExactValue, FloatFormat, Rounded, exact_decimal
from fpexplorer.formats.decimal import display_decimals
from fpexplorer.formats.quoting import cut_text
from fpexplorer.gui.formats.clipboard import CopyValue, set_copy_value
from fpexplorer.gui.formats.plotting import LazyView
from fpexplorer.gui.formats.state import (
    STOCHASTIC_SEED,
    FormatsSession,
    hex_code,
)
from fpexplorer.gui.formats.text import short, typed
from fpexplorer.gui.theme import role_color

COMPARE_COLUMNS = (
    "Format",
    "Code",
    "Value",
    "Class",
    "Abs. error",
    "Rel. error",
    "Error (ulp)",
    "Flags",
)
PROPERTY_COLUMNS = (
    "Format",
    "Bits s/e/m",
    "Bias",
    "Max",
    "Min normal",
    "Min subnormal",
    "Epsilon",
    "Decimal digits",
    "Finite values",
    "Inf",
    "NaN",
    "−0",
)
PROPERTY_TIPS = {
    "Max": "Largest finite value. Above it values overflow (to inf, NaN or max by policy).",
    "Min normal": "Smallest value with full precision (exponent field 1).",
    "Min subnormal": "Smallest non-zero value; below half of it everything rounds to 0.",
    "Epsilon": "Gap between 1 and the next value up: the relative precision.",
    "Decimal digits": "(fraction bits + 1) × log10(2): significant decimal digits held.",
    "Bias": "Stored exponent E means the power E − bias.",
    "Finite values": "Number of codes holding finite values (+0 and −0 counted apart).",
}


FILTER_HELP = (
    "Show only the formats whose name, alias, spec or family (the description's start: "
    "IEEE 754, OCP FP8, OCP MX, IEEE P3109, …) holds every word typed, in any case"
)
# A sort key: a rank first, so that -inf < finite values < +inf, then the value itself.
SortKey = tuple[int, Fraction] | tuple[int, str]


@dataclass(frozen=True, slots=True)
class CrossRow:
    """One row of the All formats table: a format and its rounding of the typed value (or
    why it has none), with the row's cell texts."""

    format: FloatFormat
    result: Rounded | str
    cells: tuple[str, ...]

    @property
    def code(self) -> int:
        return self.result.code if isinstance(self.result, Rounded) else 0


def format_matches(fmt: FloatFormat, filter_text: str) -> bool:
    """Whether every word of `filter_text` is in the format's name, an alias, its spec or its
    family (its description, which starts with the family: "OCP FP8 E4M3; 8 bits: …")."""
    haystack = " ".join((fmt.name, *fmt.aliases, fmt.spec, fmt.description)).casefold()
    return all(word in haystack for word in filter_text.casefold().split())


def _value_key(value: ExactValue | None) -> SortKey | None:
    if value is None or value.is_nan:
        return None  # NaN and "no value" have no place among numbers: they go last
    if value.is_inf:
        return (2, Fraction(0)) if not value.negative else (0, Fraction(0))
    return (1, value.fraction)


def cross_sort_key(row: CrossRow, column: int) -> SortKey | None:
    """The All formats table's order for `column`: numbers by their exact value (never by
    their text: "1e-5" < "9"), texts in any case; None for a cell with no number."""
    result = row.result
    name = COMPARE_COLUMNS[column]
    if name == "Format":
        return (0, row.format.name.casefold())
    if name in ("Class", "Flags"):
        return (0, row.cells[column].casefold()) if isinstance(result, Rounded) else None
    if not isinstance(result, Rounded):
        return None
    if name == "Code":
        return (1, Fraction(result.code))
    if name == "Value":
        return _value_key(result.value)
    error = {"Abs. error": result.error_abs, "Rel. error": result.error_rel}.get(
        name, result.error_ulps
    )
    return None if error is None else (1, error)


def sort_cross_rows(rows: list[CrossRow], column: int, descending: bool) -> list[CrossRow]:
    """`rows` ordered by `column` (stable: equal keys keep their order); rows without a key
    (NaN, a format with no code for the value) last in either direction."""
    keyed = [(cross_sort_key(row, column), row) for row in rows]
    present = [(key, row) for key, row in keyed if key is not None]
    present.sort(key=lambda pair: pair[0], reverse=descending)
    return [row for _, row in present] + [row for key, row in keyed if key is None]


def typed_filter(filter_text: str) -> str:
    """The filter as the caption quotes it (escaped: the caption is rich text)."""
    from html import escape

    return f"“{escape(cut_text(filter_text, 40))}”"


def _item(text: str, tip: str | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if tip:
        item.setToolTip(tip)
    return item


def _set_text(table: QTableWidget, row: int, column: int, text: str) -> QTableWidgetItem:
    """Reuse the cell's item (creating items is what makes a table slow), set its text."""
    item = table.item(row, column)
    if item is None:
        item = _item(text)
        table.setItem(row, column, item)
    elif item.text() != text:
        item.setText(text)
    return item


class CrossFormatTable(LazyView):
    """The active editor's input rounded into every known format; a click loads a row."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.only_stacked = QCheckBox("only the stacked formats")
        self.only_stacked.setToolTip(
            "Compare just the formats of the editors above instead of every format"
        )
        self.table = QTableWidget(0, len(COMPARE_COLUMNS))
        self.table.setHorizontalHeaderLabels(COMPARE_COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        # Columns are fitted once per set of formats, not on every change (fitting on
        # every cell update made a bit toggle cost 100+ ms).
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self._fitted_for: tuple[FloatFormat, ...] = ()
        self._longest: tuple[int, ...] = ()  # widest text per column (pixels), when last fitted
        self.table.setToolTip(
            "Click a row to load that format and code into the editor; click a column's "
            "header to sort by it (numbers by their exact value), again to reverse."
        )
        # Sorted here, not by Qt: QTableWidget sorts numbers by their text ("1e-5" after
        # "9") and moves rows while they are filled. No indicator: the formats' own order.
        header.setSectionsClickable(True)
        header.setSortIndicatorShown(True)
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.filter_field = QLineEdit()
        self.filter_field.setPlaceholderText("filter: name or family (fp8, e4m3, P3109, OCP MX…)")
        self.filter_field.setToolTip(FILTER_HELP)
        self.filter_field.setClearButtonEnabled(True)
        self.filter_field.setAccessibleName("filter formats")
        # As wide as its example text: the caption beside it takes the rest.
        placeholder = self.filter_field.placeholderText()
        width = self.filter_field.fontMetrics().horizontalAdvance(placeholder) + 40
        self.filter_field.setFixedWidth(width)
        self.rows: list[tuple[FloatFormat, int]] = []  # the rows as shown: sorted, filtered
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.caption, 1)
        top.addWidget(self.filter_field)
        top.addWidget(self.only_stacked)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        self.table.cellClicked.connect(self._on_table_cell_clicked)
        header.sortIndicatorChanged.connect(lambda _column, _order: self.mark_stale())
        self.filter_field.textChanged.connect(lambda _text: self.mark_stale())
        self.only_stacked.toggled.connect(lambda _checked: self.mark_stale())
        session.editors_changed.connect(self.mark_stale)
        session.changed.connect(self.mark_stale)
        session.custom_formats_changed.connect(self.mark_stale)

    def _on_table_cell_clicked(self, row: int, _column: int) -> None:
        if 0 <= row < len(self.rows):
            self.session.load(*self.rows[row])

    def render_view(self) -> None:
        session = self.session
        value = session.comparison_input()
        if self.only_stacked.isChecked():
            formats = list(dict.fromkeys(editor.format for editor in session.editors))
        else:
            formats = session.known_formats()
        which = "the stacked formats" if self.only_stacked.isChecked() else "every format"
        filter_text = self.filter_field.text().strip()
        shown_formats = [fmt for fmt in formats if format_matches(fmt, filter_text)]
        matching = (
            f"; {len(shown_formats)} of {len(formats)} match {typed_filter(filter_text)}"
            if filter_text
            else ""
        )
        self.caption.setText(
            f"<b>{typed(value)}</b> rounded into {which} ({session.rounding}, "
            f"overflow: {session.overflow or 'format default'}{matching}). Click a row to "
            "load it into the active editor."
        )
        formats = shown_formats
        self.table.setUpdatesEnabled(False)
        self.table.setRowCount(len(formats))
        results: list[Rounded | str] = []
        for fmt in formats:
            try:
                results.append(
                    fmt.round(value, session.rounding, session.overflow, seed=STOCHASTIC_SEED)
                )
            except ValueError as error:
                results.append(str(error))
        # As many digits as it takes for values that differ to read differently (float64's
        # and a wider format's 1/3 share their first nine), the typed value among them.
        texts = display_decimals(
            [value, *(r.value if isinstance(r, Rounded) else None for r in results)]
        )
        rows = [
            CrossRow(
                fmt,
                result,
                (fmt.name, "—", result, "", "", "", "", "")
                if isinstance(result, str)
                else self._cells(fmt, result, text or ""),
            )
            for fmt, result, text in zip(formats, results, texts[1:], strict=True)
        ]
        header = self.table.horizontalHeader()
        if 0 <= header.sortIndicatorSection() < len(COMPARE_COLUMNS):
            descending = header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
            rows = sort_cross_rows(rows, header.sortIndicatorSection(), descending)
        self.rows = [(shown.format, shown.code) for shown in rows]
        for index, shown in enumerate(rows):
            rounded = shown.result if isinstance(shown.result, Rounded) else None
            self._fill(index, list(shown.cells), rounded)
        active = session.active
        for row, (fmt, code) in enumerate(self.rows):
            if fmt == active.format and code == active.code:
                self.table.selectRow(row)
                break
        else:
            self.table.clearSelection()
        if tuple(formats) != self._fitted_for:
            self._fitted_for = tuple(formats)
            self.table.resizeColumnsToContents()
            self.table.setColumnWidth(2, max(self.table.columnWidth(2), 200))
        # Cells are never cut by the table: its own "…" reads as the display rule's, and a
        # cut code ("0x3E601B2B29A469…") or an error cut before its exponent ("2.68104…")
        # misleads. A column whose widest text changed is fitted again, that column only.
        metrics = self.table.fontMetrics()
        longest = tuple(
            max((metrics.horizontalAdvance(text) for text in self._column_texts(column)), default=0)
            for column in range(len(COMPARE_COLUMNS) - 1)  # the last one stretches
        )
        for column, (now, before) in enumerate(zip(longest, self._longest, strict=False)):
            if now != before:
                self.table.resizeColumnToContents(column)
        self._longest = longest
        self.table.setUpdatesEnabled(True)

    def _column_texts(self, column: int) -> list[str]:
        items = (self.table.item(row, column) for row in range(self.table.rowCount()))
        return [item.text() for item in items if item is not None]

    @staticmethod
    def _cells(fmt: FloatFormat, rounded: Rounded, value_text: str) -> tuple[str, ...]:
        kind = fmt.classify(rounded.code)
        # invalid: the format has no code for the value (NaN into FP4, -1 into E8M0).
        flags = [
            name
            for name in ("invalid", "overflow", "underflow", "inexact")
            if getattr(rounded, name)
        ]
        return (
            fmt.name,
            hex_code(fmt, rounded.code),
            value_text,
            kind,
            short(rounded.error_abs),
            short(rounded.error_rel),
            short(rounded.error_ulps),
            ", ".join(flags) if flags else "exact",
        )

    def _fill(self, row: int, texts: list[str], rounded: Rounded | None) -> None:
        # What a copy of a cell gives: the number in full, not its cut display.
        numbers: dict[int, CopyValue | None] = {}
        if rounded is not None:
            numbers = {
                2: rounded.value,
                4: rounded.error_abs,
                5: rounded.error_rel,
                6: rounded.error_ulps,
            }
        for column, text in enumerate(texts):
            item = _set_text(self.table, row, column, text)
            set_copy_value(item, numbers.get(column))
            if column == 3 and text:
                item.setForeground(QBrush(role_color(f"class_{text}")))
            if column == 7:
                flagged = rounded is not None and (rounded.overflow or rounded.underflow)
                item.setForeground(
                    QBrush(role_color("error")) if flagged else self.table.palette().text()
                )
            if column == 0 and rounded is not None:
                item.setToolTip(rounded.format.description)


def chosen_formats(session: FormatsSession, include_common: bool) -> list[FloatFormat]:
    """The stacked editors' formats, then (optionally) the common ML formats."""
    chosen: list[FloatFormat] = []
    for editor in session.editors:
        if editor.format not in chosen:
            chosen.append(editor.format)
    if include_common:
        for fmt in session.known_formats():
            names = {fmt.name, *fmt.aliases}
            if names & COMMON_NAMES and fmt not in chosen:
                chosen.append(fmt)
    return chosen


COMMON_NAMES = {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}


class PropertiesTable(LazyView):
    """Max, min normal, min subnormal, eps, digits, finite-value count of chosen formats."""

    def __init__(self, session: FormatsSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.include_common = QCheckBox("also FP32, FP16, BF16, FP8 (E4M3, E5M2)")
        self.include_common.setChecked(True)
        self.table = QTableWidget(0, len(PROPERTY_COLUMNS))
        self.table.setHorizontalHeaderLabels(PROPERTY_COLUMNS)
        for column, name in enumerate(PROPERTY_COLUMNS):
            header_item = self.table.horizontalHeaderItem(column)
            if header_item is not None and name in PROPERTY_TIPS:
                header_item.setToolTip(PROPERTY_TIPS[name])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self._shown: tuple[FloatFormat, ...] = ()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.include_common)
        layout.addWidget(self.table, 1)
        self.include_common.toggled.connect(lambda _: self.mark_stale())
        session.changed.connect(self.mark_stale)

    def render_view(self) -> None:
        formats = chosen_formats(self.session, self.include_common.isChecked())
        if tuple(formats) == self._shown:
            return  # properties depend on the formats only, not on the value
        self._shown = tuple(formats)
        self.table.setRowCount(len(formats))
        for row, fmt in enumerate(formats):
            sign_bits = 1 if fmt.signed else 0
            texts = [
                fmt.name,
                f"{sign_bits}/{fmt.exponent_bits}/{fmt.mantissa_bits}",
                str(fmt.bias),
                short(fmt.max),
                short(fmt.min_normal),
                short(fmt.min_subnormal) if fmt.min_subnormal is not None else "none",
                short(fmt.eps),
                f"≈{fmt.decimal_digits:.2f}",  # (m + 1) log10 2 is irrational: rounded
                f"{fmt.finite_count:,}",
                "yes" if fmt.has_inf else "no",
                "yes" if fmt.has_nan else "no",
                "yes" if fmt.has_negative_zero else "no",
            ]
            exact = {3: fmt.max, 4: fmt.min_normal, 5: fmt.min_subnormal, 6: fmt.eps}
            # A copy gives what another program reads: 4278190080, not "4,278,190,080".
            numbers: dict[int, CopyValue | None] = {
                **exact,
                7: fmt.decimal_digits,
                8: fmt.finite_count,
            }
            for column, text in enumerate(texts):
                item = _set_text(self.table, row, column, text)
                set_copy_value(item, numbers.get(column))
                if column == 0:
                    item.setToolTip(fmt.description)
                else:
                    value = exact.get(column)
                    if value is not None:
                        item.setToolTip(f"exactly {exact_decimal(value)}")
        self.table.resizeColumnsToContents()
