"""The Arithmetic view and its Qt-free state against the engine (and numpy for fp16)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from fpexplorer.formats import ROUNDING_MODES, get_format
from fpexplorer.formats.arith import calculate
from fpexplorer.gui.formats.arith_state import ArithmeticState
from fpexplorer.gui.formats.arith_view import MODE_COLUMNS, ArithmeticView
from fpexplorer.gui.formats.panel import FormatsPanel
from fpexplorer.gui.formats.state import FormatsSession


def column(view: ArithmeticView, name: str) -> list[str]:
    index = MODE_COLUMNS.index(name)
    texts = []
    for row in range(view.table.rowCount()):
        item = view.table.item(row, index)
        assert item is not None
        texts.append(item.text())
    return texts


@pytest.fixture
def view(qtbot: QtBot) -> ArithmeticView:
    widget = ArithmeticView()
    qtbot.addWidget(widget)
    widget.resize(1000, 360)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_fp16_point_one_plus_point_two_under_every_mode(view: ArithmeticView) -> None:
    engine = calculate("add", ["0.1", "0.2"], "fp16", modes=ROUNDING_MODES, seed=0)
    assert column(view, "rounding")[: len(ROUNDING_MODES) - 1] == list(ROUNDING_MODES[:-1])
    assert column(view, "rounding")[-1] == "stochastic (seed 0)"
    assert column(view, "code") == [f"0x{r.code:04X}" for r in engine.results]
    # numpy adds float16 with round-to-nearest-even: the first row.
    total = np.float16(0.1) + np.float16(0.2)
    assert column(view, "code")[0] == f"0x{int(total.view(np.uint16)):04X}" == "0x34CC"
    # The exact sum 0.2999267578125 is a tie between 0.2998046875 and 0.300048828125.
    assert "0.0999755859375 + 0.199951171875 = <b>0.2999267578125</b>" in view.exact.text()
    assert column(view, "result")[:4] == [
        "0.2998046875",
        "0.300048828125",
        "0.2998046875",
        "0.300048828125",
    ]
    assert set(column(view, "error |result − exact|")) == {"0.0001220703125"}
    assert set(column(view, "error (ulps)")) == {"0.5"}
    assert set(column(view, "flags")) == {"inexact"}
    assert "(rounded from 0.1)" in view.operands.text()


def test_typed_operands_operations_and_flags(view: ArithmeticView, qtbot: QtBot) -> None:
    view.operation.setCurrentIndex(view.operation.findData("mul"))
    view.operation.activated.emit(view.operation.currentIndex())
    for field, text in zip(view.fields, ("60000", "2"), strict=False):
        field.clear()
        qtbot.keyClicks(field, text)
    qtbot.keyClick(view.fields[1], Qt.Key.Key_Return)
    assert "60000 × 2 = <b>120000</b>" in view.exact.text()
    results = column(view, "result")
    assert results[0] == "inf" and results[2] == "65504"  # toward_zero never overflows past max
    assert column(view, "flags")[0] == "overflow, inexact"
    view.operation.setCurrentIndex(view.operation.findData("sqrt"))
    view.operation.activated.emit(view.operation.currentIndex())
    assert not view.fields[1].isVisible() and view.fields[0].isVisible()
    view.fields[0].setText("2")
    qtbot.mouseClick(view.compute_button, Qt.MouseButton.LeftButton)
    assert "sqrt(2) = <b>1.41421356…</b>" in view.exact.text()
    assert "irrational" in view.exact.text()
    assert column(view, "result")[0] == "1.4140625"
    assert column(view, "error |result − exact|")[0].startswith("≈ 0.000151062")
    view.operation.setCurrentIndex(view.operation.findData("div"))
    view.operation.activated.emit(view.operation.currentIndex())
    view.fields[0].setText("1")
    view.fields[1].setText("-0")
    qtbot.mouseClick(view.compute_button, Qt.MouseButton.LeftButton)
    assert column(view, "result")[0] == "-inf"
    assert column(view, "flags")[0] == "divide_by_zero"


def test_bad_operands_keep_the_last_result(view: ArithmeticView, qtbot: QtBot) -> None:
    before = column(view, "result")
    view.fields[1].setText("0.2.3")
    qtbot.mouseClick(view.compute_button, Qt.MouseButton.LeftButton)
    assert view.message.isVisible()
    assert view.message.text().startswith("b: ")
    # The table still holds the last result: said, as the field now holds other text.
    assert view.message.text().endswith("Below: the last result, for the operands it names.")
    assert column(view, "result") == before
    assert view.fields[1].text() == "0.2.3"  # left there to be fixed
    view.fields[1].setText("")
    qtbot.mouseClick(view.compute_button, Qt.MouseButton.LeftButton)
    assert view.message.text().startswith("b: type a number")
    view.fields[1].setText("0.25")
    qtbot.mouseClick(view.compute_button, Qt.MouseButton.LeftButton)
    assert not view.message.isVisible()


def test_state_fma_is_rounded_once() -> None:
    # (1 + 2**-4)**2 - 1 = 2**-3 + 2**-8: a bfloat16 value, which a rounded product loses.
    state = ArithmeticState("bfloat16", "fma", ("1.0625", "1.0625", "-1"))
    readout = state.readout()
    assert readout.exact_text == "0.12890625"
    assert readout.exact_note == "exact, and a value of the format"
    assert [line.value_text for line in readout.lines] == ["0.12890625"] * len(ROUNDING_MODES)
    assert readout.lines[0].flags_text == "—"
    product = calculate("mul", ["1.0625", "1.0625"], "bfloat16").result("nearest_even")
    assert product.value.fraction == 1.125  # rounded first: 1 + 2**-3 + 2**-8 loses 2**-8
    state.set_operation("sqrt")
    assert state.readout().expression == "sqrt(1.0625)"


def test_follows_the_active_editor_and_the_overflow_picker(qtbot: QtBot) -> None:
    session = FormatsSession([get_format("float32"), get_format("binary8p3se")])
    panel = FormatsPanel(session)
    qtbot.addWidget(panel)
    panel.resize(1280, 760)
    panel.show()
    panel.show_view("arithmetic")
    view = panel.view("arithmetic")
    assert isinstance(view, ArithmeticView)
    assert "In <b>float32</b>" in view.format_label.text()
    session.set_active(session.editors[1])
    assert view.state.format.name == "binary8p3se"
    p3 = get_format("binary8p3se")
    a, b = (p3.to_fraction(p3.from_value(text)) for text in ("0.1", "0.2"))
    assert (a, b) == (Fraction(3, 32), Fraction(3, 16))  # 2 fraction bits
    assert "0.09375 + 0.1875 = <b>0.28125</b>" in view.exact.text()
    session.set_overflow("saturate")
    assert "overflow policy <b>saturate</b>" in view.format_label.text()


def test_an_operand_the_format_cannot_hold_is_said() -> None:
    state = ArithmeticState("binary8p4uf", "add", ("-1", "2"))
    readout = state.readout()
    assert readout.operands[0].note == "binary8p4uf has no code for -1: NaN (invalid)"
    assert readout.operands[1].note == ""
    assert readout.exact_text == "nan"
    assert {line.value_text for line in readout.lines} == {"nan"}


def test_different_results_never_read_the_same() -> None:
    # float64's sqrt(2): the results 0x3FF6A09E667F3BCD and ...CC and the root itself all
    # read "1.41421356…" in the table and the exact line.
    from fpexplorer.formats import exact_decimal

    readout = ArithmeticState("fp64", "sqrt", ["2", "", ""]).readout()
    by_value: dict[str, object] = {}
    for line in readout.lines:
        assert by_value.setdefault(line.value_text, line.result.value) == line.result.value
        digits = exact_decimal(line.result.value)
        assert digits.startswith(line.value_text.rstrip("…"))
    assert readout.exact_text not in by_value
    assert "1.41421356237309504880".startswith(readout.exact_text.rstrip("…"))
