"""FP8 training recipes: torchao's float8 linears, and delayed scaling as Transformer Engine
does it. Needs torch; torchao is imported by the torchao recipes only.

- `convert_torchao_fp8(model, "tensorwise" | "rowwise", device)`: torchao's
  `convert_to_float8_training`, dynamic ("current") scaling: each cast's scale comes from
  the tensor being cast. Tensorwise: one scale per tensor, E4M3 input and weight, E5M2
  output gradient. Rowwise: one power-of-two scale per row, E4M3 everywhere. On a CPU, or a
  GPU without FP8 units (compute capability below 8.9), torchao emulates the FP8 matmuls
  (`emulate=True`: the casts are real, the product is taken in FP32); on an FP8 GPU it uses
  the real kernels. One code path either way.
- `convert_delayed_fp8(model, DelayedScaling(...))`: the per-tensor E4M3/E5M2 cast of the
  tensorwise recipe, but each scale computed from a history of past amaxes, as Transformer
  Engine's `DelayedScaling` does: scale = fp8_max / amax_from_history / 2**margin, the
  history updated after the cast. A tensor whose amax jumps is therefore cast with the
  stale, too large scale and saturates at the format's largest value: the effect the
  monitor's `saturated` share shows, next to current scaling's zero.

Which linears are converted: those whose dimensions FP8 matmul kernels accept (both
divisible by 16), on every device, so that a CPU run emulates the layers a GPU would run in
FP8; optionally not the first and the last (`keep_first_last`), which practitioners keep in
BF16. `LinearChoice` says which were kept and why.

The measurement of a cast (amax, scale, saturated and flushed shares, SQNR) is
`lowprec.stats`', for every recipe: the monitor's hooks measure torchao's casts with the
scales of `tensorwise_scale` / `rowwise_scale`, and `DelayedScalingLinear` measures its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from fpexplorer.training.lowprec.stats import SelfMeasuringLayer
from fpexplorer.training.lowprec.tensorwise import TensorwiseQuantized, quantize_tensorwise

TorchaoRecipe = Literal["tensorwise", "rowwise"]
AmaxCompute = Literal["max", "most_recent"]

# The element format of each tensor of an FP8 linear, as the formats engine names it.
TENSORWISE_FORMATS: dict[str, str] = {
    "input": "float8_e4m3fn",
    "weight": "float8_e4m3fn",
    "grad_output": "float8_e5m2",  # gradients need range more than precision
}
ROWWISE_FORMATS: dict[str, str] = {
    "input": "float8_e4m3fn",
    "weight": "float8_e4m3fn",
    "grad_output": "float8_e4m3fn",
}
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
_FORMAT_OF_DTYPE = {dtype: name for name, dtype in _TORCH_DTYPES.items()}
# torchao clamps amax from below by this before dividing (float8_utils.EPS).
AMAX_EPS = 1e-12
# FP8 matmul kernels (cuBLAS, CUTLASS) need both dimensions of a weight divisible by 16.
KERNEL_MULTIPLE = 16


@functools.cache
def format_max(name: str) -> float:
    """The largest finite value of an FP8 format, from the exact formats engine
    (448 for E4M3FN, 57344 for E5M2)."""
    from fpexplorer.training.monitor.thresholds import format_range

    return float(format_range(name).max)


def format_name(dtype: torch.dtype) -> str:
    """The formats engine's name of an FP8 torch dtype."""
    return _FORMAT_OF_DTYPE[dtype]


# The compute capability from which torch's FP8 matmul (`torch._scaled_mm`) has kernels:
# per-tensor scales from Ada (8.9); torchao's rowwise recipe is built for the CUTLASS
# rowwise kernel of Hopper (9.0), so it is emulated below that.
KERNEL_CAPABILITY: dict[str, tuple[int, int]] = {"tensorwise": (8, 9), "rowwise": (9, 0)}


