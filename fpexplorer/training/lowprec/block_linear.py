"""Linear layers that emulate MX / NVFP4 training: quantize-dequantize, then matmul.

The recipe (OCP MX, as torchao's `mx_mm` runs it; NVIDIA's NVFP4 training recipe): each of
the three matmuls of a linear layer sees its operands quantized with blocks along its own
reduction dimension, from the high-precision tensors:

====================  =========================================  ==========================
matmul                operands                                   blocks along
====================  =========================================  ==========================
output = x · Wᵀ       input x (M×K), weight W (N×K)              K (in_features), both
grad_x = g · W        grad_output g (M×N), weight W              N (out_features), both
grad_W = gᵀ · x       grad_output g, input x                     M (the batch rows), both
====================  =========================================  ==========================

NVFP4 adds its per-tensor scale (from each tensor's amax) and NVIDIA's training recipe,
each part on by default for formats with a per-tensor scale and switchable on its own:

- stochastic rounding of the gradient g (`stochastic_gradients`);
- 2-D weight blocks (`weight_blocks="2d"`): one scale per 16×16 tile of W instead of blocks
  along K and then along N, so that forward (x·Wᵀ) and backward (g·W) multiply the same
  quantized weight and the chain rule holds for the weight the forward pass used;
- the random Hadamard transform (`hadamard`) of both grad_W operands along M before they
  are quantized (`lowprec.hadamard`): orthogonal, so only the rounding changes.

The matmuls then run in float32 on the dequantized values, as a block-scaled tensor core
accumulates in FP32; autocast is off inside, so a BF16 autocast region around the model
does not round the emulated operands again.

Costs: forward quantizes two tensors and backward four (each about twenty elementwise
passes, see `block_torch`), on top of the three float32 matmuls: several times a plain
linear layer on CPU, memory-bound on an accelerator. The layer saves the high-precision
input and weight for backward, as `nn.Linear` does (with 2-D weight blocks, the quantized
weight instead of quantizing it again; the Hadamard transform adds two 16-point mixes of
g and x). No host synchronisation in forward or
backward, statistics included: with `collect_stats` on they are measured on the device
(about a dozen more passes per tensor, `lowprec.stats`) and read after the step, by the
monitor with every other layer's in one transfer, or by `take_quant_stats()`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

import torch
from torch import nn

from fpexplorer.formats.block import BlockFormat, get_block_format

from .block_torch import BlockScaled, quantize_blocks, quantize_tiles
from .hadamard import hadamard_rows
from .stats import SelfMeasuringLayer

WeightBlocks = Literal["1d", "2d"]
WEIGHT_BLOCKS: tuple[WeightBlocks, ...] = ("1d", "2d")


class BlockScaledLinear(SelfMeasuringLayer, nn.Linear):
    """`nn.Linear` whose forward and backward matmuls see block-quantized operands.

    `block`: the block format (a `BlockFormat` or a name such as "mxfp8_e4m3", "nvfp4").
    `stochastic_gradients`: round the output gradient stochastically (None: only for
    formats with a per-tensor scale, NVFP4's recipe); draws come from `generator` (on the
    layer's device), or torch's default generator, which `torch.manual_seed` seeds.
    `weight_blocks`: "2d", one scale per block_size × block_size tile of the weight, used
    by forward and backward alike; "1d", blocks along each matmul's reduction dimension
    (None: "2d" for formats with a per-tensor scale, NVFP4's recipe, else "1d").
    `hadamard`: rotate both operands of grad_W by the random Hadamard transform before
    they are quantized (None: on for formats with a per-tensor scale).
    It measures its own casts (`SelfMeasuringLayer`): with `collect_stats` on, each
    forward measures the input and the weight and each backward the output gradient
    (blocks along out_features, the cast grad_input uses); `take_quant_stats()` hands
    their `QuantTensorStats` over.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        block: BlockFormat | str = "mxfp8_e4m3",
        stochastic_gradients: bool | None = None,
        weight_blocks: WeightBlocks | None = None,
        hadamard: bool | None = None,
        generator: torch.Generator | None = None,
        name: str = "",
    ) -> None:
        super().__init__(in_features, out_features, bias, device, dtype)
        self.block = get_block_format(block)
        nvidia = self.block.tensor_scale  # NVFP4's recipe is the default for its format
        self.stochastic_gradients = nvidia if stochastic_gradients is None else stochastic_gradients
        if weight_blocks is not None and weight_blocks not in WEIGHT_BLOCKS:
            raise ValueError(f"weight_blocks must be '1d' or '2d', not {weight_blocks!r}")
        self.weight_blocks: WeightBlocks = weight_blocks or ("2d" if nvidia else "1d")
        self.hadamard = nvidia if hadamard is None else hadamard
        self.generator = generator
        self.start_measuring(name)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        block: BlockFormat | str,
        *,
        stochastic_gradients: bool | None = None,
        weight_blocks: WeightBlocks | None = None,
        hadamard: bool | None = None,
        generator: torch.Generator | None = None,
        name: str = "",
    ) -> BlockScaledLinear:
        """A BlockScaledLinear that shares `linear`'s parameters (the same Parameter
        objects: an optimizer built before the swap still updates them)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            device="meta",  # no memory: the parameters are replaced next
            block=block,
            stochastic_gradients=stochastic_gradients,
            weight_blocks=weight_blocks,
            hadamard=hadamard,
            generator=generator,
            name=name,
        )
        layer.weight = linear.weight
        layer.bias = linear.bias
        layer.train(linear.training)
        return layer

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.numel() == 0:  # nothing to quantize; the shapes still follow nn.Linear
            return super().forward(input)
        # Function.apply is untyped in torch's stubs.
        output: torch.Tensor = _BlockScaledMatmul.apply(input, self.weight, self)  # type: ignore[no-untyped-call]
        if self.bias is not None:
            output = output + self.bias.to(output.dtype)
        return output

    def extra_repr(self) -> str:
        rounding = ", stochastic gradients" if self.stochastic_gradients else ""
        tiles = ", 2-D weight blocks" if self.weight_blocks == "2d" else ""
        rht = ", Hadamard on grad_W operands" if self.hadamard else ""
        return f"{super().extra_repr()}, block={self.block.name}{rounding}{tiles}{rht}"

    def quantize_weight(self, axis: int = -1) -> BlockScaled:
        """The weight as a matmul sees it: in 16×16 tiles (2-D weight blocks, the same
        for every matmul), or in blocks along `axis` (-1: in_features, the forward
        matmul's reduction dimension; 0: out_features, grad_input's)."""
        return _cast_weight(self.weight.detach(), self, axis)


def _cast_weight(weight: torch.Tensor, layer: BlockScaledLinear, axis: int) -> BlockScaled:
    if layer.weight_blocks == "2d":
        return quantize_tiles(weight.float(), layer.block)
    return quantize_blocks(weight.float(), layer.block, axis=axis)


class _BlockScaledMatmul(torch.autograd.Function):
    """x · Wᵀ with the operands of all three matmuls block-quantized (see module doc)."""

    @staticmethod
    def forward(
        ctx: Any, input: torch.Tensor, weight: torch.Tensor, layer: BlockScaledLinear
    ) -> torch.Tensor:
        rows = input.reshape(-1, input.shape[-1])
        ctx.layer = layer
        ctx.input_shape = input.shape
        with torch.autocast(input.device.type, enabled=False):
            x = quantize_blocks(rows.float(), layer.block, axis=-1)
            w = _cast_weight(weight, layer, axis=-1)
            output = x.values @ w.values.t()
        # 2-D blocks: backward multiplies this same quantized weight (its transpose's tiles
        # are its tiles); 1-D: backward quantizes W again, along out_features.
        tiled = w.values if layer.weight_blocks == "2d" else None
        ctx.save_for_backward(rows, weight, tiled)
        layer.measure("input", rows, x, layer.block.name)
        layer.measure("weight", weight, w, layer.block.name)
        return output.reshape(*input.shape[:-1], weight.shape[0]).to(input.dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, weight, tiled = ctx.saved_tensors
        layer: BlockScaledLinear = ctx.layer
        block = layer.block
        stochastic, generator = layer.stochastic_gradients, layer.generator
        grad = grad_output.reshape(-1, grad_output.shape[-1]).float()
        grad_input = grad_weight = None
        with torch.autocast(grad.device.type, enabled=False):
            if ctx.needs_input_grad[0] or layer.collect_stats:
                g = quantize_blocks(
                    grad, block, axis=-1, stochastic=stochastic, generator=generator
                )  # along N
                layer.measure("grad_output", grad, g, block.name)
            if ctx.needs_input_grad[0]:
                w = tiled if tiled is not None else _cast_weight(weight, layer, axis=0).values
                grad_input = (g.values @ w).reshape(ctx.input_shape).to(rows.dtype)
            if ctx.needs_input_grad[1]:
                g_rows, x_rows = wgrad_operands(grad, rows.float(), layer.hadamard)
                g_m = quantize_blocks(
                    g_rows, block, axis=0, stochastic=stochastic, generator=generator
                )  # along M
                x_m = quantize_blocks(x_rows, block, axis=0)  # along M
                grad_weight = (g_m.values.t() @ x_m.values).to(weight.dtype)
        return grad_input, grad_weight, None


def wgrad_operands(
    grad: torch.Tensor, rows: torch.Tensor, hadamard: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The operands of grad_W = gᵀ·x before they are quantized along M: as they are, or
    both rotated by the random Hadamard transform (zero-padded to a multiple of 16 rows;
    gᵀ·x is unchanged before rounding)."""
    if not hadamard:
        return grad, rows
    return hadamard_rows(grad), hadamard_rows(rows)


