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
on rank 0).

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
import functools
import glob
import ipaddress
import itertools
import math
import os
import signal
import socket
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fpexplorer.training.config import LAUNCH_OPTIONS, TrainConfig, launched_world_size
from fpexplorer.training.monitor.ranks import RankContext
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
    try:
        return _run_launch(launch_config, command, path, ranks, endpoint, config)
    finally:
        # A run stopped before any rank began its log leaves no empty run folder behind.
        if not config.out:
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when empty


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


def shard_batches(
    batches: Iterator[tuple[Any, Any]], rank: int, world_size: int
) -> Iterator[tuple[Any, Any]]:
    """Rank `rank`'s share of a batch stream: batches rank, rank + world, ... (disjoint
    across ranks; every rank sees batches of the same shape)."""
    return itertools.islice(batches, rank, None, world_size)


def wrap_model(model: nn.Module, setup: RankSetup) -> tuple[nn.Module, nn.Module]:
    """(the module to train, the module the monitor watches: the same layers, names as in
    a single-process run)."""
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
        return model, model
    device_ids = [setup.device.index] if setup.device.type == "cuda" else None
    wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    return wrapped, model


def check_before_reduction(model: nn.Module, watched: nn.Module) -> PreReductionCheck | None:
    """Watch this rank's own parameter gradients before they are communicated: a DDP
    communication hook on a DDP model, a custom reduce-scatter on each FSDP2 module of a
    `fully_shard` model; None for a model that is neither."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        check = PreReductionCheck(watched)
        # DDP checks a hook's annotations against the real types, which this module's
        # postponed (string) annotations are not: register it through an unannotated lambda.
        model.register_comm_hook(None, lambda state, bucket: check.ddp_hook(state, bucket))
        return check
    from torch.distributed.fsdp import FSDPModule

    sharded = [module for module in model.modules() if isinstance(module, FSDPModule)]
    if not sharded:
        return None
    check = PreReductionCheck(watched)
    for module in sharded:
        params = _reduced_by(module, FSDPModule)
        if params:
            module.set_custom_reduce_scatter(check.fsdp_reduce_scatter(params))
    return check


def _reduced_by(module: nn.Module, fsdp_type: type) -> list[nn.Parameter]:
    """The parameters an FSDP2 module reduces: its own and its submodules', less those of
    the FSDP2 modules under it."""
    params = list(module.parameters(recurse=False))
    for child in module.children():
        if not isinstance(child, fsdp_type):
            params += _reduced_by(child, fsdp_type)
    return params


class PreReductionCheck:
    """Notes which of this rank's own parameter gradients are not finite before they are
    communicated, so that an overflow that starts in a weight-gradient product (finite
    activation gradients) is still traced to its rank: after the all-reduce (DDP) or the
    reduce-scatter (FSDP2) every rank holds the same non-finite sums.

    - DDP: a communication hook sees each bucket of this rank's gradients before DDP
      averages it (`register_comm_hook`; then the default all-reduce, unchanged): one flag
      per gradient.
    - FSDP2: `FSDPModule.set_custom_reduce_scatter` (public in torch 2.13) hands each
      module's reduce-scatter its input, this rank's unsharded gradients of that module
      packed into one buffer, before the collective: one flag per module (then
      `reduce_scatter_single`, what FSDP2's default does). A hook on the parameters would
      not do: during backward autograd sees FSDP2's unsharded parameters, not the sharded
      ones a hook can be registered on.

    The flags stay on the device and are read only when the monitor asks (exchange steps):
    no host synchronisation on a GPU. On a CPU a host read is free, so a flag is kept only
    when its buffer is not finite.
    """

    def __init__(self, watched: nn.Module) -> None:
        # The monitor's layer names: the module that owns each parameter ("" is the root).
        self._layer: dict[int, str] = {}
        for name, module in watched.named_modules():
            for param in module.parameters(recurse=False):
                self._layer.setdefault(id(param), name or type(module).__name__)
        self._order = {id(param): index for index, param in enumerate(watched.parameters())}
        # (for each flag: its order in forward and its layer), flags (True = finite)
        self._pending: list[tuple[list[tuple[int, str]], torch.Tensor]] = []

    def clear(self) -> None:
        """Forget the previous step's flags (call before each step)."""
        self._pending = []

    def _key(self, param: torch.Tensor) -> tuple[int, str]:
        return self._order.get(id(param), -1), self._layer.get(id(param), "")

    def ddp_hook(self, state: Any, bucket: Any) -> Any:
        """The DDP communication hook: flag, then DDP's default all-reduce."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        gradients = bucket.gradients()
        if gradients:
            keys = [self._key(param) for param in bucket.parameters()]
            buffer = bucket.buffer()
            if buffer.device.type == "cpu":
                if not bool(buffer.isfinite().all()):
                    flags = torch.stack([gradient.isfinite().all() for gradient in gradients])
                    self._pending.append((keys, flags))
            else:
                # max |g| of every gradient in one fused call (inf and NaN survive a max;
                # a sum of squares could overflow on finite values).
                peaks = torch._foreach_norm(gradients, math.inf)
                self._pending.append((keys, torch.stack(peaks).isfinite()))
        return allreduce_hook(state, bucket)

    def note_buffer(self, key: tuple[int, str], buffer: torch.Tensor) -> None:
        """Flag one buffer of this rank's gradients (an FSDP2 reduce-scatter input)."""
        finite = buffer.isfinite().all().reshape(1)
        if buffer.device.type != "cpu" or not bool(finite):
            self._pending.append(([key], finite))

    def fsdp_reduce_scatter(self, params: list[nn.Parameter]) -> Any:
        """The reduce-scatter to set on an FSDP2 module that reduces `params`; its flag
        names the layer of the last of them in forward order (wrap_model shards each layer
        alone, so: that layer)."""
        return _checked_reduce_scatter_class()(self, max(self._key(param) for param in params))

    def first_nonfinite_layer(self) -> str | None:
        """The layer backward reached first among those whose gradients went non-finite on
        this rank before communication (the last in forward order), or None."""
        last: tuple[int, str] | None = None
        for keys, flags in self._pending:
            for (order, layer), finite in zip(keys, flags.tolist(), strict=True):
                if not finite and layer and (last is None or order > last[0]):
                    last = (order, layer)
        return last[1] if last is not None else None


@functools.cache
def _checked_reduce_scatter_class() -> type:
    """FSDP2's reduce-scatter with PreReductionCheck looking at its input first (a class
    made on first use: importing FSDP2 costs a single-process job time for nothing)."""
    # `FSDPModule.set_custom_reduce_scatter` is public; the interface it takes,
    # `ReduceScatter` (allocate + __call__), is documented there but torch 2.13 exports it
    # from no public module.
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class CheckedReduceScatter(ReduceScatter):
        def __init__(self, check: PreReductionCheck, key: tuple[int, str]) -> None:
            self._check = check
            self._key = key

        def allocate(
            self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
        ) -> torch.Tensor:
            return torch.empty(*size, dtype=dtype, device=device)

        def __call__(
            self,
            output_tensor: torch.Tensor,
            input_tensor: torch.Tensor,
            group: Any,
            op: Any,
            async_op: bool = False,
        ) -> Any:
            self._check.note_buffer(self._key, input_tensor)
            return torch.distributed.reduce_scatter_single(
                output_tensor, input_tensor, op=op, group=group, async_op=async_op
            )

    return CheckedReduceScatter


def make_sharded_scaler(settings: ScalerSettings, setup: RankSetup) -> Any:
    """The dynamic loss scaler of an FSDP rank: ShardedGradScaler, which all-reduces its
    found-inf flag across the shards (under DDP, torch's GradScaler already agrees: the
    gradients are averaged before it looks at them)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

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
