"""Starting the desktop app: QApplication set-up, icon, theme, first window."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QSize
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from fpexplorer import __version__
from fpexplorer.gui.settings import APPLICATION, ORGANIZATION
from fpexplorer.resources import resource_path

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def app_icon() -> QIcon:
    icon = QIcon()
    for size in ICON_SIZES:
        path = resource_path(f"icon-{size}.png")
        if path.is_file():
            icon.addFile(str(path), QSize(size, size))
    return icon


def display_problem() -> str | None:
    """Why a window cannot be shown here (no display and no Qt platform chosen), or None."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return None
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    return (
        "no display found (DISPLAY and WAYLAND_DISPLAY are unset). Run it in a desktop "
        "session, or set QT_QPA_PLATFORM=offscreen for a headless run "
        "(`fpexplorer screenshot` renders the window to a PNG)."
    )


def create_application(argv: Sequence[str] | None = None, theme: str = "system") -> QApplication:
    """The QApplication (created once), with names, icon, and palette-aware plots."""
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        app = existing
    else:
        QCoreApplication.setOrganizationName(ORGANIZATION)
        QCoreApplication.setApplicationName(APPLICATION)
        app = QApplication(list(argv) if argv is not None else [sys.argv[0]])
        app.setApplicationDisplayName("fpexplorer")
        app.setApplicationVersion(__version__)
        app.setDesktopFileName("fpexplorer")
    app.setWindowIcon(app_icon())
    pg.setConfigOptions(antialias=True)
    if theme == "dark":
        from fpexplorer.gui.theme import apply_dark_palette

        apply_dark_palette()
    elif theme == "light":
        from fpexplorer.gui.theme import apply_light_palette

        apply_light_palette()
    return app
