"""Training loops written the ways users write them, recorded by `AmpMonitor`: a learning-rate
scheduler, `monitor.step()` called twice or only now and then, frozen layers. Each gets a
true record or one clear warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor


def step_records(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [record for record in records if record["type"] == "step"]


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 8, generator=generator), torch.randint(0, 4, (16,), generator=generator))
        for _ in range(count)
    ]


def small_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any) -> torch.Tensor:
    inputs, target = batch
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(inputs), target)
    loss.backward()
    optimizer.step()
    return loss


def test_the_lr_recorded_is_the_one_the_step_used_when_the_scheduler_steps_first(
    tmp_path: Path,
) -> None:
    # The usual order: optimizer.step(), scheduler.step(), then the monitor. The record must
    # carry the lr the update was made with, not the next step's.
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
    used = []
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=0) as monitor:
        for batch in batches(4):
            used.append(optimizer.param_groups[0]["lr"])
            loss = train_step(model, optimizer, batch)
            scheduler.step()
            monitor.step(loss)
    assert [record["lr"] for record in step_records(tmp_path / "run.jsonl")] == used
    assert used == [0.1, 0.05, 0.025, 0.0125]


def test_step_called_twice_records_the_training_step_once_and_warns(tmp_path: Path) -> None:
    # A second call with no backward in between used to be recorded as a skipped step.
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor,
        pytest.warns(RuntimeWarning, match="called again") as caught,
    ):
        for batch in batches(3):
            loss = train_step(model, optimizer, batch)
            first = monitor.step(loss)
            assert monitor.step(loss) is first
    assert len(caught) == 1
    records = step_records(tmp_path / "run.jsonl")
    assert [(record["step"], record["skipped"]) for record in records] == [
        (0, False),
        (1, False),
        (2, False),
    ]


def test_a_real_skip_of_a_plain_optimizer_is_still_recorded(tmp_path: Path) -> None:
    # GradScaler does not call a plain optimizer on inf/NaN gradients: that step is skipped,
    # not a repeated call (its backward and the scaler's unscaling changed the gradients).
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    with AmpMonitor(model, optimizer, scaler, out=tmp_path / "run.jsonl", stats_every=0) as monitor:
        for index, (inputs, target) in enumerate(batches(3)):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), target)
            scaler.scale(loss * (float("inf") if index == 1 else 1.0)).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)
    records = step_records(tmp_path / "run.jsonl")
    assert [record["skipped"] for record in records] == [False, True, False]


def test_step_called_after_several_optimizer_steps_warns_once(tmp_path: Path) -> None:
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor,
        pytest.warns(RuntimeWarning, match="3 optimizer steps since its last call") as caught,
    ):
        for index, batch in enumerate(batches(6)):
            loss = train_step(model, optimizer, batch)
            if index % 3 == 2:
                monitor.step(loss)
    assert len(caught) == 1


def test_a_frozen_layer_has_no_gradient_norm_not_zero(tmp_path: Path) -> None:
    model = small_model()
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model[2].parameters(), lr=0.1)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for batch in batches(2):
            monitor.step(train_step(model, optimizer, batch))
    for record in step_records(tmp_path / "run.jsonl"):
        norms = {layer["name"]: layer.get("grad_norm") for layer in record["stats"]["layers"]}
        assert norms["0"] is None  # frozen: no gradient at all
        assert norms["1"] is None  # ReLU: no parameters
        assert norms["2"] > 0


def test_saved_activations_under_gradient_accumulation_are_one_forwards_not_the_sum(
    tmp_path: Path,
) -> None:
    # Each micro-batch's backward frees what its forward saved: autograd never holds more
    # than one micro-batch's. The record summed all four (or, where freed memory was reused
    # at the same address, some of them).
    saved = {}
    for micro_batches in (1, 4):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        path = tmp_path / f"accumulate-{micro_batches}.jsonl"
        with AmpMonitor(model, optimizer, None, out=path, stats_every=1) as monitor:
            for _ in range(2):
                optimizer.zero_grad()
                for inputs, target in batches(micro_batches):
                    loss = nn.functional.cross_entropy(model(inputs), target) / micro_batches
                    loss.backward()
                optimizer.step()
                monitor.step(loss)
        saved[micro_batches] = [
            record["stats"]["memory"]["activations"] for record in step_records(path)
        ]
    assert saved[1][0]["float32"] > 0
    assert saved[4] == saved[1]


@pytest.mark.slow  # dynamo traces the model (the eager backend: no compiler run)
def test_a_compiled_model_is_recorded_under_its_own_layer_names(tmp_path: Path) -> None:
    records = {}
    for compiled in (False, True):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        watched = torch.compile(model, backend="eager") if compiled else model
        path = tmp_path / f"compiled-{compiled}.jsonl"
        with AmpMonitor(watched, optimizer, None, out=path, stats_every=1) as monitor:
            for batch in batches(2):
                monitor.step(train_step(watched, optimizer, batch))
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        records[compiled] = lines
    plain, compiled_run = records[False], records[True]
    assert compiled_run[0]["model"] == plain[0]["model"]  # layers 0, 1, 2 of a Sequential
    for ours, theirs in zip(compiled_run[1:3], plain[1:3], strict=True):
        assert [layer["name"] for layer in ours["stats"]["layers"]] == ["0", "1", "2"]
        assert ours["stats"]["grad_hist"] == theirs["stats"]["grad_hist"]
        # Activation gradients are inside the compiled graph (tests/training/
        # test_monitor_compile.py): not measured, and said so.
        assert ours["stats"]["activations_not_measured"] == "compiled model"
        assert "act_hist" not in ours["stats"]
        assert ours["loss"] == theirs["loss"]


def test_a_validation_pass_without_no_grad_leaves_the_training_step_record_alone(
    tmp_path: Path,
) -> None:
    # A validation forward with autograd on (no torch.no_grad()) between steps: its graph is
    # never backpropagated. Its overflowing outputs were named as the training step's
    # forward overflow, and what it saved was added to the step's saved activations.
    records = {}
    for validate in (False, True):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        path = tmp_path / f"validate-{validate}.jsonl"
        with AmpMonitor(model, optimizer, None, out=path, stats_every=1) as monitor:
            for inputs, target in batches(3):
                monitor.step(train_step(model, optimizer, (inputs, target)))
                if validate:
                    model(inputs * 1e39)  # inf outputs, graph dropped
        records[validate] = step_records(path)
    for plain, validated in zip(records[False], records[True], strict=True):
        assert "first_nonfinite_forward" not in validated["stats"]
        assert validated["stats"]["memory"] == plain["stats"]["memory"]
        assert validated["stats"]["act_hist"] == plain["stats"]["act_hist"]


def test_step_before_the_optimizer_step_warns_once(tmp_path: Path) -> None:
    # The wrong order records step 0 as skipped, silently, and shifts every flag by one.
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=0) as monitor,
        pytest.warns(RuntimeWarning, match="no optimizer step since its last call") as caught,
    ):
        for inputs, target in batches(3):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), target)
            loss.backward()
            monitor.step(loss)
            optimizer.step()
    assert len(caught) == 1


def test_each_warning_points_at_the_loops_own_line(tmp_path: Path) -> None:
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=0) as monitor,
        pytest.warns(RuntimeWarning) as caught,
    ):
        batch = batches(1)[0]
        loss = train_step(model, optimizer, batch)
        monitor.step(loss)
        monitor.step(loss)  # repeated
        train_step(model, optimizer, batch)
        monitor.step(train_step(model, optimizer, batch))  # after two optimizer steps
        inputs, target = batch
        loss = nn.functional.cross_entropy(model(inputs), target)
        loss.backward()
        monitor.step(loss)  # a backward, but no optimizer step and no scaler
    assert len(caught) == 3
    assert {Path(warning.filename).name for warning in caught} == {Path(__file__).name}
