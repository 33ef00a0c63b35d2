"""The bit row's labels: indices above the cells that never run together."""

from __future__ import annotations

import itertools

import pytest
from PySide6.QtGui import QFontMetrics
from pytestqt.qtbot import QtBot

from fpexplorer.formats import get_format
from fpexplorer.gui.formats.bit_row import MIN_INDEX_GAP, BitRow


@pytest.mark.parametrize("name", ["fp64", "fp32", "fp16", "bf16", "e8m0", "e2m1"])
def test_bit_indices_never_touch_at_any_width(qtbot: QtBot, name: str) -> None:
    # NVFP4's per-tensor scale (FP32) in the block editor at 1024x640: 9-pixel cells, and
    # the indices "24" and "23" drawn a pixel apart read "2423".
    fmt = get_format(name)
    row = BitRow()
    qtbot.addWidget(row)
    row.set_format(fmt)
    row.show()  # a hidden widget gets its resize events only when shown
    metrics = QFontMetrics(row._small_font())
    for width in range(120, 1400, 7):
        row.resize(width, row.sizeHint().height())
        labels = row.index_labels()
        bits = [bit for bit, _ in labels]
        assert bits == sorted(bits, reverse=True) and bits[0] == fmt.width - 1 and bits[-1] == 0
        for (_, left), (bit, right) in itertools.pairwise(labels):
            # Measured from the text itself, centred over its cell.
            assert right.width() == metrics.horizontalAdvance(str(bit))
            assert right.left() - left.right() > MIN_INDEX_GAP, (name, width, bits)
        cells = {cell.bit: cell.rect for cell in row._cells}
        assert next(iter(cells.values())).width() <= max(6, width // fmt.width)
        for bit, rect in labels:
            assert abs(rect.center().x() - cells[bit].center().x()) <= 1


def test_a_wide_row_shows_every_index_and_a_narrow_one_its_field_edges(qtbot: QtBot) -> None:
    row = BitRow()
    qtbot.addWidget(row)
    row.set_format(get_format("fp32"))
    row.show()
    row.resize(row.sizeHint())
    assert [bit for bit, _ in row.index_labels()] == list(range(31, -1, -1))
    row.resize(416, row.sizeHint().height())  # as in the block editor at 1024x640
    shown = [bit for bit, _ in row.index_labels()]
    assert {31, 30, 23, 22, 0} <= set(shown) and 24 not in shown, shown
