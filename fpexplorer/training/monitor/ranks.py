"""Several ranks (torch.distributed): one log per rank, a merged log on rank 0. Needs torch.

Under an initialised process group `AmpMonitor` writes through `RankLogs` instead of one
`RunWriter`:

- every rank writes its own log, `RUN.rank-K.jsonl` beside `RUN.jsonl` (its header's
  `ranks` names the rank, the world size and the host);
- rank 0 also writes the merged log `RUN.jsonl`, which every single-run reader (the panel,
  `fpexplorer runs`) reads as it reads any run.

**When ranks talk.** On an *exchange step*, a statistics step of the fixed cadence (step %
stats_every == 0) or a skipped step, every rank adds its figures to one float64 tensor and
the ranks sum it with one `all_reduce`: both histograms (summed over ranks), then one slot
per rank (its loss, scale, skipped flag, steps/s, gradient norm, where it went non-finite,
and four figures per layer; the other ranks add zeros there, so the sum is a gather). Both
conditions are the same on every rank, so every rank joins the same collectives: the
cadence is fixed (a time budget is measured per rank, so under a process group the monitor
uses `stats_every`), and a skipped step is skipped everywhere (DDP averages the gradients
before GradScaler looks at them, and `ShardedGradScaler` all-reduces its found-inf flag).
Other steps cost no communication: the merged log carries rank 0's record there.

**Merged figures.** Histograms: summed over ranks (under DDP every rank holds the same
averaged parameter gradients, so the merged parameter-gradient histogram counts each of
them once per rank; its shares are those of one rank). Non-finite flags: any rank (MAX).
Loss: the mean over ranks (the loss of the global batch: every rank's batch has the same
size). Loss scale: rank 0's, checked equal on every rank (`ranks.scale_mismatch`).
Gradient norms: sqrt(sum of squares / replicas): replicas = the world size under DDP
(every rank holds the whole averaged gradient), 1 under FSDP (each holds a shard).
Steps/s: the slowest rank's (the job moves at its pace). Layer amax: the largest;
underflow share: the mean (equal shapes). Lost updates, format shares, memory: rank 0's.

**Which rank went non-finite first.** The loss, the forward outputs and the activation
gradients a rank computes are its own: no gradient is communicated before them (DDP and
FSDP communicate parameter gradients). So a rank where one of them is not finite is where
the overflow started; the parameter gradients a rank holds after backward come from the
all-reduce (or the reduce-scatter) and cannot say where: the monitor's
`reduction.PreReductionCheck` (`local_origin` here) notes which of the rank's own
gradients were non-finite before they were communicated (a DDP communication hook per
bucket; under FSDP2 a custom reduce-scatter per sharded module, which sees the rank's
unsharded gradients), so an overflow that starts in a weight-gradient product is traced
too. `AmpMonitor` puts it into a DDP or FSDP2 model it is given, in `fpexplorer train` and
in a user's own torchrun loop alike. The merged step names those origin ranks, the lowest
of them (ranks run their backward at the same time: there is no first between them) and
its first layer: its first module with a non-finite output in forward order, else its
first non-finite activation gradient in backward order, else the layer whose own gradients
backward made non-finite first. A skipped step is an exchange step on every rank,
statistics step or not, and the pre-communication flags are taken on every step: the rule
names the rank on every skipped step (a model without the check,
`AmpMonitor(check_reduction=False)` or one whose DDP communication hook is the user's, is
named there only from a non-finite loss or, on statistics steps, its activations).

**Starting.** Every rank must make its monitor, with the same `stats_every`: a new
monitor posts its cadence in the process group's store and waits at most `JOIN_SECONDS`
for every other rank's, else raises RuntimeError naming the ranks (a monitor on rank 0
alone would otherwise wait in its first all_reduce for ever).

**Ending.** A run's end goes through the process group's store, not a collective (a lost
rank must not stall the others): each rank posts how it ended; rank 0, and any rank that
did not complete, wait at most `ROLL_CALL_SECONDS` for the others. A rank that posted
nothing by then is "lost" (killed, its host gone). The merged end lists every rank; a
rank's own end record names the lost ranks.

**A rank whose log cannot be written** warns once and goes on: it still joins every
exchange (`write` never raises), so the others never wait for it.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import math
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from fpexplorer.training.monitor.kernels import (
    BINADE_LO,
    CODES,
    INF_CODE,
    NAN_CODE,
    NUM_BINADES,
    ZERO_CODE,
    histogram_record,
)
from fpexplorer.training.records import (
    EndRecord,
    HeaderRecord,
    Histogram,
    RankEnd,
    RankInfo,
    RankStep,
    Record,
    StepRecord,
    StepStats,
)
from fpexplorer.training.runlog import RunWriter

# How long a rank waits, at the end, for the others to say how they ended.
ROLL_CALL_SECONDS = 5.0
# How long a rank's new monitor waits for every other rank's (their set-up differs).
JOIN_SECONDS = 60.0
# The cadence under a process group when the caller gave a time budget (see above).
DISTRIBUTED_STATS_EVERY = 10


def rank_log_path(path: str | os.PathLike[str], rank: int) -> Path:
    """`DIR/RUN.jsonl` -> `DIR/RUN.rank-K.jsonl`: rank K's own log beside the merged one."""
    path = Path(path)
    return path.with_name(f"{path.stem}.rank-{rank}{path.suffix or '.jsonl'}")


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: the local shard of an FSDP2 DTensor, else itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def is_sharded(model: nn.Module) -> bool:
    """True when the model's parameters are DTensor shards (FSDP2 `fully_shard`)."""
    return any(callable(getattr(p, "to_local", None)) for p in model.parameters())


