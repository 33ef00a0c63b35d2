"""When statistics are taken: a fixed cadence, or a share of the wall time, and always around
a skipped step, an overflow or a NaN."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from monitor_helpers import flat
from torch import nn

from fpexplorer.training.monitor import AmpMonitor, StatsCadence


def simulate(cadence: StatsCadence, steps: int, plain: float, extra: float) -> list[bool]:
    taken = []
    for index in range(steps):
        statistics = cadence.collect_next(index)
        taken.append(statistics)
        cadence.account(plain + (extra if statistics else 0.0), statistics=statistics,
                        alarm=False)  # fmt: skip
    return taken


def test_a_fixed_cadence_takes_every_nth_step() -> None:
    assert simulate(StatsCadence(every=3), 7, 1.0, 1.0) == [True, False, False] * 2 + [True]
    assert not any(simulate(StatsCadence(every=0), 5, 1.0, 1.0))


@pytest.mark.parametrize("extra", [0.5, 1.0, 4.0])
def test_a_budget_keeps_statistics_within_its_share_of_the_wall_time(extra: float) -> None:
    cadence = StatsCadence(budget=0.05)
    taken = simulate(cadence, 2000, 1.0, extra)
    assert cadence.spent_share <= 0.05
    # As often as the budget allows, not far fewer: each costs `extra` plain steps.
    assert sum(taken) >= 0.9 * 0.05 * 2000 / extra
    assert taken[0]  # the first step always has statistics


def test_the_default_is_a_four_percent_budget() -> None:
    # 4% measured, and a margin for what no clock inside the monitor sees: about 1.05x in all.
    cadence = StatsCadence()
    assert (cadence.every, cadence.budget) == (None, 0.04)


def test_an_alarm_takes_statistics_on_the_next_step() -> None:
    cadence = StatsCadence(budget=0.05)
    simulate(cadence, 50, 1.0, 1.0)
    cadence.account(1.0, statistics=False, alarm=True)
    assert cadence.collect_next(51)


@pytest.mark.parametrize(
    "kwargs", [{"every": 2, "budget": 0.1}, {"every": -1}, {"budget": 1.5}, {"every": 1.5}]
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StatsCadence(**kwargs)  # type: ignore[arg-type]


def test_a_skipped_step_gets_gradient_statistics_at_once_and_full_ones_next(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    records = []
    with AmpMonitor(model, optimizer, scaler, out=tmp_path / "run.jsonl") as monitor:
        for step in range(8):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().square().mean()
            if step == 5:
                loss = loss * math.inf
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            records.append(flat(monitor.step(loss)))
    # Step 0 always; steps 1-4 are within a 5% budget's wait; step 5 skipped.
    assert ["grad_hist" in r for r in records[:5]] == [True, False, False, False, False]
    skipped = records[5]
    assert skipped["skipped"] and "grad_hist" in skipped and "act_hist" not in skipped
    assert skipped["grad_hist"]["inf"] + skipped["grad_hist"]["nan"] > 0
    assert skipped["first_nonfinite"] is not None
    assert "act_hist" in records[6]  # the step after an alarm: full statistics


def test_module_hooks_are_in_place_only_for_statistics_steps(tmp_path: Path) -> None:
    # A forward hook sends every module call through PyTorch's slower hooked path.
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def hooked() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())

    monitor = AmpMonitor(model, optimizer, out=tmp_path / "run.jsonl", stats_every=2,
                         precision="fp32")  # fmt: skip
    seen = []
    for _ in range(4):
        seen.append(hooked())
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        monitor.step(0.0)
        optimizer.zero_grad()
    monitor.close()
    assert [count > 0 for count in seen] == [True, False, True, False]
    assert hooked() == 0


def test_a_budget_counts_the_monitors_time_on_plain_steps_too() -> None:
    """The budget is the monitor's whole cost: with the cheap signals adding 2% to each
    plain step, statistics get the rest; with 6%, none (beyond step 0)."""
    for own in (0.02, 0.06):
        cadence = StatsCadence(budget=0.05)
        taken = []
        for index in range(4000):
            statistics = cadence.collect_next(index)
            taken.append(statistics)
            # A bare step takes 1.0; the monitor adds `own`, or 1.0 on a statistics step.
            cadence.account(1.0 + (1.0 if statistics else own), statistics=statistics,
                            alarm=False, monitor_time=0.0 if statistics else own)  # fmt: skip
        # Cheap signals dearer than the budget: what they cost, no more (and step 0's
        # statistics: one plain step's extra, charged once a plain step is measured).
        cheap_only = (own * 3999 + 1.0) / ((1 + own) * 3999 + 2.0)
        assert cadence.spent_share <= max(0.05, cheap_only) + 1e-9
        # k statistics steps among n = 4000 - k plain ones fit when
        # own * n + k <= 0.05 * ((1 + own) * n + 2 * k): at most this many.
        most = max(0.0, (0.05 * (1 + own) - own) * 4000 / (0.9 + 0.05 * (1 + own) - own))
        assert 0.9 * most <= sum(taken[1:]) <= most + 1


def test_the_first_statistics_step_is_charged_once_a_plain_step_is_measured() -> None:
    """Step 0's statistics (first calls, tables) cost what they cost: on a short run they
    delay the next statistics instead of coming on top of the budget."""
    cadence = StatsCadence(budget=0.05)
    taken = []
    for index in range(600):
        statistics = cadence.collect_next(index)
        taken.append(statistics)
        # Step 0 takes 11 plain steps' time, a later statistics step 2.
        duration = 11.0 if index == 0 else (2.0 if statistics else 1.0)
        cadence.account(duration, statistics=statistics, alarm=False)
    assert taken[0]
    # Step 0's 10 extra are 5% of 200 steps: no statistics before the run is about that long.
    assert taken.index(True, 1) >= 190
    assert cadence.spent_share <= 0.05 + 1e-9


def test_a_budget_decides_as_its_rule_says_with_noisy_step_times() -> None:
    """`collect_next` skips the median where the longest recent plain step already rules a
    statistics step out: its answers equal the rule itself, evaluated in full (median of
    the window by sorting), on every step of a run with noisy times and alarms."""
    generator = random.Random(5)
    for budget in (0.01, 0.05, 0.3):
        cadence = StatsCadence(budget=budget)
        taken = 0
        for index in range(3000):
            statistics = cadence.collect_next(index)
            if index > 0 and not cadence._alarm:
                plain = sorted(cadence._plain)[len(cadence._plain) // 2] if cadence._plain else None
                if plain is None:
                    expected = False
                else:
                    extra = plain if cadence._last_extra is None else cadence._last_extra
                    expected = cadence._spent + extra <= budget * (cadence._elapsed + plain + extra)
                assert statistics == expected, index
            taken += statistics
            duration = generator.lognormvariate(0.0, 0.5) + (3.0 if statistics else 0.0)
            cadence.account(duration, statistics=statistics, alarm=generator.random() < 0.002,
                            monitor_time=0.0 if statistics else 0.03 * duration)  # fmt: skip
        assert 1 < taken < 3000


def test_a_fixed_cadence_ignores_step_times_and_alarms() -> None:
    cadence = StatsCadence(every=4)
    taken = []
    for index in range(12):
        taken.append(cadence.collect_next(index))
        cadence.account(1.0 + index, statistics=taken[-1], alarm=index == 5, monitor_time=0.5)
    assert taken == [True, False, False, False] * 3
    assert cadence.spent_share == 0.0  # measured with a budget only
