"""The AMP monitor: watches a training loop and writes the run log. Needs torch.

    with AmpMonitor(model, optimizer, scaler, out="run.jsonl") as monitor:
        for inputs, target in batches:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(inputs), target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)          # after the optimizer step, before the next zero_grad

Every step records the cheap signals: loss, loss scale, skipped or not, the scaler's growth
tracker, the gradient norm (one fused norm over the gradients, one host copy per step).
Statistics steps add the histograms and per-layer figures; by default they are taken as
often as keeps the monitor's whole cost (its own time on every step included) within about
4% of the wall time (`stats_budget=0.04`, see `cadence`: about 1.05x a bare loop in all),
and a step that was skipped, or whose loss or gradient norm is not finite, always gets the
parameter-gradient statistics at once (its activation gradients are gone by then) and full
statistics on the next step.

What it hooks (all removed on close; the module hooks are in place only for statistics
steps, since any forward hook sends every module call through PyTorch's slower path):
- a forward hook on every leaf module checks that its output is finite and hooks the
  output's autograd node (a tensor hook for a leaf output): it receives the activation
  gradient during backward, in its actual dtype and still multiplied by the loss scale (the
  paper's figure). Each is counted there and then (from its bit patterns), so backward can
  free it as usual; on a CPU, small ones (below 2**14 elements) are copied and counted
  together at the step.
- forward pre/post hooks on the model enter saved-tensor hooks that count the bytes autograd
  saves for backward (activations, and autocast's low-precision copies of the weights), and
  note the autocast dtype in use (the header's precision label when none is given). Two
  monitors on one model share one pair of them (autograd calls only the innermost pair).
- an optimizer step pre-hook. A skipped step is recognised from the scaler's own
  found-inf state: a plain or foreach optimizer is not called at all when the scaler
  skips; a fused one (`AdamW(fused=True)`) is always called and skips inside its kernel,
  so the hook keeps the `found_inf` tensor GradScaler hands it and reads it with the step's
  one host copy. The pre-hook also keeps the old weights for the lost-update statistic.
  Several optimizers (`AmpMonitor(model, [opt_g, opt_d], scaler)`): one pre-hook each.
  GradScaler decides per optimizer (each has its own found-inf flags; `update()` backs off
  when any has one), so the record's `skipped` means the scaler skipped any of them and
  `optimizer_outcomes` says which ("stepped", "skipped", "idle": not stepped this step, as
  a GAN's generator between its steps); each optimizer keeps its own parameters' old
  weights, and its gradients as they were, when it steps; the lost updates count the
  parameters of those that stepped.

A compiled model (`torch.compile(model)`, `model.compile()`, a compiled submodule, or a
compiled function that calls the model) gets no hook inside its graph: a hook there would
be traced into it, its host reads break the graph (or stop `fullgraph=True` with dynamo's
"Could not guard on data-dependent expression"), and adding and removing hooks per
statistics step recompiles. What is outside the graph is measured as usual: the loss, the
scale, skipped steps, the gradient norm and amax, the parameter gradients' statistics, the
lost updates, the autocast dtype (read by the model's pre-hook, traced or not), and, for a
`torch.compile(model)` wrapper (whose own hooks run eagerly), the bytes the compiled graph
saves for backward. A wrapper's leaf outputs
are also checked inside its graph (the first module with a non-finite output), by hooks
that stay installed (see `_install_graph_checks`). The activation gradients (histograms,
per-layer figures) are not measured: each statistics step says so in
`StepStats.activations_not_measured` ("compiled model"; "compiled model; forward outputs not
checked" where the leaf outputs are not checked either: `model.compile()`, a compiled
submodule, a compiled function calling the model).

A run log that cannot be written (disk full) never stops the training: the monitor warns
once, stops logging and goes on returning records.

Cost: a plain step adds the gradient norm (one fused kernel), a few scalar reads (one host
copy on an accelerator) and one record, held by `RunWriter` and encoded with the others of
its window; the common step takes one lean method (`_plain_step`). On a CPU that is some
18 us measured alone (8 of them the norm and its reads), but inside a training loop, whose
caches it shares, about 37 us in `step()` (21 the norm and its reads) and some 25-30 us
more in the next training step, which finds its caches colder (the norm alone: some 5): on
the built-in mlp (0.45-0.5 ms a step) 1.14-1.16x a bare loop, of which the gradient norm
alone is 1.04-1.06x; on the built-in transformer (6.8 ms a step, 30 gradients: ~125 us in
`step()`, ~105 of them the norm) 1.01-1.03x (`benchmarks/bench_monitor.py` measures it). A
statistics step makes a fixed number of passes, no logarithms (see `kernels`),
plus a few hundred small tensor operations, which on a CPU cost more than the passes on a
small model. Memory: parameter-sized data are never copied whole; gradients are counted
through a 2**20-element buffer and the lost-update check keeps the old weights of at most
2**20 of them (a fixed random sample beyond; the record gives the bound).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import math
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.amp.grad_scaler import OptState
from torch.utils.hooks import RemovableHandle

from fpexplorer import __version__
from fpexplorer.training import records
from fpexplorer.training.config import USER_LOOP_TASK
from fpexplorer.training.monitor.cadence import StatsCadence
from fpexplorer.training.monitor.device import bytes_by_dtype, device_description
from fpexplorer.training.monitor.kernels import (
    Scratch,
    Segment,
    count_low_bits_set,
    dtype_name,
    group_segment,
    segment_of,
    segment_rows,
)
from fpexplorer.training.monitor.plan import HostPack, HostValues, ParamGroup, StatsPlan
from fpexplorer.training.monitor.quant import QuantCollector
from fpexplorer.training.monitor.ranks import (
    DISTRIBUTED_STATS_EVERY,
    RankContext,
    RankLogs,
    is_sharded,
    launch_settings,
    local_tensor,
    parallel_of,
)
from fpexplorer.training.monitor.reduction import (
    PreReductionCheck,
    ReductionInUse,
    check_before_reduction,
    watched_module,
)
from fpexplorer.training.monitor.thresholds import DEFAULT_FORMATS, format_ranges
from fpexplorer.training.monitor.updates import LostUpdateCheck, as_real
from fpexplorer.training.records import EndRecord, HeaderRecord, Memory, Record, StepRecord
from fpexplorer.training.runlog import RunWriter

_AUTOCAST_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16"}

# `StepStats.activations_not_measured` of a compiled model (see the module docstring): its
# activation gradients were not measured; nor, in the second case, its leaf outputs.
COMPILED_MODEL = "compiled model"
COMPILED_MODEL_UNCHECKED = "compiled model; forward outputs not checked"


class _CheapSignals(NamedTuple):
    """The signals of every step, on the host (a named tuple: built on every step, it
    costs a third of a frozen dataclass)."""

    loss: float
    grad_norm: float
    scale_after: float  # the scaler's scale after update(): the next step's
    growth_tracker: float
    found_inf: float  # > 0: the scaler found inf/NaN (a fused optimizer skipped inside)
    grad_amax: float | None = None  # max |gradient| after unscaling (loss-scaled runs)
    # Several optimizers under a GradScaler: its inf/NaN flag for each (0: none found).
    found_by_optimizer: tuple[float, ...] | None = None


# A step record made on every step: its fields set directly (see records.direct_constructor).
_make_step_record = records.direct_constructor(StepRecord)

_NARROW_DTYPES = (torch.float16, torch.bfloat16)
_PER_TENSOR = "per tensor"  # float64 and 16-bit gradients: no one dtype suits them all


def _grad_norm_dtype(dtypes: set[torch.dtype]) -> torch.dtype | str | None:
    """The dtype one fused norm over gradients of these dtypes sums in: float32 where any is
    16-bit (theirs would overflow at 65504; float32 gradients beside them are summed as
    with None, bit for bit on a CPU), else their own; `_PER_TENSOR` where float64 and
    16-bit gradients mix."""
    if not dtypes & set(_NARROW_DTYPES):
        return None
    if dtypes <= {torch.float16, torch.bfloat16, torch.float32}:
        return torch.float32
    return _PER_TENSOR


def _check_arguments(
    model: object, scaler: object, out: object, config: object, echo: object
) -> None:
    """TypeError, before the run log is opened, for an argument of the wrong kind, which
    would otherwise fail deep inside (an AttributeError at construction or on the first
    step) and leave the log open and locked against the retry."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"AmpMonitor's model is a torch.nn.Module, not {_kind(model)}")
    if scaler is not None and not callable(getattr(scaler, "get_scale", None)):
        raise TypeError(
            "AmpMonitor's scaler is a torch.amp.GradScaler, an object with get_scale(), or "
            f"None, not {_kind(scaler)}"
        )
    if out is not None and not isinstance(out, (str, os.PathLike)):
        # An open file cannot be locked against a second writer: the log needs its path.
        raise TypeError(
            f"AmpMonitor's out is a run-log path (str or os.PathLike), not {_kind(out)}"
        )
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"AmpMonitor's config is a mapping (a dict), not {_kind(config)}")
    if echo is not None and (
        not callable(getattr(echo, "write", None))
        or isinstance(echo, (io.RawIOBase, io.BufferedIOBase))
        or "b" in str(getattr(echo, "mode", ""))
    ):
        raise TypeError(f"AmpMonitor's echo is a text stream (sys.stdout), not {_kind(echo)}")


