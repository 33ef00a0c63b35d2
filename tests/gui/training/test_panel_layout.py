"""The training panel's layout at 1024x640 and 1920x1080: nothing overlaps, nothing is cut.

The window is built and painted the way `fpexplorer screenshot --panel training` does it,
then the geometry of what a reader sees is checked: sibling widgets of a layout do not
intersect, each word-wrapped label has the height its text needs at its width, each plot
keeps a readable data area, and its x-axis title lies inside the plot, clear of the
read-out under it. Was: at 1024x640 with an fp8 run the gradient histogram got 90 px, its
box layout laid the "ranges" line over the axis title "log2 |g| (binade)".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QRect, QRectF
from PySide6.QtGui import QFontMetricsF, QImage, QPainter
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QLabel,
    QLayout,
    QStyle,
    QStyleOptionComboBox,
    QWidget,
)

from fpexplorer.gui.training.sizing import ReadablePlotWidget, SpacedTicksAxis

RECORDED_RUN = Path(__file__).parent / "data" / "overflow-fp16.jsonl"


def _rect_in(widget: QWidget, ancestor: QWidget) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


def _axis_title_rect(plot: pg.PlotWidget, name: str, ancestor: QWidget) -> QRect:
    """The text of a plot axis's title, in `ancestor`'s coordinates (its document margin,
    blank, left out)."""
    text = plot.getPlotItem().getAxis(name).label
    margin = text.document().documentMargin()
    box = text.boundingRect().adjusted(margin, margin, -margin, -margin)
    scene = text.mapRectToScene(QRectF(box))
    local = plot.mapFromScene(scene).boundingRect()
    return QRect(plot.mapTo(ancestor, local.topLeft()), local.size())


def layout_problems(root: QWidget) -> list[str]:
    """What overlaps or is cut among `root`'s visible widgets (empty: nothing)."""
    problems: list[str] = []
    shown = [w for w in root.findChildren(QWidget) if w.isVisible()]
    for widget in [root, *shown]:
        layout = widget.layout()
        if layout is None:
            continue
        # The widgets this layout places (in nested row layouts too): none may overlap.
        managed = [
            child
            for child in widget.children()
            if isinstance(child, QWidget) and child.isVisible() and _in_layout(layout, child)
        ]
        for index, first in enumerate(managed):
            for second in managed[index + 1 :]:
                if first.geometry().intersects(second.geometry()):
                    problems.append(
                        f"{_name(first)} {first.geometry().getRect()} overlaps "
                        f"{_name(second)} {second.geometry().getRect()} in {_name(widget)}"
                    )
    for label in root.findChildren(QLabel):
        if label.isVisible() and label.wordWrap() and label.text():
            needed = label.heightForWidth(label.width())
            if label.height() < needed:
                problems.append(
                    f"label {label.text()[:50]!r} is {label.height()} px tall for the "
                    f"{needed} px its text needs at {label.width()} px"
                )
    for box in root.findChildren(QComboBox):
        # A choice box shows any of its choices whole (was: at 1024x640 the Low precision
        # page's tensor box read "output g").
        if box.isVisible() and not box.isEditable():
            option = QStyleOptionComboBox()
            box.initStyleOption(option)
            area = box.style().subControlRect(
                QStyle.ComplexControl.CC_ComboBox,
                option,
                QStyle.SubControl.SC_ComboBoxEditField,
                box,
            )
            for text in (box.itemText(index) for index in range(box.count())):
                if box.fontMetrics().horizontalAdvance(text) > area.width():
                    problems.append(f"combo box: {text!r} cut to {area.width()} px")
    for plot in root.findChildren(ReadablePlotWidget):
        if not plot.isVisible():
            continue
        overlapping = overlapping_tick_labels(plot.getPlotItem().getAxis("bottom"))
        if overlapping:
            problems.append(f"plot in {_name(plot.parentWidget())}: ticks {overlapping} overlap")
        view = plot.getPlotItem().getViewBox()
        if view.height() < plot.view_height - 0.5:
            problems.append(
                f"plot in {_name(plot.parentWidget())}: data area {view.height():.1f} px, "
                f"readable from {plot.view_height}"
            )
        title = _axis_title_rect(plot, "bottom", root)
        if not _rect_in(plot, root).contains(title):
            problems.append(
                f"plot in {_name(plot.parentWidget())}: x-axis title {title.getRect()} "
                f"outside the plot {_rect_in(plot, root).getRect()}"
            )
        # The note of an empty plot lies inside its data area, not cut at its edges.
        for child in view.childItems():
            if isinstance(child, pg.TextItem) and child.isVisible():
                note = child.textItem.mapRectToScene(child.textItem.boundingRect())
                if not view.sceneBoundingRect().contains(note):
                    problems.append(
                        f"plot in {_name(plot.parentWidget())}: note {child.toPlainText()!r} "
                        "cut at the plot's edges"
                    )
        # The labels of the marker lines (first NaN loss, first inf/NaN) never cover each other.
        labels = [
            item.label.sceneBoundingRect()
            for item in plot.getPlotItem().items
            if isinstance(item, pg.InfiniteLine) and item.label is not None
        ]
        for index, first in enumerate(labels):
            if any(first.intersects(second) for second in labels[index + 1 :]):
                problems.append(f"plot in {_name(plot.parentWidget())}: marker labels overlap")
    return problems


