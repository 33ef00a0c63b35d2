"""Quantizing into block formats: a vectorized numpy path and an exact scalar path.

`quantize(array, block_format)` blocks an array along one axis and returns a
`QuantizedTensor` (element codes, block-scale codes and values, the per-tensor scale, the
dequantized values, and error statistics on demand). `quantize_block_exact(values,
block_format)` does one block with Fractions; the tests hold the two paths equal. The
rules (scale rules, NaN/inf, zero blocks, tails) are in `fpexplorer.formats.block`.

The algorithm, for someone re-implementing it (in torch, say):

1. Move the axis last, cut it into blocks of `block_size` (the last one may be shorter).
2. amax per block (NaN if any NaN). MX: shared exponent e by the rule from amax's float64
   exponent (`frexp`), exactly; scale code e + 127, 0xFF for NaN. NVFP4: s_global from the
   tensor's finite amax, then s_block = E4M3(amax / (6·s_global)) clamped to [2**-6, 448].
3. Elements: MX divides by 2**e, which is exact in binary floating point, and rounds with
   the element format's own array rounding (`FloatFormat.from_float_array`, saturating).
   NVFP4 divides by s_block·s_global in float64, which rounds, but provably never across
   a rounding boundary of the element grid (see `_round_quotients`), so rounding the
   float64 quotient gives the exact result.
4. Dequantized value = element value × block scale (× s_global): exact in float64.

Error bound (nearest rounding): a finite element x of a block with multiplier M (block scale
× per-tensor scale) dequantizes within half the gap of the element grid around |x|/M, times
M; a saturated one (|x| > max_elem·M) within |x| - max_elem·M. The tests check it with
Hypothesis.

Cost: about a dozen numpy passes over the data; float32 input under nearest rounding stays
in float32 for MX (the scaling is exact there too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from .block import (
    E8M0_BIAS,
    E8M0_MIN_EXPONENT,
    E8M0_NAN_CODE,
    INT_ROUNDING_MODES,
    NVFP4_GLOBAL_DIVISOR,
    BlockFormat,
    ElementFormat,
    IntElement,
    get_block_format,
    shared_exponent,
)
from .exact import ExactValue
from .format import ROUNDING_MODES, FloatFormat, check_seed, to_exact_value
from .registry import get_format
from .vectorized import read_array

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

FloatArray = np.ndarray[Any, np.dtype[np.float64]]
CodeArray = np.ndarray[Any, np.dtype[Any]]

_FLOAT32 = get_format("float32")
_SMALLEST_FLOAT32 = Fraction(1, 2**149)


# ---- records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Quantization error over a set of elements (the finite inputs among them).

    `max_abs_error` and `rmse` are +inf when a finite input dequantized to NaN (a NaN
    block scale); `sqnr_db` = 10·log10(Σx² / Σ(x - q)²), +inf when there is no error;
    `share_saturated`: inputs beyond ±max_elem × scale (clipped); `share_flushed`: nonzero
    inputs that became zero. Shares and errors are NaN where `count` is 0.

    The exact path (`exact_error_stats`) also keeps the exact max |error| and mean squared
    error: a finite error past float64's range (2**1100) is +inf as a float, and a reader
    must not call it infinite. The float64 path leaves them None.
    """

    count: int
    max_abs_error: float
    rmse: float
    sqnr_db: float
    share_saturated: float
    share_flushed: float
    max_abs_error_exact: Fraction | None = None
    mean_squared_error_exact: Fraction | None = None


