"""Files dropped on a text field do what a drop on the window does, never paste their path.

A line edit (the value entry, a format spec, an operand, a spin box's text) takes a file
dragged from a file manager as text and inserted "/home/me/run.jsonl" into a number
field. `FileDropFilter`, installed on the application while a drag is over one of our
windows, sees drags before any field: a drag
of local files onto a text field of the main window is handed to the window's own drop
handling (`drop_files(paths, field)`; runs open on the Training tab); onto a field of
another window (a dialog) it is refused, and the status bar says where files go, except in
Qt's own file dialog, which takes the file as the one to choose. Text drags ("0.1") still
reach the field.

A widget that uses files of some kind (the Training form's task row takes a .py, the block
editor a .npy) says so by having `take_dropped_files` (`FileDropTaker`): the window offers a
drop to the first such widget at or above the one it lands on (a field, or the widget under
a drop on the window), before opening the files as runs.
"""

from __future__ import annotations

import weakref
from typing import Protocol, runtime_checkable

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt, QTimer
from PySide6.QtGui import QDropEvent, QGuiApplication, QWindow
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QApplication,
    QFileDialog,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QTextEdit,
    QWidget,
)

DRAG_EVENTS = (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)
REFUSED_MESSAGE = (
    "Files are not typed into a field: drop a run log or run folder on the main window "
    "(outside any dialog) to open it"
)


def local_paths(mime: QMimeData | None) -> list[str]:
    """The local files and folders of a drag, in order; none for text or remote URLs."""
    if mime is None or not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]


@runtime_checkable
class FileDropTaker(Protocol):
    """A widget that uses dropped files of its kind itself."""

    def take_dropped_files(self, paths: list[str]) -> bool:
        """Use `paths` and return True, or return False (not files of its kind)."""
        ...


def taker_at(widget: QWidget | None) -> FileDropTaker | None:
    """The first widget at or above `widget` that takes dropped files, if any."""
    current = widget
    while current is not None:
        if isinstance(current, FileDropTaker):
            return current
        current = current.parentWidget()
    return None


def text_field_of(target: QObject) -> QWidget | None:
    """The text field a drag event goes to: a line edit itself, or the text edit whose
    viewport receives it; None for anything else."""
    if isinstance(target, QLineEdit):
        return target
    parent = target.parent() if isinstance(target, QWidget) else None
    if isinstance(parent, QPlainTextEdit | QTextEdit) and isinstance(parent, QAbstractScrollArea):
        return parent if target is parent.viewport() else None
    return None


class FileDropFilter(QObject):
    """File drags onto text fields go to the drop handling (`dropEvent`) of the registered
    window they are in, or are refused, with a message in its status bar, when the field is
    in another window of ours (a dialog). Only drag events are looked at; the rest pass
    untouched.

    One filter for the whole application (`watch_file_drops`), which holds its windows
    weakly. It watches our windows' native windows (`QWindow`), where a drag arrives before
    Qt hands it to the widget under it, and is an application event filter only while it
    routes a drag there: an application filter is called by Python for every event of the
    application (a filter installed for good made the Training tab's first build take
    0.29 s instead of 0.21; a filter per window, for each of 100 windows made, 2.4 s).
    Native windows are watched as our windows and dialogs get focus (and when a window is
    registered after being shown)."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self._windows: weakref.WeakSet[QMainWindow] = weakref.WeakSet()
        self._native: weakref.WeakSet[QWindow] = weakref.WeakSet()
        self._routing = False  # installed on the application now
        gui = QGuiApplication.instance()
        if isinstance(gui, QGuiApplication):
            gui.focusWindowChanged.connect(self._watch_native)

    def watch(self, window: QMainWindow) -> None:
        self._windows.add(window)
        self._watch_native(window.windowHandle())

    def _stop_routing(self) -> None:
        """No more Python for every event: the drag event has been handed on."""
        app = QApplication.instance()
        if self._routing and app is not None:
            app.removeEventFilter(self)
        self._routing = False

    def _watch_native(self, native: QWindow | None) -> None:
        """Watch the drags of `native` where it is one of our windows or dialogs."""
        if native is None or native in self._native:
            return
        # Only our windows' own handles are asked (not `topLevelWidgets()`, which holds
        # widgets Qt makes and deletes itself: asking one being deleted crashed); a dialog's
        # native window has its window's as transient parent.
        ours = []
        for window in list(self._windows):
            try:
                ours.append(window.windowHandle())
            except RuntimeError:  # deleted already
                continue
        current: QWindow | None = native
        while current is not None:
            if any(current is handle for handle in ours):
                self._native.add(native)
                native.installEventFilter(self)
                return
            current = current.transientParent()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() not in DRAG_EVENTS:
            return False
        if isinstance(watched, QWindow):
            # Arrived at a native window of ours: Qt hands it to the widget under it next,
            # through the application's filters, this one among them until the event loop
            # takes its next turn.
            app = QApplication.instance()
            if not self._routing and app is not None:
                self._routing = True
                app.installEventFilter(self)
                QTimer.singleShot(0, self._stop_routing)
            return False
        assert isinstance(event, QDropEvent)  # QDragEnterEvent and QDragMoveEvent are ones
        field = text_field_of(watched)
        if field is None or not local_paths(event.mimeData()):
            return False
        home = field.window()
        for window in list(self._windows):
            if home is window:
                if event.type() == QEvent.Type.Drop:
                    # The window is told the field, not a place: its own `childAt` finds
                    # widgets by a layout that may not be settled yet.
                    drop_files = getattr(window, "drop_files", None)
                    if callable(drop_files):
                        event.acceptProposedAction()
                        drop_files(local_paths(event.mimeData()), field)
                    else:
                        window.dropEvent(event)
                else:
                    event.acceptProposedAction()
                return True
        # Qt's own file dialog (where no native one is used) takes a file dropped on its
        # name field as the file to choose: that drop is the dialog's.
        if isinstance(home, QFileDialog):
            return False
        for window in list(self._windows):
            if _within(field, window):
                if event.type() == QEvent.Type.DragEnter:
                    window.statusBar().showMessage(REFUSED_MESSAGE, 8000)
                event.ignore()
                return True
        return False


def _within(widget: QWidget, window: QWidget) -> bool:
    """Whether `widget` is in `window` or a window of its (a dialog whose parent chain
    reaches it)."""
    current: QWidget | None = widget
    while current is not None:
        if current is window:
            return True
        current = current.parentWidget()
    return False


def watch_file_drops(window: QMainWindow) -> None:
    """Make file drops on `window`'s text fields (and its dialogs') go as described above,
    through the application's one FileDropFilter (installed on first use)."""
    app = QApplication.instance()
    if app is None:
        return
    drops = app.findChild(FileDropFilter, options=Qt.FindChildOption.FindDirectChildrenOnly)
    if drops is None:
        drops = FileDropFilter(app)
    drops.watch(window)
