"""Which of this rank's own parameter gradients went non-finite before they were
communicated. Needs torch.

Under DDP or FSDP2 the parameter gradients a rank holds after backward come from the
all-reduce (or the reduce-scatter): every rank holds the same non-finite sums, and they
cannot say where an overflow started. `check_before_reduction` puts a `PreReductionCheck`
in the model's communication (a DDP communication hook; a custom reduce-scatter on each
FSDP2 module) that flags the rank's own gradients first; `RankLogs.local_origin` (see
`ranks`) asks it on exchange steps, so an overflow that starts in a weight-gradient product
(finite activation gradients) is still traced to its rank and layer.

`AmpMonitor` installs it (one owner: `fpexplorer train` and a user's own torchrun loop get
the same), clears its flags after each step's record and makes it inert when it closes (DDP
has no way to remove a communication hook). A model whose communication is already
customised (DDP takes one communication hook: the user's fp16 compression, say) keeps its
own: `ReductionInUse` says which, and the monitor warns once.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class ReductionInUse(Exception):
    """The model's gradient communication is already customised by someone else."""


def watched_module(model: nn.Module) -> nn.Module:
    """The module the monitor watches: a DDP model's own module (its layer names are the
    unwrapped model's: `0`, not `module.0`), else the model itself (FSDP2's `fully_shard`
    keeps the model's modules and names)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        inner: nn.Module = model.module
        return inner
    return model


# A model keeps the check put in it (DDP cannot take a second hook, nor remove one): a
# later monitor of the same model takes it up again.
_installed: weakref.WeakKeyDictionary[nn.Module, PreReductionCheck] = weakref.WeakKeyDictionary()


def check_before_reduction(model: nn.Module) -> PreReductionCheck | None:
    """Watch this rank's own parameter gradients before they are communicated: a DDP
    communication hook on a DDP model, a custom reduce-scatter on each FSDP2 module of a
    `fully_shard` model; None for a model that is neither. Raises ReductionInUse (one line,
    naming what is there) when the model's communication is already customised: it stays."""
    # `torch.compile(DDP(model))`: the hook goes into the DDP inside the compiled wrapper
    # (its reducer runs outside the graph, as uncompiled).
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, nn.parallel.DistributedDataParallel):
        model = original
    check = _installed.get(model)
    if check is not None:
        check.clear()
        check.active = True
        return check
    if isinstance(model, nn.parallel.DistributedDataParallel):
        check = _hook_ddp(model)
    else:
        check = _hook_fsdp(model)
    if check is not None:
        _installed[model] = check
    return check


def _hook_ddp(model: nn.parallel.DistributedDataParallel) -> PreReductionCheck:
    # DDP keeps no public record of a registered hook; its logging data names one
    # (register_comm_hook and the built-in hooks both set it). Registering a second one
    # raises, but only after DDP has noted it: ask first.
    existing: Any = None
    try:
        existing = model._get_ddp_logging_data().get("comm_hook")  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError):
        pass
    if existing:
        raise ReductionInUse(f"DDP already has a communication hook ({existing})")
    check = PreReductionCheck(model.module)
    # DDP checks a hook's annotations against the real types, which this module's
    # postponed (string) annotations are not: register it through an unannotated lambda.
    try:
        model.register_comm_hook(None, lambda state, bucket: check.ddp_hook(state, bucket))
    except RuntimeError as error:  # "can only be called once": a hook DDP did not name
        raise ReductionInUse(f"DDP refused a communication hook ({error})") from None
    return check


def _hook_fsdp(model: nn.Module) -> PreReductionCheck | None:
    from torch.distributed.fsdp import FSDPModule

    sharded = [module for module in model.modules() if isinstance(module, FSDPModule)]
    if not sharded:
        return None
    for module in sharded:
        custom = _custom_reduce_scatter(module)
        if custom is not None:
            raise ReductionInUse(f"an FSDP2 module already has a custom reduce-scatter ({custom})")
    check = PreReductionCheck(model)
    for module in sharded:
        params = _reduced_by(module, FSDPModule)
        if params:
            module.set_custom_reduce_scatter(check.fsdp_reduce_scatter(params))
    return check


def _custom_reduce_scatter(module: nn.Module) -> str | None:
    """The class of a reduce-scatter set on an FSDP2 module by someone else, or None. FSDP2
    exposes the setter only: its parameter groups hold the one in use."""
    get_state = getattr(module, "_get_fsdp_state", None)
    groups = getattr(get_state(), "_fsdp_param_groups", ()) if callable(get_state) else ()
    for group in groups:
        name = type(getattr(group, "_reduce_scatter_comm", None)).__name__
        if name not in ("DefaultReduceScatter", "NoneType"):
            return name
    return None


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
    when its buffer is not finite. An inactive check (its monitor closed) flags nothing.
    """

    def __init__(self, watched: nn.Module) -> None:
        self.active = True
        # The monitor's layer names: the module that owns each parameter ("" is the root).
        self._layer: dict[int, str] = {}
        for name, module in watched.named_modules():
            for param in module.parameters(recurse=False):
                self._layer.setdefault(id(param), name or type(module).__name__)
        self._order = {id(param): index for index, param in enumerate(watched.parameters())}
        # (for each flag: its order in forward and its layer), flags (True = finite)
        self._pending: list[tuple[list[tuple[int, str]], torch.Tensor]] = []

    def clear(self) -> None:
        """Forget the flags of the step just recorded."""
        self._pending = []

    def _key(self, param: torch.Tensor) -> tuple[int, str]:
        return self._order.get(id(param), -1), self._layer.get(id(param), "")

    def ddp_hook(self, state: Any, bucket: Any) -> Any:
        """The DDP communication hook: flag, then DDP's default all-reduce."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        gradients = bucket.gradients()
        if gradients and self.active:
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
        if not self.active:
            return
        finite = buffer.isfinite().all().reshape(1)
        if buffer.device.type != "cpu" or not bool(finite):
            self._pending.append(([key], finite))

    def fsdp_reduce_scatter(self, params: list[nn.Parameter]) -> Any:
        """The reduce-scatter to set on an FSDP2 module that reduces `params`; its flag
        names the layer of the last of them in forward order (`fpexplorer train` shards
        each layer alone, so: that layer)."""
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
