"""The training job behind `fpexplorer train`. Needs torch.

One code path for every device and precision mode: a standard PyTorch AMP loop (autocast,
a scaler, an optimizer) watched by `AmpMonitor`, which writes the run log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import os
import signal
import sys
import time
import traceback as traceback_module
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import torch
from torch import nn

from fpexplorer import __version__
from fpexplorer.formats.decimal import figure_text
from fpexplorer.training import distributed
from fpexplorer.training.config import TrainConfig, launched_world_size, split_user_task
from fpexplorer.training.monitor import (
    FORMAT_RANGES,
    AmpMonitor,
    device_description,
    one_line_error,
)
from fpexplorer.training.monitor.ranks import RankLogs, launch_settings, rank_log_path
from fpexplorer.training.precision import PRECISION_MODES, PrecisionMode, precision_mode
from fpexplorer.training.records import (
    SCHEMA_VERSION,
    DeviceInfo,
    EndRecord,
    FormatRange,
    HeaderRecord,
    ModelInfo,
    Record,
    StepRecord,
    from_schema1_dict,
)
from fpexplorer.training.runlog import RunWriter
from fpexplorer.training.scalers import make_grad_scaler
from fpexplorer.training.summary import existing_file_text, loss_text, scale_text, steps_text
from fpexplorer.training.tasks import Task, TaskError, TaskSettingsError, make_task


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
    error: str | None  # one line
    traceback: str | None = None  # the task's failure, as Python printed it
    log_error: str | None = None  # the run log could not be written (training went on)
    # The run failed on a setting the task cannot take (TaskSettingsError: a batch larger
    # than its dataset): the one line the user must act on. `fpexplorer train` makes it a
    # usage error (exit 2), not a failed task (exit 1).
    settings_error: str | None = None


@dataclass(frozen=True, slots=True)
class PrecisionPlan:
    """What a precision mode means for the loop."""

    autocast_dtype: torch.dtype | None  # None: no autocast
    params_dtype: torch.dtype
    scaler: str  # "none" | "dynamic" | "static"


def _plan(mode: PrecisionMode) -> PrecisionPlan:
    autocast = getattr(torch, mode.autocast_dtype) if mode.autocast_dtype else None
    return PrecisionPlan(autocast, getattr(torch, mode.params_dtype), mode.scaler)


# From the one table of precision modes (training.precision).
PLANS: dict[str, PrecisionPlan] = {mode.name: _plan(mode) for mode in PRECISION_MODES}


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


class _JobWriter(RunWriter):
    """The job's run-log writer: the `end` record the monitor writes on a failure gets
    the failure's traceback (the monitor knows only its one-line message)."""

    end_traceback: str | None = None

    def write(self, record: Record | Mapping[str, Any]) -> None:
        if isinstance(record, EndRecord) and self.end_traceback and record.traceback is None:
            record = dataclasses.replace(record, traceback=self.end_traceback)
        super().write(record)


def _new_default_writer(
    path: Path, channel: IO[bytes] | None, echo: IO[str] | None, on_stream_lost: Callable[[], None]
) -> RunWriter:
    """A writer on a new file: the default name has one-second resolution, and two jobs
    started in the same second (a seed sweep in the background) must not share a file."""
    candidate = path
    for counter in range(2, 1000):
        try:
            return _JobWriter(candidate, channel=channel, echo=echo, exclusive=True,
                              on_stream_lost=on_stream_lost)  # fmt: skip
        except FileExistsError:
            candidate = path.with_name(f"{path.stem}-{counter}{path.suffix}")
    # The last name tried: its FileExistsError is the caller's.
    return _JobWriter(candidate, channel=channel, echo=echo, exclusive=True,
                      on_stream_lost=on_stream_lost)  # fmt: skip


