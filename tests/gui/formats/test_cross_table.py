"""The All formats table: sorting by a clicked column header, and the name/family filter.

Sorting is by the exact values (numbers never by their text: "0.0015625" < "2.44e-5" as
text); the values it sorts come from Python floats and ml_dtypes where they can (oracles).
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from fpexplorer.formats import get_format, make_format
from fpexplorer.gui.formats.panel import FormatsPanel
from fpexplorer.gui.formats.tables import COMPARE_COLUMNS, CrossRow, sort_cross_rows


@pytest.fixture
def panel(panel: FormatsPanel) -> FormatsPanel:
    """The shared panel (conftest), on its All formats view."""
    panel.show_view("table")
    return panel


def _click_header(qtbot: QtBot, panel: FormatsPanel, name: str) -> None:
    header = panel.cross_table.table.horizontalHeader()
    column = COMPARE_COLUMNS.index(name)
    where = QPoint(header.sectionViewportPosition(column) + 5, header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=where)


def _column(panel: FormatsPanel, name: str) -> list[str]:
    table = panel.cross_table.table
    column = COMPARE_COLUMNS.index(name)
    return [table.item(row, column).text() for row in range(table.rowCount())]


def _oracle_value(name: str, value: float) -> Fraction | None:
    """The value rounded by numpy / ml_dtypes (None for a format they do not have)."""
    dtype = {
        "float64": np.float64,
        "float32": np.float32,
        "float16": np.float16,
        "bfloat16": ml_dtypes.bfloat16,
        "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2,
        "float8_e4m3": ml_dtypes.float8_e4m3,
        "float8_e3m4": ml_dtypes.float8_e3m4,
        "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
        "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
        "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    }.get(name)
    if dtype is None:
        return None
    return Fraction(float(np.array(value, dtype=np.float64).astype(dtype)))


def test_clicking_a_header_sorts_by_the_exact_error_and_again_reverses(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.session.enter_text("0.1")
    view = panel.cross_table
    _click_header(qtbot, panel, "Abs. error")
    names = _column(panel, "Format")
    errors = {
        name: abs(value - Fraction(1, 10))
        for name in names
        if (value := _oracle_value(name, 0.1)) is not None
    }
    assert len(errors) >= 8
    shown = [errors[name] for name in names if name in errors]
    assert shown == sorted(shown)
    # By their text, "0.0015625" (E4M3) would come before "2.44140625e-5" (FP16).
    assert names.index("float16") < names.index("float8_e4m3fn")
    assert sorted(_column(panel, "Abs. error")) != _column(panel, "Abs. error")
    # The rows loaded by a click are the sorted ones.
    assert [fmt.name for fmt, _ in view.rows] == names

    _click_header(qtbot, panel, "Abs. error")
    reversed_names = _column(panel, "Format")
    shown = [errors[name] for name in reversed_names if name in errors]
    assert shown == sorted(shown, reverse=True)

    table = view.table
    row = reversed_names.index("bfloat16")
    rect = table.visualRect(table.model().index(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert panel.session.active.format == get_format("bfloat16")
    expected = int(np.array(0.1, dtype=ml_dtypes.bfloat16).view(np.uint16))
    assert panel.session.active.code == expected


def test_values_sort_from_minus_inf_to_inf_with_nan_last_either_way(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.session.enter_text("1e6")  # inf in FP16, NaN in E4M3, finite in FP32
    _click_header(qtbot, panel, "Value")
    classes = _column(panel, "Class")
    nan_rows = [row for row, kind in enumerate(classes) if kind == "nan"]
    assert nan_rows and nan_rows == list(range(len(classes) - len(nan_rows), len(classes)))
    names = _column(panel, "Format")
    assert names.index("float16") > names.index("float32")  # inf after 1e6
    _click_header(qtbot, panel, "Value")
    classes = _column(panel, "Class")
    assert classes[0] == "inf" and classes[-1] == "nan"
    names = _column(panel, "Format")
    assert names.index("float16") < names.index("float32")


def test_equal_looking_values_sort_by_their_exact_values() -> None:
    # 1/3 into three formats whose values share their first 16 digits: cells that read alike
    # sort by the exact values (float64's from Python's float, the oracle).
    third = Fraction(1, 3)
    formats = [make_format(9, 54), get_format("float64"), make_format(10, 53)]
    rows = [CrossRow(fmt, fmt.round(third), (fmt.name,) + ("0.3333…",) * 7) for fmt in formats]
    value_column = COMPARE_COLUMNS.index("Value")
    ordered = [row.format for row in sort_cross_rows(rows, value_column, descending=False)]
    values = [fmt.to_exact(fmt.from_value(third)).fraction for fmt in ordered]
    assert values == sorted(values) and len(set(values)) == 3
    assert Fraction(1 / 3) in values


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("e4m3", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e4m3"]),
        ("E4M3 fnuz", ["float8_e4m3fnuz", "float8_e4m3b11fnuz"]),
        ("ocp mx", ["float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]),
        ("ieee 754", ["float64", "float32", "float16"]),
        ("half", ["float16"]),
    ],
)
def test_the_filter_keeps_formats_by_name_or_family(
    qtbot: QtBot, panel: FormatsPanel, text: str, expected: list[str]
) -> None:
    panel.session.enter_text("0.1")
    view = panel.cross_table
    qtbot.keyClicks(view.filter_field, text)
    assert _column(panel, "Format") == expected
    assert [fmt.name for fmt, _ in view.rows] == expected
    total = len(panel.session.known_formats())
    assert f"{len(expected)} of {total} match" in view.caption.text()
    view.filter_field.clear()
    assert len(_column(panel, "Format")) == total


def test_the_filter_and_the_sort_hold_when_the_value_changes(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    view = panel.cross_table
    qtbot.keyClicks(view.filter_field, "p3109")
    _click_header(qtbot, panel, "Code")
    for text in ("0.1", "-3"):
        panel.session.enter_text(text)
        names = _column(panel, "Format")
        assert names and all(name.startswith("binary8p") for name in names)
        codes = [int(code, 16) for code in _column(panel, "Code")]
        assert codes == sorted(codes)
