"""Applying a precision mode's low-precision recipe to a model: the one code path the job
takes on every device. Needs torch.

`recipe_problem` says, before anything runs, why a recipe cannot run here (torchao
missing); `apply_recipe` converts the model's linear layers in place and returns which it
converted and which it kept in high precision, and why.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import torch
from torch import nn

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.lowprec.fp8 import (
    AmaxCompute,
    DelayedScaling,
    LinearChoice,
    convert_delayed_fp8,
    convert_torchao_fp8,
)
from fpexplorer.training.precision import PrecisionMode

if TYPE_CHECKING:
    from fpexplorer.training.lowprec.block_linear import WeightBlocks


def uses_torchao(mode: PrecisionMode, config: TrainConfig) -> bool:
    """The mode runs torchao's float8 linears (delayed scaling is the project's own)."""
    if mode.recipe == "fp8-rowwise":
        return True
    return mode.recipe == "fp8-tensorwise" and config.fp8_scaling == "dynamic"


def recipe_problem(mode: PrecisionMode, config: TrainConfig) -> str | None:
    """Why `mode` cannot run in this environment, in one line; None when it can."""
    if uses_torchao(mode, config) and importlib.util.find_spec("torchao") is None:
        return f"--precision {mode.name} trains with torchao's float8 linears: pip install torchao"
    return None


def delayed_scaling(config: TrainConfig) -> DelayedScaling:
    """The delayed-scaling settings of a configuration."""
    compute: AmaxCompute = "most_recent" if config.amax_compute == "most_recent" else "max"
    return DelayedScaling(
        amax_history=config.amax_history, amax_compute=compute, margin=config.margin
    )


def recipe_label(mode: PrecisionMode, config: TrainConfig) -> str:
    """What the quantized layers compute in, for the job's one line."""
    if mode.recipe == "fp8-tensorwise":
        scaling = "delayed" if config.fp8_scaling == "delayed" else "current"
        return f"FP8 (E4M3/E5M2, per-tensor {scaling} scaling)"
    if mode.recipe == "fp8-rowwise":
        return "FP8 (E4M3, rowwise scaling)"
    if mode.name == "nvfp4":
        weights = (
            "16x16 weight tiles" if config.nvfp4_weight_blocks == "2d" else "1-D weight blocks"
        )
        rht = "Hadamard on Wgrad" if config.hadamard else "no Hadamard"
        return f"nvfp4 (emulated; {weights}, {rht}, stochastic gradients)"
    return f"{mode.block_format or mode.name} (emulated)"


def apply_recipe(
    model: nn.Module, mode: PrecisionMode, config: TrainConfig, device: torch.device
) -> LinearChoice | None:
    """Quantize `model`'s linear layers (in place, after it is on `device`) as `mode`'s
    recipe says; None for a mode without one."""
    keep = config.bf16_first_last
    if mode.recipe == "fp8-tensorwise" and config.fp8_scaling == "delayed":
        return convert_delayed_fp8(model, delayed_scaling(config), keep_first_last=keep)
    if mode.recipe == "fp8-tensorwise":
        return convert_torchao_fp8(model, "tensorwise", device, keep_first_last=keep)
    if mode.recipe == "fp8-rowwise":
        return convert_torchao_fp8(model, "rowwise", device, keep_first_last=keep)
    if mode.recipe == "block" and mode.block_format is not None:
        if mode.name == "nvfp4":  # NVIDIA's recipe, each part as the options say
            weight_blocks: WeightBlocks = "1d" if config.nvfp4_weight_blocks == "1d" else "2d"
            return convert_block(
                model, mode.block_format, keep_first_last=keep,
                weight_blocks=weight_blocks, hadamard=config.hadamard,
            )  # fmt: skip
        return convert_block(model, mode.block_format, keep_first_last=keep)
    return None


def convert_block(
    model: nn.Module,
    block_format: str,
    *,
    keep_first_last: bool,
    weight_blocks: WeightBlocks | None = None,
    hadamard: bool | None = None,
) -> LinearChoice:
    """Swap the model's linears (in place) for the emulated block-scaled linears. Blocks
    take any size (a short last block), so only --bf16-first-last keeps layers back.
    `weight_blocks` and `hadamard`: as `BlockScaledLinear` takes them (None: the format's
    recipe)."""
    from fpexplorer.training.lowprec.block_linear import swap_linears

    swapped = swap_linears(
        model, block_format, keep_first_last=keep_first_last,
        weight_blocks=weight_blocks, hadamard=hadamard,
    )  # fmt: skip
    done = set(swapped)
    kept = tuple(
        (name, "first/last layer, --bf16-first-last")
        for name, module in model.named_modules()
        if type(module) is nn.Linear and name not in done
    )
    return LinearChoice(tuple(swapped), kept)
