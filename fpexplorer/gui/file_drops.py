"""Files dropped on a text field do what a drop on the window does, never paste their path.

A line edit (the value entry, a format spec, an operand, a spin box's text) takes a file
dragged from a file manager as text and inserted "/home/me/run.jsonl" into a number
field. `FileDropFilter`, installed on the application, sees drags before any field: a drag
of local files onto a text field of the main window is handed to the window's own drop
handling (runs open on the Training tab); onto a field of another window (a dialog) it is
refused, and the status bar says where files go, except in Qt's own file dialog, which
takes the file as the one to choose. Text drags ("0.1") still reach the field.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QMimeData, QObject
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QFileDialog,
    QLineEdit,
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
    """Application event filter: file drags onto text fields go to `window`'s drop handling
    (`drop_files(event)`), or are refused with `say(message)` when the field is in another
    window of ours. Only drag events are looked at; the rest pass untouched."""

    def __init__(
        self,
        window: QWidget,
        drop_files: Callable[[QDropEvent], None],
        say: Callable[[str], None],
    ) -> None:
        super().__init__(window)  # deleted with the window, and so uninstalled
        self._window = window
        self._drop_files = drop_files
        self._say = say

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() not in DRAG_EVENTS:
            return False
        assert isinstance(event, QDropEvent)  # QDragEnterEvent and QDragMoveEvent are ones
        field = text_field_of(watched)
        if field is None or not local_paths(event.mimeData()):
            return False
        if field.window() is self._window:
            if event.type() == QEvent.Type.Drop:
                self._drop_files(event)
            else:
                event.acceptProposedAction()
            return True
        # Qt's own file dialog (where no native one is used) takes a file dropped on its
        # name field as the file to choose: that drop is the dialog's.
        if self._owns(field) and not isinstance(field.window(), QFileDialog):
            if event.type() == QEvent.Type.DragEnter:
                self._say(REFUSED_MESSAGE)
            event.ignore()
            return True
        return False

    def _owns(self, widget: QWidget) -> bool:
        """Whether `widget` is in a window of ours (a dialog whose parent chain reaches the
        main window); another main window's fields are its own filter's."""
        current: QWidget | None = widget
        while current is not None:
            if current is self._window:
                return True
            current = current.parentWidget()
        return False
