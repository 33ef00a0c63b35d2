"""The Formats panel: entry line, stacked bit editors, read-outs and the explaining views."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import FloatFormat, get_format
from fpexplorer.gui.formats.editor_row import EditorRow
from fpexplorer.gui.formats.entry_bar import EntryBar
from fpexplorer.gui.formats.plotting import LazyView
from fpexplorer.gui.formats.readouts import ReadoutPanel
from fpexplorer.gui.formats.state import EditorState, FormatsSession

if TYPE_CHECKING:
    from fpexplorer.gui.formats.codes_map import CodesMap
    from fpexplorer.gui.formats.number_line import NumberLineView
    from fpexplorer.gui.formats.range_chart import RangeChart
    from fpexplorer.gui.formats.tables import CrossFormatTable, PropertiesTable

# Suggested formats for "+ Add format", in order, skipping those already stacked.
ADD_ORDER = (
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float64",
    "float32",
    "float6_e2m3fn",
    "float4_e2m1fn",
)
VIEWS_MIN_HEIGHT = 290  # number line, tables and charts stay readable
EDITORS_MIN_HEIGHT = 80  # the pane's least height before its editors are built
# Editors the pane shows whole however short the window (more scroll): two are compared.
EDITORS_SHOWN_AT_LEAST = 2


@dataclass(frozen=True, slots=True)
class ViewEntry:
    """One view under the editors: its tab, and the module and class that build it (imported
    when the view is first shown, for start-up time)."""

    name: str  # what settings, `screenshot --view` and the View menu call it
    title: str  # tab and menu text ("&&" is a literal "&")
    tip: str
    module: str
    class_name: str


# The one table of views: adding a view is one entry here.
VIEWS = (
    ViewEntry(
        "number-line",
        "Number line",
        "Neighbours, midpoints and where each rounding mode sends the typed value",
        "fpexplorer.gui.formats.number_line",
        "NumberLineView",
    ),
    ViewEntry(
        "table",
        "All formats",
        "The value rounded into every format; click a row to load it",
        "fpexplorer.gui.formats.tables",
        "CrossFormatTable",
    ),
    ViewEntry(
        "range",
        "Range && precision",
        "Subnormal/normal range, overflow and relative spacing on a log2 axis",
        "fpexplorer.gui.formats.range_chart",
        "RangeChart",
    ),
    ViewEntry(
        "codes",
        "All codes",
        "Every code of a format of ≤ 16 bits; click a cell to load it",
        "fpexplorer.gui.formats.codes_map",
        "CodesMap",
    ),
    ViewEntry(
        "properties",
        "Properties",
        "Max, min normal, min subnormal, eps, digits, finite-value count",
        "fpexplorer.gui.formats.tables",
        "PropertiesTable",
    ),
    ViewEntry(
        "block",
        "Block editor",
        "One block of an MX or NVFP4 format: drag its values, toggle its scale's bits",
        "fpexplorer.gui.formats.block_view",
        "BlockEditorView",
    ),
    ViewEntry(
        "arithmetic",
        "Arithmetic",
        "a op b in the active editor's format: the exact result, every rounding mode, flags",
        "fpexplorer.gui.formats.arith_view",
        "ArithmeticView",
    ),
)
VIEW_TABS = tuple((view.name, view.title, view.tip) for view in VIEWS)
VIEW_NAMES = tuple(view.name for view in VIEWS)
VIEW_CLASSES: dict[str, tuple[str, str]] = {
    view.name: (view.module, view.class_name) for view in VIEWS
}


class FormatsPanel(QWidget):
    """Everything of the bit editor; the session is its one model."""

    def __init__(
        self, session: FormatsSession | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.session = session or FormatsSession(
            [get_format("float32"), get_format("float16"), get_format("bfloat16")]
        )
        self.entry = EntryBar(self.session)
        self.rows: list[EditorRow] = []
        self.stack = QWidget()
        self.stack_layout = QVBoxLayout(self.stack)
        self.stack_layout.setContentsMargins(4, 2, 4, 2)
        self.stack_layout.setSpacing(4)
        self.readouts = ReadoutPanel(self.session)
        self.readouts.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        # The views under the editors are built when first shown: only the visible one
        # costs anything at start-up.
        self.views = QTabWidget()
        self.views.setDocumentMode(True)
        self._views: dict[str, LazyView] = {}
        self._pages: dict[str, QWidget] = {}
        for name, title, tip in VIEW_TABS:
            page = QWidget()
            page_layout = QVBoxLayout(page)
            page_layout.setContentsMargins(0, 0, 0, 0)
            index = self.views.addTab(page, title)
            self.views.setTabToolTip(index, tip)
            self._pages[name] = page
        self.views.currentChanged.connect(self._on_views_current_changed)
        self._on_views_current_changed(self.views.currentIndex())

        # The editors scroll when a small window cannot hold them all; the read-outs of the
        # active editor sit below them in a pane of their own, so they never scroll out of
        # view (with four editors at 1024x640 they used to).
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.setSpacing(2)
        top_layout.addWidget(self.stack)
        top_layout.addStretch(1)
        self.top_scroll = QScrollArea()
        self.top_scroll.setWidgetResizable(True)
        self.top_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.top_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.top_scroll.setWidget(top)
        self.top_scroll.setMinimumHeight(EDITORS_MIN_HEIGHT)  # then one editor: _fit_stack
        self.top_content = top
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.top_scroll)
        self.splitter.addWidget(self.readouts)
        self.splitter.addWidget(self.views)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 0)
        self.splitter.setStretchFactor(2, 2)
        self.splitter.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.entry)
        layout.addWidget(self.splitter, 1)

        self.entry.add_button.clicked.connect(self._on_add_clicked)
        self.session.editors_changed.connect(self._rebuild_rows)
        self.session.changed.connect(self._on_session_changed)
        self._rebuild_rows()

    # -- public --------------------------------------------------------------------------
    def view(self, name: str) -> LazyView:
        """The view called `name` (see VIEW_NAMES), built on first use."""
        view = self._views.get(name)
        if view is None:
            module_name, class_name = VIEW_CLASSES[name]
            view_class = getattr(importlib.import_module(module_name), class_name)
            view = view_class(self.session)
            page_layout = self._pages[name].layout()
            assert page_layout is not None  # set when the page was made
            page_layout.addWidget(view)
            self._views[name] = view
        return view

    @property
    def number_line(self) -> NumberLineView:
        return self.view("number-line")  # type: ignore[return-value]

    @property
    def cross_table(self) -> CrossFormatTable:
        return self.view("table")  # type: ignore[return-value]

    @property
    def range_chart(self) -> RangeChart:
        return self.view("range")  # type: ignore[return-value]

    @property
    def codes_map(self) -> CodesMap:
        return self.view("codes")  # type: ignore[return-value]

    @property
    def properties(self) -> PropertiesTable:
        return self.view("properties")  # type: ignore[return-value]

    def show_view(self, name: str) -> None:
        self.view(name)
        self.views.setCurrentWidget(self._pages[name])

    def current_view_name(self) -> str:
        for name, page in self._pages.items():
            if self.views.currentWidget() is page:
                return name
        return VIEW_NAMES[0]

    def refresh_all_views(self) -> None:
        """Render every view now, visible or not (the benchmark times this)."""
        for name in VIEW_NAMES:
            self.view(name).refresh_now()

    def _on_views_current_changed(self, index: int) -> None:
        if 0 <= index < len(VIEW_TABS):
            self.view(VIEW_TABS[index][0])

    def use_custom_format(self, editor: EditorState, fmt: FloatFormat) -> None:
        self.session.add_custom_format(fmt)
        self.session.set_format(editor, fmt)

    def open_custom_format_dialog(self, editor: EditorState) -> None:
        from fpexplorer.gui.formats.custom_format import CustomFormatDialog

        dialog = CustomFormatDialog(self, start=editor.format)
        if dialog.exec() == CustomFormatDialog.DialogCode.Accepted:
            fmt = dialog.chosen_format()
            if fmt is not None:
                self.use_custom_format(editor, fmt)
        else:
            self.rows[self.session.editors.index(editor)].refresh()

    def row_of(self, editor: EditorState) -> EditorRow:
        return self.rows[self.session.editors.index(editor)]

    # -- slots ---------------------------------------------------------------------------
    def _on_add_clicked(self) -> None:
        stacked = {editor.format for editor in self.session.editors}
        for name in ADD_ORDER:
            try:
                fmt = get_format(name)
            except ValueError:
                continue
            if fmt not in stacked:
                break
        else:
            fmt = self.session.active.format
        self.session.add_editor(fmt)

    def _on_session_changed(self) -> None:
        active = self.session.active
        for row in self.rows:
            row.set_active(row.editor is active)
        sizes = self.splitter.sizes()
        if sizes and self.readouts.sizeHint().height() != sizes[1]:
            self._fit_stack()  # e.g. a long exact value needs another line

    def _rebuild_rows(self) -> None:
        wanted = self.session.editors
        if [row.editor for row in self.rows] == wanted:
            return
        kept = {row.editor: row for row in self.rows}
        for row in self.rows:
            if row.editor not in wanted:
                row.detach()
                row.setParent(None)
                row.deleteLater()
        self.rows = []
        for index, editor in enumerate(wanted):
            existing = kept.get(editor)
            if existing is None:
                row = EditorRow(self.session, editor)
                row.custom_requested.connect(self.open_custom_format_dialog)
            else:
                row = existing
            self.stack_layout.insertWidget(index, row)
            self.rows.append(row)
        for row in self.rows:
            row.set_removable(len(self.rows) > 1)
        # Rows are built after the read-outs and views, so Qt's default (creation) order
        # sent Tab from "+ Add format" past the editors to the read-outs and the views and
        # only then to the editors; chain them where they sit, under the entry bar.
        previous: QWidget = self.entry.add_button
        for row in self.rows:
            for widget in row.focus_chain():
                QWidget.setTabOrder(previous, widget)
                previous = widget
        self._fit_stack()
        self._on_session_changed()

    def _fit_stack(self) -> None:
        """The read-outs get the height they need, the editors theirs as far as the views
        keep VIEWS_MIN_HEIGHT, the views the rest. The editors' pane shows whole editors
        only: where they do not all fit it scrolls, and the next one starts at its edge."""
        # Its least height is one whole editor: at 80 px it showed one and the top 4 px of
        # the next (800x500); smaller windows scroll the whole panel.
        least = self._editors_height(1) if self.rows else EDITORS_MIN_HEIGHT
        if self.top_scroll.minimumHeight() != least:
            self.top_scroll.setMinimumHeight(least)
        total = sum(self.splitter.sizes()) or self.splitter.height()
        if total <= 0:
            return
        readouts = self.readouts.sizeHint().height()
        # At the width the editors have: a summary that wraps makes the size hint measure
        # it at a default width (202 px for an editor 70 px tall at 1920 px).
        width = self.top_scroll.viewport().width()
        content = self.top_content
        height = content.heightForWidth(width) if content.hasHeightForWidth() and width > 0 else -1
        wanted = (height if height > 0 else content.sizeHint().height()) + 2
        room = total - readouts - VIEWS_MIN_HEIGHT
        # The most the splitter gives the pane while the view keeps its own minimum (All
        # codes needs 238 px): more, and it cut the last editor shown (61 px of the second
        # at 1024x640).
        most = total - readouts - self.views.minimumSizeHint().height()
        if wanted <= min(room, most):
            editors = wanted
        else:
            # The pane scrolls: it shows whole editors, at least EDITORS_SHOWN_AT_LEAST where
            # they fit (at 1024x640 it showed one and a few pixels of the next, read as a
            # squeezed editor).
            count = min(EDITORS_SHOWN_AT_LEAST, len(self.rows))
            while count < len(self.rows) and self._editors_height(count + 1) <= room:
                count += 1
            while count > 1 and self._editors_height(count) > most:
                count -= 1
            editors = max(self._editors_height(count), least)
        self.splitter.setSizes([editors, readouts, max(total - editors - readouts, 0)])

    def _editors_height(self, count: int) -> int:
        """Pixels of the editors' pane that show its first `count` editors whole, at their
        minimum heights (as they lie when the pane scrolls), up to the next one's top."""
        heights = [
            row.minimumSizeHint().expandedTo(row.minimumSize()).height()
            for row in self.rows[:count]
        ]
        spacing = self.stack_layout.spacing() * max(len(heights) - 1, 0)
        return self.stack_layout.contentsMargins().top() + sum(heights) + spacing

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_stack()
