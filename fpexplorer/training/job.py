"""The training job behind `fpexplorer train`. Needs torch.

One code path for every device and precision mode: a standard PyTorch AMP loop (autocast,
a scaler, an optimizer) watched by `AmpMonitor`, which writes the run log.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import torch
from torch import nn

from fpexplorer import __version__
from fpexplorer.training.config import TrainConfig, split_user_task
from fpexplorer.training.monitor import (
    FORMAT_RANGES,
    AmpMonitor,
    device_description,
    one_line_error,
)
from fpexplorer.training.records import (
    SCHEMA_VERSION,
    DeviceInfo,
    EndRecord,
    FormatRange,
    HeaderRecord,
    ModelInfo,
    StepRecord,
    from_schema1_dict,
)
from fpexplorer.training.runlog import RunWriter
from fpexplorer.training.tasks import Task, make_task


class JobSetupError(Exception):
    """The job cannot start (no CUDA, unwritable output): a usage problem, exit status 2."""


class RunState(enum.Enum):
    """A job's life: RUNNING, then one of the end states written in the `end` record."""

    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JobResult:
    state: RunState
    steps: int
    path: Path
    error: str | None


@dataclass(frozen=True, slots=True)
class PrecisionPlan:
    """What a precision mode means for the loop."""

    autocast_dtype: torch.dtype | None  # None: no autocast
    params_dtype: torch.dtype
    scaler: str  # "none" | "dynamic" | "static"


PLANS: dict[str, PrecisionPlan] = {
    "fp32": PrecisionPlan(None, torch.float32, "none"),
    "fp16": PrecisionPlan(torch.float16, torch.float32, "dynamic"),
    "fp16-static": PrecisionPlan(torch.float16, torch.float32, "static"),
    "fp16-noscale": PrecisionPlan(torch.float16, torch.float32, "none"),
    "bf16": PrecisionPlan(torch.bfloat16, torch.float32, "none"),
    # torch's GradScaler refuses FP16 gradients, so pure FP16 uses the fixed --loss-scale.
    "pure-fp16": PrecisionPlan(None, torch.float16, "static"),
}


class StaticLossScaler:
    """A fixed loss scale with GradScaler's interface: scale the loss, unscale the gradients
    before the step, skip the step when any gradient is inf/NaN. Works on FP16 gradients."""

    def __init__(self, scale: float) -> None:
        self._scale = float(scale)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        # In FP32: an FP16 loss times the scale would overflow long before the gradients do.
        return loss.float() * self._scale

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [
            p.grad
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]
        if not grads:
            optimizer.step()
            return
        inverse = 1.0 / self._scale
        for grad in grads:
            grad.mul_(inverse)
        # One host sync, as in GradScaler.step: the decision to step is made on the host.
        if bool(torch.stack([grad.isfinite().all() for grad in grads]).all()):
            optimizer.step()

    def update(self) -> None:
        """A static scale never changes."""

    def get_scale(self) -> float:
        return self._scale


def amp_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | StaticLossScaler | None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: Any,
    target: Any,
    plan: PrecisionPlan,
    device: torch.device,
) -> torch.Tensor:
    """One training step as the precision plan says: forward under autocast, backward of
    the (scaled) loss, optimizer step (skipped by the scaler on inf/NaN), scaler update.
    Returns the unscaled loss. The job and the monitor benchmark share it."""
    with torch.autocast(
        device.type,
        dtype=plan.autocast_dtype or torch.float32,
        enabled=plan.autocast_dtype is not None,
    ):
        loss = loss_fn(model(inputs), target)
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    else:
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(optimizer)
        scaler.update()
    return loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise JobSetupError("CUDA is not available on this machine: use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise JobSetupError(f"there is no {name} (CUDA devices: {torch.cuda.device_count()})")
    return device


def default_out_path(config: TrainConfig) -> Path:
    """A new file in the run directory, the one folder where the app saves its runs too."""
    from fpexplorer.paths import run_directory

    user = split_user_task(config.task)
    task = Path(user[0]).stem if user else config.task
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return run_directory().path / f"run-{task}-{config.precision}-{stamp}.jsonl"


def _new_default_writer(path: Path, echo: IO[str] | None) -> RunWriter:
    """A writer on a new file: the default name has one-second resolution, and two jobs
    started in the same second (a seed sweep in the background) must not share a file."""
    candidate = path
    for counter in range(2, 1000):
        try:
            return RunWriter(candidate, echo=echo, exclusive=True)
        except FileExistsError:
            candidate = path.with_name(f"{path.stem}-{counter}{path.suffix}")
    return RunWriter(candidate, echo=echo, exclusive=True)  # raises: reported as such


def _to_device(value: Any, device: torch.device, float_dtype: torch.dtype | None) -> Any:
    if isinstance(value, torch.Tensor):
        if float_dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=float_dtype)
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device, float_dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device, float_dtype) for k, v in value.items()}
    return value


def make_optimizer(
    name: str, params: Iterator[torch.nn.Parameter], lr: float, fp16_params: bool
) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.0)
    # Adam's default eps=1e-8 is zero in FP16 (and 0/0 is NaN): FP16 weights use 1e-4.
    return torch.optim.Adam(params, lr=lr, eps=1e-4 if fp16_params else 1e-8)