def needs_emulation(device: torch.device, recipe: TorchaoRecipe = "tensorwise") -> bool:
    """True where the recipe's FP8 matmuls must be emulated: a CPU, or a GPU below the
    recipe's compute capability."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability(device) < KERNEL_CAPABILITY[recipe]


def kernel_problem(linear: nn.Linear) -> str | None:
    """Why an FP8 matmul kernel cannot take this layer, or None when it can."""
    shape = (linear.out_features, linear.in_features)
    if any(size % KERNEL_MULTIPLE for size in shape):
        return (
            f"{linear.in_features}->{linear.out_features}: FP8 kernels need sizes "
            f"divisible by {KERNEL_MULTIPLE}"
        )
    return None


@dataclass(frozen=True, slots=True)
class LinearChoice:
    """Which linear layers a recipe quantizes, and why the others stay in high precision."""

    quantized: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]  # (layer, why it stays in BF16/FP32)

    def describe(self, what: str) -> str:
        """One line for the job's log: how many layers run in `what`, which do not, why."""
        count = len(self.quantized)
        line = f"{count} linear layer{'' if count == 1 else 's'} in {what}"
        if count == 0:  # not "0 linear layers in nvfp4 (... Hadamard ...)": nothing runs so
            line = f"no linear layer in {what}: the run is BF16 autocast only"
        if self.kept:
            kept = "; ".join(f"{name} ({why})" for name, why in self.kept)
            line += f"; kept in high precision: {kept}"
        return line


def choose_linears(
    model: nn.Module,
    *,
    keep_first_last: bool,
    problem: Callable[[nn.Linear], str | None] = kernel_problem,
) -> LinearChoice:
    """The nn.Linear layers of `model` (in registration order) to quantize."""
    if isinstance(model, nn.Linear):
        raise ValueError("the model is itself one nn.Linear: wrap it in a module to quantize it")
    linears = [
        (name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)
    ]
    quantized: list[str] = []
    kept: list[tuple[str, str]] = []
    ends = {linears[0][0], linears[-1][0]} if linears and keep_first_last else set()
    for name, linear in linears:
        why = "first/last layer, --bf16-first-last" if name in ends else problem(linear)
        if why is None:
            quantized.append(name)
        else:
            kept.append((name or type(model).__name__, why))
    return LinearChoice(tuple(quantized), tuple(kept))


# -- torchao ---------------------------------------------------------------------------------


# Loggers that speak while torchao is imported: torchao's own ("Failed to load" for each
# CUDA-only extension a CPU machine cannot load) and torch's pytree (a deprecation notice
# about a registration torchao makes). Neither concerns the float8 training used here.
_TORCHAO_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")


