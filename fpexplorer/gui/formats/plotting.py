"""Shared pyqtgraph set-up for the Formats views: palette colours, lazy refresh."""

from __future__ import annotations

import math
from decimal import Context, Decimal, DecimalException
from fractions import Fraction
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QWidget

from fpexplorer.formats.decimal import display_decimal
from fpexplorer.gui.theme import plot_colors


def tick_text(value: float, spacing: float) -> str:
    """A tick's value to its spacing's last decimal place, in the app's notation: "3e-9",
    not pyqtgraph's "3.0" under a "(x1e-09)" prefix on the axis title."""
    if not (math.isfinite(value) and math.isfinite(spacing) and spacing > 0):
        return ""
    places = -math.floor(math.log10(spacing))
    try:
        # Decimal(repr) is the shortest decimal of the float; cut to the spacing's place.
        shown = Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), context=Context(prec=80))
    except DecimalException:
        return ""
    return display_decimal(Fraction(shown))


class NotationAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """A numeric axis whose tick labels follow the display rule, with no SI prefix or
    "(x1e+12)" scale in its title: at any zoom the numbers read as everywhere else."""

    def __init__(self, orientation: str, **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [tick_text(value * scale, spacing * scale) for value in values]


def style_plot(plot: pg.PlotItem) -> None:
    """Apply the current palette to one plot's axes (called again on palette changes)."""
    colors = plot_colors()
    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(colors.foreground))
        axis.setTextPen(pg.mkPen(colors.foreground))
    title = plot.titleLabel
    title.setAttr("color", colors.foreground.name())
    if title.text:
        title.setText(title.text)


class LazyView(QWidget):
    """A view that re-renders from the model only while it is visible.

    The model's `changed` marks it stale; a hidden view (another tab is on top) does no
    work until it is shown again, so a bit toggle pays only for what is on screen.
    `refresh_now()` renders regardless (used by the benchmark to time every view).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._stale = True

    def mark_stale(self) -> None:
        self._stale = True
        if self.isVisible():
            self.refresh_now()

    def refresh_now(self) -> None:
        self._stale = False
        self.render_view()

    def render_view(self) -> None:  # overridden
        raise NotImplementedError

    def restyle(self) -> None:  # overridden by plots
        pass

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh_now()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.restyle()
        super().changeEvent(event)
