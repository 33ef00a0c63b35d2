"""Failed and degenerate runs in the panel: the window says what happened, no plot is a
blank frame without a reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.runlog import RunWriter


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    with RunWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


def _header() -> dict[str, Any]:
    return next(synthetic_records(1)).to_json()


def test_a_run_that_failed_before_its_first_step_shows_its_error(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    error = "RuntimeError: grad can be implicitly created only for scalar outputs"
    path = _write(
        tmp_path / "failed.jsonl",
        [_header(), {"type": "end", "status": "failed", "error": error, "steps": 0}],
    )
    panel.load_run(path)
    assert "failed" in panel.status_label.text()
    assert error in panel.status_label.text()  # the reason, not only the word "failed"
    reason = "no steps: the run failed before its first step"
    assert panel.loss_plot.empty_note.text == reason
    assert panel.scale_plot.empty_note.text == reason
    assert panel.hist_plot.empty_note.text == reason
    assert panel.heatmap.empty_note.text == reason
    assert panel.hist_plot.what_if_label.text() == f"What-if: {reason}."


def test_a_run_with_statistics_off_says_so(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    header = _header()
    header["config"]["stats_every"] = 0
    steps = [
        {"type": "step", "step": i, "loss": 1.0 / (i + 1), "scale": 1.0, "skipped": False}
        for i in range(5)
    ]
    panel.load_run(_write(tmp_path / "nostats.jsonl", [header, *steps]))
    reason = "statistics were off for this run (stats-every 0)"
    assert panel.loss_plot.empty_note.text is None
    assert panel.hist_plot.empty_note.text == reason
    assert panel.heatmap.empty_note.text == reason
    assert panel.hist_plot.what_if_label.text() == f"What-if: {reason}."


def test_a_nan_storm_says_why_loss_and_histograms_are_empty(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    header = _header()
    nan_hist = {"lo": 0, "counts": [], "zero": 0, "inf": 0, "nan": 12}
    steps = [
        {
            "type": "step",
            "step": i,
            "loss": float("nan"),
            "scale": 65536.0 / 2**i,
            "skipped": True,
            "growth_tracker": 0,
            "lr": 1e-3,
            "grad_norm": float("nan"),
            "steps_per_s": 100.0,
            "time": 0.01 * i,
            "grad_hist": nan_hist,
            "act_hist": {**nan_hist, "dtype": "float16"},
            "first_nonfinite": "head",
            "layers": [
                {
                    "name": "head",
                    "grad_norm": float("nan"),
                    "amax": float("nan"),
                    "headroom_log2": None,
                    "underflow_share": 0.0,
                    "nonfinite": True,
                }
            ],
        }
        for i in range(20)
    ]
    end = {"type": "end", "status": "completed", "error": None, "steps": 20}
    panel.load_run(_write(tmp_path / "nan.jsonl", [header, *steps, end]))
    assert panel.loss_plot.empty_note.text == "no finite loss: all 20 losses are inf or NaN"
    assert panel.scale_plot.empty_note.text is None  # the scale curve is there
    expected = "no finite non-zero gradient: 0 zero, 0 inf, 12 NaN"
    assert panel.hist_plot.empty_note.text == expected
    # The counts are still read out: they are the whole story of this step.
    assert "step 19" in panel.hist_plot.counts_label.text()
    assert "NaN 12" in panel.hist_plot.counts_label.text()
    assert panel.heatmap.empty_note.text == expected
    x_range, _ = panel.heatmap.plot.getPlotItem().getViewBox().viewRange()
    assert x_range[0] >= -1 and 19 <= x_range[1] <= 40  # steps, not pyqtgraph's default
    assert "First non-finite layer: head" in panel.layer_table.first_label.text()


def test_an_empty_note_is_shown_whole_in_a_small_plot(panel, qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At the panel's 1024x640 size the heatmap's view box is a few dozen pixels wide: its
    note, wrapped to that width, was taller than the view that clipped it, and read "no
    finite non-zero gradient:" without the counts. It may use the axes' room too."""
    from PySide6.QtWidgets import QGraphicsItem

    header = _header()
    nan_hist = {"lo": 0, "counts": [], "zero": 698, "inf": 0, "nan": 3784}
    steps = [
        {"type": "step", "step": i, "loss": 0.7, "scale": 1e5, "skipped": True,
         "time": 0.01 * i, "grad_hist": nan_hist}
        for i in range(20)
    ]  # fmt: skip
    panel.load_run(_write(tmp_path / "nan.jsonl", [header, *steps]))
    panel.resize(760, 560)  # the panel's share of a 1024x640 window
    qtbot.wait(20)
    clips = QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape
    for view in (panel.heatmap, panel.hist_plot):
        note = view.empty_note
        assert note.text == "no finite non-zero gradient: 698 zero, 0 inf, 3,784 NaN"
        shown = note.item.textItem.sceneBoundingRect()
        plot_item = note.item.parentItem()
        while plot_item is not None and not plot_item.flags() & clips:
            plot_item = plot_item.parentItem()
        area = view.plot.getPlotItem().sceneBoundingRect()
        if plot_item is not None:  # what clips the note: the whole of it inside
            area = area.intersected(plot_item.sceneBoundingRect())
        assert area.contains(shown), (shown, area)


