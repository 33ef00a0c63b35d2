"""`fpexplorer screenshot`: what the pictured window says, and the command's contract.

The window is prepared the way the command prepares it, and its widgets are read: a PNG's
size or colour count cannot tell a wrong number from a right one.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from gui_helpers import REPO, run_python
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from fpexplorer.cli import build_parser
from fpexplorer.commands.screenshot import prepare_window, render
from fpexplorer.gui.formats.text import keep_numbers_whole
from fpexplorer.gui.main_window import MainWindow

MAKE_SH = REPO / "docs" / "screenshots" / "make.sh"


def run_cli(*args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", **environment}
    return run_python("-m", "fpexplorer", *args, env=env, timeout=180)


@pytest.fixture
def shoot(qtbot: QtBot, tmp_path: Path) -> Iterator[object]:
    """Prepare and paint the window for screenshot arguments; yields a function."""
    windows: list[MainWindow] = []
    previous = signal.getsignal(signal.SIGINT)

    def prepare(*args: str, size: tuple[int, int] = (1280, 800)) -> MainWindow:
        parsed = build_parser("screenshot").parse_args(
            ["screenshot", "--out", str(tmp_path / "x.png"), *args]
        )
        _, window = prepare_window(parsed)
        qtbot.addWidget(window)
        windows.append(window)
        render(window, *size)
        return window

    yield prepare
    for window in windows:
        window.close()
    signal.signal(signal.SIGINT, previous)


def test_formats_screenshot_shows_the_asked_formats_value_and_view(shoot) -> None:  # type: ignore[no-untyped-def]
    window = shoot(
        "--format", "fp16", "e6m9", "--value", "0.1", "--view", "table", size=(1000, 700)
    )
    session = window.session
    assert [editor.format.name for editor in session.editors] == ["float16", "e6m9"]
    assert window.formats_panel.current_view_name() == "table"
    assert window.formats_panel.entry.field.text() == "0.1"
    readouts = window.formats_panel.readouts
    assert readouts.exact.toPlainText() == "0.0999755859375"
    assert readouts.shortest.text() == "0.1"
    table = window.formats_panel.cross_table.table
    rows = {table.item(r, 0).text(): table.item(r, 2).text() for r in range(table.rowCount())}
    assert rows["float16"] == "0.0999755859375"
    assert rows["float32"] == "0.100000001…"
    assert rows["float64"] != rows["float32"]
    assert rows["e6m9"] == "0.0999755859375"


@pytest.mark.slow  # renders every README screenshot: ~3 s
def test_every_readme_screenshot_shows_what_its_command_asks(shoot) -> None:  # type: ignore[no-untyped-def]
    shots = [
        line.split()[2:]
        for line in MAKE_SH.read_text(encoding="utf-8").splitlines()
        if line.startswith("shot ") and "--panel training" not in line
    ]
    assert len(shots) >= 6
    for args in shots:
        window = shoot(*args)
        formats = args[args.index("--format") + 1 : args.index("--value")]
        view = args[args.index("--view") + 1]
        value = args[args.index("--value") + 1]
        assert len(window.session.editors) == len(formats), args
        assert window.formats_panel.current_view_name() == view
        assert window.session.entry_error is None
        assert window.formats_panel.entry.field.text() == value
        # The headline of each editor is its value by the display rule (a cut number kept
        # whole on its line: keep_numbers_whole).
        for row in window.formats_panel.rows:
            headline = keep_numbers_whole(row.editor.readout().display)
            assert f"<b>{headline}</b>" in row.summary.text()


@pytest.mark.slow  # a child process that renders the GUI: about half a second
def test_the_command_writes_the_picture_without_noise(tmp_path: Path) -> None:
    out = tmp_path / "formats.png"
    result = run_cli("screenshot", "--out", str(out), "--size", "1024x640", "--value", "0.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {out} (1024x640)\n"
    assert result.stderr == ""  # was: "This plugin does not support propagateSizeHints()"
    assert not QImage(str(out)).isNull()


@pytest.mark.slow  # a child process that renders the GUI: about half a second
def test_a_size_below_the_windows_minimum_is_scaled_not_cut(tmp_path: Path) -> None:
    # The panels scroll, so the window's minimum is small; at 3 device pixels per pixel
    # 320x240 pixels are 107x80 logical ones, below it.
    out = tmp_path / "small.png"
    result = run_cli(
        "screenshot", "--out", str(out), "--size", "320x240", "--value", "0.1",
        QT_SCALE_FACTOR="3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "scaled down to 320x240" in result.stderr  # was: the window's top-left corner
    assert QImage(str(out)).size().toTuple() == (320, 240)


@pytest.mark.slow  # a child process that renders the GUI: a second
def test_training_screenshot_replays_a_run(tmp_path: Path) -> None:
    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.runlog import RunWriter

    run = tmp_path / "run.jsonl"
    with RunWriter(run) as writer:
        for record in synthetic_records(60):
            writer.write(record)
    out = tmp_path / "training.png"
    result = run_cli("screenshot", "--panel", "training", "--run", str(run), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert out.is_file()


@pytest.mark.slow  # child processes: about half a second
def test_bad_screenshot_arguments_get_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, words in (
        (["--size", "big"], "WIDTHxHEIGHT"),
        (["--format", "fp17"], "fp17"),
        (["--value", "1.2.3"], "--value"),
    ):
        result = run_cli("screenshot", "--out", str(tmp_path / "x.png"), *args)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "x.png").exists()


@pytest.mark.slow  # child processes that start the GUI: a second
def test_a_run_file_that_is_not_a_run_log_gets_one_line_and_exit_2(tmp_path: Path) -> None:
    # Was: exit 0 and a picture of an empty panel, its status line full of the file's bytes.
    # Then an empty file and a log of a newer schema were "not a run log" here too, where the
    # panel and `runs check` say what they are.
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 8)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"type": "header", "schema": 99, "config": {}}\n')
    for run, reason in (
        (junk, "not a run log (no header, step or end record in it)"),
        (empty, "empty file (a job that has not written its header yet?)"),
        (newer, "schema 99 is newer than this fpexplorer reads (2): update fpexplorer to read "
         "this run"),
    ):  # fmt: skip
        args = ["--panel", "training", "--training-page", "low", "--run", str(run)]
        result = run_cli("screenshot", "--out", str(tmp_path / "x.png"), *args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"fpexplorer screenshot: error: --run {str(run)!r}: {reason}"
        ]
        assert not (tmp_path / "x.png").exists()


def _write_two_rank_run(folder: Path) -> Path:
    """A merged log and two rank logs, as `train --nproc-per-node 2 --out RUN` writes them."""
    from fpexplorer.training.monitor.ranks import rank_log_path
    from fpexplorer.training.records import (
        EndRecord,
        HeaderRecord,
        ModelInfo,
        RankEnd,
        RankInfo,
        StepRecord,
    )
    from fpexplorer.training.runlog import RunWriter

    merged = folder / "run.jsonl"
    for rank in (None, 0, 1):
        path = merged if rank is None else rank_log_path(merged, rank)
        info = RankInfo(rank=rank or 0, world_size=2, host="node-a", merged=rank is None)
        with RunWriter(path) as writer:
            writer.write(HeaderRecord(config={"task": "mlp"}, model=ModelInfo(), ranks=info))
            for step in range(3):
                writer.write(StepRecord(step=step, loss=1.0 - 0.1 * step, time=0.1 * step))
            ends = tuple(RankEnd(rank=k, status="completed", steps=3) for k in (0, 1))
            writer.write(EndRecord(status="completed", steps=3, ranks=ends if rank is None else ()))
    return merged


def test_a_run_folder_or_a_ranks_log_is_pictured_as_the_merged_run(
    shoot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    # Failed before: the folder was "no such file" and a rank's log "not a run log", though
    # the panel (File > Open Run...) and `fpexplorer runs` open both.
    merged = _write_two_rank_run(tmp_path)
    for given in (tmp_path, tmp_path / "run.rank-1.jsonl"):
        window = shoot("--panel", "training", "--run", str(given))
        runs = window.training_panel.runs
        assert [entry.path for entry in runs] == [merged]
        assert runs[0].model.rank_text == "merged, 2 ranks"
    empty = tmp_path / "empty"
    empty.mkdir()
    from fpexplorer.cli import main

    argv = ["screenshot", "--panel", "training", "--run", str(empty), "--out", "x.png"]
    assert main(argv) == 2
    said = f"--run '{empty}': {empty} holds no run log (no .jsonl file)"
    assert capsys.readouterr().err.strip() == "fpexplorer screenshot: error: " + said


@pytest.mark.slow  # twelve whole windows laid out: half a second each
@pytest.mark.parametrize(
    "formats", [("fp16", "bf16"), ("fp32", "fp16", "bf16"), ("fp32", "fp16", "bf16", "e4m3")]
)
@pytest.mark.parametrize("size", [(1024, 640), (1920, 1080)])
@pytest.mark.parametrize("view", ["number-line", "arithmetic"])  # the shortest, the tallest
def test_each_stacked_editor_is_shown_whole_or_scrolled_to(  # type: ignore[no-untyped-def]
    shoot, formats: tuple[str, ...], size: tuple[int, int], view: str
) -> None:
    # Was: `--format fp16 --format bf16 --size 1024x640` gave the editors' pane 80 px, one
    # editor and a few pixels of the second, which read as an editor squeezed to a sliver.
    from PySide6.QtCore import QPoint, QRect

    arguments = [argument for name in formats for argument in ("--format", name)]
    panel = shoot(*arguments, "--view", view, size=size).formats_panel
    viewport = panel.top_scroll.viewport()
    shown = []
    for row in panel.rows:
        assert row.height() >= row.minimumSizeHint().height(), row.editor.format.name
        rect = QRect(row.mapTo(viewport, QPoint(0, 0)), row.size())
        visible = rect.intersected(viewport.rect())
        # Whole or not at all: the rest of the stack is reached by scrolling.
        assert visible.isEmpty() or visible == rect, (row.editor.format.name, visible, rect)
        if not visible.isEmpty():
            shown.append(row)
    assert len(shown) >= min(len(formats), 2)
    if len(shown) < len(formats):
        assert panel.top_scroll.verticalScrollBar().maximum() > 0
    if size == (1920, 1080):
        assert len(shown) == len(formats)


def test_the_editors_pane_is_as_tall_as_its_editors_where_they_all_fit(shoot) -> None:  # type: ignore[no-untyped-def]
    # Failed before: the pane was sized from the editors' size hints, in which a summary
    # that wraps is measured at a default width (202 px for a 70 px editor), so at
    # 1920x1080 three editors got 396 px, some 170 of them empty above the read-outs.
    arguments = ["--format", "float8_e4m3fn", "fp16", "bf16", "--value", "500", "--view"]
    panel = shoot(*arguments, "number-line", size=(1920, 1080)).formats_panel
    editors = panel.top_content.heightForWidth(panel.top_scroll.viewport().width())
    assert panel.splitter.sizes()[0] <= editors + 4
    assert panel.top_scroll.verticalScrollBar().maximum() == 0  # and every editor shown
