"""The replay of a logged run's loss scale under another policy: the overflow rule by hand
and against FP16 backward passes, the run's own policy reproducing its log exactly, and
other policies matching real runs of them on the same seed until the runs' skips part."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from training_helpers import run_cli

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import RunState, run_job
from fpexplorer.training.records import LayerStats, StepRecord, StepStats
from fpexplorer.training.replay_scaler import (
    EvidenceBuffer,
    ReplayTrace,
    ScalerReplay,
    StepEvidence,
    fp16_max,
    overflows_at,
)
from fpexplorer.training.runlog import Run, load_run
from fpexplorer.training.scaler_rules import ScalerSettings, resolve_settings, settings_from_config

POLICIES = ("torch", "deepspeed", "megatron")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The overflow task under each policy, the same seed and settings: its outlier tokens
    overflow FP16 in forward, and a short growth interval grows the scale into backward
    overflows. One run with statistics on every step (activation gradients seen too)."""
    folder = tmp_path_factory.mktemp("replay")
    found = {}
    for name, policy, stats_every in [*((p, p, 0) for p in POLICIES), ("stats", "torch", 1)]:
        out = folder / f"{name}.jsonl"
        config = TrainConfig(
            task="overflow", precision="fp16", device="cpu", steps=120, scaler=policy,
            init_scale=2.0**12, growth_interval=4, stats_every=stats_every, out=str(out),
        )  # fmt: skip
        result = run_job(config, stderr=io.StringIO(), handle_signals=False)
        assert result.state is RunState.COMPLETED, result.error
        found[name] = load_run(out)
    return found


def own_settings(run: Run) -> ScalerSettings:
    assert run.header is not None
    settings = settings_from_config(run.header.config)
    assert settings is not None
    return settings


def replay(run: Run, settings: ScalerSettings) -> tuple[ScalerReplay, list[tuple[float, bool]]]:
    replayer = ScalerReplay(settings)
    trace = []
    for step in run.steps:
        replayed = replayer.add(step)
        assert replayed is not None
        trace.append((replayed.scale, replayed.skipped))
    return replayer, trace


