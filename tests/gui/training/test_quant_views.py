"""The Low precision page: what its widgets say (labels, notes, hover read-outs, layer
names), overlaid runs, and items made once."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fpexplorer.commands.screenshot import TRAINING_PAGES
from fpexplorer.gui.training.quant_views import (
    BinadeAxis,
    QuantPage,
    block_counts_text,
    exponent_text,
    history_hover_lines,
    history_note,
    history_range,
    hurts_most_text,
    max_pooled,
    no_quant_note,
    power_text,
    quantized_mode_names,
    scale_fits_log2,
    sqnr_text,
)
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import quant_layer_names, synthetic_records
from fpexplorer.gui.training.view_model import OverlayRun, run_colour, share_text
from fpexplorer.training.records import (
    EndRecord,
    Histogram,
    QuantTensorStats,
    StepRecord,
    StepStats,
)


def _model(steps: int = 120, **options: object) -> RunModel:
    model = RunModel()
    model.add_records(synthetic_records(steps, stats_every=1, **options))  # type: ignore[arg-type]
    model.closed = True
    return model


def _overlay(*models: RunModel) -> list[OverlayRun]:
    return [OverlayRun(i, model.label, run_colour(i), model) for i, model in enumerate(models)]


@pytest.fixture
def page(qtbot):  # type: ignore[no-untyped-def]
    widget = QuantPage()
    qtbot.addWidget(widget)
    widget.resize(1400, 800)
    widget.show()
    return widget


def _items(page: QuantPage) -> list[int]:
    plots = (page.history_plot, page.flushed_map, page.saturated_map, page.sqnr_plot,
             page.block_plot)  # fmt: skip
    return [id(item) for view in plots for item in view.plot.getPlotItem().items]


def test_a_run_without_quantized_layers_gets_the_note(page) -> None:  # type: ignore[no-untyped-def]
    fp16 = _model(20, precision="fp16")
    page.refresh(_overlay(fp16), [fp16], fp16)
    assert page.stack.currentIndex() == 0
    assert page.note is not None
    modes = quantized_mode_names()
    assert "fp8" in modes and "fp16" not in modes
    assert page.note == (
        f"This run (fp16) has no FP8/MX layers: choose precision {', '.join(modes[:-1])} or "
        f"{modes[-1]} to see how each tensor fares."
    )
    assert no_quant_note([]).startswith("No run yet.")
    assert no_quant_note([fp16, fp16]).startswith("None of the 2 runs shown has FP8/MX layers")
    waiting = RunModel()
    waiting.add_records([next(synthetic_records(5, precision="fp8"))])  # the header only
    assert no_quant_note([waiting]) == "Waiting for the first statistics step of this fp8 run…"


def test_the_page_names_the_tensor_that_hurts_most_and_its_criterion(page) -> None:  # type: ignore[no-untyped-def]
    model = _model(200, precision="fp8", quant="fp8-delayed", quant_layers=4)
    page.refresh(_overlay(model), [model], model)
    assert page.note is None
    assert page.detail_label.text() == ""  # one run, selected: nothing to tell apart
    worst = model.quant.hurts_most("sqnr", over_run=True)
    assert worst is not None
    assert page.hurts_label.text() == (
        f"Hurts most (lowest SQNR, over the run): {worst.layer} input, "
        f"SQNR {sqnr_text(worst.value)} (step {worst.step})"
    )
    # Until a tensor is picked, the page shows the one that hurts most.
    assert (page.layer, page.role) == (worst.layer, "input")
    page.hurt_box.setCurrentIndex(3)  # largest saturated share, latest step
    latest = model.quant.hurts_most("saturated")
    assert page.hurts_label.text() == hurts_most_text(latest, "saturated", False)
    assert hurts_most_text(None, "saturated", False) == (
        "Hurts most (largest saturated share, latest step): no tensor saturated."
    )
    page.hurt_box.setCurrentIndex(2)  # ... over the run
    saturated = model.quant.hurts_most("saturated", over_run=True)
    assert saturated is not None
    assert page.hurts_label.text().endswith(
        f"{saturated.layer} input, {share_text(saturated.value)} saturated (step {saturated.step})"
    )


def test_hurts_most_text_reads_like_the_issue_example() -> None:
    history_model = RunModel()
    history_model.add_records(
        [StepRecord(step=480, loss=1.0, scale=1.0, skipped=False, growth_tracker=0, lr=0.1,
                    grad_norm=1.0, steps_per_s=1.0, time=0.0,
                    stats=StepStats(quant=(QuantTensorStats(
                        layer="2.wo", role="grad_output", format="float8_e5m2", amax=1.0,
                        flushed=0.3125),)))]
    )  # fmt: skip
    worst = history_model.quant.hurts_most("flushed")
    assert hurts_most_text(worst, "flushed", False) == (
        "Hurts most (largest flushed share, latest step): 2.wo grad_output, 31.25% flushed "
        "(step 480)"
    )


def test_heatmaps_name_the_layers_and_read_out_the_cell_under_the_cursor(page) -> None:  # type: ignore[no-untyped-def]
    model = _model(200, precision="fp8", quant="fp8-delayed", quant_layers=4)
    page.refresh(_overlay(model), [model], model)
    page.choose(quant_layer_names(4)[0], "input")
    heat = page.saturated_map
    assert heat.layer_axis.names == list(quant_layer_names(4))
    assert heat.layer_axis.tickStrings([0.0, 1.0, 2.5], 1.0, 1.0) == [
        "blocks.0.attn.wqkv", "blocks.0.attn.wo", ""
    ]  # fmt: skip
    assert heat.image.image.shape == (4, 200)
    assert heat.image.levels.tolist() == [0.0, 1.0]  # fixed, never auto
    worst = model.quant.hurts_most("saturated", over_run=True)
    assert worst is not None
    row = quant_layer_names(4).index(worst.layer)
    heat.hover.show_at(float(worst.step), float(row))
    assert heat.hover.text == (
        f"{worst.layer} input\nstep {worst.step}: {share_text(worst.value)} saturated"
    )
    page.flushed_map.hover.show_at(3.2, 0.4)  # the column of step 3, the first layer
    flushed = model.quant.series(quant_layer_names(4)[0], "input", "flushed")[3]
    assert page.flushed_map.hover.text == (
        f"blocks.0.attn.wqkv input\nstep 3: {share_text(flushed)} flushed"
    )
    heat.hover.show_at(500.0, 0.0)  # beyond the last step: nothing
    assert heat.hover.text is None


def test_sqnr_bars_and_their_hover(page) -> None:  # type: ignore[no-untyped-def]
    model = _model(60, precision="fp8", quant="fp8-dynamic", quant_layers=3)
    page.refresh(_overlay(model), [model], model)
    page.choose(quant_layer_names(3)[1], "grad_output")
    rows = model.quant.sqnr_by_layer("grad_output")
    widths = page.sqnr_plot.bars.opts["width"]
    assert list(widths) == [row.latest for row in rows]
    page.sqnr_plot.hover.show_at(10.0, 1.1)
    row = rows[1]
    assert page.sqnr_plot.hover.text == (
        f"{row.layer} grad_output\nstep 59: {sqnr_text(row.latest)}\n"
        f"lowest: {sqnr_text(row.minimum)} (step {row.minimum_step})"
    )


def test_an_exact_tensor_gets_a_pale_bar_and_reads_exact(page) -> None:  # type: ignore[no-untyped-def]
    model = RunModel()
    model.add_records(
        [StepRecord(step=0, loss=1.0, scale=1.0, skipped=False, growth_tracker=0, lr=0.1,
                    grad_norm=1.0, steps_per_s=1.0, time=0.0, stats=StepStats(quant=(
                        QuantTensorStats(layer="a", role="input", format="float8_e4m3fn",
                                         amax=1.0, sqnr_db=20.0),
                        QuantTensorStats(layer="b", role="input", format="float8_e4m3fn",
                                         amax=1.0, sqnr_db=math.inf))))]
    )  # fmt: skip
    page.refresh(_overlay(model), [model], model)
    assert list(page.sqnr_plot.bars.opts["width"]) == [20.0]
    assert len(page.sqnr_plot.exact_bars.opts["width"]) == 1
    page.sqnr_plot.hover.show_at(1.0, 1.0)
    assert page.sqnr_plot.hover.text == (
        "b input\nstep 0: exact (∞ dB)\nlowest: exact (∞ dB) (step 0)"
    )


def test_block_scales_of_an_mx_run_and_the_note_of_a_per_tensor_run(page) -> None:  # type: ignore[no-untyped-def]
    mx = _model(20, precision="mxfp4", quant="mxfp4", quant_layers=2)
    page.refresh(_overlay(mx), [mx], mx)
    page.choose(quant_layer_names(2)[0], "weight")
    latest = mx.quant.latest(quant_layer_names(2)[0], "weight")
    assert latest is not None and latest.stats.scale_hist is not None
    hist: Histogram = latest.stats.scale_hist
    heights = page.block_plot.bars.opts["height"]
    assert list(heights) == list(np.log10(1.0 + np.asarray(hist.counts, dtype=np.float64)))
    assert page.block_plot.empty_note.text is None
    assert page.block_plot.counts_label.text() == f"{sum(hist.counts):,} blocks on step 19"
    top = hist.lo + len(hist.counts) - 1
    page.block_plot.hover.show_at(top + 0.5, 0.0)
    total = sum(hist.counts)
    count = hist.counts[-1]
    assert page.block_plot.hover.text == (
        f"2^{top} ≤ block scale < 2^{top + 1}\n"
        f"{count:,} of {total:,} blocks ({share_text(count / total)}) (step 19)"
    )
    # MX has no per-tensor scale: the history draws amax alone and says nothing is hidden.
    scale_curve = page.history_plot.scale_curves.curves[0]
    assert scale_curve.getData()[0] is None or len(scale_curve.getData()[0]) == 0

    fp8 = _model(20, precision="fp8", quant="fp8-dynamic", quant_layers=2)
    page.refresh(_overlay(fp8), [fp8], fp8)
    scale = fp8.quant.latest(page.layer, page.role).stats.scale  # type: ignore[union-attr]
    note = page.block_plot.empty_note.text
    assert scale is not None
    assert note == f"no block scales:\nper-tensor scale\n{exponent_text(scale)}"
    assert exponent_text(0.25) == "2^-2" and exponent_text(6.0) == "2^2.58…"
    assert power_text(4.0) == "4 (2^2)" and power_text(6.0) == "6 (2^2.58…)"


def test_delayed_and_current_runs_side_by_side_in_their_colours(page) -> None:  # type: ignore[no-untyped-def]
    delayed = _model(200, precision="fp8", quant="fp8-delayed", quant_layers=4)
    current = _model(200, precision="fp8", quant="fp8-dynamic", quant_layers=4)
    fp16 = _model(200, precision="fp16")
    overlay = _overlay(delayed, current, fp16)
    page.refresh(overlay, [delayed, current, fp16], delayed)
    layer = quant_layer_names(4)[2]
    page.choose(layer, "input")
    history = page.history_plot
    assert page.detail_label.text() == f"Details: {overlay[0].name}"
    page.refresh(overlay, [delayed, current, fp16], fp16)  # the fp16 run selected
    assert page.detail_label.text() == (
        f"Details: {overlay[0].name} (the selected run has no quantized layers)"
    )
    page.refresh(overlay, [delayed, current, fp16], delayed)
    # Two runs with quantized layers: two pairs of curves in the runs' colours, none for
    # the fp16 run.
    assert sorted(history.amax_curves.curves) == [0, 1]
    for run in overlay[:2]:
        amax_curve = history.amax_curves.curves[run.key]
        assert amax_curve.opts["pen"].color().name() == run.colour.lower()
        x, y = amax_curve.getData()
        steps, log_amax = run.model.quant.log2_series(layer, "input", "amax")
        assert list(x) == list(steps) and list(y) == list(log_amax)
        # dashed: log2(448 / scale), the largest |x| the scale fits
        _x, fits = history.scale_curves.curves[run.key].getData()
        scale = run.model.quant.series(layer, "input", "scale")
        assert np.allclose(fits, np.log2(448.0 / scale))
    # Switched to the scale itself: log2(scale), and back.
    history.raw_scale_box.setChecked(True)
    _x, raw = history.scale_curves.curves[0].getData()
    assert np.allclose(raw, np.log2(delayed.quant.series(layer, "input", "scale")))
    history.raw_scale_box.setChecked(False)
    # Current scaling fits each step's amax; delayed lags it at the spike.
    _x, current_fits = history.scale_curves.curves[1].getData()
    _x, current_amax = history.amax_curves.curves[1].getData()
    assert np.allclose(current_fits, current_amax)
    history.hover.show_at(112.0)
    text = history.hover.text
    assert text is not None and text.startswith(f"step 112 · {layer} input\n")
    assert text.count("amax") == 2 and text.count("scale") == 2


@pytest.mark.slow  # many runs redrawn: a third of a second
def test_refresh_with_many_runs_creates_no_item_again(page) -> None:  # type: ignore[no-untyped-def]
    models = []
    for seed in range(6):  # runs still running: their first 60 steps, no end record yet
        model = RunModel()
        model.add_records(
            record for record in synthetic_records(60, stats_every=1, precision="fp8",
                                                   quant="fp8-delayed", quant_layers=12,
                                                   seed=seed)
            if not isinstance(record, EndRecord)
        )  # fmt: skip
        models.append(model)
    overlay = _overlay(*models)
    page.refresh(overlay, models, models[0])
    before = _items(page)
    for model in models:  # more steps arrive in every run
        model.add_records(
            record for record in synthetic_records(80, stats_every=1, precision="fp8",
                                                   quant="fp8-delayed", quant_layers=12)
            if isinstance(record, StepRecord) and record.step >= 60
        )  # fmt: skip
    page.refresh(overlay, models, models[0])
    page.refresh(overlay, models, models[1])
    assert _items(page) == before
    assert len(page.history_plot.amax_curves.curves) == 6
    assert page.saturated_map.image.image.shape == (12, 80)


def test_the_panel_has_both_pages_and_the_screenshot_names_them(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.panel import PLOT_PAGES

    assert tuple(PLOT_PAGES) == TRAINING_PAGES
    titles = [panel.plot_tabs.tabText(i) for i in range(panel.plot_tabs.count())]
    assert titles == ["Mixed precision", "Low precision"]
    panel.load_run(make_run("fp16.jsonl", steps=30, precision="fp16", stats_every=1))
    panel.show_plot_page("low")
    assert panel.plot_tabs.currentWidget() is panel.quant_page
    assert panel.quant_page.note is not None and "has no FP8/MX layers" in panel.quant_page.note
    panel.load_run(
        make_run("fp8.jsonl", steps=40, precision="fp8", quant="fp8-delayed", stats_every=1)
    )
    assert panel.quant_page.note is None
    assert panel.quant_page.hurts_label.text().startswith("Hurts most (lowest SQNR")


@pytest.mark.slow  # renders the whole window: about a second
def test_screenshot_shows_the_low_precision_page(tmp_path: Path, make_run) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.cli import main

    run = make_run("fp8.jsonl", steps=40, precision="fp8", quant="fp8-delayed", stats_every=1)
    out = tmp_path / "low.png"
    code = main(["screenshot", "--panel", "training", "--run", str(run), str(run),
                 "--training-page", "low", "--size", "1024x640", "--out", str(out)])  # fmt: skip
    assert code == 0 and out.stat().st_size > 0


def test_max_pooling_keeps_a_one_step_spike_and_leaves_unmeasured_cells_out() -> None:
    nan = math.nan
    matrix = np.array([[0.0, 0.5, 0.0, 0.0, 0.1], [nan, nan, 0.2, nan, nan]])
    pooled = max_pooled(matrix, 2)
    assert pooled[0].tolist() == [0.5, 0.0, 0.1]
    assert math.isnan(pooled[1, 0]) and pooled[1, 1] == 0.2 and math.isnan(pooled[1, 2])
    assert max_pooled(matrix, 1) is matrix


def test_a_heatmap_narrower_than_its_steps_draws_each_columns_maximum(page) -> None:  # type: ignore[no-untyped-def]
    model = _model(500, precision="fp8", quant="fp8-delayed", quant_layers=4)
    page.resize(700, 500)
    page.refresh(_overlay(model), [model], model)
    heat = page.saturated_map
    assert heat.pooling > 1
    drawn = heat.image.image
    assert drawn.shape[1] == math.ceil(500 / heat.pooling)
    # The one step that saturated most is still in the picture, at its full share.
    _layers, saturated = model.quant.share_matrix("input", "saturated")
    assert float(np.nanmax(drawn)) == pytest.approx(float(np.nanmax(saturated)), rel=1e-6)
    # Zoomed in on 20 steps: every step gets its own column again.
    heat.plot.getPlotItem().getViewBox().setXRange(100, 120, padding=0)
    assert heat.pooling == 1 and heat.image.image.shape[1] == 500


def test_an_nvfp4_tensor_draws_no_dashed_limit_and_says_why() -> None:
    # NVFP4: blocks of 16 with E4M3 scales, plus a per-tensor scale 1 / s_global =
    # 448 * 6 / amax that only moves the block scales into E4M3's range.
    entry = QuantTensorStats(
        layer="fc", role="input", format="float4_e2m1fn", amax=3.0, scale=2688.0 / 3.0,
        scale_hist=Histogram(lo=0, counts=(5, 11), zero=2, nan=1),
    )  # fmt: skip
    fp8 = QuantTensorStats(layer="fc", role="input", format="float8_e4m3fn", amax=3.5,
                           scale=128.0)  # fmt: skip
    nvfp4, tensorwise = RunModel(), RunModel()
    for model, item in ((nvfp4, entry), (tensorwise, fp8)):
        model.add_records(
            [StepRecord(step=4, loss=1.0, scale=1.0, skipped=False, growth_tracker=0, lr=0.1,
                        grad_norm=1.0, steps_per_s=1.0, time=0.0,
                        stats=StepStats(quant=(item,)))]
        )  # fmt: skip
    steps, fits = scale_fits_log2(nvfp4.quant, "fc", "input")
    assert len(steps) == 0 and len(fits) == 0
    steps, fits = scale_fits_log2(tensorwise.quant, "fc", "input")
    assert list(steps) == [4.0] and list(fits) == [math.log2(448.0) - 7.0]  # 448 / 128 = 3.5
    overlay = _overlay(nvfp4, tensorwise)
    note = history_note(overlay, "fc", "input")
    assert note is not None and note.endswith(": block scales, no dashed curve")
    assert history_note(overlay, "fc", "input", raw_scale=True) is None  # NVFP4 has one
    hist = entry.scale_hist
    assert hist is not None
    assert block_counts_text(4, hist) == "19 blocks on step 4; scales 2 zero, 1 NaN"


@pytest.mark.slow  # a real FP8 training job in a child process: seconds
def test_a_real_fp8_run_fills_the_page(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    run = tmp_path / "fp8.jsonl"
    subprocess.run(
        [sys.executable, "-m", "fpexplorer", "train", "--task", "mlp", "--precision", "fp8",
         "--fp8-scaling", "delayed", "--steps", "6", "--stats-every", "1", "--out", str(run)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    panel.load_run(run)
    panel.show_plot_page("low")
    page = panel.quant_page
    history = panel.current_run.model.quant
    assert page.note is None and history.layers
    layer = history.layers[0]
    assert page.saturated_map.layer_axis.names == history.layers
    assert page.flushed_map.image.image.shape == (len(history.layers), 6)
    page.choose(layer, "input")
    latest = history.latest(layer, "input")
    assert latest is not None and latest.stats.format == "float8_e4m3fn"
    _x, fits = page.history_plot.scale_curves.curves[panel.current_run.key].getData()
    scale = history.series(layer, "input", "scale")
    assert np.allclose(fits, np.log2(448.0 / scale))
    assert page.hurts_label.text().startswith("Hurts most (lowest SQNR, over the run): ")


def test_the_history_view_keeps_amax_whole_and_a_far_dashed_point_out() -> None:
    amax = [np.array([-10.2, -9.5, -9.9])]
    # A delayed scale's first step casts at scale 1: log2(57344 / 1) = 15.8, far away.
    fits = [np.array([15.8, -9.0, -8.6])]
    assert history_range(amax, fits) == (-11, -8)
    assert history_range(amax, [np.array([-3.5])]) == (-11, -3)  # within 8 binades: shown
    assert history_range([np.empty(0)], [np.array([1.5, 2.5])]) == (1, 3)
    assert history_range([np.empty(0)], [np.empty(0)]) is None


def test_screenshot_refuses_training_options_on_the_formats_panel(tmp_path: Path) -> None:
    from fpexplorer.cli import main

    out = tmp_path / "x.png"
    assert main(["screenshot", "--training-page", "low", "--out", str(out)]) == 2
    assert not out.exists()


@pytest.mark.slow  # renders and writes every plot: about a second
def test_export_writes_the_low_precision_plots_where_there_are_quantized_layers(
    panel, make_run, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("fp16.jsonl", steps=20, precision="fp16", stats_every=1))
    names = {path.name for path in panel.export_to(tmp_path / "fp16")}
    assert "loss.png" in names and not any(name.startswith("quant_") for name in names)
    panel.load_run(make_run("fp8.jsonl", steps=20, precision="fp8", quant="fp8-delayed",
                            stats_every=1))  # fmt: skip
    names = {path.name for path in panel.export_to(tmp_path / "fp8")}
    for name in ("quant_amax_scale", "quant_flushed_heatmap", "quant_saturated_heatmap",
                 "quant_sqnr", "quant_block_scales"):  # fmt: skip
        assert f"{name}.png" in names and f"{name}.svg" in names
    assert panel.plot_tabs.currentWidget() is not panel.quant_page  # the page shown before
    # The names had their room when the plots were rendered (not a turn of the loop later:
    # pyqtgraph leaves out tick labels that do not fit the axis).
    axis = panel.quant_page.saturated_map.layer_axis
    assert axis.width() == axis.text_width + 12 > 60


def test_history_hover_names_inf_and_nan_amax_and_a_missing_scale() -> None:
    model = RunModel()
    model.add_records(
        [StepRecord(step=n, loss=1.0, scale=1.0, skipped=False, growth_tracker=0, lr=0.1,
                    grad_norm=1.0, steps_per_s=1.0, time=0.0, stats=StepStats(quant=(
                        QuantTensorStats(layer="fc", role="input", format="float4_e2m1fn",
                                         amax=amax),)))
         for n, amax in enumerate((math.inf, math.nan, 2.0))]
    )  # fmt: skip
    overlay = _overlay(model)
    assert history_hover_lines(overlay, "fc", "input", 0.4)[1].text.endswith(": amax inf")
    assert history_hover_lines(overlay, "fc", "input", 1.0)[1].text.endswith(": amax NaN")
    lines = history_hover_lines(overlay, "fc", "input", 2.0)
    assert lines[0].text == "step 2 · fc input" and lines[1].text.endswith(": amax 2")
    assert history_hover_lines(overlay, "fc", "weight", 2.0) == []
    note = history_note(overlay, "fc", "input")
    assert note is not None and note.endswith(": 2 amax inf/NaN/0 not drawn")


@pytest.mark.parametrize("heatmap", ["flushed", "exponents"])
def test_the_colour_bars_top_label_is_not_cut(heatmap: str, qtbot) -> None:  # type: ignore[no-untyped-def]
    """The colour bar reaches the plot's top edge; its top tick label ("1.0", "0") stood
    half above it, cut (was: 3.6 px above the scene's top)."""
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QApplication

    from fpexplorer.gui.training.plots import HeatmapPlot
    from fpexplorer.gui.training.quant_views import ShareHeatmap

    widget = ShareHeatmap("flushed") if heatmap == "flushed" else HeatmapPlot()
    qtbot.addWidget(widget)
    widget.resize(340, 220)
    widget.show()
    QApplication.processEvents()
    axis = widget.colour_bar.axis
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    _axis, _ticks, labels = axis.generateDrawSpecs(painter)
    painter.end()
    assert [text for _rect, _flags, text in labels][-1] in ("1.0", "0")
    assert min(axis.mapRectToScene(rect).top() for rect, _flags, _text in labels) >= 0


@pytest.mark.parametrize(
    ("low", "high", "pixels"),
    [(-25.0, -16.0, 105.4), (-9.5, 8.5, 95.0), (-0.5, 0.5, 60.0), (-40.0, 20.0, 300.0),
     (-3.0, 5.0, 40.0)],
)  # fmt: skip
def test_the_block_scale_axis_always_has_a_tick_with_room_for_its_label(
    qapp: object, low: float, high: float, pixels: float
) -> None:
    """Was: 9 binades over 105 px took ticks 8 apart, at both ends only, and pyqtgraph
    drops a label that would stick out of the axis: the histogram had no scale at all."""
    axis = BinadeAxis("bottom")
    [(spacing, _)] = axis.tickSpacing(low, high, pixels)
    half_label = (high - low) * (BinadeAxis.MIN_TICK_PIXELS / 2) / pixels
    ticks = np.arange(math.ceil(low / spacing) * spacing, high + 1e-9, spacing)
    roomy = [t for t in ticks if low + half_label <= t <= high - half_label]
    assert roomy or spacing == 1, (spacing, ticks)
