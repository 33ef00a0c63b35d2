"""The main window: tabs, menus and shortcuts, clipboard, settings kept between runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gui_helpers import REPO, run_python
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from fpexplorer.formats import get_format
from fpexplorer.gui.formats.panel import VIEW_NAMES
from fpexplorer.gui.main_window import DEFAULT_SIZE, SHORTCUTS_HELP, MainWindow
from fpexplorer.gui.settings import SettingsStore


def test_tests_never_use_the_users_settings() -> None:
    store = SettingsStore()
    assert os.environ["FPEXPLORER_SETTINGS_SCOPE"] == "tests"
    home_config = str(Path.home() / ".config")
    assert not store.location.startswith(home_config)


def test_window_has_formats_and_training_tabs(window: MainWindow) -> None:
    titles = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    assert titles == ["Formats", "Training"]
    assert type(window.training_panel).__name__ == "TrainingPanel"
    menus = [action.text() for action in window.menuBar().actions()]
    assert menus == ["&File", "&Edit", "&View", "&Help"]
    assert window.quit_action.shortcut() == QKeySequence("Ctrl+Q")
    assert window.copy_value_action.shortcut() == QKeySequence(QKeySequence.StandardKey.Copy)
    assert window.statusBar().currentMessage()


def test_ctrl_c_copies_the_exact_value(qtbot: QtBot, window: MainWindow) -> None:
    window.session.enter_text("0.1")
    window.formats_panel.rows[0].bits.setFocus()
    qtbot.keyClick(
        window.formats_panel.rows[0].bits, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier
    )
    assert QGuiApplication.clipboard().text() == "0.100000001490116119384765625"
    window.copy_code()
    assert QGuiApplication.clipboard().text() == "0x3DCCCCCD"
    assert "Copied" in window.statusBar().currentMessage()


def test_ctrl_c_in_the_value_field_copies_the_value_or_the_selection(
    qtbot: QtBot, window: MainWindow
) -> None:
    # Failed before: the field claimed Ctrl+C and, with nothing selected, copied nothing.
    QGuiApplication.clipboard().setText("before")
    field = window.formats_panel.entry.field
    qtbot.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is field
    qtbot.keyClicks(field, "0.1")
    qtbot.keyClick(field, Qt.Key.Key_Return)
    assert QApplication.focusWidget() is field and not field.hasSelectedText()
    qtbot.keyClick(field, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == "0.100000001490116119384765625"
    field.setSelection(0, 2)  # a selection is the field's to copy
    qtbot.keyClick(field, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == "0."


def test_ctrl_c_in_a_table_copies_its_selected_row(qtbot: QtBot, window: MainWindow) -> None:
    # Failed before: Ctrl+C with a row of the All formats table selected copied the active
    # editor's value (FP32's 0.100000001490116119384765625), not the row.
    window.session.enter_text("0.1")
    window.formats_panel.show_view("table")
    table = window.formats_panel.cross_table.table
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "float16")
    table.setFocus()
    table.selectRow(row)
    qtbot.keyClick(table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    copied = QGuiApplication.clipboard().text().split("\t")
    assert copied[:4] == ["float16", "0x2E66", "0.0999755859375", "normal"]
    window.formats_panel.rows[0].bits.setFocus()
    qtbot.keyClick(
        window.formats_panel.rows[0].bits, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier
    )
    assert QGuiApplication.clipboard().text() == "0.100000001490116119384765625"


def test_f1_help_lists_the_copy_entry_and_stack_shortcuts(window: MainWindow) -> None:
    # Failed before: Ctrl+Alt+C (copy shortest), Ctrl+Shift+A, Ctrl+Shift+F and the value
    # field's Escape were missing from the list F1 shows.
    wanted = [
        window.copy_value_action,
        window.copy_code_action,
        window.copy_shortest_action,
        window.focus_entry_action,
        *(
            action
            for menu_action in window.menuBar().actions()
            if menu_action.text() == "&View"
            for action in menu_action.menu().actions()
            if action.text() in ("&Add Format to Stack", "&Custom Format…")
        ),
    ]
    keys = [
        action.shortcut().toString(QKeySequence.SequenceFormat.PortableText) for action in wanted
    ]
    assert "Ctrl+Shift+A" in keys and "Ctrl+Shift+F" in keys
    for key in keys:
        assert f"<b>{key}</b>" in SHORTCUTS_HELP, key
    assert "Escape" in SHORTCUTS_HELP


def test_f1_help_lists_every_menu_shortcut(window: MainWindow) -> None:
    # Failed before: File ▸ Open Run… (Ctrl+O) and F1 itself were not in the list.
    window.training_panel  # noqa: B018 - builds it: its actions join the File menu
    arrows = {"Up": "↑/↓", "Down": "↑/↓", "Left": "→/←", "Right": "→/←"}
    for menu_action in window.menuBar().actions():
        for action in menu_action.menu().actions():
            key = action.shortcut().toString(QKeySequence.SequenceFormat.PortableText)
            if not key:
                continue
            *modifiers, last = key.split("+")
            shown = "+".join([*modifiers, arrows.get(last, last)])
            assert shown in SHORTCUTS_HELP, (action.text(), key)


def test_f1_list_fits_a_1024x640_screen(qtbot: QtBot, window: MainWindow) -> None:
    # Failed before: Qt's message box wrapped the list to 400x668 px, taller than the screen.
    from PySide6.QtCore import QTimer

    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    seen: list[tuple[int, int]] = []

    def look_and_close() -> None:
        box = QApplication.activeModalWidget()
        assert box is not None
        seen.append((box.width(), box.height()))
        box.close()

    QTimer.singleShot(0, look_and_close)  # runs inside the box's own event loop
    qtbot.keyClick(window, Qt.Key.Key_F1)
    assert len(seen) == 1
    width, height = seen[0]
    assert width <= 1000 and height <= 480, seen


def test_ctrl_q_closes_the_window(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible())


def test_state_is_kept_between_runs(qtbot: QtBot) -> None:
    first = MainWindow(SettingsStore())
    qtbot.addWidget(first)
    session = first.session
    session.set_format(session.editors[0], get_format("bfloat16"))
    session.set_rounding("toward_zero")
    session.enter_text("1/3")
    first.formats_panel.show_view("codes")
    first.resize(1000, 700)
    first.close()
    second = MainWindow(SettingsStore())
    qtbot.addWidget(second)
    assert second.session.editors[0].format == get_format("bfloat16")
    assert second.session.rounding == "toward_zero"
    assert second.session.entry_text == "1/3"
    assert second.session.active.code == first.session.active.code
    assert second.formats_panel.current_view_name() == "codes"
    geometry = second.settings.value("window/geometry")
    assert geometry is not None and len(geometry) > 0
    assert second.restoreGeometry(geometry)  # a valid saved geometry (sizes depend on screen)
    second.close()


def test_unwritable_settings_location_is_reported_not_fatal(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    # A folder below a plain file can never be created, even by root.
    monkeypatch.setenv("FPEXPLORER_SETTINGS_DIR", str(blocker / "settings"))
    main = MainWindow(SettingsStore())
    qtbot.addWidget(main)
    main.show()
    # Said when the window opens, while the status bar can be read (it was said only at
    # the close, on a window going away).
    said = main.statusBar().currentMessage()
    assert said.startswith("Settings will not be saved:") and str(blocker) in said, said
    main.session.enter_text("2")
    problem = main.save_state()
    assert problem and "Settings" in problem
    main.close()
    assert main.statusBar().currentMessage() == problem


def test_an_unreadable_settings_file_is_set_aside_and_defaults_used(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settings file QSettings cannot parse (here: truncated binary). Its half-read values
    were restored ("format '@Invalid(': unknown format"), and its parse error was reported
    at the close as "Settings problem while saving (unreadable file)" though the save
    worked."""
    monkeypatch.setenv("FPEXPLORER_SETTINGS_DIR", str(tmp_path))
    settings_file = tmp_path / "fpexplorer.ini"
    garbage = b"\x00\xff\xfe [[[\n[formats]\nformats=@Invalid(\ncodes=zzz\n"
    settings_file.write_bytes(garbage)
    main = MainWindow(SettingsStore())
    qtbot.addWidget(main)
    main.show()
    assert main.statusBar().currentMessage() == (
        f"Settings file {settings_file} could not be read; started with defaults "
        "(the file is kept as fpexplorer.ini.unreadable)"
    )
    assert [editor.format.name for editor in main.session.editors] == [
        "float32",
        "float16",
        "bfloat16",
    ]
    assert (tmp_path / "fpexplorer.ini.unreadable").read_bytes() == garbage
    main.session.enter_text("3")
    assert main.save_state() is None  # saving works: nothing to say at the close
    main.close()
    again = MainWindow(SettingsStore())
    qtbot.addWidget(again)
    assert again.settings.problem() is None
    assert again.session.entry_text == "3"
    again.close()


