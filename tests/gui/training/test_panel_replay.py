"""The panel with recorded runs: replay, torn files, overlays, export, the form, the code view."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication

from fpexplorer.training.config import TrainConfig


def _curve_points(plot_view, key: int) -> int:  # type: ignore[no-untyped-def]
    x, _y = plot_view.curves.curves[key].getData()
    return 0 if x is None else len(x)


def test_replay_fills_every_view(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    entry = panel.current_run
    assert entry is not None and entry.model.steps_seen == 300
    assert _curve_points(panel.loss_plot, entry.key) > 200  # the NaN-loss skips left out
    assert _curve_points(panel.scale_plot, entry.key) == 300
    skip_x, _ = panel.scale_plot.skips.getData()
    assert list(skip_x) == [96, 193, 290]
    assert len(panel.hist_plot.bars.opts["height"]) > 10
    assert panel.heatmap.image.image is not None and panel.heatmap.image.image.shape[1] > 10
    assert panel.layer_table.table.rowCount() == 6
    assert "First non-finite layer: head" in panel.layer_table.first_label.text()
    assert panel.memory.table.rowCount() >= 4
    assert "Opened synthetic.jsonl: 300 steps, completed" in panel.status_label.text()
    assert panel.hist_plot.last_what_if is not None


@pytest.mark.slow  # a panel: a third of a second
def test_histogram_switches_to_activation_gradients(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    grad_total = panel.hist_plot.current_histogram().total
    panel.hist_plot.act_button.setChecked(True)
    panel.refresh()
    assert panel.hist_plot.current_histogram().dtype == "float16"
    assert panel.hist_plot.current_histogram().total != grad_total
    assert "(float16)" in panel.hist_plot.counts_label.text()


def test_what_if_control_reads_off_underflow(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    panel.hist_plot.scale_spin.setValue(-30)
    low = panel.hist_plot.last_what_if
    panel.hist_plot.scale_spin.setValue(16)
    high = panel.hist_plot.last_what_if
    assert low is not None and high is not None
    assert low.underflow > high.underflow
    assert "underflow" in panel.hist_plot.what_if_label.text()
    # The FP16 window on the plot moved with the scale.
    assert panel.hist_plot.fp16_window.getRegion()[0] != -24


def test_torn_last_line_is_ignored_and_reported(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    lines = synthetic_run.read_bytes().splitlines(keepends=True)
    torn = synthetic_run.with_name("torn.jsonl")
    # The job was killed while writing step 150: no end record, half a line.
    torn.write_bytes(b"".join(lines[:150]) + lines[150][: len(lines[150]) // 2])
    panel.load_run(torn)
    entry = panel.current_run
    assert entry is not None
    assert entry.model.steps_seen == 149
    assert entry.model.end is None
    assert any("torn" in problem for problem in entry.model.problems)
    assert "torn" in panel.status_label.text()
    assert _curve_points(panel.scale_plot, entry.key) == 149


def test_a_file_that_is_not_a_run_leaves_the_panel_as_it_was(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"\x00\xffnot json\n")
    panel.load_run(junk)
    panel.load_run(tmp_path / "missing.jsonl")
    assert panel.runs == []
    assert "missing.jsonl" in panel.status_label.text()


def test_a_run_opened_again_is_read_again_and_listed_once(panel, make_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Was: each File > Open of the same file added another entry (and another colour),
    # and the first kept the steps read the first time.
    other = make_run("other.jsonl", steps=10, seed=2)
    path = make_run("a.jsonl", steps=20)
    panel.load_run(path)
    panel.load_run(other)
    make_run("a.jsonl", steps=40)  # the file grew (rewritten) since
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    panel.load_run(link)  # the same file under another name
    assert [entry.path.name for entry in panel.runs] == ["other.jsonl", "link.jsonl"]
    assert panel.runs[1].model.steps_seen == 40  # read again, not the first reading
    assert panel.current_run is panel.runs[1]
    assert panel.run_list.count() == 2
    panel.load_run(path)
    assert len(panel.runs) == 2 and panel.runs[1].model.steps_seen == 40
    # The running job's own log is shown as it grows: opening it selects that entry.
    from fpexplorer.gui.training.run_model import RunModel

    job_log = make_run("job.jsonl", steps=5)
    live = panel._add_run(RunModel(), job_log, live=True)
    panel.run_list.setCurrentRow(0)
    panel.load_run(job_log)
    assert len(panel.runs) == 3 and panel.current_run is live
    assert "running job" in panel.status_label.text()


@pytest.mark.slow  # a panel and two runs drawn: about half a second
def test_two_runs_overlaid_named_by_their_settings(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    first = make_run("a.jsonl", steps=200, precision="fp16")
    second = make_run("b.jsonl", steps=120, precision="bf16", seed=4)
    panel.load_run(first)
    panel.load_run(second)
    keys = [entry.key for entry in panel.runs]
    assert len(keys) == 2
    assert _curve_points(panel.loss_plot, keys[0]) > 0
    assert _curve_points(panel.loss_plot, keys[1]) > 0
    assert _curve_points(panel.scale_plot, keys[0]) == 200
    assert _curve_points(panel.scale_plot, keys[1]) == 120
    names = [panel.run_list.item(row).text() for row in range(panel.run_list.count())]
    assert names[0].startswith("synthetic fp16") and names[1].startswith("synthetic bf16")
    assert "seed=4" in names[1]
    # Unticking a run hides its curves; selecting the first shows its histograms.
    panel.run_list.item(1).setCheckState(panel.run_list.item(1).checkState().Unchecked)
    panel.run_list.setCurrentRow(0)
    panel.refresh()
    assert keys[1] not in panel.loss_plot.curves.curves  # no curve, no legend entry
    assert len(panel.loss_plot.curves.legend_names) == 1
    assert panel.current_run.key == keys[0]


@pytest.mark.slow  # a panel and two runs: a third of a second
def test_overlaid_runs_with_the_same_name_are_told_apart(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    # An fp16 comparison of two growth intervals: task, precision, lr and seed coincide.
    panel.load_run(make_run("g200.jsonl", steps=50, growth_interval=200))
    panel.load_run(make_run("g50.jsonl", steps=50, growth_interval=50))
    panel.load_run(make_run("g50-again.jsonl", steps=50, growth_interval=50))
    panel.refresh()
    names = [panel.run_list.item(row).text() for row in range(panel.run_list.count())]
    assert "growth_interval=200" in names[0] and "growth_interval=50" in names[1]
    assert len({name.split(" — ")[0] for name in names}) == 3, names
    legend = {key: curve.name() for key, curve in panel.loss_plot.curves.curves.items()}
    assert len(set(legend.values())) == 3, legend


@pytest.mark.slow  # renders and writes every plot: about half a second
def test_export_writes_png_svg_and_csv(panel, synthetic_run: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    written = panel.export_to(tmp_path / "export")
    suffixes = sorted(path.suffix for path in written)
    assert suffixes.count(".png") == 4 and suffixes.count(".svg") == 4
    for path in written:
        assert path.stat().st_size > 500, path
    pngs = [path for path in written if path.suffix == ".png"]
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in pngs)
    assert all(b"<svg" in path.read_bytes()[:2000] for path in written if path.suffix == ".svg")
    (csv_path,) = [path for path in written if path.suffix == ".csv"]
    with open(csv_path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][:3] == ["step", "loss", "scale"]
    assert len(rows) == 301
    assert rows[97][1] == "nan" and rows[97][3] == "1"  # step 96 overflowed: skipped


def test_form_refuses_invalid_values_at_the_field(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    form = panel.form
    assert panel.start_button.isEnabled()
    form.fields["steps"].edit.setText("ten")
    assert form.fields["steps"].error.isVisibleTo(form)
    assert "not a whole number" in form.fields["steps"].error.text()
    assert not panel.start_button.isEnabled()
    form.fields["steps"].edit.setText("10")
    form.fields["batch_size"].edit.setText("1.5")  # optional, but whole when given
    assert form.fields["batch_size"].error.text() == "“1.5” is not a whole number"
    form.fields["batch_size"].edit.setText("")
    form.fields["seed"].edit.setText(str(2**64))  # torch cannot take it: refused here
    assert "the seed must be" in form.fields["seed"].error.text()
    assert not panel.start_button.isEnabled()
    form.fields["seed"].edit.setText("0")
    form.fields["growth_factor"].edit.setText("0.5")
    assert "greater than 1" in form.fields["growth_factor"].error.text()
    assert not panel.start_button.isEnabled()
    form.fields["growth_factor"].edit.setText("2")
    form.task_combo.setCurrentText("no_such_task")
    assert form.task_error.isVisibleTo(form)
    assert not panel.start_button.isEnabled()
    assert not panel.start_job()
    assert "Cannot start" in panel.status_label.text()
    form.task_combo.setCurrentText("mlp")
    assert panel.start_button.isEnabled()
    assert form.config() == TrainConfig(steps=10)


def test_device_list_says_what_was_found(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: "looking" not in panel.form.device_note.text(), timeout=10_000)
    note = panel.form.device_note.text()
    cuda_items = [
        panel.form.device_combo.itemData(i)
        for i in range(panel.form.device_combo.count())
        if str(panel.form.device_combo.itemData(i)).startswith("cuda")
    ]
    assert ("CPU only" in note and not cuda_items) or ("CUDA device" in note and cuda_items)


def test_code_view_follows_the_form_and_copies(panel) -> None:  # type: ignore[no-untyped-def]
    panel.form.precision_combo.setCurrentText("bf16")
    assert "torch.bfloat16" in panel.code_view.toPlainText()
    panel.form.precision_combo.setCurrentText("fp16")
    panel.form.fields["init_scale"].edit.setText("1024")
    code = panel.code_view.toPlainText()
    assert "GradScaler" in code and "init_scale=1024.0" in code
    panel.copy_button.click()
    assert QGuiApplication.clipboard().text() == code


def test_file_actions_for_the_main_window(panel) -> None:  # type: ignore[no-untyped-def]
    names = [action.text() for action in panel.file_actions()]
    assert names == ["Open Run…", "Open Run Folder…", "Overlay Each Rank", "Export Plots and CSV…"]


RECORDED_RUN = Path(__file__).parent / "data" / "overflow-fp16.jsonl"


@pytest.mark.slow  # a panel: a third of a second
def test_replay_of_a_recorded_fp16_overflow_run(panel) -> None:  # type: ignore[no-untyped-def]
    """A real run (`fpexplorer train --task overflow --precision fp16 --steps 240
    --stats-every 2`): the scale backs off on overflow and the culprit layer is named."""
    panel.load_run(RECORDED_RUN)
    entry = panel.current_run
    model = entry.model
    assert model.status == "completed" and model.steps_seen == 240
    assert model.skipped_count > 0
    assert model.first_nonfinite_event is not None
    layer = model.first_nonfinite_event.first_nonfinite
    assert f"First non-finite layer: {layer}" in panel.layer_table.first_label.text()
    # Where it started: the feed-forward's input projection overflowed in the forward pass.
    assert model.first_nonfinite_event.first_nonfinite_forward == "0.wi"
    assert "forward pass at 0.wi" in panel.layer_table.first_label.text()
    _, scales = panel.scale_plot.curves.curves[entry.key].getData()
    assert scales[0] == 16 and scales[-1] < 16  # log2: from 2^16 down after the overflows
    skip_x, _ = panel.scale_plot.skips.getData()
    assert len(skip_x) == model.skipped_count
    # The form now holds the run's settings, ready to run it again.
    assert panel.form.task_combo.currentText() == "overflow"
    assert panel.form.fields["steps"].edit.text() == "240"
    assert panel.form.config().precision == "fp16"


@pytest.mark.slow  # a large run file: about a second
def test_a_large_run_file_is_read_in_pieces(panel, qtbot, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    monkeypatch.setattr(panel_module, "SYNC_LOAD_BYTES", 10_000)  # make this file "large"
    path = make_run("large.jsonl", steps=400, stats_every=1)
    with qtbot.waitSignal(panel.run_loaded, timeout=30_000):
        panel.load_run(path)
        assert panel.loading  # returned at once; the timer reads the rest
    assert not panel.loading
    model = panel.current_run.model
    assert model.steps_seen == 400 and model.status == "completed"
    assert "Opened large.jsonl: 400 steps, completed" in panel.status_label.text()


@pytest.mark.slow  # a large run file: about half a second
def test_finish_loading_reads_a_large_file_to_its_end_at_once(panel, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # What `fpexplorer screenshot` calls before it renders: the picture shows the whole run.
    from fpexplorer.gui.training import panel as panel_module

    monkeypatch.setattr(panel_module, "SYNC_LOAD_BYTES", 10_000)
    path = make_run("large.jsonl", steps=400, stats_every=1)
    panel.load_run(path)
    assert panel.loading
    panel.finish_loading()
    assert not panel.loading
    model = panel.current_run.model
    assert model.steps_seen == 400 and model.status == "completed"
    assert "Opened large.jsonl: 400 steps, completed" in panel.status_label.text()
    assert len(panel.runs) == 1


@pytest.mark.slow  # a panel and a drag through redraws: about half a second
def test_what_if_band_can_be_dragged(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    hist = panel.hist_plot
    lo, _hi = hist.fp16_window.getRegion()
    hist.fp16_window.setRegion((lo - 5, lo + 35))  # five binades left: a scale 2^5 larger
    hist.fp16_window.sigRegionChangeFinished.emit(hist.fp16_window)
    assert hist.last_what_if is not None
    assert hist.scale_spin.value() == hist.last_what_if.log2_scale
    assert hist.fp16_window.getRegion()[0] == pytest.approx(lo - 5)


@pytest.mark.slow  # a panel and two runs: a third of a second
def test_skipped_step_is_in_the_legend_only_when_a_run_skipped(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    legend = panel.scale_plot.curves.legend
    panel.load_run(make_run("clean.jsonl", steps=50, overflow_every=1000))
    assert legend.getLabel(panel.scale_plot.skips) is None
    panel.load_run(make_run("skips.jsonl", steps=50, overflow_every=20))
    assert legend.getLabel(panel.scale_plot.skips) is not None


def test_a_run_of_one_step_reads_1_step(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("one.jsonl", steps=1))
    assert "Opened one.jsonl: 1 step, completed" in panel.status_label.text()  # "1 steps"
