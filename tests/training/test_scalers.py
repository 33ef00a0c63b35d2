"""Loss-scaling policies: each pure rule against an independent transcription of its
upstream class or against torch's GradScaler itself, hand cases for hysteresis, minimum
scale and window growth, and the GradScaler subclasses in a real training job."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import RunState, run_job
from fpexplorer.training.runlog import Run, load_run
from fpexplorer.training.scaler_rules import (
    MinimumScaleError,
    ScalerSettings,
    ScalerState,
    initial_state,
    next_state,
    resolve_settings,
    settings_from_config,
)
from fpexplorer.training.scalers import (
    DeepSpeedGradScaler,
    MegatronGradScaler,
    PolicyGradScaler,
    make_grad_scaler,
)


def trace(settings: ScalerSettings, overflows: list[bool]) -> list[ScalerState]:
    """The state after each step's update."""
    state = initial_state(settings)
    states = []
    for found_inf in overflows:
        state = next_state(settings, state, found_inf)
        states.append(state)
    return states


# -- independent oracles: the upstream classes' update methods, transcribed as they are ----


@dataclass
class DeepSpeedOracle:
    """deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale, with its own
    state (cur_iter, last_overflow_iter), not the rule's compact counter."""

    cur_scale: float
    scale_window: int
    min_scale: float
    delayed_shift: int
    consecutive_hysteresis: bool
    scale_factor: float = 2.0
    cur_iter: int = 0
    last_overflow_iter: int = -1
    cur_hysteresis: int = 0

    def __post_init__(self) -> None:
        self.cur_hysteresis = self.delayed_shift

    def update_scale(self, overflow: bool) -> None:
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale:
                    raise MinimumScaleError("at minimum")
                self.cur_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            stable_interval = (self.cur_iter - self.last_overflow_iter) - 1
            if (stable_interval > 0) and (stable_interval % self.scale_window == 0):
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1


@dataclass
class MegatronOracle:
    """megatron/core/optimizer/grad_scaler.py DynamicGradScaler.update, on host floats."""

    scale: float
    min_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    hysteresis: int
    growth_tracker: int = 0
    hysteresis_tracker: int = 0

    def __post_init__(self) -> None:
        self.hysteresis_tracker = self.hysteresis

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.growth_tracker = 0
            self.hysteresis_tracker -= 1
            if self.hysteresis_tracker <= 0:
                self.scale = max(self.scale * self.backoff_factor, self.min_scale)
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                self.growth_tracker = 0
                self.hysteresis_tracker = self.hysteresis
                self.scale = self.scale * self.growth_factor


def random_overflows(seed: int, steps: int, rate: float) -> list[bool]:
    generator = random.Random(seed)
    return [generator.random() < rate for _ in range(steps)]


@pytest.mark.parametrize("consecutive", [False, True])
@pytest.mark.parametrize(("window", "hysteresis"), [(1, 1), (3, 2), (5, 3), (7, 1)])
@pytest.mark.parametrize("seed", range(6))
def test_deepspeed_rule_equals_deepspeeds_update_scale(
    seed: int, window: int, hysteresis: int, consecutive: bool
) -> None:
    settings = resolve_settings(
        "deepspeed", init_scale=2.0**20, growth_interval=window, hysteresis=hysteresis,
        min_scale=2.0**-30, consecutive_hysteresis=consecutive,
    )  # fmt: skip
    oracle = DeepSpeedOracle(2.0**20, window, 2.0**-30, hysteresis, consecutive)
    state = initial_state(settings)
    for found_inf in random_overflows(seed, 100, rate=[0.05, 0.3, 0.6][seed % 3]):
        try:
            oracle.update_scale(found_inf)
        except MinimumScaleError:  # DeepSpeed ends the run: so must the rule
            with pytest.raises(MinimumScaleError):
                next_state(settings, state, found_inf)
            break
        state = next_state(settings, state, found_inf)
        assert (state.scale, state.hysteresis) == (oracle.cur_scale, oracle.cur_hysteresis)
        assert state.growth_tracker == oracle.cur_iter - oracle.last_overflow_iter - 1


@pytest.mark.parametrize(("interval", "hysteresis"), [(1, 1), (3, 2), (5, 3), (8, 2)])
@pytest.mark.parametrize("seed", range(6))
def test_megatron_rule_equals_megatrons_update(seed: int, interval: int, hysteresis: int) -> None:
    settings = resolve_settings(
        "megatron", init_scale=2.0**32, growth_interval=interval, hysteresis=hysteresis
    )
    oracle = MegatronOracle(2.0**32, 1.0, 2.0, 0.5, interval, hysteresis)
    state = initial_state(settings)
    for found_inf in random_overflows(seed, 90, rate=[0.05, 0.3, 0.7][seed % 3]):
        oracle.update(found_inf)
        state = next_state(settings, state, found_inf)
        assert (state.scale, state.growth_tracker, state.hysteresis) == (
            oracle.scale, oracle.growth_tracker, oracle.hysteresis_tracker
        )  # fmt: skip