@pytest.mark.slow  # a child process that starts the GUI: about a second
def test_gui_startup_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from fpexplorer.gui.app import create_application\n"
        "app = create_application()\n"
        "from fpexplorer.gui.main_window import MainWindow\n"
        "from fpexplorer.gui.settings import SettingsStore\n"
        "w = MainWindow(SettingsStore(persistent=False), restore=False)\n"
        "w.show(); app.processEvents()\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n"
        "print('PANEL', type(w.training_panel).__name__)\n"
        "w.close()\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    result = run_python("-c", code, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "NO-TORCH" in result.stdout
    assert "PANEL TrainingPanel" in result.stdout


def _environment_without_a_display() -> dict[str, str]:
    """This process's environment, less what tells Qt where to draw."""
    hidden = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    return {k: v for k, v in os.environ.items() if k not in hidden}


@pytest.mark.slow  # a child process: about half a second
def test_gui_without_a_display_says_so(tmp_path: Path) -> None:
    env = _environment_without_a_display()
    result = run_python("-m", "fpexplorer", "gui", env=env)
    if sys.platform.startswith("linux"):
        assert result.returncode == 2
        assert "no display" in result.stderr
        assert "Traceback" not in result.stderr


def _free_x_display() -> str:
    number = 987
    while Path(f"/tmp/.X11-unix/X{number}").exists():
        number += 1
    return f":{number}"


