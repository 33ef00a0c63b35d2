"""Colours that follow the system light/dark palette, shared by every view.

Widgets ask for colours at paint time (`field_colors()`, `class_color()`), and plots
re-apply `plot_colors()` when the application palette changes, so switching the desktop
between light and dark re-colours the whole window without a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPalette, QPen

if TYPE_CHECKING:
    from PySide6.QtWidgets import QStyle

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


# WCAG 2 "AA" for normal text: every text role is at least this far from its background.
MIN_CONTRAST = 4.5
# WCAG 2 "AA" for graphics (1.4.11): lines and swatches a reader must tell from the background.
MIN_GRAPHIC_CONTRAST = 3.0
# Hues of text roles; `role_color` darkens or lightens each (hue kept) until it reads on the
# current palette's backgrounds, so the same role works in the light and the dark theme.
_TEXT_ROLE_HUES = {
    "error": "#d9463b",  # bad input, overflow, non-finite
    "warning": "#c08000",  # inexact, worth a look
    "muted": "#808080",  # secondary text, hints
    "ok": "#2e9e63",
    "input": "#4f7fe0",  # the typed value
    "link": "#4f7fe0",
    **{f"class_{kind}": hue for kind, hue in _CLASS_COLORS.items()},
}
TEXT_ROLES = tuple(_TEXT_ROLE_HUES)
# Backgrounds text is drawn on: windows and labels, fields and tables, alternate rows.
TEXT_BACKGROUND_ROLES = (
    QPalette.ColorRole.Window,
    QPalette.ColorRole.Base,
    QPalette.ColorRole.AlternateBase,
)


def relative_luminance(color: QColor) -> float:
    """WCAG 2 relative luminance of an sRGB colour (0 black .. 1 white)."""

    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * linear(color.redF())
        + 0.7152 * linear(color.greenF())
        + 0.0722 * linear(color.blueF())
    )


def contrast_ratio(first: QColor, second: QColor) -> float:
    """WCAG 2 contrast ratio, 1 (same) .. 21 (black on white)."""
    a, b = relative_luminance(first), relative_luminance(second)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def readable(color: QColor, backgrounds: Sequence[QColor], minimum: float = MIN_CONTRAST) -> QColor:
    """`color` made dark enough (on light backgrounds) or light enough (on dark ones) to
    have `minimum` contrast (text: MIN_CONTRAST) against every background; its hue and
    saturation are kept."""
    if all(contrast_ratio(color, b) >= minimum for b in backgrounds):
        return QColor(color)
    light_backgrounds = sum(relative_luminance(b) for b in backgrounds) / len(backgrounds) > 0.18
    hue = max(color.hslHueF(), 0.0)  # -1 for greys
    saturation, lightness = color.hslSaturationF(), color.lightnessF()
    step = -0.01 if light_backgrounds else 0.01
    candidate = QColor(color)
    while 0.0 <= lightness <= 1.0:
        lightness += step
        candidate = QColor.fromHslF(hue, saturation, min(max(lightness, 0.0), 1.0))
        if all(contrast_ratio(candidate, b) >= minimum for b in backgrounds):
            return candidate
    return QColor("#000000") if light_backgrounds else QColor("#ffffff")


def text_backgrounds(palette: QPalette | None = None) -> list[QColor]:
    """The colours text is drawn on in this palette (window, fields, alternate rows)."""
    palette = palette or QGuiApplication.palette()
    return [palette.color(role) for role in TEXT_BACKGROUND_ROLES]


def role_color(role: str, palette: QPalette | None = None) -> QColor:
    """The text colour of a role (see TEXT_ROLES) that reads on the current palette."""
    return readable(QColor(_TEXT_ROLE_HUES[role]), text_backgrounds(palette))


def role_hex(role: str, palette: QPalette | None = None) -> str:
    """`role_color` as "#rrggbb", for rich text."""
    return str(role_color(role, palette).name())


def best_text_on(background: QColor) -> QColor:
    """Black or white, whichever contrasts more with a filled background (badges, cells)."""
    black, white = QColor("#000000"), QColor("#ffffff")
    if contrast_ratio(black, background) >= contrast_ratio(white, background):
        return black
    return white


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
        text_one=best_text_on(hue),
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
    input: QColor  # the typed value (also its label: a text role)
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
        input=role_color("input"),
        muted=muted,
    )


def indicator_outline(palette: QPalette) -> QColor:
    """The outline of check boxes and radio buttons, in the palette's own grey: text
    contrast against the window and the fields they sit on, so that a thin antialiased
    circle still keeps MIN_GRAPHIC_CONTRAST where it is drawn."""
    backgrounds = [palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.Base)]
    return readable(palette.color(QPalette.ColorRole.Mid), backgrounds, MIN_CONTRAST)


def _dark_fusion_style() -> QStyle:
    """Fusion, with check boxes and radio buttons outlined so they can be seen on the dark
    palette. Fusion outlines them in the window colour darkened by 40 %: 1.2:1 on the dark
    window, so an unticked box was invisible in the File menu and barely there in forms."""
    from PySide6.QtWidgets import QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

    indicators = (
        QStyle.PrimitiveElement.PE_IndicatorCheckBox,
        QStyle.PrimitiveElement.PE_IndicatorRadioButton,
    )

    class DarkFusionStyle(QProxyStyle):
        def drawPrimitive(
            self,
            element: QStyle.PrimitiveElement,
            option: QStyleOption,
            painter: QPainter,
            widget: QWidget | None = None,
        ) -> None:
            super().drawPrimitive(element, option, painter, widget)
            if element not in indicators:
                return
            painter.save()
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            painter.setPen(QPen(indicator_outline(option.palette), 1.0))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            box = QRectF(option.rect).adjusted(0.5, 0.5, -0.5, -0.5)
            if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
                painter.drawRect(box)
            else:
                painter.drawEllipse(box)
            painter.restore()

    return DarkFusionStyle(QStyleFactory.create("Fusion"))


def apply_dark_palette() -> None:
    """A dark Fusion palette (for `fpexplorer screenshot --theme dark` and `gui --theme`)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    app.setStyle(_dark_fusion_style())
    app.setPalette(dark_palette())


def apply_light_palette() -> None:
    """Fusion's own light palette (`--theme light`)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    app.setStyle("Fusion")
    app.setPalette(light_palette())


def light_palette() -> QPalette:
    """The light theme's palette: Fusion's standard one."""
    from PySide6.QtWidgets import QStyleFactory

    style = QStyleFactory.create("Fusion")
    palette = style.standardPalette()
    _readable_highlight(palette)
    return palette


def _readable_highlight(palette: QPalette) -> None:
    """Selected text (white on the highlight) at MIN_CONTRAST: Fusion's blues give 3.7:1."""
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
        highlighted = palette.color(group, QPalette.ColorRole.HighlightedText)
        highlight = palette.color(group, QPalette.ColorRole.Highlight)
        palette.setColor(group, QPalette.ColorRole.Highlight, readable(highlight, [highlighted]))


def dark_palette() -> QPalette:
    """The dark theme's palette."""
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
    _readable_highlight(palette)
    return palette
