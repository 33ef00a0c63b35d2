"""Render resources/icon.svg to the PNGs next to it (run from the repository root).

QT_QPA_PLATFORM=offscreen python resources/render_icon.py
"""

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def main() -> int:
    app = QGuiApplication(sys.argv)
    renderer = QSvgRenderer("resources/icon.svg")
    if not renderer.isValid():
        print("resources/icon.svg is not a valid SVG", file=sys.stderr)
        return 1
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        image.save(f"resources/icon-{size}.png")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