@pytest.mark.slow  # child processes that start Qt: about a second
@pytest.mark.parametrize("where", ["display", "platform"])
def test_a_display_that_cannot_be_used_is_one_line_and_exit_2(where: str) -> None:
    # Failed before: Qt printed a dozen lines ending "Reinstalling the application may fix
    # this problem" and aborted the process (exit status 134, a core dump).
    env = _environment_without_a_display()
    if where == "display":  # an ssh -X session whose forwarding is gone, say
        env["DISPLAY"] = display = _free_x_display()
        setting = f"DISPLAY={display!r}"
    else:
        env["QT_QPA_PLATFORM"] = "nosuch"
        setting = "QT_QPA_PLATFORM='nosuch'"
    result = run_python("-m", "fpexplorer", "gui", "--fresh", env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"fpexplorer: error: no window can be opened here ({setting}).")
    assert "QT_QPA_PLATFORM=offscreen" in lines[0] and "Reinstalling" not in lines[0]


def test_application_icon_is_shipped(qapp: object) -> None:
    from fpexplorer.gui.app import app_icon

    icon = app_icon()
    assert not icon.isNull()
    assert len(icon.availableSizes()) >= 6


def test_fpexplorer_without_arguments_opens_the_main_window(
    qapp: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fpexplorer` runs the gui command; its event loop is replaced by a check."""
    from PySide6.QtWidgets import QApplication

    from fpexplorer.cli import main

    shown: list[MainWindow] = []

    def check_instead_of_exec() -> int:
        windows = [
            w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
        ]
        shown.extend(windows)
        for window in windows:
            window.close()
        return 0

    monkeypatch.setattr(QApplication, "exec", staticmethod(check_instead_of_exec))
    assert main([]) == 0
    assert len(shown) == 1
    assert shown[0].tabs.tabText(0) == "Formats"
    assert main(["gui", "--fresh", "--format", "fp16", "--value", "1/3"]) == 0
    assert shown[1].session.active.format == get_format("fp16")
    assert shown[1].session.active.code == 0x3555
    # The app's options without the word `gui` (was: "invalid choice: 'e5m2'").
    assert main(["--fresh", "--format", "e5m2", "--value", "2"]) == 0
    assert shown[2].session.active.format == get_format("e5m2")
    assert shown[2].session.active.code == 0x40
    for window in shown:
        window.deleteLater()


def test_step_shortcuts_and_training_file_actions(qtbot: QtBot, window: MainWindow) -> None:
    window.session.enter_text("1")
    code = window.session.active.code
    window.step_actions["up"].trigger()
    assert window.session.active.code == code + 1
    window.step_actions["exponent+"].trigger()
    assert window.session.active.code == code + 1 + (1 << 23)
    window.training_panel  # noqa: B018 - built on first use
    texts = [action.text() for action in window.file_menu.actions()]
    assert texts[-1] == "&Quit"
    assert len([t for t in texts if t]) >= 2  # the Training panel's actions come first


@pytest.mark.slow  # redraws every view of the window twice: about a second
def _synthetic_run(path: Path, steps: int = 30) -> Path:
    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.runlog import RunWriter

    with RunWriter(path) as writer:
        for record in synthetic_records(steps):
            writer.write(record)
    return path


def test_ctrl_o_on_the_formats_tab_shows_the_run_it_opens(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Failed before: the run was loaded into the Training tab while the Formats tab stayed
    # in front, so opening a run seemed to do nothing.
    from PySide6.QtWidgets import QFileDialog

    run = _synthetic_run(tmp_path / "run.jsonl")
    asked: list[str] = []

    def choose(*_args: object, **_kwargs: object) -> tuple[list[str], str]:
        asked.append("open")
        return [str(run)], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(choose))
    window.training_panel  # noqa: B018 - built, as when the File menu is first opened
    assert window.tabs.currentIndex() == 0
    qtbot.keyClick(window, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert asked == ["open"]
    assert window.tabs.currentIndex() == 1
    panel = window.training_panel
    qtbot.waitUntil(lambda: len(panel.runs) == 1 and not panel.loading)  # type: ignore[attr-defined]


def test_run_logs_dropped_on_the_window_open_on_the_training_tab(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    from PySide6.QtCore import QMimeData, QPoint, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent

    first = _synthetic_run(tmp_path / "first.jsonl")
    second = _synthetic_run(tmp_path / "second.jsonl", steps=12)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(first)), QUrl.fromLocalFile(str(second))])
    action = Qt.DropAction.CopyAction
    buttons, modifiers = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(10, 10), action, mime, buttons, modifiers)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPoint(10, 10), action, mime, buttons, modifiers)
    QApplication.sendEvent(window, drop)
    assert drop.isAccepted()
    assert window.tabs.currentIndex() == 1
    panel = window.training_panel
    qtbot.waitUntil(lambda: len(panel.runs) == 2 and not panel.loading)  # type: ignore[attr-defined]
    text = QMimeData()
    text.setText("0.1")  # text is not a file: the window does not take it
    refused = QDragEnterEvent(QPoint(10, 10), action, text, buttons, modifiers)
    QApplication.sendEvent(window, refused)
    assert not refused.isAccepted()


def test_views_follow_a_palette_change(qtbot: QtBot, window: MainWindow) -> None:
    from fpexplorer.gui.theme import apply_dark_palette

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    original_palette, original_style = app.palette(), app.style().name()
    line = window.formats_panel.number_line
    light = line.plot_widget.backgroundBrush().color()
    try:
        apply_dark_palette()
        qtbot.waitUntil(lambda: line.plot_widget.backgroundBrush().color() != light)
        assert line.plot_widget.backgroundBrush().color().lightness() < 100
    finally:
        app.setStyle(original_style)
        app.setPalette(original_palette)


@pytest.mark.slow  # a child process that starts the GUI: about half a second
def test_unwritable_home_is_reported_not_fatal(tmp_path: Path) -> None:
    """The user's native settings location under a home that cannot be written."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    code = (
        "from fpexplorer.gui.app import create_application\n"
        "app = create_application()\n"
        "from fpexplorer.gui.main_window import MainWindow\n"
        "from fpexplorer.gui.settings import SettingsStore\n"
        "store = SettingsStore()\n"
        "print('LOCATION', store.location)\n"
        "w = MainWindow(store)\n"
        "w.show(); app.processEvents()\n"
        "w.session.enter_text('3')\n"
        "w.close()\n"
        "print('STATUS', w.statusBar().currentMessage())\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("XDG_CONFIG_HOME", "FPEXPLORER_SETTINGS_DIR")
    }
    env.update(
        QT_QPA_PLATFORM="offscreen", FPEXPLORER_SETTINGS_SCOPE="user", HOME=str(blocker / "home")
    )
    result = run_python("-c", code, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert str(blocker) in result.stdout  # it really used the (unwritable) home
    assert "STATUS Settings" in result.stdout


def _fully_visible(widget: object) -> bool:
    from PySide6.QtWidgets import QWidget

    assert isinstance(widget, QWidget)
    return widget.isVisible() and widget.visibleRegion().boundingRect() == widget.rect()


@pytest.mark.parametrize("tab", [0, 1])
def test_the_window_is_usable_at_1024x640(qtbot: QtBot, window: MainWindow, tab: int) -> None:
    # Was: the window could not get narrower than ~1050 px, and with four editors the
    # read-outs scrolled out of view.
    window.training_panel  # noqa: B018 - built, so that its size counts too
    window.tabs.setCurrentIndex(tab)
    panel = window.formats_panel
    while len(window.session.editors) < 4:
        panel._on_add_clicked()
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1024, 640))
    minimum = window.minimumSizeHint()
    assert minimum.width() <= 1024 and minimum.height() <= 640
    if tab == 0:
        window.session.enter_text("0.1")
        QApplication.processEvents()
        readouts = panel.readouts
        for widget in (readouts.exact, readouts.shortest, readouts.formula, readouts.error):
            assert _fully_visible(widget), widget
        assert _fully_visible(panel.entry.field)
        assert panel.views.isVisible() and panel.views.height() >= 200
        assert panel.rows[0].visibleRegion().boundingRect().height() > 40


def test_the_window_fits_an_800x500_screen_and_the_panels_scroll(
    qtbot: QtBot, window: MainWindow
) -> None:
    # Failed before: once All codes or the Arithmetic view had been shown, the window could
    # not get lower than 574 px (it stayed 800x574 when made 800x500), so on an 800x600
    # screen its status bar hung off the bottom. Now the panel scrolls instead.
    panel = window.formats_panel
    for name in VIEW_NAMES:
        panel.show_view(name)
        QApplication.processEvents()
    window.resize(800, 500)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (800, 500))
    assert window.rect().contains(window.statusBar().geometry())
    qtbot.waitUntil(window.formats_scroll.verticalScrollBar().isVisible)
    # The panel keeps its own minimum inside the scroll area: nothing is squeezed further.
    assert panel.height() >= panel.minimumSizeHint().height()
    window.tabs.setCurrentIndex(1)
    assert (window.width(), window.height()) == (800, 500)
    window.tabs.setCurrentIndex(0)
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1024, 640))
    # As before at 1024x640: nothing scrolls.
    qtbot.waitUntil(lambda: not window.formats_scroll.verticalScrollBar().isVisible())


@pytest.mark.parametrize(
    ("size", "view", "value"),
    [((800, 500), "arithmetic", "0.1"), ((1024, 640), "number-line", "1/3")],
)
def test_the_readouts_get_the_height_their_text_needs(
    qtbot: QtBot, window: MainWindow, size: tuple[int, int], view: str, value: str
) -> None:
    # Failed before (800x500): the splitter gave the read-outs one line per wrapped label,
    # so the format's description ran under "Exact" and the rounding's second line was cut.
    from itertools import combinations

    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtWidgets import QLabel, QLineEdit, QWidget

    from fpexplorer.gui.formats.readouts import ExactValueBox

    panel = window.formats_panel
    panel.show_view(view)
    window.session.enter_text(value)
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    QApplication.processEvents()
    readouts = panel.readouts
    shown = [
        widget
        for widget in readouts.findChildren(QWidget)
        if isinstance(widget, QLabel | QLineEdit | ExactValueBox) and widget.isVisible()
    ]
    assert readouts.error in shown and readouts.title in shown
    rects = {widget: QRect(widget.mapTo(readouts, QPoint(0, 0)), widget.size()) for widget in shown}
    for widget in shown:
        if isinstance(widget, ExactValueBox):
            continue  # it fits itself to up to three lines and scrolls beyond
        needed = (
            widget.heightForWidth(widget.width())
            if widget.hasHeightForWidth()
            else widget.sizeHint().height()
        )
        assert widget.height() >= needed, (widget.text(), widget.height(), needed)
    for first, second in combinations(shown, 2):
        assert not rects[first].intersects(rects[second]), (first, second)
    # A row with spare height keeps its text at the top, level with its name (which is
    # aligned to the top): it sat lower, in the middle of the row, at 1920x1080.
    for label in (readouts.formula, readouts.gaps, readouts.error):
        assert label.alignment() & Qt.AlignmentFlag.AlignTop, label.text()


@pytest.mark.parametrize("height", [640, 480])
def test_number_line_labels_do_not_collide_at_small_heights(
    qtbot: QtBot, window: MainWindow, height: int
) -> None:
    from fpexplorer.gui.formats.number_line import NumberLineView

    panel = window.formats_panel
    panel.show_view("number-line")
    while len(window.session.editors) < 4:
        panel._on_add_clicked()
    window.session.set_format(window.session.editors[0], get_format("fp64"))
    window.session.set_active(window.session.editors[0])
    window.resize(1024, height)
    qtbot.waitUntil(lambda: window.height() == height)
    for text in ("0.1", "2049", "-1e-310"):
        window.session.enter_text(text)
        QApplication.processEvents()
        line = panel.number_line
        assert isinstance(line, NumberLineView)
        labels = [
            item
            for item in [*line.value_labels, *line.pick_labels, line.input_label]
            if item.textItem.toPlainText().strip()
        ]
        rects = [item.sceneBoundingRect() for item in labels]
        for i, first in enumerate(rects):
            for j in range(i + 1, len(rects)):
                assert not first.intersects(rects[j]), (
                    text,
                    labels[i].textItem.toPlainText(),
                    labels[j].textItem.toPlainText(),
                )
        # Rows of the left axis are at least a text line apart.
        view_box = line.plot.vb
        top, bottom = view_box.mapViewToScene(view_box.viewRect().topLeft()), None
        pixels_per_row = abs(
            view_box.mapViewToScene(QPointF(0, 1)).y() - view_box.mapViewToScene(QPointF(0, 0)).y()
        )
        assert pixels_per_row >= line.small_metrics.lineSpacing(), (text, top, bottom)


def _qt_is_loaded(pid: int) -> bool:
    try:
        return "libQt6Widgets" in Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return False


@pytest.mark.slow  # a child process running the app: a second
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see Qt load")
@pytest.mark.parametrize(("signal_name", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_in_the_terminal_quits_the_app(
    tmp_path: Path, signal_name: str, status: int
) -> None:
    import signal
    import time

    # Was: a KeyboardInterrupt traceback from the redraw timer, and the app kept running.
    # SIGTERM (kill, a session ending) was Python's default: the process died at once and
    # the window's state was not saved.
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "FPEXPLORER_SETTINGS_DIR": str(tmp_path),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "gui", "--fresh", "--value", "2.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while not _qt_is_loaded(process.pid) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        time.sleep(1.0)  # into the event loop, the redraw timers running
        process.send_signal(getattr(signal, signal_name))
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    # Nor the offscreen platform's noise.
    assert "propagateSizeHints" not in stderr
    saved = (tmp_path / "fpexplorer.ini").read_text(encoding="utf-8")
    assert "entry=2.5" in saved  # the window closed and saved its state


def test_a_signal_is_handled_while_qt_waits(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from fpexplorer.gui import app as app_module

    quits: list[bool] = []
    monkeypatch.setattr(app_module, "quit_interrupted", lambda: quits.append(True))
    previous = signal.getsignal(signal.SIGINT)
    try:
        app_module.create_application()  # the running app: installs the handler and poll
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt raised here
        qtbot.waitUntil(lambda: quits == [True], timeout=3000)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_known_harmless_qt_messages_are_filtered(capfd: pytest.CaptureFixture[str]) -> None:
    from PySide6.QtCore import qWarning

    from fpexplorer.gui.app import install_message_filter

    install_message_filter()
    qWarning("This plugin does not support propagateSizeHints()")
    qWarning("something the user should see")
    stderr = capfd.readouterr().err
    assert "propagateSizeHints" not in stderr
    assert "something the user should see" in stderr


def test_the_view_menu_lists_every_view_the_panel_registers(window: MainWindow) -> None:
    from fpexplorer.gui.formats.panel import VIEW_NAMES, VIEW_TABS

    view_menu = window.menuBar().actions()[2].menu()
    assert view_menu is not None
    titles = [action.text() for action in view_menu.actions() if action.text()]
    for name, title, _tip in VIEW_TABS:
        assert title in titles
        action = next(a for a in view_menu.actions() if a.text() == title)
        action.trigger()
        assert window.formats_panel.current_view_name() == name
    assert len(VIEW_NAMES) == len(VIEW_TABS)


def test_a_first_window_fits_the_screen(window: MainWindow) -> None:
    from fpexplorer.gui.main_window import DEFAULT_SIZE, default_size

    available = QGuiApplication.primaryScreen().availableGeometry().size()
    size = default_size()
    assert size.width() <= available.width() and size.height() <= available.height()
    assert size == DEFAULT_SIZE.boundedTo(available)
    fresh = MainWindow(SettingsStore(persistent=False), restore=False)
    try:
        assert fresh.size() == size
    finally:
        fresh.close()


def test_copy_on_the_training_tab_never_takes_the_hidden_editors_value(
    window: MainWindow,
) -> None:
    clipboard = QGuiApplication.clipboard()
    clipboard.setText("the user's text")
    window.tabs.setCurrentIndex(1)
    window.training_panel.loss_plot.plot.setFocus()
    # Was: "0", "0x00000000", "0" from the Formats tab's editor, not shown on this tab.
    for action in (
        window.copy_value_action,
        window.copy_code_action,
        window.copy_shortest_action,
    ):
        action.trigger()
        assert clipboard.text() == "the user's text"
        assert window.status.currentMessage().startswith("Nothing copied:")
    window.tabs.setCurrentIndex(0)
    window.copy_code_action.trigger()
    assert clipboard.text() == window.session.active.readout().hex_code


@pytest.mark.slow  # a window started four ways: about a second each
@pytest.mark.parametrize(
    "argv",
    [[], ["gui", "--format", "fp16"], ["--format", "e5m2", "--value", "2"], ["--value", "1/3"]],
)
def test_every_way_of_starting_restores_the_saved_window_onto_the_screen(
    qapp: object, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """The geometry, tab and view of the last session come back whatever the start
    arguments (was: any --format skipped them); one saved off the screen comes back on it."""
    from PySide6.QtWidgets import QApplication

    from fpexplorer.cli import main

    last = MainWindow(SettingsStore())
    last.resize(653, 471)
    last.show()
    last.move(5000, 4000)  # a second monitor since unplugged
    last.tabs.setCurrentIndex(1)
    last.formats_panel.show_view("codes")
    last.close()
    last.deleteLater()
    shown: list[MainWindow] = []

    def check_instead_of_exec() -> int:
        windows = [
            w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
        ]
        shown.extend(windows)
        return 0

    monkeypatch.setattr(QApplication, "exec", staticmethod(check_instead_of_exec))
    assert main(argv) == 0
    [window] = shown
    try:
        assert window.size().toTuple() == (653, 471)
        screen = QGuiApplication.primaryScreen().availableGeometry()
        assert screen.contains(window.frameGeometry()), (screen, window.frameGeometry())
        assert window.formats_panel.current_view_name() == "codes"
        # The tab: the Formats tab where the start arguments load the bit editor.
        start_state = any(option in argv for option in ("--format", "--value"))
        assert window.tabs.currentIndex() == (0 if start_state else 1)
        if "--format" in argv:
            assert window.session.active.format == get_format(argv[argv.index("--format") + 1])
    finally:
        window.close()
        window.deleteLater()


@pytest.mark.parametrize("argv", [["--fresh"], ["gui", "--fresh", "--format", "fp16", "bf16"]])
def test_a_first_window_fits_the_screen_with_its_frame(
    qapp: object, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """A first (or --fresh) window is sized to the screen's free area frame included (was:
    the window itself, so its frame overhung the screen's right and bottom edges)."""
    from PySide6.QtWidgets import QApplication

    from fpexplorer.cli import main

    shown: list[MainWindow] = []

    def check_instead_of_exec() -> int:
        shown.extend(
            w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
        )
        return 0

    monkeypatch.setattr(QApplication, "exec", staticmethod(check_instead_of_exec))
    assert main(argv) == 0
    [window] = shown
    try:
        area = window.screen().availableGeometry()
        frame = window.frameGeometry()
        # The offscreen platform draws a frame: this is the case the test is about.
        assert frame.size() != window.size()
        assert area.contains(frame), (area, frame)
        # Capped only where the screen is smaller: still as large as the screen allows.
        assert frame.width() == min(
            area.width(), DEFAULT_SIZE.width() + frame.width() - window.width()
        )
    finally:
        window.close()
        window.deleteLater()


@pytest.mark.slow  # a child process that starts Qt: about a second
def test_a_fresh_window_on_a_1024x640_screen_keeps_its_frame_on_it(tmp_path: Path) -> None:
    config = tmp_path / "screen.json"
    config.write_text(
        '{"windowFrameMargins": true, "screens": [{"name": "laptop", "x": 0, "y": 0, '
        '"width": 1024, "height": 640, "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}'
    )
    code = (
        "from PySide6.QtWidgets import QApplication\n"
        "from fpexplorer.gui.main_window import MainWindow\n"
        "from fpexplorer.gui.settings import SettingsStore\n"
        "app = QApplication([])\n"
        "w = MainWindow(SettingsStore(persistent=False), restore=False)\n"
        "w.show(); app.processEvents()\n"
        "area, frame = w.screen().availableGeometry(), w.frameGeometry()\n"
        "print('AREA', area.getRect(), 'FRAME', frame.getRect(), 'WINDOW', w.size().toTuple())\n"
        "w.close()\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}
    result = run_python("-c", code, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "AREA (0, 0, 1024, 640)" in result.stdout, result.stdout
    frame_text = result.stdout.split("FRAME ")[1].split(" WINDOW")[0]
    x, y, width, height = (int(part) for part in frame_text.strip("()").split(", "))
    assert x >= 0 and y >= 0 and x + width <= 1024 and y + height <= 640, result.stdout
    assert (width, height) == (1024, 640), result.stdout  # all of the screen, no more


def test_a_window_saved_maximized_comes_back_maximized(qtbot: QtBot) -> None:
    """Bringing a restored window onto the screen leaves a maximized one alone: the window
    system places it (was: moved by a pixel of its frame, and so no longer maximized)."""
    last = MainWindow(SettingsStore())
    qtbot.addWidget(last)
    last.showMaximized()
    qtbot.waitUntil(last.isMaximized)
    last.close()
    window = MainWindow(SettingsStore())
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.isMaximized()


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("view", ["number-line", "codes", "block", "arithmetic"])
def test_the_editors_pane_shows_whole_editors_and_the_panel_scrolls_instead(
    qtbot: QtBot, window: MainWindow, count: int, view: str
) -> None:
    # Failed before: at 800x500 the splitter gave the editors' pane 80 px (its minimum),
    # so the second editor showed its top 4 px (19 px with the number line); at 1024x640
    # with All codes, 47 to 61 px of it. Now the pane shows whole editors only (two where
    # the views leave room, else one) and scrolls to the others; the panel scrolls in the
    # window where even one editor does not fit.
    from PySide6.QtCore import QPoint, QRect

    from fpexplorer.gui.formats.panel import EDITORS_SHOWN_AT_LEAST

    panel = window.formats_panel
    while len(window.session.editors) < count:
        panel._on_add_clicked()
    while len(window.session.editors) > count:
        window.session.remove_editor(window.session.editors[-1])
    for size in ((1024, 640), (800, 500)):
        panel.show_view("number-line")
        window.resize(*size)
        qtbot.waitUntil(lambda size=size: (window.width(), window.height()) == size)
        for _ in range(3):
            QApplication.processEvents()
        # A view chosen once the window is laid out (its minimum differs: the block
        # editor's took 7 px more of the second editor at 1024x640) refits the pane.
        panel.show_view(view)
        # The panel is never squeezed below what it needs: the window's scroll area scrolls.
        qtbot.waitUntil(lambda: panel.height() >= panel.minimumSizeHint().height())
        for _ in range(3):
            QApplication.processEvents()
        viewport = panel.top_scroll.viewport()
        shown = []
        for row in panel.rows:
            rect = QRect(row.mapTo(viewport, QPoint(0, 0)), row.size())
            seen = rect.intersected(viewport.rect()).height()
            assert seen in (0, rect.height()), (size, panel.rows.index(row), seen, rect)
            shown.append(seen > 0)
        assert shown[0], size
        if (size, view) == ((1024, 640), "number-line"):  # room for the two compared
            assert shown[:EDITORS_SHOWN_AT_LEAST] == [True] * EDITORS_SHOWN_AT_LEAST, shown


@pytest.mark.parametrize(
    ("name", "value"),
    [("fp64", "-2.2250738585072014e-308"), ("e16m47", "-1e-9800"), ("fp64", "-1/3")],
)
def test_the_shortest_and_scientific_fields_show_their_whole_text_at_1024x640(
    qtbot: QtBot, window: MainWindow, name: str, value: str
) -> None:
    """At 1024x640 FP64's smallest normal read "-2.2250738585072014e-3" in the Shortest
    round-trip field (its exponent cut: e-3 for e-308), e16m47's -1e-9800 "…e-980" in the
    Scientific one. Each field is as wide as its text; the window still fits 1024 px."""
    panel = window.formats_panel
    window.session.set_format(window.session.active, get_format(name))
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1024, 640))
    window.session.enter_text(value)
    qtbot.wait(10)
    for field in (panel.readouts.shortest, panel.readouts.scientific):
        text = field.text()
        # QLineEdit draws its text 2 px inside its contents on each side.
        room = field.contentsRect().width() - 4
        assert field.fontMetrics().horizontalAdvance(text) <= room, (text, room)
    assert window.width() == 1024 and window.minimumSizeHint().width() <= 1024