class _RecordChannel:
    """Where `--stream` records go: the job's stdout, made a channel that the task's code
    cannot write to.

    Before any task code runs, the process's fd 1 is pointed at stderr, so print(),
    `sys.__stdout__`, `os.write(1, ...)` and the stdout of any subprocess all land on
    stderr; the records go to a private duplicate of the original stdout (not inherited
    by subprocesses). Whoever reads the job's stdout (the panel's QProcess, a shell pipe)
    therefore reads records only. Why this rather than a second pipe handed to the child:
    QProcess cannot pass extra descriptors, a named FIFO is POSIX-only, and tailing the
    run file adds a polling delay; moving fd 1 works everywhere with the pipe every
    process already has. (The reader's RecordStream resynchronises after garbage anyway.)

    When `stdout` is not the process's real fd 1 (a caller's StringIO), records are
    echoed to it and `sys.stdout` is redirected to stderr for the job's duration.
    """

    def __init__(self, stdout: IO[str], stderr: IO[str]) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self._saved_fd: int | None = None
        self._redirect = contextlib.ExitStack()
        self.binary: IO[bytes] | None = None
        self.text: IO[str] | None = None

    def _is_fd1(self) -> bool:
        try:
            return self._stdout is sys.stdout and self._stdout.fileno() == 1
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation included
            return False

    def open(self) -> None:
        if self._is_fd1():
            self._stdout.flush()
            saved = os.dup(1)  # non-inheritable since Python 3.4
            try:
                os.dup2(2, 1)
            except OSError:  # no usable fd 2 (a windowless process): echo as below
                os.close(saved)
            else:
                self._saved_fd = saved
                self.binary = os.fdopen(saved, "wb", buffering=0, closefd=False)
                return
        self.text = self._stdout
        # A print() in the task (without a newline, even) would glue itself to a record.
        self._redirect.enter_context(contextlib.redirect_stdout(self._stderr))

    def close(self) -> None:
        self._redirect.close()
        if self._saved_fd is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()  # what the task printed goes where fd 1 pointed
            os.dup2(self._saved_fd, 1)
            os.close(self._saved_fd)
            self._saved_fd = None


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


class StopNow(KeyboardInterrupt):
    """Raised by a second SIGTERM/SIGINT wherever the job's Python code is: the step in
    progress is abandoned and the log ends with `end` status "stopped"."""


