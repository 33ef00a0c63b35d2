"""Every text colour the app uses reads at least 4.5:1 against its background, in both themes.

Computed from the palettes themselves and from the colours the code asks the theme for;
the source is checked to ask the theme rather than spell colours of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QPalette

from fpexplorer.gui import theme
from fpexplorer.gui.theme import (
    MIN_CONTRAST,
    TEXT_ROLES,
    best_text_on,
    contrast_ratio,
    dark_palette,
    light_palette,
    readable,
    role_color,
    text_backgrounds,
)

GUI = Path(__file__).resolve().parents[2] / "fpexplorer" / "gui"
THEMES = {"light": light_palette, "dark": dark_palette}
Role = QPalette.ColorRole
# The palette's own pairs: text role on the background it is drawn on.
PALETTE_PAIRS = (
    (Role.WindowText, Role.Window),
    (Role.Text, Role.Base),
    (Role.Text, Role.AlternateBase),
    (Role.ButtonText, Role.Button),
    (Role.HighlightedText, Role.Highlight),
    (Role.ToolTipText, Role.ToolTipBase),
    (Role.PlaceholderText, Role.Base),
    (Role.Link, Role.Base),
)


@pytest.fixture(params=sorted(THEMES))
def palette(request: pytest.FixtureRequest, qapp: object) -> QPalette:
    return THEMES[request.param]()


def test_contrast_ratio_matches_wcag() -> None:
    assert contrast_ratio(QColor("#000000"), QColor("#ffffff")) == pytest.approx(21.0)
    assert contrast_ratio(QColor("#777777"), QColor("#ffffff")) == pytest.approx(4.48, abs=0.01)
    assert contrast_ratio(QColor("#ffffff"), QColor("#ffffff")) == 1.0


def test_palette_text_roles_read(palette: QPalette) -> None:
    for text, background in PALETTE_PAIRS:
        ratio = contrast_ratio(palette.color(text), palette.color(background))
        assert ratio >= MIN_CONTRAST, (text, background, ratio)


@pytest.mark.parametrize("role", TEXT_ROLES)
def test_every_text_role_reads_on_every_background(palette: QPalette, role: str) -> None:
    color = role_color(role, palette)
    for background in text_backgrounds(palette):
        assert contrast_ratio(color, background) >= MIN_CONTRAST, (role, color.name())


def test_the_old_colours_did_not_read_in_the_dark_theme(qapp: object) -> None:
    # Dark red "first non-finite layer" on dark grey, "gray" hints: below 4.5:1 as they were,
    # readable once they go through the theme.
    window = dark_palette().color(Role.Window)
    for old in ("#8b0000", "#808080", "#000000"):
        assert contrast_ratio(QColor(old), window) < MIN_CONTRAST
        assert contrast_ratio(readable(QColor(old), [window]), window) >= MIN_CONTRAST


@pytest.mark.parametrize("kind", ["zero", "subnormal", "normal", "inf", "nan"])
def test_class_badges_read(kind: str, qapp: object) -> None:
    fill = theme.class_color(kind)
    assert contrast_ratio(best_text_on(fill), fill) >= MIN_CONTRAST


@pytest.mark.parametrize("theme_name", sorted(THEMES))
@pytest.mark.parametrize("field", ["sign", "exponent", "fraction"])
def test_bit_cells_read(qapp: object, theme_name: str, field: str) -> None:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    saved = app.palette()
    app.setPalette(THEMES[theme_name]())
    try:
        colors = theme.field_colors(field)
        plot = theme.plot_colors()
    finally:
        app.setPalette(saved)
    assert contrast_ratio(colors.text_one, colors.one) >= MIN_CONTRAST
    assert contrast_ratio(colors.text_zero, colors.zero) >= MIN_CONTRAST
    assert contrast_ratio(plot.foreground, plot.background) >= MIN_CONTRAST
    assert contrast_ratio(plot.input, plot.background) >= MIN_CONTRAST  # the typed label


# A text colour spelled in the code instead of asked of the theme: rich-text "color:" with
# a literal, QColor("#…") or a named colour given to a text role, brush or pen of text.
LITERAL_TEXT_COLOUR = re.compile(
    r"color:\s*(#|[a-z])"
    r"|setForeground\(\s*QBrush\(\s*QColor\(\s*\""
    r"|setColor\([^)]*(WindowText|ColorRole\.Text)[^)]*QColor\(\s*\""
    r"|setPen\(\s*QColor\(\s*\"(white|black|gray|#)"
)


def test_text_colours_come_from_the_theme() -> None:
    owned = [*sorted((GUI / "formats").glob("*.py")), *sorted(GUI.glob("*.py"))]
    offenders = []
    for path in owned:
        if path.name == "theme.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if LITERAL_TEXT_COLOUR.search(line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_code_map_cell_labels_read_on_their_cells(qapp: object) -> None:
    from fpexplorer.formats import list_formats
    from fpexplorer.gui.formats.codes_map import MAX_LABELLED_BITS, code_image

    for fmt in list_formats():
        if fmt.width > MAX_LABELLED_BITS:
            continue
        cells = {tuple(int(c) for c in pixel[:3]) for pixel in code_image(fmt).reshape(-1, 4)}
        for red, green, blue in cells:
            fill = QColor(red, green, blue)
            assert contrast_ratio(best_text_on(fill), fill) >= MIN_CONTRAST, (fmt.name, fill.name())


@pytest.mark.parametrize("kind", ["check box", "radio button"])
def test_unticked_indicators_can_be_seen_in_the_dark_theme(qapp: object, kind: str) -> None:
    """Failed before: Fusion outlines check boxes and radio buttons in the window colour
    darkened by 40 %, 1.2:1 on the dark window: "log axis" was barely there and File >
    Overlay Each Rank showed no box at all. The box's edge must reach MIN_GRAPHIC_CONTRAST."""
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QApplication, QCheckBox, QRadioButton, QStyle, QStyleOptionButton

    from fpexplorer.gui.theme import MIN_GRAPHIC_CONTRAST, apply_dark_palette

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    original_palette, original_style = app.palette(), app.style().name()
    try:
        apply_dark_palette()
        widget = QCheckBox("x") if kind == "check box" else QRadioButton("x")
        widget.resize(widget.sizeHint())
        image = QImage(widget.size(), QImage.Format.Format_ARGB32)
        widget.render(image)
        option = QStyleOptionButton()
        widget.initStyleOption(option)  # type: ignore[union-attr]
        element = (
            QStyle.SubElement.SE_CheckBoxIndicator
            if kind == "check box"
            else QStyle.SubElement.SE_RadioButtonIndicator
        )
        box = app.style().subElementRect(element, option, widget)
        window = app.palette().color(Role.Window)
        edge = [
            QColor(image.pixel(x, y))
            for x in range(box.left(), box.right() + 1)
            for y in range(box.top(), box.bottom() + 1)
        ]
        assert max(contrast_ratio(colour, window) for colour in edge) >= MIN_GRAPHIC_CONTRAST
    finally:
        app.setStyle(original_style)
        app.setPalette(original_palette)
