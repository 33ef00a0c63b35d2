"""`fpexplorer train`: run a mixed-precision training job and write its run log.

The arguments are TrainConfig's fields, declared once in `training.config` (flag, type,
choices, help and default all come from there)."""

from __future__ import annotations

import argparse

from fpexplorer.training.config import PRECISIONS, TASKS, TrainConfig, add_train_arguments

HELP = "run a mixed-precision training job and record its numerics step by step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "precisions:\n"
        + "".join(f"  {name:13} {text}\n" for name, text in PRECISIONS)
        + "tasks:\n"
        + "".join(f"  {name:13} {text}\n" for name, text in TASKS)
        + "  FILE.py:FACTORY  your own model: FACTORY() returns (model, batches, loss_fn)\n"
    )
    add_train_arguments(parser)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig that parsed arguments describe (not yet validated)."""
    return TrainConfig.from_args(args)


def run(args: argparse.Namespace) -> int:
    from fpexplorer.errors import UsageError
    from fpexplorer.training.config import given_options

    config = config_from_args(args)
    problems = config.validate(given=given_options(args))
    if problems:
        raise UsageError("; ".join(problems.values()))
    from fpexplorer.training.job import run_job_cli

    return run_job_cli(config)
