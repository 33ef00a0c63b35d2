"""Block-scaled formats as data: OCP Microscaling (MX) and NVIDIA NVFP4.

A block format stores ``block_size`` small elements that share one scale. A value is
``element × block scale`` (× the per-tensor scale, for NVFP4). The rules, exactly as
`fpexplorer.formats.block_quantize` applies them:

**MX** (OCP Microscaling Formats v1.0): blocks of 32, one E8M0 scale ``X = 2**(c - 127)``
(code 0xFF is NaN; E8M0 has no zero and no inf). The shared exponent ``e`` of a block whose
largest magnitude is ``amax``, by scale rule:

- ``floor`` (the spec's rule, section 6.3): ``e = floor(log2(amax)) - emax_elem``;
- ``ceil``: ``e = ceil(log2(amax)) - emax_elem``;
- ``even``: ``e = floor(log2(amax')) - emax_elem`` where ``amax'`` is amax rounded to the
  element's precision with ties away from zero (torchao's ``EVEN``);
- ``rceil``: ``e = ceil(log2(amax / max_elem))`` (NVIDIA Transformer Engine and cuBLAS:
  the FP32 exponent of amax/max_elem, rounded up when its mantissa is non-zero);

``emax_elem = floor(log2(max_elem))``: 8 for E4M3, 15 for E5M2, 2 for E2M3, 4 for E3M2,
2 for E2M1, 0 for INT8. Then ``e`` below -127 becomes -127, and ``e`` above 127 makes the
scale NaN. Elements are ``x / X`` rounded into the element format (nearest-even unless
another mode is asked for) and saturated to ±max_elem.

**NVFP4**: E2M1 elements in blocks of 16, an E4M3 block scale used as unsigned, and an
FP32 per-tensor scale: ``s_global = amax_tensor / (448·6)`` rounded to FP32;
``s_block = (amax_block / 6) / s_global`` clamped to [2**-6, 448] (E4M3's positive normal
range, as torchao clamps) and rounded to nearest-even E4M3; elements are
``x / (s_block·s_global)`` rounded into E2M1 and saturated to ±6. Every quotient is taken
exactly (never through a rounded reciprocal).

Special inputs (one rule each, the same in the exact and the vectorized path):

- **NaN in a block**: the block scale is NaN (E8M0 0xFF, E4M3 0x7F); every element of the
  block then decodes to NaN, and its element codes are 0.
- **±inf in a block**: MX: ``floor(log2(inf))`` is above 127, so the scale is NaN as for
  NaN (the spec's formula read literally). NVFP4: ``(inf / 6) / s_global`` clamps to 448,
  the infinite element saturates to ±6 and the rest of the block is scaled by 448·s_global.
  The NVFP4 per-tensor amax is taken over the finite elements only, so one inf does not
  make ``s_global`` infinite and zero every other block.
- **All-zero block**: MX: amax = 0 gives ``e = -127`` (code 0x00, the smallest scale);
  NVFP4: the clamp gives ``s_block = 2**-6``. Elements are zeros of the inputs' signs
  (INT8 has no -0).
- **A block whose amax is subnormal in the element format**: this happens only where the
  scale is clamped at its bottom (MX ``e = -127``; NVFP4 ``s_block = 2**-6``); elements are
  then rounded as they are, into the element's subnormals or to zero.
- **A tail shorter than the block size** (the last block along the axis when the length is
  not a multiple): it is a block of its own; its scale comes from the elements present
  (as if padded with zeros, which never change amax).
- NVFP4 with an all-zero (or all non-finite) tensor: ``s_global = 1``; a tensor so small
  that ``amax / 2688`` rounds to FP32 zero gets the smallest FP32 subnormal, 2**-149, and
  one so large that it overflows FP32 (float64 or typed values beyond ~9.1e41) FP32's max.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from .exact import ExactValue
from .format import ROUNDING_MODES, FloatFormat, _floor_log2, to_exact_value
from .quoting import quote_text
from .registry import get_format

if TYPE_CHECKING:
    import numpy.typing as npt

SCALE_RULES = ("floor", "ceil", "even", "rceil", "nearest")
# floor/ceil/even/rceil give power-of-two scales (E8M0); nearest rounds amax / max_elem (and
# the per-tensor scale) to the nearest scale-format value (NVFP4's E4M3 block scales).
POWER_OF_TWO_RULES = ("floor", "ceil", "even", "rceil")
# MXINT8 elements round under every mode of the float engine.
INT_ROUNDING_MODES = ROUNDING_MODES

E8M0_NAN_CODE = 0xFF
E8M0_BIAS = 127
E8M0_MIN_EXPONENT = -127
E8M0_MAX_EXPONENT = 127
NVFP4_GLOBAL_DIVISOR = 448 * 6  # max of the E4M3 block scale × max of the E2M1 element


@dataclass(frozen=True, slots=True)
class IntElement:
    """A two's-complement integer element times 2**-fraction_bits (MXINT8: 8 bits, 2**-6).

    Values are ``k / 2**fraction_bits`` for k in [-2**(bits-1), 2**(bits-1) - 1]; quantizing
    saturates to ±max (symmetric, the MX rule "saturated to ±max"), so the most negative
    code (0x80: -2 for MXINT8) decodes but is never produced (gfloat produces it; the
    oracle tests pin that difference). There is no -0, inf or NaN.
    """

    name: str = "int8"
    bits: int = 8
    fraction_bits: int = 6

    @property
    def width(self) -> int:
        return self.bits

    @property
    def max(self) -> Fraction:
        return Fraction((1 << (self.bits - 1)) - 1, 1 << self.fraction_bits)

    @property
    def mantissa_bits(self) -> int:
        """Fraction bits of the largest values' significand (1.111111b for MXINT8): the
        precision the EVEN scale rule rounds amax to."""
        return self.bits - 2

    def _signed(self, code: int) -> int:
        code = int(code)
        if not 0 <= code < (1 << self.bits):
            raise ValueError(f"code {code:#x} out of range for the {self.bits}-bit {self.name}")
        return code - (1 << self.bits) if code >> (self.bits - 1) else code

    def to_fraction(self, code: int) -> Fraction:
        return Fraction(self._signed(code), 1 << self.fraction_bits)

    def to_exact(self, code: int) -> ExactValue:
        value = self.to_fraction(code)
        return ExactValue("finite", value < 0, abs(value))

    def code_to_bits(self, code: int) -> str:
        self._signed(code)
        return format(int(code), f"0{self.bits}b")

    def code_to_hex(self, code: int) -> str:
        self._signed(code)
        return f"0x{int(code):0{(self.bits + 3) // 4}x}"

    def from_value(
        self,
        x: Any,
        rounding: str = "nearest_even",
        overflow: str | None = None,
        seed: int | None = None,
    ) -> int:
        """The code of `x` rounded to a multiple of 2**-fraction_bits, saturated to ±max
        (`overflow` is accepted for symmetry with FloatFormat; an integer element always
        saturates). NaN gives 0."""
        _check_int_rounding(rounding)
        exact = to_exact_value(x)
        limit = (1 << (self.bits - 1)) - 1
        if exact.is_nan:
            return 0
        if exact.is_inf:
            k = -limit if exact.negative else limit
        else:
            scaled = exact.fraction * (1 << self.fraction_bits)
            k = _round_fraction_to_int(scaled, rounding, seed)
            k = max(-limit, min(limit, k))
        return k & ((1 << self.bits) - 1)

    def from_float_array(
        self,
        x: npt.ArrayLike,
        rounding: str = "nearest_even",
        overflow: str | None = None,
        seed: int | None = None,
    ) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """`from_value` over an array of floats (exact: scaling by 2**6 is exact)."""
        _check_int_rounding(rounding)
        if self.bits > 8:
            raise ValueError("integer elements wider than 8 bits are not supported")
        array = np.asarray(x, dtype=np.float64)
        limit = float((1 << (self.bits - 1)) - 1)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = np.ldexp(array, self.fraction_bits)
            k = _round_array_to_int(scaled, rounding, seed)
            k = np.clip(k, -limit, limit)
            k = np.where(np.isnan(array), 0.0, k)
        return k.astype(np.int64).astype(np.uint8)

    def to_float_array(self, codes: npt.ArrayLike) -> np.ndarray[Any, np.dtype[np.float64]]:
        signed = np.asarray(codes).astype(np.uint8).view(np.int8).astype(np.float64)
        result: np.ndarray[Any, np.dtype[np.float64]] = np.ldexp(signed, -self.fraction_bits)
        return result

    def __str__(self) -> str:
        return self.name


ElementFormat = FloatFormat | IntElement


@dataclass(frozen=True, slots=True)
class BlockFormat:
    """A block-scaled format: elements that share one scale per block (see module doc).

    `scale_rule`: one of SCALE_RULES; floor/ceil/even/rceil need a power-of-two scale format
    (E8M0), nearest any other (E4M3). `tensor_scale`: a second, FP32 per-tensor scale
    (NVFP4's s_global), allowed with the nearest rule.
    """

    name: str
    element: ElementFormat
    block_size: int
    scale_format: FloatFormat
    scale_rule: str = "floor"
    tensor_scale: bool = False

    def __post_init__(self) -> None:
        if self.scale_rule not in SCALE_RULES:
            raise ValueError(f"unknown scale rule {self.scale_rule!r}; one of {SCALE_RULES}")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int):
            raise ValueError("block_size must be an int")
        if not 1 <= self.block_size <= 1 << 16:
            raise ValueError(f"block size must be 1..65536, not {self.block_size}")
        if self.power_of_two_scale != (self.scale_rule in POWER_OF_TWO_RULES):
            raise ValueError(
                f"scale rule {self.scale_rule!r} does not fit the {self.scale_format.name} "
                "scale: floor, ceil, even and rceil need E8M0, nearest another scale format"
            )
        if self.tensor_scale and self.power_of_two_scale:
            raise ValueError("a per-tensor scale goes with the nearest rule (NVFP4)")
        if not self.power_of_two_scale:
            # The vectorized quantizer rounds float64 quotients; that equals rounding the
            # exact quotients while a rounding boundary (element significand + 2 bits) times
            # the divisor (scale significand × FP32 tensor scale) fits float64's 53 bits.
            bits = self.element.mantissa_bits + 2 + self.scale_format.mantissa_bits + 1 + 24
            if bits > 53:
                raise ValueError(
                    f"{self.name}: element and scale significands too wide for the nearest "
                    f"rule ({bits} > 53 bits)"
                )

    @property
    def power_of_two_scale(self) -> bool:
        """True for E8M0-style scales: unsigned, no fraction bits, every value 2**k."""
        fmt = self.scale_format
        return fmt.mantissa_bits == 0 and fmt.encoding == "fnu"

    @property
    def element_emax(self) -> int:
        """floor(log2(max_elem)): the emax_elem of the OCP MX spec."""
        return floor_log2(self.element.max)

    @property
    def bits_per_element(self) -> float:
        """Storage per element, the shared scale included (4.25 for MXFP4)."""
        return self.element.width + self.scale_format.width / self.block_size

    def with_rule(self, scale_rule: str) -> BlockFormat:
        """The same format under another scale rule."""
        return dataclasses.replace(self, scale_rule=scale_rule)

    def with_block_size(self, block_size: int) -> BlockFormat:
        return dataclasses.replace(self, block_size=block_size)

    def scale_value(self, scale_code: int) -> Fraction | None:
        """The exact value of a block-scale code; None for NaN."""
        value = self.scale_format.to_exact(int(scale_code))
        if value.is_nan:
            return None
        if not value.is_finite or value.negative:
            raise ValueError(
                f"scale code {int(scale_code):#x} is {value}: a block scale is a finite, "
                "non-negative value"
            )
        return value.magnitude

    def __str__(self) -> str:
        return self.name


def _named() -> dict[str, BlockFormat]:
    e8m0 = get_format("float8_e8m0fnu")
    e4m3 = get_format("float8_e4m3fn")
    table: dict[str, ElementFormat] = {
        "mxfp8_e4m3": get_format("float8_e4m3fn"),
        "mxfp8_e5m2": get_format("float8_e5m2"),
        "mxfp6_e2m3": get_format("float6_e2m3fn"),
        "mxfp6_e3m2": get_format("float6_e3m2fn"),
        "mxfp4": get_format("float4_e2m1fn"),
        "mxint8": IntElement(),
    }
    named = {name: BlockFormat(name, element, 32, e8m0, "floor") for name, element in table.items()}
    named["nvfp4"] = BlockFormat(
        "nvfp4", get_format("float4_e2m1fn"), 16, e4m3, "nearest", tensor_scale=True
    )
    return named


_BLOCK_FORMATS = _named()
_BLOCK_ALIASES = {"mxfp8": "mxfp8_e4m3", "mxfp6": "mxfp6_e2m3", "mxfp4_e2m1": "mxfp4"}


def list_block_formats() -> list[BlockFormat]:
    """The named block formats: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4,
    mxint8 (OCP MX v1.0, FLOOR rule) and nvfp4."""
    return list(_BLOCK_FORMATS.values())


def get_block_format(name: str | BlockFormat, scale_rule: str | None = None) -> BlockFormat:
    """A named block format, optionally under another scale rule."""
    if isinstance(name, BlockFormat):
        fmt = name
    else:
        if not isinstance(name, str):
            raise ValueError(f"a block format name must be text, not {type(name).__name__}")
        key = name.strip().lower()
        key = _BLOCK_ALIASES.get(key, key)
        if key not in _BLOCK_FORMATS:
            known = ", ".join(_BLOCK_FORMATS)
            raise ValueError(f"unknown block format {quote_text(name.strip(), 40)}; one of {known}")
        fmt = _BLOCK_FORMATS[key]
    if scale_rule is not None and scale_rule != fmt.scale_rule:
        fmt = fmt.with_rule(scale_rule)
    return fmt


# ---- exact helpers shared by both quantizer paths -------------------------------------


def floor_log2(value: Fraction | int) -> int:
    """floor(log2(value)) of a positive rational, exactly."""
    value = Fraction(value)
    if value <= 0:
        raise ValueError("floor_log2 needs a positive value")
    return _floor_log2(value)  # the scalar engine's integer-only binade search


def ceil_log2(value: Fraction | int) -> int:
    """ceil(log2(value)) of a positive rational, exactly."""
    value = Fraction(value)
    exponent = floor_log2(value)
    return exponent if value == Fraction(2) ** exponent else exponent + 1


def shared_exponent(amax: Fraction, block_format: BlockFormat) -> int | None:
    """The MX shared exponent of a block with finite largest magnitude `amax` under the
    format's rule, clamped at -127; None (a NaN scale) when it is above 127."""
    if amax < 0:
        raise ValueError("amax is a magnitude")
    if amax == 0:
        return E8M0_MIN_EXPONENT
    element = block_format.element
    emax = block_format.element_emax
    rule = block_format.scale_rule
    if rule == "floor":
        exponent = floor_log2(amax) - emax
    elif rule == "ceil":
        exponent = ceil_log2(amax) - emax
    elif rule == "even":
        exponent = floor_log2(_round_to_precision_away(amax, element.mantissa_bits)) - emax
    elif rule == "rceil":
        exponent = ceil_log2(amax / element.max)
    else:
        raise ValueError(f"{block_format.name}: the {rule!r} rule has no shared exponent")
    if exponent > E8M0_MAX_EXPONENT:
        return None
    return max(exponent, E8M0_MIN_EXPONENT)


def _round_to_precision_away(value: Fraction, mantissa_bits: int) -> Fraction:
    """`value` rounded to mantissa_bits fraction bits of significand, ties away from zero."""
    quantum = Fraction(2) ** (floor_log2(value) - mantissa_bits)
    return math.floor(value / quantum + Fraction(1, 2)) * quantum


def _check_int_rounding(rounding: str) -> None:
    if rounding not in INT_ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}; one of {INT_ROUNDING_MODES}")


