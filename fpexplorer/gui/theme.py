"""Colours that follow the system light/dark palette, shared by every view.

Widgets ask for colours at paint time (`field_colors()`, `class_color()`), and plots
re-apply `plot_colors()` when the application palette changes, so switching the desktop
between light and dark re-colours the whole window without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QGuiApplication, QPalette

# Hues chosen to stay apart for the common colour-vision deficiencies (blue/green/orange)
# and to read on both light and dark backgrounds.
_FIELD_HUES = {"sign": "#4f7fe0", "exponent": "#2e9e63", "fraction": "#e08a1e"}
_CLASS_COLORS = {
    "zero": "#8c8c8c",
    "subnormal": "#9b59b6",
    "normal": "#2e9e63",
    "inf": "#d9463b",
    "nan": "#c9a227",
}


def is_dark() -> bool:
    """True when the current palette has a dark window background."""
    palette = QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


@dataclass(frozen=True, slots=True)
class FieldColors:
    one: QColor  # a set bit
    zero: QColor  # a clear bit: the same hue, faint
    text_one: QColor
    text_zero: QColor


def field_colors(field: str) -> FieldColors:
    """Cell colours of one field ("sign" | "exponent" | "fraction") for the current palette."""
    hue = QColor(_FIELD_HUES[field])
    palette = QGuiApplication.palette()
    base = palette.color(QPalette.ColorRole.Base)
    faint = QColor(
        round(base.red() * 0.75 + hue.red() * 0.25),
        round(base.green() * 0.75 + hue.green() * 0.25),
        round(base.blue() * 0.75 + hue.blue() * 0.25),
    )
    return FieldColors(
        one=hue,
        zero=faint,
        text_one=QColor("#ffffff"),
        text_zero=palette.color(QPalette.ColorRole.Text),
    )


def field_hex(field: str) -> str:
    return _FIELD_HUES[field]


def class_color(kind: str) -> QColor:
    return QColor(_CLASS_COLORS[kind])


def class_hex(kind: str) -> str:
    return _CLASS_COLORS[kind]


@dataclass(frozen=True, slots=True)
class PlotColors:
    background: QColor
    foreground: QColor
    grid: QColor
    accent: QColor  # the rounded value
    input: QColor  # the typed value
    muted: QColor  # midpoints, neighbours


def plot_colors() -> PlotColors:
    palette = QGuiApplication.palette()
    background = palette.color(QPalette.ColorRole.Base)
    foreground = palette.color(QPalette.ColorRole.Text)
    muted = QColor(foreground)
    muted.setAlpha(140)
    grid = QColor(foreground)
    grid.setAlpha(40)
    return PlotColors(
        background=background,
        foreground=foreground,
        grid=grid,
        accent=QColor("#d9463b"),
        input=QColor("#4f7fe0"),
        muted=muted,
    )


def apply_dark_palette() -> None:
    """A dark Fusion palette (for `fpexplorer screenshot --theme dark` and `gui --theme`)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    app.setStyle("Fusion")
    palette = QPalette()
    window = QColor(37, 40, 46)
    base = QColor(27, 29, 34)
    text = QColor(225, 228, 234)
    palette.setColor(QPalette.ColorRole.Window, window)
    palette.setColor(QPalette.ColorRole.WindowText, text)
    palette.setColor(QPalette.ColorRole.Base, base)
    palette.setColor(QPalette.ColorRole.AlternateBase, QColor(44, 47, 54))
    palette.setColor(QPalette.ColorRole.ToolTipBase, window)
    palette.setColor(QPalette.ColorRole.ToolTipText, text)
    palette.setColor(QPalette.ColorRole.Text, text)
    palette.setColor(QPalette.ColorRole.Button, window)
    palette.setColor(QPalette.ColorRole.ButtonText, text)
    palette.setColor(QPalette.ColorRole.Highlight, QColor(79, 127, 224))
    palette.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
    palette.setColor(QPalette.ColorRole.PlaceholderText, QColor(140, 145, 155))
    palette.setColor(QPalette.ColorRole.Mid, QColor(70, 74, 82))
    palette.setColor(QPalette.ColorRole.Midlight, QColor(60, 64, 72))
    palette.setColor(QPalette.ColorRole.Dark, QColor(20, 22, 26))
    palette.setColor(QPalette.ColorRole.Light, QColor(80, 85, 95))
    palette.setColor(QPalette.ColorRole.Link, QColor(110, 160, 255))
    for role in (
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
    ):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor(120, 124, 132))
    app.setPalette(palette)
