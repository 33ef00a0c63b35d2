"""The panel's Qt-free parts: RunModel, what-if, the job state machine, the code snippets."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpexplorer.gui.training.code_snippet import pytorch_code
from fpexplorer.gui.training.job_state import JobState, JobStateError, JobStateMachine
from fpexplorer.gui.training.run_model import (
    DecimatingSeries,
    HeatmapBuffer,
    Histogram,
    RunModel,
    distinguishing_details,
    run_label,
    what_if,
)
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.config import PRECISION_NAMES, TrainConfig

# ----- what-if against numpy's float16 as the oracle -------------------------------------


def _histogram_of(values: np.ndarray) -> Histogram:
    magnitudes = np.abs(values.astype(np.float64))
    finite = np.isfinite(magnitudes) & (magnitudes > 0)
    exponents = np.floor(np.log2(magnitudes[finite])).astype(np.int64)
    lo = int(exponents.min())
    counts = np.bincount(exponents - lo)
    return Histogram(
        lo=lo,
        counts=tuple(int(c) for c in counts),
        zero=int((magnitudes == 0).sum()),
        inf=int(np.isinf(magnitudes).sum()),
        nan=int(np.isnan(magnitudes).sum()),
    )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    centre=st.integers(-60, 30),
    log2_scale=st.integers(-20, 40),
)
def test_what_if_matches_float16_casts(seed: int, centre: int, log2_scale: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.exp2(rng.normal(centre, 12, size=4000)) * rng.choice([-1.0, 1.0], size=4000)
    values[:7] = 0.0
    values[7:9] = np.inf
    values[9] = np.nan
    scaled = values * 2.0**log2_scale  # exact: a power of two
    # The binade [2**15, 2**16) holds both 65504 and values that round to inf; the counts
    # cannot split it, so the oracle leaves that narrow band out.
    scaled_finite = np.where(np.isfinite(scaled), np.abs(scaled), 0.0)
    keep = ~((scaled_finite >= 65520.0) & (scaled_finite < 65536.0))
    values, scaled = values[keep], scaled[keep]
    hist = _histogram_of(values)
    result = what_if(hist, log2_scale)
    magnitude = np.abs(scaled)
    finite_nonzero = np.isfinite(magnitude) & (magnitude > 0)
    with np.errstate(over="ignore"):
        as_fp16 = scaled.astype(np.float16)
    assert result.overflow == int((np.isinf(as_fp16) & np.isfinite(scaled)).sum())
    assert result.underflow == int((finite_nonzero & (magnitude < 2.0**-24)).sum())
    # Everything below half the smallest subnormal really is flushed to zero by FP16.
    flushed = finite_nonzero & (magnitude < 2.0**-25)
    assert np.all(as_fp16[flushed] == 0)
    assert result.subnormal == int(
        (finite_nonzero & (magnitude >= 2.0**-24) & (magnitude < 2.0**-14)).sum()
    )
    assert result.zero == int((values == 0).sum())
    assert result.nonfinite == 3
    assert result.total == len(values)


def test_what_if_shifts_a_histogram_recorded_at_a_scale() -> None:
    hist = Histogram(lo=-30, counts=(5, 0, 0, 7), zero=1, inf=0, nan=0)
    # Recorded at 2**10: binade -30 holds unscaled values of 2**-40. At scale 2**20 they
    # land at 2**-20 (normal), the binade -27 at 2**-17 (normal) too.
    at_20 = what_if(hist, 20, recorded_log2_scale=10)
    assert (at_20.underflow, at_20.subnormal) == (0, 12)
    at_0 = what_if(hist, 0, recorded_log2_scale=10)
    assert at_0.underflow == 12
    assert at_0.share(at_0.underflow) == pytest.approx(12 / 13)


# ----- bounded buffers ------------------------------------------------------------------


def test_decimating_series_stays_bounded_and_spans_the_run() -> None:
    series = DecimatingSeries(("loss",), capacity=64)
    for step in range(10_000):
        series.append(step, [float(step)])
    assert len(series) <= 64
    assert series.steps[0] == 0
    assert series.steps[-1] >= 10_000 - 2 * series.stride
    assert np.all(np.diff(series.steps) == series.stride)
    assert np.array_equal(series.column("loss"), series.steps)


def test_heatmap_merges_columns_and_keeps_counts() -> None:
    heat = HeatmapBuffer(capacity=8)
    hist = Histogram(lo=-3, counts=(1, 2, 3), zero=0, inf=0, nan=0)
    for step in range(100):
        heat.add(step, hist)
    assert len(heat) <= 8
    assert heat.step_span == (0.0, 99.0)
    image = heat.image()
    assert image.shape[0] == len(heat)
    # Shares do not change by merging identical histograms: 3/6 in binade -1.
    assert image[0, -1 - (-150)] == pytest.approx(math.log10(0.5), abs=1e-6)


@pytest.mark.slow  # 21000 synthetic steps: about half a second
def test_run_model_memory_is_bounded() -> None:
    # Buffers grow as rows come (growing.py), up to their capacities; then they decimate.
    small, large = RunModel(), RunModel()
    small.add_records(synthetic_records(1_000, stats_every=5))
    records = list(synthetic_records(20_000, stats_every=5))
    large.add_records(records[:10_000])  # every buffer is at its capacity by then
    halfway = large.memory_nbytes()
    large.add_records(records[10_000:])
    assert large.steps_seen == 20_000
    assert large.memory_nbytes() == halfway
    assert small.memory_nbytes() < halfway  # a short run holds what it needs
    assert len(large.scalars) <= large.scalars.capacity


# ----- records into the model -----------------------------------------------------------


def test_run_model_reads_a_synthetic_run() -> None:
    model = RunModel()
    model.add_records(synthetic_records(300, overflow_every=97, stats_every=1))
    assert model.status == "completed"
    assert model.steps_seen == 300
    assert model.skipped_count == 3
    assert model.first_nonfinite_event is not None
    assert model.first_nonfinite_event.step == 96
    assert model.first_nonfinite_event.first_nonfinite == "head"
    assert model.latest_stats is not None and model.latest_stats.grad_hist is not None
    assert model.progress() == (300, 300)
    assert model.growth() is not None
    # Non-finite floats arrive as JSON strings and are read back as floats.
    live = RunModel()
    live.add_records([{"type": "step", "step": 0, "loss": "NaN", "scale": "Infinity"}])
    assert math.isnan(live.scalars.column("loss")[-1])
    assert math.isinf(live.scalars.column("scale")[-1])


def test_run_model_assembles_a_run_as_the_run_logs_reader_does(tmp_path: Path) -> None:
    """Two runs' logs concatenated (or a log with records out of place): the panel took
    every header, end and step as it came, and showed the second run's settings and end
    over both runs' steps, where `runs summarize` (runlog.collect_run) read the first's."""
    from fpexplorer.training.records import HeaderRecord, encode_line
    from fpexplorer.training.runlog import load_run

    first = list(synthetic_records(5))
    second = [
        dataclasses.replace(r, config={**r.config, "seed": 7}) if isinstance(r, HeaderRecord) else r
        for r in synthetic_records(3)
    ]
    records = [*first, *second]
    model = RunModel()
    model.add_records(records)
    path = tmp_path / "both.jsonl"
    path.write_text("".join(encode_line(r) + "\n" for r in records))
    run = load_run(path)
    assert model.header == run.header and model.config["seed"] != 7
    assert model.end == run.end
    assert model.steps_seen == len(run.steps) == 5
    assert set(model.problems) == set(run.problems)
    # A live job's provisional header (from the form, before any step) is replaced by the
    # job's own.
    live = RunModel()
    live.add_records([second[0], first[0], first[1]])
    assert live.header == first[0] and live.problems == []


def test_run_model_reports_bad_records_without_raising() -> None:
    model = RunModel()
    model.add_records(["not a dict", {"type": "step"}, {"type": "future-kind"}])
    assert len(model.problems) == 2
    assert model.steps_seen == 0


def test_run_label_names_settings() -> None:
    assert run_label({"task": "mlp", "precision": "fp16", "lr": 0.01, "seed": 3}) == (
        "mlp fp16 lr=0.01 seed=3"
    )
    assert "scale=128" in run_label({"task": "mlp", "precision": "fp16-static", "loss_scale": 128})
    assert run_label({"task": "/x/y/own.py:make", "precision": "bf16"}) == "own.py:make bf16"
    assert run_label(None, fallback="file.jsonl") == "file.jsonl"
    # Settings as given, never cut to six digits (two learning rates read the same before,
    # "lr=0.000123457"), in the app's notation (1e-5, not 1e-05).
    first = run_label({"task": "mlp", "precision": "fp16", "lr": 0.0001234567})
    second = run_label({"task": "mlp", "precision": "fp16", "lr": 0.0001234568})
    assert first == "mlp fp16 lr=0.0001234567" and second == "mlp fp16 lr=0.0001234568"
    assert run_label({"task": "mlp", "precision": "bf16", "lr": 1e-5}) == "mlp bf16 lr=1e-5"
    assert "init=1024" in run_label({"task": "mlp", "precision": "fp16", "init_scale": 1024.0})


# ----- the job state machine ------------------------------------------------------------


def test_job_state_machine_moves_and_refuses_misuse() -> None:
    machine = JobStateMachine()
    assert machine.state is JobState.IDLE
    with pytest.raises(JobStateError, match="cannot pause a job that is idle"):
        machine.move("pause")
    assert machine.move("start") is JobState.RUNNING
    with pytest.raises(JobStateError, match="cannot start"):
        machine.move("start")
    assert machine.move("pause") is JobState.PAUSED
    assert machine.move("resume") is JobState.RUNNING
    assert machine.move("stop") is JobState.STOPPING
    with pytest.raises(JobStateError):
        machine.move("resume")
    assert machine.move("finish") is JobState.DONE
    assert not machine.active
    assert machine.move("start") is JobState.RUNNING
    assert machine.move("fail") is JobState.FAILED
    with pytest.raises(JobStateError, match="unknown job action"):
        machine.move("explode")


# ----- the code view --------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISION_NAMES)
def test_pytorch_code_compiles_for_every_precision(precision: str) -> None:
    code = pytorch_code(TrainConfig(precision=precision, device="cpu", growth_interval=123))
    compile(code, f"<{precision}>", "exec")
    expected = {
        "fp16": ["torch.amp.GradScaler", "growth_interval=123", "torch.float16"],
        "bf16": ["torch.bfloat16"],
        "fp16-static": ["loss_scale = 1024.0"],
        "pure-fp16": ["model.half()"],
        "fp16-noscale": ["torch.float16"],
        "fp32": ["loss.backward()"],
        "fp8": ["convert_to_float8_training", 'from_recipe_name("tensorwise")'],
        "fp8-rowwise": ["convert_to_float8_training", 'from_recipe_name("rowwise")'],
        "mxfp8": ["swap_linears(model, 'mxfp8_e4m3'"],
        "mxfp6": ["swap_linears(model, 'mxfp6_e2m3'"],
        "mxfp4": ["swap_linears(model, 'mxfp4'"],
        "nvfp4": ["swap_linears(\n    model, 'nvfp4'", "weight_blocks='2d', hadamard=True"],
    }[precision]
    for text in expected:
        assert text in code
    if precision != "fp16":
        assert "GradScaler(" not in code


def test_distinguishing_details_name_what_differs() -> None:
    base = {"task": "mlp", "precision": "fp16", "lr": 0.01, "seed": 0, "steps": 100}
    configs = [
        {**base, "growth_interval": 2000},
        {**base, "growth_interval": 100, "batch_size": None},
        {**base, "precision": "bf16", "growth_interval": 100},
        {**base, "growth_interval": 100, "batch_size": None},
    ]
    details = distinguishing_details(configs)
    assert details[2] == ""  # its label is unique already
    assert details[0] == "growth_interval=2000"
    assert details[1] == "growth_interval=100 #1" and details[3] == "growth_interval=100 #2"
    same = distinguishing_details([base, dict(base)])
    assert same == ["#1", "#2"]


def test_an_nvfp4_run_logged_before_the_recipe_options_is_named_by_what_it_ran() -> None:
    # Was "hadamard=default nvfp4_weight_blocks=default": today's default is the recipe
    # (2d, Hadamard), which that run did not use.
    base = {"task": "mlp", "precision": "nvfp4", "lr": 0.01, "seed": 0}
    old = dict(base)  # its header has neither option
    full = {**base, "nvfp4_weight_blocks": "2d", "hadamard": True}
    details = distinguishing_details([old, full])
    assert details == [
        "hadamard=False nvfp4_weight_blocks=1d",
        "hadamard=True nvfp4_weight_blocks=2d",
    ]
    same = {**base, "nvfp4_weight_blocks": "1d", "hadamard": False}
    assert distinguishing_details([old, same]) == ["#1", "#2"]


def test_a_new_run_model_allocates_its_rows_as_they_come() -> None:
    # 525 small runs opened at once held ~560 MB: each model allocated its full buffers
    # (2.9 MB) before its first step. Now a short run holds what it needs.
    fresh = RunModel()
    assert fresh.memory_nbytes() < 100_000
    short = RunModel()
    short.add_records(synthetic_records(12, stats_every=4))
    assert short.memory_nbytes() == fresh.memory_nbytes()  # 12 steps fit the first rows
    assert len(short.scalars) == 12