@dataclass(frozen=True, slots=True, eq=False)
class BlockErrorStats:
    """`ErrorStats` per block: arrays shaped like `QuantizedTensor.scale_codes`."""

    count: np.ndarray[Any, np.dtype[np.int64]]
    max_abs_error: FloatArray
    rmse: FloatArray
    sqnr_db: FloatArray
    share_saturated: FloatArray
    share_flushed: FloatArray


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedTensor:
    """An array quantized into a block format.

    `codes` (uint8) and `values` (float64, the dequantized values) have the input's shape;
    `scale_codes` (uint8) and `scales` (their exact values, NaN for a NaN scale) have the
    input's shape with `axis` cut into blocks. `tensor_scale` is NVFP4's FP32 per-tensor
    scale (None for MX); a value is element × scale × tensor_scale.
    """

    format: BlockFormat
    rounding: str
    axis: int
    input: np.ndarray[Any, Any]
    codes: CodeArray
    scale_codes: CodeArray
    scales: FloatArray
    tensor_scale: float | None
    values: FloatArray
    _layout: _Layout = field(repr=False)

    @property
    def errors(self) -> FloatArray:
        """values - input (float64; NaN where either is not finite)."""
        with np.errstate(invalid="ignore"):
            result: FloatArray = self.values - self.input.astype(np.float64)
        return result

    @property
    def block_count(self) -> int:
        return int(self.scale_codes.size)

    def block_stats(self) -> BlockErrorStats:
        """Error statistics of every block (a few passes over the data)."""
        sums = _error_sums(self)
        with np.errstate(invalid="ignore", divide="ignore"):
            count = sums.count
            rmse = np.sqrt(sums.squared_error / count)
            sqnr = _sqnr_db(sums.signal, sums.squared_error)
            max_abs = np.where(count > 0, sums.max_abs_error, np.nan)
            saturated = sums.saturated / count
            flushed = sums.flushed / count
        shape = self.scale_codes.shape

        def grid(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
            result: np.ndarray[Any, Any] = self._layout.to_grid(values).reshape(shape)
            return result

        return BlockErrorStats(
            count=grid(count.astype(np.int64)),
            max_abs_error=grid(max_abs),
            rmse=grid(rmse),
            sqnr_db=grid(sqnr),
            share_saturated=grid(saturated),
            share_flushed=grid(flushed),
        )

    def worst_blocks(self, count: int = 10) -> list[tuple[int, ...]]:
        """Indices (into `scale_codes`) of the `count` blocks with the lowest SQNR, worst
        first; ties go to the larger max |error|, blocks without finite inputs come last."""
        stats = self.block_stats()
        sqnr = np.where(np.isnan(stats.sqnr_db), np.inf, stats.sqnr_db).reshape(-1)
        error = np.where(np.isnan(stats.max_abs_error), -np.inf, stats.max_abs_error)
        order = np.lexsort((-error.reshape(-1), sqnr))[: max(count, 0)]
        shape = self.scale_codes.shape
        return [tuple(int(i) for i in np.unravel_index(flat, shape)) for flat in order]

    def tensor_stats(self) -> ErrorStats:
        """Error statistics of the whole tensor."""
        sums = _error_sums(self)
        count = int(sums.count.sum())
        if count == 0:
            nan = math.nan
            return ErrorStats(0, nan, nan, nan, nan, nan)
        squared = float(sums.squared_error.sum())
        signal = float(sums.signal.sum())
        return ErrorStats(
            count=count,
            max_abs_error=float(sums.max_abs_error.max()),
            rmse=math.sqrt(squared / count),
            sqnr_db=float(_sqnr_db(np.array(signal), np.array(squared))),
            share_saturated=float(sums.saturated.sum()) / count,
            share_flushed=float(sums.flushed.sum()) / count,
        )


@dataclass(frozen=True, slots=True)
class ExactBlock:
    """One block quantized exactly (`quantize_block_exact`)."""

    format: BlockFormat
    rounding: str
    inputs: tuple[ExactValue, ...]
    scale_code: int
    scale: Fraction | None  # the block scale's exact value; None for NaN
    tensor_scale: Fraction | None  # NVFP4's FP32 per-tensor scale
    codes: tuple[int, ...]
    values: tuple[ExactValue, ...]  # dequantized: element × scale (× tensor scale)

    @property
    def multiplier(self) -> Fraction | None:
        """scale × tensor_scale: what every element value is multiplied by."""
        if self.scale is None:
            return None
        return self.scale * (self.tensor_scale if self.tensor_scale is not None else 1)

    @property
    def errors(self) -> tuple[Fraction | None, ...]:
        """value - input, exactly; None where either is not finite."""
        return tuple(
            value.fraction - x.fraction if value.is_finite and x.is_finite else None
            for x, value in zip(self.inputs, self.values, strict=True)
        )

    @property
    def saturated(self) -> tuple[bool, ...]:
        """Per element: the input lies beyond ±max_elem × multiplier (it was clipped)."""
        multiplier = self.multiplier
        if multiplier is None:
            return tuple(False for _ in self.inputs)
        limit = self.format.element.max * multiplier
        return tuple(x.is_inf or (x.is_finite and x.magnitude > limit) for x in self.inputs)

    @property
    def flushed(self) -> tuple[bool, ...]:
        """Per element: a nonzero finite input that became zero."""
        return tuple(
            x.is_finite and not x.is_zero and value.is_finite and value.is_zero
            for x, value in zip(self.inputs, self.values, strict=True)
        )


# ---- the exact path ---------------------------------------------------------------------


def tensor_scale_for(amax: Any) -> Fraction:
    """NVFP4's per-tensor scale for a tensor whose largest finite magnitude is `amax`:
    FP32(amax / (448·6)); 1 when amax is 0, 2**-149 when the quotient rounds to 0, FP32's
    max when it overflows."""
    if isinstance(amax, (list, tuple)) or getattr(amax, "ndim", 0) > 0:  # a 0-d array is one
        raise ValueError(
            "tensor_scale_for takes the tensor's amax, one number: "
            "tensor_scale_for(np.abs(x).max()), not an array"
        )
    exact = to_exact_value(amax)
    if not exact.is_finite or (exact.negative and not exact.is_zero):
        raise ValueError(f"amax must be a finite magnitude, not {exact}")
    return _global_scale_exact(exact.magnitude)


def exact_error_stats(blocks: Sequence[ExactBlock]) -> ErrorStats:
    """`ErrorStats` of exactly quantized blocks, from exact errors (see `ErrorStats`)."""
    count = saturated = flushed = 0
    max_error = squared = signal = Fraction(0)
    infinite = False
    for block in blocks:
        multiplier = block.multiplier
        limit = None if multiplier is None else block.format.element.max * multiplier
        for x, value in zip(block.inputs, block.values, strict=True):
            if not x.is_finite:
                continue
            count += 1
            signal += x.magnitude**2
            if not value.is_finite:
                infinite = True
                continue
            error = abs(value.fraction - x.fraction)
            max_error = max(max_error, error)
            squared += error**2
            saturated += limit is not None and x.magnitude > limit
            flushed += bool(x.magnitude) and value.is_zero
    if count == 0:
        return ErrorStats(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    if infinite:
        return ErrorStats(count, math.inf, math.inf, -math.inf, saturated / count, flushed / count)
    sqnr = math.inf if squared == 0 else -math.inf if signal == 0 else decibels(signal / squared)
    return ErrorStats(
        count=count,
        max_abs_error=_float_or_inf(max_error),
        rmse=_sqrt_float(squared / count),
        sqnr_db=sqnr,
        share_saturated=saturated / count,
        share_flushed=flushed / count,
        max_abs_error_exact=max_error,
        mean_squared_error_exact=squared / count,
    )


def _float_or_inf(value: Fraction) -> float:
    """float(value) for a value ≥ 0, +inf past float64's range (an error from a typed 1e400:
    float() raised OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _sqrt_float(value: Fraction) -> float:
    """√value for a value ≥ 0 of any size: the square of an error of 1e200 is past float64's
    range while its root is not, so the binary exponent is halved before float()."""
    if value == 0:
        return 0.0
    shift = value.numerator.bit_length() - value.denominator.bit_length()
    shift -= shift % 2
    try:
        return math.ldexp(math.sqrt(float(value / Fraction(2) ** shift)), shift // 2)
    except OverflowError:
        return math.inf


def decibels(ratio: Fraction) -> float:
    """10·log10 of a positive Fraction of any size (float() would overflow past 1e308, or
    underflow to 0 below 1e-308)."""
    shift = ratio.numerator.bit_length() - ratio.denominator.bit_length()
    mantissa = float(ratio / Fraction(2) ** shift)
    return 10 * (math.log10(mantissa) + shift * math.log10(2))


def quantize_block_exact(
    values: Sequence[Any],
    block_format: BlockFormat | str,
    rounding: str = "nearest_even",
    *,
    scale_code: int | None = None,
    tensor_scale: Any = None,
    seed: int | None = None,
) -> ExactBlock:
    """Quantize one block (at most block_size values) with Fractions, exactly.

    `values`: ints, floats, Fractions, decimal strings or ExactValues. `scale_code` forces
    the block scale (the block editor's "toggle a scale bit"); `tensor_scale` forces
    NVFP4's per-tensor scale (rounded to FP32), which otherwise comes from this block's
    finite amax as if the block were the whole tensor. Stochastic rounding draws per
    element from `seed`; it is not comparable with the vectorized path's draws.
    """
    fmt = get_block_format(block_format)
    _check_rounding(fmt, rounding)
    _check_takes_tensor_scale(fmt, tensor_scale)
    seed = check_seed(seed)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        # A string would be read one character at a time ("0.1" as "0", ".", "1").
        raise ValueError(f"a block is a list of values, not a {type(values).__name__}")
    inputs = tuple(to_exact_value(v) for v in values)
    if not 1 <= len(inputs) <= fmt.block_size:
        raise ValueError(f"a {fmt.name} block holds 1..{fmt.block_size} values, not {len(inputs)}")
    has_nan = any(x.is_nan for x in inputs)
    has_inf = any(x.is_inf for x in inputs)
    amax = max((x.magnitude for x in inputs if x.is_finite), default=Fraction(0))
    global_scale: Fraction | None = None
    if fmt.tensor_scale:
        global_scale = (
            _global_scale_exact(amax)
            if tensor_scale is None
            else _forced_tensor_scale(tensor_scale)
        )
    if scale_code is None:
        code = _scale_code_exact(fmt, amax, has_nan, has_inf, global_scale)
    else:
        code = _checked_scale_codes(fmt, np.asarray(scale_code)).item()
    scale = fmt.scale_value(code)
    element = fmt.element
    if scale is None:
        codes = tuple(0 for _ in inputs)
        dequantized = tuple(ExactValue.nan() for _ in inputs)
    else:
        multiplier = scale * (global_scale if global_scale is not None else 1)
        # Stochastic rounding: element i draws from seed + i (one seed for all would round
        # every element of the block with the same draw).
        codes = tuple(
            element.from_value(
                _divided(x, multiplier),
                rounding,
                overflow="saturate",
                **_seed(rounding, None if seed is None else seed + index),
            )
            for index, x in enumerate(inputs)
        )
        dequantized = tuple(_times(element.to_exact(c), multiplier) for c in codes)
    return ExactBlock(fmt, rounding, inputs, code, scale, global_scale, codes, dequantized)


def _scale_code_exact(
    fmt: BlockFormat,
    amax: Fraction,
    has_nan: bool,
    has_inf: bool,
    global_scale: Fraction | None,
) -> int:
    scale_format = fmt.scale_format
    if fmt.power_of_two_scale:
        if has_nan or has_inf:
            return E8M0_NAN_CODE
        exponent = shared_exponent(amax, fmt)
        return E8M0_NAN_CODE if exponent is None else exponent + E8M0_BIAS
    if has_nan:
        return scale_format.from_value(ExactValue.nan())
    assert global_scale is not None or not fmt.tensor_scale
    divisor = fmt.element.max * (global_scale if global_scale is not None else 1)
    quotient = scale_format.max if has_inf else amax / divisor
    quotient = min(max(quotient, scale_format.min_normal), scale_format.max)
    return scale_format.from_value(quotient, "nearest_even", overflow="saturate")


def _divided(x: ExactValue, multiplier: Fraction) -> ExactValue:
    if not x.is_finite or x.is_zero:
        return x
    if multiplier == 0:
        return ExactValue.infinity(x.negative)
    return ExactValue("finite", x.negative, x.magnitude / multiplier)


def _times(value: ExactValue, multiplier: Fraction) -> ExactValue:
    if not value.is_finite:
        return value
    return ExactValue("finite", value.negative, value.magnitude * multiplier)


def _global_scale_exact(amax: Fraction) -> Fraction:
    """NVFP4's s_global = FP32(amax / (448·6)); 1 for amax 0; 2**-149 if it rounds to 0,
    FP32's max if it overflows (float64 or typed inputs beyond 448·6·FP32 max ≈ 9.1e41:
    rounded to inf, it raised instead of giving a scale)."""
    if amax == 0:
        return Fraction(1)
    code = _FLOAT32.from_value(amax / NVFP4_GLOBAL_DIVISOR, overflow="saturate")
    scale = _FLOAT32.to_fraction(code)
    return scale if scale > 0 else _SMALLEST_FLOAT32


def _check_takes_tensor_scale(fmt: BlockFormat, tensor_scale: Any) -> None:
    """A per-tensor scale given for a format without one (MX) would be ignored, and whoever
    passed it would believe it applied: refuse it."""
    if tensor_scale is not None and not fmt.tensor_scale:
        raise ValueError(
            f"{fmt.name} has no per-tensor scale (only NVFP4 has one): "
            "tensor_scale= cannot be applied to it"
        )


def _forced_tensor_scale(value: Any) -> Fraction:
    exact = to_exact_value(value)
    rounded = _FLOAT32.to_exact(_FLOAT32.from_value(exact)) if exact.is_finite else exact
    if not rounded.is_finite or rounded.negative or rounded.is_zero:
        raise ValueError(f"a per-tensor scale must be a positive FP32 number, not {exact}")
    return rounded.magnitude


# ---- the vectorized path ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    """How an array is cut into a (blocks, block_size) matrix and put back."""

    shape: tuple[int, ...]
    axis: int
    length: int  # along the axis
    blocks_per_row: int
    block_size: int

    @property
    def moved_shape(self) -> tuple[int, ...]:
        return (*self.shape[: self.axis], *self.shape[self.axis + 1 :], self.length)

    def to_blocks(self, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        rows = np.moveaxis(data, self.axis, -1).reshape(-1, self.length)
        padded_length = self.blocks_per_row * self.block_size
        if padded_length != self.length:
            # The tail block is padded with zeros: they never change amax, and are cut off.
            padded = np.zeros((rows.shape[0], padded_length), dtype=rows.dtype)
            padded[:, : self.length] = rows
            rows = padded
        return rows.reshape(-1, self.block_size)

    def from_blocks(self, blocks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        rows = blocks.reshape(-1, self.blocks_per_row * self.block_size)[:, : self.length]
        return np.moveaxis(rows.reshape(self.moved_shape), -1, self.axis)

    def to_grid(self, per_block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Per-block values (one per row of the block matrix) in the scale grid's shape."""
        moved = (*self.moved_shape[:-1], self.blocks_per_row)
        return np.moveaxis(per_block.reshape(moved), -1, self.axis)

    def from_grid(self, grid: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.moveaxis(grid, self.axis, -1).reshape(-1)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return (*self.shape[: self.axis], self.blocks_per_row, *self.shape[self.axis + 1 :])


def quantize(
    array: npt.ArrayLike,
    block_format: BlockFormat | str,
    rounding: str = "nearest_even",
    axis: int = -1,
    *,
    scale_codes: npt.ArrayLike | None = None,
    tensor_scale: Any = None,
    seed: int | None = None,
) -> QuantizedTensor:
    """Quantize a float array into a block format, blocks running along `axis`.

    `rounding`: how elements round (nearest_even by the specs; scales always follow the
    format's scale rule). `scale_codes` forces the block-scale codes (an int, or an array
    broadcastable to the scale grid: the input's shape with `axis` cut into blocks);
    `tensor_scale` forces NVFP4's per-tensor scale (rounded to FP32). Input: float16/32/64
    (or ml_dtypes) arrays; they are read exactly.
    """
    fmt = get_block_format(block_format)
    _check_rounding(fmt, rounding)
    _check_takes_tensor_scale(fmt, tensor_scale)
    seed = check_seed(seed)
    data = _as_float_array(array)
    if data.ndim == 0:
        data = data.reshape(1)
    if data.size == 0:
        raise ValueError("nothing to quantize: the array is empty")
    axis = _checked_axis(axis, data.ndim)
    length = data.shape[axis]
    layout = _Layout(data.shape, axis, length, -(-length // fmt.block_size), fmt.block_size)
    blocks = layout.to_blocks(data)
    with np.errstate(invalid="ignore", over="ignore"):
        amax = np.maximum(blocks.max(axis=1), -blocks.min(axis=1)).astype(np.float64)
    global_scale: float | None = None
    if fmt.tensor_scale:
        if tensor_scale is None:
            global_scale = float(_global_scale_exact(Fraction(_finite_amax(data, amax))))
        else:
            global_scale = float(_forced_tensor_scale(tensor_scale))
    if scale_codes is None:
        codes_of_scales = _scale_codes(fmt, amax, global_scale)
    else:
        grid = _scale_grid(fmt, scale_codes, layout.grid_shape)
        codes_of_scales = layout.from_grid(grid).astype(np.uint8)
    scales = fmt.scale_format.to_float_array(codes_of_scales)
    multiplier = scales * (global_scale if global_scale is not None else 1.0)
    element_codes = _element_codes(fmt, blocks, scales, multiplier, rounding, seed)
    element_values = fmt.element.to_float_array(element_codes)
    dequantized = element_values * multiplier[:, None]
    return QuantizedTensor(
        format=fmt,
        rounding=rounding,
        axis=axis,
        input=data,
        codes=layout.from_blocks(element_codes),
        scale_codes=layout.to_grid(codes_of_scales),
        scales=layout.to_grid(scales),
        tensor_scale=global_scale,
        values=layout.from_blocks(dequantized),
        _layout=layout,
    )


def dequantize(
    codes: npt.ArrayLike,
    scale_codes: npt.ArrayLike,
    block_format: BlockFormat | str,
    axis: int = -1,
    tensor_scale: float | None = None,
) -> FloatArray:
    """Element codes and block-scale codes back to float64 values (exact): the inverse the
    block editor needs after editing codes. `tensor_scale` is required for NVFP4."""
    fmt = get_block_format(block_format)
    _check_takes_tensor_scale(fmt, tensor_scale)
    element_codes = np.asarray(codes)
    if element_codes.ndim == 0:
        element_codes = element_codes.reshape(1)
    # As quantize: axis 2 of a 1-d array was read as axis 0, and scale codes of the wrong
    # shape failed in numpy's broadcast with its "remapped shapes" message.
    axis = _checked_axis(axis, element_codes.ndim)
    length = element_codes.shape[axis]
    layout = _Layout(
        element_codes.shape, axis, length, -(-length // fmt.block_size), fmt.block_size
    )
    scale_grid = _scale_grid(fmt, scale_codes, layout.grid_shape)
    scales = fmt.scale_format.to_float_array(layout.from_grid(scale_grid))
    if fmt.tensor_scale:
        if tensor_scale is None:
            raise ValueError(f"{fmt.name} values need the per-tensor scale (tensor_scale=)")
        scales = scales * float(_forced_tensor_scale(tensor_scale))
    values = fmt.element.to_float_array(layout.to_blocks(element_codes)) * scales[:, None]
    return np.asarray(layout.from_blocks(values), dtype=np.float64)


def _checked_axis(axis: int, ndim: int) -> int:
    """The axis as a non-negative int; ValueError when it is no int or out of range."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError("axis must be an int")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimensions")
    return int(axis) % ndim


def _scale_grid(
    fmt: BlockFormat, scale_codes: npt.ArrayLike, grid_shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """Given scale codes broadcast to the scale grid; ValueError when they do not fit it."""
    forced = _checked_scale_codes(fmt, np.asarray(scale_codes))
    try:
        return np.broadcast_to(forced, grid_shape)
    except ValueError:
        raise ValueError(
            f"scale_codes of shape {forced.shape} do not fit the scale grid {grid_shape}"
        ) from None


def _as_float_array(array: npt.ArrayLike) -> np.ndarray[Any, Any]:
    data = read_array(array)
    if data.dtype.kind == "f":
        if data.dtype.itemsize > 8:
            raise ValueError(f"{data.dtype} is wider than float64; give float16/32/64 values")
        return data
    if data.dtype.kind == "V":  # ml_dtypes (bfloat16, float8_*): every value is a float64
        try:
            return data.astype(np.float64)
        except (TypeError, ValueError):
            # Raw bytes: what np.load gives for a .npy of ml_dtypes' bfloat16 or float8 (the
            # file cannot say which type they are); "not |V2" alone told a user nothing.
            raise ValueError(
                f"the values are raw {data.dtype.itemsize}-byte words ({data.dtype}) of an "
                "unknown type, as np.load reads a bfloat16 or float8 .npy file: save it "
                "as float32 first (x.astype(np.float32))"
            ) from None
    if data.dtype.kind in "iu":
        # Exact while the integers fit float64's 53-bit significand.
        if data.size and int(np.abs(data.astype(np.float64)).max()) > 2**53:
            raise ValueError("integers beyond 2**53 do not convert exactly; give floats")
        return data.astype(np.float64)
    raise ValueError(f"quantize takes an array of numbers, not {data.dtype}")


def _finite_amax(data: np.ndarray[Any, Any], block_amax: FloatArray) -> float:
    """The largest finite magnitude of the tensor (block amaxes when all are finite)."""
    if np.isfinite(block_amax).all():
        return float(block_amax.max())
    finite = data[np.isfinite(data)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def _check_rounding(fmt: BlockFormat, rounding: str) -> None:
    modes = INT_ROUNDING_MODES if isinstance(fmt.element, IntElement) else ROUNDING_MODES
    if rounding not in modes:
        raise ValueError(f"unknown rounding mode {rounding!r}; one of {', '.join(modes)}")


def _seed(rounding: str, seed: int | None) -> dict[str, Any]:
    return {"seed": seed} if rounding == "stochastic" else {}


def _checked_scale_codes(fmt: BlockFormat, codes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if codes.dtype.kind not in "iu":
        raise ValueError(f"scale codes must be integers, not {codes.dtype}")
    width = fmt.scale_format.width
    if codes.size and (codes.min() < 0 or int(codes.max()) >= 1 << width):
        raise ValueError(f"a {fmt.scale_format.name} scale code is 0..{(1 << width) - 1:#x}")
    if fmt.scale_format.signed and codes.size:
        negative = (codes.astype(np.int64) >> (width - 1)) & 1
        if negative.any():
            raise ValueError(
                f"{fmt.name} block scales are non-negative: codes 0..{(1 << (width - 1)) - 1:#x}"
            )
    return codes.astype(np.int64)


def _scale_codes(fmt: BlockFormat, amax: FloatArray, global_scale: float | None) -> CodeArray:
    """Block-scale codes from block amaxes (NaN where a block holds NaN, inf for inf)."""
    if fmt.power_of_two_scale:
        return _shared_exponent_codes(fmt, amax)
    scale_format = fmt.scale_format
    divisor = np.full(amax.shape, float(fmt.element.max) * (global_scale or 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        quotient = amax / divisor
    codes = _round_quotients(scale_format, quotient, "nearest_even", None)
    # The clamp to [min_normal, max]: comparisons of the rounded quotient are exact enough,
    # since rounding is monotone and both ends are float64 values.
    smallest = scale_format.from_value(scale_format.min_normal)
    codes = np.where(quotient < float(scale_format.min_normal), smallest, codes)
    nan_code = scale_format.from_value(ExactValue.nan())
    return np.where(np.isnan(amax), nan_code, codes).astype(np.uint8)


def _shared_exponent_codes(fmt: BlockFormat, amax: FloatArray) -> CodeArray:
    """MX scale codes, exactly: the rules of `shared_exponent` on float64 amaxes."""
    finite = np.isfinite(amax)
    positive = finite & (amax > 0)
    safe = np.where(positive, amax, 1.0)
    mantissa, frexp_exponent = np.frexp(safe)  # safe = mantissa × 2**exponent, mantissa in [½, 1)
    floor_log2 = frexp_exponent.astype(np.int64) - 1
    emax = fmt.element_emax
    rule = fmt.scale_rule
    if rule == "floor":
        exponent = floor_log2 - emax
    elif rule == "ceil":
        exponent = floor_log2 + (mantissa != 0.5) - emax
    elif rule == "even":
        # amax rounded (ties away) to the element's precision reaches the next power of two
        # exactly when its significand is at least 2 - 2**-(mantissa_bits + 1).
        threshold = 1.0 - 2.0 ** -(fmt.element.mantissa_bits + 2)
        exponent = floor_log2 + (mantissa >= threshold) - emax
    else:  # rceil: ceil(log2(amax / max_elem)), with exact float64 comparisons
        max_elem = float(fmt.element.max)
        guess = floor_log2 - emax  # floor(log2(amax / max_elem)) is guess or guess - 1
        with np.errstate(over="ignore"):
            floor_ratio = guess - (safe < np.ldexp(max_elem, guess.astype(np.int32)))
            on_power = safe == np.ldexp(max_elem, floor_ratio.astype(np.int32))
        exponent = floor_ratio + ~on_power
    exponent = np.where(positive, exponent, E8M0_MIN_EXPONENT)
    nan = ~finite | (exponent > E8M0_BIAS)
    codes = np.maximum(exponent, E8M0_MIN_EXPONENT) + E8M0_BIAS
    return np.where(nan, E8M0_NAN_CODE, codes).astype(np.uint8)


def _element_codes(
    fmt: BlockFormat,
    blocks: np.ndarray[Any, Any],
    scales: FloatArray,
    multiplier: FloatArray,
    rounding: str,
    seed: int | None,
) -> CodeArray:
    element = fmt.element
    nan_block = np.isnan(scales)
    if fmt.power_of_two_scale:
        exponent = np.where(nan_block, 0, _exponent_of_power(scales))
        if _float32_exact(element, blocks, rounding):
            factor = np.ldexp(np.ones(exponent.shape, np.float32), (-exponent).astype(np.int32))
            scaled = blocks * factor[:, None]
        else:
            wide = blocks.astype(np.float64)
            with np.errstate(over="ignore", under="ignore"):
                scaled = np.ldexp(wide, (-exponent).astype(np.int32)[:, None])
            _keep_above_zero(scaled, wide)
        codes = element.from_float_array(
            scaled, rounding, overflow="saturate", **_seed(rounding, seed)
        )
    else:
        wide = blocks.astype(np.float64)
        divisor = np.broadcast_to(multiplier[:, None], wide.shape)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
            quotient = np.where(wide == 0, wide, wide / divisor)
        _keep_above_zero(quotient, wide)
        codes = _round_quotients(element, quotient, rounding, seed)
    codes[nan_block] = 0
    return codes


def _exponent_of_power(scales: FloatArray) -> np.ndarray[Any, np.dtype[np.int64]]:
    """k for each 2**k (finite, positive)."""
    _, exponent = np.frexp(scales)
    return exponent.astype(np.int64) - 1


def _float32_exact(element: ElementFormat, blocks: np.ndarray[Any, Any], rounding: str) -> bool:
    """Whether scaling float32 input by 2**-e in float32 rounds exactly like the exact path.

    x·2**-e is exact unless it falls below float32's normal range (< 2**-126); under a
    nearest rounding such a value rounds to zero of its sign whether float32 rounded it
    or not, as long as the element's smallest subnormal is far above 2**-126.
    """
    return (
        blocks.dtype == np.float32
        and isinstance(element, FloatFormat)
        and rounding in ("nearest_even", "nearest_away")
        and (element.min_subnormal or element.min_normal) >= Fraction(1, 2**100)
    )


def _keep_above_zero(scaled: FloatArray, original: np.ndarray[Any, Any]) -> None:
    """Where a nonzero value scaled to float64 zero, put the smallest float64 of its sign,
    so that directed roundings still see a nonzero value (it is far below any element's
    smallest value, so nearest roundings still give zero)."""
    lost = (scaled == 0) & (original != 0) & np.isfinite(original)
    if lost.any():
        scaled[lost] = np.copysign(5e-324, original[lost])


def _round_quotients(
    element: ElementFormat,
    quotient: FloatArray,
    rounding: str,
    seed: int | None,
) -> CodeArray:
    """Round float64 quotients x / d (x, d float64) into `element`: the same codes as
    rounding the exact quotients.

    Why one float64 rounding first does no harm here: a wrong result needs the float64
    quotient to land exactly on a rounding boundary b (an element value or a midpoint)
    while x != b·d. Boundaries have at most mantissa_bits + 2 significant bits, so b·d is
    a float64 (BlockFormat checks the widths), and x, another float64, differs from it by
    at least the float64 spacing at b·d, 2**(e(b) + e(d) - 52) or more; the quotient is then
    more than (that / d) > ulp(b) / 2 from b, so it cannot round to b. (The tests check the
    neighbours of every boundary.) Stochastic rounding draws against the float64 quotient.
    """
    return element.from_float_array(
        quotient, rounding, overflow="saturate", **_seed(rounding, seed)
    )


# ---- error statistics -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class _ErrorSums:
    count: np.ndarray[Any, Any]
    max_abs_error: FloatArray
    squared_error: FloatArray
    signal: FloatArray
    saturated: np.ndarray[Any, Any]
    flushed: np.ndarray[Any, Any]


def _error_sums(quantized: QuantizedTensor) -> _ErrorSums:
    layout = quantized._layout
    x = layout.to_blocks(quantized.input).astype(np.float64)
    q = layout.to_blocks(quantized.values)
    # The elements that exist (not the zeros that pad a short tail block).
    real = layout.to_blocks(np.ones(quantized.input.shape, dtype=bool))
    counted = real & np.isfinite(x)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(q - x)
        error = np.where(np.isfinite(q), error, np.inf)
        error = np.where(counted, error, 0.0)
        squared = error * error
        fmt = quantized.format
        multiplier = layout.from_grid(quantized.scales) * (quantized.tensor_scale or 1.0)
        limit = float(fmt.element.max) * multiplier
        saturated = counted & (np.abs(x) > limit[:, None])
        flushed = counted & (x != 0) & (q == 0)
        signal = np.where(counted, x * x, 0.0)
    return _ErrorSums(
        count=counted.sum(axis=1),
        max_abs_error=error.max(axis=1),
        squared_error=squared.sum(axis=1),
        signal=signal.sum(axis=1),
        saturated=saturated.sum(axis=1),
        flushed=flushed.sum(axis=1),
    )


def _sqnr_db(signal: np.ndarray[Any, Any], squared_error: np.ndarray[Any, Any]) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(
            squared_error == 0, np.inf, signal / np.where(squared_error == 0, 1, squared_error)
        )
        return np.where(ratio == 0, -np.inf, 10 * np.log10(np.where(ratio == 0, 1, ratio)))
