"""TrainConfig: validation field by field, argv round trip through the real parser."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.training.config import (
    FLOAT32_MIN_NORMAL,
    MAX_AMAX_HISTORY,
    MAX_MARGIN,
    PRECISION_NAMES,
    PRECISIONS,
    TASK_NAMES,
    TASKS,
    TrainConfig,
    split_user_task,
)


def test_defaults_are_valid_and_match_each_scaler_policy_defaults() -> None:
    config = TrainConfig()
    assert config.validate() == {}
    torch_settings = config.scaler_settings()
    assert (torch_settings.policy, torch_settings.init_scale) == ("torch", 2.0**16)
    assert (torch_settings.growth_factor, torch_settings.backoff_factor) == (2.0, 0.5)
    assert torch_settings.growth_interval == 2000
    assert (torch_settings.hysteresis, torch_settings.min_scale) == (1, None)
    # DeepSpeed's fp16 config defaults; Megatron-LM's command-line defaults.
    deepspeed = config.replace(scaler="deepspeed").scaler_settings()
    assert (deepspeed.init_scale, deepspeed.growth_interval) == (2.0**16, 1000)
    assert (deepspeed.hysteresis, deepspeed.min_scale) == (2, 1.0)
    assert not deepspeed.consecutive_hysteresis
    megatron = config.replace(scaler="megatron").scaler_settings()
    assert (megatron.init_scale, megatron.growth_interval) == (2.0**32, 1000)
    assert (megatron.hysteresis, megatron.min_scale) == (2, 1.0)
    assert (megatron.growth_factor, megatron.backoff_factor) == (2.0, 0.5)
    # Options given win over the policy's defaults.
    chosen = config.replace(scaler="megatron", init_scale=8.0, hysteresis=5).scaler_settings()
    assert (chosen.init_scale, chosen.hysteresis, chosen.growth_interval) == (8.0, 5, 1000)


def test_choices_have_descriptions() -> None:
    assert set(PRECISION_NAMES) == {
        "fp32", "fp16", "fp16-static", "fp16-noscale", "bf16", "pure-fp16", "fp8", "fp8-rowwise",
        "mxfp8", "mxfp6", "mxfp4", "nvfp4",
    }  # fmt: skip
    assert {"mlp", "underflow", "overflow", "transformer"} <= set(TASK_NAMES)
    for name, description in (*PRECISIONS, *TASKS):
        assert name and description


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"task": "nope"}, "task"),
        ({"task": "missing_file.py:make"}, "task"),
        ({"precision": "fp4"}, "precision"),
        ({"bf16_first_last": True}, "bf16_first_last"),  # with fp16: nothing is quantized
        ({"fp8_scaling": "lazy"}, "fp8_scaling"),
        ({"fp8_scaling": "delayed"}, "fp8_scaling"),  # with fp16
        ({"precision": "fp8-rowwise", "fp8_scaling": "delayed"}, "fp8_scaling"),
        ({"precision": "fp8", "fp8_scaling": "delayed", "amax_history": 0}, "amax_history"),
        ({"precision": "fp8", "fp8_scaling": "delayed", "amax_compute": "mean"}, "amax_compute"),
        ({"precision": "fp8", "fp8_scaling": "delayed", "margin": -1}, "margin"),
        # 2**2000 raised OverflowError in the job's first cast (a traceback, exit 1)
        ({"precision": "fp8", "fp8_scaling": "delayed", "margin": 2000}, "margin"),
        ({"precision": "fp8", "fp8_scaling": "delayed", "margin": MAX_MARGIN + 1}, "margin"),
        # 10^9 steps of history: 12 GB per linear, a roll of 4 GB on every cast
        ({"precision": "fp8", "fp8_scaling": "delayed", "amax_history": 10**9}, "amax_history"),
        (
            {"precision": "fp8", "fp8_scaling": "delayed", "amax_history": MAX_AMAX_HISTORY + 1},
            "amax_history",
        ),
        ({"precision": "fp8", "margin": 2}, "margin"),  # current scaling has no margin
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
        ({"init_scale": 1e39}, "init_scale"),  # inf in float32
        ({"init_scale": 1e-50}, "init_scale"),  # 0 in float32: every step skipped, "completed"
        ({"scaler": "deepspeed", "init_scale": 1e-40, "min_scale": 1e-41}, "init_scale"),
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        # torch's scale update takes an int64: above it the job failed on its first step;
        # GradScaler's growth tracker is an int32, so above 2^31 - 1 it is never reached
        ({"growth_interval": 2**63}, "growth_interval"),
        ({"growth_interval": 2**31}, "growth_interval"),
        ({"scaler": "deepspeed", "growth_interval": 2**31}, "growth_interval"),
        ({"growth_factor": 1e39}, "growth_factor"),  # the scale would grow to inf (float32)
        # torch's int64 counters: the form refused these, the CLI ran them
        ({"steps": 2**63}, "steps"),
        ({"batch_size": 2**63}, "batch_size"),
        ({"stats_every": 2**63}, "stats_every"),
        ({"scaler": "apex"}, "scaler"),
        ({"scaler": "deepspeed", "precision": "bf16"}, "scaler"),
        ({"scaler": "megatron", "precision": "fp16-static"}, "scaler"),
        ({"hysteresis": 2}, "hysteresis"),  # torch's GradScaler has none
        ({"scaler": "deepspeed", "hysteresis": 0}, "hysteresis"),
        ({"min_scale": 1.0}, "min_scale"),
        ({"scaler": "megatron", "min_scale": 2.0**40}, "min_scale"),  # above the initial scale
        ({"scaler": "megatron", "consecutive_hysteresis": True}, "consecutive_hysteresis"),
        ({"precision": "fp16-static", "loss_scale": float("inf")}, "loss_scale"),
        ({"precision": "pure-fp16", "loss_scale": 1e-50}, "loss_scale"),
        # inf in FP16, where pure-fp16's backward starts: every step was skipped, "completed"
        ({"precision": "pure-fp16", "loss_scale": 65536.0}, "loss_scale"),
        # given and not used by the mode: said, not ignored
        ({"precision": "bf16", "init_scale": 1024.0}, "init_scale"),
        ({"precision": "fp8", "growth_interval": 5}, "growth_interval"),
        ({"loss_scale": 512.0}, "loss_scale"),  # fp16's scale is dynamic
        ({"out": "  "}, "out"),
    ],
)
def test_validate_names_the_bad_field(change: dict[str, object], field: str) -> None:
    problems = TrainConfig().replace(**change).validate()
    assert list(problems) == [field]
    assert problems[field]


def test_the_scale_bounds_are_float32s_own() -> None:
    """A loss scale is held in float32 by the loop: its smallest normal number (numpy's
    finfo) is accepted, the float below it refused, as the largest finite one is."""
    tiny = float(np.finfo(np.float32).tiny)
    assert tiny == FLOAT32_MIN_NORMAL
    below = float(np.nextafter(tiny, 0.0))
    huge = float(np.finfo(np.float32).max)
    for field, precision in (("init_scale", "fp16"), ("loss_scale", "fp16-static")):
        config = TrainConfig(precision=precision)
        assert config.replace(**{field: tiny}).validate() == {}
        assert config.replace(**{field: huge}).validate() == {}
        assert list(config.replace(**{field: below}).validate()) == [field]
        assert list(config.replace(**{field: huge * 1.0000001}).validate()) == [field]


def test_pure_fp16s_loss_scale_bound_is_where_float16_overflows(tmp_path: Path) -> None:
    """pure-fp16's backward starts from the scale cast to FP16 (numpy's float16 as the
    oracle): every scale FP16 holds finite is accepted, the first that is inf refused; a
    task of the user's own, whose loss may be FP32, is not held to it."""
    largest_finite = float(np.nextafter(np.float16(np.inf), np.float16(0)))  # 65504
    last_finite = float(np.nextafter(65520.0, 0.0))  # FP16 rounds it down to 65504
    with np.errstate(over="ignore"):
        assert np.isfinite(np.float16(last_finite)) and np.isinf(np.float16(65520.0))
    pure = TrainConfig(precision="pure-fp16")
    for scale in (largest_finite, last_finite):
        assert pure.replace(loss_scale=scale).validate() == {}
    for scale in (65520.0, 65536.0, 1e5):
        problem = pure.replace(loss_scale=scale).validate()["loss_scale"]
        assert "inf in float16" in problem and "65504" in problem
    # fp16-static holds the scale in float32 (its model and loss stay FP32 under autocast)
    assert TrainConfig(precision="fp16-static", loss_scale=1e5).validate() == {}
    task_file = tmp_path / "task.py"
    task_file.write_text("def make(): pass\n")
    assert pure.replace(task=f"{task_file}:make", loss_scale=1e5).validate() == {}


