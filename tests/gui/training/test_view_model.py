"""The training panel's view model, tested without Qt: what each view shows for a run."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.gui.training.view_model import (
    RunList,
    count_text,
    data_range,
    elide,
    elide_name,
    elide_words,
    first_nonfinite_view,
    format_range,
    format_ranges_log2,
    has_dynamic_scaling,
    heatmap_limits,
    hover_plain,
    hover_text,
    layer_table_view,
    lost_updates_text,
    name_word_counts,
    number_text,
    progress_view,
    run_markers,
    settings_of,
    share_text,
    smoothed,
    summarize_problems,
    throughput_text,
)
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.precision import PRECISION_MODES, PrecisionMode
from fpexplorer.training.records import HeaderRecord, Histogram, from_schema1_dict


def _header(precision: str = "fp16", **config: Any) -> dict[str, Any]:
    settings = {**TrainConfig(task="synthetic", precision=precision).to_dict(), **config}
    return {"type": "header", "schema": 1, "config": settings}


def _layer(name: str, **values: Any) -> dict[str, Any]:
    layer = {"name": name, "grad_norm": 1.0, "amax": 0.5, "headroom_log2": 17.0,
             "underflow_share": 1.0, "nonfinite": False}  # fmt: skip
    layer.update(values)
    return layer


def _nan_step(step: int, **extra: Any) -> dict[str, Any]:
    """A step of a run without a scaler whose gradients are all NaN: never skipped."""
    nan_hist = {"lo": 0, "counts": [], "zero": 0, "inf": 0, "nan": 1000}
    record = {"type": "step", "step": step, "loss": math.nan, "scale": 1.0, "skipped": False,
              "grad_norm": math.nan, "grad_hist": nan_hist,
              "layers": [_layer("fc1", grad_norm=math.nan, nonfinite=True),
                         _layer("relu", grad_norm=None), _layer("head", nonfinite=True)],
              "first_nonfinite": "head",
              "lost_updates": {"share": 0.0, "kind": "fp16_would_lose"}}  # fmt: skip
    record.update(extra)
    return record


def _model(records: list[Any]) -> RunModel:
    """A model fed typed records (dicts are written as schema 1 and read through the contract)."""
    model = RunModel()
    typed = [from_schema1_dict(r) if isinstance(r, dict) else r for r in records]
    model.add_records(typed)
    assert not model.problems, model.problems
    return model


def test_the_view_model_imports_no_qt_and_no_torch() -> None:
    code = (
        "import sys, fpexplorer.gui.training.view_model\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'torch')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("precision", ["fp16-noscale", "pure-fp16", "bf16", "fp32"])
def test_first_nonfinite_layer_shows_for_runs_that_never_skip(precision: str) -> None:
    clean = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False,
             "grad_norm": 0.5}  # fmt: skip
    model = _model([_header(precision), clean, _nan_step(1), _nan_step(2)])
    view = first_nonfinite_view(model)
    # Was: "No non-finite gradients so far." while every layer was NaN.
    assert view.alarm
    assert view.text.startswith("First non-finite layer: head (step 1")
    assert "skipped" not in view.text
    assert model.first_nan_loss_step == 1


def test_first_nonfinite_step_without_statistics_is_still_named() -> None:
    steps = [{"type": "step", "step": i, "loss": 1.0, "scale": 1.0, "skipped": False,
              "grad_norm": math.inf if i >= 3 else 1.0} for i in range(5)]  # fmt: skip
    view = first_nonfinite_view(_model([_header("bf16"), *steps]))
    assert view.alarm and "step 3" in view.text and "no layer named" in view.text


def test_a_share_over_nan_gradients_is_n_a_not_zero() -> None:
    model = _model([_header("fp16-noscale"), _nan_step(0)])
    text = lost_updates_text(model)
    assert "n/a" in text and "0%" not in text  # was "FP16 weights would lose 0% ..."
    assert share_text(math.nan) == "n/a"
    assert share_text(0.25) == "25%"
    # One notation across the app (the engine's display rule): no "1e-05", no rounded digits.
    assert share_text(2**-16 / 100) == "1.52…e-5%"
    assert number_text(2**-16) == "1.52587890625e-5"
    assert number_text(0.1) == "0.1000…"


def test_layer_norm_is_a_dash_for_a_module_without_parameters() -> None:
    """Nothing to measure: "–", as the table shows other absent figures, with a tooltip why
    (it was a blank cell, which reads as a figure missing; this failed before)."""
    view = layer_table_view(_model([_header("fp16"), _nan_step(0)]))
    relu = next(row for row in view.rows if row.cells[0] == "relu")
    assert relu.cells[1] == "–"  # not 0, not blank
    assert relu.tips[1] == "the module has no parameters of its own: nothing to measure"
    assert all(cell != "" for row in view.rows for cell in row.cells)
    # Every "–" says why; no figure has a tooltip of its own.
    for row in view.rows:
        for cell, tip in zip(row.cells[1:], row.tips[1:], strict=True):
            assert (cell == "–") == (tip != ""), (row.cells, row.tips)
    head = next(row for row in view.rows if row.cells[0].startswith("head"))
    assert head.alarm and "first non-finite" in head.cells[0]


def test_layer_columns_follow_the_runs_format_and_say_what_is_scaled() -> None:
    healthy = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False,
               "layers": [_layer("fc", amax=2.0**-30, underflow_share=1.0)],
               "act_hist": {"lo": -31, "counts": [5], "zero": 0, "inf": 0, "nan": 0,
                            "dtype": "bfloat16"}}  # fmt: skip
    bf16 = layer_table_view(_model([_header("bf16"), healthy]))
    # A healthy BF16 run showed "< 2^-24: 100%" on every layer.
    assert "< 2^-24 (FP16)" not in bf16.columns
    assert bf16.rows[0].cells[4] == "–" and not bf16.rows[0].alarm
    # Headroom against BF16's largest value, exactly: log2(0x1.fep127) + 30.
    expected = math.log2(float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)) + 30
    assert bf16.rows[0].cells[3] == f"≈2^{expected:.1f}"  # rounded: marked
    assert bf16.columns[3] == "headroom in BF16"
    held_in_fp16 = {**healthy["act_hist"], "dtype": "float16"}
    fp16 = layer_table_view(_model([_header("fp16"), {**healthy, "act_hist": held_in_fp16}]))
    assert fp16.columns[1] == "‖g‖ unscaled" and fp16.columns[2] == "max |g| scaled"
    assert fp16.columns[4] == "< 2^-24 (FP16)" and fp16.rows[0].cells[4] == "100%"


def test_layer_activation_columns_of_a_step_that_measured_none_are_blank_not_zero() -> None:
    # With statistics off (or between statistics steps) a skipped step records its parameter
    # gradients only: its layers' activation figures were shown as "0" and "0%".
    skipped = {"type": "step", "step": 0, "loss": math.inf, "scale": 65536.0, "skipped": True,
               "grad_hist": {"lo": 0, "counts": [], "zero": 0, "inf": 0, "nan": 8},
               "layers": [_layer("fc", grad_norm=math.nan, amax=0.0, underflow_share=0.0,
                                 nonfinite=True)],
               "first_nonfinite": "fc"}  # fmt: skip
    row = layer_table_view(_model([_header("fp16"), skipped])).rows[0]
    assert row.cells[2:5] == ("–", "–", "–")
    assert row.tips[2].startswith("not measured on this step") and row.tips[3] == row.tips[2]
    assert row.cells[1] == "NaN" and row.cells[5] == "yes"


def test_layer_headroom_is_exact_or_marked() -> None:
    """A power-of-two ratio is exact ("2^12"); any other is rounded to a tenth and marked
    "≈" (it read "2^138.8", rounded without a mark: this failed before)."""
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False,
            "layers": [_layer("exact", amax=65504 / 2**12), _layer("rounded", amax=3.0)],
            "act_hist": {"lo": -31, "counts": [5], "zero": 0, "inf": 0, "nan": 0,
                         "dtype": "float16"}}  # fmt: skip
    rows = layer_table_view(_model([_header("fp16"), step])).rows
    assert rows[0].cells[3] == "2^12"
    assert rows[1].cells[3] == f"≈2^{math.log2(65504 / 3):.1f}" == "≈2^14.4"


def test_a_bf16_loop_under_a_grad_scaler_reads_as_scaled() -> None:
    # A user's loop is labelled by its autocast dtype: "bf16" with an enabled GradScaler
    # too, whose activation gradients backward held times 65536.
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 65536.0, "skipped": False,
            "layers": [_layer("fc")]}  # fmt: skip
    assert layer_table_view(_model([_header("bf16"), step])).columns[2] == "max |g| scaled"
    unscaled = {**step, "scale": 1.0}
    assert layer_table_view(_model([_header("bf16"), unscaled])).columns[2] == "max |g| as held"
    # Its growth tracker counts: the panel's growth bar showed "no dynamic scaling".
    counting = [{**step, "step": i, "growth_tracker": i + 1} for i in range(2)]
    assert has_dynamic_scaling(_model([_header("bf16"), *counting]))
    assert not has_dynamic_scaling(_model([_header("bf16"), unscaled]))
    assert not has_dynamic_scaling(_model([_header("fp16-static"), *counting]))


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
     ("float8_e4m3fn", ml_dtypes.float8_e4m3fn), ("float8_e5m2", ml_dtypes.float8_e5m2),
     ("float6_e2m3fn", ml_dtypes.float6_e2m3fn), ("float6_e3m2fn", ml_dtypes.float6_e3m2fn),
     ("float4_e2m1fn", ml_dtypes.float4_e2m1fn), ("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu)],
)  # fmt: skip
def test_format_ranges_come_from_the_engine_for_any_format(name: str, dtype: Any) -> None:
    info = ml_dtypes.finfo(dtype) if dtype is not np.float16 else np.finfo(np.float16)
    fmt = format_range(name)
    assert fmt.max == Fraction(float(info.max))
    assert fmt.min_normal == Fraction(float(info.smallest_normal))
    assert fmt.min_positive == Fraction(float(info.smallest_subnormal))
    lo, normal, hi = format_ranges_log2([name])[name]
    assert 2.0**lo == float(info.smallest_subnormal) and 2.0**normal == float(info.smallest_normal)
    assert hi == math.log2(float(info.max))


def test_format_ranges_of_a_custom_spec_and_unknown_names() -> None:
    assert format_ranges_log2(["e3m2"])["e3m2"][2] == math.log2(28.0)  # IEEE-style e3m2
    assert format_ranges_log2(["no-such-format"]) == {}


def test_heatmap_limits_follow_the_scale_for_unscaled_parameter_gradients() -> None:
    steps = [
        {"type": "step", "step": i, "loss": 1.0, "scale": 2.0 ** (16 - (i >= 2)), "skipped": i == 1}
        for i in range(4)
    ]
    records = [_header("fp16"), *steps]
    model = _model(records)
    note, limits = heatmap_limits(model, activations=False)
    assert "divided by the loss scale" in note
    low = limits[0]
    assert low.steps.tolist() == [0, 1, 2, 3]
    assert low.log2.tolist() == [-40.0, -40.0, -39.0, -39.0]  # -24 - log2(scale)
    note, limits = heatmap_limits(model, activations=True)
    assert limits[0].log2.tolist() == [-24.0, -24.0]
    assert limits[1].log2.tolist() == [math.log2(65504.0)] * 2
    bf16_step = {**steps[0], "scale": 1.0}  # no scaler: the scale of every bf16 step
    _note, bf16_limits = heatmap_limits(_model([_header("bf16"), bf16_step]), False)
    assert bf16_limits[0].log2.tolist() == [-133.0, -133.0]


def test_ranges_come_from_the_data_alone() -> None:
    values = np.array([2.0**-3, 2.0**5, math.nan, math.inf])
    assert data_range([values]) == (0.125, 32.0)
    assert data_range([values], log=True) == (math.log10(0.125), math.log10(32.0))
    assert data_range([np.array([math.nan])]) is None


def test_smoothing_is_an_exponential_average_that_skips_nan() -> None:
    values = np.array([1.0, math.nan, 3.0])
    out = smoothed(values, 0.5)
    assert out[0] == 1.0 and math.isnan(out[1])
    assert out[2] == (0.5 * 0.5 * 1.0 + 0.5 * 3.0) / (1 - 0.25)
    assert np.array_equal(smoothed(values, 0.0), values, equal_nan=True)


def _synthetic_model(**options: Any) -> RunModel:
    return _model(list(synthetic_records(**options)))


def test_markers_at_the_first_nan_loss_and_first_nonfinite_layer() -> None:
    runs = RunList()
    runs.add(_synthetic_model(steps=40, stats_every=1, overflow_every=30), None)
    runs.add(_synthetic_model(steps=40, precision="bf16"), None)
    markers = run_markers(runs.overlay())
    assert [(m.key, m.step, m.text) for m in markers] == [
        (0, 29, "first NaN loss"),
        (0, 29, "first inf/NaN: layer head"),
    ]


def test_hover_reads_every_overlaid_run_at_the_step() -> None:
    runs = RunList()
    first = runs.add(_synthetic_model(steps=20), None)
    runs.add(_synthetic_model(steps=10, seed=1), None)
    text = hover_plain(hover_text(runs.overlay(), 15.4, "loss"))
    loss = first.model.scalars.column("loss")[15]
    assert text.startswith("step 15\n")
    assert f"{loss:.4g}" in text
    assert text.count("\n") == 2  # a line per run: the shorter run shows its last step
    assert hover_text(runs.overlay(), -1.0, "loss") == []


def test_run_list_titles_live_only_while_the_job_runs_and_drops_empty_runs() -> None:
    runs = RunList()
    live_model = RunModel()
    live_model.header = HeaderRecord(config=TrainConfig().to_dict())
    live = runs.add(live_model, None, live=True)
    runs.select(live)
    assert runs.title(live, job_active=True).endswith("(live)")
    assert runs.overlay() == []  # no step: no legend entry
    # Quick Start/Stop: the job ended before its first step; the run is not kept.
    assert runs.end_live(live) is False
    runs.remove(live)
    assert runs.runs == [] and runs.current is None
    assert runs.end_live(runs.add(RunModel(), None, live=True), keep_empty=True) is True
    kept = runs.add(_synthetic_model(steps=5), None, live=True)
    assert runs.end_live(kept) is True
    assert "(live)" not in runs.title(kept, job_active=False)
    assert "(live)" not in runs.title(kept, job_active=True)  # the job now feeds another run


def test_selected_runs_settings_are_what_start_would_run() -> None:
    model = _synthetic_model(steps=5, precision="bf16", seed=7)
    settings = settings_of(model)
    assert isinstance(settings, TrainConfig)
    assert (settings.precision, settings.seed, settings.steps) == ("bf16", 7, 5)
    broken = _model([_header(steps="many")])
    assert isinstance(settings_of(broken), str)
    # A user's loop under the monitor's time budget: "stats_every": null in its header. Its
    # settings were refused ("stats-every must be a whole number") and the form kept others.
    budget = _model([_header("bf16", task="user loop", stats_every=None, stats_budget=0.05)])
    settings = settings_of(budget)
    assert isinstance(settings, TrainConfig)
    assert (settings.precision, settings.stats_every) == ("bf16", 1)


def test_long_texts_from_a_run_file_are_elided() -> None:
    huge = str(10**308)
    text = elide(f"task {huge}", 40)
    assert len(text) == 40 and "…" in text and text.startswith("task 1")
    assert elide("a\nb") == "a b"
    model = _model([_header(steps=10**309), {"type": "step", "step": 3, "loss": 1.0}])
    progress = progress_view(model, job_active=False, state=None)
    assert progress.permille == 0 and len(progress.text) < 60


def test_progress_is_in_thousandths_whatever_the_step_count() -> None:
    model = _model([_header(steps=2**40), {"type": "step", "step": 2**39 - 1, "loss": 1.0}])
    view = progress_view(model, job_active=True, state="running")
    assert view.permille == 500  # Qt's bar holds 32-bit ints: 2**40 raised OverflowError
    assert view.text.startswith(f"{2**39}/{2**40} steps")


def test_form_problems_summarized_in_one_line() -> None:
    titles = {"steps": "Steps", "seed": "Seed"}
    assert summarize_problems({}, titles) == ""
    assert summarize_problems({"steps": "x"}, titles) == "Fix 1 field: Steps"
    assert summarize_problems({"steps": "x", "seed": "y"}, titles) == "Fix 2 fields: Steps, Seed"


def test_hover_over_the_histogram_and_the_heatmap_reads_the_cell() -> None:
    from fpexplorer.gui.training.run_model import HeatmapBuffer
    from fpexplorer.gui.training.view_model import heatmap_hover_text, histogram_hover_text
    from fpexplorer.training.records import Histogram

    hist = Histogram(lo=-12, counts=(1, 3), zero=4)
    text = hover_plain(histogram_hover_text(hist, -10.5))
    assert text == "2^-11 ≤ |g| < 2^-10\n3 of 8 values (37.5%)"
    assert hover_plain(histogram_hover_text(hist, 5.0)) == "2^5 ≤ |g| < 2^6\n0 of 8 values (0%)"
    assert histogram_hover_text(None, 0.0) == []
    heat = HeatmapBuffer(capacity=4)
    heat.add(0, Histogram(lo=-3, counts=(1, 1)))
    heat.add(10, Histogram(lo=-3, counts=(0, 100)))
    assert hover_plain(heatmap_hover_text(heat, 3.0, -2.5)) == (
        "steps from 0\n2^-3 ≤ |g| < 2^-2\n≈10^-0.3 of the values"  # a half: log10 0.5, rounded
    )
    assert hover_plain(heatmap_hover_text(heat, 12.0, -3.0)) == (
        "steps from 10\n2^-3 ≤ |g| < 2^-2\nat most 10^-8 of the values"
    )
    assert heatmap_hover_text(heat, 40.0, -3.0) == []


def test_heatmap_columns_sit_at_their_own_steps_when_statistics_steps_are_uneven() -> None:
    # Statistics off but for skipped steps (or a time budget): columns at steps 14, 26, 27
    # and 58 were spread evenly from 14 to 58, so step 39 showed a column of "steps from
    # 29" that no statistics step had, and step 58's histogram was drawn from step 47.
    from fpexplorer.gui.training.run_model import HeatmapBuffer
    from fpexplorer.gui.training.view_model import heat_layout, heatmap_hover_text

    heat = HeatmapBuffer(capacity=8)
    for step in (14, 26, 27, 58):
        heat.add(step, Histogram(lo=-3, counts=(1,)))
    layout = heat_layout(heat)
    assert (layout.start, layout.cell) == (14.0, 1.0)
    centres = layout.start + (np.arange(len(layout.columns)) + 0.5) * layout.cell
    shown = {int(step): int(column) for step, column in zip(centres, layout.columns, strict=True)}
    assert [shown[step] for step in (14, 25, 26, 27, 57, 58)] == [0, 0, 1, 2, 2, 3]
    for step, first in ((20.0, 14), (26.5, 26), (39.0, 27), (58.2, 58)):
        assert hover_plain(heatmap_hover_text(heat, step, -2.5)).startswith(f"steps from {first}\n")
    assert heatmap_hover_text(heat, 13.0, -2.5) == []
    # Evenly spaced statistics steps keep one cell per column.
    even = HeatmapBuffer(capacity=8)
    for step in range(0, 50, 10):
        even.add(step, Histogram(lo=-3, counts=(1,)))
    assert heat_layout(even).columns.tolist() == [0, 1, 2, 3, 4]


def test_a_missing_activation_histogram_says_why_not_yet() -> None:
    # Statistics off: a skipped step records its parameter gradients only. The activation
    # histogram of the ended run read "no statistics step yet".
    from fpexplorer.gui.training.view_model import no_histogram_reason

    skipped = {"type": "step", "step": 3, "loss": math.inf, "scale": 65536.0, "skipped": True,
               "grad_hist": {"lo": 0, "counts": [], "zero": 0, "inf": 0, "nan": 8}}  # fmt: skip
    model = _model([_header("fp16", stats_every=0), skipped])
    model.closed = True
    assert model.latest_stats is not None and model.latest_stats.act_hist is None
    assert no_histogram_reason(model, None) == "step 3 recorded parameter gradients only"
    plain = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False}
    ended = _model([_header("fp16", stats_every=5), plain])
    assert no_histogram_reason(ended, None) == "no statistics step yet"
    ended.closed = True
    assert no_histogram_reason(ended, None) == "no statistics step in this run"


def test_a_compiled_models_activation_histogram_says_not_measured_never_zero() -> None:
    # AmpMonitor on a compiled model records parameter gradients on statistics steps and
    # says why its activation statistics are absent: the histogram and the layer table must
    # say "not measured", not show zeros.
    from fpexplorer.gui.training.view_model import layer_table_view, no_histogram_reason
    from fpexplorer.training.records import LayerStats, StepRecord, StepStats

    stats = StepStats(
        grad_hist=Histogram(lo=-8, counts=(3, 5)),
        layers=(LayerStats(name="0", grad_norm=0.5), LayerStats(name="1")),
        activations_not_measured="compiled model",
    )
    step = StepRecord(step=4, loss=1.0, scale=1.0, skipped=False, stats=stats)
    model = _model([_header("bf16", stats_every=2), step])
    assert no_histogram_reason(model, None) == "not measured: compiled model"
    rows = layer_table_view(model).rows
    assert [row.cells[2:5] for row in rows] == [("–", "–", "–")] * 2
    assert rows[0].cells[1] == number_text(0.5)
    unchecked = dataclasses.replace(
        stats, activations_not_measured="compiled model; forward outputs not checked"
    )
    model = _model([_header("bf16", stats_every=2), dataclasses.replace(step, stats=unchecked)])
    assert no_histogram_reason(model, None) == "not measured: compiled model"


def test_a_sampled_lost_update_share_is_marked_as_an_estimate() -> None:
    from fpexplorer.training.records import LostUpdates

    model = _model([_header("fp16"), _nan_step(0, layers=[], grad_hist=None)])
    assert model.latest_stats is not None
    exact = LostUpdates(share=0.25, kind="fp16_would_lose")
    sampled = LostUpdates(share=0.25, kind="actual", sampled=4096, bound=0.0125)
    model.latest_stats = dataclasses.replace(model.latest_stats, lost_updates=exact)
    assert lost_updates_text(model) == "FP16 weights would lose 25% of these updates to rounding."
    model.latest_stats = dataclasses.replace(model.latest_stats, lost_updates=sampled)
    assert lost_updates_text(model) == (
        "<b>≈25% (± 1.25…%, 99.9%; 4,096 sampled)</b> of weight updates lost to FP16 rounding."
    )


def test_what_if_shares_are_of_finite_values_and_n_a_over_nan() -> None:
    from fpexplorer.gui.training.run_model import what_if
    from fpexplorer.gui.training.view_model import what_if_text
    from fpexplorer.training.records import Histogram

    # 3 values below 2**-24 at scale 1, 1 inside FP16's range; zeros and NaNs aside.
    hist = Histogram(lo=-30, counts=(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1),
                     zero=4, nan=2)  # fmt: skip
    text = what_if_text(what_if(hist, 0))
    assert text.startswith("What-if at loss scale 2^0 in FP16: <b>75%</b> underflow (3)")
    assert "of 4 finite non-zero; already zero 4, non-finite 2." in text
    nan_only = Histogram(lo=0, counts=(), nan=12)
    # Was: "0% underflow ... 0% overflow" over twelve NaNs.
    assert what_if_text(what_if(nan_only, 0)) == (
        "What-if at loss scale 2^0 in FP16: n/a (no finite non-zero gradient); "
        "already zero 0, non-finite 12."
    )


@pytest.mark.parametrize("mode", PRECISION_MODES, ids=lambda mode: mode.name)
def test_code_view_follows_the_precision_table(mode: PrecisionMode) -> None:
    from fpexplorer.gui.training.code_snippet import pytorch_code

    code = pytorch_code(TrainConfig(precision=mode.name))
    compile(code, mode.name, "exec")
    assert mode.code_note.splitlines()[0] in code
    autocast = f"torch.autocast(device_type=device.type, dtype=torch.{mode.autocast_dtype})"
    assert (autocast in code) == (mode.autocast_dtype is not None)
    assert ("torch.amp.GradScaler(" in code) == (mode.scaler == "dynamic")
    assert ("loss_scale = 1024.0" in code) == (mode.scaler == "static")


def test_a_new_precision_mode_gets_its_code_and_views_with_no_change(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import code_snippet, view_model

    pure_bf16 = PrecisionMode(
        name="pure-bf16", description="model and optimizer in BF16", autocast_dtype=None,
        params_dtype="bfloat16", scaler="none", master_weights=False,
        code_note="BF16 weights: updates below half a BF16 ulp are lost.",
    )  # fmt: skip
    find = {mode.name: mode for mode in (*PRECISION_MODES, pure_bf16)}.get
    monkeypatch.setattr(code_snippet, "find_precision_mode", find)
    monkeypatch.setattr(view_model, "find_precision_mode", find)
    code = code_snippet.pytorch_code(TrainConfig(precision="pure-bf16"))
    compile(code, "pure-bf16", "exec")
    assert "model = model.to(torch.bfloat16)" in code and "loss.backward()" in code
    assert "return t.to(device, torch.bfloat16)" in code
    model = _model([_header("pure-bf16"), {"type": "step", "step": 0, "loss": 1.0}])
    assert view_model.gradient_format(model) == "bfloat16"
    assert not view_model.is_scaled(model)
    assert layer_table_view(model).columns[3] == "headroom in BF16"


def test_weights_fp16_cannot_hold_are_said_so_not_a_share_lost() -> None:
    """Weights beyond FP16's range (or inf/NaN) read inf == inf before and after the step:
    the card said "FP16 weights would lose 100% of these updates to rounding" (the record's
    share), which is untrue; it says what is the case (the monitor's count is tested in
    test_monitor_updates)."""
    from fpexplorer.training.records import LostUpdates

    model = _model([_header("fp16"), _nan_step(0, layers=[], grad_hist=None)])
    assert model.latest_stats is not None
    would = LostUpdates(share=1.0, kind="fp16_would_lose", intended=15, nonfinite_weights=15)
    model.latest_stats = dataclasses.replace(model.latest_stats, lost_updates=would)
    assert lost_updates_text(model) == (
        "lost updates: n/a on step 0: FP16 cannot hold 15 of the 15 weights updated (|w| > "
        "65504, or inf/NaN): FP16 weights would overflow there, not lose updates to rounding."
    )
    actual = LostUpdates(share=0.5, kind="actual", intended=2_000_000, sampled=4096,
                         bound=0.03, nonfinite_weights=2048)  # fmt: skip
    model.latest_stats = dataclasses.replace(model.latest_stats, lost_updates=actual)
    assert lost_updates_text(model) == (
        "lost updates: n/a on step 0: 2,048 of the 4,096 sampled weights updated are inf/NaN "
        "in FP16 (the weights overflowed; no update can show there)."
    )


NAMES = [
    "synthetic fp16 lr=0.0002 seed=1",
    "synthetic bf16 lr=0.00025 seed=1 growth_interval=100",
    "[rank 3] train_resnet50.py:make fp16 init=1024 lr=3e-05 seed=11",
    "mlp pure-fp16 lr=0.001 seed=0 — completed (live)",
    "my_run_file_v2.jsonl",
]


def _whole_words_only(shown: str, full: str) -> None:
    """Every word shown is a word of `full`, or '…', or the first word's head cut outside
    any number; the words keep their order."""
    words = full.split()
    for word in shown.split():
        if word == "…":
            continue
        if word.endswith("…"):
            head = word[:-1]
            task = next(w for w in words if not w.startswith("[") and not w.endswith("]"))
            assert task.startswith(head) and len(head) >= 3, (shown, full)
            assert not (head[-1].isdigit() and task[len(head)].isdigit()), (shown, full)
            continue
        assert word in words, (word, shown, full)


@pytest.mark.parametrize("name", NAMES)
def test_run_names_are_elided_a_word_at_a_time_never_inside_a_number(name: str) -> None:
    # Qt's middle elision and `elide` cut "synthetic fp16 lr=0.0002 seed=1" to "lr=0…2":
    # a number cut in its middle reads as another number.
    seen = set()
    for limit in range(len(name), 0, -1):
        shown = elide_name(name, limit)
        assert len(shown) <= limit or shown == "…"
        _whole_words_only(shown, name)
        seen.add(shown)
    assert len(seen) >= 4  # it shortens in steps, not all at once
    assert elide_name("synthetic fp16 lr=0.0002 seed=1", 20) == "… lr=0.0002 seed=1"
    assert elide_name("synthetic fp16 lr=0.0002 seed=1", 28) == "synth… fp16 lr=0.0002 seed=1"


def test_elided_names_keep_what_tells_them_from_the_runs_shown_with_them() -> None:
    # The settings most of the runs shown also hold go first: bf16 is this run's alone.
    names = ["synthetic fp16 lr=0.0002 seed=1", "synthetic fp16 lr=0.0002 seed=2",
             "synthetic bf16 lr=0.00025 seed=1", "synthetic fp16 lr=3e-05 seed=1"]  # fmt: skip
    shared = name_word_counts(names)
    short = [elide_words(n, lambda t: len(t) <= 20, shared) for n in names]
    assert short == ["… lr=0.0002 seed=1", "… lr=0.0002 seed=2", "… bf16 lr=0.00025 …",
                     "… lr=3e-05 seed=1"]  # fmt: skip
    # Alone, from the left: the distinguishing end stays.
    assert elide_words(names[2], lambda t: len(t) <= 20) == "… lr=0.00025 seed=1"


def test_a_status_that_says_something_went_wrong_outlasts_the_settings() -> None:
    # Failed before: the status went second whatever it said, so at 1920x1080 the run list
    # showed a lost rank's run without " — failed" (only in its tooltip), keeping "#2".
    fits = lambda t: len(t) <= 28  # noqa: E731
    failed = "mlp bf16 lr=0.01 seed=0 #2 — failed"
    assert elide_words(failed, fits) == "… lr=0.01 seed=0 #2 — failed"
    assert elide_words(failed, lambda t: len(t) <= 22) == "… seed=0 #2 — failed"
    assert elide_words(failed, lambda t: len(t) <= 13) == "… #2 — failed"
    assert elide_words(failed, lambda t: len(t) <= 11) == "… — failed"
    # A routine status still goes before the settings that tell runs apart.
    completed = "mlp bf16 lr=0.01 seed=0 #2 — completed"
    assert elide_words(completed, fits) == "… bf16 lr=0.01 seed=0 #2 …"
    running = "mlp bf16 lr=0.01 seed=0 #2 — running (live)"
    assert elide_words(running, fits) == "… bf16 lr=0.01 seed=0 #2 …"


def test_eliding_a_huge_name_asks_few_widths() -> None:
    # A damaged file's name of 100,000 characters, or of 5,000 settings, was shortened one
    # cut at a time (a width asked and a string joined per cut): a second per call, on
    # every redraw. Each shortening leaves the text no longer: bisection asks ~log2 widths.
    asked: list[int] = []

    def fits(text: str) -> bool:
        asked.append(len(text))
        return len(text) <= 60

    huge = "x" * 100_000 + " fp16 lr=0.1 seed=1"
    assert elide_words(huge, fits) == "x" * 40 + "… fp16 lr=0.1 seed=1"
    assert len(asked) <= 20
    asked.clear()
    many = " ".join(f"k{i}=v{i}" for i in range(5000))
    assert elide_words(many, fits) == "… k4996=v4996 k4997=v4997 k4998=v4998 k4999=v4999"
    assert len(asked) <= 20


def test_huge_counts_are_never_cut_in_the_middle_of_their_digits() -> None:
    # A damaged header's 10**30 + 7 planned steps read "4/1000000000…0000000007 steps":
    # a number cut in its middle reads as another. The display rule's notation instead.
    step = {"type": "step", "step": 3, "loss": 1.0, "steps_per_s": 2.0, "time": 1.0}
    model = _model([_header(steps=10**30 + 7), step])
    progress = progress_view(model, job_active=False, state=None).text
    assert progress.startswith("4/1.000…e30 steps")
    assert throughput_text(model).endswith("step 4 of 1.000…e30")
    assert count_text(2**40) == "1099511627776" and count_text(10**30) == "1e30"
