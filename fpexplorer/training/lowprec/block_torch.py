"""Block quantization (MX, NVFP4) in torch, on the tensor's own device.

`quantize_blocks(x, block_format)` applies the rules of `fpexplorer.formats.block` (scale
rules, NaN/inf, all-zero blocks, tails, NVFP4's per-tensor scale) and returns the
dequantized tensor with its block scales: the same values, bit for bit, as the exact numpy
quantizer `fpexplorer.formats.block_quantize.quantize` (the tests hold the two equal for
every named block format and scale rule). Everything the format needs (element exponent and
mantissa bits, the smallest normal binade, max, block size, scale format and rule) is read
from the formats engine, so a custom `BlockFormat` works as a named one does.
`quantize_tiles(matrix, block_format)` gives one scale per square tile instead (NVFP4's 2-D
weight blocks, 16×16), by the same rules: a tile is quantized as one block of its elements.

How it stays exact without Fractions:

- MX: the shared exponent comes from amax's binary exponent and significand (`frexp`),
  compared exactly; dividing by 2**e and multiplying back are exact in float32, and a
  quotient that float32 can only hold as a subnormal rounds to zero in every element
  format under nearest rounding, as the exact quotient does.
- NVFP4: s_global, the block-scale quotients and the element quotients are taken in float64
  (each product of the scales is exact there; `block_quantize._round_quotients` shows why
  one float64 rounding of a quotient never crosses an element rounding boundary); the
  dequantized value element × s_block × s_global is exact in float64 and rounded once to
  the input's dtype.
- Rounding into an element grid is integer arithmetic on floats: the value times 2**-k
  (k: its binade's quantum exponent, from `frexp`, built as exact powers of two from bits)
  rounded half-to-even by `torch.round`, times 2**k, saturated to ±max.

Cost: about twenty elementwise passes over x (float64 ones for NVFP4), one amax reduction
per block (and one over the tensor for NVFP4); no host synchronisation, so it runs
asynchronously on an accelerator. Memory: a few temporaries of x's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import torch
import torch.nn.functional as F

from fpexplorer.formats.block import (
    E8M0_MAX_EXPONENT,
    E8M0_MIN_EXPONENT,
    NVFP4_GLOBAL_DIVISOR,
    BlockFormat,
    ElementFormat,
    IntElement,
    floor_log2,
    get_block_format,
)

if TYPE_CHECKING:
    from fpexplorer.formats.format import FloatFormat

# Inputs read exactly as float32 (bfloat16 and float16 widen to float32 without rounding).
INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_SMALLEST_FLOAT32 = 2.0**-149  # NVFP4's s_global when amax / 2688 rounds to zero

# dtype -> (the integer dtype of its bits, fraction bits, exponent bias)
_BIT_LAYOUT = {
    torch.float32: (torch.int32, 23, 127),
    torch.float64: (torch.int64, 52, 1023),
}


@dataclass(frozen=True, slots=True)
class ElementGrid:
    """The values of an element (or scale) format as the torch rounding walks them.

    A float format: binades of `mantissa_bits` fraction bits from `min_exponent` (its
    smallest normal binade; below it the subnormals share that binade's quantum) up to
    `max`. An integer element: one quantum, 2**`fixed_quantum_exponent`, everywhere.
    Rounding saturates to ±max; `negative_zero` says whether -0 exists (INT8 has none).
    """

    name: str
    mantissa_bits: int
    min_exponent: int
    max_exponent: int
    max: float
    negative_zero: bool
    fixed_quantum_exponent: int | None = None

    @classmethod
    def of(cls, element: ElementFormat) -> ElementGrid:
        """The grid of an engine format; ValueError for one the float32/float64 paths
        cannot hold exactly (no subnormals, or quanta beyond float32's exponent range)."""
        if isinstance(element, IntElement):
            return cls(
                name=element.name,
                mantissa_bits=element.mantissa_bits,
                min_exponent=-element.fraction_bits,
                max_exponent=floor_log2(element.max),
                max=float(element.max),
                negative_zero=False,
                fixed_quantum_exponent=-element.fraction_bits,
            )
        if not element.subnormals:
            raise ValueError(
                f"{element.name} has no subnormals: the torch quantizer rounds into "
                "formats whose lowest binade continues into subnormals"
            )
        grid = cls(
            name=element.name,
            mantissa_bits=element.mantissa_bits,
            min_exponent=floor_log2(element.min_normal),
            max_exponent=floor_log2(element.max),
            max=float(element.max),
            negative_zero=_has_negative_zero(element),
        )
        smallest_quantum = grid.min_exponent - grid.mantissa_bits
        if smallest_quantum < -126 or grid.max_exponent > 126 - grid.mantissa_bits:
            raise ValueError(
                f"{element.name} is too wide for the torch quantizer: its quanta must lie "
                "within float32's normal exponents"
            )
        return grid


def _has_negative_zero(element: FloatFormat) -> bool:
    return element.signed and element.encoding not in ("fnuz", "fnu")


@dataclass(frozen=True, slots=True, eq=False)
class BlockQuantized:
    """A tensor quantized into a block format and dequantized again (`quantize_blocks`).

    `values`: the dequantized tensor, `input`'s shape and dtype. `block_scales`: each
    block's scale as float32 (E8M0's 2**e for MX, the E4M3 scale for NVFP4; NaN for a NaN
    scale), shaped like `input` with `axis` cut into blocks. `per_tensor_scale`: NVFP4's
    FP32 s_global as a 0-dim float32 tensor (a value is element × block scale ×
    s_global), None for MX.
    """

    format: BlockFormat
    axis: int
    input: torch.Tensor
    values: torch.Tensor
    block_scales: torch.Tensor
    per_tensor_scale: torch.Tensor | None

    def saturation_limit(self) -> torch.Tensor:
        """Per element, as float64: max_elem × block scale (× s_global), the magnitude
        beyond which an input was clipped (NaN in a block with a NaN scale). Exact: the
        factors have at most 8, 8 and 24 significant bits."""
        length = self.input.shape[self.axis]
        limits = self.block_scales.double() * float(self.format.element.max)
        if self.per_tensor_scale is not None:
            limits = limits * self.per_tensor_scale.double()
        expanded = limits.repeat_interleave(self.format.block_size, dim=self.axis)
        return expanded.narrow(self.axis, 0, length)


@dataclass(frozen=True, slots=True, eq=False)
class TileQuantized:
    """A matrix quantized with one block scale per square tile (`quantize_tiles`).

    `values`: the dequantized matrix, `input`'s shape and dtype. `block_scales`: each
    tile's scale as float32, shaped (row tiles, column tiles) (a tile cut by the edge
    counts once). `per_tensor_scale`: NVFP4's FP32 s_global (0-dim float32), None for MX.
    """

    format: BlockFormat
    input: torch.Tensor
    values: torch.Tensor
    block_scales: torch.Tensor
    per_tensor_scale: torch.Tensor | None

    def saturation_limit(self) -> torch.Tensor:
        """Per element, as float64: max_elem × its tile's scale (× s_global), as
        `BlockQuantized.saturation_limit`."""
        rows, cols = self.input.shape
        size = self.format.block_size
        limits = self.block_scales.double() * float(self.format.element.max)
        if self.per_tensor_scale is not None:
            limits = limits * self.per_tensor_scale.double()
        expanded = limits.repeat_interleave(size, dim=0).repeat_interleave(size, dim=1)
        return expanded[:rows, :cols]


# What a layer measures as a block-scaled cast: blocks along one axis, or square tiles.
BlockScaled: TypeAlias = BlockQuantized | TileQuantized


def quantize_blocks(
    x: torch.Tensor,
    block: BlockFormat | str,
    *,
    axis: int = -1,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
    per_tensor_scale: float | torch.Tensor | None = None,
) -> BlockQuantized:
    """Quantize `x` into `block` with blocks running along `axis`, and dequantize it.

    Elements round to nearest-even, or, with `stochastic`, up with probability equal to
    the distance from the lower neighbour over the gap (drawn from `generator`, which must
    live on x's device, in float32 steps of 2**-24: the probability is that distance rounded
    up to a multiple of 2**-24; an NVFP4 quotient within 2**-24 below a power of two picks
    between neighbours one coarser quantum apart, see `round_to_grid`: still unbiased).
    Scales always follow the format's rule.
    `per_tensor_scale` forces NVFP4's s_global (rounded to FP32; a float, or a 0-dim
    tensor, which is not checked so as not to synchronise); by default it is
    FP32(finite amax / 2688). Input: float32, bfloat16 or float16, read exactly.
    """
    fmt = get_block_format(block)
    _check_input(x, axis)
    axis = axis % x.dim() if x.dim() else 0
    work = x.float().reshape(1) if x.dim() == 0 else x.float()
    blocks, length = _to_blocks(work, axis, fmt.block_size)
    dequantized, scales, tensor_scale = _quantize_groups(
        blocks, work, fmt, stochastic, generator, per_tensor_scale
    )
    values = _from_blocks(dequantized, axis, length).to(x.dtype)
    grid = scales.movedim(-1, axis)
    if x.dim() == 0:
        values, grid = values.reshape(()), grid.reshape(())
    return BlockQuantized(fmt, axis, x, values, grid, tensor_scale)


def quantize_tiles(
    x: torch.Tensor,
    block: BlockFormat | str,
    *,
    per_tensor_scale: float | torch.Tensor | None = None,
) -> TileQuantized:
    """Quantize the matrix `x` into `block` with one block scale per square tile of
    block_size × block_size elements (NVFP4's 2-D weight blocks: 16×16), and dequantize it.

    Each tile is quantized as one block of block_size² elements would be, under the
    format's scale rule, and NVFP4's s_global comes from the whole matrix (or
    `per_tensor_scale`), as in `quantize_blocks`; a tile cut by the matrix's edge uses the
    elements it has. So `quantize_tiles(x.t()).values` is `quantize_tiles(x).values.t()`
    bit for bit: the weight a layer multiplies in forward (W) and in backward (Wᵀ) is one
    quantized tensor. Elements round to nearest-even (NVIDIA's recipe rounds weights so);
    inputs as `quantize_blocks`.
    """
    fmt = get_block_format(block)
    _check_input(x, 0)
    if x.dim() != 2:
        raise ValueError(f"quantize_tiles takes a matrix, not a tensor of {x.dim()} dimensions")
    rows, cols = x.shape
    size = fmt.block_size
    work = x.float()
    # (row tiles, column tiles, size²): each tile's elements as one block; zero padding
    # never changes a tile's amax and is cut off again.
    padded = F.pad(work, (0, -cols % size, 0, -rows % size))
    row_tiles, col_tiles = padded.shape[0] // size, padded.shape[1] // size
    tiles = padded.reshape(row_tiles, size, col_tiles, size).transpose(1, 2)
    tiles = tiles.reshape(row_tiles, col_tiles, size * size)
    dequantized, scales, tensor_scale = _quantize_groups(
        tiles, work, fmt, False, None, per_tensor_scale
    )
    matrix = dequantized.reshape(row_tiles, col_tiles, size, size).transpose(1, 2)
    values = matrix.reshape(row_tiles * size, col_tiles * size)[:rows, :cols].to(x.dtype)
    return TileQuantized(fmt, x, values, scales, tensor_scale)


def _quantize_groups(
    blocks: torch.Tensor,
    work: torch.Tensor,
    fmt: BlockFormat,
    stochastic: bool,
    generator: torch.Generator | None,
    per_tensor_scale: float | torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The quantizer proper: `blocks` (float32, (..., groups, elements)), each group
    sharing one scale; `work` is the whole float32 tensor (NVFP4's s_global is its finite
    amax's). Returns the dequantized groups (float32, or float64 for NVFP4), the scales
    (float32, (..., groups)) and s_global (None without a per-tensor scale)."""
    if per_tensor_scale is not None and not fmt.tensor_scale:
        # Ignored, it would leave whoever passed it believing it applied.
        raise ValueError(
            f"{fmt.name} has no per-tensor scale (only NVFP4 has one): "
            "per_tensor_scale= cannot be applied to it"
        )
    amax = blocks.abs().amax(dim=-1)  # NaN for a block holding NaN, inf for one with inf
    noise = (
        torch.rand(blocks.shape, generator=generator, device=blocks.device, dtype=torch.float32)
        if stochastic
        else None
    )
    element = ElementGrid.of(fmt.element)
    tensor_scale: torch.Tensor | None = None
    if fmt.power_of_two_scale:
        exponent, nan_scale = _shared_exponents(amax, fmt)
        scales = torch.where(nan_scale, torch.nan, _pow2(exponent, torch.float32))
        scaled = blocks * _pow2(-exponent, torch.float32).unsqueeze(-1)
        return round_to_grid(scaled, element, noise) * scales.unsqueeze(-1), scales, None
    if fmt.tensor_scale:
        tensor_scale = (
            _global_scale(work)
            if per_tensor_scale is None
            else _forced_tensor_scale(per_tensor_scale, work.device)
        )
    scales, multiplier = _nearest_rule_scales(amax, fmt, tensor_scale)
    quotient = blocks.double() / multiplier.unsqueeze(-1)
    dequantized = round_to_grid(quotient, element, noise) * multiplier.unsqueeze(-1)
    return dequantized, scales, tensor_scale


def _check_input(x: torch.Tensor, axis: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"quantize_blocks takes a torch.Tensor, not {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in INPUT_DTYPES)
        raise ValueError(f"quantize_blocks takes {names} tensors, not {x.dtype}")
    if x.numel() == 0:
        raise ValueError("nothing to quantize: the tensor is empty")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ValueError("axis must be an int")
    dims = max(x.dim(), 1)
    if not -dims <= axis < dims:
        raise ValueError(f"axis {axis} is out of range for a tensor of {x.dim()} dimensions")


def _to_blocks(work: torch.Tensor, axis: int, block_size: int) -> tuple[torch.Tensor, int]:
    """(..., blocks, block_size) with `axis` last; a short tail block is padded with zeros,
    which never change amax and are cut off again."""
    moved = work.movedim(axis, -1)
    length = moved.shape[-1]
    count = -(-length // block_size)
    padding = count * block_size - length
    if padding:
        moved = F.pad(moved, (0, padding))
    return moved.reshape(*moved.shape[:-1], count, block_size), length


def _from_blocks(blocks: torch.Tensor, axis: int, length: int) -> torch.Tensor:
    rows = blocks.reshape(*blocks.shape[:-2], -1)[..., :length]
    return rows.movedim(-1, axis)


def _pow2(exponent: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2**exponent as `dtype` (float32 or float64), built from its bits: exact, subnormal
    powers included (2**-127 in float32), with no pow() whose rounding a device might
    choose. Exponents must lie in the dtype's range."""
    int_dtype, fraction_bits, bias = _BIT_LAYOUT[dtype]
    biased = exponent.to(int_dtype) + bias
    normal = biased.clamp(min=1) << fraction_bits
    subnormal = torch.ones_like(biased) << (biased + fraction_bits - 1).clamp(0, fraction_bits - 1)
    return torch.where(biased >= 1, normal, subnormal).view(dtype)


def round_to_grid(
    y: torch.Tensor, grid: ElementGrid, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """`y` (float32 or float64) rounded into the grid's values, saturated to ±max, in y's
    dtype: nearest-even, or stochastic with `noise` (uniform in [0, 1), y's shape).
    NaN stays NaN; ±inf saturates.

    The quantum of |y|'s binade, 2**k, and its inverse are built from bits (k lies in the
    dtype's normal range, `ElementGrid.of` checks it), so that |y|·2**-k and steps·2**k
    are exact; the work is in place on fresh temporaries (about twelve passes)."""
    magnitude = y.abs()
    if grid.fixed_quantum_exponent is not None:
        scaled = magnitude.mul_(2.0**-grid.fixed_quantum_exponent)
        quantum: torch.Tensor | float = 2.0**grid.fixed_quantum_exponent
    else:
        # frexp's exponent is floor(log2 |y|) + 1 (any value for 0, inf and NaN, which
        # the clamp keeps in range). Taken of |y| in float32 also for float64 input (float64
        # frexp and int64 shifts are several times slower): rounding to float32 can only
        # lift |y| to the next power of two, and a value that close to it rounds to it with
        # that binade's quantum too; stochastic rounding then picks between the neighbours
        # one coarser quantum apart, still unbiased.
        exponent = torch.frexp(magnitude.float()).exponent
        exponent.clamp_(grid.min_exponent + 1, grid.max_exponent + 1)
        # k = floor(log2 |y|) - mantissa_bits, as float32 exponent fields of 2**k and 2**-k.
        fraction_bits, bias = 23, 127
        quantum = ((exponent + (bias - 1 - grid.mantissa_bits)) << fraction_bits).view(
            torch.float32
        )
        inverse = (((bias + 1 + grid.mantissa_bits) - exponent) << fraction_bits).view(
            torch.float32
        )
        scaled = magnitude.mul_(inverse)
    if noise is None:
        steps = scaled.round_()  # half to even
    else:
        steps = scaled.floor()
        fraction = scaled.sub_(steps)  # exact: both in one binade, or the floor is 0
        steps = steps.add_(noise < fraction)
    result = steps.mul_(quantum).clamp_(max=grid.max).copysign_(y)
    # -0 + 0 is +0 under round-to-nearest: formats without -0 give +0 for negatives.
    return result if grid.negative_zero else result.add_(0.0)


def _shared_exponents(amax: torch.Tensor, fmt: BlockFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """MX shared exponents by the format's rule (int32, clamped at -127; 0 where the scale
    is NaN) and the NaN-scale mask: `block.shared_exponent` on float32 amaxes, exactly."""
    finite = torch.isfinite(amax)
    positive = finite & (amax > 0)
    mantissa, frexp_exponent = torch.frexp(torch.where(positive, amax, 1.0))
    floor_log2_amax = frexp_exponent - 1
    significand = mantissa * 2  # amax = significand × 2**floor_log2_amax, in [1, 2): exact
    emax = fmt.element_emax
    rule = fmt.scale_rule
    if rule == "floor":
        exponent = floor_log2_amax - emax
    elif rule == "ceil":
        exponent = floor_log2_amax + (significand != 1).int() - emax
    elif rule == "even":
        # amax rounded (ties away) to the element's precision reaches the next binade
        # exactly when its significand is at least 2 - 2**-(mantissa_bits + 1).
        threshold = 2.0 - 2.0 ** -(fmt.element.mantissa_bits + 1)
        exponent = floor_log2_amax + (significand >= threshold).int() - emax
    elif rule == "rceil":
        # ceil(log2(amax / max_elem)), max_elem = top × 2**emax with top in [1, 2): compare
        # significands, so that nothing is divided or rounded.
        top = float(fmt.element.max) / 2.0**emax
        below = (significand < top).int()
        exponent = floor_log2_amax - emax - below + (significand != top).int()
    else:
        raise ValueError(f"{fmt.name}: the {rule!r} rule has no shared exponent")
    exponent = torch.where(positive, exponent, E8M0_MIN_EXPONENT)
    nan_scale = ~finite | (exponent > E8M0_MAX_EXPONENT)
    exponent = torch.where(nan_scale, 0, exponent.clamp(min=E8M0_MIN_EXPONENT))
    return exponent.int(), nan_scale


def _global_scale(work: torch.Tensor) -> torch.Tensor:
    """NVFP4's s_global = FP32(finite amax / 2688) as a 0-dim float32 tensor; 1 when the
    amax is 0, 2**-149 when the quotient rounds to zero.

    The quotient is taken in float64 and then rounded to float32: amax = A·2**j with A
    below 2**24 and 2688 = 21·2**7, so the exact quotient is either a float32 already or at
    least 2**-30 (relative) away from every float32 rounding boundary, far beyond float64's
    error; the divisor is a device tensor so that no backend swaps the division for a
    multiplication by a rounded reciprocal.
    """
    finite_amax = torch.where(torch.isfinite(work), work.abs(), 0.0).amax()
    divisor = torch.full((), float(NVFP4_GLOBAL_DIVISOR), dtype=torch.float64, device=work.device)
    scale = (finite_amax.double() / divisor).float()
    scale = torch.where(scale == 0, _SMALLEST_FLOAT32, scale)
    return torch.where(finite_amax == 0, 1.0, scale)


def _forced_tensor_scale(value: float | torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError("per_tensor_scale must be one number (a 0-dim tensor)")
        return value.to(device=device, dtype=torch.float32).reshape(())
    number = float(value)
    rounded = torch.tensor(number, dtype=torch.float32)  # one rounding of the double
    if not (number > 0 and float(rounded) > 0 and torch.isfinite(rounded)):
        raise ValueError(f"a per-tensor scale must be a positive FP32 number, not {value!r}")
    return rounded.to(device)


def _nearest_rule_scales(
    amax: torch.Tensor, fmt: BlockFormat, tensor_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block scales of the nearest rule (float32) and the multipliers block scale ×
    s_global (float64, exact): scale = round(amax / (max_elem·s_global)) into the scale
    format, clamped to [its smallest normal, its max]; NaN for a block holding NaN."""
    scale_grid = ElementGrid.of(fmt.scale_format)
    divisor = torch.full((), float(fmt.element.max), dtype=torch.float64, device=amax.device)
    if tensor_scale is not None:
        divisor = divisor * tensor_scale.double()  # exact: 3 × 24 significant bits
    quotient = amax.double() / divisor
    smallest_normal = float(fmt.scale_format.min_normal)
    # Rounding is monotone, so clamping the rounded quotient equals the engine's rule
    # (a quotient below the smallest normal takes the smallest normal). NaN stays NaN.
    scales = round_to_grid(quotient, scale_grid, None).clamp(min=smallest_normal)
    multiplier = scales if tensor_scale is None else scales * tensor_scale.double()
    return scales.float(), multiplier