def tick_labels(axis: pg.AxisItem) -> list[tuple[QRectF, object, str]]:
    """(rectangle, alignment, text) of each tick label pyqtgraph would draw on `axis`."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [] if specs is None else list(specs[2])


def overlapping_tick_labels(axis: pg.AxisItem) -> list[tuple[str, str]]:
    """The pairs of an axis's tick labels that pyqtgraph would draw over each other."""
    texts = tick_labels(axis)
    return [
        (first_text, second_text)
        for index, (first, _flags, first_text) in enumerate(texts)
        for second, _flags2, second_text in texts[index + 1 :]
        if first.intersects(second)
    ]


def _in_layout(layout: QLayout, widget: QWidget) -> bool:
    return layout.indexOf(widget) >= 0 or any(
        _in_layout(item.layout(), widget)
        for item in (layout.itemAt(i) for i in range(layout.count()))
        if item is not None and item.layout() is not None
    )


def _name(widget: QWidget | None) -> str:
    return type(widget).__name__ if widget is not None else "-"


@pytest.fixture
def runs(make_run) -> list[Path]:  # type: ignore[no-untyped-def]
    """A loss-scaled fp16 run with overflows (real), fp8 and mxfp4 runs (synthetic), and
    three more fp16 runs: six to overlay, the fp8 one selected."""
    more = [make_run(f"fp16-{seed}.jsonl", steps=80, seed=seed) for seed in range(3)]
    fp8 = make_run("fp8.jsonl", steps=80, precision="fp8", quant="fp8-dynamic")
    mx = make_run("mxfp4.jsonl", steps=80, precision="mxfp4", quant="mxfp4")
    return [RECORDED_RUN, *more, mx, fp8]


def _window(qtbot, paths: list[Path]) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    window = MainWindow(SettingsStore(persistent=False), restore=False)
    qtbot.addWidget(window)
    window.tabs.setCurrentIndex(1)
    for path in paths:
        window.training_panel.load_run(path)
    window.training_panel.finish_loading()
    try:
        yield window
    finally:
        window.training_panel.shutdown()
        window.close()


CASES = [
    # (size, how many runs, plots page, the left column's tab)
    ((1024, 640), 0, "mixed", "Job"),
    ((1024, 640), 1, "mixed", "Job"),
    ((1024, 640), 2, "mixed", "Job"),
    ((1024, 640), 6, "mixed", "What-if"),
    ((1024, 640), 2, "low", "Job"),
    ((1024, 640), 6, "low", "Job"),
    ((1920, 1080), 2, "mixed", "What-if"),
    ((1920, 1080), 6, "low", "Job"),
]


@pytest.mark.slow  # a whole window built and laid out per case: about a second each
@pytest.mark.parametrize(("size", "count", "page", "left"), CASES)
def test_nothing_overlaps_or_is_cut(  # type: ignore[no-untyped-def]
    qtbot, run_dir: Path, runs: list[Path], size: tuple[int, int], count: int, page: str, left: str
) -> None:
    from fpexplorer.commands.screenshot import render

    chosen = runs[len(runs) - count :]  # the fp8 run among them (selected: loaded last)
    for window in _window(qtbot, chosen):
        panel = window.training_panel
        tabs = panel.left_tabs
        tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index(left))
        if left == "What-if":
            panel.whatif.policy.setCurrentText("deepspeed")  # its dashed scale drawn too
            assert panel.whatif.policy.currentText() == "deepspeed"
        panel.show_plot_page(page)
        image = render(window, *size)
        assert (image.width(), image.height()) == size  # drawn at its size, not scaled
        QApplication.processEvents()
        assert layout_problems(panel) == []


@pytest.mark.slow  # a whole window built and laid out: about a second
def test_the_histogram_axis_title_clears_the_ranges_line_at_1024x640(  # type: ignore[no-untyped-def]
    qtbot, run_dir: Path, runs: list[Path]
) -> None:
    # The reported picture: the fp16 and fp8 runs, the histogram's read-out three lines.
    from fpexplorer.commands.screenshot import render

    for window in _window(qtbot, [RECORDED_RUN, runs[-1]]):
        panel = window.training_panel
        render(window, 1024, 640)
        hist = panel.hist_plot
        card = panel.cards["histogram"]
        assert hist.what_if_label.height() >= 3 * hist.what_if_label.fontMetrics().height()
        title = _axis_title_rect(hist.plot, "bottom", card)
        for label in (hist.ranges_label, hist.counts_label, hist.what_if_label):
            assert not title.intersects(_rect_in(label, card)), label.text()[:40]
        # The whole card is on screen: the page fits at this size (it scrolls only beyond).
        scroll = panel.plots_scroll
        assert scroll.widget().height() <= scroll.viewport().height()


