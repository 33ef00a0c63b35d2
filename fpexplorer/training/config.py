"""The options of `fpexplorer train`, each declared once. Torch-free: the GUI imports it.

`TrainConfig` is what the training panel's form edits and what `fpexplorer train` parses.
Each field carries its `OptionSpec` in the dataclass field's metadata: its title, its one
line of help, its kind (text, choice, int, float, flag), its choices, what None stands
for. Everything else derives from that declaration:

- `fpexplorer train`'s argparse arguments: `add_train_arguments(parser)` (flags, types,
  choices and "(default: ...)" from the field's default, never typed twice);
- `TrainConfig.to_argv()`: the job's command line, and `from_args(namespace)` back;
- the training form: iterate `train_options()` for each field's title, tooltip, kind and
  choices (`OptionSpec.in_form` says which fields the form shows). A new option is one
  field here, and the CLI and the form follow.

Precision modes are a table of their own (`training.precision.PRECISION_MODES`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, NamedTuple

from fpexplorer.formats import get_format
from fpexplorer.formats.decimal import display_decimal
from fpexplorer.training.precision import PRECISION_MODES, PRECISION_NAMES, find_precision_mode
from fpexplorer.training.scaler_rules import (
    SCALER_NAMES,
    SCALER_POLICIES,
    ScalerSettings,
    exact_number,
    resolve_settings,
    settings_problems,
)


def _path_problem(path: str) -> str | None:
    """Why `path` cannot even be looked at (a name too long, a file on the way where a
    folder should be, a folder that cannot be passed, a NUL in it), or None. pathlib's
    is_file()/is_dir() hide only "no such file" errors and raised the others: a traceback
    for `--out` of 5,000 characters."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return None  # not there (yet): for the callers to say
    except OSError as error:
        return str(error.strerror or error)
    except ValueError as error:  # "embedded null byte"
        return str(error)
    return None


def _short_path(path: str) -> str:
    """A path named in a one-line message: a very long one cut in its middle."""
    return path if len(path) <= 80 else f"{path[:40]}…{path[-30:]}"


class Choice(NamedTuple):
    """A named option with the one line the help text and the GUI show for it."""

    name: str
    description: str


PRECISIONS: tuple[Choice, ...] = tuple(
    Choice(mode.name, mode.description) for mode in PRECISION_MODES
)

SCALERS: tuple[Choice, ...] = tuple(
    Choice(policy.name, policy.description) for policy in SCALER_POLICIES
)

TASKS: tuple[Choice, ...] = (
    Choice("mlp", "a small MLP classifying points on two interleaved spirals (the default)"),
    Choice("underflow", "a deep, narrow network whose activation gradients sit below FP16's range"),
    Choice("overflow", "a feed-forward block whose activations grow past FP16's 65504"),
    Choice("transformer", "a small character-level transformer language model on Python's docs"),
    Choice("regression", "linear regression with tiny updates: FP16 weights lose them to rounding"),
)
TASK_NAMES: tuple[str, ...] = tuple(choice.name for choice in TASKS)
# The samples each built-in task draws its batches from, without replacement within an
# epoch (`tasks` builds its datasets with these sizes): a larger batch cannot be drawn. The
# transformer samples windows of its text with replacement: any batch size.
TASK_SAMPLES: dict[str, int] = {"mlp": 2048, "underflow": 4096, "overflow": 8192,
                                "regression": 4096}  # fmt: skip