def swap_linears(
    model: nn.Module,
    block: BlockFormat | str,
    *,
    keep_first_last: bool = False,
    keep: Collection[str] = (),
    stochastic_gradients: bool | None = None,
    weight_blocks: WeightBlocks | None = None,
    hadamard: bool | None = None,
    generator: torch.Generator | None = None,
) -> list[str]:
    """Replace the model's `nn.Linear` layers by `BlockScaledLinear`s in place; return the
    names of those replaced.

    Parameters (and so the state_dict's names) stay the same objects. Only modules whose
    type is exactly `nn.Linear` are swapped: subclasses may not call their own forward
    (`nn.MultiheadAttention` reads its `out_proj`'s weight directly). `keep_first_last`
    leaves the first and the last linear layer (subclasses included, in definition order:
    the forward order of sequential models and of most others) as they are, so they
    compute in the job's own precision (BF16 in the recipes); `keep` names more modules to
    leave (a name that is no module of the model is an error). `stochastic_gradients`,
    `weight_blocks` and `hadamard` go to every `BlockScaledLinear` (None: the format's
    recipe, see there).
    """
    fmt = get_block_format(block)
    modules = dict(model.named_modules())
    if type(model) is nn.Linear:
        raise ValueError("the model is itself one nn.Linear: wrap it in a module to swap it")
    unknown = sorted(set(keep) - modules.keys())
    if unknown:
        raise ValueError(f"no module named {', '.join(map(repr, unknown))} in the model")
    linears = [name for name, module in modules.items() if isinstance(module, nn.Linear)]
    kept = set(keep)
    if keep_first_last and linears:
        kept |= {linears[0], linears[-1]}
    candidates = [name for name in linears if type(modules[name]) is nn.Linear]
    swapped = []
    for name in candidates:
        if name in kept:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        linear = parent.get_submodule(child)
        assert isinstance(linear, nn.Linear)
        replacement = BlockScaledLinear.from_linear(
            linear,
            fmt,
            stochastic_gradients=stochastic_gradients,
            weight_blocks=weight_blocks,
            hadamard=hadamard,
            generator=generator,
            name=name,
        )
        setattr(parent, child, replacement)
        swapped.append(name)
    return swapped
