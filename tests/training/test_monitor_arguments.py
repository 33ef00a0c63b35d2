"""AmpMonitor refuses a wrong argument at construction, with one clear exception, before the
run log is opened (so a retry with the same path is not refused as locked). The optimizer
argument's own cases are in test_monitor_optimizers.py."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.runlog import load_run


def _model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("argument", "exception", "message"),
    [
        # Each of the first seven failed inside: an AttributeError at construction, one on
        # the first step, or pathlib's TypeError, leaving the log open and locked.
        ({"model": lambda x: x}, TypeError, "model is a torch.nn.Module, not a function"),
        ({"model": None}, TypeError, "model is a torch.nn.Module, not None"),
        ({"scaler": "fp16"}, TypeError, "scaler is a torch.amp.GradScaler.*not a str"),
        ({"scaler": object()}, TypeError, r"an object with get_scale\(\), or None, not an"),
        ({"config": [("lr", 1)]}, TypeError, r"config is a mapping \(a dict\), not a list"),
        ({"device": 0}, TypeError, "device is a torch.device or its name, not an int"),
        ({"stats_budget": "0.05"}, ValueError, "stats_budget must be a share"),
        ({"stats_every": -1}, ValueError, "stats_every must be a whole number >= 0"),
        ({"stats_budget": 2}, ValueError, "stats_budget must be a share of the wall time"),
        ({"device": "gpu"}, ValueError, "device: .*gpu"),
        ({"formats": ["fp7"]}, ValueError, "unknown format 'fp7'"),
    ],
)
def test_a_wrong_argument_is_refused_before_the_log_is_opened(
    tmp_path: Path, argument: dict[str, Any], exception: type[Exception], message: str
) -> None:
    model, optimizer = _model_and_optimizer()
    given: dict[str, Any] = {"model": model, "scaler": None, **argument}
    path = tmp_path / "run.jsonl"
    with pytest.raises(exception, match=message):
        AmpMonitor(given.pop("model"), optimizer, given.pop("scaler"), out=path, **given)
    assert not path.exists()


def test_out_is_a_path_never_an_open_file(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    with open(tmp_path / "text.jsonl", "w") as text, open(tmp_path / "bin.jsonl", "wb") as raw:
        for stream in (text, raw, io.StringIO()):
            with pytest.raises(TypeError, match=r"out is a run-log path \(str or os\.PathLike\)"):
                AmpMonitor(model, optimizer, out=stream)  # type: ignore[arg-type]
        # echo= is the place for a stream, a text one (a binary one failed at close()).
        with pytest.raises(TypeError, match="echo is a text stream"):
            AmpMonitor(model, optimizer, out=tmp_path / "run.jsonl", echo=raw)  # type: ignore[arg-type]
    assert not (tmp_path / "run.jsonl").exists()


def test_a_missing_folder_is_refused_at_construction(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    with pytest.raises(FileNotFoundError, match="missing"):
        AmpMonitor(model, optimizer, out=tmp_path / "missing" / "run.jsonl")


def test_a_device_name_and_one_format_name_are_taken(tmp_path: Path) -> None:
    # device="cpu" was an AttributeError ('str' object has no attribute 'type'); formats="e4m3"
    # was read letter by letter ("unknown format 'e'").
    model, optimizer = _model_and_optimizer()
    path = tmp_path / "run.jsonl"
    with AmpMonitor(
        model, optimizer, out=path, device="cpu", formats="e4m3", precision="fp32", echo=sys.stderr
    ) as monitor:
        optimizer.zero_grad()
        loss = model(torch.ones(3, 4)).square().mean()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    run = load_run(path)
    assert run.status == "completed" and run.problems == ()
    assert run.header is not None and list(run.header.formats) == ["float8_e4m3fn"]


@pytest.mark.parametrize("stats_every", [0, 1])  # the plain step's path, and a statistics step's
def test_a_wrong_loss_says_what_step_takes(tmp_path: Path, stats_every: int) -> None:
    # Each was float()'s or torch's message from inside the step ("could not convert string
    # to float: 'x'", "a Tensor with 3 elements cannot be converted to Scalar").
    model, optimizer = _model_and_optimizer()
    wrong: list[tuple[Any, type[Exception], str]] = [
        ("x", TypeError, "loss is a one-element tensor or a number, not a str"),
        (None, TypeError, "loss is a one-element tensor or a number, not None"),
        ([1.0], TypeError, "not a list"),
        (torch.ones(3), ValueError, r"loss is one number, not a tensor of 3 elements"),
    ]
    right = [torch.tensor(0.5), 0.25, np.float32(0.125), np.array(2.0), torch.ones(1)]
    losses = []
    with AmpMonitor(model, optimizer, out=tmp_path / "run.jsonl", stats_every=stats_every) as m:
        for index, loss in enumerate(right):
            optimizer.zero_grad()
            model(torch.ones(3, 4)).square().mean().backward()
            optimizer.step()
            if index == 2:  # refused before anything is recorded: the right loss still is
                for given, exception, message in wrong:
                    with pytest.raises(exception, match=message):
                        m.step(given)
            losses.append(m.step(loss).loss)
    assert losses == [0.5, 0.25, 0.125, 2.0, 1.0]
    assert [step.loss for step in load_run(tmp_path / "run.jsonl").steps] == losses
