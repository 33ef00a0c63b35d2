"""Several ranks for `fpexplorer train`: the launch through torchrun and what each rank
does differently. Needs torch.

`fpexplorer train --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT]` calls
`launch`: it checks the arguments (one clear line and exit status 2 for what cannot start:
more ranks than the machine has cores or GPUs, a port in use, an endpoint that does not
resolve or does not answer within `--rdzv-timeout`), then starts the ranks with
torch.distributed's own elastic launcher (`elastic_launch`, what `torchrun` runs: c10d
rendezvous, no restarts). Each rank runs `fpexplorer train` again without the launch
options (`entry.self_command()`, so a frozen bundle starts itself) and finds itself a rank
from torchrun's environment (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`).

A rank (`start_rank`): joins the process group (gloo on CPU, nccl on CUDA with one GPU per
local rank; collectives time out after `COLLECTIVE_TIMEOUT_S`), takes every world-th batch
of the task's stream (`shard_batches`: disjoint batches, a global batch of world x
batch size), wraps the model (`wrap_model`: DDP, or FSDP2 `fully_shard` on every module
that owns parameters and then the whole model, with `ShardedGradScaler` for fp16), and
writes its log through `RankLogs` (see `monitor.ranks`: one log per rank, the merged log
on rank 0). The job hands the wrapped model to `AmpMonitor`, which puts the check of each
rank's own gradients before communication in (`monitor.reduction`), as it does in a
user's own torchrun loop.

Losing a rank: torchrun's agent sees the process end and stops the others (SIGTERM, which
the job turns into "stop after this step"); a rank waiting in a collective on the lost one
gets gloo's error at once (the peer's socket closes). Every survivor then ends its log
through the roll-call of `RankLogs`, which names the lost rank, and the launcher prints
which rank ended how, from torchrun's own failure report.

Test hook: `FPEXPLORER_TEST_FAULT` = `nonfinite:RANK:STEPS:LAYER` makes the activation
gradient arriving at module LAYER infinite on rank RANK at each of STEPS (`2` or `2,4`: the
overflow starts there and only there); `weightgrad:RANK:STEPS:LAYER` makes only LAYER's
first parameter gradient infinite (its activation gradients stay finite: the overflow of
a weight-gradient product); `kill:RANK:STEP` kills rank RANK with SIGKILL at the start of
step STEP. Used by tests/training/test_distributed*.py.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import ipaddress
import itertools
import os
import signal
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fpexplorer.training.config import LAUNCH_OPTIONS, TrainConfig, launched_world_size
from fpexplorer.training.monitor.ranks import RDZV_ENDPOINT_ENV, RankContext, rendezvous_store
from fpexplorer.training.scaler_rules import ScalerSettings

COLLECTIVE_TIMEOUT_S = 60
FAULT_ENV = "FPEXPLORER_TEST_FAULT"


class LaunchError(Exception):
    """The ranks cannot be started (bad distributed arguments): exit status 2."""


# -- launching --------------------------------------------------------------------------


def max_local_ranks(device: str) -> tuple[int, str]:
    """The most ranks one node can start, and what bounds it."""
    wants_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if wants_cuda:
        count = torch.cuda.device_count()
        return count, f"this machine has {count} CUDA device(s), one per rank"
    # A CPU rank is a process with one torch thread: beyond twice the cores the ranks
    # mostly wait for each other (and a typo such as 100000 must not start that many).
    cores = os.cpu_count() or 1
    return 2 * cores, f"this machine has {cores} CPU core(s), at most 2 CPU ranks per core"


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def _is_local(host: str) -> bool:
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_launch(config: TrainConfig) -> None:
    """Raise LaunchError (one line) for distributed arguments that cannot start."""
    bound, reason = max_local_ranks(config.device)
    if config.nproc_per_node > bound:
        raise LaunchError(
            f"--nproc-per-node {config.nproc_per_node} is more than this machine can start: "
            f"{reason} (at most {bound})"
        )
    if launched_world_size() > 1:
        raise LaunchError("this process is already a rank of a torchrun job")
    if config.rdzv_endpoint is None:
        return
    host, port = _split_endpoint(config.rdzv_endpoint)
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise LaunchError(
            f"--rdzv-endpoint {config.rdzv_endpoint}: cannot resolve {host!r} ({error})"
        ) from None
    if config.nnodes == 1 and _is_local(host):
        # One node hosts its own rendezvous there: a port someone else holds would leave
        # torchrun talking to a stranger until the timeout. (Probed in the address's own
        # family: [::1]:PORT is IPv6.)
        family, _, _, _, address = addresses[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(address)
            except OSError as error:
                raise LaunchError(
                    f"--rdzv-endpoint {config.rdzv_endpoint}: port {port} is in use "
                    f"({error.strerror or error}); choose a free port"
                ) from None


def launch_out_path(config: TrainConfig) -> Path:
    """The merged log of a launched run: `--out`, or `run.jsonl` in a new run directory
    (`run-TASK-PRECISION-TIME/`, beside single runs) that also holds the rank logs."""
    if config.out:
        return Path(config.out)
    from fpexplorer.training.job import default_out_path

    base = default_out_path(config).with_suffix("")
    for counter in itertools.count(1):
        folder = base if counter == 1 else base.with_name(f"{base.name}-{counter}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        return folder / "run.jsonl"
    raise AssertionError("unreachable")


def _describe_failure(rank: int, failure: Any) -> str:
    code = int(getattr(failure, "exitcode", 1))
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"rank {rank} was killed by {signal.Signals(-code).name}"
        return f"rank {rank} was killed by signal {-code}"
    return f"rank {rank} exited with status {code}"


def launch(config: TrainConfig) -> int:
    """Run the job on several ranks through torch.distributed's elastic launcher. Exit
    status: 0 every rank completed or stopped, 1 a rank failed or was lost. Raises
    LaunchError for arguments that cannot start (the CLI's exit status 2)."""
    from torch.distributed.launcher.api import LaunchConfig

    from fpexplorer.entry import self_command

    check_launch(config)
    try:
        path = launch_out_path(config)
    except OSError as error:
        raise LaunchError(f"cannot make the run directory: {error.strerror or error}") from None
    if not path.parent.is_dir():
        raise LaunchError(f"cannot write {path}: there is no folder {path.parent}")
    rank_argv = config.rank_config().replace(out=str(path)).to_argv(omit=LAUNCH_OPTIONS)
    command = [*self_command(), "train", *rank_argv]
    endpoint = config.rdzv_endpoint or "localhost:0"  # one node: a free port, as --standalone
    launch_config = LaunchConfig(
        min_nodes=config.nnodes,
        max_nodes=config.nnodes,
        nproc_per_node=config.nproc_per_node,
        # Every node of a multi-node job must name the same run; one node needs no name.
        run_id="fpexplorer" if config.rdzv_endpoint else str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint=endpoint,
        rdzv_configs={
            "join_timeout": config.rdzv_timeout,
            "read_timeout": config.rdzv_timeout,
            "last_call_timeout": 1,
        },
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    ranks = f"{config.world_size} ranks"
    # The ranks (this process's children) may ask it to stop them all (`stop_launcher`).
    # And their headers state the endpoint the nodes met at, as given.
    told = {LAUNCHER_ENV: str(os.getpid()), RDZV_ENDPOINT_ENV: config.rdzv_endpoint or ""}
    previous = {name: os.environ.get(name) for name in told}
    os.environ.update(told)
    try:
        return _run_launch(launch_config, command, path, ranks, endpoint, config)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        # A run stopped before any rank began its log leaves no empty run folder behind.
        if not config.out:
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when empty


LAUNCHER_ENV = "FPEXPLORER_LAUNCHER_PID"


def stop_launcher() -> bool:
    """Ask the launcher that started this rank (`fpexplorer train --nproc-per-node`, whose
    torch elastic agent is this process's parent) to stop every rank, as the panel's Stop
    does: one SIGTERM, which the agent passes on to each rank. Rank 0 does so when the
    reader of its `--stream` records went away (the window that started the job closed or
    was killed): stopping alone would leave its peers waiting in a collective. Nothing
    happens under another launcher (a user's own torchrun). Returns whether it asked."""
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if not launcher.isdigit() or int(launcher) != os.getppid():
        return False
    try:
        os.kill(int(launcher), signal.SIGTERM)
    except OSError:  # gone already
        return False
    return True


def _run_launch(
    launch_config: Any, command: list[str], path: Path, ranks: str, endpoint: str,
    config: TrainConfig,
) -> int:  # fmt: skip
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    try:
        elastic_launch(launch_config, entrypoint=command[0])(*command[1:])
    except ChildFailedError as error:
        lost = "; ".join(_describe_failure(rank, failure)
                         for rank, failure in sorted(error.failures.items()))  # fmt: skip
        print(f"fpexplorer train: error: {lost} ({ranks}); run logs: {_logs_text(path)}",
              file=sys.stderr)  # fmt: skip
        # Every rank refused to start (each said why, in one line): a usage error.
        codes = {int(getattr(failure, "exitcode", 1)) for failure in error.failures.values()}
        return 2 if codes == {2} else 1
    except SignalException as error:
        # Stopped (the panel's Stop, Ctrl-C): torchrun's agent has told every rank to stop
        # (SIGTERM); each ended its log with its `end` record.
        name = signal.Signals(error.sigval).name
        print(f"fpexplorer train: stopped by {name} ({ranks}); run logs: {_logs_text(path)}",
              file=sys.stderr)  # fmt: skip
        return 0
    except RendezvousError as error:
        text = " ".join(str(error).split()) or type(error).__name__
        raise LaunchError(
            f"the rendezvous at {endpoint} did not complete within {config.rdzv_timeout} s "
            f"({config.nnodes} node(s) expected): {text}"
        ) from None
    print(f"fpexplorer train: {ranks} ended; run logs: {_logs_text(path)}", file=sys.stderr)
    return 0


def _logs_text(path: Path) -> str:
    """Where the run's logs are, as far as this node can see (a rank stopped while it
    started, before it joined the process group, wrote none)."""
    suffix = path.suffix or ".jsonl"
    written = sorted(path.parent.glob(f"{glob.escape(path.stem)}.rank-*{suffix}"))
    if path.is_file():
        return f"{path} (merged) and {path.stem}.rank-K{suffix} beside it"
    if written:
        return f"no merged log; in {path.parent}: {', '.join(item.name for item in written)}"
    return "none (stopped before any rank began its log)"


# -- one rank ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankSetup:
    """A rank of a launched job."""

    context: RankContext
    parallel: str  # "ddp" | "fsdp"
    device: torch.device


def start_rank(config: TrainConfig, device: torch.device) -> RankSetup | None:
    """Join the process group when torchrun started this process; None otherwise."""
    if launched_world_size() < 2:
        return None
    distributed = torch.distributed
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not distributed.is_initialized():
        distributed.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
        )
    context = RankContext.current()
    if context is None:
        return None
    return RankSetup(context, config.parallel or "ddp", device)


# How long a rank that completed waits at the end for the others to complete too.
END_BARRIER_S = 10


def end_rank(*, wait_for_peers: bool = False) -> None:
    """Leave the process group (a lost peer must not make this raise). A rank that
    completed first meets the others at a barrier (gloo's monitored barrier, bounded by
    END_BARRIER_S): a rank torn down while a peer still talks to it (an other node's
    last collective, its process group's teardown) was seen to abort at exit."""
    distributed = torch.distributed
    with contextlib.suppress(Exception):
        if not distributed.is_initialized():
            return
        if wait_for_peers:
            timeout = datetime.timedelta(seconds=END_BARRIER_S)
            if distributed.get_backend() == "gloo":
                distributed.monitored_barrier(timeout=timeout)
            else:
                distributed.barrier()
        distributed.destroy_process_group()


class StopAgreement:
    """Makes the ranks of a job stop before the same step. A stop (Ctrl-C, the panel's
    Stop, torchrun stopping the others when one is lost) reaches the ranks a moment apart:
    a rank that sees it one step later than a peer is already in that step's collectives,
    and would wait there for the peer that stopped until that peer's process exits. So a
    rank that sees its stop posts the step in the rendezvous store, and goes on training
    until every rank has posted; all then stop before the step after the latest posted
    (each step has a collective of every rank, so the ranks are at most a step apart).
    No cost before a stop; a peer that never posts (its stop did not reach it) is waited
    for at most `STOP_AGREEMENT_S`."""

    def __init__(self, context: RankContext) -> None:
        self._context = context
        self._store: Any = None
        self._posted_at: float | None = None
        self._keys = [f"{_STOP_PREFIX}{rank}" for rank in range(context.world_size)]

    def stop_before(self, step: int) -> bool:
        """Whether this rank, whose stop was requested, stops before step `step`."""
        try:
            if self._posted_at is None:
                self._posted_at = time.monotonic()
                self._store = rendezvous_store()
                if self._store is None:
                    return True
                self._store.set(self._keys[self._context.rank], str(step))
            if self._store is None:
                return True
            if self._store.check(self._keys):
                # Not before the step after the latest posted: a rank that posted at
                # step k may have found its peers' posts missing and gone into step k;
                # every post was made before the collectives of its step, so one step
                # later every rank sees them all and stops at the same step.
                return step > max(int(self._store.get(key)) for key in self._keys)
        except (RuntimeError, ValueError, OSError):
            return True  # the store is gone: nothing to agree with
        return time.monotonic() - self._posted_at > STOP_AGREEMENT_S


STOP_AGREEMENT_S = 5.0
_STOP_PREFIX = "fpexplorer/job/stop-before/"


def shard_batches(
    batches: Iterator[tuple[Any, Any]], rank: int, world_size: int
) -> Iterator[tuple[Any, Any]]:
    """Rank `rank`'s share of a batch stream: batches rank, rank + world, ... (disjoint
    across ranks; every rank sees batches of the same shape)."""
    return itertools.islice(batches, rank, None, world_size)


def wrap_model(model: nn.Module, setup: RankSetup) -> nn.Module:
    """The module to train: DDP around the model, or the model with FSDP2 on each module
    that owns parameters and on the whole (`AmpMonitor` watches the same layers under the
    same names as in a single-process run, and puts its pre-communication check in)."""
    if setup.parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        owners = [
            module
            for name, module in model.named_modules()
            if name and next(module.parameters(recurse=False), None) is not None
        ]
        for module in owners:
            fully_shard(module)
        fully_shard(model)
        return model
    device_ids = [setup.device.index] if setup.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def make_sharded_scaler(settings: ScalerSettings, setup: RankSetup) -> Any:
    """The dynamic loss scaler of an FSDP rank: ShardedGradScaler, which all-reduces its
    found-inf flag across the shards (under DDP, torch's GradScaler already agrees: the
    gradients are averaged before it looks at them)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    # torch 2.13's ShardedGradScaler passes its own found-inf flag, shape (1,), to a DTensor
    # op, and DTensor warns about it on every rank of every fp16 run: nothing the user did
    # or can change, so it is not shown.
    warnings.filterwarnings(
        "ignore",
        message="Found a non-scalar tensor with numel=1 and ndim!=0",
        category=UserWarning,
        module="torch.distributed.tensor",
    )
    return ShardedGradScaler(
        setup.device.type,
        init_scale=settings.init_scale,
        growth_factor=settings.growth_factor,
        backoff_factor=settings.backoff_factor,
        growth_interval=settings.growth_interval,
    )


# -- the test hook ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # "nonfinite" | "weightgrad" | "kill"
    rank: int
    steps: frozenset[int]
    layer: str = ""


def fault_from_env() -> Fault | None:
    text = os.environ.get(FAULT_ENV, "")
    if not text:
        return None
    parts = text.split(":")
    with contextlib.suppress(ValueError):
        if parts[0] in ("nonfinite", "weightgrad", "kill") and len(parts) in (3, 4):
            steps = frozenset(int(step) for step in parts[2].split(","))
            if parts[0] != "kill" and len(parts) == 4:
                return Fault(parts[0], int(parts[1]), steps, parts[3])
            if parts[0] == "kill" and len(parts) == 3:
                return Fault("kill", int(parts[1]), steps)
    raise ValueError(
        f"{FAULT_ENV}={text!r}: use nonfinite:RANK:STEPS:LAYER, weightgrad:RANK:STEPS:LAYER "
        "or kill:RANK:STEP (STEPS: one step or several, 2,4)"
    )


class FaultInjector:
    """Applies `FPEXPLORER_TEST_FAULT` on its rank; `before_step(i)` at each step."""

    def __init__(self, fault: Fault, rank: int, model: nn.Module) -> None:
        self.fault = fault if fault.rank == rank else None
        self._armed = False
        self._hooked: list[torch.Tensor] = []
        if self.fault is not None and self.fault.kind != "kill":
            modules = dict(model.named_modules())
            if self.fault.layer not in modules:
                raise ValueError(f"{FAULT_ENV}: the model has no module {self.fault.layer!r}")
            module = modules[self.fault.layer]
            if self.fault.kind == "nonfinite":
                module.register_forward_hook(self._on_forward)
            else:
                # The module's first parameter gradient only: activations stay finite. The
                # tensor is taken at each forward: under FSDP2 autograd sees the unsharded
                # parameter that fully_shard puts in the module for the forward.
                module.register_forward_pre_hook(self._on_forward_pre)

    def before_step(self, step: int) -> None:
        fault = self.fault
        if fault is None or step not in fault.steps:
            self._armed = False
            return
        if fault.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        self._armed = True

    def _on_forward_pre(self, module: nn.Module, inputs: Any) -> None:
        param = next(module.parameters())
        if not any(param is hooked for hooked in self._hooked):  # FSDP2 reuses its tensor
            self._hooked.append(param)
            param.register_hook(self._on_weight_grad)  # type: ignore[no-untyped-call]

    def _on_weight_grad(self, grad: torch.Tensor) -> torch.Tensor | None:
        return _infinite(grad) if self._armed else None

    def _on_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._armed and isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(_infinite)  # type: ignore[no-untyped-call]


def _infinite(grad: torch.Tensor) -> torch.Tensor:
    return torch.full_like(grad, float("inf"))
