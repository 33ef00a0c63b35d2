"""Exports: each plot as PNG and SVG (rendered from the widget, in the screen's fonts), a
run's per-step scalars as CSV.

The CSV is written from the run file when there is one (every step, nothing decimated),
streaming record by record; otherwise from the model's (possibly decimated) buffers.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPoint
from PySide6.QtGui import QImage, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QWidget

from fpexplorer.gui.training.run_model import SCALAR_FIELDS, RunModel, to_float
from fpexplorer.training.runlog import RunReader, StepRecord

CSV_COLUMNS: tuple[str, ...] = ("step", *SCALAR_FIELDS)


def export_plot(plot: pg.PlotWidget, base: str | os.PathLike[str]) -> list[Path]:
    """Write `<base>.png` and `<base>.svg` of a plot as it is on screen; returns the paths.

    Both render the widget itself, so the exports carry the screen's fonts, sizes and
    layout (pyqtgraph's exporters re-lay the scene out at another size: at twice the width
    its labels came out at half the relative size, and its SVG named other fonts).
    """
    base = Path(base)
    png = base.with_suffix(".png")
    svg = base.with_suffix(".svg")
    _render_png(plot, png, PNG_SCALE)
    _render_svg(plot, svg)
    return [png, svg]


PNG_SCALE = 2  # twice the screen's pixels: crisp in a document, same layout and fonts


def _render_png(widget: QWidget, path: Path, scale: int) -> None:
    image = QImage(widget.size() * scale, QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(scale)
    image.fill(widget.palette().color(widget.backgroundRole()))
    painter = QPainter(image)
    try:
        QWidget.render(widget, painter, QPoint(0, 0))  # the widget, not a view's scene API
    finally:
        painter.end()
    if not image.save(str(path)):
        raise OSError(f"could not write {path}")


def _render_svg(widget: QWidget, path: Path) -> None:
    generator = QSvgGenerator()
    generator.setFileName(str(path))
    generator.setSize(widget.size())
    generator.setViewBox(widget.rect())
    generator.setTitle(widget.windowTitle() or path.stem)
    painter = QPainter(generator)
    try:
        QWidget.render(widget, painter, QPoint(0, 0))  # the widget, not a view's scene API
    finally:
        painter.end()


def _number(value: Any) -> str:
    number = to_float(value)
    if math.isnan(number):
        return "nan"
    return repr(number) if not number.is_integer() or abs(number) > 2**53 else str(int(number))


def _rows_from_file(path: Path, problems: list[str]) -> Iterator[list[str]]:
    # A chunk at a time through the run log's reader: memory stays bounded however long.
    reader = RunReader(path)
    for chunk in reader.chunks():
        for record in reader.stream.feed(chunk):
            if isinstance(record, StepRecord):
                yield [str(record.step)] + [_number(getattr(record, f)) for f in SCALAR_FIELDS]
    for record in reader.stream.finish():
        if isinstance(record, StepRecord):
            yield [str(record.step)] + [_number(getattr(record, f)) for f in SCALAR_FIELDS]
    problems.extend(reader.problems)


def _rows_from_model(model: RunModel) -> Iterator[list[str]]:
    steps = model.scalars.steps
    columns = [model.scalars.column(name) for name in SCALAR_FIELDS]
    for row, step in enumerate(steps):
        yield [str(int(step))] + [_number(column[row]) for column in columns]


def write_scalars_csv(
    model: RunModel, out: str | os.PathLike[str], run_path: str | os.PathLike[str] | None = None
) -> tuple[int, list[str]]:
    """Write per-step scalars; returns (rows written, problems met while reading the run)."""
    problems: list[str] = []
    path = Path(run_path) if run_path else None
    rows = _rows_from_file(path, problems) if path and path.is_file() else _rows_from_model(model)
    count = 0
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow(row)
            count += 1
    return count, problems