@pytest.mark.parametrize("width", [60, 75, 120, 400])
@pytest.mark.parametrize("last", [20.0, 38.0, 2000.0, 150000.0])
def test_a_narrow_step_axis_labels_its_ticks_without_overlap(  # type: ignore[no-untyped-def]
    qtbot, width: int, last: float
) -> None:
    # Was: "Exponents over time" at 1024x640 (about 70 px of steps 0-19) drew "51015".
    plot = pg.PlotWidget(axisItems={"bottom": SpacedTicksAxis("bottom")})
    qtbot.addWidget(plot)
    plot.resize(width + 60, 120)
    plot.show()
    axis = plot.getPlotItem().getAxis("bottom")
    plot.setXRange(0.0, last, padding=0)
    QApplication.processEvents()
    assert overlapping_tick_labels(axis) == []
    assert tick_labels(axis)  # still labelled


def _vertical_label_crowding(axis: pg.AxisItem) -> list[tuple[str, str]]:
    """Pairs of a vertical axis's neighbouring tick labels closer than a line of the tick
    font (pyqtgraph's own rectangles are 0.8 of the text's height: this is stricter)."""
    line = QFontMetricsF(axis.style["tickFont"] or axis.font()).height()
    placed = sorted((rect.center().y(), text) for rect, _flags, text in tick_labels(axis))
    return [
        (first, second)
        for (first_y, first), (second_y, second) in itertools.pairwise(placed)
        if second_y - first_y < line
    ]


_SUPERSCRIPT_DIGITS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPERSCRIPTS = str.maketrans(f"{_SUPERSCRIPT_DIGITS}⁻", "0123456789-")


def _log_label_value(text: str) -> float:
    """The number a log axis's label reads ("0.2", "5", "10³", "2·10⁻⁵")."""
    if any(character in _SUPERSCRIPT_DIGITS for character in text):
        digit, _, power = text.rpartition("10")
        mantissa = float(digit.rstrip("·")) if digit else 1.0
        return mantissa * 10.0 ** int(power.translate(_SUPERSCRIPTS))
    return float(text)


@pytest.mark.parametrize("height", [40, 60, 90, 160, 400])
@pytest.mark.parametrize(
    ("low", "high"),
    [(0.15, 2.5), (0.5, 0.95), (0.04, 3.0), (1e-3, 10.0), (1e-12, 1e4), (1e-30, 1e30)],
)
def test_a_log_axis_labels_its_ticks_without_overlap(  # type: ignore[no-untyped-def]
    qtbot, height: int, low: float, high: float
) -> None:
    # Was: the loss plot on a log axis at 1024x640 labelled every minor step of a decade,
    # "0.2 0.3 0.4 ... 0.9" drawn over each other in about 80 px.
    plot = pg.PlotWidget(axisItems={"left": SpacedTicksAxis("left")})
    qtbot.addWidget(plot)
    plot.getPlotItem().getAxis("bottom").hide()
    plot.resize(300, height)
    plot.show()
    plot.getPlotItem().setLogMode(x=False, y=True)
    plot.setYRange(math.log10(low), math.log10(high), padding=0)
    QApplication.processEvents()
    axis = plot.getPlotItem().getAxis("left")
    view_height = plot.getPlotItem().getViewBox().height()
    assert overlapping_tick_labels(axis) == []
    assert _vertical_label_crowding(axis) == []
    texts = [text for _rect, _flags, text in tick_labels(axis)]
    if view_height >= 60:
        assert len(texts) >= 2, texts  # still labelled where two labels fit
    # Each label is a digit times a power of ten, rising up the axis.
    placed = sorted(
        (rect.center().y(), _log_label_value(text)) for rect, _f, text in tick_labels(axis)
    )
    values = [value for _y, value in placed]
    assert values == sorted(values, reverse=True), texts


# Ranges with no digit x 10^k inside: the loss of a run that has settled, 2.2 to 2.6.
NARROW_LOG_RANGES = [(2.2, 2.6), (0.051, 0.058), (1e-5, 1.3e-5), (0.95, 1.05), (97.0, 160.0)]


def _log_axis_labels(axis: pg.AxisItem, vertical: bool) -> list[tuple[float, float]]:
    """(position along the axis, value read) of each label, in axis order."""
    placed = sorted(
        ((rect.center().y() if vertical else rect.center().x()), _log_label_value(text))
        for rect, _flags, text in tick_labels(axis)
    )
    return placed[::-1] if vertical else placed