def parallel_of(model: nn.Module) -> str | None:
    """How the ranks share `model`: "ddp" for DistributedDataParallel (compiled too),
    "fsdp" for FSDP2 `fully_shard` or an FSDP module, None for the user's own wrapping."""
    original = getattr(model, "_orig_mod", model)
    if isinstance(original, nn.parallel.DistributedDataParallel):
        return "ddp"
    if is_sharded(original):
        return "fsdp"
    # Importing FSDP takes seconds: a model can only be one if its module is loaded.
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is not None and any(
        isinstance(module, (fsdp.FullyShardedDataParallel, fsdp.FSDPModule))
        for module in original.modules()
    ):
        return "fsdp"
    return None


# `fpexplorer train --rdzv-endpoint`'s launcher tells its ranks the endpoint it was given
# (the environment torchrun's agent gives them names node 0's store, not that endpoint).
RDZV_ENDPOINT_ENV = "FPEXPLORER_RDZV_ENDPOINT"


def launch_settings(context: RankContext, parallel: str | None) -> dict[str, Any]:
    """The launch a rank belongs to, from torchrun's environment, as the header's config
    states it (the fields of `fpexplorer train --nproc-per-node ... --nnodes ...
    --rdzv-endpoint ...`; `parallel` when known).

    torchrun's agent gives each rank LOCAL_WORLD_SIZE (ranks on its node) and
    GROUP_WORLD_SIZE (nodes, agents). The endpoint is stated only where it is known as
    given: `fpexplorer train --rdzv-endpoint`'s launcher tells its ranks. A user's torchrun
    states none: MASTER_ADDR/MASTER_PORT, the one address a rank gets, is the store its
    process group starts from; with the c10d rendezvous (torchrun's way onto several
    nodes) that is node 0's host name and a port free there, not the endpoint
    (`--rdzv-endpoint 127.0.0.1:29413` gave ranks localhost:42165), and a rank cannot tell
    c10d from the static rendezvous, where the two are the same. One node states none: a
    run on one node takes any free port (as `--standalone`)."""
    world = context.world_size
    per_node = _env_int("LOCAL_WORLD_SIZE") or world
    nodes = _env_int("GROUP_WORLD_SIZE") or max(world // max(per_node, 1), 1)
    settings: dict[str, Any] = {"nproc_per_node": per_node, "nnodes": nodes}
    given = os.environ.get(RDZV_ENDPOINT_ENV)
    if nodes > 1 and given:
        settings["rdzv_endpoint"] = given  # `fpexplorer train --rdzv-endpoint`'s own
    if parallel is not None:
        settings["parallel"] = parallel
    return settings


def _env_int(name: str) -> int | None:
    """A positive whole number torchrun put in the environment; None when absent or not."""
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True, slots=True)
class RankContext:
    """This process's place in an initialised torch.distributed process group."""

    rank: int
    world_size: int
    local_rank: int
    host: str

    @classmethod
    def current(cls) -> RankContext | None:
        """The process group's rank and size; None without one (or with a single rank)."""
        distributed = torch.distributed
        if not (distributed.is_available() and distributed.is_initialized()):
            return None
        world = distributed.get_world_size()
        if world < 2:
            return None
        return cls(
            rank=distributed.get_rank(),
            world_size=world,
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            host=socket.gethostname(),
        )