@pytest.mark.slow  # a panel: a third of a second
def test_plots_with_data_show_no_note(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    for view in (panel.loss_plot, panel.scale_plot, panel.hist_plot, panel.heatmap):
        assert view.empty_note.text is None


@pytest.mark.parametrize(
    ("record", "field", "value"),
    [
        ("step", "loss", 1e308),  # float64's end: the padded view range would be inf
        # A panel each (a third of a second): the fast loop keeps one header and two step
        # cases, CI runs them all.
        pytest.param(  # past a progress bar's int
            "header", "config.growth_interval", 10**30, marks=pytest.mark.slow
        ),
        ("header", "config.device", 10**30),  # a number where the form expects a name
        pytest.param("header", "config.optimizer", 10**30, marks=pytest.mark.slow),
        ("step", "stats.grad_hist.lo", 10**30),  # past int64
        pytest.param(  # negative counts
            "step", "stats.act_hist.counts", [5, -3, 2], marks=pytest.mark.slow
        ),
    ],
)
def test_damaged_values_in_a_run_file_never_raise_in_the_window(
    panel, qtbot, make_run, record: str, field: str, value: object
) -> None:  # type: ignore[no-untyped-def]
    import json

    path = make_run("run.jsonl", steps=20, stats_every=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    target = lines[0] if record == "header" else lines[5]
    *parents, last = field.split(".")
    for key in parents:
        target = target[key]
    target[last] = value
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with qtbot.capture_exceptions() as exceptions:
        panel.load_run(path)
        panel.refresh()
        panel.hist_plot.act_button.setChecked(True)
        panel.refresh()
    assert not exceptions, exceptions
    # A damaged histogram makes its step record malformed: skipped and reported.
    steps = 19 if field.startswith("stats.") else 20
    assert panel.status_label.text().startswith(f"Opened run.jsonl: {steps} steps")


def test_with_no_run_the_format_rulers_are_still_drawn(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"\x00\xffnot json\n")
    panel.load_run(junk)
    # One line naming the file; the damaged bytes only in the tooltip (were: shown, as
    # replacement characters over three wrapped lines).
    assert panel.status_label.text() == (
        "junk.jsonl: not a run log (no header, step or end record in it)"
    )
    assert "line 1" in panel.status_label.toolTip()
    from fpexplorer.gui.training.plots import alarm_colour

    assert alarm_colour() in panel.status_label.styleSheet()  # shown as a problem
    panel.refresh()
    for name, (_thin, thick, _label) in panel.hist_plot._rulers.items():
        x, _y = thick.getData()
        assert x is not None and len(x) == 2 and x[1] > x[0], name


@pytest.mark.slow  # a panel laid out again: a third of a second
def test_files_without_a_run_say_what_they_are_as_runs_check_does(  # type: ignore[no-untyped-def]
    panel, qtbot, tmp_path: Path
) -> None:
    """A log of a newer schema read "not a run log, no run records found (2 line(s) that
    are not records)", and an empty file "not a run log": they are neither. The panel says
    what `runs check` says, in one line; a run of an end record alone opens."""
    newer = tmp_path / "newer.jsonl"
    records = [{"type": "header", "schema": 99, "config": {}},
               {"type": "step", "step": 0, "loss": 1.0}]  # fmt: skip
    newer.write_text("".join(json.dumps(r) + "\n" for r in records))
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    ended = tmp_path / "ended.jsonl"
    ended.write_text(json.dumps({"type": "end", "status": "failed", "steps": 0}) + "\n")
    for in_background in (False, True):
        with qtbot.capture_exceptions() as exceptions:
            panel.load_run(newer, in_background=in_background)
            qtbot.waitUntil(lambda: not panel.loading)
            assert panel.status_label.text() == (
                "newer.jsonl: schema 99 is newer than this fpexplorer reads (2): update "
                "fpexplorer to read this run"
            )
            panel.load_run(empty, in_background=in_background)
            qtbot.waitUntil(lambda: not panel.loading)
            assert panel.status_label.text() == (
                "empty.jsonl: empty file (a job that has not written its header yet?)"
            )
        assert not exceptions, exceptions
        assert panel.runs == []
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"type":"header","schema":2,"conf')  # killed writing its header
    panel.load_run(cut)
    assert panel.status_label.text() == (
        "cut.jsonl: its only line is a record cut short (a job killed while writing its header?)"
    )
    panel.load_run(ended)
    assert panel.status_label.text().startswith("Opened ended.jsonl: 0 steps, failed.")
    assert len(panel.runs) == 1


@pytest.mark.slow  # a panel laid out again: a third of a second
def test_the_device_choice_is_not_clipped_in_the_form(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QFontMetrics

    panel.window().resize(1280, 800)  # the screenshot's size
    qtbot.waitUntil(lambda: panel.form.device_combo.width() > 0)
    combo = panel.form.device_combo
    combo.setCurrentIndex(combo.findData("auto"))
    text_width = QFontMetrics(combo.font()).horizontalAdvance(combo.currentText())
    assert text_width + 30 <= combo.width(), (combo.currentText(), combo.width())
    assert "CUDA when available" in combo.toolTip()


@pytest.mark.slow  # a panel and a wide list redrawn: about half a second
def test_a_run_name_too_long_for_the_list_is_in_its_tooltip(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    item = panel.run_list.item(0)
    assert item.toolTip() == item.text() and "synthetic fp16" in item.toolTip()


@pytest.mark.slow  # a panel: a third of a second
def test_a_negative_zero_magnitude_reads_zero_in_the_layer_table(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layer = {"name": "fc", "grad_norm": -0.0, "amax": -0.0, "headroom_log2": None,
             "underflow_share": 1.0, "nonfinite": False}  # fmt: skip
    zeros = {"lo": 0, "counts": [], "zero": 4, "inf": 0, "nan": 0, "dtype": "float16"}
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False,
            "act_hist": zeros, "layers": [layer]}  # fmt: skip
    panel.load_run(_write(tmp_path / "zero.jsonl", [_header(), step]))
    panel.refresh()
    cells = [panel.layer_table.table.item(0, column).text() for column in (1, 2)]
    assert cells == ["0", "0"]


def test_a_killed_runs_torn_last_line_is_incomplete_not_a_problem(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    """A job killed while writing leaves whole records and a torn last line: `runs check`
    calls that incomplete, not damage; the panel listed it as "Problems: line N: torn last
    line ignored". Damage beside it is still named."""
    lines = make_run("whole.jsonl", steps=20).read_bytes().splitlines(keepends=True)
    killed = make_run("killed.jsonl", steps=1)
    killed.write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    panel.load_run(killed)
    assert panel.status_label.text() == (
        "Opened killed.jsonl: 19 steps, incomplete (the job was killed while writing its "
        "last line, which is ignored)."
    )
    damaged = make_run("damaged.jsonl", steps=1)
    damaged.write_bytes(
        b"".join(lines[:3]) + b"garbage\n" + killed.read_bytes()[len(b"".join(lines[:3])) :]
    )
    panel.load_run(damaged)
    text = panel.status_label.text()
    assert text.startswith("Opened damaged.jsonl: 19 steps, incomplete (the job was killed")
    assert text.endswith("Problems: line 4: not a record (Expecting value): 'garbage'")