def torchao_float8() -> Any:
    """`torchao.float8`, imported with its start-up warnings held back: a new user reads
    "Failed to load ..._C_mxfp8...so" on every CPU run as an error, and it is not one.
    Errors still show; warnings after the import are untouched."""
    import logging

    loggers = [logging.getLogger(name) for name in _TORCHAO_IMPORT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        import torchao.float8 as float8
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return float8


def torchao_config(recipe: TorchaoRecipe, *, emulate: bool) -> Any:
    """torchao's `Float8LinearConfig` for a recipe, emulated or not."""
    import dataclasses

    config = torchao_float8().Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(config, emulate=emulate)


def convert_torchao_fp8(
    model: nn.Module, recipe: TorchaoRecipe, device: torch.device, *, keep_first_last: bool
) -> LinearChoice:
    """Swap the chosen linears of `model` (in place) for torchao's Float8Linear."""
    choice = choose_linears(model, keep_first_last=keep_first_last)
    chosen = set(choice.quantized)
    torchao_float8().convert_to_float8_training(
        model,
        config=torchao_config(recipe, emulate=needs_emulation(device, recipe)),
        module_filter_fn=lambda _module, name: name in chosen,
    )
    return choice


# -- torchao's scales -------------------------------------------------------------------------


def tensorwise_scale(amax: torch.Tensor, fmt: str) -> torch.Tensor:
    """torchao's per-tensor scale: fp8_max / max(amax, 1e-12), divided in float64, then
    float32 (`float8_utils.amax_to_scale`)."""
    return (format_max(fmt) / amax.double().clamp(min=AMAX_EPS)).float()


def rowwise_scale(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """torchao's rowwise scale (recipe "rowwise"): one per row of `x` (over its last
    dimension), the per-tensor formula rounded down to a power of two."""
    amax = x.detach().abs().amax(dim=-1, keepdim=True)
    return _power_of_two_below(tensorwise_scale(amax, fmt))


def _power_of_two_below(scale: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.floor(torch.log2(scale)))


def torchao_cast(config: Any, role: str, tensor: torch.Tensor) -> TensorwiseQuantized | None:
    """The cast torchao's `Float8LinearConfig` makes of `tensor` in `role` ("input",
    "weight", "grad_output"), recomputed with torchao's scale (the tests hold the FP8
    values equal to torchao's bit for bit); None when the config does not cast it.

    Axiswise (rowwise) scaling: torchao scales the input and the output gradient by row (a
    token) and the weight by output feature, each along the reduction dimension: one scale
    per row of the tensor flattened to (rows, last dimension)."""
    cast = {
        "input": config.cast_config_input,
        "weight": config.cast_config_weight,
        "grad_output": config.cast_config_grad_output,
    }[role]
    if cast.scaling_type.value == "disabled":
        return None
    fmt = format_name(cast.target_dtype)
    x = tensor.detach()
    if cast.scaling_granularity.value == "tensorwise":
        scale = tensorwise_scale(x.abs().max(), fmt)
        if config.round_scales_to_power_of_2:
            scale = _power_of_two_below(scale)
    else:
        x = x.reshape(-1, x.shape[-1])
        scale = rowwise_scale(x, fmt)
    return quantize_tensorwise(x.float(), fmt, scale)


# -- delayed scaling (Transformer Engine style) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class DelayedScaling:
    """Transformer Engine's `DelayedScaling` recipe settings, with its defaults."""

    amax_history: int = 1024  # amax_history_len
    amax_compute: AmaxCompute = "max"  # amax_compute_algo
    margin: int = 0


_ROLES = ("input", "weight", "grad_output")


def next_delayed_scale(
    history: torch.Tensor, scale: torch.Tensor, fmt: str, settings: DelayedScaling
) -> torch.Tensor:
    """Transformer Engine's scale update: fp8_max / amax / 2**margin, the amax the largest
    of the history ("max") or its newest entry ("most_recent"); a zero or non-finite amax
    keeps the previous scale."""
    amax = history.max() if settings.amax_compute == "max" else history[0]
    fresh = (format_max(fmt) / amax) / 2.0**settings.margin
    return torch.where((amax > 0) & amax.isfinite(), fresh, scale)


class _DelayedFP8Linear(torch.autograd.Function):
    """y = q(x) q(W)^T + b with per-tensor delayed scales; backward casts the output
    gradient to E5M2 the same way. The products are taken in FP32 (emulation)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
        module: DelayedScalingLinear,
    ) -> torch.Tensor:  # fmt: skip
        qx = module.cast("input", x)
        qw = module.cast("weight", weight)
        ctx.save_for_backward(qx, qw)
        ctx.module = module
        ctx.has_bias = bias is not None
        ctx.shapes = (x.shape, x.dtype, weight.dtype)
        out = qx.reshape(-1, qx.shape[-1]) @ qw.t()
        if bias is not None:
            out = out + bias.float()
        return out.reshape(*x.shape[:-1], weight.shape[0]).to(module.output_dtype(x))

    @staticmethod
    def backward(
        ctx: Any, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, None]:
        qx, qw = ctx.saved_tensors
        x_shape, x_dtype, w_dtype = ctx.shapes
        flat = grad_output.reshape(-1, grad_output.shape[-1])
        qg = ctx.module.cast("grad_output", flat)
        grad_input = (qg @ qw).reshape(x_shape).to(x_dtype)
        grad_weight = (qg.t() @ qx.reshape(-1, qx.shape[-1])).to(w_dtype)
        grad_bias = flat.float().sum(dim=0).to(w_dtype) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None


class DelayedScalingLinear(SelfMeasuringLayer, nn.Linear):
    """An nn.Linear computing in FP8 with delayed per-tensor scaling (emulated: the casts
    are real E4M3/E5M2 casts, the products FP32).

    It measures its own casts (`SelfMeasuringLayer`: set `collect_stats = True` for a step,
    then `take_quant_stats()`); the scale reported is the one the cast used, before the
    history moved on.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        settings: DelayedScaling,
        name: str = "",
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.settings = settings
        self.start_measuring(name)
        self.formats = tuple(TENSORWISE_FORMATS[role] for role in _ROLES)
        # Buffers, so that they follow the module to its device and into its state_dict:
        # the amax history of each role (newest first) and the scale its next cast uses
        # (1 before any history, as in Transformer Engine).
        self.amax_history: torch.Tensor
        self.fp8_scale: torch.Tensor
        self.register_buffer(
            "amax_history", torch.zeros(len(_ROLES), settings.amax_history, device=device)
        )
        self.register_buffer("fp8_scale", torch.ones(len(_ROLES), device=device))

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, settings: DelayedScaling, name: str = ""
    ) -> DelayedScalingLinear:
        """A delayed-scaling layer sharing `linear`'s parameters."""
        new = cls(linear.in_features, linear.out_features, bias=False, settings=settings,
                  name=name, device=torch.device("meta"))  # fmt: skip
        new.weight = linear.weight
        new.bias = linear.bias
        # Made on the meta device (no initialisation, no draw from torch's random stream):
        # the buffers are made again where the weight lives.
        device = linear.weight.device
        new.amax_history = torch.zeros_like(new.amax_history, device=device)
        new.fp8_scale = torch.ones_like(new.fp8_scale, device=device)
        return new

    def output_dtype(self, x: torch.Tensor) -> torch.dtype:
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return x.dtype

    def cast(self, role: str, tensor: torch.Tensor) -> torch.Tensor:
        """Quantize-dequantize `tensor` with the role's current scale (an FP32 result),
        then push its amax into the history and compute the role's next scale."""
        index = _ROLES.index(role)
        fmt = self.formats[index]
        with torch.no_grad():
            scale = self.fp8_scale[index].clone()
            # The project's per-tensor cast (equal to torch's and torchao's bit for bit).
            cast = quantize_tensorwise(tensor.float(), fmt, scale)
            self.measure(role, tensor, cast, fmt)
            history = torch.roll(self.amax_history[index], 1)
            history[0] = tensor.detach().abs().max().float()
            self.amax_history[index] = history
            self.fp8_scale[index] = next_delayed_scale(history, scale, fmt, self.settings)
        return cast.values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _DelayedFP8Linear.apply(x, self.weight, self.bias, self)  # type: ignore[no-untyped-call,no-any-return]

    def extra_repr(self) -> str:
        s = self.settings
        return (
            f"{super().extra_repr()}, delayed scaling: history={s.amax_history}, "
            f"amax_compute={s.amax_compute}, margin={s.margin}"
        )


def convert_delayed_fp8(
    model: nn.Module, settings: DelayedScaling, *, keep_first_last: bool
) -> LinearChoice:
    """Swap the chosen linears of `model` (in place) for DelayedScalingLinear."""
    choice = choose_linears(model, keep_first_last=keep_first_last)
    chosen = set(choice.quantized)
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if name in chosen and type(child) is nn.Linear:
                setattr(parent, child_name, DelayedScalingLinear.from_linear(child, settings, name))
    return choice