class _StopFlag:
    """Set by SIGTERM/SIGINT; the loop stops after the step in progress."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, stream: IO[str], total: int) -> None:
        self.stream = stream
        self.total = total
        self.enabled = stream.isatty()
        self._last = 0.0

    def update(self, record: StepRecord | Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        # The monitor returns the record it wrote (a dict until it builds records itself).
        step = record if isinstance(record, StepRecord) else from_schema1_dict(record)
        if not isinstance(step, StepRecord):
            return
        now = time.perf_counter()
        if now - self._last < 0.1 and step.step + 1 < self.total:
            return
        self._last = now
        done = step.step + 1
        filled = int(20 * done / self.total)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total}"
            f"  loss {step.loss:.4g}  scale {step.scale:g}"
            f"  {step.steps_per_s:.1f} steps/s "
        )
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _fallback_header(config: TrainConfig, device: torch.device) -> HeaderRecord:
    """The header of a run whose task could not even be built."""
    return HeaderRecord(
        schema=SCHEMA_VERSION,
        fpexplorer_version=__version__,
        torch_version=torch.__version__,
        started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        config=config.to_dict(),
        device=DeviceInfo(**device_description(device)),
        model=ModelInfo(params=0, layers=()),
        formats={
            fmt.name: FormatRange(fmt.max, fmt.min_normal, fmt.min_subnormal)
            for fmt in FORMAT_RANGES
        },
    )


def run_job(
    config: TrainConfig,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    handle_signals: bool = True,
) -> JobResult:
    """Run a training job to the end; the run log is complete whatever happens.

    Raises JobSetupError before anything is written when the job cannot start.
    """
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    problems = config.validate()
    if problems:
        raise JobSetupError("; ".join(problems.values()))
    device = resolve_device(config.device)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The built-in tasks are made of small ops that threads do not speed up, and on a
        # shared or busy machine spinning worker threads slow every step down many times.
        torch.set_num_threads(1)
    plan = PLANS[config.precision]
    path = Path(config.out) if config.out else default_out_path(config)
    try:
        if config.out:
            writer = RunWriter(path, echo=stdout if config.stream else None)
        else:
            writer = _new_default_writer(path, stdout if config.stream else None)
            path = writer.path
    except OSError as error:
        raise JobSetupError(f"cannot write {path}: {error.strerror or error}") from None

    stop = _StopFlag()
    if handle_signals:
        stop.install()
    # With --stream, stdout carries records only: a print() in the user's task (without a
    # newline, even) would otherwise glue itself to a record and the reader would lose it.
    quiet_stdout = contextlib.ExitStack()
    if config.stream:
        quiet_stdout.enter_context(contextlib.redirect_stdout(stderr))
    monitor: AmpMonitor | None = None
    steps_done = 0
    try:
        torch.manual_seed(config.seed)
        task: Task = make_task(config.task, config.seed, config.batch_size, device, config.lr)
        model = task.model.to(device=device, dtype=plan.params_dtype)
        lr = config.lr or task.lr
        optimizer_name = config.optimizer or task.optimizer
        fp16_params = plan.params_dtype == torch.float16
        optimizer = make_optimizer(optimizer_name, model.parameters(), lr, fp16_params)
        scaler: Any = None
        if plan.scaler == "dynamic":
            scaler = torch.amp.GradScaler(
                device.type,
                init_scale=config.init_scale,
                growth_factor=config.growth_factor,
                backoff_factor=config.backoff_factor,
                growth_interval=config.growth_interval,
            )
        elif plan.scaler == "static":
            scaler = StaticLossScaler(config.loss_scale)
        header_config = {
            **config.to_dict(),
            "lr": lr,
            "batch_size": task.batch_size or None,
            "optimizer": optimizer_name,
            "out": str(path),
        }
        monitor = AmpMonitor(
            model, optimizer, scaler, writer=writer, stats_every=config.stats_every,
            precision=config.precision, config=header_config, device=device,
        )  # fmt: skip
        progress = _Progress(stderr, config.steps)
        input_dtype = torch.float16 if fp16_params else None
        for _ in range(config.steps):
            if stop.requested:
                break
            batch = next(task.batches, None)
            if batch is None:
                break
            inputs = _to_device(batch[0], device, input_dtype)
            target = _to_device(batch[1], device, input_dtype)
            loss = amp_step(model, optimizer, scaler, task.loss_fn, inputs, target, plan, device)
            record = monitor.step(loss)
            steps_done += 1
            progress.update(record)
        progress.finish()
        state = RunState.STOPPED if stop.requested else RunState.COMPLETED
        monitor.close(state.value)
        return JobResult(state, steps_done, path, None)
    except (Exception, SystemExit, KeyboardInterrupt) as error:
        # The task's code can raise anything (sys.exit() included): it ends the run, logged.
        # A KeyboardInterrupt (Ctrl-C without our handler, e.g. handle_signals=False) is a
        # stop asked for, not a failure: the log still ends with its `end` record.
        interrupted = isinstance(error, KeyboardInterrupt)
        state = RunState.STOPPED if interrupted else RunState.FAILED
        message = None if interrupted else one_line_error(error)
        if monitor is None:
            writer.write(_fallback_header(config, device))
            writer.write(EndRecord(status=state.value, error=message, steps=0, elapsed=0.0))
            writer.close()
        else:
            monitor.close(state.value, message)
        return JobResult(state, steps_done, path, message)
    finally:
        quiet_stdout.close()
        if handle_signals:
            stop.restore()
        if not writer.closed:
            writer.close()


def run_job_cli(config: TrainConfig) -> int:
    """`fpexplorer train`: exit status 0 (completed or stopped), 1 (the task failed),
    2 (the job could not start; raised as UsageError)."""
    from fpexplorer.errors import UsageError

    try:
        result = run_job(config)
    except JobSetupError as error:
        raise UsageError(str(error)) from None
    if result.state is RunState.FAILED:
        print(f"fpexplorer train: error: the task failed: {result.error}", file=sys.stderr)
        return 1
    print(
        f"fpexplorer train: {result.state.value} after {result.steps} steps; "
        f"run log: {result.path}",
        file=sys.stderr,
    )
    return 0
