"""Opening run files from the File menu never reads them on the GUI thread in one go.

A run file of a few MB took most of a second to read before `load_run` returned, and five
hundred files chosen at once in File ▸ Open Run… froze the window for about a minute (each
file read at once, then a redraw of every run listed, per file). These tests hold the
mechanism: files opened from the menu are read in pieces between turns of the event loop,
all of them together within one budget per turn, and the plots follow on the redraw
timer, not once per file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a panel each


def _count_refreshes(panel, monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    calls: list[int] = []
    original = panel.refresh

    def counted(*args: object, **kwargs: object) -> None:
        calls.append(1)
        original(*args, **kwargs)

    monkeypatch.setattr(panel, "refresh", counted)
    return calls


def test_open_dialog_reads_even_a_small_file_in_pieces(panel, qtbot, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    path = make_run("small.jsonl", steps=300)
    monkeypatch.setattr(
        panel_module.QFileDialog, "getOpenFileNames", lambda *_a, **_k: ([str(path)], "")
    )
    with qtbot.waitSignal(panel.run_loaded, timeout=30_000):
        panel._on_open_triggered()
        # Returned before reading: the run is listed, its records follow on the timer.
        assert panel.loading
        assert panel.current_run.model.steps_seen == 0
    model = panel.current_run.model
    assert model.steps_seen == 300 and model.status == "completed"
    assert "Opened small.jsonl: 300 steps, completed" in panel.status_label.text()


def test_open_folder_reads_in_pieces(panel, qtbot, make_run, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    make_run("only.jsonl", steps=50)
    monkeypatch.setattr(
        panel_module.QFileDialog, "getExistingDirectory", lambda *_a, **_k: str(tmp_path)
    )
    with qtbot.waitSignal(panel.run_loaded, timeout=30_000):
        panel._on_open_folder_triggered()
        assert panel.loading
    assert panel.current_run.model.steps_seen == 50


def test_files_read_together_share_one_budget_per_turn(panel, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    monkeypatch.setattr(panel_module, "REPLAY_BUDGET_S", 0.0)  # a turn reads one piece
    paths = [make_run(f"run{i}.jsonl", steps=300) for i in range(3)]
    for path in paths:
        panel.load_run(path, in_background=True)
    panel.replay_timer.stop()  # turns driven by hand below
    panel._advance_replays_now()
    started = [replay.bytes_read > 0 for replay, _entry in panel._replays]
    assert started == [True, False, False]  # the others wait for later turns
    assert "2 more files to read" in panel.status_label.text()
    panel.finish_loading()
    assert [entry.model.steps_seen for entry in panel.runs] == [300, 300, 300]


def test_files_read_in_pieces_leave_the_redraw_to_the_timer(panel, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    paths = [make_run(f"run{i}.jsonl", steps=60) for i in range(5)]
    for path in paths:
        panel.load_run(path, in_background=True)
    panel.replay_timer.stop()
    refreshes = _count_refreshes(panel, monkeypatch)
    while panel.loading:
        panel._advance_replays_now()
    assert refreshes == []  # not one redraw of every run per file read
    assert len(panel.runs) == 5 and all(e.model.steps_seen == 60 for e in panel.runs)
    panel._on_timer_timeout()
    assert len(refreshes) == 1  # the timer's redraw shows them all


def test_redraws_slow_down_while_files_are_read(panel, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    monkeypatch.setattr(panel_module, "LOADING_REDRAW_INTERVAL_S", 1e9)
    monkeypatch.setattr(panel_module, "REPLAY_BUDGET_S", 0.0)  # a turn reads one piece
    panel.load_run(make_run("run.jsonl", steps=300), in_background=True)
    panel.replay_timer.stop()
    panel.refresh()
    refreshes = _count_refreshes(panel, monkeypatch)
    panel._advance_replays_now()
    assert panel.loading and panel.current_run.model.steps_seen > 0
    panel._on_timer_timeout()
    assert refreshes == []  # the run changed, but a redraw is not due while loading
    panel.finish_loading()
    refreshes.clear()
    panel._layout_dirty = True
    panel._on_timer_timeout()
    assert len(refreshes) == 1  # loaded: the usual pace again


def test_of_many_files_opened_at_once_the_first_is_shown(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    paths = [make_run(f"run{i}.jsonl", steps=40 + i) for i in range(3)]
    for path in paths:
        panel.load_run(path, in_background=True)
    assert panel.current_run is panel.runs[0]  # one selection, not one per file
    panel.finish_loading()
    assert panel.current_run.model.steps_seen == 40
