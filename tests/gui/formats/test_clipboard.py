"""Copies from the Formats panel give what another program reads: every digit, no thousands
separators, no display cut ("…"). The Properties table copied "4,278,190,080" and
"3.40282346…e38" for float32; a spreadsheet reads the first as text and the second not
at all. The expected texts come from numpy and Python's Decimal (the oracles).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QTableWidget
from pytestqt.qtbot import QtBot

from fpexplorer.formats import ExactValue
from fpexplorer.gui.formats.clipboard import copy_text
from fpexplorer.gui.main_window import MainWindow


def _copy_row(qtbot: QtBot, table: QTableWidget, name: str) -> list[str]:
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == name)
    table.setFocus()
    table.selectRow(row)
    qtbot.keyClick(table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    return QGuiApplication.clipboard().text().split("\t")


def _exact(value: float | np.floating) -> str:
    text = format(Decimal(float(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def test_the_properties_table_copies_plain_digits(qtbot: QtBot, window: MainWindow) -> None:
    window.formats_panel.show_view("properties")
    table = window.formats_panel.properties.table
    copied = _copy_row(qtbot, table, "float32")
    info = np.finfo(np.float32)
    # Every code but the 2**24 whose exponent field is all ones (inf and NaN).
    assert copied[8] == str(2**32 - 2**24) == "4278190080"
    assert copied[3] == str(int(info.max)) == "340282346638528859811704183484516925440"
    assert copied[4] == _exact(info.smallest_normal)
    assert copied[5] == _exact(info.smallest_subnormal)
    assert copied[6] == _exact(info.eps)
    assert float(copied[7]) == pytest.approx(24 * np.log10(2))
    # On screen the separators and the cut stay.
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "float32")
    assert table.item(row, 8).text() == "4,278,190,080"
    assert table.item(row, 3).text() == "3.40282346…e38"
    assert window.statusBar().currentMessage().startswith("Copied the selected cells: float32")


def test_the_all_formats_table_copies_exact_values_and_errors(
    qtbot: QtBot, window: MainWindow
) -> None:
    window.session.enter_text("0.1")
    window.formats_panel.show_view("table")
    table = window.formats_panel.cross_table.table
    copied = _copy_row(qtbot, table, "float32")
    rounded = np.float32(0.1)
    assert copied[:4] == ["float32", "0x3DCCCCCD", _exact(rounded), "normal"]
    error = abs(Fraction(float(rounded)) - Fraction(1, 10))
    assert Fraction(Decimal(copied[4])) == error
    assert Fraction(Decimal(copied[5])) == error * 10
    assert copied[7] == "inexact"
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "float32")
    assert table.item(row, 2).text() == "0.100000001…"


def test_the_arithmetic_table_copies_exact_results(qtbot: QtBot, window: MainWindow) -> None:
    window.formats_panel.show_view("arithmetic")
    view = window.formats_panel.view("arithmetic")
    view.state.set_format(window.session.active.format)  # float32
    view.state.set_operands(["0.1", "0.2"])
    copied = _copy_row(qtbot, view.table, "nearest_even")
    assert copied[1] == _exact(np.float32(0.1) + np.float32(0.2))
    assert "…" not in QGuiApplication.clipboard().text()


def test_copy_text_writes_numbers_as_other_programs_read_them() -> None:
    assert copy_text(2**70) == "1180591620717411303424"
    assert copy_text(Fraction(-3, 8)) == "-0.375"
    assert copy_text(ExactValue.infinity(True)) == "-inf"
    assert float(copy_text(ExactValue.nan())) != float(copy_text(ExactValue.nan()))
    assert copy_text(0.1) == "0.1"
