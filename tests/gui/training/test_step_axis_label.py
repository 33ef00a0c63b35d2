"""A long run's curves are drawn from every Nth step: the step axis says so.

Found replaying an 850,000-step log: the loss plot, captioned "Loss per step", drew 3,318
points (every 256th step); zoomed in to steps 1000..1100 it showed one, and a one-step
spike between kept steps is not drawn at all. Nothing on screen said so.
"""

from __future__ import annotations

import pytest

from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.gui.training.view_model import (
    OverlayRun,
    skipped_text,
    step_axis_label,
    throughput_text,
)
from fpexplorer.training.records import StepRecord


def _run(steps: int, key: int = 0) -> OverlayRun:
    model = RunModel(scalar_capacity=64)
    model.add_records(list(synthetic_records(steps, stats_every=0)))
    return OverlayRun(key, f"run {key}", "#336699", model)


@pytest.mark.parametrize(
    ("steps", "label"),
    [
        (64, "step"),  # every step kept
        (65, "step (every 2nd drawn)"),
        (200, "step (every 4th drawn)"),
        (64 * 512, "step (every 512th drawn)"),
        (64 * 32, "step (every 32nd drawn)"),
    ],
)
def test_the_label_names_the_stride(steps: int, label: str) -> None:
    run = _run(steps)
    assert step_axis_label([run]) == label


def test_overlaid_runs_name_the_coarsest() -> None:
    assert step_axis_label([_run(64), _run(200, key=1)]) == "step (every 4th drawn)"
    assert step_axis_label([]) == "step"


@pytest.mark.slow  # a panel
def test_the_panel_plots_carry_the_label(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(make_run("long.jsonl", steps=5000, stats_every=0))
    stride = panel.current_run.model.scalars.stride
    assert stride == 2
    for plot in (panel.loss_plot.plot, panel.scale_plot.plot):
        assert plot.getPlotItem().getAxis("bottom").labelText == "step (every 2nd drawn)"


def test_the_skip_count_says_when_not_every_skip_is_marked() -> None:
    model = RunModel()
    model.MAX_SKIP_EVENTS = 5  # type: ignore[misc]  # the class keeps 2,000
    model.add_records(list(synthetic_records(400, overflow_every=50, stats_every=0)))
    assert model.skipped_count == 8 and len(model.skip_events) == 5
    assert skipped_text(model) == "skipped: 8 (× on the first 5)"
    every = RunModel()
    every.add_records(list(synthetic_records(400, overflow_every=50, stats_every=0)))
    assert skipped_text(every) == "skipped: 8"


def test_the_skip_count_names_each_optimizers_skips() -> None:
    # A GAN's two optimizers under one GradScaler: the panel said "skipped: 3" only, while
    # `runs summarize` said which optimizer skipped (step 2 skipped both).
    outcomes = [
        ("stepped", "stepped"), ("skipped", "stepped"), ("skipped", "skipped"),
        ("stepped", "skipped"), ("stepped", "stepped"),
    ]  # fmt: skip
    model = RunModel()
    model.add_records([
        StepRecord(step=i, loss=1.0, scale=2.0**16, skipped="skipped" in pair,
                   optimizer_outcomes=pair)
        for i, pair in enumerate(outcomes)
    ])  # fmt: skip
    assert skipped_text(model) == "skipped: 3 (per optimizer: 2, 2)"
    # One optimizer: its records carry no outcomes, and the count stays as it was.
    single = RunModel()
    single.add_records([StepRecord(step=0, loss=1.0, skipped=True)])
    assert skipped_text(single) == "skipped: 1"


def test_the_throughput_says_it_is_recent() -> None:
    # The panel's "throughput: 35.1 steps/s" (the last record's rate over its last 10 steps)
    # sat beside `runs compare`'s 58.3 steps/s for the same killed run (steps over the whole
    # run's time) with nothing saying they measure different things.
    model = RunModel()
    model.add_records([StepRecord(step=i, loss=1.0, steps_per_s=35.125) for i in range(3)])
    # Rounded to a tenth, and marked as rounded (35.125 is not 35.1).
    assert throughput_text(model) == "≈35.1 steps/s (recent) · step 3"
    model.add_records([StepRecord(step=3, loss=1.0, steps_per_s=58.5)])
    assert throughput_text(model) == "58.5 steps/s (recent) · step 4"  # exact: no mark
    assert throughput_text(RunModel()) == "throughput: –"