# The task a run of the user's own loop (AmpMonitor) records: not one a job can run.
USER_LOOP_TASK = "user loop"
# The task of the demo runs `fpexplorer.gui.training.synthetic` makes: none was trained.
SYNTHETIC_TASK = "synthetic"

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
PARALLEL_CHOICES: tuple[Choice, ...] = (
    Choice("ddp", "DistributedDataParallel: every rank holds the whole model"),
    Choice("fsdp", "FSDP2 fully_shard: parameters, gradients and optimizer state sharded"),
)
PARALLEL_NAMES: tuple[str, ...] = tuple(choice.name for choice in PARALLEL_CHOICES)
# The launch options: `fpexplorer train` with them launches torchrun, whose ranks run
# `fpexplorer train` without them (TrainConfig.rank_config).
LAUNCH_OPTIONS: tuple[str, ...] = ("nproc_per_node", "nnodes", "rdzv_endpoint", "rdzv_timeout")
_ENDPOINT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
# What the engine can hold: step counters, sizes and seeds are int64 in torch;
# GradScaler's growth tracker is an int32 tensor (a longer growth interval is never
# reached); the growth factor multiplies a float32 scale (FLOAT32_MAX below).
MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1
# torch seeds are 64-bit; tasks derive further seeds from it (seed + 1), so int64's top.
MAX_SEED = MAX_INT64
OPTIMIZER_CHOICES: tuple[Choice, ...] = (
    Choice("sgd", "stochastic gradient descent, no momentum"),
    Choice("adam", "Adam (eps 1e-4 with FP16 weights: 1e-8 is zero there)"),
)
OPTIMIZERS: tuple[str, ...] = tuple(choice.name for choice in OPTIMIZER_CHOICES)
FP8_SCALINGS: tuple[Choice, ...] = (
    Choice("dynamic", "current scaling: each cast's scale from that tensor's own amax (torchao)"),
    Choice("delayed", "delayed scaling (Transformer Engine): the scale from past steps' amaxes"),
)
NVFP4_WEIGHT_BLOCKS: tuple[Choice, ...] = (
    Choice("2d", "one scale per 16x16 weight tile: forward (W) and backward (Wᵀ) multiply "
           "the same quantized weight (NVIDIA's recipe)"),
    Choice("1d", "blocks of 16 along each matmul's reduction dimension: W and Wᵀ are "
           "quantized differently"),
)  # fmt: skip
AMAX_COMPUTES: tuple[Choice, ...] = (
    Choice("max", "the largest amax in the history window (Transformer Engine's default)"),
    Choice("most_recent", "the amax of the previous step alone"),
)
# Transformer Engine's DelayedScaling defaults: amax_history_len=1024,
# amax_compute_algo="max", margin=0.
DEFAULT_AMAX_HISTORY = 1024
# Loss scales are float32 in the loop (GradScaler's scale tensor, the static scaler's
# multiply): above float32's largest finite value a scale is inf and skips every step.
FLOAT32_MAX = float.fromhex("0x1.fffffep127")  # 3.4028234663852886e38
# Below float32's smallest normal a scale is subnormal or 0 there: 0 (below 2^-149) makes
# the loss 0 and its reciprocal inf (every step skipped, measured: --init-scale 1e-50); a
# subnormal one scales every FP16 gradient to zero, and its reciprocal is inf below 2^-128.
FLOAT32_MIN_NORMAL = float.fromhex("0x1p-126")  # 1.1754943508222875e-38
# Delayed scaling keeps each linear's amax histories (3 x N float32) on its device and rolls
# them on every cast: at N = 10^8 a roll took 0.5 s on this CPU (27 casts a transformer
# step), at 10^9 each linear held 12 GB. 2^16 steps of history cost what 1024 do.
MAX_AMAX_HISTORY = 2**16
# The delayed scale is fp8_max / amax / 2**margin: each tensor's amax is cast to
# 448 / 2**margin in E4M3. 448 / 2**18 ~ 2^-9.2 still rounds to E4M3's smallest
# subnormal 2^-9; from 19 on even the amax (and so every value) flushes to zero.
MAX_MARGIN = 18
# pure-fp16 holds the model, and so its loss, in FP16: backward starts from the loss's
# gradient, the scale itself, cast to FP16, where a scale from 65520 up is inf (65536 on
# every built-in task: every step skipped, measured). A user's task may compute its loss
# in FP32, so only the built-in tasks are held to it.
FLOAT16 = get_format("float16")


_FLOAT32_MAX_TEXT = display_decimal(Fraction(FLOAT32_MAX))  # "3.40282346…e38"


# The value as typed back (`exact_number`: "1e-320", never %g's rounded "9.99989e-321"),
# and the limits exactly or cut with "…" (display_decimal), never rounded without a mark.
def _beyond_float32(what: str, value: float) -> str:
    return (
        f"{what} {exact_number(value)} is inf in float32, where the loop holds it (every step "
        f"would be skipped): use at most float32's largest, {_FLOAT32_MAX_TEXT}"
    )


def _below_float32(what: str, value: float) -> str:
    return (
        f"{what} {exact_number(value)} is 0 or subnormal in float32, where the loop holds it "
        f"(the scaled gradients would be 0 or inf): use at least 2^-126 "
        f"({display_decimal(Fraction(FLOAT32_MIN_NORMAL))})"
    )


def scale_problem(what: str, value: float) -> str | None:
    """Why a loss scale cannot be held by the loop (float32), or None when it can."""
    if value > FLOAT32_MAX:
        return _beyond_float32(what, value)
    if 0 < value < FLOAT32_MIN_NORMAL:
        return _below_float32(what, value)
    return None


def scaler_settings_problems(settings: ScalerSettings) -> dict[str, str]:
    """The policy's own rules for these settings (`settings_problems`), and the initial
    scale held in float32: what `fpexplorer train`, `runs replay-scaler` and the panel's
    What-if tab all refuse."""
    # A run header's settings are data from a file: their types are checked before any
    # rule compares them (a damaged "init_scale": "abc" raised TypeError in the rules).
    kinds = {"init_scale": "number", "growth_factor": "number", "backoff_factor": "number",
             "min_scale": "number", "growth_interval": "whole", "hysteresis": "whole"}  # fmt: skip
    wrong: dict[str, str] = {}
    for name, kind in kinds.items():
        value = getattr(settings, name)
        if name == "min_scale" and value is None:
            continue
        fits = _is_int(value) if kind == "whole" else _is_real(value)
        if not fits:
            what = "a whole number" if kind == "whole" else "a number"
            title = dict((n, spec.title) for n, spec, _ in _OPTIONS)[name].lower()
            wrong[name] = f"the {title} {value!r} is not {what}"
    if wrong:
        return wrong
    problems = settings_problems(settings)
    if "init_scale" not in problems:
        problem = scale_problem("the initial scale", settings.init_scale)
        if problem is not None:
            problems["init_scale"] = problem
    # What the engine holds: above int64 torch's scale update raised on the first step,
    # above int32 GradScaler's growth tracker never reaches the interval; a growth factor
    # beyond float32 makes the first growth inf (a replay in float64 would go on from it).
    if "growth_interval" not in problems and settings.growth_interval > MAX_INT32:
        problems["growth_interval"] = (
            f"the growth interval must be a whole number from 1 to {MAX_INT32} "
            "(GradScaler counts clean steps in an int32)"
        )
    if "growth_factor" not in problems and settings.growth_factor > FLOAT32_MAX:
        problems["growth_factor"] = (
            f"the growth factor must be greater than 1 and at most {_FLOAT32_MAX_TEXT} "
            "(it multiplies a float32 scale)"
        )
    return problems


