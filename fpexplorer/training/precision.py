"""The precision modes of a training job: one table that everything reads. Torch-free.

`PRECISION_MODES` says, for each mode, what it means for the loop (autocast dtype,
parameter dtype, loss scaler, FP32 master weights), what its gradients are held in, and
the one line and the code comment that explain it. The CLI's choices and help, the
training form, the job's loop, the code view and the plots all come from here: a new
mode is one row.

Dtypes are named as torch names them ("float16", "bfloat16"); the job turns a name into
`getattr(torch, name)`, everyone else uses the name (the formats engine knows them too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ScalerKind = Literal["none", "dynamic", "static"]
# How a low-precision mode quantizes the linear layers: "fp8-tensorwise" and "fp8-rowwise"
# are torchao's float8 training recipes, "block" the project's emulated block-scaled
# linears (MX: blocks of 32 with an E8M0 scale; NVFP4: blocks of 16, E4M3 scales and a
# per-tensor scale).
RecipeKind = Literal["fp8-tensorwise", "fp8-rowwise", "block"]


@dataclass(frozen=True, slots=True)
class PrecisionMode:
    """One precision mode of `fpexplorer train`."""

    name: str
    description: str  # one line: the CLI's help, the form's tooltip
    autocast_dtype: str | None  # torch.autocast's dtype; None: no autocast
    params_dtype: str  # weights, their gradients and the optimizer state
    scaler: ScalerKind  # "dynamic": torch.amp.GradScaler; "static": a fixed --loss-scale
    master_weights: bool  # the optimizer updates FP32 weights (not the 16-bit copies)
    code_note: str  # the comment the code view puts above the loop: why it looks so
    recipe: RecipeKind | None = None  # how the linear layers are quantized; None: not at all
    block_format: str | None = None  # a "block" recipe's format, as the formats engine names it

    @property
    def quantized(self) -> bool:
        """The linear layers compute in a low-precision format (FP8, MX, NVFP4)."""
        return self.recipe is not None

    @property
    def gradient_dtype(self) -> str:
        """What the activation gradients of backward are held in."""
        return self.autocast_dtype or self.params_dtype

    @property
    def scaled(self) -> bool:
        """Backward runs on a loss multiplied by a loss scale (gradients recorded scaled)."""
        return self.scaler != "none"


PRECISION_MODES: tuple[PrecisionMode, ...] = (
    PrecisionMode(
        name="fp32",
        description="FP32 everywhere: the reference",
        autocast_dtype=None,
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note="FP32 everywhere: the reference run, no autocast, no scaler.",
    ),
    PrecisionMode(
        name="fp16",
        description="FP16 autocast + dynamic loss scaling (GradScaler), FP32 master weights",
        autocast_dtype="float16",
        params_dtype="float32",
        scaler="dynamic",
        master_weights=True,
        code_note=(
            "Dynamic loss scaling: skip a step and halve the scale on inf/NaN gradients,\n"
            "grow it after growth_interval clean steps."
        ),
    ),
    PrecisionMode(
        name="fp16-static",
        description="FP16 autocast + a fixed loss scale (--loss-scale), FP32 master weights",
        autocast_dtype="float16",
        params_dtype="float32",
        scaler="static",
        master_weights=True,
        code_note="A fixed loss scale: never grows, never backs off; inf/NaN steps are skipped.",
    ),
    PrecisionMode(
        name="fp16-noscale",
        description="FP16 autocast without loss scaling: small gradients underflow to zero",
        autocast_dtype="float16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "FP16 autocast without loss scaling: gradients below 2**-24 (5.96e-08)\n"
            "underflow to zero in the FP16 backward pass."
        ),
    ),
    PrecisionMode(
        name="bf16",
        description="BF16 autocast, no scaling: FP32's range, 8 bits of precision",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "BF16 has FP32's exponent range: no loss scaling is needed.\n"
            "Weights and optimizer state stay FP32 (master weights)."
        ),
    ),
    PrecisionMode(
        name="pure-fp16",
        # torch's GradScaler refuses FP16 gradients, so pure FP16 uses the fixed --loss-scale.
        description="model and optimizer in FP16, no FP32 master weights: updates get lost",
        autocast_dtype=None,
        params_dtype="float16",
        scaler="static",
        master_weights=False,
        code_note=(
            "No FP32 master weights: an update smaller than half an FP16 ulp of its weight\n"
            "(|w| * 2**-11) rounds away and is lost."
        ),
    ),
    PrecisionMode(
        name="fp8",
        description="FP8 linears (torchao, per-tensor scales: E4M3 forward, E5M2 gradients)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "FP8 training with torchao: every linear casts its input and weight to E4M3 and\n"
            "its output gradient to E5M2, each with one scale per tensor (448 / amax for\n"
            "E4M3). The rest runs under BF16 autocast; no loss scaler: the scales do its job."
        ),
        recipe="fp8-tensorwise",
    ),
    PrecisionMode(
        name="fp8-rowwise",
        description="FP8 linears (torchao rowwise: E4M3, a power-of-two scale per row)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "FP8 training with torchao's rowwise recipe: input, weight and output gradient\n"
            "in E4M3 with one power-of-two scale per row, so an outlier costs its own row's\n"
            "precision, not the whole tensor's. The rest runs under BF16 autocast."
        ),
        recipe="fp8-rowwise",
    ),
    PrecisionMode(
        name="mxfp8",
        description="MXFP8 linears (emulated: E4M3 in blocks of 32 with an E8M0 scale)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "MXFP8 (OCP MX): each linear's input, weight and output gradient in E4M3, in\n"
            "blocks of 32 along the matmul's reduction dimension, each block with its own\n"
            "power-of-two (E8M0) scale. Emulated: quantize-dequantize, FP32 matmuls."
        ),
        recipe="block",
        block_format="mxfp8_e4m3",
    ),
    PrecisionMode(
        name="mxfp6",
        description="MXFP6 linears (emulated: E2M3 in blocks of 32 with an E8M0 scale)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "MXFP6 (OCP MX): E2M3 elements (largest 7.5) in blocks of 32 along the reduction\n"
            "dimension, one power-of-two (E8M0) scale per block. Emulated: quantize-\n"
            "dequantize, FP32 matmuls."
        ),
        recipe="block",
        block_format="mxfp6_e2m3",
    ),
    PrecisionMode(
        name="mxfp4",
        description="MXFP4 linears (emulated: E2M1 in blocks of 32 with an E8M0 scale)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "MXFP4 (OCP MX): E2M1 elements (0, 0.5, 1, 1.5, 2, 3, 4, 6) in blocks of 32, one\n"
            "power-of-two (E8M0) scale per block: a block's small values flush to zero\n"
            "next to its largest. Emulated: quantize-dequantize, FP32 matmuls."
        ),
        recipe="block",
        block_format="mxfp4",
    ),
    PrecisionMode(
        name="nvfp4",
        description="NVFP4 linears (emulated: E2M1 in blocks of 16, E4M3 scales, a tensor scale)",
        autocast_dtype="bfloat16",
        params_dtype="float32",
        scaler="none",
        master_weights=True,
        code_note=(
            "NVFP4: E2M1 elements in blocks of 16, each block's scale in E4M3 under one FP32\n"
            "scale per tensor. NVIDIA's recipe on top (each part an option): weights in 16x16\n"
            "tiles, output gradients rounded stochastically, the weight-gradient operands\n"
            "rotated by a random Hadamard transform. Emulated: quantize-dequantize, FP32 matmuls."
        ),
        recipe="block",
        block_format="nvfp4",
    ),
)
PRECISION_NAMES: tuple[str, ...] = tuple(mode.name for mode in PRECISION_MODES)
_BY_NAME = {mode.name: mode for mode in PRECISION_MODES}


def precision_mode(name: str) -> PrecisionMode:
    """The mode called `name`; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"unknown precision {name!r}: use one of {', '.join(PRECISION_NAMES)}"
        ) from None


def find_precision_mode(name: str) -> PrecisionMode | None:
    """The mode called `name`, or None (a run file from another version may name others)."""
    return _BY_NAME.get(name)
