"""The Low precision page's numbers, without Qt: exact values from hand-built records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fpexplorer.gui.training.quant_model import (
    QuantHistory,
    layer_choices,
    role_choices,
)
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import (
    AMAX_HISTORY,
    E4M3_MAX,
    E5M2_MAX,
    quant_layer_names,
    synthetic_records,
)
from fpexplorer.training.records import (
    Histogram,
    QuantTensorStats,
    StepRecord,
    StepStats,
    decode_record,
    encode_line,
)


def q(layer: str, role: str, **fields: object) -> QuantTensorStats:
    values: dict[str, object] = {"format": "float8_e4m3fn", "amax": 1.0}
    values.update(fields)
    return QuantTensorStats(layer=layer, role=role, **values)  # type: ignore[arg-type]


def step(number: int, *entries: QuantTensorStats) -> StepRecord:
    return StepRecord(
        step=number, loss=1.0, scale=1.0, skipped=False, growth_tracker=0, lr=0.1,
        grad_norm=1.0, steps_per_s=1.0, time=0.0, stats=StepStats(quant=entries),
    )  # fmt: skip


def test_a_run_without_quantized_layers_has_an_empty_falsy_history() -> None:
    model = RunModel()
    model.add_records(synthetic_records(30, precision="fp16", stats_every=1))
    assert not model.quant
    assert len(model.quant) == 0
    assert model.quant.layers == [] and model.quant.last_step is None
    assert model.quant.hurts_most("sqnr") is None
    assert model.quant.share_matrix("input", "flushed")[1].shape == (0, 0)
    assert model.quant.series("x", "input", "amax").shape == (0,)


def test_histories_and_matrix_cells_are_the_recorded_numbers() -> None:
    model = RunModel()
    model.add_records(
        [
            step(0, q("a", "input", amax=4.0, scale=112.0, saturated=0.25, flushed=0.125),
                 q("b", "input", amax=0.5, scale=896.0, flushed=0.5, sqnr_db=20.0)),
            step(1),  # no quantized statistics on this step: no column
            step(2, q("a", "input", amax=8.0, scale=56.0, saturated=0.0, sqnr_db=31.5),
                 q("b", "input", amax=1.0, scale=448.0, flushed=0.0625, sqnr_db=19.0)),
        ]
    )  # fmt: skip
    history = model.quant
    assert list(history.steps) == [0.0, 2.0]
    assert list(history.series("a", "input", "amax")) == [4.0, 8.0]
    assert list(history.series("a", "input", "scale")) == [112.0, 56.0]
    steps, log_amax = history.log2_series("b", "input", "amax")
    assert list(steps) == [0.0, 2.0] and list(log_amax) == [-1.0, 0.0]
    layers, flushed = history.share_matrix("input", "flushed")
    assert layers == ["a", "b"]
    assert flushed.tolist() == [[0.125, 0.0], [0.5, 0.0625]]
    _layers, saturated = history.share_matrix("input", "saturated")
    assert saturated.tolist() == [[0.25, 0.0], [0.0, 0.0]]
    latest = history.latest("a", "input")
    assert latest is not None and latest.step == 2 and latest.stats.sqnr_db == 31.5
    sqnr = {row.layer: row for row in history.sqnr_by_layer("input")}
    assert (sqnr["a"].latest, sqnr["a"].latest_step) == (31.5, 2)
    # a's first SQNR was not measured (NaN): its minimum is the one measured value.
    assert (sqnr["a"].minimum, sqnr["a"].minimum_step) == (31.5, 2)
    assert (sqnr["b"].minimum, sqnr["b"].minimum_step) == (19.0, 2)
    assert history.last_step == 2 and history.statistics_steps == 2


def test_the_tensor_that_hurts_most_by_each_criterion() -> None:
    history = QuantHistory()
    history.add(10, [q("a", "input", sqnr_db=12.0, saturated=0.3),
                     q("a", "grad_output", sqnr_db=25.0, flushed=0.4)])  # fmt: skip
    history.add(20, [q("a", "input", sqnr_db=30.0, saturated=0.0),
                     q("a", "grad_output", sqnr_db=22.0, flushed=0.1),
                     q("b", "weight", sqnr_db=math.inf)])  # fmt: skip
    latest = history.hurts_most("sqnr")
    assert latest is not None
    assert (latest.layer, latest.role, latest.step, latest.value) == ("a", "grad_output", 20, 22.0)
    over_run = history.hurts_most("sqnr", over_run=True)
    assert over_run is not None
    assert (over_run.layer, over_run.role) == ("a", "input")
    assert (over_run.step, over_run.value) == (10, 12.0)
    # Nothing saturates on the latest step; over the run, a's input did (30% at step 10).
    assert history.hurts_most("saturated") is None
    worst = history.hurts_most("saturated", over_run=True)
    assert worst is not None and (worst.layer, worst.step, worst.value) == ("a", 10, 0.3)
    flushed = history.hurts_most("flushed")
    assert flushed is not None and (flushed.role, flushed.value) == ("grad_output", 0.1)
    flushed_run = history.hurts_most("flushed", over_run=True)
    assert flushed_run is not None and (flushed_run.step, flushed_run.value) == (10, 0.4)


def test_exact_tensors_hurt_nothing_and_ties_go_to_the_earlier_layer() -> None:
    history = QuantHistory()
    history.add(0, [q("a", "input", sqnr_db=math.inf), q("b", "input", sqnr_db=math.inf)])
    assert history.hurts_most("sqnr") is None
    history.add(1, [q("b", "input", flushed=0.5), q("a", "input", flushed=0.5)])
    worst = history.hurts_most("flushed")
    assert worst is not None and worst.layer == "a"  # a appeared first


def test_nan_and_inf_amax_are_kept_but_not_drawn_on_a_log_axis() -> None:
    history = QuantHistory()
    for number, amax in enumerate((2.0, math.nan, math.inf, 0.0, 0.25)):
        history.add(number, [q("a", "input", amax=amax, scale=None)])
    amax_values = history.series("a", "input", "amax")
    assert np.isnan(amax_values[1]) and np.isposinf(amax_values[2]) and amax_values[3] == 0.0
    steps, log2 = history.log2_series("a", "input", "amax")
    assert list(steps) == [0.0, 4.0] and list(log2) == [1.0, -2.0]
    # A block-only recipe has no per-tensor scale: NaN throughout, nothing to draw.
    assert np.isnan(history.series("a", "input", "scale")).all()
    assert len(history.log2_series("a", "input", "scale")[0]) == 0


def test_missing_roles_and_late_layers_read_nan_where_not_measured() -> None:
    history = QuantHistory(tensor_capacity=1)  # the tensor axis must grow as tensors arrive
    history.add(0, [q("a", "input", flushed=0.5)])
    history.add(1, [q("a", "input", flushed=0.25), q("a", "weight", flushed=0.125)])
    history.add(2, [q("a", "input", flushed=0.0), q("late", "input", flushed=1.0)])
    assert history.layers == ["a", "late"]
    assert history.roles == ["input", "weight"]
    layers, flushed = history.share_matrix("input", "flushed")
    assert layers == ["a", "late"]
    assert flushed[0].tolist() == [0.5, 0.25, 0.0]
    assert np.isnan(flushed[1, :2]).all() and flushed[1, 2] == 1.0
    _layers, weight = history.share_matrix("weight", "flushed")
    assert np.isnan(weight[0, 0]) and weight[0, 1] == 0.125 and np.isnan(weight[0, 2])
    assert np.isnan(weight[1]).all()  # "late" has no weight tensor at all
    assert history.has("a", "weight") and not history.has("late", "weight")
    rows = history.sqnr_by_layer("weight")
    assert rows[1].latest_step is None and math.isnan(rows[1].latest)


def test_roles_keep_the_contracts_order_whatever_order_they_arrive_in() -> None:
    first = QuantHistory()
    first.add(0, [q("x", "grad_output"), q("x", "weight"), q("x", "input"), q("x", "new")])
    second = QuantHistory()
    second.add(0, [q("y", "weight"), q("x", "input")])
    assert first.roles == ["input", "weight", "grad_output", "new"]
    assert role_choices([second, first]) == ["input", "weight", "grad_output", "new"]
    assert layer_choices([second, first]) == ["y", "x"]


def test_a_tensor_given_twice_on_a_step_counts_once_the_last() -> None:
    history = QuantHistory()
    history.add(0, [q("a", "input", amax=1.0), q("a", "input", amax=2.0)])
    assert list(history.series("a", "input", "amax")) == [2.0]


def test_decimation_keeps_every_other_step_and_the_extremes_of_all() -> None:
    history = QuantHistory(capacity=4)
    for number in range(9):
        # The worst saturation happens on step 5, which decimation drops from the rows.
        history.add(number, [q("a", "input", saturated=0.9 if number == 5 else 0.01)])
    assert list(history.steps) == [0.0, 4.0, 8.0]
    assert history.stride == 4
    assert history.statistics_steps == 9
    extreme = history.extreme("a", "input", "saturated")
    assert extreme is not None and (extreme.step, extreme.value) == (5, 0.9)
    worst = history.hurts_most("saturated", over_run=True)
    assert worst is not None and worst.step == 5


def test_bad_capacities_are_refused() -> None:
    with pytest.raises(ValueError, match="even number"):
        QuantHistory(capacity=5)
    with pytest.raises(ValueError, match="tensor_capacity"):
        QuantHistory(tensor_capacity=0)


def test_records_travel_through_the_run_log_into_the_history() -> None:
    record = step(7, q("a", "grad_output", format="float8_e5m2", amax=math.inf,
                       scale_hist=Histogram(lo=-3, counts=(1, 2)), sqnr_db=math.inf))  # fmt: skip
    line = encode_line(record)
    decoded = decode_record(json.loads(line))
    model = RunModel()
    model.add_records([decoded])
    latest = model.quant.latest("a", "grad_output")
    assert latest is not None and latest.stats == record.stats.quant[0]  # type: ignore[union-attr]
    assert math.isinf(model.quant.series("a", "grad_output", "amax")[0])


def test_synthetic_current_scaling_fits_each_steps_amax_and_never_saturates() -> None:
    model = RunModel()
    model.add_records(synthetic_records(120, precision="fp8", stats_every=1,
                                        quant="fp8-dynamic", quant_layers=4))  # fmt: skip
    history = model.quant
    assert history.layers == list(quant_layer_names(4))
    for layer in history.layers:
        for role, top in (("input", E4M3_MAX), ("weight", E4M3_MAX), ("grad_output", E5M2_MAX)):
            amax = history.series(layer, role, "amax")
            scale = history.series(layer, role, "scale")
            assert np.allclose(amax * scale, top, rtol=1e-15)
            assert not history.series(layer, role, "saturated").any()
    assert history.hurts_most("saturated", over_run=True) is None


def test_synthetic_delayed_scale_lags_the_spike_and_saturates_there() -> None:
    model = RunModel()
    model.add_records(synthetic_records(200, precision="fp8", stats_every=1,
                                        quant="fp8-delayed", quant_layers=4))  # fmt: skip
    history = model.quant
    spike_layer = quant_layer_names(4)[2]
    amax = history.series(spike_layer, "input", "amax")
    scale = history.series(spike_layer, "input", "scale")
    # The delayed rule, checked from the recorded amaxes: scale = 448 / max of the previous
    # AMAX_HISTORY amaxes (step 0 has no history: its own amax).
    for number in range(1, 200):
        previous = amax[max(number - AMAX_HISTORY, 0) : number]
        assert scale[number] == E4M3_MAX / previous.max()
    worst = history.hurts_most("saturated", over_run=True)
    assert worst is not None and (worst.layer, worst.role) == (spike_layer, "input")
    # It saturated exactly where the step's amax exceeded what the lagging scale fits.
    saturated_steps = np.nonzero(history.series(spike_layer, "input", "saturated") > 0)[0]
    over = np.nonzero(amax * scale > E4M3_MAX)[0]
    assert len(saturated_steps) and list(saturated_steps) == list(over)
    assert 110 <= worst.step <= 115  # the spike starts at 55% of the run


def test_synthetic_mxfp4_has_block_scales_and_flushes_most_in_deep_gradients() -> None:
    model = RunModel()
    model.add_records(synthetic_records(20, precision="mxfp4", stats_every=5,
                                        quant="mxfp4", quant_layers=6))  # fmt: skip
    history = model.quant
    assert list(history.steps) == [0.0, 5.0, 10.0, 15.0]
    latest = history.latest(history.layers[0], "input")
    assert latest is not None and latest.stats.scale is None
    assert latest.stats.format == "float4_e2m1fn"
    hist = latest.stats.scale_hist
    assert hist is not None and sum(hist.counts) > 0
    assert hist.lo + len(hist.counts) - 1 == math.floor(math.log2(latest.stats.amax)) - 2
    worst = history.hurts_most("flushed")
    assert worst is not None and (worst.layer, worst.role) == (history.layers[-1], "grad_output")


def test_a_tensor_that_held_inf_or_nan_is_named_before_any_criterion() -> None:
    """Its SQNR is NaN (not measured), so "lowest SQNR" pointed at another tensor and the
    page never said that a cast held inf/NaN (was: only "5 amax inf/NaN/0 not drawn" under
    the amax plot, and only for the tensor chosen)."""
    from fpexplorer.gui.training.quant_views import hurts_most_text

    history = QuantHistory()
    history.add(0, [q("a", "input", sqnr_db=30.0), q("b", "input", sqnr_db=12.0)])
    assert history.first_nonfinite is None
    history.add(1, [q("a", "input", amax=math.nan, sqnr_db=math.nan), q("b", "input")])
    history.add(2, [q("a", "input", amax=math.inf), q("b", "grad_output", amax=math.inf)])
    assert history.first_nonfinite == (1, "a", "input")
    worst = history.hurts_most("sqnr", over_run=True)
    assert worst is not None and (worst.layer, worst.value) == ("b", 12.0)
    text = hurts_most_text(worst, "sqnr", True, history.first_nonfinite)
    assert text.startswith("inf/NaN first in a input (step 1). Hurts most (lowest SQNR")
    assert hurts_most_text(worst, "sqnr", True).startswith("Hurts most (lowest SQNR")


@pytest.mark.parametrize(("recipe", "mode"), [("fp8-delayed", "fp8"), ("mxfp4", "mxfp4")])
def test_a_synthetic_demo_run_with_quantized_layers_is_labelled_with_their_mode(
    tmp_path: Path, recipe: str, mode: str
) -> None:
    # `python -m fpexplorer.gui.training.synthetic --quant fp8-delayed` wrote "fp16" runs.
    from fpexplorer.gui.training.synthetic import main

    path = tmp_path / "demo.jsonl"
    assert main(["--steps", "2", "--quant", recipe, "--out", str(path)]) == 0
    header = json.loads(path.read_text().splitlines()[0])
    assert header["config"]["precision"] == mode
    main(["--steps", "2", "--quant", recipe, "--precision", "bf16", "--out", str(path)])
    assert json.loads(path.read_text().splitlines()[0])["config"]["precision"] == "bf16"
