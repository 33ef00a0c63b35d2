"""Shared pyqtgraph set-up for the Formats views: palette colours, lazy refresh."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QWidget

from fpexplorer.gui.theme import plot_colors


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
