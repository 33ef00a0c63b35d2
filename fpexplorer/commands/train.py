"""`fpexplorer train`: run a mixed-precision training job and write its run log."""

from __future__ import annotations

import argparse

from fpexplorer.training.config import (
    DEVICES,
    OPTIMIZERS,
    PRECISION_NAMES,
    PRECISIONS,
    TASKS,
    TrainConfig,
)

HELP = "run a mixed-precision training job and record its numerics step by step"

_DEFAULTS = TrainConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "precisions:\n"
        + "".join(f"  {name:13} {text}\n" for name, text in PRECISIONS)
        + "tasks:\n"
        + "".join(f"  {name:13} {text}\n" for name, text in TASKS)
        + "  FILE.py:FACTORY  your own model: FACTORY() returns (model, batches, loss_fn)\n"
    )
    parser.add_argument(
        "--task", default=_DEFAULTS.task,
        help="a built-in task (see below) or path/to/file.py:factory (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--precision", default=_DEFAULTS.precision, choices=PRECISION_NAMES,
        help="precision mode (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--device", default=_DEFAULTS.device,
        help=f"{', '.join(DEVICES)} or cuda:N (default: %(default)s: CUDA when available)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=_DEFAULTS.steps, help="training steps")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (task default)")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size (task default)")
    parser.add_argument(
        "--optimizer", choices=OPTIMIZERS, default=None, help="optimizer (task default)"
    )
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="random seed")
    parser.add_argument(
        "--stats-every", type=int, default=_DEFAULTS.stats_every,
        help="record gradient statistics every N steps; 0 turns them off (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--init-scale", type=float, default=_DEFAULTS.init_scale,
        help="GradScaler initial scale (default: 65536.0)",
    )  # fmt: skip
    parser.add_argument(
        "--growth-factor", type=float, default=_DEFAULTS.growth_factor,
        help="GradScaler growth factor (default: 2.0)",
    )  # fmt: skip
    parser.add_argument(
        "--backoff-factor", type=float, default=_DEFAULTS.backoff_factor,
        help="GradScaler backoff factor (default: 0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--growth-interval", type=int, default=_DEFAULTS.growth_interval,
        help="GradScaler growth interval (default: 2000)",
    )  # fmt: skip
    parser.add_argument(
        "--loss-scale", type=float, default=_DEFAULTS.loss_scale,
        help="the fixed loss scale of fp16-static and pure-fp16 (default: 1024.0)",
    )  # fmt: skip
    parser.add_argument(
        "--out", default=None,
        help="run log file (JSON Lines; default: run-TASK-PRECISION-TIME.jsonl here)",
    )  # fmt: skip
    parser.add_argument("--stream", action="store_true", help="also write every record to stdout")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig that parsed arguments describe (not yet validated)."""
    return TrainConfig(
        task=args.task,
        precision=args.precision,
        device=args.device,
        steps=args.steps,
        lr=args.lr,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        seed=args.seed,
        stats_every=args.stats_every,
        init_scale=args.init_scale,
        growth_factor=args.growth_factor,
        backoff_factor=args.backoff_factor,
        growth_interval=args.growth_interval,
        loss_scale=args.loss_scale,
        out=args.out,
        stream=args.stream,
    )


def run(args: argparse.Namespace) -> int:
    from fpexplorer.cli import UsageError

    config = config_from_args(args)
    problems = config.validate()
    if problems:
        raise UsageError("; ".join(problems.values()))
    from fpexplorer.training.job import run_job_cli

    return run_job_cli(config)
