"""The loss-scale what-if replays a long run in pieces, never in one go on the GUI thread.

A replay costs a few microseconds a step: choosing a policy for an 850,000-step run froze
the window 4 s (a 4.4-million-step run, some 20 s), and every redraw after it copied the
whole predicted curve from Python lists (66 ms). Now the model replays for a budget per
call and says how far it has got; the panel carries on at each redraw tick until done;
the curve is drawn once replayed and copied once per change.
"""

from __future__ import annotations

import pytest
from test_scaler_whatif import RUN, loaded  # a real FP16 run of 120 steps

from fpexplorer.gui.training import scaler_whatif
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.scaler_whatif import AS_LOGGED, WhatIfModel
from fpexplorer.training.runlog import load_run


def test_a_budget_leaves_the_rest_for_later_and_says_how_far(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(scaler_whatif, "REPLAY_PIECE_STEPS", 50)
    run = loaded()
    whatif = WhatIfModel()
    whatif.set_choice(AS_LOGGED, {})
    whatif.update(run, budget_s=0.0)  # one piece, then the clock says stop
    assert whatif.pending == 70
    assert whatif.summary(run).splitlines()[1] == "replaying: 50 of 120 steps so far"
    assert whatif.curve()[0].size == 0  # drawn once replayed
    whatif.update(run, budget_s=0.0)
    whatif.update(run, budget_s=0.0)
    assert whatif.pending == 0
    steps, scales = whatif.curve()
    assert list(scales) == [step.scale for step in load_run(RUN).steps]
    assert whatif.curve()[0] is steps  # no new copy while nothing changed
    assert "the same trace as logged, all 120 steps" in whatif.summary(run)


@pytest.mark.slow  # a panel
def test_the_panel_carries_the_replay_on_at_each_tick(panel, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training import panel as panel_module

    monkeypatch.setattr(scaler_whatif, "REPLAY_PIECE_STEPS", 50)
    monkeypatch.setattr(panel_module, "WHATIF_BUDGET_S", 0.0)
    panel.load_run(RUN)
    panel.whatif.policy.setCurrentText(AS_LOGGED)  # the panel redraws with one piece
    assert panel.whatif.model.pending == 70
    ticks = 0
    while panel.whatif.model.pending:
        panel._on_timer_timeout()
        ticks += 1
    assert ticks == 2
    assert "the same trace as logged, all 120 steps" in panel.whatif.summary.text()
    assert len(panel.scale_plot.prediction.getData()[0]) == 120


def test_a_run_model_is_replayed_whole_without_a_budget() -> None:
    run: RunModel = loaded()
    whatif = WhatIfModel()
    whatif.set_choice("megatron", {})
    whatif.update(run)
    assert whatif.pending == 0 and whatif.curve()[0].size == 120