def test_a_user_task_without_its_factory_is_refused_before_the_job(tmp_path: Path) -> None:
    """The factory is looked up in the file's text, not run: the CLI ran the job, wrote a
    failed run log and printed fpexplorer's own traceback (exit 1), where the form said."""
    task_file = tmp_path / "task.py"
    task_file.write_text("import torch\n\ndef build():\n    raise SystemExit('not run')\n")
    problems = TrainConfig(task=f"{task_file}:make_task").validate()
    assert problems == {
        "task": "task.py has no make_task (it defines build): name its factory after the colon"
    }
    assert TrainConfig(task=f"{task_file}:build").validate() == {}
    # Names the file's text cannot rule out: a star import, a module __getattr__.
    for source in ("from tasks_elsewhere import *\n", "def __getattr__(name):\n    pass\n"):
        task_file.write_text(source)
        assert TrainConfig(task=f"{task_file}:make_task").validate() == {}, source


def test_the_margin_bound_is_where_e4m3_flushes_the_amax_itself() -> None:
    """The delayed scale casts a tensor's amax to 448 / 2**margin in E4M3 (ml_dtypes as the
    oracle): at the largest margin allowed it is still non-zero, one more flushes it."""
    assert float(ml_dtypes.float8_e4m3fn(448.0 / 2.0**MAX_MARGIN)) > 0
    assert float(ml_dtypes.float8_e4m3fn(448.0 / 2.0 ** (MAX_MARGIN + 1))) == 0
    delayed = TrainConfig(precision="fp8", fp8_scaling="delayed")
    assert delayed.replace(margin=MAX_MARGIN, amax_history=MAX_AMAX_HISTORY).validate() == {}


