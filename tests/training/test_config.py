"""TrainConfig: validation field by field, argv round trip through the real parser."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from fpexplorer.training.config import (
    PRECISION_NAMES,
    PRECISIONS,
    TASK_NAMES,
    TASKS,
    TrainConfig,
    split_user_task,
)


def test_defaults_are_valid_and_match_torch_scaler_defaults() -> None:
    config = TrainConfig()
    assert config.validate() == {}
    assert (config.init_scale, config.growth_factor, config.backoff_factor) == (2.0**16, 2.0, 0.5)
    assert config.growth_interval == 2000


def test_choices_have_descriptions() -> None:
    assert set(PRECISION_NAMES) == {
        "fp32", "fp16", "fp16-static", "fp16-noscale", "bf16", "pure-fp16"
    }  # fmt: skip
    assert {"mlp", "underflow", "overflow", "transformer"} <= set(TASK_NAMES)
    for name, description in (*PRECISIONS, *TASKS):
        assert name and description


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"task": "nope"}, "task"),
        ({"task": "missing_file.py:make"}, "task"),
        ({"precision": "fp8"}, "precision"),
        ({"device": "tpu"}, "device"),
        ({"steps": 0}, "steps"),
        ({"lr": -1.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"batch_size": 0}, "batch_size"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),  # torch cannot take it: a usage error, not a failed task
        ({"stats_every": -1}, "stats_every"),
        ({"init_scale": 0.0}, "init_scale"),
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"loss_scale": float("inf")}, "loss_scale"),
        ({"out": "  "}, "out"),
    ],
)
def test_validate_names_the_bad_field(change: dict[str, object], field: str) -> None:
    problems = TrainConfig().replace(**change).validate()
    assert list(problems) == [field]
    assert problems[field]


def test_user_task_form(tmp_path: Path) -> None:
    task_file = tmp_path / "task.py"
    task_file.write_text("def make(): pass\n")
    assert split_user_task(f"{task_file}:make") == (str(task_file), "make")
    assert split_user_task("mlp") is None
    assert TrainConfig(task=f"{task_file}:make").validate() == {}


def test_to_argv_parses_back_to_the_same_config() -> None:
    from fpexplorer.commands import train

    config = TrainConfig(
        task="underflow", precision="fp16-static", device="cpu", steps=7, lr=0.125,
        batch_size=3, optimizer="adam", seed=4, stats_every=2, init_scale=8.0,
        growth_factor=4.0, backoff_factor=0.25, growth_interval=5, loss_scale=512.0,
        out="x.jsonl", stream=True,
    )  # fmt: skip
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    assert train.config_from_args(parser.parse_args(config.to_argv())) == config
    assert TrainConfig.from_dict({**config.to_dict(), "unknown": 1}) == config


def test_config_and_runlog_do_not_import_torch() -> None:
    code = (
        "import fpexplorer.training, fpexplorer.training.config, fpexplorer.training.runlog\n"
        "import fpexplorer.training.summary, fpexplorer.commands.runs\n"
        "import sys; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
