"""A file dropped on a text field does what a drop on the window does (its run opens on the
Training tab); it never pastes its path into the field. Before, every line edit took the
drag as text: /tmp/…/run.jsonl landed in the value entry, a format spec, an operand."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QWindow
from PySide6.QtWidgets import QApplication, QLineEdit, QPlainTextEdit, QWidget
from pytestqt.qtbot import QtBot

from fpexplorer.gui.file_drops import REFUSED_MESSAGE, FileDropFilter
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
    """(whether the drag was accepted on entering, whether the drop was) at `target`.

    As a drag from another application arrives: at the native window, which Qt hands to
    the widget under it. A target not on show there (another tab or view, scrolled away)
    gets each event as Qt would hand it on, after the native window's filters saw it."""
    action = Qt.DropAction.CopyAction
    buttons, modifiers = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    top = target.window()
    native = top.windowHandle()
    assert native is not None, "the target's window is not shown"
    where = target.mapTo(top, QPoint(5, 5))
    on_show = target.isVisible() and top.childAt(where) is target
    accepted = []
    for kind in (QDragEnterEvent, QDropEvent):
        if on_show:
            event = kind(where, action, mime, buttons, modifiers)
            QApplication.sendEvent(native, event)
        else:
            _arrive_at(native, kind(where, action, mime, buttons, modifiers))
            event = kind(QPoint(5, 5), action, mime, buttons, modifiers)
            QApplication.sendEvent(target, event)
        accepted.append(event.isAccepted())
    return accepted[0], accepted[1]


def _arrive_at(native: QWindow, event: QEvent) -> None:
    """What the native window's event filters do with `event`, without Qt's routing."""
    drops = _drop_filter()
    assert native in drops._native, "the window's drags are not watched"
    assert drops.eventFilter(native, event) is False


def _drop_filter() -> FileDropFilter:
    app = QApplication.instance()
    drops = app.findChild(FileDropFilter) if app is not None else None
    assert isinstance(drops, FileDropFilter)
    return drops


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


def test_a_drag_goes_through_the_native_window_and_the_application_filter_only_then(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the filter was an application event filter for good, called by Python for
    # every event of the application (the Training tab's first build took 0.29 s, not 0.21).
    opened: list[str] = []
    monkeypatch.setattr(window, "drop_files", lambda paths, field: opened.extend(paths))
    QApplication.processEvents()
    drops = _drop_filter()
    assert window.windowHandle() in drops._native
    assert not drops._routing
    entry = window.formats_panel.entry.field
    run = tmp_path / "run.jsonl"
    run.write_text("")
    assert entry.isVisible() and entry.window().childAt(entry.mapTo(window, QPoint(5, 5))) is entry
    before = entry.text()
    assert _drag(entry, _file_drag(run)) == (True, True)
    assert opened == [str(run)] and entry.text() == before
    QApplication.processEvents()  # the event loop's next turn: the filter leaves the application
    assert not drops._routing


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
    QApplication.processEvents()  # its native window gets focus, and is watched
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


# -- files that are not runs: a task file and a tensor go where they are used ---------------
# Before: a .py dropped on the Training form's Task field, and a .npy dropped on the block
# editor, were opened as runs ("not a run log").


def _no_runs_opened(window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    monkeypatch.setattr(
        window.training_panel, "load_run", lambda path, in_background=False: opened.append(path)
    )
    return opened


def test_a_task_file_dropped_on_the_task_field_becomes_the_task(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _no_runs_opened(window, monkeypatch)
    form = window.training_panel.form  # type: ignore[attr-defined]
    window.tabs.setCurrentIndex(1)
    task = tmp_path / "my_task.py"
    task.write_text("import torch\n\n\ndef helper():\n    pass\n\n\ndef make_task():\n    pass\n")
    field = form.task_combo.lineEdit()
    assert _drag(field, _file_drag(task)) == (True, True)
    assert form.task_combo.currentText() == f"{task}:make_task"
    assert "task" not in form.problems()
    # The only function of a file is its factory, whatever its name.
    other = tmp_path / "other.py"
    other.write_text("def build(seed=0, batch_size=None):\n    pass\n")
    assert _drag(form.task_browse, _file_drag(other)) == (True, True)
    assert form.task_combo.currentText() == f"{other}:build"
    assert opened == []


def test_a_task_file_without_a_factory_is_refused_by_the_fields_own_check(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _no_runs_opened(window, monkeypatch)
    form = window.training_panel.form  # type: ignore[attr-defined]
    window.tabs.setCurrentIndex(1)
    task = tmp_path / "two.py"
    task.write_text("def one():\n    pass\n\n\ndef two():\n    pass\n")
    assert _drag(form.task_combo.lineEdit(), _file_drag(task)) == (True, True)
    assert form.task_combo.currentText() == f"{task}:make_task"
    assert "make_task" in form.problems()["task"]
    assert opened == []


def test_a_task_file_dropped_elsewhere_says_where_it_goes(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _no_runs_opened(window, monkeypatch)
    task = tmp_path / "my_task.py"
    task.write_text("def make_task():\n    pass\n")
    for target in (window.formats_panel.entry.field, window.tabs):
        window.status.clearMessage()
        assert _drag(target, _file_drag(task)) == (True, True)
        message = window.status.currentMessage()
        assert "my_task.py" in message and "Task field" in message, message
        assert "not a run log" not in message
    assert opened == []


def test_a_tensor_dropped_on_the_block_editor_loads_there(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from fpexplorer.gui.formats.block_view import BlockEditorView

    opened = _no_runs_opened(window, monkeypatch)
    window.tabs.setCurrentIndex(0)
    window.formats_panel.show_view("block")
    view = window.findChild(BlockEditorView)
    assert view is not None
    tensor = tmp_path / "w.npy"
    np.save(tensor, np.linspace(-1.0, 1.0, 96, dtype=np.float32))
    loaded: list[str] = []

    def load_npy(path: str, block: int = 0) -> bool:
        loaded.append(path)
        return True

    monkeypatch.setattr(view.state, "load_npy", load_npy)
    assert _drag(view.values_field, _file_drag(tensor)) == (True, True)
    assert loaded == [str(tensor)]
    assert _drag(view.open_button, _file_drag(tensor)) == (True, True)
    assert loaded == [str(tensor)] * 2
    assert window.tabs.currentIndex() == 0
    # Elsewhere a tensor is not opened as a run: the status bar says where it goes.
    window.formats_panel.entry.field.setFocus()
    assert _drag(window.formats_panel.entry.field, _file_drag(tensor)) == (True, True)
    message = window.status.currentMessage()
    assert "w.npy" in message and "block editor" in message, message
    assert loaded == [str(tensor)] * 2 and opened == []


def test_a_factory_bound_any_way_at_the_top_of_the_file_is_found(tmp_path: Path) -> None:
    from fpexplorer.training.config import factory_problem

    cases = {
        "from elsewhere import make_task\n": None,
        "import functools\nmake_task = functools.partial(print)\n": None,
        "class make_task:\n    pass\n": None,
        "def make_task(:\n": None,  # does not parse: starting the job says why
        "def build():\n    pass\n": "no make_task (it defines build)",
        "x = 1\n": "no make_task (it defines no function)",
    }
    for number, (source, problem) in enumerate(cases.items()):
        task = tmp_path / f"task{number}.py"
        task.write_text(source)
        found = factory_problem(f"{task}:make_task")
        if problem is None:
            assert found is None, source
        else:
            assert found is not None and problem in found, (source, found)
    assert factory_problem(f"{tmp_path / 'missing.py'}:make_task") is None  # config says so
