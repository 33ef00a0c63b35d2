"""The training panel tells the truth about a run and keeps comparisons readable (Qt)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.gui.training.view_model import number_text
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.records import from_schema1_dict
from fpexplorer.training.runlog import RunWriter


def _write(path: Path, records: list[Any]) -> Path:
    with RunWriter(path) as writer:
        for record in records:
            writer.write(from_schema1_dict(record) if isinstance(record, dict) else record)
    return path


def _header(**config: Any) -> dict[str, Any]:
    header = next(synthetic_records(1)).to_json()
    header["config"].update(config)
    return header


def test_selecting_a_run_shows_its_settings_in_the_form_and_the_code(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("a.jsonl", steps=20, precision="fp16", seed=3))
    panel.load_run(make_run("b.jsonl", steps=20, precision="bf16", seed=9))
    assert panel.form.precision_combo.currentText() == "bf16"
    panel.run_list.setCurrentRow(0)  # the user selects the first run
    # Was: the form and the code kept the last-opened run's settings, so Start re-ran it.
    assert panel.form.precision_combo.currentText() == "fp16"
    assert panel.form.fields["seed"].edit.text() == "3"
    assert "GradScaler" in panel.code_view.toPlainText()
    panel.run_list.setCurrentRow(1)
    assert panel.form.fields["seed"].edit.text() == "9"
    assert "torch.bfloat16" in panel.code_view.toPlainText()


def test_steps_beyond_what_the_engine_holds_are_refused_at_the_field(panel) -> None:  # type: ignore[no-untyped-def]
    panel.form.fields["steps"].edit.setText(str(2**63))
    assert "steps" in panel.form.problems()
    assert not panel.start_button.isEnabled()
    # Summarized beside Start (the field may be scrolled out of view).
    assert panel.start_problems.isVisibleTo(panel)
    assert panel.start_problems.text() == "Fix 1 field: Steps"
    panel.form.fields["steps"].edit.setText(str(2**31))  # QProgressBar's int32 is no limit
    assert panel.form.problems() == {}
    assert not panel.start_problems.isVisibleTo(panel)
    panel.form.fields["init_scale"].edit.setText("1e39")  # inf in GradScaler's float32
    assert "init_scale" in panel.form.problems()


def test_a_batch_larger_than_the_tasks_dataset_is_refused_at_the_field(panel) -> None:  # type: ignore[no-untyped-def]
    # Was: Start, a few seconds of torch, then "job failed: TaskSettingsError: ...".
    form = panel.form
    form.task_combo.setCurrentText("mlp")
    form.fields["batch_size"].edit.setText("5000")
    said = "the batch size 5000 is larger than the mlp task's dataset (2048 samples)"
    assert form.problems() == {"batch_size": said}
    assert not panel.start_button.isEnabled()
    assert panel.start_problems.text() == "Fix 1 field: Batch size"
    assert form.fields["batch_size"].error.text() == said
    form.task_combo.setCurrentText("overflow")  # 8192 samples: the same batch fits
    assert form.problems() == {} and panel.start_button.isEnabled()
    assert not form.fields["batch_size"].error.isVisibleTo(form)


def test_progress_of_a_run_longer_than_int32_never_raises(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path / "long.jsonl", [_header(steps=2**40)])
    from fpexplorer.gui.training.run_model import RunModel

    model = RunModel()
    model.add_records([from_schema1_dict(_header(steps=2**40))])
    model.add_records([from_schema1_dict({"type": "step", "step": 2**35, "loss": 1.0})])
    panel._live = panel._add_run(model, path, live=True)
    panel._refresh_progress()  # raised OverflowError from setRange (35 times a second)
    assert panel.progress.value() == 31  # thousandths: 2**35 / 2**40
    assert panel.progress.format().startswith(f"{2**35 + 1}/{2**40} steps")


def test_a_redraw_failure_is_reported_once_not_on_every_tick(panel, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    calls = []

    def broken(readouts: bool = True) -> None:
        calls.append(readouts)
        raise OverflowError("Python int too large to convert to C int")

    monkeypatch.setattr(panel, "refresh", broken)
    for _ in range(5):
        panel._layout_dirty = True
        panel._on_timer_timeout()  # must not raise
    assert len(calls) == 5
    assert panel.status_label.text() == (
        "Could not redraw: OverflowError: Python int too large to convert to C int"
    )
    assert len([r for r in caplog.records if "redraw failed" in r.getMessage()]) == 1


def test_a_replay_tick_that_fails_stops_reading_and_says_so(panel, make_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module
    from fpexplorer.gui.training.replay import RunFileReplay

    monkeypatch.setattr(panel_module, "SYNC_LOAD_BYTES", 1000)  # read in pieces
    panel.load_run(make_run("big.jsonl", steps=200))
    assert panel.loading

    def broken(self: object, budget: float | None = None) -> bool:
        raise MemoryError("no room")

    monkeypatch.setattr(RunFileReplay, "advance", broken)
    panel._advance_replays()  # must not raise (was: raised on every idle turn)
    panel._advance_replays()
    assert not panel.loading and not panel.replay_timer.isActive()
    assert panel.status_label.text() == "Could not read the run file: MemoryError: no room"


@pytest.mark.slow  # a panel laid out again: a third of a second
def test_a_run_file_cannot_widen_the_window(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    panel.refresh()
    before = panel.minimumSizeHint().width()
    huge = 10**308
    header = _header(steps=huge * 10, task="t" * 5000, seed=huge)
    layer = {"name": "x" * 3000, "grad_norm": 1.0, "amax": 1e300, "headroom_log2": None,
             "underflow_share": 0.0, "nonfinite": True}  # fmt: skip
    step = {"type": "step", "step": 2**60, "loss": 1e308, "scale": 1e300, "skipped": True,
            "steps_per_s": 1e300, "grad_hist": {"lo": 0, "counts": [1], "dtype": "y" * 900},
            "layers": [layer], "first_nonfinite": "z" * 4000}  # fmt: skip
    end = {"type": "end", "status": "failed", "error": "e" * 20000}
    panel.load_run(_write(tmp_path / ("n" * 200 + ".jsonl"), [header, step, end]))
    panel.refresh()
    # Was: a 309-digit label widened the window to 2944 px for good.
    assert panel.minimumSizeHint().width() <= before
    for label in (panel.status_label, panel.layer_table.first_label, panel.memory.throughput):
        assert len(label.text()) <= 420, label.text()[:80]
    assert len(panel.run_list.item(0).text()) < 100


@pytest.mark.slow  # a panel laid out again: a third of a second
def test_the_training_tab_is_usable_at_1024x640(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    # The tab's share of a 1024x640 window (menu bar, tab bar and status bar take ~90 px).
    assert panel.minimumSizeHint().width() <= 1024
    assert panel.minimumSizeHint().height() <= 550
    panel.resize(1024, 550)
    QApplication.processEvents()
    panel.refresh()
    for widget in (panel.start_button, panel.stop_button, panel.layer_table.table):
        assert not widget.visibleRegion().isEmpty(), widget
    for plot in (panel.loss_plot.plot, panel.scale_plot.plot, panel.hist_plot.plot):
        # A graphics view shows through its viewport.
        assert not plot.viewport().visibleRegion().isEmpty()
        assert plot.width() >= 150 and plot.height() >= 80, plot.size()


@pytest.mark.slow  # a panel and many runs drawn: about half a second
def test_legend_sits_outside_the_data_and_never_changes_a_range(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    for index in range(8):
        panel.load_run(make_run(f"r{index}.jsonl", steps=100, seed=index))
    panel.refresh()
    QApplication.processEvents()  # the plot lays its legend out
    (_x, (y_lo, y_hi)) = panel.scale_plot.plot.getPlotItem().getViewBox().viewRange()
    # Was: with 8 runs the loss-scale axis went to 2^500 to make room for the legend.
    assert y_hi <= 16 + 2 and y_lo >= 16 - 2, (y_lo, y_hi)
    (_x, (_loss_lo, loss_hi)) = panel.loss_plot.plot.getPlotItem().getViewBox().viewRange()
    top = max(float(run.model.scalars.column("loss").max()) for run in panel.runs)
    assert loss_hi <= top * 1.2
    assert len(panel.loss_plot.curves.legend_names) == 8
    assert panel.loss_plot.curves.legend.isVisible()
    legend = panel.loss_plot.curves.legend
    view = panel.loss_plot.plot.getPlotItem().getViewBox()
    assert not legend.sceneBoundingRect().intersects(view.sceneBoundingRect())


@pytest.mark.slow  # a panel: a third of a second
def test_x_axes_are_linked_and_hover_reads_values(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("a.jsonl", steps=100))
    panel.refresh()
    # One run is named in the run list: its plots keep the legend's height.
    assert not panel.loss_plot.curves.legend.isVisible()
    panel.loss_plot.plot.getPlotItem().getViewBox().setXRange(10, 20, padding=0)
    for plot in (panel.scale_plot.plot, panel.heatmap.plot):
        (x_lo, x_hi), _y = plot.getPlotItem().getViewBox().viewRange()
        assert (x_lo, x_hi) == pytest.approx((10, 20))
    panel.loss_plot.hover.show_at(42.7)
    loss = panel.runs[0].model.scalars.column("loss")[42]
    text = panel.loss_plot.hover.text
    assert text is not None and text.startswith("step 42\n") and f"{loss:.4g}" in text
    panel.scale_plot.hover.show_at(42.0)
    assert panel.scale_plot.hover.text is not None and "2^16" in panel.scale_plot.hover.text


@pytest.mark.slow  # a panel redrawn at several settings: about half a second
def test_smoothing_and_markers_on_the_loss_plot(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("a.jsonl", steps=60, overflow_every=25, stats_every=1))
    panel.refresh()
    key = panel.runs[0].key
    _x, raw = panel.loss_plot.curves.curves[key].getData()
    panel.loss_plot.smooth_spin.setValue(0.9)
    _x, smooth = panel.loss_plot.curves.curves[key].getData()
    assert len(smooth) == len(raw) and (abs(smooth - raw) > 0).any()
    # The hover reads the recorded loss, and says it is not the smoothed curve.
    panel.loss_plot.hover.show_at(10.0)
    text = panel.loss_plot.hover.text
    assert text is not None and text.startswith("step 10 (recorded, not smoothed)\n")
    assert number_text(float(raw[10])) in text  # the app's notation, not "%.4g"
    assert [line.value() for line in panel.loss_plot.markers.lines] == [24, 24]
    texts = [line.label.toPlainText() for line in panel.loss_plot.markers.lines]
    assert texts == ["first NaN loss", "first inf/NaN: layer head"]


@pytest.mark.slow  # a panel and several runs drawn: about half a second
def test_run_list_text_has_no_colour_of_its_own(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    panel.load_run(synthetic_run)
    # Was: black text set on every entry, unreadable on the dark theme's grey.
    assert panel.run_list.item(0).data(Qt.ItemDataRole.ForegroundRole) is None


@pytest.mark.slow  # renders and writes every plot: about half a second
def test_exports_use_the_screen_fonts(panel, synthetic_run: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QImage

    from fpexplorer.gui.training.export import caption_height

    panel.load_run(synthetic_run)
    written = panel.export_to(tmp_path / "export")
    svg = (tmp_path / "export" / "loss.svg").read_text()
    families = set(re.findall(r'font-family="([^"]+)"', svg))
    axis_font = panel.loss_plot.plot.getPlotItem().getAxis("bottom").style["tickFont"]
    screen_family = (axis_font or panel.loss_plot.plot.font()).family()
    assert families == {screen_family}, families
    png = QImage(str(tmp_path / "export" / "loss.png"))
    plot = panel.loss_plot.plot
    # Twice the screen's pixels, the caption (title, run) above the plot.
    caption = panel._main_plots()["loss"][1]
    height = plot.height() + caption_height(plot, caption)
    assert (png.width(), png.height()) == (2 * plot.width(), 2 * height)
    assert len(written) == 9


@pytest.mark.slow  # a panel drawn in a theme: about half a second each
@pytest.mark.parametrize("theme_name", ["light", "dark"])
def test_alarm_texts_read_on_both_themes(panel, tmp_path: Path, theme_name: str) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QColor

    from fpexplorer.gui import theme

    steps = [{"type": "step", "step": 0, "loss": math.nan, "scale": 1.0, "skipped": False,
              "grad_hist": {"lo": 0, "counts": [], "nan": 5},
              "layers": [{"name": "fc", "amax": math.nan, "nonfinite": True}],
              "first_nonfinite": "fc"}]  # fmt: skip
    original = QApplication.palette()
    palette = theme.dark_palette() if theme_name == "dark" else theme.light_palette()
    QApplication.setPalette(palette)
    try:
        panel.load_run(_write(tmp_path / "nan.jsonl", [_header(precision="bf16"), *steps]))
        panel.refresh()
        label = panel.layer_table.first_label
        assert label.text().startswith("First non-finite layer: fc (step 0")
        # Was: dark red #c00000 on the dark theme's grey (about 2.4:1).
        colour = re.search(r"color: (#[0-9a-f]{6})", label.styleSheet())
        assert colour is not None, label.styleSheet()
        for background in theme.text_backgrounds(palette):
            ratio = theme.contrast_ratio(QColor(colour.group(1)), background)
            assert ratio >= theme.MIN_CONTRAST, (colour.group(1), background.name(), ratio)
        item = panel.layer_table.table.item(0, 0)
        for background in theme.text_backgrounds(palette):
            assert theme.contrast_ratio(item.foreground().color(), background) >= 4.5
    finally:
        QApplication.setPalette(original)


@pytest.mark.slow  # a panel and two layouts drawn: about half a second
def test_plots_side_by_side_show_the_same_steps(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    # The step axes are copied, not lined up on screen (pyqtgraph's setXLink aligns linked
    # views by their screen position, which is meant for plots stacked in one column).
    panel.resize(1280, 760)
    for index in range(3):
        panel.load_run(make_run(f"r{index}.jsonl", steps=300, seed=index))
    for _ in range(2):
        panel.refresh()
        QApplication.processEvents()
    loss_x = panel.loss_plot.plot.getPlotItem().getViewBox().viewRange()[0]
    assert loss_x == pytest.approx([0, 300])
    for plot in (panel.scale_plot.plot, panel.heatmap.plot):
        assert plot.getPlotItem().getViewBox().viewRange()[0] == pytest.approx(loss_x)


@pytest.mark.slow  # a panel and several runs drawn: about half a second
def test_histogram_rulers_follow_the_formats_the_run_reports(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The header's values are deliberately off: the rulers come from the exact engine.
    bogus = {"max": 1.0, "min_normal": 0.5, "min_subnormal": 0.25}
    header = _header()
    header["formats"] = {"float6_e2m3fn": bogus, "float4_e2m1fn": bogus,
                         "float8_e8m0fnu": bogus, "no-such-format": bogus}  # fmt: skip
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0,
            "grad_hist": {"lo": -10, "counts": [5, 6]}}  # fmt: skip
    panel.load_run(_write(tmp_path / "fp6.jsonl", [header, step]))
    panel.refresh()
    hist = panel.hist_plot
    assert hist.formats == ("float6_e2m3fn", "float4_e2m1fn", "float8_e8m0fnu")
    thin, thick, label = hist._rulers["float6_e2m3fn"]
    assert list(thin.getData()[0]) == [-3.0, 0.0]  # 2^-3 = 0.125 .. 1
    assert list(thick.getData()[0]) == [0.0, math.log2(7.5)]
    thin, thick, _ = hist._rulers["float8_e8m0fnu"]  # no subnormals: the dashed part is empty
    assert list(thin.getData()[0]) == [-127.0, -127.0] and list(thick.getData()[0]) == [-127, 127]
    assert label.toPlainText() == "float6_e2m3fn"
    assert "float4_e2m1fn" in hist.ranges_label.text() and "FP16" not in hist.ranges_label.text()
    # The usual four return for a run that names none.
    panel.load_run(_write(tmp_path / "plain.jsonl", [_header(), step]))
    panel.refresh()
    assert hist.formats == ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
    assert not hist._rulers["float6_e2m3fn"][1].isVisible()


@pytest.mark.slow  # a panel laid out at several sizes: about half a second
def test_the_form_is_never_squeezed_on_a_short_screen(qtbot, run_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.panel import TrainingPanel

    panel = TrainingPanel()
    qtbot.addWidget(panel)
    panel.resize(1024, 550)
    panel.show()
    try:
        panel.form.fields["steps"].edit.setText(str(2**64))  # messages appear: it grows
        panel.form.fields["growth_interval"].edit.setText("abc")
        QApplication.processEvents()
        form = panel.form
        # Was: 504 px for 518 needed; the wrapped device note overlapped the next row.
        assert form.height() >= form.heightForWidth(form.width())
    finally:
        panel.shutdown()


@pytest.mark.slow  # lays the window out at several sizes: about half a second
def test_the_form_column_shows_the_whole_form_beside_its_scroll_bar(qtbot, run_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.panel import TrainingPanel

    panel = TrainingPanel()
    qtbot.addWidget(panel)
    panel.resize(1024, 600)
    panel.show()
    try:
        QApplication.processEvents()
        # Was: 256 px of viewport for a form of 285: the File… button and the notes' last
        # words lay under the scroll bar.
        assert panel.form_scroll.viewport().width() >= panel.form.minimumSizeHint().width()
        assert panel.form.width() <= panel.form_scroll.viewport().width()
        panel.left_tabs.setCurrentWidget(panel.code_tab)
        panel.left_tabs.setCurrentIndex(0)
        QApplication.processEvents()
        assert panel.form_scroll.viewport().width() >= panel.form.minimumSizeHint().width()
    finally:
        panel.shutdown()


@pytest.mark.slow  # a panel: a third of a second
def test_axis_titles_carry_no_multiplier(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    steps = [{"type": "step", "step": i, "loss": 1e27 * (i + 1), "scale": 1.0} for i in range(5)]
    panel.load_run(_write(tmp_path / "huge.jsonl", [_header(), *steps]))
    panel.loss_plot.log_box.setChecked(True)
    panel.refresh()
    QApplication.processEvents()
    # Was: "loss (x1e+27)" once the axis held large values.
    for plot in (panel.loss_plot.plot, panel.scale_plot.plot, panel.hist_plot.plot):
        for name in ("left", "bottom"):
            assert "(x" not in plot.getPlotItem().getAxis(name).labelString()


def test_the_form_is_derived_from_the_option_declarations(panel) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.training.config import train_options

    numbers = [name for name, spec, _ in train_options()
               if spec.in_form and spec.kind in ("int", "float")]  # fmt: skip
    assert list(panel.form.fields) == numbers
    for name, spec, _default in train_options():
        if name in panel.form.fields:
            edit = panel.form.fields[name].edit
            assert edit.toolTip().startswith(spec.help)
            assert edit.placeholderText() == (spec.none_means or "")
        if spec.in_form:
            assert panel.form.titles[name] == spec.title
    tips = [panel.form.optimizer_combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
            for i in range(1, panel.form.optimizer_combo.count())]  # fmt: skip
    assert all(tips)
    # Every flag option the form shows: a check box.
    flags = [name for name, spec, _ in train_options() if spec.in_form and spec.kind == "flag"]
    assert list(panel.form.flags) == flags and "bf16_first_last" in flags


def test_the_low_precision_options_from_the_form(panel) -> None:  # type: ignore[no-untyped-def]
    form = panel.form
    form.precision_combo.setCurrentText("fp8")
    form.choice_boxes["fp8_scaling"].setCurrentIndex(
        form.choice_boxes["fp8_scaling"].findData("delayed")
    )
    form.fields["amax_history"].edit.setText("16")
    form.flags["bf16_first_last"].setChecked(True)
    config = form.config()
    assert (config.fp8_scaling, config.amax_history, config.bf16_first_last) == (
        "delayed", 16, True,
    )  # fmt: skip
    assert "convert_delayed_fp8" in panel.code_view.toPlainText()
    # Options that do nothing in another mode are greyed out, say why, and start the job
    # at their defaults (was: left editable, and a scaler setting typed under bf16 was
    # silently ignored; the FP8 ones kept Start off under fp16 until each was undone).
    form.precision_combo.setCurrentText("fp16")
    assert form.problems() == {} and panel.start_button.isEnabled()
    for name in ("bf16_first_last", "fp8_scaling", "amax_history", "margin"):
        widget = form.flags.get(name) or form.choice_boxes.get(name) or form.fields[name].edit
        assert not widget.isEnabled(), name
        assert "Not used now:" in widget.toolTip(), name
    assert form.config() == TrainConfig(precision="fp16")
    assert form.fields["init_scale"].edit.isEnabled()
    assert not form.fields["hysteresis"].edit.isEnabled()  # torch's GradScaler has none
    form.precision_combo.setCurrentText("bf16")
    form.fields["init_scale"].edit.setText("1024")
    assert not form.fields["init_scale"].edit.isEnabled()
    assert form.config().init_scale is None and "GradScaler" not in panel.code_view.toPlainText()
    # Back in fp8, what the person set there is still set.
    form.precision_combo.setCurrentText("fp8")
    assert (form.config().fp8_scaling, form.config().bf16_first_last) == ("delayed", True)
    # A run's settings fill the widgets back.
    form.set_config(TrainConfig(precision="mxfp4", bf16_first_last=True))
    assert form.flags["bf16_first_last"].isChecked()
    assert form.choice_boxes["fp8_scaling"].currentData() == "dynamic"
    assert form.problems() == {}


def test_a_new_panel_shows_the_format_rulers_before_any_timer_tick(qtbot, run_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.panel import TrainingPanel

    panel = TrainingPanel()
    qtbot.addWidget(panel)
    try:
        # Was: until the redraw timer's first tick the histogram was a bare frame.
        for name in panel.hist_plot.formats:
            x, _y = panel.hist_plot._rulers[name][1].getData()
            assert x is not None and x[1] > x[0], name
        assert panel.loss_plot.empty_note.text == "no run: start a job or open a run file"
    finally:
        panel.shutdown()


@pytest.mark.slow  # many runs redrawn: about half a second
def test_many_runs_on_a_small_screen_keep_the_plot_height(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    # Was: at 1024x640 the legend of 8 runs took the loss plot's whole height (data in a
    # strip). Names that cannot be read are not shown; the run list names the colours.
    for index in range(8):
        panel.load_run(make_run(f"s{index}.jsonl", steps=60, seed=index))
    panel.refresh()
    panel.resize(740, 560)
    QApplication.processEvents()
    legend = panel.loss_plot.curves.legend
    view = panel.loss_plot.plot.getPlotItem().getViewBox()
    assert not legend.isVisible() or legend.boundingRect().height() < view.boundingRect().height()
    # Back at a roomy size, the legend returns with every run.
    panel.resize(1400, 900)
    QApplication.processEvents()
    assert legend.isVisible()
    assert len(panel.loss_plot.curves.legend_names) == 8


@pytest.mark.slow  # a panel and many runs: a third of a second
def test_markers_of_many_runs_label_only_the_earliest_of_each_kind(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    # Was: each run's markers carried their text, and runs that went wrong at nearby steps
    # piled their labels on top of each other.
    from fpexplorer.gui.training.plots import _markers_to_label
    from fpexplorer.gui.training.view_model import RunMarker

    one_run = [
        RunMarker(0, "#000", 24, "first NaN loss"),
        RunMarker(0, "#000", 24, "first inf/NaN: layer head"),
    ]
    assert _markers_to_label(one_run) == {0, 1}
    many = [
        RunMarker(0, "#000", 50, "first NaN loss"),
        RunMarker(1, "#111", 40, "first NaN loss"),
        RunMarker(1, "#111", 45, "first inf/NaN: layer head"),
        RunMarker(2, "#222", 30, "first inf/NaN gradient"),
    ]
    assert _markers_to_label(many) == {1, 3}


@pytest.mark.slow  # a panel and a run drawn: about half a second
def test_long_format_labels_are_cut_between_numbers_and_tooltipped_whole(  # type: ignore[no-untyped-def]
    panel, tmp_path: Path
) -> None:
    """Cut in the middle to 16 characters, "float8_e4m3b11fnuz" read "float8_…3b11fnuz" (a
    stray 3) and "e4m3:bias=11:encoding=fn" lost its bias, "e4m3:bi…oding=fn" (this failed
    before): cut at the end, never inside a number, the whole label in the tooltip."""
    header = _header()
    bogus = {"max": 1.0, "min_normal": 0.5, "min_subnormal": 0.25}  # rulers use the engine
    header["formats"] = {"float8_e4m3b11fnuz": bogus, "e4m3:bias=11:encoding=fn": bogus}
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0,
            "grad_hist": {"lo": -10, "counts": [5, 6]}}  # fmt: skip
    panel.load_run(_write(tmp_path / "custom.jsonl", [header, step]))
    panel.refresh()
    hist = panel.hist_plot
    assert hist.formats == ("float8_e4m3b11fnuz", "e4m3:bias=11:encoding=fn")
    shown = {name: hist._rulers[name][2] for name in hist.formats}
    assert shown["float8_e4m3b11fnuz"].toPlainText() == "float8_e4m3b11f…"
    assert shown["e4m3:bias=11:encoding=fn"].toPlainText() == "e4m3:bias=11:en…"
    for name, label in shown.items():
        assert label.toolTip() == name
        assert label.toPlainText() in hist.ranges_label.text()
        assert name in hist.ranges_label.toolTip().splitlines()


def test_the_code_view_keeps_a_runs_nodes_while_the_form_holds_its_settings(  # type: ignore[no-untyped-def]
    panel, tmp_path: Path
) -> None:
    """A run of 2 nodes: the code view's torchrun line states its nodes and endpoint
    (options the form does not hold) until the form is changed, not merely until the
    devices are found or anything else makes the form say it changed (was: the line of one
    node as soon as the device search ended)."""
    import dataclasses

    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.records import HeaderRecord
    from fpexplorer.training.runlog import RunWriter

    path = tmp_path / "two_nodes.jsonl"
    launch = {"task": "mlp", "nproc_per_node": 2, "nnodes": 2, "rdzv_endpoint": "node0:29400"}
    with RunWriter(path) as writer:
        for record in synthetic_records(20):
            if isinstance(record, HeaderRecord):
                record = dataclasses.replace(record, config={**record.config, **launch})
            writer.write(record)
    panel.load_run(path)
    line = "torchrun --nproc-per-node 2 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node0:29400"
    assert line in panel.code_view.toPlainText()
    panel.form.device_finder.found.emit([], "no NVIDIA driver found")  # as the search ends
    assert line in panel.code_view.toPlainText()
    panel.form.fields["steps"].edit.setText("7")  # the user's own settings now: one node
    code = panel.code_view.toPlainText()
    assert "torchrun --nproc-per-node 2 train.py" in code and "--nnodes" not in code


def test_the_loss_smoothing_box_shows_the_weight_it_applies(panel) -> None:  # type: ignore[no-untyped-def]
    """A weight of 0.05 reads 'smooth 0.05' (was 'smooth 0.5': a whole number of
    hundredths shown behind a '0.' prefix)."""
    spin = panel.loss_plot.smooth_spin
    for weight, text in ((0.05, "smooth 0.05"), (0.5, "smooth 0.50"), (0.99, "smooth 0.99")):
        spin.setValue(weight)
        assert (spin.text(), panel.loss_plot.smoothing) == (text, weight)
    spin.setValue(0)
    assert (spin.text(), panel.loss_plot.smoothing) == ("no smoothing", 0)


def test_memory_sizes_are_exact_or_marked_as_rounded() -> None:
    # Was "48.2 KiB" for 49376 bytes (48.21875 KiB): a rounded figure shown as if exact.
    from fpexplorer.training.summary import bytes_text

    assert bytes_text(49376) == "≈48.2 KiB"
    assert bytes_text(65536) == "64 KiB" and bytes_text(512) == "512 B"
    assert bytes_text(3.5 * 2**30) == "3.5 GiB" and bytes_text(1.5 * 2**20) == "1.5 MiB"
    assert bytes_text(float("nan")) == "?"
    assert len(bytes_text(1e300)) < 20  # a damaged file's figure stays short
