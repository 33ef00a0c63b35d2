"""The loss-scale what-if: what it says and the dashed curve it draws, against the torch-free
replay of the same run log (a real FP16 run of the overflow task: torch's GradScaler from
2^12, growth interval 4)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np

from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.scaler_whatif import AS_LOGGED, OFF, WhatIfModel
from fpexplorer.training.replay_scaler import ScalerReplay
from fpexplorer.training.runlog import load_run
from fpexplorer.training.scaler_rules import ScalerSettings, resolve_settings

RUN = Path(__file__).parent / "data" / "overflow-fp16-scaler.jsonl"


def loaded() -> RunModel:
    model = RunModel()
    run = load_run(RUN)
    model.add_records([run.header, *run.steps])  # type: ignore[list-item]
    return model


def replayed(settings: ScalerSettings) -> tuple[ScalerReplay, list[float]]:
    replay = ScalerReplay(settings)
    scales = []
    for step in load_run(RUN).steps:
        replayed = replay.add(step)
        assert replayed is not None
        scales.append(replayed.scale)
    return replay, scales


def test_the_model_predicts_what_the_replay_does_and_says_so() -> None:
    run = loaded()
    whatif = WhatIfModel()
    whatif.update(run)
    assert whatif.curve()[0].size == 0 and "Choose a policy" in whatif.summary(run)
    whatif.set_choice("deepspeed", {"init_scale": "4096", "growth_interval": "4"})
    whatif.update(run)
    settings = resolve_settings("deepspeed", init_scale=4096.0, growth_interval=4)
    replay, scales = replayed(settings)
    steps, curve = whatif.curve()
    assert list(curve) == scales and list(steps) == list(range(120))
    text = whatif.summary(run).splitlines()
    assert text[0] == "deepspeed: init 4096, x2 after 4, x0.5 on overflow, hysteresis 2, min 1"
    assert text[1] == (
        f"skipped steps: {replay.predicted_skips} predicted, {replay.logged_skips} logged"
    )
    assert replay.predicted_skips != replay.logged_skips
    assert f"skips differ from step {replay.first_skip_difference}:" in text[4]
    # As logged: the run's own trace, every step.
    whatif.set_choice(AS_LOGGED, {})
    whatif.update(run)
    assert list(whatif.curve()[1]) == [step.scale for step in load_run(RUN).steps]
    assert "the same trace as logged, all 120 steps" in whatif.summary(run)


def test_bad_settings_and_runs_without_amax_say_why(make_run) -> None:  # type: ignore[no-untyped-def]
    run = loaded()
    whatif = WhatIfModel()
    whatif.set_choice("megatron", {"hysteresis": "two"})
    whatif.update(run)
    assert whatif.summary(run) == "hysteresis: 'two' is not a whole number"
    assert whatif.curve()[0].size == 0
    whatif.set_choice("torch", {"hysteresis": "3"})
    whatif.update(run)
    assert "torch's GradScaler has no hysteresis" in whatif.summary(run)
    # inf in float32 (`train` refuses it): no curve of every step skipped at scale inf
    whatif.set_choice(AS_LOGGED, {"init_scale": "1e39"})
    whatif.update(run)
    assert "is inf in float32" in whatif.summary(run) and whatif.curve()[0].size == 0
    # A damaged header (its scaler settings are data from a file): said, never raised.
    damaged = RunModel()
    header = load_run(RUN).header
    assert header is not None
    config = {**header.config, "init_scale": "abc"}
    damaged.add_records([dataclasses.replace(header, config=config), *load_run(RUN).steps])
    whatif.set_choice(AS_LOGGED, {})
    whatif.update(damaged)
    assert whatif.summary(damaged) == "the initial scale 'abc' is not a number"
    synthetic = RunModel()
    synthetic.add_records(load_run(make_run("bf16.jsonl", steps=20, precision="bf16")).steps)
    whatif.set_choice("deepspeed", {})
    whatif.update(synthetic)
    assert "no gradient amax" in whatif.summary(synthetic)


def test_the_panel_draws_the_prediction_dashed_over_the_scale(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(RUN)
    whatif = panel.whatif
    panel.left_tabs.setCurrentWidget(whatif)
    whatif.fields["init_scale"].setText("4096")
    whatif.fields["growth_interval"].setText("4")
    whatif.fields["hysteresis"].setText("3")
    whatif.policy.setCurrentText("megatron")
    xs, ys = panel.scale_plot.prediction.getData()
    _, scales = replayed(
        resolve_settings("megatron", init_scale=4096.0, growth_interval=4, hysteresis=3)
    )
    assert np.array_equal(ys, np.log2(scales)) and np.array_equal(xs, np.arange(120))
    assert whatif.summary.text().startswith("megatron: init 4096, x2 after 4")
    assert whatif.fields["min_scale"].placeholderText() == "1"  # Megatron's default
    # A field edited: the curve follows on editing finished.
    whatif.fields["hysteresis"].setText("1")
    whatif.fields["hysteresis"].editingFinished.emit()
    _, again = replayed(
        resolve_settings("megatron", init_scale=4096.0, growth_interval=4, hysteresis=1)
    )
    assert np.array_equal(panel.scale_plot.prediction.getData()[1], np.log2(again))
    whatif.policy.setCurrentText(OFF)
    assert panel.scale_plot.prediction.getData()[0] is None or (
        len(panel.scale_plot.prediction.getData()[0]) == 0
    )


def test_fields_at_their_limits_never_widen_the_panel(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    """Thousands of characters typed or pasted into a field: the message echoed them whole
    and its label asked for their width (5,000 digits widened the panel to 38,804 px, a
    400-digit hysteresis to 3,734 px; this failed before). 5,000 digits were also "not a
    whole number" (int() refuses over 4,300 digits): they are too large."""
    panel.resize(1024, 640)
    panel.load_run(RUN)
    whatif = panel.whatif
    panel.left_tabs.setCurrentWidget(whatif)
    whatif.policy.setCurrentText("deepspeed")
    width = panel.minimumSizeHint().width()
    cases = {
        ("growth_interval", "9" * 5000): "growth interval: 5,000 digits is too large",
        ("hysteresis", "1" + "0" * 400): "hysteresis: 401 digits is too large",
        ("init_scale", "x" * 3000): "initial scale: 'xxxxxxxxxxx…xxxxxxxxxxxx' is not a number",
        ("min_scale", "1e" + "9" * 50): "minimum scale: must be finite",
    }
    for (name, text), said in cases.items():
        whatif.fields[name].setText(text)
        whatif.fields[name].editingFinished.emit()
        panel.refresh()
        assert whatif.summary.text() == said
        assert panel.minimumSizeHint().width() == width and panel.width() == 1024
        whatif.fields[name].setText("")
    # 30 digits are read (and then judged by the policy's rules).
    whatif.fields["hysteresis"].setText("9" * 30)
    whatif.fields["hysteresis"].editingFinished.emit()
    panel.refresh()
    assert whatif.summary.text().startswith("deepspeed: init 65536, x2 after 1000")
    assert panel.minimumSizeHint().width() == width