@pytest.mark.slow  # its fixture runs four training jobs: a second
@pytest.mark.parametrize("name", [*POLICIES, "stats"])
def test_the_runs_own_policy_reproduces_its_log_exactly(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    replayer, trace = replay(run, own_settings(run))
    assert trace == [(step.scale, step.skipped) for step in run.steps]
    assert replayer.first_scale_difference is None and replayer.first_skip_difference is None
    assert replayer.unknown_count == 0
    skipped = [step for step in run.steps if step.skipped]
    # Both kinds of overflow are in the log: forward (NaN loss) and backward (finite loss).
    assert any(not math.isfinite(step.loss) for step in skipped)
    assert any(math.isfinite(step.loss) for step in skipped)


@pytest.mark.slow  # the four training jobs of `runs`: a second
@pytest.mark.parametrize(
    ("logged", "target"),
    [("torch", "deepspeed"), ("torch", "megatron"), ("deepspeed", "torch"),
     ("megatron", "deepspeed"), ("stats", "megatron")],
)  # fmt: skip
def test_another_policy_matches_a_real_run_of_it_until_the_runs_skips_part(
    runs: dict[str, Run], logged: str, target: str
) -> None:
    source, actual = runs[logged], runs[target]
    _, predicted = replay(source, own_settings(actual))
    # Until the two real runs skip differently they take the same updates (a power-of-two
    # loss scale leaves the unscaled gradients as they are): the replay must match there,
    # the step where they part included.
    parted = next(
        (a.step for a, b in zip(source.steps, actual.steps, strict=True) if a.skipped != b.skipped),
        len(actual.steps) - 1,
    )
    window = slice(0, parted + 1)
    assert predicted[window] == [(step.scale, step.skipped) for step in actual.steps[window]]
    # ... and the policies do differ there: the prediction is not the logged trace.
    assert predicted[window] != [(step.scale, step.skipped) for step in source.steps[window]]
    assert parted > 20


def evidence(scale: float, skipped: bool, loss: float = 1.0, amax: float = 0.5) -> StepEvidence:
    return StepEvidence(0, scale, skipped, not math.isfinite(loss), amax)


def test_the_overflow_rule_by_hand() -> None:
    threshold = fp16_max()
    assert threshold == 65504.0
    clean = evidence(1024.0, False, amax=1.0)  # the largest FP16 value of backward: 1024
    assert overflows_at(clean, 1024.0, threshold) is False  # the logged outcome
    assert overflows_at(clean, 32.0, threshold) is False  # a lower scale: values shrink
    assert overflows_at(clean, 65504.0, threshold) is False  # lands exactly on FP16's max
    assert overflows_at(clean, 65536.0, threshold) is True  # 2^16 > 65504
    forward = evidence(1024.0, True, loss=math.nan, amax=math.nan)
    assert overflows_at(forward, 1.0, threshold) is True  # the forward pass ignores the scale
    backward = evidence(1024.0, True, amax=math.nan)
    assert overflows_at(backward, 2048.0, threshold) is True  # it overflowed already lower
    assert overflows_at(backward, 512.0, threshold) is None  # only a lower bound is known
    assert overflows_at(evidence(1024.0, False, amax=math.nan), 2048.0, threshold) is None


def test_evidence_takes_the_activation_gradients_of_statistics_steps() -> None:
    layers = (LayerStats(name="a", amax=8192.0), LayerStats(name="b", amax=math.nan))
    record = StepRecord(step=3, loss=1.0, scale=1024.0, grad_amax=2.0,
                        stats=StepStats(layers=layers))  # fmt: skip
    assert StepEvidence.of(record).amax == 8.0  # 8192 / 1024: larger than the weights' 2
    assert StepEvidence.of(StepRecord(step=3, loss=1.0, scale=1024.0)).amax != 0  # NaN


def test_unknown_steps_are_assumed_clean_and_listed() -> None:
    settings = resolve_settings("torch", init_scale=1024.0, growth_interval=1000)
    replayer = ScalerReplay(settings)
    # Logged at 2048 with a backward overflow; replayed at 1024: unknown, assumed clean.
    step = replayer.add_evidence(StepEvidence(5, 2048.0, True, False, math.nan))
    assert step is not None and step.unknown and not step.skipped
    assert (replayer.unknown_count, replayer.unknown_steps) == (1, [5])


@pytest.mark.parametrize("seed", range(3))
def test_the_rule_predicts_fp16_backward_overflow_exactly(seed: int) -> None:
    # The oracle: FP16 autocast backward passes at every power-of-two scale. The evidence:
    # one pass at scale 1, its largest |FP16 value| (weight and activation gradients).
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    inputs = torch.randn(64, 8) * 4

    def backward(scale: float) -> tuple[bool, float]:
        model.zero_grad()
        seen: list[torch.Tensor] = []
        with torch.autocast("cpu", dtype=torch.float16):
            hidden = model[1](model[0](inputs))
            hidden.register_hook(lambda g: seen.append(g.detach()))
            loss = model[2](hidden).float().square().mean()
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        overflow = not all(bool(g.isfinite().all()) for g in grads)
        amax = max(float(t.abs().max()) for t in [*seen, *grads])
        return overflow, amax / scale

    overflow, amax = backward(1.0)
    assert not overflow
    for k in range(0, 40):
        actual, _ = backward(2.0**k)
        assert actual == overflows_at(evidence(1.0, False, amax=amax), 2.0**k, fp16_max()), k


@pytest.mark.slow  # the four training jobs of `runs`: a second
def test_a_replay_trace_continues_as_the_buffer_grows(runs: dict[str, Run]) -> None:
    run = runs["torch"]
    settings = resolve_settings("megatron", init_scale=2.0**12, growth_interval=4)
    buffer = EvidenceBuffer(capacity=4)
    trace = ReplayTrace(settings)
    for index, step in enumerate(run.steps):
        buffer.add(step)
        if index % 7 == 0:
            trace.extend(buffer)
    trace.extend(buffer)
    _, whole = replay(run, settings)
    assert list(zip(trace.scales, trace.skipped, strict=True)) == whole
    assert list(trace.steps) == [step.step for step in run.steps]


@pytest.mark.slow  # child processes: about half a second
def test_cli_replay_scaler(runs: dict[str, Run], tmp_path: Path) -> None:
    path = str(runs["torch"].path)
    own = run_cli("runs", "replay-scaler", path)
    assert own.returncode == 0, own.stderr
    assert "the traces agree at every step" in own.stdout
    other = run_cli("runs", "replay-scaler", path, "--scaler", "deepspeed", "--init-scale",
                    "4096", "--growth-interval", "4")  # fmt: skip
    assert other.returncode == 0, other.stderr
    replayer, _ = replay(runs["torch"], resolve_settings(
        "deepspeed", init_scale=4096.0, growth_interval=4))  # fmt: skip
    skips = f"steps skipped  {replayer.logged_skips:>12}  {replayer.predicted_skips:>12}"
    assert skips in other.stdout.splitlines()
    assert replayer.logged_skips != replayer.predicted_skips
    assert f"skips first differ at step {replayer.first_skip_difference}" in other.stdout
    assert "hysteresis 2, min 1" in other.stdout
    bad = run_cli("runs", "replay-scaler", path, "--scaler", "torch", "--hysteresis", "3")
    assert bad.returncode == 2 and "no hysteresis" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    bf16 = tmp_path / "bf16.jsonl"
    run_job(TrainConfig(task="mlp", precision="bf16", device="cpu", steps=2, out=str(bf16)),
            stderr=io.StringIO(), handle_signals=False)  # fmt: skip
    refused = run_cli("runs", "replay-scaler", str(bf16))
    assert refused.returncode == 2 and "no dynamic loss scaler" in refused.stderr


@pytest.mark.parametrize("copy_limit", [2**20, 0])  # one concatenation; one pass per tensor
def test_the_monitors_gradient_amax(copy_limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from fpexplorer.training.monitor import amp_monitor

    monkeypatch.setattr(amp_monitor, "_ABS_MAX_COPY", copy_limit)
    grads = [torch.tensor([1.0, -3.5]), torch.tensor([[2.0], [-0.5]], dtype=torch.float16)]
    assert float(amp_monitor._abs_max(grads)) == 3.5
    assert float(amp_monitor._abs_max([torch.tensor([-7.0, -2.0])])) == 7.0
    assert math.isnan(float(amp_monitor._abs_max([*grads, torch.tensor([math.nan])])))
    assert float(amp_monitor._abs_max([*grads, torch.tensor([-math.inf])])) == math.inf


@pytest.mark.parametrize("scale", ["1e39", "1e-50"])
def test_cli_replay_scaler_refuses_a_scale_float32_cannot_hold(scale: str) -> None:
    """`train --init-scale 1e39` is refused; the replay predicted every step skipped under
    it (a scale of inf) instead of saying so."""
    run = Path(__file__).parents[1] / "gui" / "training" / "data" / "overflow-fp16-scaler.jsonl"
    refused = run_cli("runs", "replay-scaler", str(run), "--init-scale", scale)
    assert refused.returncode == 2, refused.stdout
    assert "in float32, where the loop holds it" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not refused.stdout


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--growth-factor", "1e39", "it multiplies a float32 scale"),
        ("--growth-interval", str(2**31), "GradScaler counts clean steps in an int32"),
    ],
)
def test_cli_replay_scaler_refuses_what_train_refuses(option: str, value: str, said: str) -> None:
    """The engine's limits on the scaler's settings: the replay ran them (in float64, the
    growth factor past float32's inf) where `train` refuses them."""
    run = Path(__file__).parents[1] / "gui" / "training" / "data" / "overflow-fp16-scaler.jsonl"
    refused = run_cli("runs", "replay-scaler", str(run), option, value)
    assert refused.returncode == 2, refused.stdout
    assert said in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not refused.stdout


