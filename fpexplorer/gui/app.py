"""Starting the desktop app: QApplication set-up, icon, theme, first window."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import pyqtgraph as pg
from PySide6.QtCore import (
    QCoreApplication,
    QMessageLogContext,
    QSize,
    QTimer,
    QtMsgType,
    qInstallMessageHandler,
)
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from fpexplorer import __version__
from fpexplorer.gui.settings import APPLICATION, ORGANIZATION
from fpexplorer.resources import resource_path

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# Said by Qt's offscreen platform on every window, screenshot and self-test: true, and of
# no use to whoever reads the terminal. Every other Qt message still shows.
HARMLESS_QT_MESSAGES = (
    "This plugin does not support propagateSizeHints()",
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",
)
# How often Python gets a turn while Qt waits for events: a signal (Ctrl+C) is handled by
# Python only between bytecodes, and an idle Qt event loop runs none.
INTERRUPT_POLL_MS = 200
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl+C
EXIT_TERMINATED = 143  # 128 + SIGTERM


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


def is_harmless(message: str) -> bool:
    return message.strip() in HARMLESS_QT_MESSAGES


# Qt's messages while the QApplication is being created, held: when no platform plugin can
# start (DISPLAY names a display that is not there, xcb libraries missing) Qt prints a
# dozen lines ending "Reinstalling the application may fix this problem" and aborts the
# process (exit status 134). The app says why in one line instead and exits with status 2.
_held_messages: list[str] | None = None
EXIT_NO_WINDOW = 2


def _on_qt_message(kind: QtMsgType, _context: QMessageLogContext, message: str) -> None:
    if _held_messages is not None:
        if kind == QtMsgType.QtFatalMsg:
            _exit_no_window(_held_messages)
        _held_messages.append(message)
        return
    if not is_harmless(message):
        print(message, file=sys.stderr, flush=True)


def no_window_message(qt_messages: Sequence[str]) -> str:
    """One line for a QApplication that could not start, from what Qt said before."""
    said = "; ".join(
        line.strip().rstrip(".")
        for line in qt_messages
        if line.strip() and not line.strip().startswith("Available platform plugins")
    )
    settings = ", ".join(
        f"{name}={os.environ[name]!r}"
        for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "DISPLAY")
        if os.environ.get(name)
    )
    return (
        f"fpexplorer: error: no window can be opened here ({settings or 'no display set'}). "
        f"Qt said: {said}. Check the display, or install the X11 libraries the README lists "
        "(libxcb-cursor0 ...); QT_QPA_PLATFORM=offscreen runs without a display."
    )


def _exit_no_window(qt_messages: Sequence[str]) -> None:
    # Called by Qt in place of its abort: no exception can cross back into Qt from here.
    sys.stderr.write(no_window_message(qt_messages) + "\n")
    sys.stderr.flush()
    os._exit(EXIT_NO_WINDOW)


def install_message_filter() -> None:
    """Keep Qt's known-harmless offscreen messages out of the terminal."""
    qInstallMessageHandler(_on_qt_message)


def install_interrupt_handler() -> None:
    """Ctrl+C in the terminal quits the app: windows close (state is saved) and the event
    loop exits with EXIT_INTERRUPTED. Before there is an application it is an ordinary
    KeyboardInterrupt (the command line reports it in one line).

    Python's own handler raised KeyboardInterrupt inside whatever Qt slot ran next (the
    redraw timer), which printed a traceback and left the app running."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_interrupt(_signal: int, _frame: FrameType | None) -> None:
        app = QCoreApplication.instance()
        if app is None:
            raise KeyboardInterrupt
        # Later, from the event loop (also when it has not started yet).
        QTimer.singleShot(0, quit_interrupted)

    signal.signal(signal.SIGINT, on_interrupt)


_interrupted = False


def was_interrupted() -> bool:
    """True once Ctrl+C has quit the app: code that ran its own event loop (the self-test
    waiting for its training job) sees the loop end and must not take it for a result."""
    return _interrupted


def install_termination_handler() -> None:
    """SIGTERM (`kill`, a session that ends) quits the app as Ctrl+C does: windows close
    and save what they keep, a running training job is stopped; exit status 143. Python's
    default let the process die at once and the window's state was lost. For the app's
    event loop only (`fpexplorer gui`): a command that renders and exits keeps the default."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_terminate(_signal: int, _frame: FrameType | None) -> None:
        QTimer.singleShot(0, lambda: quit_interrupted(EXIT_TERMINATED))

    signal.signal(signal.SIGTERM, on_terminate)


def quit_interrupted(status: int = EXIT_INTERRUPTED) -> None:
    """Close every window (each saves what it keeps) and leave the event loop."""
    global _interrupted
    _interrupted = True
    app = QApplication.instance()
    if isinstance(app, QApplication):
        # Closing the last window would quit with status 0 (a posted event that can run
        # after the exit below and overwrite its status).
        app.setQuitOnLastWindowClosed(False)
        for widget in app.topLevelWidgets():
            if widget.isVisible():
                widget.close()
        app.exit(status)


def _start_interrupt_poll(app: QApplication) -> None:
    if app.property("fpexplorer_interrupt_poll"):
        return
    poll = QTimer(app)
    poll.setObjectName("interrupt_poll")
    poll.timeout.connect(lambda: None)  # an empty turn of Python: pending signals run
    poll.start(INTERRUPT_POLL_MS)
    app.setProperty("fpexplorer_interrupt_poll", True)


def create_application(argv: Sequence[str] | None = None, theme: str = "system") -> QApplication:
    """The QApplication (created once), with names, icon, and palette-aware plots; Qt's
    harmless offscreen noise filtered, Ctrl+C quitting cleanly."""
    install_message_filter()
    install_interrupt_handler()
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        app = existing
    else:
        QCoreApplication.setOrganizationName(ORGANIZATION)
        QCoreApplication.setApplicationName(APPLICATION)
        global _held_messages
        _held_messages = []
        try:
            app = QApplication(list(argv) if argv is not None else [sys.argv[0]])
        finally:
            held, _held_messages = _held_messages, None
        for message in held:
            _on_qt_message(QtMsgType.QtWarningMsg, QMessageLogContext(), message)
        app.setApplicationDisplayName("fpexplorer")
        app.setApplicationVersion(__version__)
        app.setDesktopFileName("fpexplorer")
    app.setWindowIcon(app_icon())
    _start_interrupt_poll(app)
    pg.setConfigOptions(antialias=True)
    if theme == "dark":
        from fpexplorer.gui.theme import apply_dark_palette

        apply_dark_palette()
    elif theme == "light":
        from fpexplorer.gui.theme import apply_light_palette

        apply_light_palette()
    return app