def _as_device(device: object) -> torch.device:
    """A torch.device from one, or from a name such as "cuda:0"."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"AmpMonitor's device is a torch.device or its name, not {_kind(device)}")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"AmpMonitor's device: {error}") from None


def _check_loss(loss: object) -> None:
    """A wrong `loss` for step() says what it must be, instead of float()'s or torch's
    message from inside a step that then records nothing."""
    if isinstance(loss, (torch.Tensor, np.ndarray)):
        count = loss.numel() if isinstance(loss, torch.Tensor) else loss.size
        if count != 1:
            raise ValueError(
                f"AmpMonitor.step()'s loss is one number, not a tensor of {count} elements "
                "(reduce it first, as for backward: loss.mean())"
            )
    elif isinstance(loss, bool) or not isinstance(loss, numbers.Real):
        raise TypeError(
            f"AmpMonitor.step()'s loss is a one-element tensor or a number, not {_kind(loss)}"
        )


def _kind(value: object) -> str:
    """How an argument of the wrong kind is named in an error: "None", "a str"."""
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _watched_optimizers(
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
) -> tuple[torch.optim.Optimizer, ...]:
    """The optimizers AmpMonitor watches: one, or a non-empty sequence of distinct ones.
    Raises TypeError for anything else (a model passed in the optimizer's place, None)."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return (optimizer,)
    if isinstance(optimizer, Sequence) and not isinstance(optimizer, str):
        optimizers = tuple(optimizer)
        strangers = [o for o in optimizers if not isinstance(o, torch.optim.Optimizer)]
        if optimizers and not strangers and len({id(o) for o in optimizers}) == len(optimizers):
            return optimizers
        if not optimizers:
            raise TypeError("AmpMonitor's optimizer: an empty sequence (give one or more)")
        if not strangers:
            raise TypeError("AmpMonitor's optimizer: the same optimizer is listed twice")
        kind = type(strangers[0]).__name__
        raise TypeError(f"AmpMonitor's optimizer: a sequence holding a {kind}, not only "
                        "torch.optim.Optimizer objects")  # fmt: skip
    raise TypeError(
        "AmpMonitor's optimizer is a torch.optim.Optimizer or a sequence of them, not "
        f"{'None' if optimizer is None else 'a ' + type(optimizer).__name__}"
    )


class _WatchedParams:
    """Several optimizers: the parameters of all of them, once each, in the optimizers'
    order (the lost-update check's layout for the run), and the positions of each one's."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer], sharded: bool) -> None:
        params: list[torch.Tensor] = []
        index: dict[int, int] = {}
        positions: list[tuple[int, ...]] = []
        for optimizer in optimizers:
            mine: list[int] = []
            for group in optimizer.param_groups:
                for param in group["params"]:
                    position = index.setdefault(id(param), len(params))
                    if position == len(params):
                        params.append(param)
                    mine.append(position)
            positions.append(tuple(mine))
        self.params = tuple(params)
        self.positions = tuple(positions)
        self.sharded = sharded
        self.layout = param_groups_layout(optimizers)

    def current(self, optimizers: Sequence[torch.optim.Optimizer]) -> _WatchedParams:
        """These, or the parameters read again where the optimizers' groups changed since
        (`add_param_group`: layers unfrozen in the middle of a run)."""
        if param_groups_layout(optimizers) == self.layout:
            return self
        return _WatchedParams(optimizers, self.sharded)

    def tensors(self) -> list[torch.Tensor]:
        return [local_tensor(p) for p in self.params] if self.sharded else list(self.params)


def param_groups_layout(
    optimizers: Sequence[torch.optim.Optimizer],
) -> tuple[tuple[int, ...], ...]:
    """How many parameters each group of each optimizer holds (a few microseconds to read):
    it changes when a group is added or a group's list grows."""
    return tuple(tuple(len(group["params"]) for group in o.param_groups) for o in optimizers)


@dataclass(frozen=True, slots=True)
class _Layer:
    name: str
    params: tuple[nn.Parameter, ...]


_ForwardCheck = bool | tuple[torch.Tensor, torch.Tensor]  # finite flag, or (min, max)


class _SavedTensorTap(threading.local):
    """The one pair of saved-tensor hooks of a thread's monitors: a weak reference to every
    tensor autograd saves while any of them is in a forward is appended to `saved`, and
    each monitor reads those saved since it joined when its forward ends (`join` returns
    where they start).

    `torch.autograd.graph.saved_tensors_hooks` is a stack and autograd calls only its top
    pair: two monitors on one model, each entering its own pair, left the first one's
    saved-activation bytes empty. Monitors join this pair instead (it is entered by the
    first to join and left by the last to leave, which empties `saved`). Per thread, as
    torch's stack is. The pack hook only appends: the bytes are summed once per pass, at
    its end, not tensor by tensor in the middle of the forward. The tap holds nothing: a
    graph that no backward uses (a side computation dropped inside the forward, a
    validation pass under grad) frees what it saved when it is dropped, as it does
    without the tap, and is not counted (no backward holds it). Before, the list kept
    every saved tensor to the forward's end, and the packed outputs (see `pack`) for
    ever: 40 MiB after five statistics steps, each with a training and a validation pass
    that dropped a side graph saving 4 MiB.

    A forward that starts under saved-tensor hooks of someone else's (the model called
    inside `torch.utils.checkpoint`, or `save_on_cpu`) is not tapped: entered on top, this
    pair replaced theirs, and a checkpoint then kept every activation instead of
    recomputing it. What such hooks pack is theirs to keep or drop; it is not counted, as
    it is not where their region starts inside the model's forward."""

    def __init__(self) -> None:
        self.saved: list[weakref.ref[torch.Tensor]] = []
        self.joined = 0
        self._entered = False  # this pair is on torch's stack (no other pair was)
        append, ref = self.saved.append, weakref.ref

        def pack(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
            # Detached: an output saved by its own node (tanh, exp, softmax) comes here
            # with that node as its grad_fn, and the node holds what this returns: kept
            # as it is, that cycle through C++ was never freed (no backward releases a
            # graph that is dropped). Autograd gives the unpacked tensor its graph back.
            tensor = tensor.detach()  # (its version counter is the tensor's)
            append(ref(tensor))
            return (tensor, tensor._version)

        self._pack_code = pack.__code__
        # Made once, entered and left again for each pass.
        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, _unpack_saved)

    def join(self) -> int:
        if not self.joined:
            if not _TAP_OUT_OF_DYNAMO and "torch._dynamo" in sys.modules:
                _keep_out_of_dynamo(self._pack_code)
            self._entered = _saved_tensor_hooks_in_use() is None
            if self._entered:  # may raise (saved-tensor hooks disabled): nothing joined then
                self._hooks.__enter__()
        self.joined += 1
        return len(self.saved)

    def leave(self) -> None:
        self.joined -= 1
        if not self.joined:
            if self._entered:
                self._entered = False
                self._hooks.__exit__(None, None, None)
            self.saved.clear()


# The tap's hooks run as they are where dynamo compiles the frames a compiled model's forward
# calls (torch.compile(ddp)): traced, the detach made it wrap the saved tensor, reading a
# non-leaf's .grad, a warning (an error under a strict warning filter). Marked when dynamo
# is first seen loaded (a model is compiled before its forward runs), not at import:
# importing dynamo takes some 0.7 s, which `import torch` alone does not pay.
_TAP_OUT_OF_DYNAMO = False


def _keep_out_of_dynamo(pack_code: Any) -> None:
    global _TAP_OUT_OF_DYNAMO
    from torch._dynamo.eval_frame import skip_code

    skip_code(pack_code)  # the same code object on every thread (one closure per thread)
    skip_code(_unpack_saved.__code__)
    _TAP_OUT_OF_DYNAMO = True


def _saved_tensor_hooks_in_use() -> object:
    """The saved-tensor hooks autograd calls now (the top of its stack), None when none."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False)


def _unpack_saved(packed: tuple[torch.Tensor, int]) -> torch.Tensor:
    """The tensor back from the saved-tensor tap's tuple (for each saved tensor, in
    backward). Autograd checks that a saved tensor was not changed in place since it was
    saved only where no hooks packed it: the tap does, with autograd's message, or
    backward would compute the gradients from the changed values without a word."""
    tensor, version = packed
    if tensor._version != version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{tensor.type()} {list(tensor.shape)}] is at version "
            f"{tensor._version}; expected version {version} instead (seen on an AmpMonitor "
            "statistics step)"
        )
    return tensor


_SAVED_TENSOR_TAP = _SavedTensorTap()


@dataclass(slots=True, eq=False)
class _ForwardPass:
    """One forward pass of the model on a statistics step: what it saved for backward, its
    layers' finiteness checks, and whether a backward went through it. A pass no backward
    used (a validation pass without `torch.no_grad()`) says nothing of the training step;
    passes of one `group` (no backward between them) are held at once, each group is freed
    by its backward (gradient accumulation)."""

    group: int
    saved: dict[tuple[int, torch.dtype], int] = dataclasses.field(default_factory=dict)
    checks: list[tuple[int, _ForwardCheck]] = dataclasses.field(default_factory=list)
    backpropagated: bool = False


class AmpMonitor(AbstractContextManager["AmpMonitor"]):
    """Records loss, loss scale, skipped steps and gradient numerics of a training loop.

    Args:
        model: the module being trained (its leaf modules become the "layers").
        optimizer: the optimizer whose steps are watched, or a sequence of them (a GAN's
            generator and discriminator optimizers, one per model or parameter group, as in
            PyTorch's AMP examples with one GradScaler). With several, a step is `skipped`
            when the scaler skipped any of them, the record's `optimizer_outcomes` says what
            each did, and `lr` is the first one's.
        scaler: a `torch.amp.GradScaler` (enabled or not), any object with `get_scale()`,
            or None (scale 1).
        out: the run-log path (or pass `writer=`). Under an initialised torch.distributed
            process group of several ranks, each rank writes `RUN.rank-K.jsonl` beside it
            and rank 0 the merged log at `out` (see `monitor.ranks`).
        stats_every: statistics every N steps (0: off). Give this or `stats_budget`.
        stats_budget: statistics as often as keeps the monitor's cost (cheap signals
            included) within this share of the wall time (default 0.04 when `stats_every`
            is not given).
        formats: the formats whose ranges the header records (a name, or names or specs that
            `fpexplorer.formats.get_format` reads: FP8/FP6/FP4, E8M0, custom `eXmY`...).
        format_shares: also record, per format, the share of gradients that would flush,
            go subnormal or overflow (the most expensive statistic; off by default).
        precision: the precision mode name for the header (when None, the header is
            written at the first step, labelled from the autocast dtype seen in forward).
        config: extra header config (the job passes its whole TrainConfig).
        echo: a text stream that also receives every record (e.g. sys.stdout).
        device: where the statistics are computed, a torch.device or its name (default:
            the device of the model's first parameter).
        check_reduction: under a process group of several ranks, with a DDP model (whose
            `.module` is watched: layer names as unwrapped) or one with FSDP2 modules, put a
            check of this rank's own gradients before they are communicated into the model
            (a DDP communication hook, an FSDP2 custom reduce-scatter: see `reduction`), so
            that the merged log names the rank and layer where a weight-gradient overflow
            started. A model that has its own hook keeps it (one warning): register it
            before creating the monitor, as DDP takes no hook after this one. False: no check.

    Raises (at construction, before the run log is opened):
        TypeError: an argument of the wrong kind (a model that is no nn.Module, an
            optimizer list that is empty or holds something else, a scaler without
            `get_scale()`, an open file as `out`).
        ValueError: a wrong value (`stats_every=-1`, `stats_budget=2`, an unknown format).
        OSError: the run log cannot be created (a missing folder); `RunLogLocked` when
            another writer holds it.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        scaler: Any = None,
        *,
        out: str | os.PathLike[str] | None = None,
        writer: RunWriter | RankLogs | None = None,
        stats_every: int | None = None,
        stats_budget: float | None = None,
        formats: Sequence[str] = DEFAULT_FORMATS,
        format_shares: bool = False,
        precision: str | None = None,
        config: Mapping[str, Any] | None = None,
        echo: IO[str] | None = None,
        device: torch.device | str | None = None,
        check_reduction: bool = True,
    ) -> None:
        if not isinstance(check_reduction, bool):  # "no" or 0 would read as on, or off
            raise TypeError(f"check_reduction is True or False, not {check_reduction!r}")
        _check_arguments(model, scaler, out, config, echo)
        if device is not None:
            device = _as_device(device)
        if isinstance(formats, str):  # one name, not its letters ("unknown format 'f'")
            formats = (formats,)
        optimizers = _watched_optimizers(optimizer)
        wrapped, model = model, watched_module(model)
        context = RankContext.current()
        ranks = context if writer is None else None
        parallel = parallel_of(wrapped) if context is not None else None
        if ranks is not None and stats_every is None:
            # A time budget is measured per rank; the ranks must agree on their exchanges.
            stats_every, stats_budget = DISTRIBUTED_STATS_EVERY, None
        self.cadence = StatsCadence(stats_every, stats_budget)
        self.formats = format_ranges(formats)  # raises ValueError for an unknown format
        if writer is None:
            if out is None:
                raise ValueError("AmpMonitor needs out= (a run-log path) or writer=")
            if ranks is None:
                writer = RunWriter(out, echo=echo)
            else:  # one log per rank, and the merged log on rank 0 (see `ranks`)
                replicas = 1 if is_sharded(model) else ranks.world_size
                writer = RankLogs(
                    out, ranks, stats_every=stats_every or 0, replicas=replicas, parallel=parallel
                )
        self.model = model
        self.optimizers = optimizers
        self.optimizer = optimizers[0]  # the one whose lr the records give
        self.scaler = scaler
        self.writer = writer
        self.format_shares = format_shares
        self.step_index = 0
        self.closed = False
        self.write_error: OSError | None = None
        self._started = time.perf_counter()
        self._last_step_time = self._started
        self._recent_durations: deque[float] = deque(maxlen=10)  # for steps_per_s
        first_param = next(model.parameters(), None)
        self.device = device or (
            first_param.device if first_param is not None else torch.device("cpu")
        )
        self._layers = self._find_layers(model)
        self._param_layer: list[tuple[int, nn.Parameter]] = [
            (index, param) for index, layer in enumerate(self._layers) for param in layer.params
        ]
        self._all_param_layers = tuple(index for index, _ in self._param_layer)
        self._params = [param for _, param in self._param_layer]
        self._layer_names = tuple(layer.name for layer in self._layers)
        # A compiled model: no activation hook inside its graph (see the module docstring).
        # The model's own forward hooks run eagerly on a `torch.compile` wrapper; under
        # `model.compile()` or a compiled function calling the model they are traced, read
        # the autocast dtype there and set `_traced`: from then on the hooks stay as they
        # are, since adding or removing one recompiles.
        self._compiled = _is_compiled(model)
        self._traced = False
        # A `torch.compile` wrapper's leaf outputs are checked inside its graph, by hooks
        # installed once (see _install_graph_checks). Not in a compiled DDP model: dynamo
        # splits its graph at DDP's buckets, and any forward hook's output there is read
        # as a new frame's input, with a UserWarning about `.grad` of a non-leaf tensor on
        # every compile (torch's, for a user's own hook too): its forward overflows are
        # not named, as on a compiled function calling the model.
        original = _compiled_original(model)
        self._graph_checks = original is not None and not isinstance(
            original, nn.parallel.DistributedDataParallel
        )
        self._sharded = is_sharded(model)
        self._multi = _WatchedParams(optimizers, self._sharded) if len(optimizers) > 1 else None
        # One optimizer: the lost-update check follows the parameters it updates, as with
        # several ("updates lost" are the optimizer's): a learnable parameter outside the
        # model counts, a model parameter the optimizer does not hold does not. `_one_same`
        # says whether they are the model's own, in its order (then the step's gradients
        # are theirs: nothing is read twice).
        self._one = _WatchedParams(optimizers, self._sharded) if len(optimizers) == 1 else None
        self._one_same = self._one is not None and self._same_as_model(self._one)
        # Looked up once, not on every step (each lookup is a few hundred ns, and a step
        # of a small model has few microseconds to spare): the scaler's kind, the device.
        self._scaling = self._scaler_enabled()
        self._grad_scaler = (
            scaler if isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled() else None
        )
        self._has_hysteresis = hasattr(scaler, "hysteresis_tracker")
        self._on_cpu = self.device.type == "cpu"
        # The dtype the plain step's norm sums in, from the gradients' dtypes, found again
        # when they change (model.half() after this, or one layer's .to(torch.bfloat16)).
        self._norm_key: set[torch.dtype] | None = None
        self._grad_norm_dtype: torch.dtype | str | None = None
        self._plain_key: set[torch.dtype] | None = None  # the dtypes _plain_step takes
        self._scale_used = self._current_scale_host()
        self._autocast_dtype: torch.dtype | None = None
        # Per statistics step:
        self._collecting = False
        self._act_segments: list[Segment] = []
        # The layers whose activation gradient had zeros at its last count (a hint to
        # `segment_of`, which then counts them first, at less cost).
        self._zero_layers: set[int] = set()
        self._scratch = Scratch()
        # The step's forward passes, in order (see _ForwardPass): whether each leaf module's
        # output is finite, in forward order (read at once for a CPU tensor, else its
        # extremes, kept on the device until step()), and the bytes saved for backward.
        self._pass = _ForwardPass(0)  # the pass leaf outputs are checked into
        self._passes: list[_ForwardPass] = [self._pass]
        self._saved = self._pass.saved  # the current pass's, filled by _count_saved
        self._backward_ran = False  # since the current pass began
        # Whether each leaf module's output is finite, of the passes a backward used.
        self._forward_checks: list[tuple[int, _ForwardCheck]] = []
        self._tapping = False  # joined _SAVED_TENSOR_TAP for the current forward
        # The thread whose tap was joined: only its forward's end leaves it (the tap and
        # torch's hook stack are per thread; a forward on another thread that ends inside
        # this one's must leave neither).
        self._tap_thread = 0
        # Calls of the model inside its own forward (a recursive model's `self(...)`), on the
        # tapping thread, not ended yet: their ends are not the forward's.
        self._tap_depth = 0
        # The model's forward-end hook is in place: without it (a `model.compile()`d model)
        # nothing would leave the tap.
        self._forward_end_hooked = False
        # The end hook's handle, and the same handle while it is left in place after the
        # module hooks were removed (close(), or the end of statistics steps, on another
        # thread) for the forward that joined the tap to leave it at its end, which only
        # its thread can: the hook then removes itself.
        self._end_handle: RemovableHandle | None = None
        self._end_handle_left: RemovableHandle | None = None
        # Held while the tap is joined or left and while the module hooks are added or
        # removed: a forward on one thread and step() or close() on another.
        self._tap_lock = threading.Lock()
        self._tap_start = 0  # where this forward's tensors start in the tap's `saved`
        self._updates = LostUpdateCheck()
        self._optimizer_stepped = False
        # Steps of each optimizer since the last step() (by position in `optimizers`): one
        # at most each, or a warning (two optimizers stepping once each is one step).
        self._optimizer_calls = [0] * len(optimizers)
        self._optimizer_position = {id(opt): index for index, opt in enumerate(optimizers)}
        # The lr the first optimizer stepped with (read as it steps: a scheduler stepped
        # before step() has already moved it on); the current one when it did not step.
        self._lr_used: Any = None
        self._lr_next: Any = self.optimizer.param_groups[0]["lr"]
        # The first gradient (and, with several optimizers, each one's first) and its
        # version at the last step(): unchanged, with no optimizer step in between, means
        # step() was called again for the same training step.
        self._last_grads: tuple[tuple[weakref.ref[torch.Tensor], int], ...] = ()
        # Several optimizers under a GradScaler: its per-optimizer records of this step (the
        # dict that `update()` replaces, kept here so it is still readable after it).
        self._scaler_states: Mapping[int, Any] | None = self._scaler_optimizer_states()
        # Several optimizers: the scaler's flag each one was called with (a fused one).
        self._found_when_called: list[torch.Tensor | None] = [None] * len(optimizers)
        self._last_record: StepRecord | None = None
        self._warned: set[str] = set()
        self._found_inf: torch.Tensor | None = None
        self._handles: list[RemovableHandle] = []
        self._module_handles: list[RemovableHandle] = []
        self._static_bytes: tuple[tuple[object, ...], dict[str, int], dict[str, int]] | None = None
        self._header_config = (precision, dict(config or {}))
        # Under torchrun the header states the launch (ranks, nodes, DDP or FSDP) as an
        # `fpexplorer train --nproc-per-node` run's does: the panel's form shows it.
        self._launch = {} if context is None else launch_settings(context, parallel)
        self._header_written = False
        # Quantized linears (fp8/MX/NVFP4) report their casts on statistics steps.
        self._quant = QuantCollector(model)
        self._install_hooks()
        if self._graph_checks:
            self._install_graph_checks()
        self._reduction_check = self._check_reduction(wrapped) if check_reduction else None
        self._plain_ready = False  # whether step() may try _plain_step (see _plain_path)
        if precision is not None:
            self._write_header()
        self._arm(self.cadence.collect_next(0))

    @property
    def stats_every(self) -> int | None:
        return self.cadence.every

    # -- set-up --------------------------------------------------------------------------

    @staticmethod
    def _find_layers(model: nn.Module) -> list[_Layer]:
        """Leaf modules, plus any module that owns parameters directly (e.g. an embedding
        table declared on a parent); shared parameters are counted once."""
        seen: set[int] = set()
        layers: list[_Layer] = []
        for name, module in model.named_modules():
            own = [p for p in module.parameters(recurse=False) if id(p) not in seen]
            seen.update(id(p) for p in own)
            is_leaf = next(module.children(), None) is None
            if is_leaf or own:
                layers.append(_Layer(_layer_name(model, name, module), tuple(own)))
        return layers

    def _install_hooks(self) -> None:
        """The optimizer hooks, for the whole run (they tell a skipped step): one pre-hook
        per watched optimizer, nothing else (each hook costs a Python call on every step)."""
        for optimizer in self.optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_step_start))

    def _install_graph_checks(self) -> None:
        """Forward hooks on the leaf modules of a `torch.compile` wrapper, for the whole
        run: dynamo traces them into the graph, where on a statistics step each adds its
        output's extremes (two more graph outputs, tested at step() as on an accelerator)
        and otherwise nothing. Dynamo specialises on `_collecting`: one graph with the checks
        and one without, each compiled once (adding and removing the hooks per statistics
        step would recompile each time). Activation gradients are not measured there: a
        tensor hook inside the graph that keeps its gradient is a side effect dynamo refuses
        under fullgraph=True."""
        layer_index = {layer.name: index for index, layer in enumerate(self._layers)}
        for name, module in self.model.named_modules():
            index = layer_index.get(_layer_name(self.model, name, module))
            if index is not None and next(module.children(), None) is None:
                self._handles.append(module.register_forward_hook(self._graph_check(index)))

    def _graph_check(self, layer_index: int) -> Any:
        def on_forward(module: nn.Module, inputs: Any, output: Any) -> None:
            if not self._collecting or not torch.is_grad_enabled():
                return
            tensor = output if isinstance(output, torch.Tensor) else None
            if tensor is None and isinstance(output, (tuple, list)):
                tensor = next((t for t in output if isinstance(t, torch.Tensor)), None)
            if tensor is None or not tensor.is_floating_point():
                return
            # The pass's list is new and empty at each forward (_on_model_forward_start,
            # which runs eagerly before the graph): what dynamo guards on stays the same.
            self._pass.checks.append((layer_index, torch.aminmax(tensor.detach().reshape(-1))))

        return on_forward

    def _scaler_optimizer_states(self) -> Mapping[int, Any] | None:
        """With several optimizers, the enabled GradScaler's per-optimizer records of the
        coming step (keyed by `id(optimizer)`: the stage and `found_inf_per_device` of each
        optimizer it unscaled); None otherwise. `update()` replaces the dict with a fresh one,
        so the one held from the last step() still has this step's records after it."""
        if len(self.optimizers) == 1 or self._grad_scaler is None:
            return None
        states = getattr(self._grad_scaler, "_per_optimizer_states", None)
        return states if isinstance(states, Mapping) else None

    def _check_reduction(self, model: nn.Module) -> PreReductionCheck | None:
        """Put the pre-communication check into a DDP/FSDP2 model whose ranks exchange
        figures (the writer is RankLogs), and let the logs ask it; None otherwise."""
        if not isinstance(self.writer, RankLogs):
            return None
        try:
            check = check_before_reduction(model)
        except ReductionInUse as taken:
            warnings.warn(
                f"AmpMonitor: {taken}; it stays, so the rank and layer where a "
                "weight-gradient overflow starts cannot be named "
                "(check_reduction=False turns this check off)",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        if check is not None:
            self.writer.local_origin = check.first_nonfinite_layer
        return check

    def _arm(self, collecting: bool) -> None:
        """Decide the next step: the module hooks are in place only while they have work
        (a statistics step, or a header that waits for the autocast dtype), because any
        forward hook sends every module call through PyTorch's slower hooked path."""
        self._collecting = collecting
        self._quant.arm(collecting)
        wanted = collecting or not self._header_written
        if self._traced:  # traced into a compiled graph: any change would recompile it
            return
        if wanted and not self._module_handles:
            handles = self._module_handles
            if not self._compiled:
                layer_index = {layer.name: index for index, layer in enumerate(self._layers)}
                for name, module in self.model.named_modules():
                    index = layer_index.get(_layer_name(self.model, name, module))
                    if index is not None and next(module.children(), None) is None:
                        hook = self._activation_hook(index)
                        handles.append(module.register_forward_hook(hook))
            handles.append(self.model.register_forward_pre_hook(self._on_model_forward_start))
            # Under `model.compile()` the end hook would only be traced (it has nothing to
            # end there), and dynamo warns tracing it (it reads the output's `.grad`).
            if getattr(self.model, "_compiled_call_impl", None) is None:
                with self._tap_lock:
                    # One left in place for a forward still running is in place again.
                    handle, self._end_handle_left = self._end_handle_left, None
                    if handle is None:
                        hook = self._on_model_forward_end
                        handle = self.model.register_forward_hook(hook, always_call=True)
                    self._end_handle = handle
                    handles.append(handle)
                    self._forward_end_hooked = True
        elif not wanted and self._module_handles:
            self._remove_module_hooks()

    def _remove_module_hooks(self) -> None:
        with self._tap_lock:
            for handle in self._module_handles:
                if handle is self._end_handle and self._tapping:
                    # A forward that joined the tap is running (on another thread: this
                    # one's own was left first): its end leaves the tap, then this hook.
                    self._end_handle_left = handle
                else:
                    handle.remove()
            self._module_handles = []
            self._end_handle = None
            self._forward_end_hooked = False

    def _scaler_enabled(self) -> bool:
        scaler = self.scaler
        if scaler is None:
            return False
        if isinstance(scaler, torch.amp.GradScaler):
            return scaler.is_enabled()
        return True

    def _header(self) -> HeaderRecord:
        precision, config = self._header_config
        merged: dict[str, Any] = {
            "task": USER_LOOP_TASK,
            "precision": precision or self._guess_precision(),
            "stats_every": self.cadence.every,
            "device": self.device.type,
        }
        if self.cadence.budget is not None:
            merged["stats_budget"] = self.cadence.budget
        scaler = self.scaler
        # A disabled GradScaler (GradScaler(enabled=use_amp)) has no scale settings at all.
        if isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled():
            merged.update(
                init_scale=float(getattr(scaler, "_init_scale", scaler.get_scale())),
                growth_factor=scaler.get_growth_factor(),
                backoff_factor=scaler.get_backoff_factor(),
                growth_interval=scaler.get_growth_interval(),
            )
        # A loss-scaling policy's own settings (training.scalers: hysteresis, minimum scale).
        policy_settings = getattr(scaler, "header_settings", None)
        if callable(policy_settings):
            merged.update(policy_settings())
        merged.update(self._launch)
        merged.update(config)
        return HeaderRecord(
            config=merged,
            fpexplorer_version=__version__,
            torch_version=torch.__version__,
            started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            device=records.DeviceInfo(**device_description(self.device)),
            model=records.ModelInfo(
                params=sum(p.numel() for p in self.model.parameters()),
                layers=tuple(layer.name for layer in self._layers),
                class_name=type(_compiled_original(self.model) or self.model).__name__,
            ),
            formats={fmt.name: records.FormatRange(**fmt.header_json()) for fmt in self.formats},
        )

    def _guess_precision(self) -> str:
        """The precision mode a user loop runs in, from what it actually does: the autocast
        dtype seen in forward, the parameters' dtype, whether a scaler scales."""
        param = next(self.model.parameters(), None)
        params_dtype = param.dtype if param is not None else torch.float32
        if self._autocast_dtype in _AUTOCAST_PRECISION:
            mode = _AUTOCAST_PRECISION[self._autocast_dtype]
            if mode == "fp16" and not self._scaler_enabled():
                return "fp16-noscale"
            return mode
        if params_dtype == torch.float16:
            return "pure-fp16"
        if params_dtype == torch.bfloat16:
            return "pure-bf16"
        if params_dtype == torch.float64:
            return "fp64"
        return "fp32" if params_dtype == torch.float32 else "unknown"

    def _write_header(self) -> None:
        if not self._header_written:
            self._header_written = True
            # Called from __init__ or step(): a failure points at the user's line.
            self._write(self._header(), stacklevel=4)
            self._plain_ready = self._plain_path()

    def _plain_path(self) -> bool:
        """Whether this monitor's steps may take `_plain_step`: the header written, one
        optimizer, unsharded, no check before the ranks' reduction (whose figures each
        record carries), no hysteresis policy; not closed."""
        return (
            self._header_written
            and not self.closed
            and self._multi is None
            and not self._sharded
            and self._reduction_check is None
            and not self._has_hysteresis
        )

    def _write(self, record: Record, *, stacklevel: int = 3) -> None:
        """Write a record unless writing already failed; a failure warns once and stops
        the log, never the training loop. The warning points `stacklevel` frames up (the
        default: the caller of the method that called this one)."""
        if self.write_error is not None:
            return
        try:
            self.writer.write(record)
        except OSError as error:
            self.write_error = error
            warnings.warn(
                f"AmpMonitor: cannot write the run log {self.writer.path}: "
                f"{error.strerror or error}; logging stopped, training goes on",
                RuntimeWarning,
                stacklevel=stacklevel,
            )

    # -- hooks ---------------------------------------------------------------------------

    def _activation_hook(self, layer_index: int) -> Any:
        zero_layers = self._zero_layers

        def on_backward(grad: torch.Tensor) -> None:
            # Counted now, so the gradient can be freed as backward goes on.
            # Zeros counted first where this layer's gradient had some at the last count.
            segment = segment_of(layer_index, grad, zeros_first=layer_index in zero_layers)
            self._act_segments.append(segment)
            if isinstance(segment.zeros, int) and segment.zeros:  # never a device read
                zero_layers.add(layer_index)
            else:
                zero_layers.discard(layer_index)
            self._backward_ran = True

        def on_forward(module: nn.Module, inputs: Any, output: Any) -> None:
            if torch.compiler.is_compiling():  # first: nothing else read, nothing guarded
                self._traced = True
                return
            if not self._collecting or not torch.is_grad_enabled():
                return
            tensor = output if isinstance(output, torch.Tensor) else None
            if tensor is None and isinstance(output, (tuple, list)):
                tensor = next((t for t in output if isinstance(t, torch.Tensor)), None)
            if tensor is None or not tensor.requires_grad or not tensor.is_floating_point():
                return
            # Where a forward overflow starts (FP16 activations above 65504 become inf).
            data = tensor.detach()
            forward_pass = self._pass
            if data.is_cpu:  # read at once: a CPU has nothing to wait for
                forward_pass.checks.append((layer_index, _all_finite(data)))
            else:  # the extremes, one operation; whether finite, for all layers at step()
                forward_pass.checks.append((layer_index, torch.aminmax(data.reshape(-1))))
            node = tensor.grad_fn
            if node is None:  # a leaf tensor that requires grad

                def on_leaf(grad: torch.Tensor) -> None:
                    forward_pass.backpropagated = True
                    on_backward(grad)

                tensor.register_hook(on_leaf)  # type: ignore[no-untyped-call]
                return
            # The gradient of this output, as its node receives it: the same gradient a
            # tensor hook gets (the node's, before any in-place change of the tensor), for
            # half the Python work of `Tensor.register_hook`.
            output_nr = tensor.output_nr

            def on_node(grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
                grad = grad_outputs[output_nr]
                if grad is not None:
                    forward_pass.backpropagated = True
                    on_backward(grad)

            node.register_prehook(on_node)

        return on_forward

    def _on_model_forward_start(self, module: nn.Module, inputs: Any) -> None:
        device_type = self.device.type
        if torch.is_autocast_enabled(device_type):  # dynamo reads both as constants
            self._autocast_dtype = torch.get_autocast_dtype(device_type)
        if torch.compiler.is_compiling():  # a compiled function calls the model
            self._traced = True
            return
        if self._tapping:
            if self._tap_thread == threading.get_ident():
                self._tap_depth += 1
            return
        if not self._collecting or not torch.is_grad_enabled():
            return
        # A new pass; after a backward, in a new group (the passes before it were freed).
        group = self._pass.group + self._backward_ran
        self._backward_ran = False
        self._pass = _ForwardPass(group)
        self._passes.append(self._pass)
        self._saved = self._pass.saved
        with self._tap_lock:
            if not self._forward_end_hooked:
                # A `model.compile()`d model run eagerly (dynamo disabled, or falling back),
                # or the hooks removed on another thread since this call began: no end hook
                # would leave the tap, which then held every tensor saved from then on.
                return
            self._tap_start = _SAVED_TENSOR_TAP.join()
            self._tap_thread = threading.get_ident()
            self._tap_depth = 0
            self._tapping = True

    def _on_model_forward_end(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._tapping and self._tap_thread == threading.get_ident():
            if self._tap_depth:  # a call inside the forward ended, not the forward
                self._tap_depth -= 1
                return
            with self._tap_lock:
                self._tapping = False
                if not self.closed:
                    self._count_saved(_SAVED_TENSOR_TAP.saved[self._tap_start :])
                _SAVED_TENSOR_TAP.leave()
                if self._end_handle_left is not None:  # the hooks were removed meanwhile
                    self._end_handle_left.remove()
                    self._end_handle_left = None

    def _count_saved(self, references: list[weakref.ref[torch.Tensor]]) -> None:
        """The bytes of the tensors autograd saved in this pass and holds at its end, into
        the pass's dict. Parameters saved for backward cost nothing extra; a tensor saved
        twice counts once. Bytes by dtype are summed at step()."""
        params = set(map(torch.Tensor.data_ptr, self._params))  # every parameter, once
        tensors = [tensor for reference in references if (tensor := reference()) is not None]
        saved = self._saved
        for pointer, tensor in zip(map(torch.Tensor.data_ptr, tensors), tensors, strict=True):
            if pointer not in params:
                size = tensor.numel() * tensor.element_size()  # nbytes fails on sparse tensors
                saved.setdefault((pointer, tensor.dtype), size)

    def _on_optimizer_step_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_stepped = True
        position = self._optimizer_position.get(id(optimizer), 0)
        self._optimizer_calls[position] += 1
        if position == 0:
            self._lr_used = optimizer.param_groups[0]["lr"]
        if self._multi is None:
            self._found_inf = self._scaler_found_inf(optimizer, kwargs)
        else:  # read now: update() adds the others' flags into the first one's tensor
            self._found_when_called[position] = self._scaler_found_inf(optimizer, kwargs)
        if not self._collecting:
            return
        # The weights before the update, all of them or a fixed sample of 2**20: never a
        # parameter-sized copy on a large model. With several optimizers, each keeps its
        # own parameters' as it steps (the others may be updated before or after it).
        if self._multi is None:
            self._updates.keep(self._updated_params())
        else:
            self._multi = self._multi.current(self.optimizers)
            tensors, positions = self._multi.tensors(), self._multi.positions[position]
            grads = [self._multi.params[i].grad for i in positions]
            self._updates.keep_part(tensors, positions, [
                None if g is None else _strided([local_tensor(g)])[0] for g in grads
            ])  # fmt: skip

    def _scaler_found_inf(self, optimizer: Any, kwargs: Any) -> torch.Tensor | None:
        """The scaler's found-inf flag for this step, when the optimizer is called anyway:
        GradScaler hands a fused optimizer `found_inf` (attribute or keyword) and lets its
        kernel skip the update; its per-optimizer state holds the same for the others."""
        if not getattr(optimizer, "_step_supports_amp_scaling", False):
            # GradScaler calls any other optimizer only after finding no inf/NaN.
            return None
        found = getattr(optimizer, "found_inf", None)
        if found is None and isinstance(kwargs, Mapping):
            found = kwargs.get("found_inf")
        if isinstance(found, torch.Tensor):
            return found.detach().reshape(-1).sum()
        scaler = self.scaler
        if isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled():
            state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer))
            per_device = state.get("found_inf_per_device") if state else None
            if per_device:
                flags = [flag.to(self.device).reshape(-1).sum() for flag in per_device.values()]
                return torch.stack(flags).sum()
        return None

    # -- per step ------------------------------------------------------------------------

    def _current_scale_host(self) -> float:
        if not self._scaling:
            return 1.0
        return float(self.scaler.get_scale())

    def _scale_after_tensor(self) -> torch.Tensor | float:
        """The scaler's scale after update(), without a host sync where torch allows it."""
        scaler = self.scaler
        if isinstance(scaler, torch.amp.GradScaler):
            scale = getattr(scaler, "_scale", None)
            if isinstance(scale, torch.Tensor):
                return scale.reshape(())
        return self._current_scale_host()

    def _growth_tracker_tensor(self) -> torch.Tensor | float:
        tracker = getattr(self.scaler, "_growth_tracker", None)
        if isinstance(tracker, torch.Tensor):
            return tracker.reshape(())
        return 0.0

    def step(self, loss: torch.Tensor | float) -> StepRecord:
        """Record the step just taken. Call after the optimizer step (and scaler.update()),
        before gradients are zeroed. Returns the record (written unless writing failed)."""
        entered = time.perf_counter()
        # The common step (see _plain_step): one optimizer step since the last call, no
        # statistics due. Anything else, or anything it does not expect, takes the general
        # path below, which records every case.
        if self._plain_ready and self._optimizer_calls[0] == 1 and not self._collecting:
            try:  # free when nothing is raised: the plain step stays as fast
                record = self._plain_step(loss, entered)
            except (TypeError, ValueError, RuntimeError):
                _check_loss(loss)  # a wrong loss says so; anything else is raised as it was
                raise
            if record is not None:
                return record
        if self.closed:
            raise RuntimeError("AmpMonitor.step() after close()")
        _check_loss(loss)
        if not self._header_written:
            self._write_header()
        grads = [grad for p in self._params if (grad := p.grad) is not None]
        if self._sharded:  # looked up once: a getattr per tensor per step adds up
            grads = [local_tensor(g) for g in grads]
        repeated = self._repeated_call(grads)
        if repeated is not None:
            return repeated
        calls = self._optimizer_calls
        most = max(calls)
        if most > 1:
            which = "" if len(calls) == 1 else f" (optimizer {calls.index(most)} of {len(calls)})"
            self._warn_once(
                "sparse",
                f"AmpMonitor.step() saw {most} optimizer steps{which} since its last call: "
                "call it after every training step's optimizer steps (its record describes "
                "them together: activation statistics summed, a skip before the last one "
                "missed)",
            )
        if self._multi is not None:
            self._found_inf = self._found_by_optimizer()
        if any(g.layout is not torch.strided for g in grads):
            grads = _strided(grads)
        # Loss-scaled runs record max |gradient| after unscaling on every step: what a replay
        # under another loss scale needs (one fused pass, read with the other signals).
        scaled = self._scaling and bool(grads)
        plan: StatsPlan | None = None
        if self._collecting:
            pack = HostPack(self.device)
            if isinstance(loss, torch.Tensor):  # a scalar: read now on a CPU, else copied
                loss = loss.item() if self._on_cpu else loss.detach().reshape(())
            pack.add("loss", loss)
            norms = _tensor_norms(grads) if grads else None
            pack.add("grad_norm", torch.linalg.vector_norm(norms) if norms is not None else 0.0)
            pack.add("scale_after", self._scale_after_tensor())
            pack.add("growth_tracker", self._growth_tracker_tensor())
            pack.add("found_inf", self._found_inf if self._found_inf is not None else 0.0)
            if scaled:
                pack.add("grad_amax", _abs_max(grads))
            self._forward_checks = [
                check for forward_pass in self._used_passes() for check in forward_pass.checks
            ]
            measured = not (self._compiled or self._traced)
            plan = self._queue_statistics(pack, grads, norms, activations=measured, full=True)
            host = _without_norm_overflow(pack.fetch(), grads)  # the one host sync of the step
            signals = _CheapSignals(
                loss=host.scalar("loss"),
                grad_norm=host.scalar("grad_norm"),
                scale_after=host.scalar("scale_after"),
                growth_tracker=host.scalar("growth_tracker"),
                found_inf=(
                    host.scalar("found_inf") if self._multi is None
                    else float(host["found_inf"].sum())
                ),
                grad_amax=host.scalar("grad_amax") if scaled else None,
                found_by_optimizer=(
                    tuple(float(v) for v in host["found_inf"]) if self._multi is not None
                    and self._found_inf is not None else None
                ),
            )  # fmt: skip
        else:
            signals = self._cheap_signals(loss, grads, amax=scaled)
        now = time.perf_counter()
        durations = self._recent_durations
        durations.append(now - self._last_step_time)
        loss_value, grad_norm, scale_after, growth_tracker, found_inf, grad_amax, found_by = signals
        outcomes = self._outcomes(found_by) if self._multi is not None else None
        skipped = not self._optimizer_stepped or found_inf > 0
        if not self._optimizer_stepped and (
            not self._scaling if outcomes is None
            # Several: a GradScaler says which it skipped; another scaler cannot.
            else "skipped" not in outcomes and (found_by is not None or not self._scaling)
        ):  # fmt: skip
            # No scaler skipped it: step() came before optimizer.step(), or between the
            # micro-batches of an accumulated step, or the loop skipped it on its own.
            self._warn_once(
                "unstepped",
                "AmpMonitor.step() with no optimizer step since its last call and no loss "
                "scaler that skipped one: recorded as a skipped step (call it after "
                "optimizer.step(), once per optimizer step)",
            )
        alarm = skipped or not (math.isfinite(loss_value) and math.isfinite(grad_norm))
        stats: records.StepStats | None = None
        if plan is not None:
            stats = plan.decode(host, skipped=skipped)
            if not plan.activations:
                reason = COMPILED_MODEL if self._graph_checks else COMPILED_MODEL_UNCHECKED
                stats = dataclasses.replace(stats, activations_not_measured=reason)
            if self._quant.active:
                stats = dataclasses.replace(stats, quant=self._quant.take())
        elif alarm and grads:
            # The step of a skip, an overflow or a NaN: its activation gradients are gone,
            # its parameter gradients are not (a second host copy, on such steps only).
            late = HostPack(self.device)
            late_plan = self._queue_statistics(
                late, grads, _tensor_norms(grads), activations=False, full=False
            )
            stats = late_plan.decode(_without_norm_overflow(late.fetch(), grads), skipped=skipped)
        record = _make_step_record(
            step=self.step_index,
            loss=loss_value,
            scale=self._scale_used,
            skipped=skipped,
            growth_tracker=int(growth_tracker),
            lr=float(self._lr_used if self._optimizer_calls[0] else self._lr_next),
            grad_norm=grad_norm,
            steps_per_s=len(durations) / max(sum(durations), 1e-9),
            time=now - self._started,
            stats=stats,
            grad_amax=grad_amax,
            hysteresis=_hysteresis(self.scaler) if self._has_hysteresis else None,
            optimizer_outcomes=outcomes,
        )
        self._write(record)
        if self._reduction_check is not None:  # read by the exchange in _write
            self._reduction_check.clear()
        # The scale after update() is the scale the next step uses.
        self._scale_used = scale_after
        if self._collecting or stats is not None:
            self._act_segments = []
            self._forward_checks = []
            self._pass = _ForwardPass(0)
            self._passes = [self._pass]
            self._saved = self._pass.saved
            self._backward_ran = False
            self._updates.forget()
        self._optimizer_stepped = False
        self._optimizer_calls = [0] * len(calls)
        self._lr_next = self.optimizer.param_groups[0]["lr"]
        self._last_grads = tuple((weakref.ref(g), g._version) for g in self._first_grads(grads))
        if self._multi is not None:
            self._scaler_states = self._scaler_optimizer_states()
            self._found_when_called = [None] * len(calls)
        self._last_record = record
        self._found_inf = None
        # The cadence is charged from the end of one step() to the end of the next: this
        # step's own decoding and writing belong to it.
        end = time.perf_counter()
        duration, self._last_step_time = end - self._last_step_time, end
        cadence = self.cadence
        cadence.account(duration, statistics=stats is not None, alarm=alarm,
                        monitor_time=end - entered)  # fmt: skip
        self.step_index += 1
        collecting = cadence.collect_next(self.step_index)
        if collecting or self._collecting or self._module_handles:  # else nothing to change
            self._arm(collecting)
        return record

    def _plain_step(self, loss: torch.Tensor | float, entered: float) -> StepRecord | None:
        """The common step, recorded with as little work as possible: one optimizer (it
        stepped once since the last call, so the call is no repeat and needs no warning), no
        statistics due, strided gradients of the dtypes the general path last saw, a
        GradScaler or no scaler, the signals all finite and no skip. Returns None, having
        changed nothing, where any of that does not hold: the general path records it.

        Every Python operation here runs between two training steps and evicts some of the
        training step's caches, which makes it cost about twice as much in a real loop as
        measured alone; hence one method, its attributes read once, no intermediate
        objects (`benchmarks/bench_monitor.py` measures it in the loop)."""
        grads = [grad for p in self._params if (grad := p.grad) is not None]
        if not grads or {grad.dtype for grad in grads} != self._plain_key:
            return None  # no gradient, or new dtypes: the general path finds their norm's
        try:
            norms = torch._foreach_norm(grads, 2, dtype=self._grad_norm_dtype)  # type: ignore[arg-type]
        except RuntimeError:
            # Tensors on several devices, or a sparse gradient (no norm kernel takes one:
            # NotImplementedError is a RuntimeError): the general path makes it dense.
            return None
        scaled = self._scaling
        found = self._found_inf
        scaler = self._grad_scaler
        scale_tensor = tracker_tensor = None
        if scaler is not None:
            scale_tensor = getattr(scaler, "_scale", None)
            tracker_tensor = getattr(scaler, "_growth_tracker", None)
            if not isinstance(scale_tensor, torch.Tensor) or not isinstance(
                tracker_tensor, torch.Tensor
            ):
                return None
        elif scaled:  # another kind of scaler (a policy object): the general path reads it
            return None
        if self._on_cpu:
            loss_value = loss.item() if isinstance(loss, torch.Tensor) else float(loss)
            grad_amax = _abs_max(grads).item() if scaled else None
            grad_norm = math.hypot(*[norm.item() for norm in norms])
            if scale_tensor is None:
                scale_after, tracker = 1.0, 0.0
            else:
                scale_after = scale_tensor.item()
                tracker = tracker_tensor.item()  # type: ignore[union-attr]
            found_inf = found.item() if found is not None else 0.0  # a sum (_scaler_found_inf)
        else:  # one host copy for all of them: each item() would be a device sync
            queued = [loss.detach() if isinstance(loss, torch.Tensor) else None, *norms]
            if scaled:
                queued += [_abs_max(grads), scale_tensor, tracker_tensor]
            if found is not None:
                queued.append(found)
            device = self.device
            host = torch.stack([
                t.reshape(()).to(device=device, dtype=torch.float64) for t in queued
                if t is not None
            ]).tolist()  # fmt: skip
            loss_value = host.pop(0) if isinstance(loss, torch.Tensor) else float(loss)
            grad_norm = math.hypot(*host[: len(norms)])
            rest = host[len(norms) :]
            grad_amax, scale_after, tracker = rest[:3] if scaled else (None, 1.0, 0.0)
            found_inf = rest[-1] if found is not None else 0.0
        if found_inf > 0 or not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
            return None  # a skip or an overflow: its parameter-gradient statistics are due
        now = time.perf_counter()
        durations = self._recent_durations
        durations.append(now - self._last_step_time)
        record = _make_step_record(
            step=self.step_index,
            loss=loss_value,
            scale=self._scale_used,
            growth_tracker=int(tracker),
            lr=float(self._lr_used),
            grad_norm=grad_norm,
            steps_per_s=len(durations) / max(sum(durations), 1e-9),
            time=now - self._started,
            grad_amax=grad_amax,
        )
        self._write(record, stacklevel=4)  # the user's line that called step()
        self._scale_used = scale_after
        self._optimizer_stepped = False
        self._optimizer_calls[0] = 0
        self._lr_next = self.optimizer.param_groups[0]["lr"]
        first = grads[0]
        self._last_grads = ((weakref.ref(first), first._version),)
        self._last_record = record
        self._found_inf = None
        end = time.perf_counter()
        duration, self._last_step_time = end - self._last_step_time, end
        cadence = self.cadence
        cadence.account(duration, statistics=False, alarm=False, monitor_time=end - entered)
        self.step_index += 1
        collecting = cadence.collect_next(self.step_index)
        if collecting or self._module_handles:
            self._arm(collecting)
        return record

    def _repeated_call(self, grads: list[torch.Tensor]) -> StepRecord | None:
        """The last record, when this call repeats the last one: no optimizer step and the
        same gradients, untouched (a backward, `zero_grad` or the scaler's unscaling would
        have changed their version). Such a call would be recorded as a skipped step that
        never happened: it is left out, with one warning."""
        last = self._last_grads
        if self._optimizer_stepped or not last or not grads or self._last_record is None:
            return None
        now = self._first_grads(grads)
        if len(now) != len(last) or any(
            then() is not grad or version != grad._version
            for (then, version), grad in zip(last, now, strict=True)
        ):
            return None
        self._warn_once(
            "repeated",
            "AmpMonitor.step() called again with no backward or optimizer step since its "
            "last call: call it once per training step (this call is not recorded)",
            stacklevel=4,
        )
        return self._last_record

    def _first_grads(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The gradients whose versions tell a repeated step() call: the model's first, and
        with several optimizers each one's first (a GAN's discriminator may get a backward
        and its skip while the generator's gradients stay as they were)."""
        firsts = grads[:1]
        if self._multi is not None:
            tensors = self._multi.params
            for positions in self._multi.positions:
                grad = next((g for i in positions if (g := tensors[i].grad) is not None), None)
                if grad is not None:
                    firsts.append(local_tensor(grad) if self._sharded else grad)
        return firsts

    def _found_by_optimizer(self) -> torch.Tensor | None:
        """Several optimizers under a GradScaler: whether it skipped each (a 1-D tensor on
        the device, > 0: skipped); None without a GradScaler. One that was called has the
        flag GradScaler handed it (a fused one skips inside; a plain one is called only
        when none was found); one that was not was skipped when GradScaler's step() saw it
        (its record's stage is STEPPED: `_maybe_opt_step` leaves out only an optimizer with
        inf/NaN gradients). The records' flags are not read after update(): it adds all of
        them into the first one's tensor, in place."""
        held = self._scaler_states
        if held is None:
            return None
        current = self._scaler_optimizer_states()
        keys = [id(optimizer) for optimizer in self.optimizers]
        # step() called before update(): this step's records are still the scaler's own.
        if current is not None and current is not held and any(k in current for k in keys):
            held = current
        flags: list[torch.Tensor | float] = []
        for position, key in enumerate(keys):
            if self._optimizer_calls[position]:
                found = self._found_when_called[position]
                flags.append(0.0 if found is None else found.to(self.device, torch.float64))
            else:
                state = held.get(key)  # .get: the scaler's defaultdict gains no entry
                flags.append(1.0 if state and state.get("stage") is OptState.STEPPED else 0.0)
        if all(isinstance(flag, float) for flag in flags):
            return torch.tensor(flags, dtype=torch.float64, device=self.device)
        return torch.stack([torch.as_tensor(flag, dtype=torch.float64, device=self.device)
                            for flag in flags])  # fmt: skip

    def _outcomes(self, found_by: tuple[float, ...] | None) -> tuple[str, ...]:
        """What each watched optimizer did this step: "skipped" (the scaler found inf/NaN
        in its gradients: a plain optimizer was not called, a fused one skipped inside its
        kernel), "stepped", or "idle" (not stepped, and no scaler skip recorded for it)."""
        return tuple(
            "skipped" if found_by is not None and found_by[index] > 0
            else "stepped" if calls else "idle"
            for index, calls in enumerate(self._optimizer_calls)
        )  # fmt: skip

    def _warn_once(self, kind: str, message: str, *, stacklevel: int = 3) -> None:
        """One RuntimeWarning of each kind per monitor; the default stacklevel points at
        the line of the user's loop that called step()."""
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)

    def _cheap_signals(
        self, loss: torch.Tensor | float, grads: list[torch.Tensor], *, amax: bool
    ) -> _CheapSignals:
        """The signals of every step, read with as few operations as possible: one fused
        norm kernel over the gradients and one host copy (on a CPU, a few `item()` reads,
        which cost less than stacking the scalars first)."""
        norms: Sequence[torch.Tensor] = ()
        if grads:
            # Every gradient's dtype, not the first one's: ~0.5 us for 6 gradients, 1.7 us
            # for 30 (a layer converted alone has its FP16 norm overflow, its BF16 rounded).
            dtypes = {grad.dtype for grad in grads}
            if dtypes != self._norm_key:
                self._norm_key = dtypes
                self._grad_norm_dtype = _grad_norm_dtype(dtypes)
                # _plain_step takes these dtypes from now on (not float64 beside 16-bit).
                plain = not isinstance(self._grad_norm_dtype, str)
                self._plain_key = dtypes if plain else None
            dtype = self._grad_norm_dtype
            if isinstance(dtype, str):  # float64 beside 16-bit gradients: each its own
                norms = list(_tensor_norms(grads).unbind())
            else:
                try:
                    norms = torch._foreach_norm(grads, 2, dtype=dtype)
                except RuntimeError:  # tensors on several devices
                    norms = [_total_norm(grads)]
        scaler = self._scaler_tensors()
        found = self._found_inf
        if self._on_cpu:
            # item() per value: a third of the cost of stacking them for one tolist().
            loss_value = loss.item() if isinstance(loss, torch.Tensor) else float(loss)
            grad_amax = _abs_max(grads).item() if amax else None
            norm_values = [norm.item() for norm in norms]
            if scaler is None:
                scale_after, tracker = self._current_scale_host(), 0.0
            else:
                scale_after = scaler[0].item()
                tracker = scaler[1].item() if scaler[1] is not None else 0.0
            found_values = found.reshape(-1).tolist() if found is not None else [0.0]
        else:
            # One host copy for all of them: each item() would be a device sync.
            device = self.device
            queued: list[torch.Tensor] = []
            if isinstance(loss, torch.Tensor):
                queued.append(loss.detach())
            if amax:
                queued.append(_abs_max(grads))
            queued += norms
            if scaler:
                queued += [scaler[0], *(() if scaler[1] is None else (scaler[1],))]
            if found is not None:
                queued += found.reshape(-1).unbind()
            host = torch.stack(
                [t.reshape(()).to(device=device, dtype=torch.float64) for t in queued]
            ).tolist()
            loss_value = host.pop(0) if isinstance(loss, torch.Tensor) else float(loss)
            grad_amax = host.pop(0) if amax else None
            norm_values, host = host[: len(norms)], host[len(norms) :]
            scale_after = host.pop(0) if scaler else self._current_scale_host()
            tracker = host.pop(0) if scaler and scaler[1] is not None else 0.0
            found_values = host if found is not None else [0.0]
        if math.inf in norm_values and len(norm_values) == len(grads):
            norm_values = _norms_again_in_float64(norm_values, grads)
        grad_norm = math.hypot(*norm_values)  # scaled: no overflow of the squares
        if not math.isfinite(grad_norm) and any(map(math.isnan, norm_values)):
            grad_norm = math.nan  # hypot says inf when an inf is among NaNs; the norm, NaN
        found_by = tuple(found_values) if self._multi is not None and found is not None else None
        return _CheapSignals(loss_value, grad_norm, scale_after, tracker, sum(found_values),
                             grad_amax, found_by)  # fmt: skip

    def _scaler_tensors(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The enabled GradScaler's scale and growth-tracker tensors (read without a sync
        of their own), or None for no scaler, a disabled one or another kind."""
        scaler = self._grad_scaler
        if scaler is not None:
            scale = getattr(scaler, "_scale", None)
            if isinstance(scale, torch.Tensor):
                tracker = getattr(scaler, "_growth_tracker", None)
                return scale, tracker if isinstance(tracker, torch.Tensor) else None
        return None

    def _queue_statistics(
        self,
        pack: HostPack,
        grads: list[torch.Tensor],
        norms: torch.Tensor | None,
        *,
        activations: bool,
        full: bool,
    ) -> StatsPlan:
        """Queue every statistic as device tensors in `pack`; returns how to read them.
        `grads`: the parameter gradients as step() read them (strided, this rank's), in the
        order of `_param_layer`; `full`: a statistics step (the lost updates too), not an
        alarm step's parameter gradients; `activations`: with the activation statistics
        (not on a compiled model)."""
        if len(grads) == len(self._param_layer):  # every parameter has its gradient
            param_layers = self._all_param_layers
        else:
            param_layers = tuple(layer for layer, p in self._param_layer if p.grad is not None)
        act_segments = self._act_segments if activations else []
        groups = self._param_groups(grads)
        lost_kind: str | None = None
        if groups and full:
            lost = (
                self._lost_updates(grads, pack) if self._multi is None
                else self._lost_updates_of_optimizers(pack)
            )  # fmt: skip
            if lost is not None:
                pack.add("lost_updates", lost)
                lost_kind = "actual" if self._params_dtype() == torch.float16 else (
                    "fp16_would_lose"
                )  # fmt: skip
        plan = StatsPlan(
            layer_names=self._layer_names,
            param_groups=tuple(groups),
            act_segments=tuple(act_segments),
            param_layers=param_layers,
            forward_layers=tuple(layer for layer, _ in self._forward_checks) if full
            else (),
            scale=self._scale_used,
            memory=self._memory(grads),
            formats=self.formats if self.format_shares else (),
            lost_update_kind=lost_kind,
            lost_update_sampled=lost_kind is not None and self._updates.sampled,
            scratch=self._scratch,
            activations=activations,
        )  # fmt: skip
        if norms is not None:
            pack.add("norms", norms)
        if plan.forward_layers:
            self._queue_forward_checks(pack)
        segments = plan.segments
        if segments:
            rows, amax = segment_rows(segments)
            pack.add("rows", rows)
            if act_segments:
                pack.add("act_amax", amax[len(groups) :])
        if groups and plan.formats:
            # The raw pattern counts of the parameter gradients: the format shares are read
            # from them on the host.
            counts = [group.segment.patterns for group in groups]
            pack.add("pattern_counts", torch.cat([c for c in counts if c is not None]).double())
        return plan

    def _used_passes(self) -> list[_ForwardPass]:
        """The step's forward passes that a backward went through (all of them when none
        did: their figures are all there is)."""
        used = [forward_pass for forward_pass in self._passes if forward_pass.backpropagated]
        return used or self._passes

    def _saved_at_once(self) -> dict[tuple[int, torch.dtype], int]:
        """The bytes autograd held for backward at most at once: the passes of one group
        together (a tensor saved twice counted once), the largest group."""
        groups: dict[int, dict[tuple[int, torch.dtype], int]] = {}
        for forward_pass in self._used_passes():
            groups.setdefault(forward_pass.group, {}).update(forward_pass.saved)
        return max(groups.values(), key=lambda saved: sum(saved.values()), default={})

    def _queue_forward_checks(self, pack: HostPack) -> None:
        """Whether each leaf output was finite, in forward order: as they are when all were
        read on the host; else from the extremes, tested on the device at once (a flag read
        on the host becomes extremes that test the same)."""
        checks = [check for _, check in self._forward_checks]
        flags = [check for check in checks if isinstance(check, bool)]
        if len(flags) == len(checks):
            pack.add_host("forward_finite", [1.0 if finite else 0.0 for finite in flags])
            return
        device = self.device
        finite, nonfinite = torch.zeros((), device=device), torch.full((), math.nan, device=device)
        pairs = [
            check if not isinstance(check, bool) else (finite, finite) if check else (
                nonfinite, nonfinite
            )
            for check in checks
        ]  # fmt: skip
        lows = torch.stack([low.to(device) for low, _ in pairs])
        highs = torch.stack([high.to(device) for _, high in pairs])
        pack.add("forward_finite", (lows.isfinite() & highs.isfinite()).to(torch.float64))

    def _params_dtype(self) -> torch.dtype:
        # The model's first parameter (the layers list them in the model's own order).
        return self._params[0].dtype if self._params else torch.float32

    def _param_groups(self, grads: list[torch.Tensor]) -> list[ParamGroup]:
        """One pattern-count segment per gradient dtype (float16, bfloat16, else float32),
        counted through one chunk buffer (no parameter-sized copy)."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for grad in grads:
            if grad.is_complex():  # its real and imaginary parts, as the lost updates take them
                grad = torch.view_as_real(grad)
            dtype = grad.dtype
            if dtype not in _NARROW_DTYPES:
                dtype = torch.float32
            # A gradient with a graph (backward(create_graph=True)) is read detached; others
            # as they are (a detach makes a tensor object: a microsecond per gradient).
            by_dtype.setdefault(dtype, []).append(grad.detach() if grad.requires_grad else grad)
        groups: list[ParamGroup] = []
        for dtype, members in by_dtype.items():
            subgroups: list[tuple[list[torch.Tensor], bool | None]]
            split = self.format_shares and members[0].device.type == "cpu"
            if dtype == torch.float32 and split:
                # float32 gradients holding BF16 values (BF16 matmuls under autocast) have
                # nothing in their low 16 bits: their patterns answer every threshold. One
                # cheap pass per tensor sorts them out (a host sync: only on a CPU, and only
                # for the format shares).
                low = torch.stack([count_low_bits_set([g]) for g in members]).tolist()
                subgroups = [
                    ([g for g, bits in zip(members, low, strict=True) if not bits], True),
                    ([g for g, bits in zip(members, low, strict=True) if bits], False),
                ]
            else:
                subgroups = [(members, None if dtype == torch.float32 else True)]
            for chosen, top_exact in subgroups:
                if chosen:
                    groups.append(self._param_group(dtype, chosen, top_exact))
        return groups

    def _param_group(
        self, dtype: torch.dtype, members: list[torch.Tensor], top_exact: bool | None
    ) -> ParamGroup:
        segment = group_segment(
            members, dtype, self._scratch, keep_patterns=self.format_shares, top_exact=top_exact
        )
        return ParamGroup(segment, tuple(members))

    def _lost_updates(self, grads: list[torch.Tensor], pack: HostPack) -> torch.Tensor | None:
        """[updates intended, intended and applied, intended to weights FP16 cannot hold]
        (see `LostUpdateCheck.count`):
        among weights with a non-zero gradient, those whose FP16 weight would not change
        (FP32 master weights) or did not (FP16 weights). The weights the optimizer updates
        (its parameters, in or outside the model), all up to 2**20 of them, a fixed random
        sample of 2**20 beyond (the record gives the bound). `grads`: the model's, as step()
        read them (used where the optimizer's parameters are the model's; where they are
        not, the updates intended in the optimizer's go in `pack` as "lost_intended", as
        with several optimizers, for the model's gradient histogram counts others). None
        when the optimizer was not called (a skipped step) or the gradients changed since;
        a step the scaler skipped inside a fused optimizer is dropped on decoding."""
        params = self._updated_params()
        if not self._one_same:  # the gradients of the parameters the optimizer updates
            held = [grad for p in self._one_params() if (grad := p.grad) is not None]
            grads = _strided([local_tensor(g) for g in held] if self._sharded else held)
            counts = self._updates.count(params, grads)
            if counts is not None:
                pack.add("lost_intended", _nonzero_count(grads))
            return counts
        return self._updates.count(params, grads)

    def _same_as_model(self, watched: _WatchedParams) -> bool:
        return len(watched.params) == len(self._params) and all(
            mine is theirs for mine, theirs in zip(watched.params, self._params, strict=True)
        )

    def _one_params(self) -> tuple[torch.Tensor, ...]:
        """The one optimizer's parameters, read again where its groups changed since
        (`add_param_group`); () without an optimizer."""
        if self._one is None:
            return ()
        current = self._one.current(self.optimizers)
        if current is not self._one:
            self._one, self._one_same = current, self._same_as_model(current)
        return current.params

    def _updated_params(self) -> list[torch.Tensor]:
        """The parameters the one optimizer updates that have a gradient (this rank's)."""
        params = [p for p in self._one_params() if p.grad is not None]
        return [local_tensor(p) for p in params] if self._sharded else params

    def _lost_updates_of_optimizers(self, pack: HostPack) -> torch.Tensor | None:
        """`_lost_updates` with several optimizers: over the parameters of those that
        stepped, each one's weights and gradients read as it stepped (`keep_part`); the
        updates intended in all those parameters go in `pack` as "lost_intended" (the
        model's other gradients may belong to an optimizer that did not step)."""
        assert self._multi is not None
        counts = self._updates.count_part(self._multi.tensors())
        intended = self._updates.intended
        if counts is None or intended is None:
            return None
        pack.add("lost_intended", intended)
        return counts

    def _memory(self, grads: list[torch.Tensor]) -> Memory:
        """Bytes by dtype; the parameters' and optimizer state's are counted again only
        when the parameters' dtypes change (a layer converted mid-run), an optimizer's
        state is replaced (`load_state_dict`, which also casts it to the parameters'
        dtypes) or its number of entries changes (the state appears at the first step):
        the key is read from the parameters' dtypes and the state's dicts, not from its
        tensors (~2 us for 30 parameters, against ~30 us for their Adam state's tensors).
        A state tensor swapped by hand for one of another dtype or size, or a parameter's
        `.data` for one of another size, is not seen until one of those changes.
        `grads`: the gradients as step() read them (this rank's)."""
        key = (
            tuple([param.dtype for param in self._params]),
            *[
                (id(optimizer.state), sum(map(len, optimizer.state.values())))
                for optimizer in self.optimizers
            ],
        )
        if self._static_bytes is None or self._static_bytes[0] != key:
            state_tensors = [
                value
                for optimizer in self.optimizers
                for state in optimizer.state.values()
                for value in state.values()
                if isinstance(value, torch.Tensor)
            ]
            params = bytes_by_dtype(local_tensor(p) for _, p in self._param_layer)
            # FSDP2's optimizer state is sharded as its parameters are (DTensors): this
            # rank's share, not the global size.
            self._static_bytes = (key, params, bytes_by_dtype(map(local_tensor, state_tensors)))
        _, params, optimizer = self._static_bytes
        peak = (
            int(torch.cuda.max_memory_allocated(self.device))
            if self.device.type == "cuda"
            else None
        )
        activations: dict[torch.dtype, int] = {}
        for (_, dtype), size in self._saved_at_once().items():
            activations[dtype] = activations.get(dtype, 0) + size
        return Memory(
            params=params,
            grads=bytes_by_dtype(grads),
            optimizer=optimizer,
            activations={dtype_name(dtype): size for dtype, size in activations.items()},
            peak_device=peak,
        )

    # -- end -----------------------------------------------------------------------------

    def close(self, status: str = "completed", error: str | None = None) -> None:
        """Write the end record and remove every hook. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self._plain_ready = False
        self._quant.arm(False)
        for handle in self._handles:
            handle.remove()
        # Closed inside this thread's forward: the tap is left now. A forward on another
        # thread leaves it at its end, which only its thread can (see _remove_module_hooks).
        with self._tap_lock:
            if self._tapping and self._tap_thread == threading.get_ident():
                self._tapping = False
                _SAVED_TENSOR_TAP.leave()
        self._remove_module_hooks()
        self._write_header()
        elapsed = time.perf_counter() - self._started
        self._write(EndRecord(status=status, error=error, steps=self.step_index, elapsed=elapsed))
        if self._reduction_check is not None:  # DDP cannot remove a hook: it goes inert
            self._reduction_check.active = False
        try:
            self.writer.close()
        except OSError:  # already reported when the writes failed
            pass

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close("completed")
        elif isinstance(exc, KeyboardInterrupt):
            self.close("stopped")
        else:
            self.close("failed", one_line_error(exc))


def _compiled_original(model: nn.Module) -> nn.Module | None:
    """The model inside `torch.compile`'s wrapper (held as `_orig_mod`), None for another."""
    original = getattr(model, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


def _is_compiled(model: nn.Module) -> bool:
    """Whether any of the model's modules runs compiled: a `torch.compile` wrapper (the
    model, or a submodule replaced by one) or a `module.compile()`d module."""
    return any(
        _compiled_original(module) is not None
        or getattr(module, "_compiled_call_impl", None) is not None
        for module in model.modules()
    )


def _layer_name(model: nn.Module, name: str, module: nn.Module) -> str:
    """A layer's name as the model names it: a compiled model's layers read `0`, as they
    do uncompiled, not `_orig_mod.0` (so its runs overlay the uncompiled model's), and so
    do those of a compiled DDP model (`torch.compile(DDP(model))`), not `module.0`, as
    the monitor names a DDP model's layers uncompiled (`reduction.watched_module`)."""
    original = _compiled_original(model)
    if original is not None:
        name = _inside(name, "_orig_mod")
        if isinstance(original, nn.parallel.DistributedDataParallel):
            name = _inside(name, "module")
    return name or type(module).__name__


def _inside(name: str, wrapper: str) -> str:
    """A module's name as its wrapper's child `wrapper` names it ('' for that child)."""
    if name == wrapper or name.startswith(wrapper + "."):
        return name[len(wrapper) + 1 :]
    return name


def _nonzero_count(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The values of `tensors` that are not zero (NaN included), on the device (int64); a
    complex tensor's real and imaginary parts counted apart (see `updates.as_real`)."""
    if not tensors:
        return torch.zeros((), dtype=torch.int64)
    return torch.stack([torch.count_nonzero(t) for t in as_real(tensors)]).sum()


def _strided(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Sparse gradients (`nn.Embedding(sparse=True)`) as dense tensors, others as they are:
    the norms and the counts read strided tensors only. A sparse gradient costs a dense copy
    while its step is recorded (the values it leaves out are zeros, and are counted so)."""
    return [g if g.layout is torch.strided else g.to_dense() for g in grads]


def _tensor_norms(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of each gradient tensor (float64): one fused kernel where torch has it;
    16-bit gradients are summed in float32 (their own dtype would overflow at 65504)."""
    narrow = [g.dtype in (torch.float16, torch.bfloat16) for g in grads]
    try:
        if all(narrow) or not any(narrow):
            norms = torch._foreach_norm(
                list(grads), 2, dtype=torch.float32 if all(narrow) else None
            )
            return torch.stack(norms).double()  # stack promotes float32 with float64
    except RuntimeError:  # tensors on several devices
        pass
    return torch.stack(
        [
            torch.linalg.vector_norm(g, dtype=torch.float32 if small else None).double()
            for g, small in zip(grads, narrow, strict=True)
        ]
    )


def _norms_again_in_float64(norms: Sequence[float], grads: Sequence[torch.Tensor]) -> list[float]:
    """Each gradient's norm, taken again in float64 where it came out inf: a float32 sum of
    squares overflows for a norm above ~1.8e19 though every element is finite (an
    exploding run's). Runs only on such a step; an inf element still gives inf."""
    return [
        torch.linalg.vector_norm(grad, dtype=torch.float64).item() if norm == math.inf else norm
        for norm, grad in zip(norms, grads, strict=True)
    ]


def _without_norm_overflow(host: HostValues, grads: Sequence[torch.Tensor]) -> HostValues:
    """`host` with the gradient norms that float32 overflowed taken again in float64 (and
    the total norm from them); unchanged on other steps: at no cost where the total norm is
    in `host` and finite (a norm of inf makes it inf or NaN), else at one numpy call."""
    if "norms" not in host:
        return host
    # HostPack's name of the total norm (the one the step's signals read), not a record.
    if "grad_norm" in host and math.isfinite(host.scalar("grad_norm")):
        return host
    norms = host["norms"]
    if not np.isposinf(norms).any() or len(norms) != len(grads):
        return host
    fixed = _norms_again_in_float64(norms.tolist(), grads)
    scalars = host.scalars
    if not np.isnan(norms).any():  # with a NaN among them the total is NaN as it was
        # HostPack's name of the total norm (the one the step's signals read), not a record.
        scalars = dict(scalars, grad_norm=math.hypot(*fixed))
    return dataclasses.replace(
        host, parts={**host.parts, "norms": np.array(fixed, dtype=np.float64)}, scalars=scalars
    )


def _total_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients: one fused kernel over the list where torch has it
    (half the time of clip_grad's helper), 16-bit gradients summed in float32."""
    try:
        wide = all(g.dtype in (torch.float16, torch.bfloat16) for g in grads)
        norms = torch._foreach_norm(list(grads), 2, dtype=torch.float32 if wide else None)
        total: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms).double())
    except RuntimeError:  # tensors on several devices
        total = torch.linalg.vector_norm(_tensor_norms(grads).cpu())
    return total


_ABS_MAX_COPY = 2**20


def _abs_max(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """max |g| over all gradients (inf or NaN when a gradient holds them): on CUDA one fused
    inf-norm kernel over the list. On a CPU that norm takes a slow path (3-4x the 2-norm's
    time): up to _ABS_MAX_COPY elements the gradients are concatenated (one copy, the
    fastest on small models: dispatch costs more than the pass), beyond it one min/max pass
    per tensor (aminmax), never a parameter-sized copy."""
    if all(g.device.type == "cpu" for g in grads):
        if sum(g.numel() for g in grads) <= _ABS_MAX_COPY:
            return torch.cat([g.reshape(-1) for g in grads]).abs_().max()
        bounds = [torch.aminmax(g) for g in grads]
        lows = torch.stack([low for low, _ in bounds])
        highs = torch.stack([high for _, high in bounds])
        return torch.maximum(highs.max(), -lows.min())
    try:
        norms = list(torch._foreach_norm(list(grads), math.inf))
    except RuntimeError:  # tensors on several devices
        norms = [torch.linalg.vector_norm(g, math.inf).cpu() for g in grads]
    return torch.stack(norms).max()


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether every element is finite (a CPU tensor): its sum is finite only then (an inf or
    a NaN stays in every partial sum), and is not only when a NaN or inf is there or finite
    values overflow the sum, which the exact check then settles (FP16 values are summed in
    float32, where they cannot overflow). A sum costs a fifth to a half of min/max."""
    if tensor.dtype == torch.float16:
        total = float(torch.sum(tensor, dtype=torch.float32))
    else:
        total = float(torch.sum(tensor))
    if math.isfinite(total):
        return True
    return bool(torch.isfinite(tensor).all())


def _hysteresis(scaler: Any) -> int | None:
    """A loss-scaling policy's hysteresis tracker (training.scalers), a host int; None for
    scalers without hysteresis."""
    tracker = getattr(scaler, "hysteresis_tracker", None)
    return tracker if isinstance(tracker, int) else None


def one_line_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