def test_user_task_form(tmp_path: Path) -> None:
    task_file = tmp_path / "task.py"
    task_file.write_text("def make(): pass\n")
    assert split_user_task(f"{task_file}:make") == (str(task_file), "make")
    assert split_user_task("mlp") is None
    assert TrainConfig(task=f"{task_file}:make").validate() == {}


def test_a_user_loops_task_says_what_it_is_not_unknown() -> None:
    # Selecting a run of the user's own loop fills the panel's form with its settings: its
    # task read "unknown task 'user loop'", as if the user had mistyped one.
    problem = TrainConfig(task="user loop").validate()["task"]
    assert problem.startswith("a run of your own training loop (AmpMonitor)")
    assert "unknown" not in problem


def test_a_synthetic_runs_task_says_what_it_is_not_unknown() -> None:
    # A demo run of gui.training.synthetic selected in the panel read "unknown task
    # 'synthetic'", with "Fix 1 field: Task", as if mistyped.
    from fpexplorer.gui.training.synthetic import synthetic_records

    header = next(iter(synthetic_records(1)))
    problem = TrainConfig(task=header.config["task"]).validate()["task"]
    assert problem.startswith("a synthetic demo run (nothing was trained): it cannot be started")
    assert "unknown" not in problem


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
        "import fpexplorer.training.records, fpexplorer.training.precision\n"
        "import fpexplorer.commands.train\n"
        "import sys; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----- each option declared once ----------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from fpexplorer.training.config import add_train_arguments

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser


def test_every_field_is_an_option_and_the_parser_has_exactly_them() -> None:
    import dataclasses

    from fpexplorer.training.config import option_flag, train_options

    names = [item.name for item in dataclasses.fields(TrainConfig)]
    assert [name for name, _spec, _default in train_options()] == names
    parser = _parser()
    dests = {action.dest for action in parser._actions if action.dest != "help"}
    assert dests == set(names)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    assert {option_flag(name) for name in names} <= flags
    # Defaults come from the dataclass, and the help says them (never typed twice).
    defaults = TrainConfig()
    for action in parser._actions:
        if action.dest in names:
            assert action.default == getattr(defaults, action.dest)
    help_text = parser.format_help()
    assert "(default: 200)" in help_text and "(default: the task's default)" in help_text


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(),
        TrainConfig(task="x.py:make", precision="pure-fp16", device="cuda:1", steps=7,
                    lr=0.1 + 0.2, batch_size=3, optimizer="sgd", seed=2**40, stats_every=0,
                    init_scale=2.0**-3, growth_factor=1.5, backoff_factor=0.25,
                    growth_interval=9, loss_scale=1e-45, out="r u n.jsonl", stream=True),
        TrainConfig(scaler="deepspeed", hysteresis=3, min_scale=0.5, consecutive_hysteresis=True),
    ],
)  # fmt: skip
def test_to_argv_and_from_args_round_trip_every_field(config: TrainConfig) -> None:
    assert TrainConfig.from_args(_parser().parse_args(config.to_argv())) == config


