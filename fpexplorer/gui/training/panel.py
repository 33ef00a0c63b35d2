"""The training panel: configure an AMP job, run it in a child process, watch its numerics.

Data flow (docs/ARCHITECTURE.md): form -> TrainConfig -> TrainingJob (QProcess running
`fpexplorer train --stream ... --out RUN.jsonl`) -> records -> RunModel (numpy buffers,
bounded) -> one QTimer (<= 30 fps) -> plots updated in place. Replayed run files go
through the same RunModel. The GUI process never imports torch.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QFont, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.gui.training.code_snippet import pytorch_code
from fpexplorer.gui.training.export import PlotCaption, export_plot, write_scalars_csv
from fpexplorer.gui.training.form import TrainForm
from fpexplorer.gui.training.job import PAUSE_SUPPORTED, TrainingJob
from fpexplorer.gui.training.job_state import JobState
from fpexplorer.gui.training.plots import (
    Card,
    GradientHistogramPlot,
    HeatmapPlot,
    LayerTable,
    LinkedSteps,
    LossPlot,
    LossScalePlot,
    MemoryReadout,
    alarm_colour,
    file_text_label,
)
from fpexplorer.gui.training.quant_views import QuantPage
from fpexplorer.gui.training.replay import RunFileReplay
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.scaler_whatif import REPLAY_BUDGET_S as WHATIF_BUDGET_S
from fpexplorer.gui.training.scaler_whatif import ScalerWhatIf
from fpexplorer.gui.training.sizing import FormScrollArea, PageScrollArea
from fpexplorer.gui.training.view_model import (
    RunEntry,
    RunList,
    elide,
    elide_name,
    elide_words,
    name_word_counts,
    progress_view,
    settings_of,
    summarize_problems,
)
from fpexplorer.paths import run_directory
from fpexplorer.training.ranked import NoRunError, find_run
from fpexplorer.training.records import EndRecord, HeaderRecord, Record
from fpexplorer.training.summary import no_run_reason, steps_text

__all__ = ["RunEntry", "TrainingPanel"]

LOG = logging.getLogger(__name__)

SYNC_LOAD_BYTES = 8 * 2**20  # ~4,000 steps with statistics on every step: under a second
# Reading files in pieces: about this long per turn of the event loop, for all the files
# being read together (one after another), so that a window opening many stays responsive.
REPLAY_BUDGET_S = 0.012
# The pages of the plots area, by the name `fpexplorer screenshot --training-page` uses.
PLOT_PAGES = {"mixed": "Mixed precision", "low": "Low precision"}
REFRESH_INTERVAL_MS = 50  # at most 20 redraws a second (<= 30), never one per record
# Tables, labels and progress bars repaint whole widgets on every change (a QProgressBar
# even synchronously): they follow at a slower pace than the curves.
READOUT_INTERVAL_S = 0.25
# While files are read in pieces the runs change on every tick; each redraw costs in
# proportion to the runs listed (hundreds of files opened at once: a redraw every 50 ms
# made loading them quadratic). Meanwhile the plots follow at this slower pace.
LOADING_REDRAW_INTERVAL_S = 0.5

# (short text beside the plot, longer text in its tooltip)
EXPLAIN_LOSS = (
    "Loss per step, one curve per run. A curve that stalls or stops (NaN) is the first sign.",
    "FP16 without loss scaling often stalls: small gradients underflow to zero and the "
    "weights stop moving. A run whose loss turns inf/NaN shows a gap here and skipped steps "
    "in the loss-scale plot.",
)
EXPLAIN_SCALE = (
    "Loss scale, log2 axis; × = skipped step (inf/NaN gradients, no update).",
    "Dynamic scaling halves the scale on a step whose gradients hold inf/NaN (the step is "
    "skipped: the weights are not updated) and doubles it after growth-interval clean steps. "
    "A saw-tooth is healthy; a slide towards 1 means overflow on almost every step.",
)
EXPLAIN_HIST = (
    "Gradient exponents of the latest statistics step against each format's range; the "
    "band is what FP16 holds at the what-if scale.",
    "Parameter gradients are recorded unscaled (after GradScaler unscales them); activation "
    "gradients scaled, in the dtype backward used. Under the bars each format's range: "
    "dashed = subnormal, solid = normal. Bars left of the shaded FP16 band would underflow "
    "at the what-if loss scale, bars right of it overflow. Drag the band or set the scale.",
)
EXPLAIN_HEAT = (
    "The histograms over time: colour = share of values per binade (log).",
    "Each column is one statistics step. Watch the mass drift towards the dashed limits "
    "(smallest subnormal, largest value) of the format the gradients were held in, divided "
    "by the loss scale for the unscaled parameter gradients.",
)
EXPLAIN_LAYERS = (
    "Per layer on the latest statistics step; the first layer to go non-finite is marked.",
    "On the latest statistics step. ‖g‖ is of the parameter gradients, unscaled (blank for "
    "a module without parameters); max |g|, headroom and underflow of the activation "
    "gradients as backward held them (scaled in the scaled modes). Headroom is log2(largest "
    "value of the gradients' format / max |g|): how many doublings before that layer "
    "overflows. The first layer that produced inf/NaN (in backward order, skipped step or "
    "not) is where an overflow starts.",
)
EXPLAIN_MEMORY = (
    "Memory by dtype, throughput, and updates lost to FP16 rounding.",
    "Bytes of parameters, gradients, optimizer state and saved activations by dtype. In "
    "pure-fp16 (no FP32 master weights) the share of weight updates that rounding threw "
    "away; in other modes the share FP16 weights would have lost.",
)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60].strip("_") or "run"


class TrainingPanel(QWidget):
    """The second tab of the main window. See the module docstring for the data flow."""

    run_added = Signal(object)  # RunEntry
    run_loaded = Signal(str)  # a replayed file has been read to its end
    job_state_changed = Signal(object)  # JobState

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run_list_state = RunList()
        self._timer_errors: set[tuple[str, str]] = (
            set()
        )  # failures of the redraw, each reported once
        self._shown: dict[int, int] = {}  # run key -> revision last drawn
        self._layout_dirty = True
        self._readouts_at = 0.0
        self._drawn_at = 0.0  # when refresh() last ran (time.monotonic())
        self._replays: list[tuple[RunFileReplay, RunEntry]] = []
        # Why the last file read held no run, in the status line's words (the screenshot
        # command says it too); None once a file holds one.
        self.last_refusal: str | None = None
        self.job = TrainingJob(self)
        self.job.records_received.connect(self._on_job_records)
        self.job.state_changed.connect(self._on_job_state_changed)
        self.job.problem.connect(self._on_job_problem)
        self.job.finished.connect(self._on_job_finished)
        self._live: RunEntry | None = None

        # ----- left: the job ------------------------------------------------------------
        # The selected run's code, and what the form held when it was shown (below).
        self._run_code: tuple[tuple[dict[str, Any], dict[str, str]], str] | None = None
        self.form = TrainForm()
        self.form.changed.connect(self._on_form_changed)
        form_scroll = FormScrollArea()
        form_scroll.setWidget(self.form)
        form_scroll.setWidgetResizable(True)
        form_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # As wide as the form needs beside the scroll bar, so the column (the tabs' minimum
        # follows) never cuts it: at a fixed 280 px the form got 256 of its 285 px, and the
        # File… button and the notes' last words lay under the scroll bar.
        form_scroll.setMinimumWidth(
            self.form.minimumSizeHint().width()
            + form_scroll.verticalScrollBar().sizeHint().width()
            + 2 * form_scroll.frameWidth()
        )
        self.form_scroll = form_scroll

        self.start_button = QPushButton("Start")
        self.pause_button = QPushButton("Pause")
        self.stop_button = QPushButton("Stop")
        self.start_button.clicked.connect(self._on_start_clicked)
        self.pause_button.clicked.connect(self._on_pause_clicked)
        self.stop_button.clicked.connect(self._on_stop_clicked)
        if not PAUSE_SUPPORTED:
            self.pause_button.setToolTip("Pausing needs POSIX signals; use Stop on this system")
        buttons = QHBoxLayout()
        for button in (self.start_button, self.pause_button, self.stop_button):
            button.setMinimumWidth(40)
            buttons.addWidget(button)
        # Why Start is greyed, in one line beside it (the fields' own messages may be
        # scrolled out of view on a small screen); every message in its tooltip.
        self.start_problems = file_text_label("", word_wrap=True)
        self.start_problems.hide()

        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)  # thousandths: Qt's bar holds 32-bit ints only
        self.progress.setFormat("idle")
        self.progress.setValue(0)
        self.progress.setMinimumWidth(60)
        self.progress.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.status_label = file_text_label(
            "No run yet: start a job or open a run file (File ▸ Open Run…)."
        )
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status_label.setMaximumHeight(90)

        self.run_list = QListWidget()
        self.run_list.setToolTip("Runs shown; tick to overlay, select to inspect histograms")
        self.run_list.itemChanged.connect(self._on_run_item_changed)
        self.run_list.currentRowChanged.connect(self._on_run_row_changed)
        self.run_list.setMaximumHeight(110)
        self.run_list.setMinimumHeight(40)
        # Names elided a word at a time, numbers whole (Qt's own elision cut "lr=0.0002" to
        # "lr=0…2"); the whole name in each item's tooltip.
        self.run_list.setItemDelegate(RunNameDelegate(self.run_list))
        self.run_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.run_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.remove_button = QPushButton("Remove run")
        self.remove_button.clicked.connect(self._on_remove_clicked)

        job_tab = QWidget()
        job_layout = QVBoxLayout(job_tab)
        job_layout.setContentsMargins(2, 2, 2, 2)
        job_layout.addWidget(form_scroll, 1)
        job_layout.addLayout(buttons)
        job_layout.addWidget(self.start_problems)
        job_layout.addWidget(self.progress)
        job_layout.addWidget(self.status_label)
        job_layout.addWidget(QLabel("<b>Runs</b> (tick to overlay)"))
        job_layout.addWidget(self.run_list)
        job_layout.addWidget(self.remove_button)

        self.code_view = QPlainTextEdit()
        self.code_view.setReadOnly(True)
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.code_view.setFont(mono)
        self.code_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.export_note = ""  # what the last export met reading the run (a torn line)
        self.copy_button = QPushButton("Copy code")
        self.copy_button.clicked.connect(self._on_copy_clicked)
        code_tab = QWidget()
        code_layout = QVBoxLayout(code_tab)
        code_layout.setContentsMargins(2, 2, 2, 2)
        code_intro = QLabel(
            "PyTorch code doing what this configuration does — copy it into your loop:"
        )
        code_intro.setWordWrap(True)
        code_layout.addWidget(code_intro)
        code_layout.addWidget(self.code_view, 1)
        code_layout.addWidget(self.copy_button)

        self.left_tabs = QTabWidget()
        self.left_tabs.addTab(job_tab, "Job")
        self.left_tabs.addTab(code_tab, "PyTorch code")
        self.whatif = ScalerWhatIf()
        self.whatif.changed.connect(self._on_whatif_changed)
        self.left_tabs.addTab(self.whatif, "What-if")
        self.code_tab = code_tab

        # ----- right: the plots ---------------------------------------------------------
        self.loss_plot = LossPlot()
        self.scale_plot = LossScalePlot()
        self.hist_plot = GradientHistogramPlot()
        self.hist_plot.act_button.toggled.connect(self._on_hist_source_toggled)
        self.heatmap = HeatmapPlot()
        self.layer_table = LayerTable()
        self.memory = MemoryReadout()
        # One x axis for every plot over steps: zoom one, all follow.
        self.linked_steps = LinkedSteps(
            [self.loss_plot.plot, self.scale_plot.plot, self.heatmap.plot]
        )
        self.cards = {
            "loss": Card("Loss", *EXPLAIN_LOSS, self.loss_plot),
            "scale": Card("Loss scale", *EXPLAIN_SCALE, self.scale_plot),
            "histogram": Card("Gradient exponents", *EXPLAIN_HIST, self.hist_plot),
            "heatmap": Card("Exponents over time", *EXPLAIN_HEAT, self.heatmap),
            "layers": Card("Layers", *EXPLAIN_LAYERS, self.layer_table),
            "memory": Card("Memory and throughput", *EXPLAIN_MEMORY, self.memory),
        }
        plots = QWidget()
        # Rows in a vertical splitter: the stretch is honoured (a grid ignores it once
        # word-wrapped labels ask for their height) and a person can give a row more room.
        rows = QSplitter(Qt.Orientation.Vertical)
        rows.setChildrenCollapsible(False)
        for left, right in (("loss", "scale"), ("histogram", "heatmap"), ("layers", "memory")):
            row = QSplitter(Qt.Orientation.Horizontal)
            row.setChildrenCollapsible(False)
            row.addWidget(self.cards[left])
            row.addWidget(self.cards[right])
            rows.addWidget(row)
        for index, stretch in enumerate((4, 5, 4)):
            rows.setStretchFactor(index, stretch)
        rows_page = QWidget()
        rows_layout = QVBoxLayout(rows_page)
        rows_layout.setContentsMargins(0, 0, 0, 0)
        rows_layout.addWidget(rows)
        # On a short window the rows keep their readable heights and the page scrolls.
        self.plots_scroll = PageScrollArea(rows_page)
        plots_layout = QVBoxLayout(plots)
        plots_layout.setContentsMargins(0, 0, 0, 0)
        plots_layout.addWidget(self.plots_scroll)
        self._rows = rows

        # The plots area has two pages: today's AMP cards, and how each tensor of the
        # quantized linears (FP8/MX/NVFP4 modes) fares.
        self.quant_page = QuantPage()
        self.plot_tabs = QTabWidget()
        self.plot_tabs.addTab(plots, PLOT_PAGES["mixed"])
        self.plot_tabs.addTab(self.quant_page, PLOT_PAGES["low"])
        self.plot_tabs.currentChanged.connect(self._on_plot_tab_changed)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.left_tabs)
        splitter.addWidget(self.plot_tabs)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([self.left_tabs.minimumSizeHint().width(), 1300])
        splitter.setChildrenCollapsible(False)
        self._splitter = splitter
        self.left_tabs.currentChanged.connect(self._on_left_tab_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

        # ----- actions for the File menu ------------------------------------------------
        self.open_action = QAction("Open Run…", self)
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        self.open_action.triggered.connect(self._on_open_triggered)
        self.open_folder_action = QAction("Open Run Folder…", self)
        self.open_folder_action.setToolTip("a run of several ranks: its merged log and rank logs")
        self.open_folder_action.triggered.connect(self._on_open_folder_triggered)
        # A run of several ranks opens as its merged view; this adds each rank's own log.
        self.overlay_ranks_action = QAction("Overlay Each Rank", self)
        self.overlay_ranks_action.setCheckable(True)
        self.overlay_ranks_action.setToolTip(
            "when opening a run of several ranks, also show each rank's own log beside the "
            "merged view"
        )
        self.export_action = QAction("Export Plots and CSV…", self)
        self.export_action.triggered.connect(self._on_export_triggered)

        # Large replays are read in REPLAY_BUDGET_S pieces on every idle turn of the loop.
        self.replay_timer = QTimer(self)
        self.replay_timer.setInterval(0)
        self.replay_timer.timeout.connect(self._advance_replays)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_INTERVAL_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.timer.start()
        self._update_buttons()
        self._on_form_changed()
        self.refresh()  # the first paint shows the empty views' notes and the format rulers

    # ----- the contract with the main window -----------------------------------------

    def file_actions(self) -> list[QAction]:
        """Actions for the File menu: Open Run…, Open Run Folder…, Overlay Each Rank,
        Export…"""
        return [self.open_action, self.open_folder_action, self.overlay_ranks_action,
                self.export_action]  # fmt: skip

    def load_run(self, path: str | Path, *, in_background: bool = False) -> None:
        """Replay a saved run file into the plots. Never raises: problems show in the panel.

        A run of several ranks (its folder, its merged log or a rank's log) opens as its
        merged log, and with "Overlay Each Rank" checked each rank's log beside it.

        Files up to SYNC_LOAD_BYTES are read before this returns (the screenshot command
        renders right after); larger ones are read in pieces between redraws (`loading`
        is True meanwhile, `run_loaded` fires at the end), so the window stays responsive
        and memory stays bounded however long the run. `in_background=True` (File ▸ Open)
        reads every file in pieces, however small: a file of a few MB takes most of a
        second to read, and hundreds chosen at once took a minute, all on the GUI thread.
        """
        try:
            files = find_run(path)
        except NoRunError as error:
            self._show_status(f"Could not open {path}: {error}", error=True)
            return
        except OSError as error:
            self._show_status(f"Could not open {path}: {error.strerror or error}", error=True)
            return
        ranks = files.ranks if self.overlay_ranks_action.isChecked() else ()
        previous = {entry.key for entry in self.runs}
        for log in (files.merged, *ranks):
            listed = self._listed_entries(log)
            live = next((entry for entry in listed if entry.live), None)
            if live is not None:  # the running job's own file: it is shown as it grows
                self._select(live)
                self._show_status(f"{elide(log.name, 60)} is the running job's run log")
                continue
            # Opened again: read again (it may have grown or been rewritten), listed once.
            for entry in listed:
                self._remove_run(entry)
            self._load_run_file(log, in_background)
        added = [entry for entry in self.runs if entry.key not in previous]
        if ranks and added:
            self._select(added[0])  # the merged view first; the ranks overlaid on it
            if not self.loading:
                merged = added[0].model
                self._show_status(
                    f"Opened {elide(files.merged.name, 60)} (merged) and {len(ranks)} rank "
                    f"logs beside it: {steps_text(merged.steps_seen)}, {merged.status}."
                    + failure_note(merged.end),
                    error=merged.status == "failed",
                )

    def _listed_entries(self, path: Path) -> list[RunEntry]:
        """The runs in the list read from `path` (the same file, however it was named)."""
        found = []
        for entry in self.runs:
            if entry.path is None:
                continue
            try:
                same = entry.path == path or entry.path.samefile(path)
            except OSError:  # gone or unreadable since: not the file opened now
                same = False
            if same:
                found.append(entry)
        return found

    def _load_run_file(self, path: Path, in_background: bool) -> None:
        try:
            model = RunModel()
            model.source = Path(path).name
            replay = RunFileReplay(path, model)
            if replay.done:  # could not even open it
                self.last_refusal = "; ".join(model.problems[:1]) or "cannot be read"
                self._show_status(f"Could not open {path}: {self.last_refusal}")
                return
            if replay.size <= SYNC_LOAD_BYTES and not in_background:
                replay.advance()
                self._finish_replay(replay, None)
                return
            entry = self._add_run(model, Path(path))
            if not (in_background and self._replays):
                # Of many files opened at once the first is shown (selecting each in turn
                # cost a list-widget update per file, 0.7 s for 500).
                self._select(entry)
            self._replays.append((replay, entry))
            self.replay_timer.start()
            self._show_status(f"Loading {Path(path).name}…")
        except Exception as error:  # the contract: a bad file never takes the window down
            self._show_status(f"Could not open {path}: {error}")

    @property
    def loading(self) -> bool:
        """True while a large run file is still being read in pieces."""
        return bool(self._replays)

    def finish_loading(self) -> None:
        """Read the rest of every run file still loading, now (blocking).

        For a picture of the whole run (`fpexplorer screenshot`): rendered mid-way, a large
        file shows a part of the run and "Loading… 6%".
        """
        finished = bool(self._replays)
        for replay, entry in list(self._replays):
            replay.advance(None)
            self._replays.remove((replay, entry))
            self._finish_replay(replay, entry)
        self.replay_timer.stop()
        if finished:
            self.refresh()  # a replay in pieces leaves the redraw to the timer

    def _advance_replays(self) -> None:
        # A timer callback (every idle turn): it must never raise, see _on_timer_timeout.
        try:
            self._advance_replays_now()
        except Exception as error:
            for replay, _entry in self._replays:
                replay.close()
            self._replays.clear()
            self.replay_timer.stop()
            self._report_timer_error("read the run file", error)

    def _advance_replays_now(self) -> None:
        if not self._replays:
            self.replay_timer.stop()
            return
        # One budget for this turn, shared by the files in order: the first always reads
        # at least a piece, the others wait for a later turn once it is spent.
        deadline = time.perf_counter() + REPLAY_BUDGET_S
        for index, (replay, entry) in enumerate(list(self._replays)):
            left = deadline - time.perf_counter()
            if index and left <= 0:
                break
            if replay.advance(max(left, 0.0)):
                self._replays.remove((replay, entry))
                self._finish_replay(replay, entry)
                continue
            waiting = len(self._replays) - 1
            more = f" ({waiting} more file{'s' * (waiting != 1)} to read)" if waiting else ""
            self._show_status(f"Loading {replay.path.name}… {100 * replay.fraction:.0f}%{more}")
            break

    def _finish_replay(self, replay: RunFileReplay, entry: RunEntry | None) -> None:
        try:
            model = replay.model
            model.closed = True
            path = replay.path
            if model.header is None and not model.steps_seen and model.end is None:
                if entry is not None:
                    self._remove_run(entry)
                # One line, in the words of `runs check` (a log of a newer schema is not
                # "not a run log"); the damaged lines' text (binary garbage for a file that is
                # not a run log at all) goes in the tooltip, not the status.
                reason = no_run_reason(replay.refused_schema, replay.size, replay.torn_first_line)
                self.last_refusal = reason
                self._show_status(f"{elide(path.name, 60)}: {reason}", error=True)
                self.status_label.setToolTip(
                    "\n".join([str(path), *(elide(p, 200) for p in model.problems[:3])])
                )
                self.run_loaded.emit(str(path))
                return
            self.last_refusal = None
            in_pieces = entry is not None
            if entry is None:
                entry = self._add_run(model, path)
                self._select(entry)
            if entry is self.run_list_state.current:
                self._show_settings_of(entry)
            end = model.end
            problems = model.problems
            killed = replay.torn_last_line is not None and end is None and not replay.shrank
            if killed:
                # A job killed while writing leaves its last line torn: incomplete, not
                # damage (as `runs check` says; it was listed as "Problems: ... torn").
                problems = [p for p in problems if p != replay.torn_last_line]
            note = (
                f"Opened {elide(path.name, 60)}: {steps_text(model.steps_seen)}, {model.status}"
                + (
                    " (the job was killed while writing its last line, which is ignored)"
                    if killed
                    else ""
                )
                + "."
            )
            failed = end is not None and end.status == "failed"
            note += failure_note(end)
            if problems:
                note += " Problems: " + elide("; ".join(problems[:3]), 200)
            self._show_status(note, error=failed)
            if in_pieces:
                # The redraw timer draws it: a refresh per file is a redraw of every run
                # listed, per file (hundreds of files opened at once froze the window).
                self._layout_dirty = True
            else:
                self.refresh()
            self.run_loaded.emit(str(path))
        except Exception as error:  # the contract: a bad file never takes the window down
            self._show_status(f"Could not open {replay.path}: {error}")

    def shutdown(self) -> None:
        """Stop a running job (graceful, then kill), replays and the redraw timer."""
        self.timer.stop()
        self.replay_timer.stop()
        for replay, _entry in self._replays:
            replay.close()
        self._replays.clear()
        self.form.device_finder.stop()
        self.job.shutdown()

    # ----- runs --------------------------------------------------------------------

    @property
    def runs(self) -> list[RunEntry]:
        return list(self.run_list_state.runs)

    @property
    def current_run(self) -> RunEntry | None:
        return self.run_list_state.current

    def _add_run(self, model: RunModel, path: Path | None, live: bool = False) -> RunEntry:
        entry = self.run_list_state.add(model, path, live=live)
        title = self.run_list_state.title(entry, self.job.active)
        item = QListWidgetItem(title)
        # The list is narrow: the whole name on hover.
        item.setToolTip(self.run_list_state.tooltip(entry, self.job.active))
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked)
        # No colour of its own: the palette's text colour reads on light and dark themes.
        item.setData(Qt.ItemDataRole.DecorationRole, _swatch(entry.colour))
        self.run_list.blockSignals(True)
        self.run_list.addItem(item)
        self.run_list.blockSignals(False)
        self._layout_dirty = True
        self.run_added.emit(entry)
        return entry

    def _select(self, entry: RunEntry) -> None:
        self.run_list_state.select(entry)
        self.run_list.blockSignals(True)
        self.run_list.setCurrentRow(self.run_list_state.row_of(entry))
        self.run_list.blockSignals(False)
        self._layout_dirty = True

    def _on_run_item_changed(self, item: QListWidgetItem) -> None:
        self.run_list_state.set_visible(
            self.run_list.row(item), item.checkState() == Qt.CheckState.Checked
        )
        self._layout_dirty = True

    def _on_run_row_changed(self, row: int) -> None:
        if self.run_list_state.select_row(row):
            self._show_settings_of(self.run_list_state.current)
            self._layout_dirty = True

    def _show_settings_of(self, entry: RunEntry | None) -> None:
        """The form and the code view show the selected run's settings: Start runs those.

        While a job runs the form is locked on the job's settings.
        """
        if entry is None or self.job.active:
            return
        settings = settings_of(entry.model)
        if isinstance(settings, str):
            self.code_view.setPlainText(f"# {settings}\n# The form keeps its own settings.")
            self._show_status(f"{elide_name(entry.model.label, 60)}: {settings}.")
            return
        self.form.set_config(settings)
        # The code of the run's own settings, even where this machine lacks its task file,
        # and with its nodes (options the form does not hold), while the form holds them.
        self._run_code = (self.form.held(), pytorch_code(settings))
        self._on_form_changed()

    def _on_remove_clicked(self) -> None:
        row = self.run_list.currentRow()
        runs = self.run_list_state.runs
        if not 0 <= row < len(runs) or (runs[row] is self._live and self.job.active):
            return
        self._remove_run(runs[row])

    def _remove_run(self, entry: RunEntry) -> None:
        if entry not in self.run_list_state.runs:
            return
        row = self.run_list_state.remove(entry)
        self.run_list.blockSignals(True)
        self.run_list.takeItem(row)
        self.run_list.setCurrentRow(self.run_list_state.row_of(self.run_list_state.current))
        self.run_list.blockSignals(False)
        for replay, loading in list(self._replays):
            if loading is entry:
                replay.close()
                self._replays.remove((replay, loading))
        self._layout_dirty = True

    # ----- the job -----------------------------------------------------------------

    def start_job(self) -> bool:
        """Start a job from the form; returns False (and says why) when it cannot start."""
        if self.job.active:
            self._show_status(f"Cannot start: a job is {self.job.state.value}")
            return False
        try:
            config = self.form.config()
        except ValueError as error:
            self._show_status(f"Cannot start: {elide(str(error), 300)}")
            return False
        folder = run_directory()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        task = _safe_name(
            Path(config.task.split(":")[0]).stem if ":" in config.task else config.task
        )
        path = folder.path / f"run-{task}-{config.precision}-{stamp}.jsonl"
        counter = 1
        while path.exists():
            counter += 1
            path = folder.path / f"run-{task}-{config.precision}-{stamp}-{counter}.jsonl"
        model = RunModel()
        model.source = path.name
        model.header = HeaderRecord(config=config.to_dict())  # until the real one
        entry = self._add_run(model, path, live=True)
        self._live = entry
        self._select(entry)
        try:
            self.job.start(config, path)
        except (ValueError, RuntimeError) as error:
            self._remove_run(entry)
            self._live = None
            self._show_status(f"Cannot start: {error}")
            return False
        note = f"Running; the run is saved to {path}"
        if folder.problem:
            note += f" ({folder.problem})"
        self._show_status(note)
        return True

    def _on_start_clicked(self) -> None:
        self.start_job()

    def _on_pause_clicked(self) -> None:
        if self.job.state is JobState.PAUSED:
            self.job.resume()
        elif self.job.can("pause"):
            self.job.pause()

    def _on_stop_clicked(self) -> None:
        if self.job.can("stop"):
            self.job.stop()

    def _on_job_records(self, records: list[Record]) -> None:
        if self._live is not None:
            self._live.model.add_records(records)

    def _on_job_problem(self, message: str) -> None:
        if self._live is not None:
            self._live.model.add_problem(message)

    def _on_job_state_changed(self, state: JobState) -> None:
        self._update_buttons()
        self._layout_dirty = True
        self.job_state_changed.emit(state)

    def _on_job_finished(self, summary: str) -> None:
        live = self._live
        text = summary[:1].upper() + summary[1:] + "."
        if live is not None:
            if live.model.end is None:
                live.model.add_problem(summary)
            on_disk = live.path is not None and live.path.is_file()
            # A job stopped before its first step leaves no run worth a list entry (quick
            # Start/Stop piled up empty "incomplete" runs); its file, if any, can be opened.
            if not self.run_list_state.end_live(live):
                self._remove_run(live)
                text += " No step was recorded, so the run is not listed"
                text += f" (File ▸ Open Run… shows it: {live.path})." if on_disk else "."
            elif on_disk:
                text += f" Run file: {live.path}"
            self._refresh_progress()
            self._live = None
        self._show_status(text, error=self.job.state is JobState.FAILED)
        self._layout_dirty = True
        self.refresh()

    def _update_buttons(self) -> None:
        state = self.job.state
        self.start_button.setEnabled(not self.job.active and self.form.valid)
        self.pause_button.setEnabled(
            PAUSE_SUPPORTED and state in (JobState.RUNNING, JobState.PAUSED)
        )
        self.pause_button.setText("Resume" if state is JobState.PAUSED else "Pause")
        self.stop_button.setEnabled(state in (JobState.RUNNING, JobState.PAUSED))
        self.form.setEnabled(not self.job.active)

    def _on_form_changed(self) -> None:
        self._update_buttons()
        self.form_scroll.fit_height()  # a message shown or hidden changes the form's height
        problems = self.form.problems()
        summary = summarize_problems(problems, self.form.titles)
        self.start_problems.setText(summary)
        self.start_problems.setToolTip(
            "\n".join(f"{self.form.titles.get(k, k)}: {v}" for k, v in problems.items())
        )
        self.start_problems.setStyleSheet(f"color: {alarm_colour()};")
        self.start_problems.setVisible(bool(summary))
        if self._run_code is not None and self.form.held() == self._run_code[0]:
            # Unchanged since a run's settings were shown (the devices found since, ...).
            self.code_view.setPlainText(self._run_code[1])
            return
        self._run_code = None
        try:
            config = self.form.config()
        except ValueError:
            # The code view must not show settings Start would not run.
            self.code_view.setPlainText(f"# {summary}: the code follows once they are valid.")
            return
        self.code_view.setPlainText(pytorch_code(config))

    def _on_left_tab_changed(self, index: int) -> None:
        # Code needs width: the code tab takes half the panel, the form a narrow column.
        total = sum(self._splitter.sizes())
        narrow = self.left_tabs.minimumSizeHint().width()
        left = max(total // 2, narrow) if self.left_tabs.widget(index) is self.code_tab else narrow
        self._splitter.setSizes([left, total - left])

    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.code_view.toPlainText())

    def _on_hist_source_toggled(self, _checked: bool) -> None:
        self._layout_dirty = True

    def _on_plot_tab_changed(self, _index: int) -> None:
        self._layout_dirty = True  # the page shown now redraws from the models

    def show_plot_page(self, name: str) -> None:
        """Show the plots page `name` (a key of PLOT_PAGES: "mixed" or "low")."""
        self.plot_tabs.setCurrentIndex(list(PLOT_PAGES).index(name))
        self.refresh()

    # ----- drawing -----------------------------------------------------------------

    def _on_timer_timeout(self) -> None:
        # A timer callback must never raise: an exception here would repeat on every tick
        # (20 a second). It is logged once, shown in the status line, and not repeated.
        try:
            self._redraw_if_needed()
        except Exception as error:
            self._layout_dirty = False
            self._shown = {e.key: e.model.revision for e in self.run_list_state.runs}
            self._report_timer_error("redraw", error)

    def _report_timer_error(self, what: str, error: Exception) -> None:
        """Log and show a timer callback's exception the first time it happens, only then."""
        signature = f"{type(error).__name__}: {error}"
        if (what, signature) in self._timer_errors:
            return
        self._timer_errors.add((what, signature))
        LOG.exception("training panel: %s failed", what)
        self._show_status(f"Could not {what}: {elide(signature, 200)}", error=True)

    def _redraw_if_needed(self) -> None:
        runs = self.run_list_state.runs
        if self._replays and time.monotonic() - self._drawn_at < LOADING_REDRAW_INTERVAL_S:
            return
        if self._layout_dirty or any(self._shown.get(e.key) != e.model.revision for e in runs):
            slow_due = time.monotonic() - self._readouts_at >= READOUT_INTERVAL_S
            if self._layout_dirty:
                self.refresh()
            elif slow_due:
                # Read-outs and plots on different ticks: one event-loop turn never pays
                # for both repaints. The plots follow on the next tick (nothing marked shown).
                current = self.run_list_state.current
                self._refresh_readouts(current.model if current else None)
            else:
                self.refresh(readouts=False)

    def _on_whatif_changed(self) -> None:
        self.refresh(readouts=False)

    def refresh(self, readouts: bool = True) -> None:
        """Redraw the views from the models (the timer calls this when something moved).

        `readouts=False` redraws only the plots; tables, labels and progress bars follow
        every READOUT_INTERVAL_S.
        """
        self._drawn_at = time.monotonic()
        state = self.run_list_state
        state.name_runs()
        overlay = state.overlay()
        shown = state.shown_models()
        current = state.current.model if state.current is not None else None
        self.loss_plot.refresh(overlay, shown)
        # A long run's replay goes on in pieces, one per redraw, until it has caught up.
        self.whatif.refresh(current, WHATIF_BUDGET_S)
        self.scale_plot.show_prediction(*self.whatif.model.curve())
        self.scale_plot.refresh(overlay, shown)
        self.hist_plot.refresh(current)
        if self.plot_tabs.currentWidget() is self.quant_page:  # a hidden page waits
            self.quant_page.refresh(overlay, shown, current)
        if readouts:
            self._refresh_readouts(current)
        self._shown = {e.key: e.model.revision for e in state.runs}
        self._layout_dirty = bool(self.whatif.model.pending)  # carried on at the next tick

    def _refresh_readouts(self, current: RunModel | None) -> None:
        self._readouts_at = time.monotonic()
        # The heatmap recomputes a (columns x binades) image: at the slower pace too.
        self.heatmap.refresh(current, self.hist_plot.showing_activations)
        self.scale_plot.refresh_growth(current)
        self.layer_table.refresh(current)
        self.memory.refresh(current)
        self._refresh_progress()
        for row, entry in enumerate(self.run_list_state.runs):
            item = self.run_list.item(row)
            title = self.run_list_state.title(entry, self.job.active and entry is self._live)
            if item is not None and item.text() != title:
                self.run_list.blockSignals(True)
                item.setText(title)
                item.setToolTip(
                    self.run_list_state.tooltip(entry, self.job.active and entry is self._live)
                )
                self.run_list.blockSignals(False)

    def _refresh_progress(self) -> None:
        live = self._live
        if live is None:
            return
        state = self.job.state
        shown_state = None if state in (JobState.RUNNING, JobState.IDLE) else state.value
        view = progress_view(live.model, self.job.active, shown_state)
        self.progress.setValue(view.permille)
        self.progress.setFormat(view.text)

    def _show_status(self, text: str, error: bool = False) -> None:
        text = elide(text, 400)
        self.status_label.setText(text)
        self.status_label.setToolTip(text)
        self.status_label.setStyleSheet(f"color: {alarm_colour()};" if error else "")

    # ----- files -------------------------------------------------------------------

    def _on_open_folder_triggered(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Open run folder", str(run_directory().path)
        )
        if folder:
            self.load_run(folder, in_background=True)

    def _on_open_triggered(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Open run", str(run_directory().path), "Run logs (*.jsonl);;All files (*)"
        )
        for path in paths:
            self.load_run(path, in_background=True)

    def _main_plots(self) -> dict[str, tuple[pg.PlotWidget, PlotCaption]]:
        """The main page's plots by export file name, each with what its export says it
        shows (the card's title, which gradients, the runs drawn)."""
        state = self.run_list_state
        every = tuple(run.full_name or run.name for run in state.overlay())
        current = state.current.model if state.current is not None else None
        one = (current.label,) if current is not None else ()
        gradients = "activation" if self.hist_plot.showing_activations else "parameter"
        stats = current.latest_stats if current is not None else None
        at_step = f", step {stats.step}" if stats is not None else ""
        weight = self.loss_plot.smoothing  # the curves drawn are averages then, not steps
        smoothed = f", smoothed (exponential moving average, weight {weight:g})" if weight else ""
        plots = {
            "loss": ("loss", self.loss_plot.plot, smoothed, every),
            "loss_scale": ("scale", self.scale_plot.plot, "", every),
            "gradient_histogram": (
                "histogram",
                self.hist_plot.plot,
                f": {gradients} gradients{at_step}",
                one,
            ),
            "exponent_heatmap": ("heatmap", self.heatmap.plot, f": {gradients} gradients", one),
        }
        exports: dict[str, tuple[pg.PlotWidget, PlotCaption]] = {}
        for name, (card_name, plot, what, runs) in plots.items():
            card = self.cards[card_name]
            exports[name] = (plot, PlotCaption(card.title + what, runs, card.explanation))
        return exports

    def export_to(self, folder: str | Path) -> list[Path]:
        """Write every plot as PNG and SVG and the current run's scalars as CSV into `folder`
        (the Low precision page's plots where the runs have quantized layers)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.export_note = ""
        self.refresh()
        written: list[Path] = []
        for name, (plot, caption) in self._main_plots().items():
            written += export_plot(plot, folder / name, caption)
        # The Low precision page's plots too, where the runs have quantized layers: shown
        # for the moment of the export (a page never shown is not laid out; nothing is
        # painted in between, the page shown before comes back at once).
        shown_page = self.plot_tabs.currentIndex()
        self.plot_tabs.setCurrentWidget(self.quant_page)
        state = self.run_list_state
        current = state.current.model if state.current is not None else None
        try:
            self.quant_page.refresh(state.overlay(), state.shown_models(), current)
            for name, (plot, caption) in self.quant_page.export_plots().items():
                written += export_plot(plot, folder / name, caption)
        finally:
            self.plot_tabs.setCurrentIndex(shown_page)
        entry = self.run_list_state.current
        if entry is not None:
            csv_path = folder / f"{_safe_name(entry.model.label)}-steps.csv"
            count, problems = write_scalars_csv(entry.model, csv_path, entry.path)
            written.append(csv_path)
            # Said with the export's own message (it replaced this one at once before).
            self.export_note = (
                f" The CSV has {count} rows; " + "; ".join(problems[:3]) if problems else ""
            )
        return written

    def existing_exports(self, folder: str | Path) -> list[Path]:
        """The files in `folder` an export there may replace (the plots' PNG and SVG, the
        Low precision page's, the current run's CSV)."""
        folder = Path(folder)
        if not folder.is_dir():
            return []
        candidates = [
            folder / f"{name}{suffix}" for name in self._main_plots() for suffix in (".png", ".svg")
        ]
        candidates += sorted(folder.glob("quant_*.png")) + sorted(folder.glob("quant_*.svg"))
        entry = self.run_list_state.current
        if entry is not None:
            candidates.append(folder / f"{_safe_name(entry.model.label)}-steps.csv")
        return sorted(path for path in set(candidates) if path.exists())

    def _on_export_triggered(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export plots and CSV into")
        if not folder:
            return
        existing = self.existing_exports(folder)
        if existing:
            names = ", ".join(path.name for path in existing[:4])
            more = f" and {len(existing) - 4} more" if len(existing) > 4 else ""
            answer = QMessageBox.question(
                self,
                "Replace files?",
                f"{folder} already has {len(existing)} of the files this export writes "
                f"({names}{more}). Replace them?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                QMessageBox.StandardButton.Cancel,
            )
            if answer != QMessageBox.StandardButton.Yes:
                self._show_status("Export cancelled: no file replaced.")
                return
        try:
            written = self.export_to(folder)
        except OSError as error:
            # The file or folder it failed on, with the reason ("No space left on device").
            where = f"{error.filename}: " if error.filename else ""
            self._show_status(f"Export failed: {where}{error.strerror or error}", error=True)
            return
        self._show_status(f"Exported {len(written)} files to {folder}.{self.export_note}")


def failure_note(end: EndRecord | None) -> str:
    """' Error: WHY.' for a failed run's end (what a person opening a failed run wants
    first: for a run of several ranks, which rank was lost or raised); else ''."""
    if end is None or end.status != "failed":
        return ""
    return f" Error: {elide(end.error or 'no reason given', 300)}."


class RunNameDelegate(QStyledItemDelegate):
    """Draws a run list's names elided by `elide_words` to the width of the item's text
    (the task goes first, then the status, then settings from the left; a number is never
    cut), so that Qt, finding the text fits, elides nothing itself."""

    def initStyleOption(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().initStyleOption(option, index)
        widget = option.widget
        style = widget.style() if widget is not None else QApplication.style()
        rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, widget)
        # Qt draws the text inside this margin on each side (QCommonStyle's viewItemDrawText).
        margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget) + 1
        room = rect.width() - 2 * margin - 1  # a pixel spare: Qt must find nothing to cut
        metrics = option.fontMetrics
        text = option.text

        def fits(candidate: str) -> bool:
            return metrics.horizontalAdvance(candidate) <= room

        if not fits(text):
            model = index.model()
            titles = (str(model.index(row, 0).data()) for row in range(model.rowCount()))
            option.text = elide_words(text, fits, name_word_counts(titles))

    def shown_text(self, view: QListWidget, row: int) -> str:
        """The text drawn for `row` of `view` now (what the user reads)."""
        option = QStyleOptionViewItem()
        option.initFrom(view)
        index = view.model().index(row, 0)
        option.rect = view.visualRect(index)
        option.widget = view
        self.initStyleOption(option, index)
        return str(option.text)


def _swatch(colour: str) -> object:
    from PySide6.QtGui import QColor, QPixmap

    pixmap = QPixmap(12, 12)
    pixmap.fill(QColor(colour))
    return pixmap