class _StopFlag:
    """SIGTERM/SIGINT: the first asks the loop to stop after the step in progress; a
    second (a step stuck in Python: a dataloader that never yields, a runaway loop)
    raises StopNow there and then; a third kills the process by the signal's default
    action, for a job stuck where Python cannot act."""

    def __init__(self) -> None:
        self.requested = False
        self.reason: str | None = None  # why, when not a signal (the end record says it)
        self.signals = 0
        self.finishing = False  # writing the end: a second signal must not interrupt that
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def stream_lost(self) -> None:
        """The reader of `--stream` went away (the panel that started the job closed or was
        killed): stop after the step in progress, as on a first SIGTERM. Without this the
        job, orphaned, trained on to its last step with nobody watching."""
        if not self.requested:
            self.reason = (
                "the reader of its --stream records went away (the window that started it "
                "closed, or the pipe's reader ended)"
            )
        self.requested = True

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.requested = True
        if self.signals == 2 and not self.finishing:
            raise StopNow(f"stopped by a second {signal.Signals(signum).name}")
        if self.signals >= 3:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


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
            f"  loss {loss_text(step.loss)}  scale {scale_text(step.scale)}"
            f"  {figure_text(step.steps_per_s)} steps/s "
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
        formats={fmt.name: FormatRange(**fmt.header_json()) for fmt in FORMAT_RANGES},
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
    if (problem := existing_out_problem(config)) is not None:
        raise JobSetupError(problem)
    device = resolve_device(config.device)
    # A rank of a torchrun job joins its process group here (None: a single process).
    rank = distributed.start_rank(config, device)
    if rank is not None:
        device = rank.device
    mode = precision_mode(config.precision)
    if mode.recipe is not None:
        from fpexplorer.training.lowprec.recipes import recipe_problem

        problem = recipe_problem(mode, config)
        if problem:
            raise JobSetupError(problem)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The built-in tasks are made of small ops that threads do not speed up, and on a
        # shared or busy machine spinning worker threads slow every step down many times.
        torch.set_num_threads(1)
    plan = PLANS[config.precision]
    path = Path(config.out) if config.out else default_out_path(config)
    channel = _RecordChannel(stdout, stderr)
    if config.stream:
        channel.open()  # on every rank: the task's output goes to stderr; records, rank 0's
    job_writers: list[_JobWriter] = []
    stop = _StopFlag()
    try:
        if rank is not None:
            writer: RunWriter | RankLogs = _rank_logs(
                config, rank, path, channel, job_writers, lambda: _ranks_stream_lost(stop)
            )
        elif config.out:
            writer = _JobWriter(path, channel=channel.binary, echo=channel.text,
                                on_stream_lost=stop.stream_lost)  # fmt: skip
        else:
            writer = _new_default_writer(path, channel.binary, channel.text, stop.stream_lost)
            path = writer.path
    except OSError as error:
        channel.close()
        distributed.end_rank()
        raise JobSetupError(f"cannot write {path}: {error.strerror or error}") from None
    if isinstance(writer, _JobWriter):
        job_writers.append(writer)

    completed = False  # every step taken: the peers reach the end too
    if handle_signals:
        stop.install()
    monitor: AmpMonitor | None = None
    steps_done = 0
    # The monitor warns once when the run log cannot be written and goes on; the job
    # reports that itself, in one line, from `monitor.write_error` (a warning would add a
    # second line and a source line). Other warnings pass as usual.
    log_warnings = warnings.catch_warnings()
    log_warnings.__enter__()
    warnings.filterwarnings(
        "ignore", message="AmpMonitor: cannot write the run log", category=RuntimeWarning
    )
    try:
        torch.manual_seed(config.seed)
        task: Task = make_task(config.task, config.seed, config.batch_size, device, config.lr)
        model = task.model.to(device=device, dtype=plan.params_dtype)
        recipe_config = _apply_recipe(model, mode, config, device, stderr)
        batches = task.batches
        fault = distributed.fault_from_env()
        injector = distributed.FaultInjector(fault, rank.context.rank if rank else 0, model) if (
            fault is not None
        ) else None  # fmt: skip
        if rank is not None:
            batches = distributed.shard_batches(batches, rank.context.rank,
                                                rank.context.world_size)  # fmt: skip
            # The monitor watches the wrapped model's layers and checks each rank's own
            # gradients before they are communicated (monitor.reduction).
            model = distributed.wrap_model(model, rank)
        lr = config.lr or task.lr
        optimizer_name = config.optimizer or task.optimizer
        fp16_params = plan.params_dtype == torch.float16
        optimizer = make_optimizer(optimizer_name, model.parameters(), lr, fp16_params)
        scaler: Any = None
        if plan.scaler == "dynamic":
            if rank is not None and rank.parallel == "fsdp":
                scaler = distributed.make_sharded_scaler(config.scaler_settings(), rank)
            else:
                scaler = make_grad_scaler(config.scaler_settings(), device.type)
        elif plan.scaler == "static":
            scaler = StaticLossScaler(config.loss_scale)
        header_config = {
            **config.to_dict(),
            # A rank runs without the launch options; its header states the launch.
            **(_launch_settings(config, rank) if rank is not None else {}),
            "lr": lr,
            "batch_size": task.batch_size or None,
            "optimizer": optimizer_name,
            "out": str(path),
            **recipe_config,
        }
        if plan.scaler == "dynamic":
            # The scaler's settings as it runs them (the policy's defaults resolved): what
            # a replay of this run under another policy starts from.
            header_config.update(config.scaler_settings().to_config())
        monitor = AmpMonitor(
            model, optimizer, scaler, writer=writer, stats_every=config.stats_every,
            precision=config.precision, config=header_config, device=device,
        )  # fmt: skip
        progress = _Progress(stderr, config.steps)
        input_dtype = torch.float16 if fp16_params else None
        # Ranks stop at the same step (see distributed.StopAgreement).
        agreement = distributed.StopAgreement(rank.context) if rank is not None else None
        for _ in range(config.steps):
            if stop.requested and (agreement is None or agreement.stop_before(steps_done)):
                break
            if injector is not None:
                injector.before_step(steps_done)
            batch = next(batches, None)
            if batch is None:
                if steps_done == 0:
                    raise EmptyBatchesError(
                        "the task's batches gave nothing: no step could be taken"
                    )
                break
            inputs = _to_device(batch[0], device, input_dtype)
            target = _to_device(batch[1], device, input_dtype)
            loss = amp_step(model, optimizer, scaler, task.loss_fn, inputs, target, plan, device)
            record = monitor.step(loss)
            steps_done += 1
            progress.update(record)
        stop.finishing = True
        progress.finish()
        state = RunState.STOPPED if stop.requested else RunState.COMPLETED
        monitor.close(state.value, stop.reason if stop.requested else None)
        completed = state is RunState.COMPLETED
        # A stop with a reason (the stream's reader went away) says it, as its end record does.
        reason = stop.reason if state is RunState.STOPPED else None
        return JobResult(state, steps_done, path, reason, log_error=_log_error(monitor, writer))
    except (Exception, SystemExit, KeyboardInterrupt) as error:
        # The task's code can raise anything (sys.exit() included): it ends the run, logged.
        # A KeyboardInterrupt (Ctrl-C without our handler, e.g. handle_signals=False, or
        # a second signal) is a stop asked for, not a failure: the log still ends with its
        # `end` record.
        stop.finishing = True
        # A rank told to stop (torchrun stops every rank when one is lost, the panel's
        # Stop) may find its peers gone in the next collective: that is the stop too.
        interrupted = isinstance(error, KeyboardInterrupt) or (rank is not None and stop.requested)
        state = RunState.STOPPED if interrupted else RunState.FAILED
        message = None if interrupted else one_line_error(error)
        settings_error = str(error) if isinstance(error, TaskSettingsError) else None
        trace = None
        # fpexplorer's own checks of a task (TaskError: a factory that returns the wrong
        # thing, a batch that is no pair) have no bug to trace: their traceback was of
        # fpexplorer's frames alone, above the one line that says it all.
        quiet = (EmptyBatchesError, TaskSettingsError, TaskError)
        if not interrupted and not isinstance(error, quiet):
            trace = "".join(traceback_module.format_exception(error))
            for job_writer in job_writers:
                job_writer.end_traceback = trace
        if monitor is None:
            try:
                writer.write(_fallback_header(config, device))
                writer.write(
                    EndRecord(
                        status=state.value, error=message, steps=0, elapsed=0.0, traceback=trace
                    )
                )
            except OSError as write_error:
                return JobResult(
                    state, 0, path, message, trace, f"{write_error.strerror or write_error}",
                    settings_error,
                )  # fmt: skip
        else:
            monitor.close(state.value, message)
        return JobResult(state, steps_done, path, message, trace, _log_error(monitor, writer),
                         settings_error)  # fmt: skip
    finally:
        log_warnings.__exit__(None, None, None)
        if handle_signals:
            stop.restore()
        if not writer.closed:
            with contextlib.suppress(OSError):
                writer.close()
        channel.close()
        if rank is not None:
            distributed.end_rank(wait_for_peers=completed)