def test_precision_modes_table_is_what_the_cli_and_the_job_use() -> None:
    from fpexplorer.training.precision import PRECISION_MODES, precision_mode

    assert [choice.name for choice in PRECISIONS] == [m.name for m in PRECISION_MODES]
    assert [choice.description for choice in PRECISIONS] == [m.description for m in PRECISION_MODES]
    for mode in PRECISION_MODES:
        # Master weights are FP32 unless the weights are 16-bit; a scaled mode is one
        # whose backward runs on a multiplied loss.
        assert mode.master_weights == (mode.params_dtype == "float32")
        assert mode.scaled == (mode.scaler in ("dynamic", "static"))
        assert mode.gradient_dtype in ("float32", "float16", "bfloat16")
        assert mode.code_note
    assert precision_mode("bf16").gradient_dtype == "bfloat16"
    with pytest.raises(KeyError, match="unknown precision 'fp4'"):
        precision_mode("fp4")


def test_the_jobs_plans_come_from_the_table() -> None:
    import torch

    from fpexplorer.training.job import PLANS
    from fpexplorer.training.precision import PRECISION_MODES

    assert list(PLANS) == [mode.name for mode in PRECISION_MODES]
    for mode in PRECISION_MODES:
        plan = PLANS[mode.name]
        assert plan.params_dtype == getattr(torch, mode.params_dtype)
        assert plan.scaler == mode.scaler
        expected = getattr(torch, mode.autocast_dtype) if mode.autocast_dtype else None
        assert plan.autocast_dtype == expected


@pytest.mark.parametrize(
    "change",
    [
        {"precision": "fp16", "bf16_first_last": True},
        {"precision": "fp16", "fp8_scaling": "delayed"},
        {"precision": "fp8", "margin": 2},
        {"precision": "bf16", "scaler": "megatron"},
        {"precision": "fp16", "hysteresis": 2},
        {"precision": "fp16", "min_scale": 1.0},
        {"precision": "fp16", "scaler": "megatron", "consecutive_hysteresis": True},
        {"parallel": "fsdp"},
        {"precision": "bf16", "init_scale": 8.0, "growth_factor": 4.0},
        {"precision": "fp8", "loss_scale": 8.0},
    ],
)
def test_an_option_refused_for_its_mode_is_one_the_form_greys_out(
    change: dict[str, object],
) -> None:
    """What validate() refuses because another setting makes it meaningless is what
    `inapplicable()` names (the form greys it out and starts the job at its default)."""
    config = TrainConfig().replace(**change)
    refused = set(config.validate())
    assert refused and refused <= set(config.inapplicable())
    defaults = {name: getattr(TrainConfig(), name) for name in config.inapplicable()}
    assert config.replace(**defaults).validate() == {}


def test_what_applies_to_each_mode() -> None:
    fp16 = TrainConfig(precision="fp16").inapplicable()
    assert {"scaler", "init_scale", "growth_interval"}.isdisjoint(fp16)
    assert {"loss_scale", "bf16_first_last", "fp8_scaling", "margin", "hysteresis"} <= set(fp16)
    assert "loss_scale" not in TrainConfig(precision="pure-fp16").inapplicable()
    delayed = TrainConfig(precision="fp8", fp8_scaling="delayed").inapplicable()
    assert {"fp8_scaling", "amax_history", "margin", "bf16_first_last"}.isdisjoint(delayed)
    assert "init_scale" in delayed
    assert "parallel" not in TrainConfig(nproc_per_node=2).inapplicable()


