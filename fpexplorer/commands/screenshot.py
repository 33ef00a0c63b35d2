"""`fpexplorer screenshot`: render the real window offscreen to a PNG."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Qt is imported only when a picture is taken
    from PySide6.QtWidgets import QApplication

    from fpexplorer.gui.main_window import MainWindow

HELP = "render the app window (formats or training panel) offscreen to a PNG"
VIEWS = ("number-line", "table", "range", "codes", "properties", "block", "arithmetic")
# The training panel's plots pages (a Qt-free copy of panel.PLOT_PAGES' keys, held equal
# by a test: building the CLI parser imports no Qt).
TRAINING_PAGES = ("mixed", "low")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fpexplorer.commands.gui import add_start_state_arguments

    parser.add_argument(
        "--panel",
        choices=("formats", "training"),
        default="formats",
        help="which tab to show (default: formats)",
    )
    parser.add_argument("--out", required=True, metavar="FILE.png", help="PNG file to write")
    add_start_state_arguments(parser)
    parser.add_argument(
        "--size",
        metavar="WxH",
        default="1280x800",
        help="window size in pixels (default: 1280x800)",
    )
    parser.add_argument(
        "--view",
        choices=VIEWS,
        default="number-line",
        help="which view to show under the editors (default: number-line)",
    )
    parser.add_argument(
        "--theme",
        choices=("light", "dark"),
        default="light",
        help="colour theme of the picture (default: light)",
    )
    parser.add_argument(
        "--run",
        metavar="FILE.jsonl",
        action="extend",
        nargs="+",
        default=None,
        help="training panel: replay these run files before rendering (overlaid; the "
        "last one named is selected)",
    )
    parser.add_argument(
        "--training-page",
        choices=TRAINING_PAGES,
        default="mixed",
        help="training panel: the plots page to show, mixed (AMP: loss, scale, "
        "gradients) or low (FP8/MX layers) (default: mixed)",
    )


def parse_size(text: str) -> tuple[int, int]:
    from fpexplorer.cli import UsageError

    width_text, _, height_text = text.lower().partition("x")
    try:
        width, height = int(width_text), int(height_text)
    except ValueError:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 1280x800") from None
    if not (320 <= width <= 8000 and 240 <= height <= 8000):
        raise UsageError(f"--size {text!r}: width 320..8000 and height 240..8000 pixels")
    return width, height


def run(args: argparse.Namespace) -> int:
    from fpexplorer.cli import UsageError

    width, height = parse_size(args.size)
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise UsageError(f"--out {args.out!r}: the file name must end in .png")
    if not out.parent.exists():
        raise UsageError(f"--out {args.out!r}: folder {out.parent} does not exist")
    if args.panel != "training" and (args.run or args.training_page != "mixed"):
        option = "--run" if args.run else "--training-page"
        raise UsageError(f"{option}: only with --panel training")
    for path in args.run or ():
        if not Path(path).exists():
            raise UsageError(f"--run {path!r}: no such file or folder")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app, window = prepare_window(args)
    image = render(window, width, height)
    app.processEvents()
    if not image.save(str(out), "PNG"):
        raise UsageError(f"--out {args.out!r}: could not write the PNG")
    window.close()
    print(f"wrote {out} ({image.width()}x{image.height()})")
    return 0


def prepare_window(args: argparse.Namespace) -> tuple[QApplication, MainWindow]:
    """(application, main window) in the state the arguments ask for, not yet painted:
    what the picture will show (tests read it from the widgets)."""
    from fpexplorer.cli import UsageError
    from fpexplorer.commands.gui import _formats, apply_start_state

    formats = _formats(args.formats)

    from fpexplorer.gui.app import create_application

    app = create_application(theme=args.theme)

    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    window = MainWindow(SettingsStore(persistent=False), restore=False)
    apply_start_state(window, formats, args.value)
    window.formats_panel.show_view(args.view)
    if args.panel == "training":
        window.tabs.setCurrentIndex(1)
        from fpexplorer.gui.training.panel import TrainingPanel

        panel = window.training_panel
        if not isinstance(panel, TrainingPanel):  # torch-free, but its imports may fail
            if args.run or args.training_page != "mixed":
                raise UsageError(f"training panel unavailable: {window.training_problem}")
        else:
            from fpexplorer.training.ranked import NoRunError, find_run

            for path in args.run or ():
                # A run folder or a rank's log opens as the run's merged log, as in the
                # panel (both were refused: "no such file", "not a run log").
                try:
                    merged = find_run(path).merged
                except NoRunError as error:
                    window.close()
                    raise UsageError(f"--run {path!r}: {error}") from None
                panel.load_run(path)
                panel.finish_loading()  # a large run file is otherwise read in pieces
                if not any(entry.path == merged for entry in panel.runs):
                    # The panel would show the file's problem in its status line: a
                    # picture of an empty panel is not what --run asked for.
                    # In the panel's and `runs check`'s words: an empty file or a log of
                    # a newer schema is not "not a run log".
                    reason = panel.last_refusal or "not a run log (no run records found)"
                    window.close()  # ends its children (nvidia-smi) before the exit
                    raise UsageError(f"--run {path!r}: {reason}")
            panel.show_plot_page(args.training_page)
    return app, window


def render(window: object, width: int, height: int) -> object:
    """Show the window and paint it into a QImage of exactly width x height pixels.

    On a high-DPI screen (or with QT_SCALE_FACTOR) the window is width/ratio logical
    pixels wide and painted at the device pixel ratio, so text stays sharp.
    """
    from PySide6.QtCore import QSize, Qt, QTimer
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QApplication, QWidget

    assert isinstance(window, QWidget)
    ratio = window.devicePixelRatioF() or 1.0
    logical_width, logical_height = round(width / ratio), round(height / ratio)
    window.setMinimumSize(QSize(0, 0))
    window.resize(logical_width, logical_height)
    window.show()
    # Let layouts settle and plots lay themselves out (they size on the first paints).
    for _ in range(3):
        QApplication.processEvents()
        QTimer.singleShot(0, lambda: None)
    window.resize(logical_width, logical_height)
    QApplication.processEvents()
    # pyqtgraph places some items (TextItem labels) only when they are first painted: paint
    # once into a scratch image, let the updates that schedules run, then take the picture.
    scratch = QImage(max(window.width(), 1), max(window.height(), 1), QImage.Format.Format_ARGB32)
    window.render(scratch)
    for _ in range(2):
        QApplication.processEvents()
    if window.width() > logical_width or window.height() > logical_height:
        # The window cannot be that small (its layouts have a minimum): paint all of it at
        # the size it took and scale the picture down, rather than save a cut-off corner.
        full = QImage(
            round(window.width() * ratio),
            round(window.height() * ratio),
            QImage.Format.Format_ARGB32,
        )
        full.setDevicePixelRatio(ratio)
        full.fill(window.palette().window().color())
        window.render(full)
        full.setDevicePixelRatio(1.0)
        scaled = full.scaled(
            width,
            height,
            Qt.AspectRatioMode.KeepAspectRatio,
            Qt.TransformationMode.SmoothTransformation,
        )
        image = QImage(width, height, QImage.Format.Format_ARGB32)
        image.fill(window.palette().window().color())
        painter = QPainter(image)
        painter.drawImage((width - scaled.width()) // 2, (height - scaled.height()) // 2, scaled)
        painter.end()
        print(
            f"note: the window is at least {full.width()}x{full.height()} pixels; "
            f"drawn at that size and scaled down to {width}x{height}",
            file=sys.stderr,
        )
        return image
    image = QImage(width, height, QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(ratio)
    image.fill(window.palette().window().color())
    window.render(image)
    return image