def drive(scaler: torch.amp.GradScaler, overflows: list[bool]) -> list[tuple[float, int, bool]]:
    """A one-weight loop through the scaler: (scale after update, growth tracker, whether the
    optimizer changed the weight) per step; an inf gradient where `overflows` says."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    out = []
    for found_inf in overflows:
        optimizer.zero_grad()
        scaler.scale(weight.sum() * (torch.inf if found_inf else 1.0)).backward()
        before = weight.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        tracker = scaler._growth_tracker
        assert tracker is not None
        out.append((scaler.get_scale(), int(tracker.item()), bool((weight != before).any())))
    return out


@pytest.mark.parametrize(
    ("growth", "backoff", "interval"), [(2.0, 0.5, 3), (1.5, 0.3, 2), (3.0, 0.7, 1)]
)
def test_torch_rule_equals_grad_scaler(growth: float, backoff: float, interval: int) -> None:
    # Factors that are not powers of two: the float32 rounding of the scale tensor matters.
    settings = resolve_settings(
        "torch", init_scale=1000.0, growth_factor=growth, backoff_factor=backoff,
        growth_interval=interval,
    )  # fmt: skip
    overflows = random_overflows(interval, 120, rate=0.3)
    real = drive(make_grad_scaler(settings, "cpu"), overflows)
    predicted = trace(settings, overflows)
    assert [(s, t) for s, t, _ in real] == [(p.scale, p.growth_tracker) for p in predicted]
    assert [stepped for _, _, stepped in real] == [not inf for inf in overflows]


@pytest.mark.parametrize("policy", ["deepspeed", "megatron"])
def test_policy_scalers_follow_their_rule_and_always_skip_on_inf(policy: str) -> None:
    settings = resolve_settings(
        policy, init_scale=2.0**10, growth_interval=3, hysteresis=3, min_scale=2.0**-20
    )
    scaler = make_grad_scaler(settings, "cpu")
    assert isinstance(scaler, PolicyGradScaler) and scaler.policy == policy
    overflows = random_overflows(7, 150, rate=0.35)
    real = drive(scaler, overflows)
    predicted = trace(settings, overflows)
    assert [(s, t) for s, t, _ in real] == [(p.scale, p.growth_tracker) for p in predicted]
    # Hysteresis delays the backoff, never the skip: every inf step left the weight alone.
    assert [stepped for _, _, stepped in real] == [not inf for inf in overflows]
    assert scaler.hysteresis_tracker == predicted[-1].hysteresis
    # A checkpoint carries the hysteresis.
    restored = type(scaler)(settings, "cpu")
    restored.load_state_dict(scaler.state_dict())
    assert restored.state == scaler.state


def test_deepspeed_hysteresis_by_hand() -> None:
    settings = resolve_settings("deepspeed", init_scale=1024.0, growth_interval=4, hysteresis=2)
    states = trace(settings, [True, False, True, True, False])
    # 1st overflow spends the hysteresis, the scale stays; a clean step does not refill it
    # (no consecutive hysteresis); the next overflow backs off, and so does every one after.
    assert [(s.scale, s.hysteresis) for s in states] == [
        (1024.0, 1), (1024.0, 1), (512.0, 1), (256.0, 1), (256.0, 1)
    ]  # fmt: skip
    consecutive = replace(settings, consecutive_hysteresis=True)
    states = trace(consecutive, [True, False, True, True])
    # With consecutive hysteresis the clean step refills it: only two overflows in a row
    # back off.
    assert [(s.scale, s.hysteresis) for s in states] == [
        (1024.0, 1), (1024.0, 2), (1024.0, 1), (512.0, 1)
    ]  # fmt: skip


def test_deepspeed_window_growth_by_hand() -> None:
    settings = resolve_settings("deepspeed", init_scale=8.0, growth_interval=3, hysteresis=2)
    # From the start, growth on the 4th clean step (stable_interval 3), then every 3rd.
    scales = [s.scale for s in trace(settings, [False] * 10)]
    assert scales == [8.0, 8.0, 8.0, 16.0, 16.0, 16.0, 32.0, 32.0, 32.0, 64.0]
    # An overflow that only spends hysteresis still restarts the window, and a growth
    # refills the hysteresis.
    states = trace(settings, [True, False, False, False, False])
    assert [(s.scale, s.hysteresis, s.growth_tracker) for s in states] == [
        (8.0, 1, 0), (8.0, 1, 1), (8.0, 1, 2), (8.0, 1, 3), (16.0, 2, 4)
    ]  # fmt: skip


def test_deepspeed_minimum_scale_ends_the_run() -> None:
    settings = resolve_settings("deepspeed", init_scale=4.0, hysteresis=1, min_scale=1.0)
    states = trace(settings, [True, True])
    assert [s.scale for s in states] == [2.0, 1.0]
    with pytest.raises(MinimumScaleError, match="minimum 1"):
        next_state(settings, states[-1], True)
    # A minimum that is not a power of two away: the backoff stops at it first.
    odd = resolve_settings("deepspeed", init_scale=4.0, hysteresis=1, min_scale=3.0)
    assert [s.scale for s in trace(odd, [True])] == [3.0]


def test_megatron_hysteresis_min_scale_and_growth_by_hand() -> None:
    settings = resolve_settings("megatron", init_scale=8.0, growth_interval=3, hysteresis=2,
                                min_scale=2.0)  # fmt: skip
    states = trace(settings, [True, False, True, True, True, True])
    # Two overflows (not in a row: clean steps do not refill) before the first backoff,
    # then every overflow backs off, down to the minimum and no further.
    assert [(s.scale, s.hysteresis) for s in states] == [
        (8.0, 1), (8.0, 1), (4.0, 0), (2.0, -1), (2.0, -2), (2.0, -3)
    ]  # fmt: skip
    grown = trace(settings, [True, False, False, False])
    assert [(s.scale, s.hysteresis, s.growth_tracker) for s in grown] == [
        (8.0, 1, 0), (8.0, 1, 1), (8.0, 1, 2), (16.0, 2, 0)
    ]  # fmt: skip


def test_settings_from_a_run_header() -> None:
    settings = resolve_settings("megatron", hysteresis=4)
    assert settings_from_config({"precision": "fp16", **settings.to_config()}) == settings
    # A user loop's header (torch's GradScaler, no "scaler" key) is torch's policy.
    torch_header = {"init_scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                    "growth_interval": 100}  # fmt: skip
    assert settings_from_config(torch_header) == resolve_settings(
        "torch", init_scale=1024.0, growth_interval=100
    )
    assert settings_from_config({"precision": "bf16"}) is None


def test_a_scaler_refuses_another_policy_and_bad_settings() -> None:
    with pytest.raises(ValueError, match="runs the megatron policy"):
        MegatronGradScaler(resolve_settings("deepspeed"), "cpu")
    with pytest.raises(ValueError, match="hysteresis"):
        DeepSpeedGradScaler(resolve_settings("deepspeed", hysteresis=0), "cpu")


def replay_recorded_skips(run: Run) -> list[tuple[float, int, int]]:
    """The run's policy, from its header, replayed on its recorded skips: (scale used,
    growth tracker after, hysteresis after) per step."""
    assert run.header is not None
    settings = settings_from_config(run.header.config)
    assert settings is not None
    state = initial_state(settings)
    out = []
    for step in run.steps:
        used = state.scale
        state = next_state(settings, state, step.skipped)
        out.append((used, state.growth_tracker, state.hysteresis))
    return out


@pytest.mark.parametrize("policy", ["deepspeed", "megatron"])
def test_each_policy_in_a_real_job_follows_its_rule_on_the_recorded_skips(
    tmp_path: Path, policy: str
) -> None:
    out = tmp_path / "run.jsonl"
    # The overflow task overflows FP16 on rare outlier tokens; a short window makes the
    # scale grow into backward overflows too, and hysteresis 2 shows.
    config = TrainConfig(
        task="overflow", precision="fp16", device="cpu", steps=60, scaler=policy,
        init_scale=2.0**12, growth_interval=4, stats_every=0, out=str(out),
    )  # fmt: skip
    result = run_job(config, stderr=io.StringIO(), handle_signals=False)
    assert result.state is RunState.COMPLETED, result.error
    run = load_run(out)
    assert run.header is not None and run.header.config["scaler"] == policy
    assert run.header.config["hysteresis"] == 2 and run.header.config["min_scale"] == 1.0
    logged = [(s.scale, s.growth_tracker, s.hysteresis) for s in run.steps]
    assert logged == replay_recorded_skips(run)  # 0 mismatches
    skipped = [s.step for s in run.steps if s.skipped]
    assert len(skipped) >= 3
    # Hysteresis: the first overflow leaves the scale where it was.
    first = skipped[0]
    assert run.steps[first + 1].scale == run.steps[first].scale
    assert max(s.scale for s in run.steps) > 2.0**12  # it grew


@pytest.mark.parametrize("policy", ["torch", "deepspeed", "megatron"])
def test_steps_toward_growth_reach_the_interval_exactly_when_the_scale_grows(policy: str) -> None:
    from fpexplorer.training.scaler_rules import steps_toward_growth

    settings = resolve_settings(policy, init_scale=8.0, growth_interval=3)
    overflows = random_overflows(3, 200, rate=0.15)
    state = initial_state(settings)
    for found_inf in overflows:
        before = state
        state = next_state(settings, state, found_inf)
        progress = steps_toward_growth(policy, state.growth_tracker, 3)
        assert 0 <= progress < 3
        # One clean step short of the interval now: the next clean step grows the scale.
        following = next_state(settings, state, False)
        assert (progress == 2) == (following.scale > state.scale), (before, state)