def test_the_form_chooses_the_scaler_and_shows_its_settings_exactly(qtbot) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.form import TrainForm
    from fpexplorer.training.config import TrainConfig

    form = TrainForm()
    qtbot.addWidget(form)
    box = form.choice_boxes["scaler"]
    assert [box.itemText(i) for i in range(box.count())] == ["torch", "deepspeed", "megatron"]
    box.setCurrentText("megatron")
    form.fields["hysteresis"].edit.setText("3")
    assert form.config().scaler_settings() == resolve_settings("megatron", hysteresis=3)
    form.precision_combo.setCurrentText("bf16")  # no loss scaler: its settings greyed out
    assert not box.isEnabled() and "fp16's dynamic loss scaler, and bf16 has none" in box.toolTip()
    assert form.config().scaler == "torch" and form.problems() == {}
    form.precision_combo.setCurrentText("fp16")
    # A run's settings come back exactly: 2^32 is not "4.29497e+09".
    megatron = TrainConfig(scaler="megatron", init_scale=2.0**32, min_scale=0.125)
    form.set_config(megatron)
    assert form.fields["init_scale"].edit.text() == "4294967296"
    assert form.fields["min_scale"].edit.text() == "0.125"
    assert box.currentText() == "megatron" and form.config() == megatron


def test_the_growth_readout_of_a_hysteresis_policy() -> None:
    from fpexplorer.gui.training.plots import LossScalePlot
    from fpexplorer.training.records import HeaderRecord, StepRecord

    settings = resolve_settings("deepspeed", init_scale=8.0, growth_interval=4)
    run = RunModel()
    header = HeaderRecord(config={"task": "t", "precision": "fp16", **settings.to_config()})
    # DeepSpeed's tracker after 6 clean steps since an overflow: 6 (never reset by the
    # growth at its 5th); toward the next growth: 1 of 4.
    run.add_records([header, StepRecord(step=0, loss=1.0, growth_tracker=6, hysteresis=1)])
    plot = LossScalePlot()
    plot.refresh_growth(run)
    assert plot.growth_bar.text() == "1 / 4 clean steps"
    assert plot.growth_label.text() == "skipped: 0 · hysteresis 1 · growth tracker:"
    plot.deleteLater()


