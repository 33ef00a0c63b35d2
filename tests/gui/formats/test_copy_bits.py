"""Copy Bits: the bit editor's code in binary, grouped sign|exponent|fraction as shown, from
the Edit menu's shortcut (Ctrl+Shift+B, taken by nothing else) or the bits' right-click
menu, which also copies the hex code. Expected bits come from numpy's own float32/float16
bit patterns (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from pytestqt.qtbot import QtBot

from fpexplorer.formats import get_format
from fpexplorer.gui.main_window import SHORTCUTS_HELP, MainWindow


def _grouped(bits: str, exponent_bits: int) -> str:
    return f"{bits[0]}|{bits[1 : 1 + exponent_bits]}|{bits[1 + exponent_bits :]}"


def test_ctrl_shift_b_copies_the_active_editors_bits(qtbot: QtBot, window: MainWindow) -> None:
    window.session.enter_text("0.1")
    bits = window.formats_panel.rows[0].bits
    bits.setFocus()
    qtbot.keyClick(
        bits, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    )
    expected = _grouped(format(int(np.float32(0.1).view(np.uint32)), "032b"), 8)
    assert QGuiApplication.clipboard().text() == expected == "0|01111011|10011001100110011001101"
    assert "Copied bits" in window.statusBar().currentMessage()
    # What is copied reads back as the same code.
    assert window.session.enter_text(expected) and window.session.active.code == int(
        np.float32(0.1).view(np.uint32)
    )


def test_the_bits_context_menu_copies_bits_and_hex(qtbot: QtBot, window: MainWindow) -> None:
    window.session.enter_text("-1/3")
    row = window.formats_panel.rows[1]  # float16
    assert row.editor.format == get_format("float16")
    code = int(np.float16(-1 / 3).view(np.uint16))
    menu = row.bits.context_menu()
    actions = menu.actions()
    assert [action.text().split("  ")[0] for action in actions] == ["Copy Bits", "Copy Code (hex)"]
    assert all(action.text().endswith(("\tCtrl+Shift+B", "\tCtrl+Shift+C")) for action in actions)
    actions[0].trigger()
    assert QGuiApplication.clipboard().text() == _grouped(format(code, "016b"), 5)
    actions[1].trigger()
    assert QGuiApplication.clipboard().text() == f"0x{code:04X}"
    menu.deleteLater()


@pytest.mark.parametrize("name", ["e8m0", "binary8p1ue"])
def test_one_field_bits_are_copied_as_a_binary_code_that_reads_back(
    window: MainWindow, name: str
) -> None:
    # No sign, no fraction: the bits are one field, no "|" in them. Copied bare
    # ("10000001") they read back in the value field as the decimal 10,000,001.
    window.session.set_format(window.session.active, get_format(name))
    window.session.enter_text("4")
    code = window.session.active.code
    expected = "0b" + format(code, "08b")
    window.copy_bits()
    assert QGuiApplication.clipboard().text() == expected
    row = window.formats_panel.rows[0]
    assert row.bits.copy_texts()[0][2] == expected
    # What is copied reads back as the same code.
    window.session.enter_text("1")
    assert window.session.enter_text(expected) and window.session.active.code == code


def test_the_copy_bits_shortcut_is_unique_and_listed(window: MainWindow) -> None:
    window.training_panel  # noqa: B018 - builds it: its actions join the File menu
    keys = [
        action.shortcut().toString(QKeySequence.SequenceFormat.PortableText)
        for menu_action in window.menuBar().actions()
        for action in menu_action.menu().actions()
        if not action.shortcut().isEmpty()
    ]
    assert keys.count("Ctrl+Shift+B") == 1
    assert len(keys) == len(set(keys))
    assert "<b>Ctrl+Shift+B</b>" in SHORTCUTS_HELP


def test_bits_copied_from_one_format_are_not_read_as_a_code_of_another(
    window: MainWindow,
) -> None:
    # Copy Bits on the float16 row, paste into the value field while float32 is active: the
    # fields 1|5|10 are not float32's 1|8|23. Before, they were read as the 16-bit number
    # 0x3C00, a float32 subnormal (2.15e-41), silently.
    window.session.enter_text("1")
    window.session.set_active(window.session.editors[1])  # float16
    window.copy_bits()
    copied = QGuiApplication.clipboard().text()
    assert copied == "0|01111|0000000000"
    window.session.set_active(window.session.editors[0])  # float32
    assert not window.session.enter_text(copied)
    assert "float32's are 1|8|23: name the format they are fields of" in str(
        window.session.entry_error
    )
    assert window.session.active.code == int(np.float32(1).view(np.uint32))
    assert window.session.enter_text("float16:" + copied) and window.session.active.code == int(
        np.float32(1).view(np.uint32)
    )


def test_the_block_editors_bits_menus_name_no_shortcut_that_copies_something_else(
    window: MainWindow,
) -> None:
    # Ctrl+Shift+B and Ctrl+Shift+C copy the bit editor's active code: named beside the
    # block scale's own Copy Bits they promised a copy of the scale.
    from fpexplorer.gui.formats.block_view import BlockEditorView

    window.formats_panel.show_view("block")
    (view,) = window.findChildren(BlockEditorView)
    for bits in (view.scale_bits, view.tensor_bits):
        menu = bits.context_menu()
        texts = [action.text() for action in menu.actions()]
        assert [text.split("  ")[0] for text in texts] == ["Copy Bits", "Copy Code (hex)"]
        assert not any("\t" in text for text in texts), texts
        menu.actions()[0].trigger()
        assert QGuiApplication.clipboard().text() == bits.copy_texts()[0][2]
        menu.deleteLater()
    row_menu = window.formats_panel.rows[0].bits.context_menu()
    assert all("\tCtrl+Shift+" in action.text() for action in row_menu.actions())
    row_menu.deleteLater()