# A user task: "path/to/file.py:factory".
_USER_TASK = re.compile(r"^(?P<path>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*)$")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def split_user_task(task: str) -> tuple[str, str] | None:
    """`"dir/file.py:make"` -> `("dir/file.py", "make")`; None when `task` is not of that form."""
    match = _USER_TASK.match(task)
    if match is None:
        return None
    return match.group("path"), match.group("factory")


@functools.lru_cache(maxsize=16)
def _parsed_names(path: str, _mtime_ns: int, _size: int) -> tuple[list[str], set[str]] | None:
    """(the functions defined at the top of a Python file, every name bound there: defs,
    classes, assignments, imports), read without running it; None when it cannot be read
    or parsed (starting the job then says why). Cached per file version: the form checks
    at every keystroke."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    functions: list[str] = []
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.append(node.name)
        elif isinstance(node, ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            # A factory may be assigned (make_task = partial(...)).
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                bound.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return functions, bound | set(functions)


def task_file_names(path: str) -> tuple[list[str], set[str]] | None:
    """(top-level functions, every top-level name) of a task file, read without running
    it; None when it cannot be read or parsed."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return _parsed_names(path, stat.st_mtime_ns, stat.st_size)


def factory_problem(task: str) -> str | None:
    """What is wrong with a user task's factory name, read from the file without running
    it: None when the file binds that name (or is not there or unreadable: the config's
    own check, or the job, says so)."""
    user = split_user_task(task)
    if user is None:
        return None
    path, factory = user
    names = task_file_names(path)
    # A star import or a module __getattr__ can bind any name: only running it would tell.
    if names is None or factory in names[1] or {"*", "__getattr__"} & names[1]:
        return None
    functions = names[0]
    defined = f" (it defines {', '.join(functions)})" if functions else " (it defines no function)"
    return f"{Path(path).name} has no {factory}{defined}: name its factory after the colon"


OptionKind = Literal["text", "choice", "int", "float", "flag"]


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """How one TrainConfig field appears on the command line and in the form."""

    title: str  # the form's label, e.g. "Learning rate"
    help: str  # one line: argparse's help and the form's tooltip (no default in it)
    kind: OptionKind
    choices: tuple[Choice, ...] = ()  # "choice": the allowed values; "text": suggestions
    none_means: str | None = None  # what a None value stands for (e.g. "the task's default")
    in_form: bool = True  # False: command line only (the panel chooses the file itself)