def _apply_recipe(
    model: nn.Module, mode: PrecisionMode, config: TrainConfig, device: torch.device,
    stderr: IO[str],
) -> dict[str, Any]:  # fmt: skip
    """Quantize the model's linear layers as the mode's recipe says (the same call on
    every device); say in one line which layers run in low precision and which do not.
    Returns what the header's config adds: the layers quantized and those kept, with why."""
    if mode.recipe is None:
        return {}
    from fpexplorer.training.lowprec.recipes import apply_recipe, recipe_label

    try:
        choice = apply_recipe(model, mode, config, device)
    except ValueError as error:  # a model the recipe cannot take: one line, no traceback
        raise TaskSettingsError(f"--precision {mode.name}: {error}") from None
    if choice is None:
        return {}
    # One write, newline included: the ranks of a launch share one stderr, and a line
    # written in two pieces was glued to another rank's.
    stderr.write(f"fpexplorer train: {choice.describe(recipe_label(mode, config))}\n")
    stderr.flush()
    return {
        "quantized_layers": list(choice.quantized),
        "high_precision_layers": dict(choice.kept),
    }


class EmptyBatchesError(Exception):
    """The task's batch source ended before the first step."""


def _log_error(monitor: AmpMonitor | None, writer: RunWriter | RankLogs) -> str | None:
    """Why the run log is incomplete (the monitor could not write and went on), or None."""
    error = monitor.write_error if monitor is not None else None
    if error is None and isinstance(writer, RankLogs):
        error = writer.write_error
    if error is None:
        return None
    return str(error.strerror or error)


def _launch_settings(config: TrainConfig, rank: distributed.RankSetup) -> dict[str, Any]:
    """The launch a rank belongs to, from torchrun's environment."""
    return launch_settings(rank.context, rank.parallel)


def _ranks_stream_lost(stop: _StopFlag) -> None:
    """Rank 0's `--stream` reader went away: this rank stops (its end record says why) and
    asks the launcher to stop the others, so that they all stop at the same step."""
    stop.stream_lost()
    distributed.stop_launcher()


