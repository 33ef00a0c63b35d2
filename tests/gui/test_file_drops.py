"""A file dropped on a text field does what a drop on the window does (its run opens on the
Training tab); it never pastes its path into the field. Before, every line edit took the
drag as text: /tmp/…/run.jsonl landed in the value entry, a format spec, an operand."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QLineEdit, QPlainTextEdit, QWidget
from pytestqt.qtbot import QtBot

from fpexplorer.gui.file_drops import REFUSED_MESSAGE
from fpexplorer.gui.formats.panel import VIEW_NAMES
from fpexplorer.gui.main_window import MainWindow
from fpexplorer.gui.settings import SettingsStore


def _file_drag(path: Path) -> QMimeData:
    # As a file manager offers it: the URL, and the path as plain text.
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    mime.setText(str(path))
    return mime


def _drag(target: QWidget, mime: QMimeData) -> tuple[bool, bool]:
    """(whether the drag was accepted on entering, whether the drop was) at `target`."""
    action = Qt.DropAction.CopyAction
    buttons, modifiers = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    where = QPoint(5, 5)
    enter = QDragEnterEvent(where, action, mime, buttons, modifiers)
    QApplication.sendEvent(target, enter)
    drop = QDropEvent(where, action, mime, buttons, modifiers)
    QApplication.sendEvent(target, drop)
    return enter.isAccepted(), drop.isAccepted()


def _text(field: QWidget) -> str:
    return field.toPlainText() if isinstance(field, QPlainTextEdit) else field.text()  # type: ignore[attr-defined]


def test_a_file_dropped_on_any_text_field_opens_as_on_the_window(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in VIEW_NAMES:  # the views build their fields when first shown
        window.formats_panel.show_view(name)
    panel = window.training_panel
    opened: list[str] = []
    monkeypatch.setattr(
        panel, "load_run", lambda path, in_background=False: opened.append(str(path))
    )
    run = tmp_path / "run.jsonl"
    run.write_text("")
    fields: list[QWidget] = [
        *(field for field in window.findChildren(QLineEdit) if field.isEnabled()),
        *(edit for edit in window.findChildren(QPlainTextEdit) if edit.isEnabled()),
    ]
    entry = window.formats_panel.entry.field
    assert entry in fields and len(fields) >= 10
    for field in fields:
        window.tabs.setCurrentIndex(0)
        before = _text(field)
        target = field.viewport() if isinstance(field, QPlainTextEdit) else field
        assert _drag(target, _file_drag(run)) == (True, True), field.accessibleName()
        assert _text(field) == before, field.accessibleName()
        assert window.tabs.currentIndex() == 1  # where the run opens
    assert opened == [str(run)] * len(fields)


def test_text_dragged_onto_a_field_still_goes_in(window: MainWindow) -> None:
    field = window.formats_panel.entry.field
    field.clear()
    mime = QMimeData()
    mime.setText("0.1")
    assert _drag(field, mime) == (True, True)
    assert field.text() == "0.1"
    assert window.tabs.currentIndex() == 0


def test_a_file_dropped_on_a_dialogs_field_is_refused_with_a_message(
    window: MainWindow, tmp_path: Path
) -> None:
    from fpexplorer.gui.formats.custom_format import CustomFormatDialog

    dialog = CustomFormatDialog(window.formats_panel)
    dialog.show()
    name = dialog.name
    before = name.text()
    run = tmp_path / "run.jsonl"
    run.write_text("")
    assert _drag(name, _file_drag(run)) == (False, False)
    assert name.text() == before
    assert window.statusBar().currentMessage() == REFUSED_MESSAGE
    dialog.close()


def test_a_file_dropped_on_a_file_dialogs_name_field_goes_in(
    window: MainWindow, tmp_path: Path
) -> None:
    # Qt's own file dialog (where no native one is used, as File ▸ Open Run… may be) takes a
    # file dropped on its name field as the file to choose: that drop is the dialog's, not
    # refused as a path typed into a number field.
    from PySide6.QtWidgets import QFileDialog

    dialog = QFileDialog(window, "Open Run", str(tmp_path))
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
    dialog.show()
    window.status.clearMessage()
    name = next(field for field in dialog.findChildren(QLineEdit) if field.isVisible())
    name.clear()
    run = tmp_path / "run.jsonl"
    run.write_text("")
    assert _drag(name, _file_drag(run)) == (True, True)
    assert name.text() == run.name  # the dialog's own reading: the file in its folder
    assert dialog.selectedFiles() == [str(run)]
    assert window.statusBar().currentMessage() != REFUSED_MESSAGE
    assert window.tabs.currentIndex() == 0  # not opened as a drop on the window
    dialog.close()


def test_every_window_shares_the_applications_one_drop_filter(qtbot: QtBot) -> None:
    # Failed before: each window installed a filter of its own on the application, and
    # Python was called once per filter for every event of the application; a test process
    # that had made 100 windows built a training panel in 2.4 s instead of 0.25.
    from PySide6.QtCore import QObject

    from fpexplorer.gui.file_drops import FileDropFilter

    windows = [MainWindow(SettingsStore(persistent=False), restore=False) for _ in range(3)]
    for window in windows:
        qtbot.addWidget(window)
    app = QApplication.instance()
    assert isinstance(app, QObject)
    filters = set(app.findChildren(FileDropFilter))
    for window in windows:
        filters |= set(window.findChildren(FileDropFilter))
    assert len(filters) == 1