# Per-rank slot layout: these scalars, then `_LAYER_FIELDS` per layer.
_SCALARS = ("loss", "scale", "skipped", "steps_per_s", "grad_norm", "has_stats",
            "origin", "origin_layer", "forward_layer")  # fmt: skip
_LAYER_FIELDS = ("amax", "nonfinite", "underflow_share", "grad_norm")
_NO_LAYER = -1.0

_instances = itertools.count()  # each rank makes its monitors in the same order


class RankLogs:
    """A rank's log and, on rank 0, the merged log, behind RunWriter's `write`/`close`.

    Args:
        path: the merged log's path (`RUN.jsonl`); the rank's own is `rank_log_path`.
        context: this rank (`RankContext.current()`).
        stats_every: the monitor's fixed cadence (0: statistics only on skipped steps).
        replicas: how many ranks hold each gradient (world size under DDP, 1 under FSDP).
        parallel: "ddp", "fsdp" or None (the header says it).
        rank_writer / merged_writer: writers made by the caller (the job passes its own,
            with the live channel on the merged one); made here from `path` when None.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        context: RankContext,
        *,
        stats_every: int,
        replicas: int,
        parallel: str | None = None,
        rank_writer: RunWriter | None = None,
        merged_writer: RunWriter | None = None,
    ) -> None:
        self.context = context
        self.stats_every = stats_every
        self.replicas = max(replicas, 1)
        self.parallel = parallel
        self.path = rank_log_path(path, context.rank)
        self.merged_path = Path(path)
        self.write_error: OSError | None = None
        # Where this rank's own parameter gradients went non-finite before communication
        # (the monitor's `reduction.PreReductionCheck`); asked on exchange steps.
        self.local_origin: Callable[[], str | None] | None = None
        self._sequence = next(_instances)
        self._join()
        self._layer_index: dict[str, int] = {}
        self._layer_names: tuple[str, ...] = ()
        self._closed = False
        self._rank_writer = rank_writer or self._open(self.path)
        self._merged_writer: RunWriter | None = None
        if context.rank == 0:
            self._merged_writer = merged_writer or self._open(self.merged_path)

    def _join(self) -> None:
        """Wait until every rank has made its monitor, with the same cadence, else raise
        RuntimeError naming the ranks. The exchanges are collectives: a monitor on rank 0
        alone (or cadences that differ) would wait in an all_reduce no other rank joins,
        or meet DDP's, for ever. Through the store, as the end is: no collective."""
        rank, world = self.context.rank, self.context.world_size
        store = rendezvous_store()
        if store is None:
            return
        prefix = f"fpexplorer/monitor-{self._sequence}/join/"
        keys = [prefix + str(other) for other in range(world)]
        try:
            store.set(keys[rank], str(self.stats_every))
            deadline = time.monotonic() + JOIN_SECONDS
            while not store.check(keys) and time.monotonic() < deadline:
                time.sleep(0.05)
            missing = [other for other in range(world) if not store.check([keys[other]])]
            cadences = [] if missing else [int(store.get(key)) for key in keys]
        except (RuntimeError, ValueError, OSError):
            return  # the store itself is gone: the collectives will say so
        if missing:
            raise RuntimeError(
                f"AmpMonitor: {_ranks_text(missing)} made no AmpMonitor within "
                f"{JOIN_SECONDS:g} s of rank {rank}'s; under torch.distributed make it on "
                "every rank, with the same stats_every (each writes its own log, rank 0 "
                "the merged one too)"
            )
        if len(set(cadences)) > 1:
            given = ", ".join(f"rank {other} {every}" for other, every in enumerate(cadences))
            raise RuntimeError(
                f"AmpMonitor: the ranks' monitors were made with different stats_every "
                f"({given}); give every rank the same (their exchanges must meet)"
            )

    # -- RunWriter's interface -----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, record: Record | Mapping[str, Any]) -> None:
        """Write a record to this rank's log (and merge it on rank 0). Never raises
        OSError: a rank must join every exchange even when its log is lost."""
        if isinstance(record, HeaderRecord):
            self._on_header(record)
        elif isinstance(record, StepRecord):
            self._on_step(record)
        elif isinstance(record, EndRecord):
            self._on_end(record)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for writer in (self._rank_writer, self._merged_writer):
            if writer is not None and not writer.closed:
                try:
                    writer.close()
                except OSError as error:
                    self._failed(writer, error)

    # -- writing -------------------------------------------------------------------------

    def _open(self, path: Path) -> RunWriter | None:
        try:
            return RunWriter(path)
        except OSError as error:
            self._warn(path, error)
            return None

    def _warn(self, path: Path, error: OSError) -> None:
        if self.write_error is None:
            self.write_error = error
        warnings.warn(
            f"AmpMonitor: cannot write the run log {path} (rank {self.context.rank}): "
            f"{error.strerror or error}; this log stops, training and the other logs go on",
            RuntimeWarning,
            stacklevel=4,
        )

    def _failed(self, writer: RunWriter, error: OSError) -> None:
        if writer is self._rank_writer:
            self._rank_writer = None
        else:
            self._merged_writer = None
        self._warn(writer.path, error)

    def _put(self, writer: RunWriter | None, record: Record) -> None:
        if writer is None:
            return
        try:
            writer.write(record)
        except OSError as error:
            self._failed(writer, error)

    # -- the three record types ----------------------------------------------------------

    def _rank_info(self, *, merged: bool) -> RankInfo:
        context = self.context
        return RankInfo(rank=context.rank, world_size=context.world_size, host=context.host,
                        local_rank=context.local_rank, parallel=self.parallel,
                        merged=merged)  # fmt: skip

    def _on_header(self, header: HeaderRecord) -> None:
        self._layer_names = header.model.layers
        self._layer_index = {name: index for index, name in enumerate(self._layer_names)}
        self._put(
            self._rank_writer, dataclasses.replace(header, ranks=self._rank_info(merged=False))
        )
        self._put(
            self._merged_writer, dataclasses.replace(header, ranks=self._rank_info(merged=True))
        )

    def exchanges(self, record: StepRecord) -> bool:
        """Whether this step's figures are exchanged: the same answer on every rank."""
        scheduled = self.stats_every > 0 and record.step % self.stats_every == 0
        return scheduled or record.skipped

    def _on_step(self, record: StepRecord) -> None:
        self._put(self._rank_writer, record)
        if not self.exchanges(record):
            self._put(self._merged_writer, record)
            return
        summed = self._exchange(record)
        if self.context.rank == 0:
            self._put(self._merged_writer, self._merge(record, summed))

    def _on_end(self, end: EndRecord) -> None:
        ends = self._roll_call(end)
        lost = [item.rank for item in ends if item.status == "lost"]
        own = end
        if lost and end.status != "completed":
            names = ", ".join(str(rank) for rank in lost)
            # Lost, or stuck (in a collective the failure of this rank left unfinished).
            cause = f"rank {names} lost" if len(lost) == 1 else f"ranks {names} lost"
            cause += f" (no end record within {ROLL_CALL_SECONDS:g} s)"
            own = dataclasses.replace(
                end, status="failed", error=f"{cause}; here: {end.error}" if end.error else cause
            )
            # The merged end lists this rank as its own log ends it: a rank stopped by its
            # launcher (torchrun's agent stops the others when one dies) before it saw the
            # loss itself was listed "stopped" there and "failed" in its own log.
            ends = tuple(
                dataclasses.replace(item, status=own.status, error=own.error)
                if item.rank == self.context.rank else item
                for item in ends
            )  # fmt: skip
        self._put(self._rank_writer, own)
        if self.context.rank == 0:
            self._put(self._merged_writer, _merged_end(own, ends))

    # -- the exchange --------------------------------------------------------------------

    def _slot(self, record: StepRecord) -> npt.NDArray[np.float64]:
        """This rank's figures, laid out as `_SCALARS` then `_LAYER_FIELDS` per layer."""
        layers = len(self._layer_names)
        slot = np.zeros(len(_SCALARS) + len(_LAYER_FIELDS) * layers)
        origin, origin_layer, forward_layer = self._origin(record)
        scalars = dict(
            loss=record.loss, scale=record.scale, skipped=float(record.skipped),
            steps_per_s=record.steps_per_s, grad_norm=record.grad_norm,
            has_stats=float(record.stats is not None), origin=float(origin),
            origin_layer=origin_layer, forward_layer=forward_layer,
        )  # fmt: skip
        slot[: len(_SCALARS)] = [scalars[name] for name in _SCALARS]
        per_layer = slot[len(_SCALARS) :].reshape(layers, len(_LAYER_FIELDS))
        for stats in record.layers:
            index = self._layer_index.get(stats.name)
            if index is not None:
                norm = stats.grad_norm if stats.grad_norm is not None else 0.0
                per_layer[index] = (stats.amax, float(stats.nonfinite), stats.underflow_share, norm)
        return slot

    def _origin(self, record: StepRecord) -> tuple[bool, float, float]:
        """(did it start here, layer index or -1, forward layer index or -1)."""
        forward = record.first_nonfinite_forward
        forward_layer = float(self._layer_index.get(forward, _NO_LAYER)) if forward else _NO_LAYER
        activations = any(not math.isfinite(stats.amax) for stats in record.layers)
        origin = not math.isfinite(record.loss) or forward is not None or activations
        layer = (
            forward if forward is not None else (record.first_nonfinite if activations else None)
        )
        if not origin and self.local_origin is not None:
            layer = self.local_origin()  # a weight-gradient product overflowed here
            origin = layer is not None
        layer_at = float(self._layer_index.get(layer, _NO_LAYER)) if layer else _NO_LAYER
        return origin, layer_at, forward_layer

    def _exchange(self, record: StepRecord) -> npt.NDArray[np.float64]:
        """The one all-reduce of an exchange step: summed histograms, then the slots."""
        world, rank = self.context.world_size, self.context.rank
        slot = self._slot(record)
        packed = np.zeros(2 * CODES + world * slot.size)
        packed[:CODES] = _dense(record.grad_hist)
        packed[CODES : 2 * CODES] = _dense(record.act_hist)
        start = 2 * CODES + rank * slot.size
        packed[start : start + slot.size] = slot
        tensor = torch.from_numpy(packed)
        if torch.distributed.get_backend() == "nccl":
            tensor = tensor.cuda()
        torch.distributed.all_reduce(tensor)
        summed: npt.NDArray[np.float64] = tensor.cpu().numpy()
        return summed

    def _merge(self, own: StepRecord, summed: npt.NDArray[np.float64]) -> StepRecord:
        world = self.context.world_size
        slots = summed[2 * CODES :].reshape(world, -1)
        scalars = {name: slots[:, index] for index, name in enumerate(_SCALARS)}
        layers = slots[:, len(_SCALARS) :].reshape(
            world, len(self._layer_names), len(_LAYER_FIELDS)
        )
        origins = [int(rank) for rank in np.flatnonzero(scalars["origin"] > 0)]
        first_rank = origins[0] if origins else None
        first_layer: str | None = None
        if first_rank is not None:
            at = int(scalars["origin_layer"][first_rank])
            first_layer = self._layer_names[at] if at >= 0 else None
        scales = scalars["scale"]
        step_ranks = RankStep(
            losses=tuple(float(v) for v in scalars["loss"]),
            scales=tuple(float(v) for v in scales),
            skipped=tuple(bool(v) for v in scalars["skipped"]),
            steps_per_s=tuple(float(v) for v in scalars["steps_per_s"]),
            scale_mismatch=bool(np.any(scales != scales[0])),
            nonfinite_ranks=tuple(origins),
            first_nonfinite_rank=first_rank,
            first_nonfinite_layer=first_layer,
        )
        stats = None
        if own.stats is not None and bool(np.all(scalars["has_stats"] > 0)):
            stats = self._merged_stats(own.stats, summed, layers, first_rank, first_layer, scalars)
        with np.errstate(invalid="ignore"):
            grad_norm = math.sqrt(float(np.sum(scalars["grad_norm"] ** 2)) / self.replicas)
        return dataclasses.replace(
            own,
            loss=float(np.mean(scalars["loss"])),
            skipped=bool(np.any(scalars["skipped"] > 0)),
            grad_norm=grad_norm,
            steps_per_s=float(np.min(scalars["steps_per_s"])),
            stats=stats if stats is not None else own.stats,
            ranks=step_ranks,
        )

    def _merged_stats(
        self,
        own: StepStats,
        summed: npt.NDArray[np.float64],
        layers: npt.NDArray[np.float64],
        first_rank: int | None,
        first_layer: str | None,
        scalars: Mapping[str, npt.NDArray[np.float64]],
    ) -> StepStats:
        grad_hist = histogram_record(summed[:CODES]) if own.grad_hist is not None else None
        act_hist = None
        act_zero_share = own.act_zero_share
        if own.act_hist is not None:
            act_hist = histogram_record(summed[CODES : 2 * CODES], own.act_hist.dtype)
            act_zero_share = act_hist.zero / act_hist.total if act_hist.total else 0.0
        merged_layers = []
        for stats in own.layers:
            at = self._layer_index.get(stats.name)
            if at is None:
                merged_layers.append(stats)
                continue
            amax, nonfinite, underflow, norms = (layers[:, at, k] for k in range(4))
            peak = float(np.max(amax)) if not np.any(np.isnan(amax)) else math.nan
            norm = None
            if stats.grad_norm is not None:
                with np.errstate(invalid="ignore"):
                    norm = math.sqrt(float(np.sum(norms**2)) / self.replicas)
            merged_layers.append(
                dataclasses.replace(
                    stats,
                    amax=peak,
                    headroom_log2=(math.log2(65504.0 / peak)
                                   if peak > 0 and math.isfinite(peak) else None),
                    underflow_share=float(np.mean(underflow)),
                    nonfinite=bool(np.any(nonfinite > 0)),
                    grad_norm=norm,
                )
            )  # fmt: skip
        forward = own.first_nonfinite_forward
        if first_rank is not None:
            at = int(scalars["forward_layer"][first_rank])
            forward = self._layer_names[at] if at >= 0 else None
        return dataclasses.replace(
            own,
            grad_hist=grad_hist,
            act_hist=act_hist,
            act_zero_share=act_zero_share,
            layers=tuple(merged_layers),
            first_nonfinite=first_layer if first_layer is not None else own.first_nonfinite,
            first_nonfinite_forward=forward,
        )

    # -- the end -------------------------------------------------------------------------

    def _roll_call(self, end: EndRecord) -> tuple[RankEnd, ...]:
        """Post how this rank ended and, on rank 0 or when this rank did not complete,
        wait up to ROLL_CALL_SECONDS for the others' (a rank that never posts is lost)."""
        rank, world = self.context.rank, self.context.world_size
        mine = RankEnd(rank=rank, status=end.status, error=end.error, steps=end.steps,
                       ended_at=time.time())  # fmt: skip
        store = rendezvous_store()
        if store is None:
            return (mine,)
        prefix = f"fpexplorer/monitor-{self._sequence}/end/"
        try:
            store.set(prefix + str(rank), json.dumps(mine.to_json()))
        except (RuntimeError, ValueError, OSError):
            return (mine,)
        if rank != 0 and end.status == "completed":
            return (mine,)
        found: dict[int, RankEnd] = {rank: mine}
        deadline = time.monotonic() + ROLL_CALL_SECONDS
        while len(found) < world:
            for other in range(world):
                if other in found:
                    continue
                try:
                    if store.check([prefix + str(other)]):
                        raw = json.loads(store.get(prefix + str(other)))
                        found[other] = RankEnd.from_json(raw)
                except (RuntimeError, ValueError, OSError):
                    break  # the store itself is gone (its host died): stop asking
            if len(found) == world or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return tuple(found.get(other, _lost(other)) for other in range(world))