def _option(default: Any, **spec: Any) -> Any:
    return dataclasses.field(default=default, metadata={"option": OptionSpec(**spec)})


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Every option of `fpexplorer train`. Scaler settings carry torch's names; None is
    the chosen scaler policy's own default (`scaler_settings()` resolves them).

    `lr`, `batch_size` and `optimizer` are None for "the task's own default" (each task
    knows what learning rate makes it train in a few hundred steps).
    """

    task: str = _option(
        "mlp", title="Task", kind="text", choices=TASKS,
        help="a built-in task (see below) or path/to/file.py:factory",
    )  # fmt: skip
    precision: str = _option(
        "fp16", title="Precision", kind="choice", choices=PRECISIONS, help="precision mode"
    )
    device: str = _option(
        "auto", title="Device", kind="text",
        choices=(Choice("auto", "CUDA when available, else the CPU"), Choice("cpu", "the CPU"),
                 Choice("cuda", "the first CUDA device")),
        help="auto (CUDA when available), cpu, cuda or cuda:N",
    )  # fmt: skip
    steps: int = _option(200, title="Steps", kind="int", help="training steps")
    lr: float | None = _option(
        None, title="Learning rate", kind="float", help="learning rate",
        none_means="the task's default",
    )  # fmt: skip
    batch_size: int | None = _option(
        None, title="Batch size", kind="int", help="batch size", none_means="the task's default"
    )
    optimizer: str | None = _option(
        None, title="Optimizer", kind="choice", choices=OPTIMIZER_CHOICES, help="optimizer",
        none_means="the task's default",
    )  # fmt: skip
    seed: int = _option(0, title="Seed", kind="int", help="random seed")
    stats_every: int = _option(
        1, title="Statistics every", kind="int",
        help="record gradient statistics every N steps; 0 turns them off (a skipped or "
        "non-finite step still records its parameter gradients')",
    )  # fmt: skip
    scaler: str = _option(
        "torch", title="Loss scaler", kind="choice", choices=SCALERS,
        help="the dynamic loss-scaling policy of the fp16 mode",
    )  # fmt: skip
    init_scale: float | None = _option(
        None, title="Initial scale", kind="float",
        help="the dynamic scaler's initial loss scale (fp16)",
        none_means="the scaler's: 2^16 (torch, DeepSpeed), 2^32 (Megatron)",
    )  # fmt: skip
    growth_factor: float = _option(
        2.0, title="Growth factor", kind="float", help="the dynamic scaler's growth factor (fp16)"
    )
    backoff_factor: float = _option(
        0.5, title="Backoff factor", kind="float",
        help="the dynamic scaler's backoff factor (fp16)",
    )  # fmt: skip
    growth_interval: int | None = _option(
        None, title="Growth interval", kind="int",
        help="clean steps before the dynamic scaler grows the scale (fp16)",
        none_means="the scaler's: 2000 (torch), 1000 (DeepSpeed, Megatron)",
    )  # fmt: skip
    hysteresis: int | None = _option(
        None, title="Hysteresis", kind="int",
        help="overflows before the scale backs off (DeepSpeed, Megatron; torch has none)",
        none_means="the scaler's: 2 (DeepSpeed, Megatron), none (torch)",
    )  # fmt: skip
    min_scale: float | None = _option(
        None, title="Minimum scale", kind="float",
        help="the scale never backs off below it (DeepSpeed, Megatron)",
        none_means="the scaler's: 1 (DeepSpeed, Megatron), none (torch)",
    )  # fmt: skip
    consecutive_hysteresis: bool = _option(
        False, title="Consecutive hysteresis", kind="flag", in_form=False,
        help="DeepSpeed: refill the hysteresis on every clean step, not only when the scale grows",
    )  # fmt: skip
    loss_scale: float = _option(
        1024.0, title="Fixed loss scale", kind="float",
        help="the fixed loss scale of fp16-static and pure-fp16",
    )  # fmt: skip
    nproc_per_node: int = _option(
        1, title="Ranks", kind="int",
        help="processes (ranks) per node: more than 1 launches the job through torchrun "
        "(gloo on CPU, nccl on CUDA; one GPU per rank)",
    )  # fmt: skip
    nnodes: int = _option(
        1, title="Nodes", kind="int", in_form=False,
        help="nodes (machines) of a multi-node job; each runs this same command",
    )  # fmt: skip
    rdzv_endpoint: str | None = _option(
        None, title="Rendezvous endpoint", kind="text", in_form=False,
        help="HOST:PORT where the nodes meet (torchrun's c10d rendezvous, hosted by the "
        "node that is HOST)",
        none_means="a free port on this machine (one node only)",
    )  # fmt: skip
    rdzv_timeout: int = _option(
        60, title="Rendezvous timeout", kind="int", in_form=False,
        help="seconds to wait for every node to join before giving up",
    )  # fmt: skip
    parallel: str | None = _option(
        None, title="Parallelism", kind="choice", choices=PARALLEL_CHOICES,
        help="how ranks share the model", none_means="ddp when there are several ranks",
    )  # fmt: skip
    bf16_first_last: bool = _option(
        False, title="BF16 first/last", kind="flag",
        help="keep the first and the last linear layer in BF16 (fp8, MX and NVFP4 modes)",
    )  # fmt: skip
    nvfp4_weight_blocks: str = _option(
        "2d", title="Weight blocks", kind="choice", choices=NVFP4_WEIGHT_BLOCKS,
        help="nvfp4: one block scale per 16x16 weight tile (2d) or blocks of 16 (1d)",
    )  # fmt: skip
    hadamard: bool = _option(
        True, title="Hadamard (Wgrad)", kind="flag",
        help="nvfp4: rotate both operands of the weight-gradient matmul by a 16x16 random "
        "Hadamard transform before they are quantized",
    )  # fmt: skip
    fp8_scaling: str = _option(
        "dynamic", title="FP8 scaling", kind="choice", choices=FP8_SCALINGS,
        help="how the fp8 mode scales each tensor before the cast",
    )  # fmt: skip
    amax_history: int = _option(
        DEFAULT_AMAX_HISTORY, title="Amax history", kind="int",
        help="delayed scaling: how many past amaxes the scale is computed from",
    )  # fmt: skip
    amax_compute: str = _option(
        "max", title="Amax compute", kind="choice", choices=AMAX_COMPUTES,
        help="delayed scaling: the amax the scale is computed from",
    )  # fmt: skip
    margin: int = _option(
        0, title="Scale margin", kind="int",
        help="delayed scaling: the scale is divided by 2**margin (headroom for growth)",
    )  # fmt: skip
    out: str | None = _option(
        None, title="Run log", kind="text", in_form=False,
        help="run log file (JSON Lines); on several ranks (--nproc-per-node x --nnodes > 1) "
        "the merged log, with each rank K's own beside it (DIR/run.jsonl: DIR/run.rank-K.jsonl)",
        none_means="a new run-TASK-PRECISION-TIME.jsonl in the run directory; on several "
        "ranks a new folder run-TASK-PRECISION-TIME/ there, holding run.jsonl (merged) and "
        "run.rank-K.jsonl",
    )  # fmt: skip
    overwrite: bool = _option(
        False, title="Overwrite", kind="flag", in_form=False,
        help="replace the --out file when it exists (without it an existing file is refused, "
        "so a finished run is never lost by re-running a command)",
    )  # fmt: skip
    stream: bool = _option(
        False, title="Stream", kind="flag", in_form=False,
        help="also write every record to stdout (the task's own output goes to stderr)",
    )  # fmt: skip

    def validate(self, given: Collection[str] | None = None) -> dict[str, str]:
        """Field name -> what is wrong with it; empty when the configuration is valid.

        `given`: the options named on the command line (`given_options`). An option the
        other settings do not use is refused when given, even at its default value
        (`--precision mxfp4 --hadamard` ran without a word, where `--no-hadamard` was
        refused); without `given` (the form, a run's header), when it is not at its default.
        """
        problems: dict[str, str] = {}
        if self.task not in TASK_NAMES:
            user = split_user_task(self.task)
            # Runs no job made: their settings fill the form when one is selected in the
            # panel, and the task says what the run is, not that it was mistyped.
            made_by = {
                USER_LOOP_TASK: "a run of your own training loop (AmpMonitor)",
                SYNTHETIC_TASK: "a synthetic demo run (nothing was trained)",
            }.get(self.task)
            if made_by is not None:
                problems["task"] = (
                    f"{made_by}: it cannot be started from here; use one of "
                    f"{', '.join(TASK_NAMES)} or path/to/file.py:factory"
                )
            elif user is None:
                problems["task"] = (
                    f"unknown task {self.task!r}: use one of {', '.join(TASK_NAMES)} "
                    "or path/to/file.py:factory"
                )
            elif (unusable := _path_problem(user[0])) is not None:
                problems["task"] = f"task file {_short_path(user[0])}: {unusable}"
            elif not Path(user[0]).is_file():
                problems["task"] = f"task file not found: {user[0]}"
            elif (missing := factory_problem(self.task)) is not None:
                # Known from the file's text, as the form knew it: the CLI ran the job,
                # wrote a failed run log and printed fpexplorer's own traceback (exit 1).
                problems["task"] = missing
        if self.precision not in PRECISION_NAMES:
            problems["precision"] = (
                f"unknown precision {self.precision!r}: use one of {', '.join(PRECISION_NAMES)}"
            )
        if not _DEVICE.match(self.device):
            problems["device"] = f"unknown device {self.device!r}: use auto, cpu, cuda or cuda:N"
        if not _is_int(self.steps) or not 1 <= self.steps <= MAX_INT64:
            problems["steps"] = f"steps must be a whole number from 1 to {MAX_INT64}"
        if self.lr is not None and not _positive_finite(self.lr):
            problems["lr"] = "the learning rate must be a positive finite number"
        if self.batch_size is not None and (
            not _is_int(self.batch_size) or not 1 <= self.batch_size <= MAX_INT64
        ):
            problems["batch_size"] = f"the batch size must be a whole number from 1 to {MAX_INT64}"
        elif self.batch_size is not None and self.batch_size > TASK_SAMPLES.get(
            self.task, MAX_INT64
        ):
            # Known before any data is made: the form greys Start and the CLI exits 2 at
            # once (the task found it only once built: seconds later, the run failed).
            problems["batch_size"] = (
                f"the batch size {self.batch_size} is larger than the {self.task} task's "
                f"dataset ({TASK_SAMPLES[self.task]} samples)"
            )
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            problems["optimizer"] = f"unknown optimizer {self.optimizer!r}: use sgd or adam"
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            problems["seed"] = f"the seed must be a whole number from 0 to {MAX_SEED}"
        if not _is_int(self.stats_every) or not 0 <= self.stats_every <= MAX_INT64:
            problems["stats_every"] = (
                f"stats-every must be a whole number from 0 (off) to {MAX_INT64}"
            )
        problems.update(self._scaler_problems())
        if not _positive_finite(self.loss_scale):
            problems["loss_scale"] = "the loss scale must be a positive finite number"
        elif (problem := scale_problem("the loss scale", self.loss_scale)) is not None:
            problems["loss_scale"] = problem
        elif (
            self.precision == "pure-fp16"
            and split_user_task(self.task) is None
            and FLOAT16.classify(FLOAT16.from_value(self.loss_scale)) == "inf"
        ):
            problems["loss_scale"] = (
                f"the loss scale {exact_number(self.loss_scale)} is inf in float16, where "
                "pure-fp16's backward pass starts from it (every step would be skipped): use "
                "at most float16's largest, 65504"
            )
        problems.update(self._distributed_problems())
        problems.update(self._low_precision_problems())
        for name, why in self.inapplicable().items():
            # Given, and not used with the other settings (an --init-scale under bf16 was
            # ignored without a word): say so rather than run without it.
            named = name in given if given is not None else None
            if named is None:
                named = getattr(self, name) != _FIELD_DEFAULTS[name]
            if name not in problems and named:
                flag = given_flag(name, getattr(self, name))
                problems[name] = f"{flag} is not used with these settings: {why}"
        if self.out is not None:
            if not self.out.strip():
                problems["out"] = "the output file name is empty"
            elif (unusable := _path_problem(self.out)) is not None:
                problems["out"] = f"cannot write {_short_path(self.out)}: {unusable}"
            elif Path(self.out).is_dir():
                problems["out"] = f"{self.out} is a folder, not a file"
        return problems

    def inapplicable(self) -> dict[str, str]:
        """Field name -> why that option does nothing with the other settings (the form
        greys it out and starts the job with its default): the loss scalers' settings
        outside their precision modes, the low-precision options outside theirs."""
        mode = find_precision_mode(self.precision)
        unused: dict[str, str] = {}
        if mode is not None:
            if mode.scaler != "dynamic":
                why = f"a setting of fp16's dynamic loss scaler, and {self.precision} has none"
                for name in ("scaler", "init_scale", "growth_factor", "backoff_factor",
                             "growth_interval", "hysteresis", "min_scale",
                             "consecutive_hysteresis"):  # fmt: skip
                    unused[name] = why
            elif self.scaler == "torch":
                why = "a setting of DeepSpeed's and Megatron's scalers; torch's GradScaler has none"
                unused.update(hysteresis=why, min_scale=why)
            if self.scaler != "deepspeed" and "consecutive_hysteresis" not in unused:
                unused["consecutive_hysteresis"] = "an option of DeepSpeed's scaler only"
            if mode.scaler != "static":
                unused["loss_scale"] = (
                    f"the fixed scale of fp16-static and pure-fp16; {self.precision} does not "
                    "use one"
                )
            if not mode.quantized:
                unused["bf16_first_last"] = (
                    f"an option of the fp8, MX and NVFP4 modes; {self.precision} quantizes no layer"
                )
            if self.precision != "fp8":
                unused["fp8_scaling"] = "an option of the fp8 mode only"
            if self.precision != "nvfp4":
                for name in ("nvfp4_weight_blocks", "hadamard"):
                    unused[name] = "an option of the nvfp4 mode only"
            if self.precision != "fp8" or self.fp8_scaling != "delayed":
                for name in ("amax_history", "amax_compute", "margin"):
                    unused[name] = "an option of delayed FP8 scaling only (fp8 scaling delayed)"
        if (
            _is_int(self.nproc_per_node) and _is_int(self.nnodes)
            and not self.launches and launched_world_size() < 2
        ):  # fmt: skip
            unused["parallel"] = "an option of several ranks only (Ranks above 1)"
        return unused

    @property
    def world_size(self) -> int:
        """Ranks the launch options ask for (1: no launch)."""
        return self.nproc_per_node * self.nnodes

    @property
    def launches(self) -> bool:
        """Whether `fpexplorer train` launches torchrun (several ranks asked for)."""
        return self.world_size > 1

    def rank_config(self) -> TrainConfig:
        """The configuration each rank runs: the launch options reset, the parallelism
        (default ddp) kept."""
        return self.replace(parallel=self.parallel or "ddp", nproc_per_node=1, nnodes=1,
                            rdzv_endpoint=None, rdzv_timeout=60)  # fmt: skip

    def _distributed_problems(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        if not _is_int(self.nproc_per_node) or self.nproc_per_node < 1:
            problems["nproc_per_node"] = "--nproc-per-node must be a whole number of at least 1"
        if not _is_int(self.nnodes) or self.nnodes < 1:
            problems["nnodes"] = "--nnodes must be a whole number of at least 1"
        if not _is_int(self.rdzv_timeout) or self.rdzv_timeout < 1:
            problems["rdzv_timeout"] = "--rdzv-timeout must be a whole number of seconds, >= 1"
        if problems:
            return problems
        if self.parallel is not None and self.parallel not in PARALLEL_NAMES:
            problems["parallel"] = f"unknown --parallel {self.parallel!r}: use ddp or fsdp"
        elif self.parallel is not None and self.world_size < 2 and launched_world_size() < 2:
            problems["parallel"] = (
                f"--parallel {self.parallel} needs several ranks: add --nproc-per-node N (N > 1)"
            )
        if self.rdzv_endpoint is not None:
            match = _ENDPOINT.match(self.rdzv_endpoint)
            if match is None or not 1 <= int(match.group("port")) <= 65535:
                problems["rdzv_endpoint"] = (
                    f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT (port 1-65535)"
                )
            elif not self.launches:
                problems["rdzv_endpoint"] = "--rdzv-endpoint needs --nproc-per-node or --nnodes > 1"
        elif self.nnodes > 1:
            problems["nnodes"] = "--nnodes > 1 needs --rdzv-endpoint HOST:PORT (where nodes meet)"
        if self.launches and launched_world_size() > 1:
            problems["nproc_per_node"] = (
                "this process is already a rank of a torchrun job: leave out --nproc-per-node "
                "and --nnodes"
            )
        if self.parallel == "fsdp":
            # Under FSDP each rank holds a shard of the gradients: only ShardedGradScaler
            # agrees a skip across ranks (it all-reduces its found-inf flag).
            mode = find_precision_mode(self.precision)
            if mode is not None and mode.scaler == "static":
                problems["parallel"] = (
                    f"--parallel fsdp cannot run {self.precision}: a fixed loss scale decides "
                    "each rank's skip alone on its shard; use fp16 (ShardedGradScaler) or bf16"
                )
            elif mode is not None and mode.quantized:
                problems["parallel"] = (
                    f"--parallel fsdp does not run the quantized mode {self.precision} yet: "
                    "use --parallel ddp"
                )
            elif self.scaler != "torch":
                problems["parallel"] = (
                    f"--parallel fsdp runs torch's ShardedGradScaler: --scaler {self.scaler} "
                    "would decide each rank's skip alone on its shard"
                )
        return problems

    def _low_precision_problems(self) -> dict[str, str]:
        """The options of the fp8/MX/NVFP4 modes: valid, and given with a mode they fit."""
        problems: dict[str, str] = {}
        mode = find_precision_mode(self.precision)
        if self.bf16_first_last and mode is not None and not mode.quantized:
            problems["bf16_first_last"] = (
                f"--bf16-first-last applies to the fp8, MX and NVFP4 modes, not {self.precision}"
            )
        layouts = [choice.name for choice in NVFP4_WEIGHT_BLOCKS]
        if self.nvfp4_weight_blocks not in layouts:
            problems["nvfp4_weight_blocks"] = (
                f"unknown nvfp4 weight blocks {self.nvfp4_weight_blocks!r}: use "
                f"{' or '.join(layouts)}"
            )
        if not isinstance(self.hadamard, bool):
            problems["hadamard"] = f"hadamard is on or off (true or false), not {self.hadamard!r}"
        scalings = [choice.name for choice in FP8_SCALINGS]
        computes = [choice.name for choice in AMAX_COMPUTES]
        if self.fp8_scaling not in scalings:
            problems["fp8_scaling"] = (
                f"unknown fp8 scaling {self.fp8_scaling!r}: use {' or '.join(scalings)}"
            )
        elif self.fp8_scaling == "delayed" and self.precision != "fp8":
            problems["fp8_scaling"] = (
                f"--fp8-scaling delayed keeps one scale per tensor: use it with --precision "
                f"fp8, not {self.precision}"
            )
        if not _is_int(self.amax_history) or not 1 <= self.amax_history <= MAX_AMAX_HISTORY:
            problems["amax_history"] = (
                f"the amax history must be a whole number from 1 to {MAX_AMAX_HISTORY} "
                "(steps; Transformer Engine's default is 1024)"
            )
        if self.amax_compute not in computes:
            problems["amax_compute"] = (
                f"unknown amax compute {self.amax_compute!r}: use {' or '.join(computes)}"
            )
        if not _is_int(self.margin) or not 0 <= self.margin <= MAX_MARGIN:
            problems["margin"] = (
                f"the scale margin must be a whole number from 0 to {MAX_MARGIN} (binades; "
                f"above {MAX_MARGIN} every value flushes to zero in E4M3)"
            )
        delayed_only = {
            "amax_history": self.amax_history != DEFAULT_AMAX_HISTORY,
            "amax_compute": self.amax_compute != "max",
            "margin": self.margin != 0,
        }
        if self.fp8_scaling != "delayed":
            for name, changed in delayed_only.items():
                if changed and name not in problems:
                    problems[name] = f"{option_flag(name)} applies to --fp8-scaling delayed only"
        return problems

    def _scaler_problems(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        if self.scaler not in SCALER_NAMES:
            return {
                "scaler": f"unknown scaler {self.scaler!r}: use one of {', '.join(SCALER_NAMES)}"
            }
        mode = find_precision_mode(self.precision)
        if self.scaler != "torch" and mode is not None and mode.scaler != "dynamic":
            problems["scaler"] = (
                f"--scaler {self.scaler} is a dynamic loss-scaling policy: it applies to fp16, "
                f"and {self.precision} has none"
            )
        if self.init_scale is not None and not _positive_finite(self.init_scale):
            problems["init_scale"] = "the initial scale must be a positive finite number"
        if not (_positive_finite(self.growth_factor) and self.growth_factor > 1.0):
            problems["growth_factor"] = "the growth factor must be greater than 1"
        if not (_positive_finite(self.backoff_factor) and self.backoff_factor < 1.0):
            problems["backoff_factor"] = "the backoff factor must lie between 0 and 1"
        if self.growth_interval is not None and (
            not _is_int(self.growth_interval) or self.growth_interval < 1
        ):
            problems["growth_interval"] = "the growth interval must be a whole number of at least 1"
        if self.hysteresis is not None and not _is_int(self.hysteresis):
            problems["hysteresis"] = "the hysteresis must be a whole number of at least 1"
        if self.min_scale is not None and not _positive_finite(self.min_scale):
            problems["min_scale"] = "the minimum scale must be a positive finite number"
        if not problems:
            # The policy's own rules (torch has no hysteresis, no minimum scale, ...).
            problems.update(scaler_settings_problems(self.scaler_settings()))
        return problems

    def scaler_settings(self) -> ScalerSettings:
        """The dynamic scaler's settings: the options given, the policy's defaults else."""
        return resolve_settings(
            self.scaler,
            init_scale=self.init_scale,
            growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor,
            growth_interval=self.growth_interval,
            hysteresis=self.hysteresis,
            min_scale=self.min_scale,
            consecutive_hysteresis=self.consecutive_hysteresis,
        )

    def to_argv(self, omit: tuple[str, ...] = ()) -> list[str]:
        """The arguments after `fpexplorer train` that run this configuration (derived
        from the fields' option declarations: flags, None left out, floats exact), less
        the fields named in `omit`."""
        argv: list[str] = []
        # An option the other settings do not use, at its default, is left out: named, the
        # command would refuse it (`validate(given=...)`), as it refuses a user's.
        unused = self.inapplicable()
        for name, spec, default in train_options():
            if name in omit or (name in unused and getattr(self, name) == default):
                continue
            value = getattr(self, name)
            if spec.kind == "flag":
                argv += [given_flag(name, value)] if bool(value) != bool(default) else []
            elif value is not None:
                text = repr(float(value)) if spec.kind == "float" else str(value)
                argv += [option_flag(name), text]
        return argv

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TrainConfig:
        """The configuration that parsed arguments (`add_train_arguments`) describe."""
        return cls(**{name: getattr(args, name) for name, _spec, _default in train_options()})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (the header record's "config")."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build from a dict (e.g. a run header's "config"); unknown keys are ignored.

        A header records every option (`to_dict`), so one without an option that a mode
        gained later was written before that option existed, and its run did what the mode
        did then (`_BEFORE_OPTION`), not what the option's default does now."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {key: value for key, value in values.items() if key in names}
        before = options_before_logged(known.get("precision"))
        return cls(**{**{k: v for k, v in before.items() if k not in known}, **known})

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


# For each mode, the options it gained after runs in it were logged, and what such a run did.
_BEFORE_OPTION: dict[str, dict[str, Any]] = {
    "nvfp4": {"nvfp4_weight_blocks": "1d", "hadamard": False},  # NVIDIA's recipe came later
}


def options_before_logged(precision: object) -> dict[str, Any]:
    """The options a run in `precision` ran with when its header does not record them (it
    was logged before the mode gained them): what the mode did then, not today's default."""
    return dict(_BEFORE_OPTION.get(str(precision), {}))


def launched_world_size() -> int:
    """The world size torchrun gave this process (its WORLD_SIZE), 1 when not launched."""
    text = os.environ.get("WORLD_SIZE", "1")
    return int(text) if text.isdigit() else 1


def train_options() -> tuple[tuple[str, OptionSpec, Any], ...]:
    """(field name, its OptionSpec, its default) for every option, in declaration order."""
    return _OPTIONS


def option_flag(name: str) -> str:
    """The command-line flag of a field: `batch_size` -> `--batch-size`."""
    return "--" + name.replace("_", "-")


def given_flag(name: str, value: object) -> str:
    """How a value of a field is given on the command line, by its flag: `--no-hadamard`
    for a flag option turned off (a flag that is on by default), else `option_flag`."""
    if _SPECS[name].kind == "flag" and value is False and _FIELD_DEFAULTS[name] is True:
        return "--no-" + option_flag(name).removeprefix("--")
    return option_flag(name)


def _default_text(spec: OptionSpec, default: Any) -> str:
    if default is None:
        return spec.none_means or "none"
    return f"{default:g}" if isinstance(default, float) else str(default)


# Where the parsed namespace keeps the names of the options the command line named.
_GIVEN = "_given_options"


def _note_given(namespace: argparse.Namespace, name: str) -> None:
    given: set[str] = getattr(namespace, _GIVEN, set())
    given.add(name)
    setattr(namespace, _GIVEN, given)


def given_options(namespace: argparse.Namespace) -> frozenset[str]:
    """The fields whose options the parsed command line named (`add_train_arguments`)."""
    return frozenset(getattr(namespace, _GIVEN, ()))


class _Store(argparse.Action):
    """argparse's "store" (of `const` for an option that takes no value), noting that the
    option was named."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
        values: str | Sequence[Any] | None, option_string: str | None = None,
    ) -> None:  # fmt: skip
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        _note_given(namespace, self.dest)


class _StoreTrue(_Store):
    """argparse's "store_true", noting that the option was named."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, const=True, **kwargs)


class _OnOff(argparse.BooleanOptionalAction):
    """--name / --no-name, noting that the option was named."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
        values: str | Sequence[Any] | None, option_string: str | None = None,
    ) -> None:  # fmt: skip
        super().__call__(parser, namespace, values, option_string)
        _note_given(namespace, self.dest)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """`fpexplorer train`'s arguments, one per TrainConfig field, from its OptionSpec; the
    options named are noted (`given_options`)."""
    for name, spec, default in train_options():
        help_text = f"{spec.help} (default: {_default_text(spec, default)})"
        if spec.kind == "flag" and default:
            # On by default: --name and --no-name (argparse's BooleanOptionalAction).
            parser.add_argument(
                option_flag(name), dest=name, action=_OnOff,
                default=True, help=f"{spec.help} (default: on)",
            )  # fmt: skip
            continue
        if spec.kind == "flag":
            parser.add_argument(
                option_flag(name), dest=name, action=_StoreTrue, default=False, help=spec.help
            )
            continue
        kinds: dict[str, Any] = {"int": int, "float": float}
        extra: dict[str, Any] = {"type": kinds[spec.kind]} if spec.kind in kinds else {}
        if spec.kind == "choice":
            extra["choices"] = [choice.name for choice in spec.choices]
        parser.add_argument(
            option_flag(name),
            dest=name,
            action=_Store,
            default=default,
            help=help_text,
            **extra,
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_finite(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


_FIELD_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
_OPTIONS: tuple[tuple[str, OptionSpec, Any], ...] = tuple(
    (item.name, item.metadata["option"], item.default) for item in dataclasses.fields(TrainConfig)
)
_SPECS: dict[str, OptionSpec] = {name: spec for name, spec, _default in _OPTIONS}
