"""The quantized linear layers' statistics (`StepStats.quant`): how each layer's input,
weight and output gradient fared in their low-precision format. Needs torch.

Two kinds of layers report:
- layers that measure themselves (the delayed-scaling FP8 linear, the emulated MX/NVFP4
  linears): attribute `collect_stats`, method `take_quant_stats()`. The collector sets the
  flag on statistics steps only and takes their records after the step.
- torchao's `Float8Linear`, which does not: on statistics steps the collector hooks it
  (a forward pre-hook for the input and the weight, a tensor hook on the output for the
  output gradient) and measures the same cast torchao makes, with the same scale
  (`lowprec.fp8.tensorwise_scale` / `rowwise_scale`, the formula of torchao's
  `amax_to_scale`; tests check the recomputed FP8 values equal torchao's bit for bit).

Hooks are in place only on statistics steps, so other steps pay nothing. The measurements
stay on the device until `take()`, which reads them in one host copy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from fpexplorer.training.lowprec.fp8 import (
    PendingCast,
    format_name,
    measure_cast,
    read_quant_stats,
    rowwise_scale,
    tensorwise_scale,
)
from fpexplorer.training.records import QuantTensorStats


def is_torchao_float8_linear(module: nn.Module) -> bool:
    """torchao's Float8Linear, told by its class (no torchao import on the monitor's side)."""
    kind = type(module)
    return kind.__name__ == "Float8Linear" and kind.__module__.startswith("torchao.")


class QuantCollector:
    """Arms the quantized layers of a model on statistics steps and gathers their records."""

    def __init__(self, model: nn.Module) -> None:
        # Any: these modules' own attributes (collect_stats, config) are not nn.Module's.
        self.self_measuring: list[Any] = []
        self.torchao: list[tuple[str, Any]] = []
        for name, module in model.named_modules():
            if callable(getattr(module, "take_quant_stats", None)):
                self.self_measuring.append(module)
            elif is_torchao_float8_linear(module):
                self.torchao.append((name, module))
        self._handles: list[RemovableHandle] = []
        self._pending: list[PendingCast] = []
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
        """The records of the step just taken (layers in model order, then roles in the
        order they were cast), and forget them."""
        pending, self._pending = self._pending, []
        stats = list(read_quant_stats(pending))
        for module in self.self_measuring:
            stats.extend(module.take_quant_stats())
        return tuple(stats)

    def discard(self) -> None:
        """Forget what a step measured (a step whose statistics are not recorded)."""
        self._pending = []
        for module in self.self_measuring:
            module.take_quant_stats()

    # -- torchao's Float8Linear -------------------------------------------------------------

    def _measure(self, name: str, role: str, module: Any, tensor: torch.Tensor) -> None:
        """Measure the cast torchao's config makes of `tensor` in `role`."""
        config = module.config
        cast = {
            "input": config.cast_config_input,
            "weight": config.cast_config_weight,
            "grad_output": config.cast_config_grad_output,
        }[role]
        if cast.scaling_type.value == "disabled":
            return
        fmt = format_name(cast.target_dtype)
        if cast.scaling_granularity.value == "tensorwise":
            scale = tensorwise_scale(tensor.detach().abs().max(), fmt)
            if config.round_scales_to_power_of_2:
                scale = torch.exp2(torch.floor(torch.log2(scale)))
            self._pending.append(measure_cast(name, role, fmt, tensor, scale, per_tensor=True))
        else:
            # Axiswise: torchao scales the input and the output gradient by row (a token)
            # and the weight by output feature: each along the reduction dimension.
            rows = tensor.reshape(-1, tensor.shape[-1])
            scale = rowwise_scale(rows, fmt)
            self._pending.append(measure_cast(name, role, fmt, rows, scale, per_tensor=False))

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