def test_the_growth_readout_is_never_cut_in_a_narrow_card(qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtWidgets import QApplication

    from fpexplorer.gui.training.plots import LossScalePlot
    from fpexplorer.training.records import HeaderRecord, StepRecord

    settings = resolve_settings("deepspeed", init_scale=8.0, growth_interval=10)
    run = RunModel()
    header = HeaderRecord(config={"task": "t", "precision": "fp16", **settings.to_config()})
    run.add_records([header, StepRecord(step=0, loss=1.0, growth_tracker=8, hysteresis=2)])
    plot = LossScalePlot()
    qtbot.addWidget(plot)
    plot.resize(335, 220)  # the card's width in a 1024 x 640 window
    plot.show()
    plot.refresh_growth(run)
    QApplication.processEvents()
    label = plot.growth_label
    assert label.text() == "skipped: 0 · hysteresis 2 · growth tracker:"
    # Was: one line, cut after "hysteresis 2 ·" (the caption of the bar beside it lost).
    flags = int(Qt.TextFlag.TextWordWrap) if label.wordWrap() else 0
    needed = label.fontMetrics().boundingRect(
        QRect(0, 0, label.width(), 10_000), flags, label.text()
    )
    assert needed.width() <= label.width() and needed.height() <= label.height()


def test_every_figure_it_shows_is_exact_or_marked() -> None:
    """1e-320 typed was shown as %g's "9.99989e-321", the smallest normal scale as
    "1.1754944e-38" and a grown float32 0.1 as "0.000390625": rounded, without a mark (this
    failed before)."""
    run = loaded()
    whatif = WhatIfModel()
    whatif.set_choice("torch", {"init_scale": "1e-320"})
    whatif.update(run)
    assert whatif.summary(run) == (
        "the initial scale 1e-320 is 0 or subnormal in float32, where the loop holds it (the "
        "scaled gradients would be 0 or inf): use at least 2^-126 (1.17549435…e-38)"
    )
    whatif.set_choice("torch", {"init_scale": "1e39"})
    whatif.update(run)
    assert "the initial scale 1e39 is inf in float32" in whatif.summary(run)
    assert "use at most float32's largest, 3.40282346…e38" in whatif.summary(run)
    whatif.set_choice("torch", {"init_scale": "0.1"})
    whatif.update(run)
    replay, _ = replayed(resolve_settings("torch", init_scale=0.1))
    final = Fraction(replay.predicted_final_scale)  # float32(0.1) / 2^8: 0.000390625005820766…
    assert final != Fraction(390625, 10**9)
    assert whatif.summary(run).splitlines()[2] == (
        "final scale: 0.000390625005… predicted, 2^18 logged"
    )