@pytest.mark.slow  # child processes: a third of a second
def test_cli_replay_scaler_says_when_the_run_has_no_end(tmp_path: Path) -> None:
    """A killed run (no end record) is replayed as far as it goes, and says it is cut short
    (was: the same report as a complete run)."""
    run = Path(__file__).parents[1] / "gui" / "training" / "data" / "overflow-fp16-scaler.jsonl"
    lines = run.read_text().splitlines(keepends=True)
    killed = tmp_path / "killed.jsonl"
    killed.write_text("".join(lines[:31]))  # the header and 30 steps
    result = run_cli("runs", "replay-scaler", str(killed))
    assert result.returncode == 0, result.stderr
    assert "steps replayed: 30" in result.stdout
    assert "no end record: the job was killed or still runs" in result.stdout
    whole = run_cli("runs", "replay-scaler", str(run))
    assert "no end record" not in whole.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"init_scale": "abc"}, "the initial scale 'abc' is not a number"),
        ({"growth_interval": 2.5}, "the growth interval 2.5 is not a whole number"),
        ({"init_scale": -4}, "the initial scale must be a positive finite number"),
    ],
)
def test_cli_replay_scaler_names_a_damaged_logged_setting(
    change: dict[str, object], message: str, tmp_path: Path
) -> None:
    """A header whose scaler settings are damaged: one line naming the run's own setting
    (was: a TypeError traceback, or a replay at growth interval 2.5)."""
    run = Path(__file__).parents[1] / "gui" / "training" / "data" / "overflow-fp16-scaler.jsonl"
    header, *steps = run.read_text().splitlines(keepends=True)
    record = json.loads(header)
    record["config"].update(change)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(json.dumps(record) + "\n" + "".join(steps))
    result = run_cli("runs", "replay-scaler", str(damaged))
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip().splitlines() == [
        f"fpexplorer runs: error: {damaged}: the run's own setting: {message}"
    ]


def test_cli_replay_scaler_says_what_a_file_without_a_run_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log of a newer schema was "no header record: not a run log", as an empty file."""
    from fpexplorer.cli import main

    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps({"type": "header", "schema": 99, "config": {}}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"\x00\x01 not json\n")
    said = {
        newer: "schema 99 is newer than this fpexplorer reads (2): update fpexplorer to read "
        "this run",
        empty: "empty file (a job that has not written its header yet?)",
        junk: "no header record: not a run log",
    }
    for path, reason in said.items():
        assert main(["runs", "replay-scaler", str(path), "--scaler", "deepspeed"]) == 2
        assert capsys.readouterr().err == f"fpexplorer runs: error: {path}: {reason}\n"
