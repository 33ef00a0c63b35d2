"""The main window: Formats and Training tabs, menus, status bar, kept geometry and state."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fpexplorer import __version__
from fpexplorer.gui.file_drops import local_paths, taker_at, watch_file_drops
from fpexplorer.gui.formats.bit_row import (
    COPY_BITS_SHORTCUT,
    COPY_CODE_SHORTCUT,
    bits_to_copy,
)
from fpexplorer.gui.formats.clipboard import selected_cells_text
from fpexplorer.gui.formats.panel import VIEW_NAMES, VIEW_TABS, FormatsPanel
from fpexplorer.gui.formats.state import FormatsSession
from fpexplorer.gui.settings import SettingsStore

STATE_PREFIX = "formats/"
# Files that are used somewhere, not opened as runs: where a drop of one goes.
DROP_PLACES = {
    ".py": "a task file (.py) on the Training form's Task field to train with it",
    ".npy": "a tensor (.npy) on the block editor (View ▸ Block editor) to quantize it",
}
TRAINING_PANEL_DELAY_MS = 300  # after the first paint of the window
SHORTCUTS_HELP = """<table cellspacing="0" cellpadding="3">
<tr><td><b>Click / drag</b></td><td>toggle a bit / paint several bits</td></tr>
<tr><td><b>← →</b></td><td>move between bits (click the bit row first)</td></tr>
<tr><td><b>Space, Enter</b></td><td>toggle the bit under the cursor</td></tr>
<tr><td><b>0, 1</b></td><td>set the bit and move right</td></tr>
<tr><td><b>↑ ↓</b></td><td>next value up / down (in the bits; Alt+↑/↓ anywhere)</td></tr>
<tr><td><b>Alt+Shift+↑/↓, Alt+→/←</b></td><td>exponent / fraction field ± 1</td></tr>
<tr><td><b>Ctrl+L</b></td><td>type a value or a code</td></tr>
<tr><td><b>Enter, Escape</b></td><td>in the value field: apply it / put back the last one</td></tr>
<tr><td><b>Tab</b></td><td>value field, pickers, then each editor's picker, buttons, bits</td></tr>
<tr><td><b>Ctrl+C</b></td><td>copy the exact value (in a table: its selected rows;
in a text field: its selected text)</td></tr>
<tr><td><b>Ctrl+Shift+C</b></td><td>copy the code (hex)</td></tr>
<tr><td><b>Ctrl+Alt+C</b></td><td>copy the shortest decimal that reads back</td></tr>
<tr><td><b>Ctrl+Shift+B</b></td><td>copy the bits, sign|exponent|fraction (right-click the
bits: bits or hex)</td></tr>
<tr><td><b>Ctrl+Shift+A</b></td><td>add a format to the stack</td></tr>
<tr><td><b>Ctrl+Shift+F</b></td><td>custom format…</td></tr>
<tr><td><b>Ctrl+1, Ctrl+2</b></td><td>Formats / Training tab</td></tr>
<tr><td><b>Ctrl+O</b></td><td>open a run log (Training tab)</td></tr>
<tr><td><b>F1</b></td><td>this list</td></tr>
<tr><td><b>Ctrl+Q</b></td><td>quit</td></tr>
</table>"""


DEFAULT_SIZE = QSize(1280, 800)


def default_size() -> QSize:
    """1280x800, or the screen's free area when it is smaller (a 1024x640 laptop screen):
    a first window never opens larger than the screen it is on."""
    screen = QGuiApplication.primaryScreen()
    if screen is None:
        return DEFAULT_SIZE
    return DEFAULT_SIZE.boundedTo(screen.availableGeometry().size())


def _scroll_area(page: QWidget, *, tab_background: bool) -> QScrollArea:
    """`page` filling the area, scrolled only when the area is smaller than its minimum."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab goes through the page, not to it
    area.setWidget(page)
    if tab_background:
        # The tab's own background shows through, as when the page was the tab itself
        # (setWidget turns the page's fill on; the viewport fills with the window colour).
        page.setAutoFillBackground(False)
        area.viewport().setAutoFillBackground(False)
    return area


