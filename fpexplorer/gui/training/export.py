"""Exports: each plot as PNG and SVG (rendered from the widget, in the screen's fonts), a
run's per-step scalars as CSV.

An exported picture says what it shows without the window around it: above the plot, its
title (the page's card title with the tensor, gradients or step it is of), the run or runs
it draws and the card's one-line explanation (`PlotCaption`); the axes keep their labels.

The CSV is written from the run file when there is one (every step, nothing decimated),
streaming record by record; otherwise from the model's (possibly decimated) buffers.
Every file is written beside its target and renamed over it only when complete, so a
failed write (a full disk) never leaves a torn file nor destroys the one that was there.
"""

from __future__ import annotations

import csv
import math
import os
import secrets
import typing
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPoint, QPointF, QRect, QSize
from PySide6.QtGui import QFont, QImage, QPaintDevice, QPainter, QTextLayout, QTextOption
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QWidget

from fpexplorer.gui.theme import plot_colors
from fpexplorer.gui.training.run_model import SCALAR_FIELDS, RunModel, to_float
from fpexplorer.training.runlog import EndRecord, Record, RunReader, StepRecord


def _optional_scalar_fields() -> tuple[str, ...]:
    # The step record's scalars that only some runs carry (`grad_amax` of loss-scaled
    # runs, `hysteresis` of DeepSpeed's and Megatron's scalers): an empty cell where a
    # step has none, which csv, numpy and pandas read as missing.
    optional = (float | None, int | None)
    return tuple(
        name for name, hint in typing.get_type_hints(StepRecord).items() if hint in optional
    )


OPTIONAL_FIELDS: tuple[str, ...] = _optional_scalar_fields()
RECORD_FIELDS: tuple[str, ...] = (*SCALAR_FIELDS, *OPTIONAL_FIELDS)
# The header names a column's unit where it has one; the others are plain numbers
# (loss, loss scale, learning rate...) or counts and flags (skipped is 1 or 0).
_UNITS: dict[str, str] = {"time": "time_s"}
CSV_COLUMNS: tuple[str, ...] = ("step", *(_UNITS.get(name, name) for name in RECORD_FIELDS))


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed over it when the block ends without error
    (removed otherwise)."""
    # A fresh name, not `tempfile.mkstemp`'s file: that one is private (0600) and the
    # export would keep its mode; this one gets the user's usual permissions.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException as error:
        with suppress(OSError):  # its folder may refuse this as it refused the file
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename in (temporary, str(temporary)):
            error.filename = str(path)  # the message names the file the user asked for
        raise


@dataclass(frozen=True, slots=True)
class PlotCaption:
    """What an exported plot says above itself (on screen its card and the run list say it)."""

    title: str  # what the plot shows: "amax and scale: blocks.0.fc1, input"
    runs: tuple[str, ...]  # the runs it draws, by their whole names
    explanation: str = ""  # the card's one-paragraph explanation (the curves' styles...)

    def lines(self) -> list[str]:
        """The caption's lines under its title: the run(s), then the explanation."""
        if not self.runs:
            runs = "run: none shown"
        elif len(self.runs) == 1:
            runs = f"run: {self.runs[0]}"
        else:
            runs = f"runs: {'; '.join(self.runs)}"
        return [runs, self.explanation] if self.explanation else [runs]


_CAPTION_MARGIN = 8  # pixels around the caption's text


def _caption_fonts(widget: QWidget) -> tuple[QFont, QFont]:
    text = QFont(widget.font())
    title = QFont(text)
    title.setBold(True)
    title.setPointSizeF(text.pointSizeF() + 1)
    return title, text