def rendezvous_store() -> Any:
    """The store the ranks of a process group post in (how each ended, where they stop);
    None without one.

    torchrun (and any env:// initialisation) names it in the environment: the TCPStore
    at MASTER_ADDR:MASTER_PORT, hosted by torchrun's agent (TORCHELASTIC_USE_AGENT_STORE,
    a new store per restart) or by rank 0, and the process group's own store is a client
    of it; a new client through the public `torch.distributed.TCPStore` reaches the same
    keys. A group initialised from an init_method URL (tcp://, file://) or a Store
    object names none: torch 2.13 gives its store back only through the private
    `distributed_c10d._get_default_store()`, the fallback here.
    """
    distributed = torch.distributed
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    if host and port.isdigit():
        try:
            # Public and documented; torch's typing re-exports it without `as`.
            return distributed.TCPStore(  # type: ignore[attr-defined]
                host, int(port), is_master=False, wait_for_workers=False,
                timeout=datetime.timedelta(seconds=ROLL_CALL_SECONDS),
            )  # fmt: skip
        except (RuntimeError, ValueError, OSError):
            pass  # not the group's store after all (its host gone): the group's own
    try:
        return distributed.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def _ranks_text(ranks: list[int]) -> str:
    """'rank 1' or 'ranks 1, 3'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _lost(rank: int) -> RankEnd:
    return RankEnd(
        rank=rank,
        status="lost",
        error=f"no end record within {ROLL_CALL_SECONDS:g} s (killed, or its host is gone)",
    )


def _dense(histogram: Histogram | None) -> npt.NDArray[np.float64]:
    """A histogram record as CODES counts (the monitor's own layout), zeros when None."""
    dense = np.zeros(CODES)
    if histogram is None:
        return dense
    start = histogram.lo - BINADE_LO
    if histogram.counts and (start < 0 or start + len(histogram.counts) > NUM_BINADES):
        raise ValueError(f"histogram binades from {histogram.lo} lie outside the monitor's range")
    dense[start : start + len(histogram.counts)] = histogram.counts
    dense[ZERO_CODE] = histogram.zero
    dense[INF_CODE] = histogram.inf
    dense[NAN_CODE] = histogram.nan
    return dense


def _merged_end(own: EndRecord, ends: tuple[RankEnd, ...]) -> EndRecord:
    """The merged log's end: failed when any rank failed or was lost, else stopped when
    any stopped. The error names the lost ranks, else the rank that failed first (the
    others usually fail after it, in a collective that it left)."""
    statuses = {item.status for item in ends}
    if statuses & {"failed", "lost"}:
        status = "failed"
    elif "stopped" in statuses:
        status = "stopped"
    else:
        status = "completed"
    failing = sorted(
        (item for item in ends if item.status == "failed"),
        key=lambda item: (item.ended_at if item.ended_at is not None else math.inf, item.rank),
    )
    lost = [item for item in ends if item.status == "lost"]
    error = None
    if lost:
        error = "lost rank " + ", ".join(str(item.rank) for item in lost)
    elif failing:
        error = f"rank {failing[0].rank}: {failing[0].error}"
    return dataclasses.replace(own, status=status, error=error, ranks=ends)
