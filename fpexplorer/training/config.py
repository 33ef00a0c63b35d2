"""The options of `fpexplorer train`, as one frozen dataclass. Torch-free: the GUI imports it.

`TrainConfig` is what the training panel's form edits and what `fpexplorer train` parses;
`to_argv()` turns it back into the command line of the job, `validate()` says what is wrong
field by field before a process is started.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple


class Choice(NamedTuple):
    """A named option with the one line the help text and the GUI show for it."""

    name: str
    description: str


PRECISIONS: tuple[Choice, ...] = (
    Choice("fp32", "FP32 everywhere: the reference"),
    Choice("fp16", "FP16 autocast + dynamic loss scaling (GradScaler), FP32 master weights"),
    Choice("fp16-static", "FP16 autocast + a fixed loss scale (--loss-scale), FP32 master weights"),
    Choice("fp16-noscale", "FP16 autocast without loss scaling: small gradients underflow to zero"),
    Choice("bf16", "BF16 autocast, no scaling: FP32's range, 8 bits of precision"),
    Choice("pure-fp16", "model and optimizer in FP16, no FP32 master weights: updates get lost"),
)
PRECISION_NAMES: tuple[str, ...] = tuple(choice.name for choice in PRECISIONS)

TASKS: tuple[Choice, ...] = (
    Choice("mlp", "a small MLP classifying points on two interleaved spirals (the default)"),
    Choice("underflow", "a deep, narrow network whose activation gradients sit below FP16's range"),
    Choice("overflow", "a feed-forward block whose activations grow past FP16's 65504"),
    Choice("transformer", "a small character-level transformer language model on Python's docs"),
    Choice("regression", "linear regression with tiny updates: FP16 weights lose them to rounding"),
)
TASK_NAMES: tuple[str, ...] = tuple(choice.name for choice in TASKS)

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
# torch seeds are 64-bit; tasks derive further seeds from it (seed + 1), so int64's top.
MAX_SEED = 2**63 - 1
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
# Loss scales are float32 in the loop (GradScaler's scale tensor, the static scaler's
# multiply): above float32's largest finite value a scale is inf and skips every step.
FLOAT32_MAX = float.fromhex("0x1.fffffep127")  # 3.4028234663852886e38


def _beyond_float32(what: str, value: float) -> str:
    return (
        f"{what} {value:g} is inf in float32, where the loop holds it (every step would be "
        f"skipped): use at most {FLOAT32_MAX:.8g}"
    )


# A user task: "path/to/file.py:factory".
_USER_TASK = re.compile(r"^(?P<path>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*)$")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def split_user_task(task: str) -> tuple[str, str] | None:
    """`"dir/file.py:make"` -> `("dir/file.py", "make")`; None when `task` is not of that form."""
    match = _USER_TASK.match(task)
    if match is None:
        return None
    return match.group("path"), match.group("factory")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Every option of `fpexplorer train`. Scaler settings carry torch's names and defaults.

    `lr`, `batch_size` and `optimizer` are None for "the task's own default" (each task
    knows what learning rate makes it train in a few hundred steps).
    """

    task: str = "mlp"
    precision: str = "fp16"
    device: str = "auto"
    steps: int = 200
    lr: float | None = None
    batch_size: int | None = None
    optimizer: str | None = None
    seed: int = 0
    stats_every: int = 1
    init_scale: float = 65536.0  # 2**16, torch.amp.GradScaler's default
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    loss_scale: float = 1024.0  # the fixed scale of fp16-static
    out: str | None = None  # None: a new file named after task, precision and time
    stream: bool = False

    def validate(self) -> dict[str, str]:
        """Field name -> what is wrong with it; empty when the configuration is valid."""
        problems: dict[str, str] = {}
        if self.task not in TASK_NAMES:
            user = split_user_task(self.task)
            if user is None:
                problems["task"] = (
                    f"unknown task {self.task!r}: use one of {', '.join(TASK_NAMES)} "
                    "or path/to/file.py:factory"
                )
            elif not Path(user[0]).is_file():
                problems["task"] = f"task file not found: {user[0]}"
        if self.precision not in PRECISION_NAMES:
            problems["precision"] = (
                f"unknown precision {self.precision!r}: use one of {', '.join(PRECISION_NAMES)}"
            )
        if not _DEVICE.match(self.device):
            problems["device"] = f"unknown device {self.device!r}: use auto, cpu, cuda or cuda:N"
        if not _is_int(self.steps) or self.steps < 1:
            problems["steps"] = "steps must be a whole number of at least 1"
        if self.lr is not None and not _positive_finite(self.lr):
            problems["lr"] = "the learning rate must be a positive finite number"
        if self.batch_size is not None and (not _is_int(self.batch_size) or self.batch_size < 1):
            problems["batch_size"] = "the batch size must be a whole number of at least 1"
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            problems["optimizer"] = f"unknown optimizer {self.optimizer!r}: use sgd or adam"
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            problems["seed"] = f"the seed must be a whole number from 0 to {MAX_SEED}"
        if not _is_int(self.stats_every) or self.stats_every < 0:
            problems["stats_every"] = "stats-every must be a whole number of at least 0 (0: off)"
        if not _positive_finite(self.init_scale):
            problems["init_scale"] = "the initial scale must be a positive finite number"
        elif self.init_scale > FLOAT32_MAX:
            problems["init_scale"] = _beyond_float32("the initial scale", self.init_scale)
        if not (_positive_finite(self.growth_factor) and self.growth_factor > 1.0):
            problems["growth_factor"] = "the growth factor must be greater than 1"
        if not (_positive_finite(self.backoff_factor) and self.backoff_factor < 1.0):
            problems["backoff_factor"] = "the backoff factor must lie between 0 and 1"
        if not _is_int(self.growth_interval) or self.growth_interval < 1:
            problems["growth_interval"] = "the growth interval must be a whole number of at least 1"
        if not _positive_finite(self.loss_scale):
            problems["loss_scale"] = "the loss scale must be a positive finite number"
        elif self.loss_scale > FLOAT32_MAX:
            problems["loss_scale"] = _beyond_float32("the loss scale", self.loss_scale)
        if self.out is not None:
            if not self.out.strip():
                problems["out"] = "the output file name is empty"
            elif Path(self.out).is_dir():
                problems["out"] = f"{self.out} is a folder, not a file"
        return problems

    def to_argv(self) -> list[str]:
        """The arguments after `fpexplorer train` that run this configuration."""
        argv = [
            "--task", self.task,
            "--precision", self.precision,
            "--device", self.device,
            "--steps", str(self.steps),
            "--seed", str(self.seed),
            "--stats-every", str(self.stats_every),
            "--init-scale", repr(float(self.init_scale)),
            "--growth-factor", repr(float(self.growth_factor)),
            "--backoff-factor", repr(float(self.backoff_factor)),
            "--growth-interval", str(self.growth_interval),
            "--loss-scale", repr(float(self.loss_scale)),
        ]  # fmt: skip
        if self.lr is not None:
            argv += ["--lr", repr(float(self.lr))]
        if self.batch_size is not None:
            argv += ["--batch-size", str(self.batch_size)]
        if self.optimizer is not None:
            argv += ["--optimizer", self.optimizer]
        if self.out is not None:
            argv += ["--out", self.out]
        if self.stream:
            argv.append("--stream")
        return argv

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (the header record's "config")."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build from a dict (e.g. a run header's "config"); unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_finite(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