def _training_panel() -> tuple[QWidget, str | None]:
    """The Training panel, or an explanation of why it is not available."""
    try:
        from fpexplorer.gui.training.panel import TrainingPanel
    except ImportError as error:
        placeholder = QLabel(
            "<h3>Training panel not available</h3>"
            "<p>This panel runs a mixed-precision training job and shows its loss scale, "
            "skipped steps and gradient ranges live. It could not be loaded:</p>"
            f"<pre>{error}</pre>"
        )
        placeholder.setWordWrap(True)
        placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        return placeholder, str(error)
    return TrainingPanel(), None


class MainWindow(QMainWindow):
    """fpexplorer's window. `settings` keeps geometry and the Formats state between runs."""

    def __init__(
        self,
        settings: SettingsStore | None = None,
        *,
        restore: bool = True,
        restore_formats: bool = True,
        session: FormatsSession | None = None,
    ) -> None:
        """`restore`: the last session's window (geometry, tab, view) and, unless
        `restore_formats` is false (the start arguments choose them), its formats."""
        super().__init__()
        self._bring_onto_screen_when_shown = False
        self.settings = settings or SettingsStore(persistent=False)
        self.setWindowTitle("fpexplorer")
        self.setObjectName("MainWindow")
        self.formats_panel = FormatsPanel(session)
        # The Training panel is built just after the first window is painted (or when it
        # is first needed), so that it does not delay the first window.
        self._training_panel: QWidget | None = None
        self.training_problem: str | None = None
        self.training_page = QWidget()
        training_layout = QVBoxLayout(self.training_page)
        training_layout.setContentsMargins(0, 0, 0, 0)
        self.tabs = QTabWidget()
        # Both panels scroll rather than make the window larger than a small screen: the
        # Formats panel's minimum grows with the views shown (574 px high after All codes),
        # and a window that cannot be made smaller hangs off an 800x600 screen.
        self.formats_scroll = _scroll_area(self.formats_panel, tab_background=True)
        self.tabs.addTab(self.formats_scroll, "Formats")
        self.training_scroll = _scroll_area(self.training_page, tab_background=False)
        self.tabs.addTab(self.training_scroll, "Training")
        self.tabs.setTabToolTip(0, "Bit editor: any format, exact values, rounding")
        self.tabs.setTabToolTip(1, "Mixed-precision training numerics, live or replayed")
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        self.setCentralWidget(self.tabs)
        self.setAcceptDrops(True)
        self.resize(default_size())
        # A window still at this size when first shown is capped, frame included, to the
        # screen's free area then (the frame is known only once shown): see showEvent.
        self._first_size: QSize | None = self.size()
        self._build_menus()
        self.status = self.statusBar()
        self.session.changed.connect(self._on_session_changed)
        self.session.entry_changed.connect(self._on_session_changed)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._on_app_focus_changed)
            # A file dropped on a text field opens as on the window, never pastes its path.
            watch_file_drops(self)
        restore_problems = self._restore(restore_formats) if restore else []
        problem = self.settings.problem()
        if problem:
            self.status.showMessage(problem)
        elif restore_problems:
            self.status.showMessage("Could not restore: " + "; ".join(restore_problems))
        else:
            self.status.showMessage("Click bits, or type a value above (Ctrl+L).", 8000)

    @property
    def session(self) -> FormatsSession:
        return self.formats_panel.session

    @property
    def training_panel(self) -> QWidget:
        """The TrainingPanel (built on first use), or a placeholder that says what failed."""
        if self._training_panel is None:
            panel, self.training_problem = _training_panel()
            self._training_panel = panel
            layout = self.training_page.layout()
            assert layout is not None  # set in __init__
            layout.addWidget(panel)
            file_actions = getattr(panel, "file_actions", None)
            if callable(file_actions):
                actions = file_actions()
                for action in actions:
                    self.file_menu.insertAction(self.quit_action, action)
                    # They act on the Training tab: File > Open Run... from the Formats tab
                    # loaded the run where nobody could see it.
                    action.triggered.connect(self._on_training_action_triggered)
                if actions:
                    self.file_menu.insertSeparator(self.quit_action)
            if self.training_problem:
                self.status.showMessage(f"Training panel unavailable: {self.training_problem}")
        return self._training_panel

    def _on_training_action_triggered(self) -> None:
        self.tabs.setCurrentIndex(1)

    # -- run logs dropped on the window ---------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.drop_files(paths, self.childAt(event.position().toPoint()))

    def drop_files(self, paths: list[str], at: QWidget | None) -> None:
        """Files dropped on `at` (a field, or the widget under a drop on the window): where
        it or a widget it is in uses them (a .py on the Training form's Task field, a .npy
        on the block editor), they go there; elsewhere a task file or a tensor is not
        opened as a run but the status bar says where it goes; other files or run folders
        open as File > Open Run... opens them (the Training panel says what is not a run
        log)."""
        taker = taker_at(at)
        if taker is not None and taker.take_dropped_files(paths):
            return
        elsewhere = [path for path in paths if Path(path).suffix.lower() in DROP_PLACES]
        paths = [path for path in paths if path not in elsewhere]
        if paths:
            self.tabs.setCurrentIndex(1)
        if elsewhere:
            names = ", ".join(Path(path).name for path in elsewhere)
            places = dict.fromkeys(DROP_PLACES[Path(path).suffix.lower()] for path in elsewhere)
            self.status.showMessage(f"{names}: not a run; drop " + "; ".join(places), 15000)
        if not paths:
            return
        load_run = getattr(self.training_panel, "load_run", None)
        if callable(load_run):
            for path in paths:
                load_run(path, in_background=True)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        first_size, self._first_size = self._first_size, None
        if self._bring_onto_screen_when_shown or self.size() == first_size:
            # Once shown: only then is the frame around the window known (default_size
            # capped the window alone to the screen, and its frame overhung the edges).
            self._bring_onto_screen_when_shown = False
            self._bring_onto_screen()
        if self._training_panel is None:
            QTimer.singleShot(TRAINING_PANEL_DELAY_MS, self, self._on_training_timer_timeout)

    def _on_training_timer_timeout(self) -> None:
        if self.isVisible():
            self.training_panel  # noqa: B018 - builds it

    def _on_tabs_current_changed(self, index: int) -> None:
        self.status.clearMessage()  # hints of one tab do not belong on the other
        if index == 1:
            self.training_panel  # noqa: B018 - builds it

    def _on_app_focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        if isinstance(new, QLineEdit) and self.formats_panel.isAncestorOf(new):
            new.installEventFilter(self)  # once per field: Qt keeps one entry per filter

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Ctrl+C in a text field of the Formats panel with nothing selected is Copy Value.

        A line edit claims Ctrl+C whether or not text is selected, so after typing a value
        and Enter, Ctrl+C copied nothing at all. Left unclaimed here, the window's Copy
        Value shortcut takes it; with a selection the field copies the selection."""
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and isinstance(watched, QLineEdit)
            and isinstance(event, QKeyEvent)
            and event.matches(QKeySequence.StandardKey.Copy)
            and not watched.hasSelectedText()
        ):
            return True
        return super().eventFilter(watched, event)

    # -- menus ---------------------------------------------------------------------------
    def _action(
        self,
        text: str,
        slot: object,
        shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
        tip: str = "",
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        return action

    def _build_menus(self) -> None:
        menu_bar = self.menuBar()
        file_menu = menu_bar.addMenu("&File")
        self.file_menu = file_menu
        # Opening the File menu builds the Training panel, whose actions it lists.
        file_menu.aboutToShow.connect(lambda: self.training_panel)
        self.quit_action = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.quit_action.setShortcut(QKeySequence("Ctrl+Q"))
        file_menu.addAction(self.quit_action)

        edit_menu = menu_bar.addMenu("&Edit")
        self.copy_value_action = self._action(
            "&Copy Value",
            self.copy_value,
            QKeySequence.StandardKey.Copy,
            "Copy the exact decimal value of the active editor's code",
        )
        self.copy_code_action = self._action(
            "Copy C&ode",
            self.copy_code,
            COPY_CODE_SHORTCUT,
            "Copy the code in hexadecimal",
        )
        self.copy_shortest_action = self._action(
            "Copy &Shortest Decimal",
            self.copy_shortest,
            "Ctrl+Alt+C",
            "Copy the shortest decimal that reads back to this code",
        )
        self.copy_bits_action = self._action(
            "Copy &Bits",
            self.copy_bits,
            COPY_BITS_SHORTCUT,
            "Copy the code in binary, grouped sign|exponent|fraction as shown",
        )
        self.focus_entry_action = self._action(
            "&Type a Value…",
            self._on_focus_entry,
            "Ctrl+L",
            "Type a value or a code",
        )
        for action in (
            self.copy_value_action,
            self.copy_code_action,
            self.copy_shortest_action,
            self.copy_bits_action,
            self.focus_entry_action,
        ):
            edit_menu.addAction(action)
        edit_menu.addSeparator()
        self.step_actions: dict[str, QAction] = {}
        for how, text, key in (
            ("up", "Next Value &Up", "Alt+Up"),
            ("down", "Next Value &Down", "Alt+Down"),
            ("exponent+", "Exponent Field +1", "Alt+Shift+Up"),
            ("exponent-", "Exponent Field −1", "Alt+Shift+Down"),
            ("fraction+", "Fraction Field +1", "Alt+Right"),
            ("fraction-", "Fraction Field −1", "Alt+Left"),
        ):
            action = self._action(text, lambda _=False, h=how: self._step(h), key)
            edit_menu.addAction(action)
            self.step_actions[how] = action

        view_menu = menu_bar.addMenu("&View")
        view_menu.addAction(
            self._action("&Formats", lambda: self.tabs.setCurrentIndex(0), "Ctrl+1")
        )
        view_menu.addAction(
            self._action("&Training", lambda: self.tabs.setCurrentIndex(1), "Ctrl+2")
        )
        view_menu.addSeparator()
        view_menu.addAction(
            self._action("&Add Format to Stack", self.formats_panel._on_add_clicked, "Ctrl+Shift+A")
        )
        view_menu.addAction(
            self._action(
                "&Custom Format…",
                lambda: self.formats_panel.open_custom_format_dialog(self.session.active),
                "Ctrl+Shift+F",
            )
        )
        view_menu.addSeparator()
        # One entry per view the panel registers (its one table of views).
        for name, title, _tip in VIEW_TABS:
            view_menu.addAction(self._action(title, lambda _=False, n=name: self._show_view(n)))

        help_menu = menu_bar.addMenu("&Help")
        help_menu.addAction(self._action("&Keyboard Shortcuts", self._on_shortcuts_help, "F1"))
        help_menu.addAction(self._action("&About fpexplorer", self._on_about))

    # -- actions -------------------------------------------------------------------------
    def _copy(self, text: str, what: str) -> None:
        QGuiApplication.clipboard().setText(text)
        shown = text if len(text) <= 60 else text[:57] + "…"
        self.status.showMessage(f"Copied {what}: {shown}", 5000)

    def copy_value(self) -> None:
        cells = selected_cells_text(QApplication.focusWidget())
        if cells is not None:
            # Ctrl+C in a table copies what is selected there, not the editor's value (a
            # row of the All formats table or the block editor's was silently replaced by
            # the active editor's number).
            self._copy(cells, "the selected cells")
            return
        if self._editor_shown():
            self._copy(self.session.active.readout().exact, "exact value")

    def copy_code(self) -> None:
        if self._editor_shown():
            self._copy(self.session.active.readout().hex_code, "code")

    def copy_bits(self) -> None:
        if self._editor_shown():
            active = self.session.active
            self._copy(bits_to_copy(active.format, active.code), "bits")

    def copy_shortest(self) -> None:
        if self._editor_shown():
            self._copy(self.session.active.readout().shortest, "shortest decimal")

    def _editor_shown(self) -> bool:
        """The Formats tab is shown; else says why nothing is copied. On the Training tab
        Ctrl+C on a plot put the hidden Formats editor's value on the clipboard, replacing
        what the user had there with a number they could not see."""
        if self.tabs.currentIndex() == 0:
            return True
        self.status.showMessage(
            "Nothing copied: the copy commands take the Formats tab's editor "
            "(or a table's selected cells).",
            5000,
        )
        return False

    def _step(self, how: str) -> None:
        self.tabs.setCurrentIndex(0)
        self.session.step(self.session.active, how)

    def _on_focus_entry(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.formats_panel.entry.field.setFocus()
        self.formats_panel.entry.field.selectAll()

    def _show_view(self, name: str) -> None:
        self.tabs.setCurrentIndex(0)
        self.formats_panel.show_view(name)

    def _on_shortcuts_help(self) -> None:
        self.shortcuts_box().exec()

    def shortcuts_box(self) -> QMessageBox:
        """F1's list. Its text is made wide enough that most rows take one line: a message
        box of Qt's own width wrapped them to 668 px of height, taller than a 640 px screen."""
        box = QMessageBox(QMessageBox.Icon.Information, "Keyboard shortcuts", SHORTCUTS_HELP,
                          QMessageBox.StandardButton.Ok, self)  # fmt: skip
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setStyleSheet("QLabel#qt_msgbox_label { min-width: 40em; }")
        return box

    def _on_about(self) -> None:
        QMessageBox.about(
            self,
            "About fpexplorer",
            f"<h3>fpexplorer {__version__}</h3><p>Explore floating-point formats bit by bit "
            "(FP64 to FP4, E8M0, custom eXmY) with exact values and every rounding mode, and "
            "watch mixed-precision training numerics live.</p>",
        )

    def _on_session_changed(self) -> None:
        problem = self.session.active.problem
        if problem:
            self.status.showMessage(problem, 5000)

    # -- state kept between runs ---------------------------------------------------------
    def _restore(self, formats: bool = True) -> list[str]:
        geometry = self.settings.value("window/geometry")
        if isinstance(geometry, QByteArray | bytes):
            self.restoreGeometry(QByteArray(geometry))
            self._bring_onto_screen_when_shown = True
        tab = self.settings.text("window/tab", "0")
        if tab in ("0", "1"):
            self.tabs.setCurrentIndex(int(tab))
        view = self.settings.text("formats/view", "")
        if view in VIEW_NAMES:
            self.formats_panel.show_view(view)
        saved: dict[str, object] = {}
        for key in ("formats", "codes", "custom", "custom_names"):
            values = self.settings.text_list(STATE_PREFIX + key)
            if values:
                saved[key] = values
        for key in ("active", "entry", "typed", "rounding", "overflow", "linked"):
            value = self.settings.value(STATE_PREFIX + key)
            if value is not None:
                saved[key] = value
        if not formats or not saved.get("formats"):
            return []
        return self.session.restore(saved)

    def _bring_onto_screen(self) -> None:
        """Move (and if need be shrink) the window so that all of it, frame included, is
        on its screen's free area: a geometry saved on a monitor since unplugged or on a
        larger screen. Qt's restoreGeometry brings it back only nearly: its frame was
        left a pixel past the screen's right and bottom edges."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None or self.isMaximized() or self.isFullScreen():
            return  # the window system places those; a move would un-maximize it
        area = screen.availableGeometry()
        frame = self.frameGeometry()
        border = frame.size() - self.size()
        size = self.size().boundedTo(area.size() - border)
        if size != self.size():
            self.resize(size)
            frame = self.frameGeometry()
        x = min(max(frame.left(), area.left()), area.left() + area.width() - frame.width())
        y = min(max(frame.top(), area.top()), area.top() + area.height() - frame.height())
        if (x, y) != (frame.left(), frame.top()):
            self.move(x, y)  # a window's position is its frame's

    def save_state(self) -> str | None:
        """Write geometry and the Formats state; returns a problem sentence or None."""
        self.settings.set_value("window/geometry", self.saveGeometry())
        self.settings.set_value("window/tab", str(self.tabs.currentIndex()))
        self.settings.set_value("formats/view", self.formats_panel.current_view_name())
        for key, value in self.session.snapshot().items():
            self.settings.set_value(STATE_PREFIX + key, value)
        return self.settings.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        problem = self.save_state()
        if problem:
            self.status.showMessage(problem)
        shutdown = getattr(self._training_panel, "shutdown", None)
        if callable(shutdown):
            shutdown()
        super().closeEvent(event)