@pytest.mark.parametrize(("orientation", "length"), [("left", 60), ("left", 110), ("bottom", 200)])
@pytest.mark.parametrize(("low", "high"), NARROW_LOG_RANGES)
def test_a_narrow_log_range_is_labelled_readably(  # type: ignore[no-untyped-def]
    qtbot, orientation: str, length: int, low: float, high: float
) -> None:
    # Was: 2.2 to 2.6 on a log axis got no label at all (its labels were digits x 10^k
    # only, and none lies inside), 0.051 to 0.058 the same. Now: values at a 1, 2, 5 x 10^k
    # step that the axis length allows, each read where it is drawn.
    vertical = orientation == "left"
    other = "bottom" if vertical else "left"
    plot = pg.PlotWidget(axisItems={orientation: SpacedTicksAxis(orientation)})
    qtbot.addWidget(plot)
    plot.getPlotItem().getAxis(other).hide()
    plot.resize(300, length) if vertical else plot.resize(length, 100)
    plot.show()
    plot.getPlotItem().setLogMode(x=not vertical, y=vertical)
    box = plot.getPlotItem().getViewBox()
    if vertical:
        plot.setYRange(math.log10(low), math.log10(high), padding=0)
    else:
        plot.setXRange(math.log10(low), math.log10(high), padding=0)
    # Twice: the axis widens to its longer labels ("0.051") once it has measured them.
    QApplication.processEvents()
    QApplication.processEvents()
    axis = plot.getPlotItem().getAxis(orientation)
    assert overlapping_tick_labels(axis) == []
    if vertical:
        assert _vertical_label_crowding(axis) == []
    labels = _log_axis_labels(axis, vertical)
    texts = [text for _rect, _flags, text in tick_labels(axis)]
    assert len(labels) >= 2, texts
    values = [value for _where, value in labels]
    assert values == sorted(values), texts
    assert all(low * (1 - 1e-9) <= value <= high * (1 + 1e-9) for value in values), texts
    # Each label stands where its value is on the axis (to a pixel).
    span = box.height() if vertical else box.width()
    start = box.mapToScene(box.rect().bottomLeft() if vertical else box.rect().topLeft())
    for where, value in labels:
        fraction = (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))
        origin = start.y() if vertical else start.x()
        expected = origin - fraction * span if vertical else origin + fraction * span
        drawn = axis.mapToScene(0, where).y() if vertical else axis.mapToScene(where, 0).x()
        assert abs(drawn - expected) <= 1.5, (texts, value, drawn, expected)


def _assert_readable_left_axis(plot: object) -> None:
    """At least two tick labels on the plot's left axis, none overlapping or crowding."""
    axis = plot.getPlotItem().getAxis("left")  # type: ignore[attr-defined]
    texts = [text for _rect, _flags, text in tick_labels(axis)]
    assert len(texts) >= 2, texts
    assert overlapping_tick_labels(axis) == []
    assert _vertical_label_crowding(axis) == []


@pytest.mark.slow  # a whole window built and laid out per case: about a second each
@pytest.mark.parametrize("size", [(1024, 640), (800, 500)])
@pytest.mark.parametrize(("low", "high"), NARROW_LOG_RANGES[:3])
def test_the_loss_plot_labels_a_narrow_log_range(  # type: ignore[no-untyped-def]
    qtbot, run_dir: Path, make_run, size: tuple[int, int], low: float, high: float
) -> None:
    from fpexplorer.commands.screenshot import render

    run = make_run("fp16-narrow.jsonl", steps=50, seed=0)
    for window in _window(qtbot, [run]):
        loss = window.training_panel.loss_plot
        loss.log_box.setChecked(True)
        render(window, *size)
        loss.plot.setYRange(math.log10(low), math.log10(high), padding=0)
        QApplication.processEvents()  # twice: the axis widens to its labels once measured
        QApplication.processEvents()
        _assert_readable_left_axis(loss.plot)


@pytest.mark.slow  # a whole window built and laid out per case: about a second each
@pytest.mark.parametrize("size", [(1024, 640), (1920, 1080)])
def test_the_loss_plot_on_a_log_axis_labels_its_ticks_without_overlap(  # type: ignore[no-untyped-def]
    qtbot, run_dir: Path, make_run, size: tuple[int, int]
) -> None:
    from fpexplorer.commands.screenshot import render

    run = make_run("fp16-log.jsonl", steps=300, seed=0)
    for window in _window(qtbot, [run]):
        loss = window.training_panel.loss_plot
        loss.log_box.setChecked(True)
        render(window, *size)
        QApplication.processEvents()
        _assert_readable_left_axis(loss.plot)
        assert layout_problems(window.training_panel) == []