def _round_fraction_to_int(value: Fraction, rounding: str, seed: int | None) -> int:
    low = math.floor(value)
    rest = value - low
    if rest == 0:
        return low
    if rounding == "nearest_even":
        up = rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2 == 1)
    elif rounding == "nearest_away":
        up = rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low >= 0)
    elif rounding == "toward_zero":
        up = low < 0
    elif rounding == "toward_positive":
        up = True
    elif rounding == "toward_negative":
        up = False
    elif rounding == "round_to_odd":
        up = low % 2 == 0
    else:  # stochastic: up with probability rest (to 2**-64)
        up = random.Random(seed).getrandbits(64) < rest * (1 << 64)
    return low + int(up)


def _round_array_to_int(
    scaled: np.ndarray[Any, np.dtype[np.float64]], rounding: str, seed: int | None
) -> np.ndarray[Any, np.dtype[np.float64]]:
    low = np.floor(scaled)
    rest = scaled - low  # exact: scaled and low share the binade's quantum
    if rounding == "nearest_even":
        up = (rest > 0.5) | ((rest == 0.5) & (np.fmod(low, 2) != 0))
    elif rounding == "nearest_away":
        up = (rest > 0.5) | ((rest == 0.5) & (low >= 0))
    elif rounding == "toward_zero":
        up = (rest > 0) & (low < 0)
    elif rounding == "toward_positive":
        up = rest > 0
    elif rounding == "toward_negative":
        up = np.zeros(scaled.shape, dtype=bool)
    elif rounding == "round_to_odd":
        up = (rest > 0) & (np.fmod(low, 2) == 0)
    else:
        up = np.random.default_rng(seed).random(scaled.shape) < rest
    result: np.ndarray[Any, np.dtype[np.float64]] = low + up
    return result
