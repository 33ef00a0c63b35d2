"""The quantized linear layers' statistics (`StepStats.quant`): how each layer's input,
weight and output gradient fared in their low-precision format. Needs torch.

Two kinds of layers report, both measured by `lowprec.stats`:
- layers that measure themselves (`SelfMeasuringLayer`: the delayed-scaling FP8 linear,
  the emulated MX/NVFP4 linears). The collector sets their `collect_stats` on statistics
  steps only and takes their pending measurements after the step.
- torchao's `Float8Linear`, which does not: on statistics steps the collector hooks it
  (a forward pre-hook for the input and the weight, a tensor hook on the output for the
  output gradient) and measures the same cast torchao makes, with the same scale
  (`lowprec.fp8.torchao_cast`; tests check the recomputed FP8 values equal torchao's bit
  for bit).

Hooks are in place only on statistics steps, so other steps pay nothing. The measurements
stay on the device until `take()`, which reads all of them, every layer's, in one host
copy per device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from fpexplorer.training.lowprec.fp8 import torchao_cast
from fpexplorer.training.lowprec.stats import (
    PendingQuantStats,
    SelfMeasuringLayer,
    measure_quantized,
    read_pending_stats,
)
from fpexplorer.training.records import QuantTensorStats


def is_torchao_float8_linear(module: nn.Module) -> bool:
    """torchao's Float8Linear, told by its class (no torchao import on the monitor's side)."""
    kind = type(module)
    return kind.__name__ == "Float8Linear" and kind.__module__.startswith("torchao.")


class QuantCollector:
    """Arms the quantized layers of a model on statistics steps and gathers their records."""

    def __init__(self, model: nn.Module) -> None:
        self.self_measuring: list[SelfMeasuringLayer] = []
        # Any: torchao's Float8Linear, whose `config` is not nn.Module's.
        self.torchao: list[tuple[str, Any]] = []
        for name, module in model.named_modules():
            if isinstance(module, SelfMeasuringLayer):
                self.self_measuring.append(module)
            elif is_torchao_float8_linear(module):
                self.torchao.append((name, module))
        self._handles: list[RemovableHandle] = []
        self._pending: list[PendingQuantStats] = []
        self.armed = False

    @property
    def active(self) -> bool:
        """The model has quantized layers to report on."""
        return bool(self.self_measuring or self.torchao)

    def arm(self, collecting: bool) -> None:
        """Measure the next step (statistics step) or not."""
        if collecting == self.armed or not self.active:
            return
        self.armed = collecting
        for module in self.self_measuring:
            module.collect_stats = collecting
        if collecting:
            for name, module in self.torchao:
                self._handles.append(module.register_forward_pre_hook(self._forward_pre(name)))
                self._handles.append(module.register_forward_hook(self._forward(name)))
        else:
            for handle in self._handles:
                handle.remove()
            self._handles = []

    def take(self) -> tuple[QuantTensorStats, ...]:
        """The records of the step just taken, read in one host copy per device, and
        forget them: torchao's layers' casts in the order they were made, then the layers
        that measure themselves, in model order, each in the order of its casts."""
        return read_pending_stats(self._take_pending())

    def discard(self) -> None:
        """Forget what a step measured (a step whose statistics are not recorded), without
        reading it."""
        self._take_pending()

    def _take_pending(self) -> list[PendingQuantStats]:
        pending, self._pending = self._pending, []
        for module in self.self_measuring:
            pending.extend(module.take_pending_stats())
        return pending

    # -- torchao's Float8Linear -------------------------------------------------------------

    def _measure(self, name: str, role: str, module: Any, tensor: torch.Tensor) -> None:
        """Measure the cast torchao's config makes of `tensor` in `role`."""
        cast = torchao_cast(module.config, role, tensor)
        if cast is not None:
            measured = measure_quantized(name, role, cast.input, cast, cast.element.name)
            self._pending.append(measured)

    def _forward_pre(self, name: str) -> Any:
        def on_forward_pre(module: Any, args: Any) -> None:
            if not torch.is_grad_enabled() or not args:
                return
            x = args[0]
            # Float8Linear.forward casts its input to the CUDA autocast dtype first.
            if torch.is_autocast_enabled("cuda"):
                x = x.to(torch.get_autocast_dtype("cuda"))
            self._measure(name, "input", module, x)
            self._measure(name, "weight", module, module.weight)

        return on_forward_pre

    def _forward(self, name: str) -> Any:
        def on_forward(module: nn.Module, args: Any, output: Any) -> None:
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                return

            def on_backward(grad: torch.Tensor) -> None:
                # The gradient of the output is the matmul's output gradient (the bias is
                # added after it).
                self._measure(name, "grad_output", module, grad)

            output.register_hook(on_backward)  # type: ignore[no-untyped-call]

        return on_forward