def test_a_header_from_before_an_option_reads_as_the_run_it_was() -> None:
    """An nvfp4 run logged before its recipe options existed ran 1-D weight blocks without
    the Hadamard transform: its header, which names neither, must not read as today's
    defaults. A header that names them keeps them; other modes are untouched."""
    old = {key: value for key, value in TrainConfig(precision="nvfp4").to_dict().items()
           if key not in ("nvfp4_weight_blocks", "hadamard")}  # fmt: skip
    settings = TrainConfig.from_dict(old)
    assert (settings.nvfp4_weight_blocks, settings.hadamard) == ("1d", False)
    assert settings.validate() == {}
    current = TrainConfig(precision="nvfp4")
    assert TrainConfig.from_dict(current.to_dict()) == current
    assert (current.nvfp4_weight_blocks, current.hadamard) == ("2d", True)
    other = {key: value for key, value in TrainConfig(precision="fp16").to_dict().items()
             if key not in ("nvfp4_weight_blocks", "hadamard")}  # fmt: skip
    assert TrainConfig.from_dict(other) == TrainConfig(precision="fp16")


def test_the_largest_values_the_engine_holds_are_accepted() -> None:
    """The bounds are the engine's own: int64 counters, GradScaler's int32 growth tracker,
    a float32 growth factor; each largest value passes (what the form and CLI both ask)."""
    largest = TrainConfig(
        task="transformer",  # the other tasks' datasets bound the batch (TASK_SAMPLES)
        steps=2**63 - 1,
        batch_size=2**63 - 1,
        stats_every=2**63 - 1,
        growth_interval=2**31 - 1,
        growth_factor=float(np.finfo(np.float32).max),
    )
    assert largest.validate() == {}


def test_a_path_that_cannot_be_looked_at_is_a_field_problem_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pathlib's is_file()/is_dir() hide only "no such file" errors: an --out or a task
    file of 5,000 characters raised "File name too long" out of validate() (a traceback
    from `fpexplorer train`, and the panel said "Could not open" a run whose header held
    one)."""
    from fpexplorer.cli import main

    long_task = "t" * 5000 + ".py:make"
    long_out = "o" * 5000 + ".jsonl"
    under_a_file = tmp_path / "file.jsonl"
    under_a_file.write_text("")
    problems = TrainConfig(task=long_task, out=long_out).validate()
    assert problems == {
        "task": f"task file {'t' * 40}…{'t' * 27}.py: File name too long",
        "out": f"cannot write {'o' * 40}…{'o' * 24}.jsonl: File name too long",
    }
    inside = str(under_a_file / "run.jsonl")
    said = TrainConfig(out=inside).validate()["out"]
    assert said.startswith("cannot write ") and said.endswith("run.jsonl: Not a directory")
    assert main(["train", "--out", long_out, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err == f"fpexplorer train: error: {problems['out']}\n"


def test_an_option_named_for_a_mode_that_does_not_use_it_is_refused_even_at_its_default() -> None:
    """`--precision mxfp4 --hadamard` ran without a word (the option's default), where
    `--no-hadamard` was refused; so did `--precision bf16 --scaler torch`. What is named on
    the command line is refused where unused; the form, which greys such fields out, and a
    run's header (`validate()` alone) still judge by value."""
    from fpexplorer.training.config import PRECISION_NAMES, given_options

    parser = _parser()
    for argv, field in (
        (["--precision", "mxfp4", "--hadamard"], "hadamard"),
        (["--precision", "bf16", "--scaler", "torch"], "scaler"),
        (["--precision", "bf16", "--growth-factor", "2"], "growth_factor"),
        (["--precision", "fp16", "--fp8-scaling", "dynamic"], "fp8_scaling"),
    ):
        args = parser.parse_args(argv)
        config = TrainConfig.from_args(args)
        assert config.validate() == {}  # by value: every one is at its default
        problems = config.validate(given=given_options(args))
        assert list(problems) == [field], argv
        assert "is not used with these settings" in problems[field]
    # What the panel and a rank's relaunch pass (to_argv) is never refused: an unused option
    # at its default is left out of it.
    for precision in PRECISION_NAMES:
        config = TrainConfig(precision=precision)
        args = parser.parse_args(config.to_argv())
        assert TrainConfig.from_args(args) == config
        assert config.validate(given=given_options(args)) == {}, precision
    assert "--scaler" not in TrainConfig(precision="bf16").to_argv()
    assert "--scaler" in TrainConfig(precision="fp16").to_argv()
