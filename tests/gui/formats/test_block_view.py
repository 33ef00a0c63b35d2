"""The block editor view driven like a user would (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QGuiApplication, QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from fpexplorer.formats.block_quantize import quantize
from fpexplorer.gui.formats.block_state import block_format_names
from fpexplorer.gui.formats.block_view import ELEMENT_COLUMNS, BlockEditorView

MOVE_INTERVAL_MS = 25  # above pyqtgraph's mouse rate limit


@pytest.fixture
def view(qtbot: QtBot) -> BlockEditorView:
    widget = BlockEditorView()
    qtbot.addWidget(widget)
    widget.resize(1200, 520)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def cell(view: BlockEditorView, row: int, column: str) -> str:
    item = view.table.item(row, ELEMENT_COLUMNS.index(column))
    assert item is not None
    return item.text()


def send_mouse(widget: QWidget, kind: QMouseEvent.Type, point: QPointF, held: bool) -> None:
    """A mouse event with the left button held (QTest's mouseMove carries no buttons).

    pyqtgraph's scene drops move events closer together than its rate limit, so each one
    first lets the event loop run a little (no sleep: events keep being processed)."""
    if kind == QMouseEvent.Type.MouseMove:
        QTest.qWait(MOVE_INTERVAL_MS)
    buttons = Qt.MouseButton.LeftButton if held else Qt.MouseButton.NoButton
    event = QMouseEvent(
        kind,
        point,
        widget.mapToGlobal(point),
        Qt.MouseButton.LeftButton,
        buttons,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(widget, event)


def drag(
    view: BlockEditorView, index: int, start_y: float, end_y: float, held_at_end: int = 0
) -> None:
    """Press on bar `index` at height start_y, move to end_y, wiggle there `held_at_end`
    times (each move at the plot's edge doubles the range), release."""
    viewport = view.plot_widget.viewport()
    start = view.bar_point(index, start_y)
    end = view.bar_point(index, end_y)
    send_mouse(viewport, QMouseEvent.Type.MouseButtonPress, start, True)
    for step in range(1, 6):
        point = start + (end - start) * (step / 5)
        send_mouse(viewport, QMouseEvent.Type.MouseMove, point, True)
    for wiggle in range(held_at_end):
        send_mouse(viewport, QMouseEvent.Type.MouseMove, end + QPointF(wiggle % 2, 0), True)
    send_mouse(viewport, QMouseEvent.Type.MouseButtonRelease, end, False)


def codes_by_quantize(view: BlockEditorView, **kwargs: object) -> tuple[str, list[str]]:
    values = np.array([x.to_float() for x in view.state.inputs])
    quantized = quantize(values, view.state.format, **kwargs)  # type: ignore[arg-type]
    fmt = view.state.format
    scale = fmt.scale_format.code_to_hex(int(quantized.scale_codes.reshape(-1)[0]))
    return scale, [fmt.element.code_to_hex(int(c)) for c in quantized.codes]


def test_shows_the_block_as_quantize_gives_it(view: BlockEditorView) -> None:
    scale, codes = codes_by_quantize(view)
    assert view.table.rowCount() == 32
    assert [cell(view, i, "code") for i in range(32)] == codes
    assert scale in view.scale_label.text()
    assert "by the floor rule" in view.scale_label.text()
    assert cell(view, 0, "input") == "0.126"
    assert cell(view, 0, "value") == "0.125"
    assert cell(view, 0, "error") == "-0.001"
    assert cell(view, 0, "bits") == "0|1011|000"  # 16 × 2⁻⁷
    heights = view.input_bars.opts["height"]
    assert list(heights[:2]) == [0.126, -0.132]
    assert not view.tensor_box.isVisible()


@pytest.mark.slow  # drags through many redraws: about half a second
def test_dragging_a_bar_into_an_outlier_moves_the_scale_and_the_others(
    view: BlockEditorView,
) -> None:
    before = [cell(view, i, "code") for i in range(32)]
    old_scale = view.scale_bits._code
    low, high = view.view_box.viewRange()[1]
    drag(view, 6, 1.3, low + 0.8 * (high - low))
    value = view.state.inputs[6].to_float()
    assert 1.3 < value < high  # it followed the cursor up, within the plot
    assert view.state.source.startswith("edited")
    scale, codes = codes_by_quantize(view)
    assert [cell(view, i, "code") for i in range(32)] == codes
    assert view.scale_bits._code == old_scale
    assert cell(view, 6, "input") == view.state.readout().rows[6].input_text
    # Pushed against the top edge the range grows with each move: an outlier.
    low, high = view.view_box.viewRange()[1]
    drag(view, 6, value, high - 0.01 * (high - low), held_at_end=6)
    assert view.state.inputs[6].to_float() > 2 * high  # beyond the plot's top it started with
    scale, codes = codes_by_quantize(view)
    assert view.scale_bits._code != old_scale
    assert scale in view.scale_label.text()
    after = [cell(view, i, "code") for i in range(32)]
    assert after == codes
    assert sum(a != b for a, b in zip(before, after, strict=True)) > 10


def test_a_press_between_bars_drags_nothing(view: BlockEditorView) -> None:
    kept = view.state.inputs
    viewport = view.plot_widget.viewport()
    start = (
        view.bar_point(3, 0.1)
        + QPointF(view.bar_point(4, 0).x() - view.bar_point(3, 0).x(), 0) * 0.5
    )
    send_mouse(viewport, QMouseEvent.Type.MouseButtonPress, start, True)
    for step in range(1, 5):
        send_mouse(viewport, QMouseEvent.Type.MouseMove, start - QPointF(0, 20 * step), True)
    send_mouse(viewport, QMouseEvent.Type.MouseButtonRelease, start - QPointF(0, 80), False)
    assert view.state.inputs == kept


def test_clicking_a_scale_bit_moves_every_element(view: BlockEditorView, qtbot: QtBot) -> None:
    before = [cell(view, i, "code") for i in range(32)]
    values_before = [cell(view, i, "value") for i in range(32)]
    code = view.state.readout().scale_code
    qtbot.mouseClick(
        view.scale_bits, Qt.MouseButton.LeftButton, pos=view.scale_bits.cell_rect(0).center()
    )
    assert view.state.readout().scale_code == code ^ 1
    assert "forced" in view.scale_label.text()
    assert view.rule_scale_button.isEnabled()
    scale_code = view.state.readout().scale_code
    _, codes = codes_by_quantize(view, scale_codes=scale_code)
    assert [cell(view, i, "code") for i in range(32)] == codes
    assert all(a != b for a, b in zip(before, codes, strict=True))  # every element moved
    qtbot.mouseClick(view.rule_scale_button, Qt.MouseButton.LeftButton)
    assert view.state.readout().scale_code == code
    assert [cell(view, i, "value") for i in range(32)] == values_before


def test_nvfp4_shows_its_per_tensor_scale_bits(view: BlockEditorView, qtbot: QtBot) -> None:
    view.format_picker.setCurrentIndex(view.format_picker.findData("nvfp4"))
    view.format_picker.activated.emit(view.format_picker.currentIndex())
    assert view.tensor_box.isVisible()
    assert view.table.rowCount() == 16
    assert "16 were dropped" in view.message.text()
    assert [view.rule_picker.itemText(i) for i in range(view.rule_picker.count())] == ["nearest"]
    code = view.state.readout().tensor_scale_code
    assert code is not None
    qtbot.mouseClick(
        view.tensor_bits, Qt.MouseButton.LeftButton, pos=view.tensor_bits.cell_rect(23).center()
    )
    assert view.state.readout().tensor_scale_code == code ^ (1 << 23)
    assert "forced" in view.tensor_label.text()
    qtbot.mouseClick(
        view.tensor_bits, Qt.MouseButton.LeftButton, pos=view.tensor_bits.cell_rect(31).center()
    )
    assert "positive" in view.message.text()


def test_typed_and_pasted_values(view: BlockEditorView, qtbot: QtBot) -> None:
    qtbot.keyClicks(view.values_field, "1, 2, 3, 100")
    qtbot.keyClick(view.values_field, Qt.Key.Key_Return)
    assert view.table.rowCount() == 4
    assert [cell(view, i, "input") for i in range(4)] == ["1", "2", "3", "100"]
    assert view.source.text() == "values: typed"
    QGuiApplication.clipboard().setText("0.5\n0.25\nnot-a-number")
    qtbot.mouseClick(view.paste_button, Qt.MouseButton.LeftButton)
    assert "number 3, 'not-a-number', is not a number" in view.message.text()
    assert view.message.isVisible()
    assert view.table.rowCount() == 4  # nothing lost
    QGuiApplication.clipboard().setText("[0.5, 0.25, -8]")
    qtbot.mouseClick(view.paste_button, Qt.MouseButton.LeftButton)
    assert [cell(view, i, "input") for i in range(3)] == ["0.5", "0.25", "-8"]
    assert view.source.text() == "values: clipboard"
    assert not view.message.isVisible()


def test_a_decimal_comma_is_named_not_silently_split(view: BlockEditorView, qtbot: QtBot) -> None:
    # "1,5" became two elements, 1 and 5, with nothing said: a European decimal comma.
    qtbot.keyClicks(view.values_field, "1,5")
    qtbot.keyClick(view.values_field, Qt.Key.Key_Return)
    assert [cell(view, i, "input") for i in range(view.table.rowCount())] == ["1", "5"]
    assert view.message.isVisible()
    assert "'1,5' was read as two values, 1 and 5" in view.message.text()
    assert "for a decimal comma write 1.5" in view.message.text()
    assert view.values_field.text() == "1,5"  # what was typed stays to be corrected
    view.values_field.setText("1.5, 2")  # a comma and a space: a list, nothing to say
    qtbot.keyClick(view.values_field, Qt.Key.Key_Return)
    assert [cell(view, i, "input") for i in range(2)] == ["1.5", "2"]
    assert not view.message.isVisible()


def test_an_input_typed_into_the_table(view: BlockEditorView) -> None:
    item = view.table.item(2, ELEMENT_COLUMNS.index("input"))
    assert item is not None
    item.setText("448")
    assert view.state.inputs[2].fraction == 448
    assert cell(view, 2, "input") == "448"
    item = view.table.item(2, ELEMENT_COLUMNS.index("input"))
    assert item is not None
    item.setText("x")
    assert "element 2" in view.message.text()
    assert cell(view, 2, "input") == "448"


def test_npy_histogram_worst_blocks_and_bad_files(
    view: BlockEditorView, qtbot: QtBot, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    tensor = rng.standard_normal((8, 64)).astype(np.float32)
    tensor[5, 70 % 64] = 1e4
    path = tmp_path / "grads.npy"
    np.save(path, tensor)
    assert view.open_npy(str(path))
    # Block 0 is in the editor at once; the whole tensor is quantized on a worker thread,
    # whose outcome comes back through the event loop (the window stays responsive).
    assert view.state.busy is not None and view.state.tensor is None
    assert view.state.tensor_block == 0
    assert view.message.text().startswith("quantizing grads.npy (512 values)")
    qtbot.waitUntil(lambda: view.state.busy is None)
    assert view.side_tabs.currentIndex() == 1
    assert "grads.npy: 8×64 float32, 16 blocks of 32" in view.tensor_summary.text()
    heights = view.histogram_bars.opts["height"]
    assert int(np.sum(heights)) == 16 - view.state.tensor.exact_blocks  # type: ignore[union-attr]
    assert view.worst_table.rowCount() == 10
    worst_index = int(view.worst_table.item(0, 0).text())  # type: ignore[union-attr]
    view.worst_table.cellClicked.emit(0, 0)
    assert view.state.tensor_block == worst_index
    assert view.block_spin.value() == worst_index
    whole = quantize(tensor, "mxfp8_e4m3")
    row, column = divmod(worst_index, 2)
    expected = [f"0x{int(c):02x}" for c in whole.codes[row, column * 32 : column * 32 + 32]]
    assert [cell(view, i, "code") for i in range(32)] == expected
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY garbage")
    assert not view.open_npy(str(bad))
    assert "bad.npy is not a readable .npy file" in view.message.text()
    assert view.state.tensor_block == worst_index  # nothing lost
    assert [cell(view, i, "code") for i in range(32)] == expected


def test_registered_in_the_formats_panel_and_the_screenshot_command(qtbot: QtBot) -> None:
    from fpexplorer.commands.screenshot import VIEWS
    from fpexplorer.gui.formats.panel import VIEW_NAMES, FormatsPanel

    assert "block" in VIEW_NAMES
    assert set(VIEWS) == set(VIEW_NAMES)  # every panel view can be pictured
    panel = FormatsPanel()
    qtbot.addWidget(panel)
    panel.resize(1024, 640)
    panel.show()
    panel.show_view("block")
    view = panel.view("block")
    assert isinstance(view, BlockEditorView)
    assert panel.current_view_name() == "block"
    assert view.table.rowCount() == 32


def test_a_format_change_during_the_analysis_wins(
    view: BlockEditorView, qtbot: QtBot, tmp_path: Path
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.linspace(-3, 3, 96 * 4, dtype=np.float32).reshape(4, 96))
    assert view.open_npy(str(path))
    view.state.set_format("nvfp4")
    assert view.state.busy is not None
    qtbot.waitUntil(lambda: view.state.busy is None)
    tensor = view.state.tensor
    assert tensor is not None and tensor.quantized.format.name == "nvfp4"
    assert view.state.tensor_block == 0 and view.table.rowCount() == 16
    assert view.block_spin.maximum() == 4 * 6 - 1
    assert view.state.readout().tensor_scale_source.startswith("from the whole tensor")
    qtbot.waitUntil(lambda: view._worker_results.running == 0)


@pytest.mark.parametrize("name", block_format_names())
def test_every_block_format_through_the_picker(view: BlockEditorView, name: str) -> None:
    view.format_picker.setCurrentIndex(view.format_picker.findData(name))
    view.format_picker.activated.emit(view.format_picker.currentIndex())
    fmt = view.state.format
    assert fmt.name == name
    scale, codes = codes_by_quantize(view)
    assert [cell(view, i, "code") for i in range(fmt.block_size)] == codes
    assert scale in view.scale_label.text()
    bits = cell(view, 0, "bits")
    assert len(bits.replace("|", "")) == fmt.element.width
    assert view.scale_bits.cell_rect(fmt.scale_format.width - 1).isValid()
    modes = [view.rounding_picker.itemData(i) for i in range(view.rounding_picker.count())]
    assert "stochastic" in modes and "toward_zero" in modes
    view.rounding_picker.setCurrentIndex(modes.index("toward_zero"))
    view.rounding_picker.activated.emit(view.rounding_picker.currentIndex())
    _, truncated = codes_by_quantize(view, rounding="toward_zero")
    assert [cell(view, i, "code") for i in range(fmt.block_size)] == truncated


def test_up_and_down_keys_in_the_scale_bits_double_and_halve_it(
    view: BlockEditorView, qtbot: QtBot
) -> None:
    code = view.state.readout().scale_code
    view.scale_bits.setFocus()
    qtbot.keyClick(view.scale_bits, Qt.Key.Key_Up)
    assert view.state.readout().scale_code == code + 1
    assert "2⁻⁶ = 0.015625" in view.scale_label.text()
    qtbot.keyClick(view.scale_bits, Qt.Key.Key_Down)
    qtbot.keyClick(view.scale_bits, Qt.Key.Key_Down)
    assert view.state.readout().scale_code == code - 1
    view.state.set_scale_code(0)
    qtbot.keyClick(view.scale_bits, Qt.Key.Key_Down)
    assert view.state.problem == "the scale has no next value down"
    assert view.message.text() == "the scale has no next value down"


def test_saturated_and_non_finite_inputs_are_not_drawn_as_results(view: BlockEditorView) -> None:
    # A saturated input (and every input of a NaN-scale block) was drawn in the quantized
    # bars' red: one big red bar at 3e38 read as the result, and a block holding inf showed
    # "amax 3" beside its NaN scale.
    quantized = view.value_bars.opts["brush"]
    view.state.set_format("mxfp8_e5m2")
    assert view.state.load_text("1e38 3e38 -2e38 1")
    view.render_view()
    assert view.state.readout().rows[1].status == "saturated"
    brushes = view.input_bars.opts["brushes"]
    assert pg_color(brushes[1]) != pg_color(quantized)
    assert pg_color(brushes[0]) != pg_color(brushes[1])
    view.state.set_format("mxfp8_e4m3")
    assert view.state.load_text("1 2 inf 3 -0.5")
    view.render_view()
    assert view.state.readout().amax_text == "inf"
    assert all(pg_color(b) != pg_color(quantized) for b in view.input_bars.opts["brushes"])
    assert view.state.load_text("1 nan 3")
    assert view.state.readout().amax_text == "NaN"
    assert view.state.load_text("1 -3 2")
    assert view.state.readout().amax_text == "3"


def pg_color(brush: object) -> str:
    import pyqtgraph as pg

    return str(pg.mkBrush(brush).color().name())


def test_worst_blocks_table_never_cuts_a_number(
    view: BlockEditorView, qtbot: QtBot, tmp_path: Path
) -> None:
    # The last column (amax) stretched into what room was left, and Qt cut an exact
    # "3.89942169189453125" to "3.899421691894531…", which reads as the display rule's mark.
    rng = np.random.default_rng(0)
    tensor = rng.standard_normal((64, 64)).astype(np.float32)
    tensor[1, 5], tensor[2, 7] = np.inf, np.nan
    np.save(tmp_path / "t.npy", tensor)
    view.resize(1024, 520)
    assert view.open_npy(str(tmp_path / "t.npy"))
    qtbot.waitUntil(lambda: view.state.busy is None)
    QApplication.processEvents()
    table = view.worst_table
    metrics = table.fontMetrics()
    for row in range(table.rowCount()):
        for column in range(table.columnCount()):
            item = table.item(row, column)
            assert item is not None
            width = metrics.horizontalAdvance(item.text())
            assert width + 6 <= table.columnWidth(column), (row, column, item.text())


def test_an_infinite_input_stands_above_every_finite_one(view: BlockEditorView) -> None:
    # Failed before: under a NaN scale (no limit lines) inf was drawn at 1.2, below the 2
    # beside it; and 1e400 (past float64) had an infinite bar, which was not drawn at all.
    view.state.set_format("mxfp8_e4m3")
    assert view.state.load_text("1 inf 2 -inf")
    assert cell(view, 1, "element") == "0"  # the scale is NaN: every element reads 0x00
    heights = list(view.input_bars.opts["height"])
    assert heights[:2] == [1.0, 2.4] and heights[2:] == [2.0, -2.4]
    view.state.set_format("nvfp4")
    assert view.state.load_text("1e400, 1")
    heights = list(view.input_bars.opts["height"])
    limit = float(view.state.readout().limit)
    assert heights == [1.2 * limit, 1.0]


@pytest.mark.parametrize("exponent", [0, -10, -30, 30])
def test_the_limit_lines_are_drawn_where_the_limit_is(qtbot: QtBot, exponent: int) -> None:
    # Failed before for a block of 1e-30s in the app's window (as `fpexplorer screenshot
    # --view block` paints it): the dashed ±max element × scale lines were drawn at 0, so
    # the bars seemed to cross them.
    from PySide6.QtGui import QColor

    from fpexplorer.cli import build_parser
    from fpexplorer.commands.screenshot import prepare_window, render

    parsed = build_parser("screenshot").parse_args(
        ["screenshot", "--out", "unused.png", "--view", "block"]
    )
    _, window = prepare_window(parsed)
    qtbot.addWidget(window)
    view = window.formats_panel.view("block")
    assert isinstance(view, BlockEditorView)
    view.state.set_format("mxfp8_e4m3")
    view.state.load_text(f"1e{exponent}, -3e{exponent}, 2.5e{exponent}, 7e{exponent - 1}")
    render(window, 1920, 1080)
    image = view.plot_widget.grab().toImage()
    limit = float(view.state.readout().limit)
    box = view.plot.vb
    (_, _), (low, high) = box.viewRange()
    rect = view.plot_widget.mapFromScene(box.sceneBoundingRect()).boundingRect()
    row = round(rect.top() + (high - limit) / (high - low) * rect.height())
    left, right = rect.left() + 2, rect.right() - 2

    def reddish(x: int, y: int) -> bool:
        color = QColor(image.pixel(x, y))
        return color.red() > 150 and color.red() - color.green() > 80

    # +limit: above every bar (the largest quantized value is 2.56e-30 against 2.76e-30),
    # so only the dashes are red there; the pen's row is rounded either way.
    share = max(
        sum(reddish(x, y) for x in range(left, right)) / (right - left)
        for y in range(row - 1, row + 2)
    )
    window.close()
    assert share > 0.2, share
