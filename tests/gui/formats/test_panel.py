"""The Formats panel driven like a user would (pytest-qt, offscreen)."""

from __future__ import annotations

import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QTextDocument, QTextLayout, QTextOption
from PySide6.QtWidgets import QDialogButtonBox, QLabel
from pytestqt.qtbot import QtBot

from fpexplorer.formats import ROUNDING_MODES, get_format, make_format
from fpexplorer.gui.formats.custom_format import CustomFormatDialog
from fpexplorer.gui.formats.number_line_model import OFF_SCALE_MARGIN
from fpexplorer.gui.formats.panel import VIEWS, FormatsPanel


def oracle_code(value: float, dtype: object) -> int:
    array = np.array(value, dtype=np.float64).astype(dtype)
    return int(array.view(f"uint{np.dtype(dtype).itemsize * 8}"))


def type_value(qtbot: QtBot, panel: FormatsPanel, text: str) -> None:
    field = panel.entry.field
    field.clear()
    qtbot.keyClicks(field, text)
    qtbot.keyClick(field, Qt.Key.Key_Return)


def test_clicking_a_bit_changes_the_value_and_the_readouts(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    row = panel.rows[1]  # fp16
    type_value(qtbot, panel, "1")
    assert row.editor.code == 0x3C00
    qtbot.mouseClick(row.bits, Qt.MouseButton.LeftButton, pos=row.bits.cell_rect(9).center())
    assert row.editor.code == 0x3E00
    assert panel.session.active is row.editor
    assert panel.readouts.exact.toPlainText() == "1.5"
    assert panel.readouts.hex_code.text() == "0x3E00"
    assert panel.readouts.binary_code.text() == "0|01111|1000000000"
    assert "1.5" in row.summary.text()
    # Linked: FP32 shows the same value.
    assert panel.session.editors[0].code == oracle_code(1.5, np.float32)


def test_dragging_paints_several_bits(qtbot: QtBot, panel: FormatsPanel) -> None:
    row = panel.rows[1]
    panel.session.set_code(row.editor, 0)
    start = row.bits.cell_rect(14).center()
    qtbot.mousePress(row.bits, Qt.MouseButton.LeftButton, pos=start)
    for bit in (13, 12, 11):
        qtbot.mouseMove(row.bits, pos=row.bits.cell_rect(bit).center())
    qtbot.mouseRelease(row.bits, Qt.MouseButton.LeftButton, pos=row.bits.cell_rect(11).center())
    assert row.editor.code == 0x7800


def test_every_field_is_named_under_its_bits(qtbot: QtBot, panel: FormatsPanel) -> None:
    for name in ("float4_e2m1fn", "float8_e8m0fnu", "float64", "e2m0"):
        panel.session.set_format(panel.session.editors[1], get_format(name))
        labels = panel.rows[1].bits.field_labels()
        assert all(labels), (name, labels)  # FP4's one fraction bit had no label
    assert panel.rows[0].bits.field_labels() == ["sign", "exponent (8)", "fraction (23)"]


def test_keyboard_moves_and_toggles(qtbot: QtBot, panel: FormatsPanel) -> None:
    row = panel.rows[1]
    panel.session.set_code(row.editor, 0x3C00)
    row.bits.setFocus()
    qtbot.keyClick(row.bits, Qt.Key.Key_Home)  # sign bit
    qtbot.keyClick(row.bits, Qt.Key.Key_Space)
    assert row.editor.code == 0xBC00
    qtbot.keyClick(row.bits, Qt.Key.Key_Right)
    qtbot.keyClick(row.bits, Qt.Key.Key_1)  # set bit 14, cursor moves to bit 13
    assert row.editor.code == 0xFC00
    assert row.bits.cursor_bit == 13
    qtbot.keyClick(row.bits, Qt.Key.Key_Down)  # next value down from -inf: refused
    assert row.editor.code == 0xFC00
    qtbot.keyClick(row.bits, Qt.Key.Key_Up)  # next up from -inf: -max
    assert row.editor.code == 0xFBFF


@pytest.mark.parametrize(
    ("text", "fp16_code"),
    [
        ("0.1", oracle_code(0.1, np.float16)),
        ("1/3", oracle_code(1 / 3, np.float16)),
        ("0x1.8p3", oracle_code(12.0, np.float16)),
        ("-inf", 0xFC00),
        ("-0", 0x8000),
        ("max", 0x7BFF),
        ("0x3555", 0x3555),
        ("0b0011110000000000", 0x3C00),
    ],
)
def test_typing_each_kind_of_value(
    qtbot: QtBot, panel: FormatsPanel, text: str, fp16_code: int
) -> None:
    panel.session.set_active(panel.session.editors[1])
    type_value(qtbot, panel, text)
    assert panel.session.editors[1].code == fp16_code
    assert not panel.entry.message.isVisible()


def test_bad_input_shows_a_message_and_keeps_the_state(qtbot: QtBot, panel: FormatsPanel) -> None:
    type_value(qtbot, panel, "0.1")
    codes = [editor.code for editor in panel.session.editors]
    exact = panel.readouts.exact.toPlainText()
    type_value(qtbot, panel, "0.1.2")
    assert panel.entry.message.isVisible()
    assert "0.1.2" in panel.entry.message.text()
    assert [editor.code for editor in panel.session.editors] == codes
    assert panel.readouts.exact.toPlainText() == exact
    type_value(qtbot, panel, "2")  # a good value clears the message
    assert not panel.entry.message.isVisible()


def test_a_value_without_a_code_is_flagged_invalid_not_exact(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("table")
    panel.session.set_format(panel.session.editors[1], get_format("e8m0"))
    type_value(qtbot, panel, "-1")  # E8M0 is unsigned: -1 has no code (NaN stands in)
    error = panel.readouts.error.text()
    assert "invalid" in error and "exact</b>" not in error
    assert "invalid" in panel.rows[1].summary.text()
    type_value(qtbot, panel, "nan")  # FP4 has no NaN
    table = panel.cross_table
    row = next(i for i, (fmt, _) in enumerate(table.rows) if fmt == get_format("fp4"))
    assert table.table.item(row, table.table.columnCount() - 1).text() == "invalid"


def test_step_buttons(qtbot: QtBot, panel: FormatsPanel) -> None:
    row = panel.rows[1]
    panel.session.set_code(row.editor, 0x3C00)
    qtbot.mouseClick(row.step_buttons["up"], Qt.MouseButton.LeftButton)
    assert row.editor.code == 0x3C01
    qtbot.mouseClick(row.step_buttons["down"], Qt.MouseButton.LeftButton)
    qtbot.mouseClick(row.step_buttons["exponent+"], Qt.MouseButton.LeftButton)
    assert row.editor.readout().exact == "2"
    qtbot.mouseClick(row.step_buttons["fraction+"], Qt.MouseButton.LeftButton)
    assert row.editor.code == 0x4001
    assert "↑" in panel.readouts.gaps.text()


def test_table_click_loads_a_code(qtbot: QtBot, panel: FormatsPanel) -> None:
    panel.show_view("table")
    type_value(qtbot, panel, "0.1")
    table = panel.cross_table.table
    row = next(
        i for i, (fmt, _) in enumerate(panel.cross_table.rows) if fmt == get_format("bfloat16")
    )
    rect = table.visualRect(table.model().index(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    active = panel.session.active
    assert active.format == get_format("bfloat16")
    assert active.code == oracle_code(0.1, ml_dtypes.bfloat16)
    assert panel.rows[panel.session.active_index].picker.currentText() == "bfloat16"


def test_table_can_show_only_the_stacked_formats(qtbot: QtBot, panel: FormatsPanel) -> None:
    panel.show_view("table")
    type_value(qtbot, panel, "0.1")
    view = panel.cross_table
    assert view.table.rowCount() == len(panel.session.known_formats())
    qtbot.mouseClick(view.only_stacked, Qt.MouseButton.LeftButton)
    names = [view.table.item(row, 0).text() for row in range(view.table.rowCount())]
    assert names == ["float32", "float16"]
    qtbot.mouseClick(panel.entry.add_button, Qt.MouseButton.LeftButton)  # + bfloat16
    names = [view.table.item(row, 0).text() for row in range(view.table.rowCount())]
    assert names == ["float32", "float16", "bfloat16"]
    assert view.table.item(2, 1).text() == f"0x{oracle_code(0.1, ml_dtypes.bfloat16):04X}"


@pytest.mark.parametrize("second", ["3e-8", "1/3", "-65519.9", "1e-400"])
def test_table_cells_are_never_cut_when_the_value_changes(
    qtbot: QtBot, panel: FormatsPanel, second: str
) -> None:
    # Columns were fitted once per set of formats: after "1", typing "3e-8" left the error
    # columns narrow, and Qt cut their texts with its own "…" ("2.68104…" lost "e-24", the
    # float64 code read "0x3E601B2B29A469…"), which reads as the display rule's mark.
    panel.show_view("table")
    view = panel.cross_table
    for text in ("1", second):
        type_value(qtbot, panel, text)
        view.refresh_now()
    metrics = view.table.fontMetrics()
    last = view.table.columnCount() - 1
    for row in range(view.table.rowCount()):
        for column in range(last):  # the last column stretches to the edge
            item = view.table.item(row, column)
            assert item is not None
            width = metrics.horizontalAdvance(item.text())
            # Qt keeps a margin either side of the text before it cuts.
            assert width + 6 <= view.table.columnWidth(column), (row, column, item.text())


@pytest.mark.slow  # renders the codes map: about half a second
def test_codes_map_click_loads_a_code(qtbot: QtBot, panel: FormatsPanel) -> None:
    panel.session.set_active(panel.session.editors[1])
    panel.session.set_format(panel.session.active, get_format("float8_e4m3fn"))
    panel.show_view("codes")
    codes_map = panel.codes_map
    qtbot.waitUntil(lambda: codes_map.image.image is not None)
    # Cell of code 0x38 (1.0): row 3, column 8 of the 16 x 16 map.
    scene_point = codes_map.plot.vb.mapViewToScene(QPointF(8.5, 3.5))
    widget_point = codes_map.plot_widget.mapFromScene(scene_point)
    qtbot.mouseClick(codes_map.plot_widget.viewport(), Qt.MouseButton.LeftButton, pos=widget_point)
    assert panel.session.active.code == 0x38
    assert panel.session.active.readout().exact == "1"


def test_codes_map_caption_says_how_a_cell_spells_its_code(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("codes")
    for name, how in (
        ("float8_e4m3fn", "hex digits"),
        ("fp16", "hex digits"),
        ("fp4", "row × 4 + column"),
        ("e5m5", "row × 64 + column"),
    ):
        panel.session.set_format(panel.session.active, get_format(name))
        assert how in panel.codes_map.caption.text(), name


def test_format_switch_from_the_picker(qtbot: QtBot, panel: FormatsPanel) -> None:
    type_value(qtbot, panel, "3.25")
    row = panel.rows[0]
    index = row.picker.findText("float8_e5m2")
    row.picker.setCurrentIndex(index)
    row.picker.activated.emit(index)
    assert row.editor.format == get_format("float8_e5m2")
    assert row.editor.code == oracle_code(3.25, ml_dtypes.float8_e5m2)
    assert row.bits.sizeHint().width() < panel.rows[1].bits.sizeHint().width()
    assert "float8_e5m2" in panel.readouts.title.text()


def test_custom_format_builder(qtbot: QtBot, panel: FormatsPanel) -> None:
    dialog = CustomFormatDialog(panel)
    qtbot.addWidget(dialog)
    dialog.exponent_bits.setValue(6)
    dialog.mantissa_bits.setValue(9)
    fmt = dialog.chosen_format()
    assert fmt is not None and fmt.spec == "e6m9"
    assert "e6m9" in dialog.preview.text()
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isEnabled()
    dialog.exponent_bits.setValue(1)  # ieee needs an all-ones exponent besides the others
    assert dialog.chosen_format() is None
    assert not ok.isEnabled()
    dialog.exponent_bits.setValue(6)
    dialog.mantissa_bits.setValue(9)
    editor = panel.session.active
    panel.use_custom_format(editor, dialog.chosen_format())
    assert editor.format.spec == "e6m9"
    type_value(qtbot, panel, "1")
    assert editor.code == 31 << 9
    assert panel.row_of(editor).picker.findText(editor.format.name) >= 0
    # The other editor's picker offers the custom format too.
    other = next(row for row in panel.rows if row.editor is not editor)
    assert other.picker.findData(editor.format.spec) >= 0


def test_custom_format_limits_are_the_engines(qtbot: QtBot, panel: FormatsPanel) -> None:
    from fpexplorer.formats import ENCODINGS
    from fpexplorer.formats.format import MAX_EXPONENT_BITS

    dialog = CustomFormatDialog(panel)
    qtbot.addWidget(dialog)
    # Was: exponent bits up to 30, then "exponent bits must be 1..16" from the engine.
    assert dialog.exponent_bits.maximum() == MAX_EXPONENT_BITS
    assert [dialog.encoding.itemData(i) for i in range(dialog.encoding.count())] == list(ENCODINGS)
    finite = dialog.encoding.findData("finite")
    dialog.encoding.setCurrentIndex(finite)
    for exponent in range(1, MAX_EXPONENT_BITS + 1):
        dialog.exponent_bits.setValue(exponent)
        widest = dialog.mantissa_bits.maximum()
        dialog.mantissa_bits.setValue(widest)
        # The widest the spin box offers is taken; one more bit the engine refuses.
        assert dialog.chosen_format() is not None, exponent
        with pytest.raises(ValueError):
            make_format(exponent, widest + 1, encoding="finite")
    dialog.exponent_bits.setValue(MAX_EXPONENT_BITS + 14)  # typed past the end: clamped
    assert dialog.exponent_bits.value() == MAX_EXPONENT_BITS
    for bias in (dialog.bias.minimum(), dialog.bias.maximum()):
        make_format(8, 7, bias=bias)  # the engine takes both ends
        with pytest.raises(ValueError):
            make_format(8, 7, bias=bias + (1 if bias > 0 else -1))


def test_custom_format_names_are_plain_and_not_taken(qtbot: QtBot, panel: FormatsPanel) -> None:
    dialog = CustomFormatDialog(panel)
    qtbot.addWidget(dialog)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    dialog.exponent_bits.setValue(6)
    dialog.mantissa_bits.setValue(9)
    for bad, message in (
        ("fp16", "already means float16"),
        ("<b>x</b>", "letters, digits"),
        ("my format", "no spaces"),
    ):
        dialog.name.setText(bad)
        assert dialog.chosen_format() is None and not ok.isEnabled()
        assert message in dialog.preview.text().replace("&#x27;", "'")
    dialog.name.setText("my_e6m9")
    assert dialog.chosen_format() == make_format(6, 9, name="my_e6m9") and ok.isEnabled()


def test_a_named_custom_format_keeps_its_name_when_picked(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    fmt = make_format(6, 9, name="my_e6m9")
    panel.use_custom_format(panel.session.editors[0], fmt)
    other = panel.rows[1]
    index = other.picker.findText("my_e6m9")
    other.picker.setCurrentIndex(index)
    other.picker.activated.emit(index)
    assert other.editor.format == fmt  # not the unnamed e6m9 its spec would give
    assert [other.picker.itemText(i) for i in range(other.picker.count())].count("my_e6m9") == 1


def test_number_line_shows_neighbours_midpoints_and_mode_picks(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("number-line")
    panel.session.set_active(panel.session.editors[1])
    type_value(qtbot, panel, "0.1")
    line = panel.number_line
    neighbours_x, _ = line.neighbours.getData()
    assert len(neighbours_x) == 7
    picks_x, _picks_y = line.mode_picks.getData()
    # One pick per deterministic mode the engine has, two for stochastic rounding.
    assert len(picks_x) == len(ROUNDING_MODES) + 1
    # nearest_even and toward_negative pick the value below 0.1 (x = 0, the result);
    # toward_positive picks the one above (x = 1 ulp).
    assert sorted(set(np.round(picks_x, 6))) == [0.0, 1.0]
    shown = {label.textItem.toPlainText().strip() for label in line.pick_labels}
    # The engine's own probabilities (its 64 random bits), cut and marked: not 0.6 and 0.4.
    assert {text for text in shown if text.startswith("p = ")} == {
        "p = 0.600000000…",
        "p = 0.399999999…",
    }
    assert line.input_line.isVisible()
    mids_x, _ = line.midpoints.getData()
    assert len(mids_x) == 2 * 6


def test_number_line_puts_long_neighbour_values_on_two_lines(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("number-line")
    line = panel.number_line
    panel.session.set_format(panel.session.editors[0], get_format("fp64"))
    type_value(qtbot, panel, "-1e-310")  # neighbours read -1.0000000000000015e-310 ...
    heights = [label.pos().y() for label in line.value_labels]
    assert heights[0] != heights[1] and heights[0] == heights[2]
    type_value(qtbot, panel, "1")  # 1, 1.0000000000000002 ... still long: two lines
    panel.session.set_format(panel.session.editors[0], get_format("fp4"))
    heights = [label.pos().y() for label in line.value_labels]
    assert len(set(heights)) == 1  # short values: one line


def test_number_line_around_a_flushed_zero_counts_in_its_own_gaps(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("number-line")
    line = panel.number_line
    panel.session.set_format(panel.session.editors[0], get_format("e8m23:subnormals=off"))
    type_value(qtbot, panel, "1e-39")  # rounds to 0; the neighbours are +-min_normal
    neighbours_x, _ = line.neighbours.getData()
    # min_normal one gap away, not 2**23 gaps of the values beyond it (all squashed there).
    assert list(neighbours_x) == [-1.0, 0.0, 1.0]
    assert 0 < line.input_line.value() < 0.5


def test_number_line_explains_nan(qtbot: QtBot, panel: FormatsPanel) -> None:
    panel.show_view("number-line")
    type_value(qtbot, panel, "nan")
    assert "no place" in panel.number_line.message.textItem.toPlainText()
    # No ticks: "-0.9 … 0.9" under the message measured nothing.
    axis = panel.number_line.plot.getAxis("bottom")
    assert not axis.style["showValues"]
    type_value(qtbot, panel, "1")
    assert axis.style["showValues"]


@pytest.mark.slow  # exact arithmetic on 1e99999 in a 16-exponent-bit format: a second
def test_number_line_keeps_an_overflowing_value_off_scale(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("number-line")
    line = panel.number_line
    panel.session.set_active(panel.session.editors[1])  # fp16
    type_value(qtbot, panel, "1e10")
    neighbours_x, _ = line.neighbours.getData()
    # The neighbours of max stay one gap apart; the typed value sits just past them,
    # marked, instead of 1.5e8 gaps away squashing them into one dot.
    assert list(np.diff(neighbours_x)) == [1.0, 1.0, 1.0]
    assert line.input_line.value() == max(neighbours_x) + OFF_SCALE_MARGIN
    assert "off scale" in line.input_label.textItem.toPlainText()
    # Far beyond a float64 (a 16-exponent-bit format), and no code at all (E8M0, -1).
    for spec, text in (
        ("e16m47", "1e99999"),
        ("e16m47", "-1e-99999"),
        ("e8m0", "-1"),
        ("e8m0", "0"),
    ):
        panel.session.set_format(panel.session.active, get_format(spec))
        type_value(qtbot, panel, text)
        assert not panel.entry.message.isVisible()
        assert line.input_line.isVisible()
        neighbours_x, _ = line.neighbours.getData()
        assert len(neighbours_x) >= 4 and np.all(np.isfinite(neighbours_x))


def test_range_chart_and_properties_show_the_chosen_formats(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    panel.show_view("range")
    chart = panel.range_chart
    qtbot.waitUntil(lambda: len(chart.curves) >= 2)
    xs, ys = chart.curves[1].getData()  # fp16: relative spacing 2^-10 .. 2^-11 in range
    assert xs is not None and len(xs) > 20
    assert min(ys) == pytest.approx(-11, abs=0.01)
    panel.show_view("properties")
    table = panel.properties.table
    names = [table.item(row, 0).text() for row in range(table.rowCount())]
    assert names[:2] == ["float32", "float16"]
    fp16_row = names.index("float16")
    assert table.item(fp16_row, 3).text() == "65504"


def test_range_chart_draws_no_underflow_to_zero_for_a_format_without_zero(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    """E8M0 has no zero: the engine rounds 2**-200 up to its smallest value, 2**-127, so no
    grey "rounds to 0" bar is drawn for it (one was, from the plot's edge to 2**-128)."""
    e8m0 = get_format("e8m0")
    tiny = e8m0.round(Fraction(1, 2**200), "toward_zero")
    assert not e8m0.has_zero and e8m0.to_fraction(tiny.code) == Fraction(1, 2**127)
    assert get_format("fp16").has_zero
    panel.session.set_format(panel.session.active, e8m0)
    panel.show_view("range")
    chart = panel.range_chart
    qtbot.waitUntil(lambda: bool(chart._shown) and chart._shown[0] == e8m0)
    starts, ends = chart.underflow_bars.opts["x0"], chart.underflow_bars.opts["x1"]
    widths = {fmt.name: ends[i] - starts[i] for i, fmt in enumerate(chart._shown)}
    assert widths["float8_e8m0fnu"] == 0
    assert widths["float16"] > 0 and widths["float32"] > 0  # these do round tiny values to 0


@pytest.mark.parametrize("theme_name", ["light", "dark"])
def test_range_chart_rows_and_curves_read_at_1024x640(
    qtbot: QtBot, panel: FormatsPanel, theme_name: str
) -> None:
    # With eight formats at 1024x640 the rows were squeezed to ~6 px and their names drawn
    # over each other; in the dark theme the FP8 curve and its legend name were navy on dark
    # grey (1.5:1), invisible.
    from PySide6.QtGui import QColor, QFontMetrics
    from PySide6.QtWidgets import QApplication

    from fpexplorer.gui.theme import (
        MIN_CONTRAST,
        MIN_GRAPHIC_CONTRAST,
        contrast_ratio,
        dark_palette,
        light_palette,
    )

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    saved = app.palette()
    app.setPalette(dark_palette() if theme_name == "dark" else light_palette())
    try:
        for name in ("e8m0", "binary8p3ue", "e2m1"):
            panel.session.add_editor(get_format(name))
        panel.show_view("range")
        panel.resize(1024, 600)
        chart = panel.range_chart
        QApplication.processEvents()  # the palette change restyles the views
        chart.refresh_now()
        rows = len(chart._shown)
        assert rows >= 8
        top = chart.bars_plot.vb.mapViewToScene(QPointF(0, 0)).y()
        bottom = chart.bars_plot.vb.mapViewToScene(QPointF(0, rows - 1)).y()
        line = QFontMetrics(chart.font()).lineSpacing()
        assert abs(bottom - top) / (rows - 1) >= line, (abs(bottom - top) / (rows - 1), line)
        window = app.palette().color(app.palette().ColorRole.Window)
        base = app.palette().color(app.palette().ColorRole.Base)
        # Swatches and curves: the contrast a line needs; the names: plain text colour.
        swatches = re.findall(
            r"<span style='color:(#[0-9a-f]{6})'>([^<]*)</span>", chart.legend.text()
        )
        assert len(swatches) == rows and all(text == "━━" for _, text in swatches)
        for colour, _ in swatches:
            assert contrast_ratio(QColor(colour), window) >= MIN_GRAPHIC_CONTRAST, colour
        for curve in chart.curves[:rows]:
            assert contrast_ratio(curve.opts["pen"].color(), base) >= MIN_GRAPHIC_CONTRAST
        assert contrast_ratio(
            chart.legend.palette().color(chart.legend.foregroundRole()), window
        ) >= (MIN_CONTRAST)
    finally:
        app.setPalette(saved)


@pytest.mark.parametrize(
    "name", ["float8_e4m3fn", "float4_e2m1fn", "float8_e5m2fnuz", "float16", "float8_e8m0fnu"]
)
def test_range_chart_spacing_curve_reaches_max(name: str) -> None:
    from fpexplorer.gui.formats.range_chart import spacing_curve

    fmt = get_format(name)
    xs, _ = spacing_curve(fmt)
    # The top binade ends at max, also where the next power of two has no code (NaN, or
    # saturated to max in FP4): the curve stopped a binade short there.
    assert max(xs) == pytest.approx(np.log2(float(fmt.max)))


def test_add_and_remove_editors(qtbot: QtBot, panel: FormatsPanel) -> None:
    qtbot.mouseClick(panel.entry.add_button, Qt.MouseButton.LeftButton)
    assert len(panel.rows) == 3
    assert panel.rows[2].editor.format == get_format("bfloat16")
    qtbot.mouseClick(panel.rows[0].remove_button, Qt.MouseButton.LeftButton)
    assert [row.editor.format.name for row in panel.rows] == ["float16", "bfloat16"]


def test_codes_map_labels_each_cell_with_its_value_where_it_fits(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    from fpexplorer.gui.formats.codes_map import cell_label

    panel.show_view("codes")
    codes = panel.codes_map
    fp4 = get_format("fp4")
    panel.session.set_format(panel.session.active, fp4)
    qtbot.waitUntil(lambda: any(label.isVisible() for label in codes.cell_labels))
    texts = [label.textItem.toPlainText() for label in codes.cell_labels[:16]]
    assert texts == [cell_label(fp4, code) for code in range(16)]
    assert texts[:8] == ["0", "0.5", "1", "1.5", "2", "3", "4", "6"]
    assert all(label.isVisible() for label in codes.cell_labels[:16])
    # FP8: labels where they fit in a cell, none wider than its cell.
    e4m3 = get_format("float8_e4m3fn")
    panel.session.set_format(panel.session.active, e4m3)
    qtbot.waitUntil(lambda: codes.cell_labels[0x7E].textItem.toPlainText() == "448")
    view_box = codes.plot.vb
    cell = view_box.mapViewToScene(QPointF(1, 0)).x() - view_box.mapViewToScene(QPointF(0, 0)).x()
    shown = [label for label in codes.cell_labels if label.isVisible()]
    assert shown
    for label in shown:
        assert codes.cell_metrics.horizontalAdvance(label.textItem.toPlainText()) <= cell
    # Wider formats get no labels.
    panel.session.set_format(panel.session.active, get_format("fp16"))
    qtbot.waitUntil(lambda: not any(label.isVisible() for label in codes.cell_labels))


def test_table_values_that_differ_read_differently(qtbot: QtBot, panel: FormatsPanel) -> None:
    from fpexplorer.formats import parse_value

    panel.show_view("table")
    wide = make_format(11, 50, name="wide_e11m50")
    panel.session.add_custom_format(wide)
    type_value(qtbot, panel, "1/3")
    table = panel.cross_table.table
    shown = {table.item(r, 0).text(): table.item(r, 2).text() for r in range(table.rowCount())}
    # Nine digits cannot tell float64's 1/3 from e11m50's: the column shows more.
    assert shown["float64"] != shown["wide_e11m50"]
    third = parse_value("1/3")
    values: dict[object, set[str]] = {}
    for name, text in shown.items():
        fmt = get_format(name) if name != wide.name else wide
        value = fmt.to_exact(fmt.from_value(third))
        values.setdefault((value.kind, value.negative, value.magnitude), set()).add(text)
    texts = [next(iter(group)) for group in values.values()]
    assert all(len(group) == 1 for group in values.values())  # equal values, equal texts
    assert len(set(texts)) == len(texts)  # different values, different texts
    assert "<b>1/3</b>" in panel.cross_table.caption.text()


def test_pickers_list_what_the_engine_has_each_explained(panel: FormatsPanel) -> None:
    from fpexplorer.formats import OVERFLOW_POLICIES

    rounding, overflow = panel.entry.rounding, panel.entry.overflow
    assert [rounding.itemData(i) for i in range(rounding.count())] == list(ROUNDING_MODES)
    assert [overflow.itemData(i) for i in range(1, overflow.count())] == list(OVERFLOW_POLICIES)
    for combo in (rounding, overflow):
        for index in range(combo.count()):
            assert combo.itemData(index, Qt.ItemDataRole.ToolTipRole), combo.itemText(index)


@pytest.mark.parametrize("view", [view.name for view in VIEWS])
def test_every_view_fits_a_1024_pixel_window(qtbot: QtBot, panel: FormatsPanel, view: str) -> None:
    # The Arithmetic view's one-line format note (not word-wrapped) made the panel at
    # least 1080 px wide: at 1024x640 the window was wider than the screen.
    panel.show_view(view)
    panel.session.enter_text("1/3")
    panel.resize(1024, 600)
    qtbot.waitUntil(lambda: panel.width() == 1024)
    assert panel.minimumSizeHint().width() <= 1024, view


def test_a_rounded_value_and_its_input_never_read_the_same(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # float64's 1/3 next to a typed 0.333… of 300 digits read "0.333333333… ←
    # 0.333333333…" in the editor row and "input 0.333333333… → 0.333333333…" below.
    from fpexplorer.formats import exact_decimal

    panel.session.set_format(panel.session.active, get_format("fp64"))
    typed = "0." + "3" * 300
    panel.session.enter_text(typed)
    summary = panel.rows[panel.session.active_index].summary.text()
    found = re.search(r"<b>(\S+)</b>.*← (\S+),", summary)
    assert found is not None, summary
    value_text, typed_text = found.groups()
    assert value_text != typed_text
    exact_value = exact_decimal(panel.session.active.value())
    for shown, exact in ((value_text, exact_value), (typed_text, typed)):
        assert exact.startswith(shown.rstrip("…")), (shown, exact[:40])
    error = panel.readouts.error.text()
    assert f"input {typed_text} → {value_text} " in error


def test_the_editor_summary_is_never_clipped(qtbot: QtBot, panel: FormatsPanel) -> None:
    # The summary line (value, code, typed value, relative error, flags) was clipped at
    # the step buttons in a narrow window, its end cut off with no mark.
    from PySide6.QtGui import QTextDocument
    from PySide6.QtWidgets import QApplication

    panel.session.set_format(panel.session.active, get_format("fp64"))
    panel.resize(800, 600)
    panel.session.enter_text("1/3")
    qtbot.waitUntil(lambda: panel.width() == 800)
    QApplication.processEvents()
    label = panel.rows[panel.session.active_index].summary
    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setHtml(label.text())
    natural_width = document.idealWidth()  # the whole line, unwrapped

    def shown_whole() -> bool:
        fits_on_one_line = natural_width <= label.width()
        wraps_into_its_height = label.wordWrap() and label.heightForWidth(label.width()) <= (
            label.height() + 1
        )
        return fits_on_one_line or wraps_into_its_height

    qtbot.waitUntil(shown_whole, timeout=3000)


@pytest.mark.parametrize(("name", "text"), [("fp4", "-inf"), ("fp4", "nan"), ("e4m3", "inf")])
def test_number_line_caption_for_a_typed_non_finite_value(
    qtbot: QtBot, panel: FormatsPanel, name: str, text: str
) -> None:
    # -inf typed into FP4 (which gives -6) showed "Type a value above to see where each
    # rounding mode sends it", as if nothing had been typed.
    panel.session.set_format(panel.session.active, get_format(name))
    panel.show_view("number-line")
    type_value(qtbot, panel, text)
    line = panel.number_line
    line.refresh_now()
    shown = line.caption.text() + line.message.textItem.toPlainText()
    assert "Type a value above" not in shown
    assert "has no place on the number line" in shown


def test_tab_from_the_entry_bar_reaches_every_editor_before_the_readouts(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # Failed before: the rows are built after the read-outs and views, so Tab went from
    # "+ Add format" to the read-outs, the view tabs and the plot, and only then to the bits.
    panel.session.add_editor(get_format("e2m0"))
    qtbot.waitUntil(lambda: panel.rows[-1].bits.isVisible())
    panel.entry.add_button.setFocus()
    assert panel.entry.add_button.hasFocus()
    visited: list[object] = []
    for _ in range(len(panel.rows) * 9):
        qtbot.keyClick(panel.focusWidget(), Qt.Key.Key_Tab)
        visited.append(panel.focusWidget())
    # e2m0 has no fraction: its F-/F+ are disabled, and Tab rightly passes them by.
    expected = [w for row in panel.rows for w in row.focus_chain() if w.isEnabled()]
    assert visited[: len(expected)] == expected
    assert panel.readouts.exact not in visited[: len(expected)]


def test_escape_in_the_value_field_puts_back_the_last_entered_text(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # Failed before: Escape did nothing, the half-typed text stayed in the field.
    type_value(qtbot, panel, "65520")
    code = panel.session.active.code
    field = panel.entry.field
    qtbot.keyClicks(field, "e9x")
    assert field.text() == "65520e9x"
    qtbot.keyClick(field, Qt.Key.Key_Escape)
    assert field.text() == "65520"
    assert panel.session.active.code == code
    assert not panel.entry.message.isVisible()


def test_number_line_zoomed_far_in_or_out_keeps_the_notation_and_its_labels_apart(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # Zoomed by the mouse wheel 1e12 times out, every neighbour's label was drawn on the
    # same spot; zoomed 1e-9 times in, the ticks read "-3.0 … 3.0" and the axis title
    # gained pyqtgraph's "(x1e-09)".
    panel.show_view("number-line")
    line = panel.number_line
    type_value(qtbot, panel, "0.1")
    axis = line.plot.getAxis("bottom")
    for factor in (1e12, 1e-21):  # out by 1e12, then in to 1e-9 of the first range
        line.plot.vb.scaleBy(x=factor)
        qtbot.wait(10)
        shown = [label for label in line.value_labels if label.textItem.toPlainText()]
        assert shown  # the value itself keeps its label
        boxes = [label.sceneBoundingRect() for label in shown]
        for i, first in enumerate(boxes):
            for second in boxes[i + 1 :]:
                assert not first.intersects(second)
        low, high = line.plot.vb.viewRange()[0]
        ticks = [value for level in axis.tickValues(low, high, 800) for value in level[1]]
        texts = axis.tickStrings(ticks, 1.0, (high - low) / 6)
        assert texts and all("e+" not in text and "e-0" not in text for text in texts), texts
        assert "x1e" not in axis.labelString()
    assert any(text.endswith("e-9") for text in texts), texts


@pytest.mark.parametrize(
    ("value", "spacing", "text"),
    [
        (3e-9, 1e-9, "3e-9"),
        (0.30000000000000004, 0.1, "0.3"),
        (-0.0, 1.0, "0"),
        (3e12, 1e12, "3000000000000"),
        (1e20, 1e20, "1e20"),
        (-2.5e-300, 5e-301, "-2.5e-300"),
        (float("inf"), 1.0, ""),
    ],
)
def test_tick_text_is_the_display_notation(value: float, spacing: float, text: str) -> None:
    from fpexplorer.gui.formats.plotting import tick_text

    assert tick_text(value, spacing) == text


def test_range_chart_leaves_room_for_underflow_and_overflow_of_the_widest_format(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # e16m47's bar was green from edge to edge: 6 binades of margin in a span of 65581.
    panel.session.set_format(panel.session.editors[0], get_format("e16m47"))
    panel.show_view("range")
    chart = panel.range_chart
    (left, right), _ = chart.bars_plot.vb.viewRange()
    span = right - left
    fmt = get_format("e16m47")
    assert fmt.max is not None and fmt.min_subnormal is not None
    high = fmt.max.numerator.bit_length() - fmt.max.denominator.bit_length()  # 32768
    low = fmt.min_subnormal.numerator.bit_length() - fmt.min_subnormal.denominator.bit_length()
    assert right - high > 0.02 * span and low - left > 0.02 * span


def test_the_custom_format_dialog_builds_every_p3109_format(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    # It had no sign-bit choice (signed unless fnu): P3109's unsigned binaryKpPu formats of
    # any width could not be built, and for P3109 the box said "standard bias 2^(e−1) − 1"
    # while it filled in 2^(e−1).
    from fpexplorer.formats.p3109 import p3109_format

    dialog = CustomFormatDialog(panel)
    qtbot.addWidget(dialog)
    for signed in (True, False):
        for extended in (True, False):
            encoding = "p3109_extended" if extended else "p3109_finite"
            dialog.encoding.setCurrentIndex(dialog.encoding.findData(encoding))
            assert dialog.signed.isEnabled()
            dialog.signed.setChecked(signed)
            for precision in range(1, 8 if signed else 9):
                dialog.exponent_bits.setValue(8 - precision + (0 if signed else 1))
                dialog.mantissa_bits.setValue(precision - 1)
                built = dialog.chosen_format()
                expected = p3109_format(8, precision, signed=signed, extended=extended)
                assert built is not None, (signed, extended, precision)
                assert [built.to_exact(c) for c in range(256)] == [
                    expected.to_exact(c) for c in range(256)
                ], expected.name
                assert dialog.auto_bias.text() == "standard bias 2^(e−1)"
    dialog.encoding.setCurrentIndex(dialog.encoding.findData("fnu"))
    assert not dialog.signed.isEnabled() and not dialog.signed.isChecked()
    dialog.encoding.setCurrentIndex(dialog.encoding.findData("fnuz"))
    assert not dialog.signed.isEnabled() and dialog.signed.isChecked()
    dialog.encoding.setCurrentIndex(dialog.encoding.findData("ieee"))
    assert dialog.signed.isEnabled() and dialog.auto_bias.text() == "standard bias 2^(e−1) − 1"


def _wrapped_lines(text: str, label: QLabel, width: int) -> list[str]:
    """The lines Qt breaks `text` into in `label`'s font at `width` pixels (word wrap)."""
    layout = QTextLayout(text, label.font())
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    layout.setTextOption(option)
    layout.beginLayout()
    lines = []
    while (line := layout.createLine()).isValid():
        line.setLineWidth(width)
        lines.append(text[line.textStart() : line.textStart() + line.textLength()])
    layout.endLayout()
    return lines


def test_a_cut_number_never_breaks_across_the_lines_of_a_wrapped_label(
    qtbot: QtBot, panel: FormatsPanel
) -> None:
    """e16m47 and -1e-9800 at 1024 px: the editor's line ended "rel. error 1.60501067…" (read
    as 1.6) with "e-15" alone on the next line, and the Rounding read-out "error abs
    1.60501067…" over "e-9815": Unicode lets a line end after "…". At every width."""
    panel.session.set_format(panel.session.active, get_format("e16m47"))
    panel.entry.field.setText("-1e-9800")
    qtbot.keyClick(panel.entry.field, Qt.Key.Key_Return)
    row = panel.row_of(panel.session.active)
    labels = [row.summary, panel.readouts.gaps, panel.readouts.error, panel.readouts.formula]
    split = re.compile(r"^e[-+]?\d")
    provoked = 0
    for label in labels:
        document = QTextDocument()
        document.setHtml(label.text())
        text = document.toPlainText()
        assert "…e" not in text  # a word joiner between each cut and its exponent
        for width in range(100, 900, 5):
            lines = _wrapped_lines(text, label, width)
            assert not any(split.match(line) for line in lines[1:]), (width, lines)
            # The same text without the joiners splits at some widths: the check above
            # can fail.
            bare = _wrapped_lines(text.replace("\u2060", ""), label, width)
            provoked += any(split.match(line) for line in bare[1:])
    assert provoked


def test_number_line_value_labels_lie_inside_the_plot(qtbot: QtBot, panel: FormatsPanel) -> None:
    """A label centred on a value near the plot's edge ran past it and was clipped: at 1024
    px, e16m47's "-1.000000000000021…e-9800" read "1.000000000000021…e-9800" (its minus
    cut off). Labels that would not fit whole are left out, as those that collide."""
    panel.session.set_format(panel.session.active, get_format("e16m47"))
    panel.show_view("number-line")
    line = panel.number_line
    for width in (1024, 1280, 1920):
        panel.resize(width, 760)
        for text in ("-1e-9800", "0.1", "-1e-310", "3e300"):
            type_value(qtbot, panel, text)
            qtbot.wait(1)
            plot_area = line.plot.vb.sceneBoundingRect()
            shown = [label for label in line.value_labels if label.textItem.toPlainText()]
            assert shown
            for label in shown:
                box = label.textItem.mapRectToScene(label.textItem.boundingRect())
                assert plot_area.left() <= box.left() and box.right() <= plot_area.right(), (
                    width,
                    text,
                    label.textItem.toPlainText(),
                )