def _rank_logs(
    config: TrainConfig,
    rank: distributed.RankSetup,
    path: Path,
    channel: _RecordChannel,
    job_writers: list[_JobWriter],
    on_stream_lost: Callable[[], None],
) -> RankLogs:
    """A rank's writers: its own log and, on rank 0, the merged log, which is also what
    the stream channel carries (the panel shows the merged view live); `on_stream_lost`
    when that channel's reader goes away."""
    context = rank.context
    own = _JobWriter(rank_log_path(path, context.rank))
    job_writers.append(own)
    merged = None
    if context.rank == 0:
        merged = _JobWriter(path, channel=channel.binary, echo=channel.text,
                            on_stream_lost=on_stream_lost)  # fmt: skip
        job_writers.append(merged)
    return RankLogs(
        path, context, stats_every=config.stats_every, parallel=rank.parallel,
        replicas=1 if rank.parallel == "fsdp" else context.world_size,
        rank_writer=own, merged_writer=merged,
    )  # fmt: skip


def existing_out_problem(config: TrainConfig) -> str | None:
    """Why the job must not start: its `--out` (or, launched on several ranks, a rank's
    log beside it) is a file that exists and `--overwrite` was not given. A re-run command
    must not destroy a finished run without a word. None on a rank of a launched job: its
    peers write the merged log and their own, so the file may exist already (the launcher
    checked before starting them)."""
    if config.out is None or config.overwrite or launched_world_size() > 1:
        return None
    path = Path(config.out)
    paths = [path]
    if config.launches:
        paths += [rank_log_path(path, rank) for rank in range(config.world_size)]
    for existing in paths:
        if existing.is_file():  # not a device such as /dev/null or /dev/full
            return (
                f"{existing} exists ({existing_file_text(existing)}); give another --out, "
                "or --overwrite to replace it"
            )
    return None


def run_job_cli(config: TrainConfig) -> int:
    """`fpexplorer train`: exit status 0 (completed or stopped), 1 (the task failed),
    2 (the job could not start, or the task refused a setting: raised as UsageError)."""
    from fpexplorer.errors import UsageError
    from fpexplorer.paths import run_directory

    if not config.out and (moved := run_directory().problem) is not None:
        # An FPEXPLORER_RUN_DIR that cannot be written: the run went to a temporary folder
        # (lost at the next reboot) with nothing but its path to show for it.
        _say(f"fpexplorer train: {moved}")
    if config.launches:
        problems = config.validate()
        if problems:
            raise UsageError("; ".join(problems.values()))
        if (problem := existing_out_problem(config)) is not None:
            raise UsageError(problem)
        try:
            return distributed.launch(config)
        except distributed.LaunchError as error:
            raise UsageError(str(error)) from None
    try:
        result = run_job(config)
    except JobSetupError as error:
        raise UsageError(str(error)) from None
    if result.settings_error is not None:
        # A setting the task cannot take is the user's to change, like an unknown option:
        # a usage error, one line (the run log still ends `failed`, saying why).
        raise UsageError(result.settings_error)
    if result.traceback:
        _say(result.traceback.rstrip("\n"))
    if result.state is RunState.FAILED:
        # The one line last, where it is seen: under the traceback.
        _say(f"fpexplorer train: error: the task failed: {result.error}")
        return 1
    if result.log_error:
        _say(
            f"fpexplorer train: error: cannot write the run log {result.path}: "
            f"{result.log_error} (training went on: {steps_text(result.steps)}, log incomplete)"
        )
        return 1
    # A rank of a launched run names its own log (the launcher then names the merged one).
    rank = os.environ.get("RANK", "")
    where = f"run log: {result.path}"
    if launched_world_size() > 1 and rank.isdigit():
        where = f"rank {rank}'s log: {rank_log_path(result.path, int(rank))}"
    # Why it stopped, where not a signal: "stopped after 0 steps" alone read as a job that
    # did nothing for no reason (--stream > /dev/full, a pipe whose reader ended).
    why = f": {result.error}" if result.state is RunState.STOPPED and result.error else ""
    _say(f"fpexplorer train: {result.state.value} after {steps_text(result.steps)}{why}; {where}")
    return 0


def _say(text: str) -> None:
    """`text` and its newline on stderr in one write: the ranks of a launch share one
    stderr, and print()'s two writes (text, then newline) glued one rank's line to another's."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