def _wrapped(font: QFont, text: str, width: int) -> QTextLayout:
    """`text` in lines at most `width` pixels wide: broken between words, and inside a
    word longer than a line (a run's long file name), never cut off at the edge."""
    layout = QTextLayout(text, font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    layout.setTextOption(option)
    layout.beginLayout()
    top = 0.0
    while (line := layout.createLine()).isValid():
        line.setLineWidth(width)
        line.setPosition(QPointF(0, top))
        top += line.height()
    layout.endLayout()
    return layout


def _caption_blocks(widget: QWidget, caption: PlotCaption) -> list[tuple[QTextLayout, QRect]]:
    """The caption's title and lines, each laid out in its font, with its rectangle."""
    width = max(widget.width() - 2 * _CAPTION_MARGIN, 1)
    title_font, text_font = _caption_fonts(widget)
    blocks: list[tuple[QTextLayout, QRect]] = []
    top = _CAPTION_MARGIN
    for font, text in ((title_font, caption.title), *((text_font, t) for t in caption.lines())):
        layout = _wrapped(font, text, width)
        height = math.ceil(layout.boundingRect().height())
        blocks.append((layout, QRect(_CAPTION_MARGIN, top, width, height)))
        top += height + 2
    return blocks


def caption_height(widget: QWidget, caption: PlotCaption) -> int:
    """The height, in the widget's pixels, the caption takes above it in an export."""
    blocks = _caption_blocks(widget, caption)
    return blocks[-1][1].bottom() + _CAPTION_MARGIN if blocks else 0


def _paint(widget: QWidget, painter: QPainter, caption: PlotCaption, height_above: int) -> None:
    """The caption, then the widget under it, as the screen draws it."""
    colours = plot_colors()
    painter.fillRect(QRect(0, 0, widget.width(), height_above), colours.background)
    painter.setPen(colours.foreground)
    for layout, rect in _caption_blocks(widget, caption):
        layout.draw(painter, QPointF(rect.topLeft()))
    QWidget.render(widget, painter, QPoint(0, height_above))  # not a view's scene API


def export_plot(
    plot: pg.PlotWidget, base: str | os.PathLike[str], caption: PlotCaption
) -> list[Path]:
    """Write `<base>.png` and `<base>.svg` of a plot as it is on screen, `caption` above
    it; returns the paths.

    Both render the widget itself, so the exports carry the screen's fonts, sizes and
    layout (pyqtgraph's exporters re-lay the scene out at another size: at twice the width
    its labels came out at half the relative size, and its SVG named other fonts).
    """
    base = Path(base)
    png = base.with_suffix(".png")
    svg = base.with_suffix(".svg")
    # Rendered in memory and written by Python: a failed write (a full disk, a folder
    # that refuses) raises with its reason, where Qt's own file writing says nothing.
    for path, data in ((png, _png_bytes(plot, caption)), (svg, _svg_bytes(plot, caption))):
        with _replacing(path) as temporary:
            temporary.write_bytes(data)
    return [png, svg]


PNG_SCALE = 2  # twice the screen's pixels: crisp in a document, same layout and fonts


def _png_bytes(widget: QWidget, caption: PlotCaption) -> bytes:
    height_above = caption_height(widget, caption)
    size = QSize(widget.width(), widget.height() + height_above)
    image = QImage(size * PNG_SCALE, QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(PNG_SCALE)
    image.fill(widget.palette().color(widget.backgroundRole()))
    # The caption as the PNG's text chunks too, for tools that index pictures.
    image.setText("Title", caption.title)
    image.setText("Description", "\n".join(caption.lines()))
    _paint_on(image, widget, caption, height_above)
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    # PySide6 takes the format as str here (bytes is refused), its stubs say bytes.
    if not image.save(buffer, "PNG"):  # type: ignore[call-overload]
        raise OSError("could not encode the plot as PNG")
    buffer.close()
    return bytes(data.data())


def _paint_on(
    device: QPaintDevice, widget: QWidget, caption: PlotCaption, height_above: int
) -> None:
    painter = QPainter(device)
    try:
        _paint(widget, painter, caption, height_above)
    finally:
        painter.end()


def _svg_bytes(widget: QWidget, caption: PlotCaption) -> bytes:
    height_above = caption_height(widget, caption)
    size = QSize(widget.width(), widget.height() + height_above)
    data = QByteArray()
    buffer = QBuffer(data)
    generator = QSvgGenerator()
    generator.setOutputDevice(buffer)
    generator.setSize(size)
    generator.setViewBox(QRect(QPoint(0, 0), size))
    generator.setTitle(caption.title)
    generator.setDescription("\n".join(caption.lines()))
    _paint_on(generator, widget, caption, height_above)
    return bytes(data.data())


def _number(value: Any) -> str:
    if value is None:
        return ""
    number = to_float(value)
    if math.isnan(number):
        return "nan"
    if number == 0 and math.copysign(1.0, number) < 0:
        return "-0.0"  # below, str(int(-0.0)) would be "0": the sign lost
    return repr(number) if not number.is_integer() or abs(number) > 2**53 else str(int(number))


def _rows_from_file(path: Path, problems: list[str]) -> Iterator[list[str]]:
    """The run's steps, as the panel and `runs summarize` count them: those before the end
    record and before the first step whose number is not above the one before it (a second
    run in the same log; the reader's problems say where). The CSV held every step record
    of the file, a second run's too, where the panel showed the first run's."""
    reader = RunReader(path)
    over = False
    previous: int | None = None
    for record in _records_of(reader):
        if isinstance(record, EndRecord):
            over = True
        elif isinstance(record, StepRecord) and not over:
            if previous is not None and record.step <= previous:
                over = True
                continue
            previous = record.step
            yield [str(record.step)] + [_number(getattr(record, f)) for f in RECORD_FIELDS]
    problems.extend(reader.problems)


def _records_of(reader: RunReader) -> Iterator[Record]:
    # A chunk at a time through the run log's reader: memory stays bounded however long.
    for chunk in reader.chunks():
        yield from reader.stream.feed(chunk)
    yield from reader.stream.finish()


def _rows_from_model(model: RunModel) -> Iterator[list[str]]:
    steps = model.scalars.steps
    columns = [model.scalars.column(name) for name in SCALAR_FIELDS]
    for row, step in enumerate(steps):
        # The model keeps no optional scalars: their cells stay empty (missing).
        yield (
            [str(int(step))]
            + [_number(column[row]) for column in columns]
            + ["" for _ in OPTIONAL_FIELDS]
        )


def write_scalars_csv(
    model: RunModel, out: str | os.PathLike[str], run_path: str | os.PathLike[str] | None = None
) -> tuple[int, list[str]]:
    """Write per-step scalars; returns (rows written, problems met while reading the run)."""
    problems: list[str] = []
    path = Path(run_path) if run_path else None
    rows = _rows_from_file(path, problems) if path and path.is_file() else _rows_from_model(model)
    count = 0
    with (
        _replacing(Path(out)) as temporary,
        open(temporary, "w", newline="", encoding="utf-8") as handle,
    ):
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow(row)
            count += 1
    return count, problems
