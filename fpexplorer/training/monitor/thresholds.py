"""Where rounding into a format flushes to zero, goes subnormal or overflows. Torch-free.

The monitor compares float32 magnitudes (gradients times the loss scale, as `g * scale`
is computed) with three float32 thresholds per format. They come from the exact engine,
`fpexplorer.formats`, for any format name or spec (FP16, BF16, the FP8/FP6/FP4 families,
E8M0, a custom `eXmY`): each is the last float32 on one side of a rounding boundary, found
by bisection over float32 bit patterns with the engine's own round-to-nearest-even (and
the format's default overflow policy) deciding each probe. Nothing is typed in by hand and
nothing comes from `torch.finfo`, so ties at a boundary follow the format's real rules
(FP16's max has an odd significand and the tie above it overflows; E4M3FN's is even and
the tie stays at max).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from fpexplorer.formats import FloatFormat, get_format

DEFAULT_FORMATS: tuple[str, ...] = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_FLOAT32_MAX_PATTERN = 0x7F7FFFFF  # the largest finite float32


@dataclass(frozen=True, slots=True)
class FormatRange:
    """A format's range (exact) and its rounding thresholds for float32 inputs.

    x flushes to zero iff 0 < |x| <= flush_max, rounds to a subnormal iff
    flush_max < |x| <= subnormal_max, overflows iff |x| > finite_max_input (NaN and inf
    always overflow). A format without zero flushes nothing (flush_max 0.0), one without
    subnormals has subnormal_max == flush_max, and one whose range passes float32's never
    overflows a finite float32 (finite_max_input is float32's max).
    """

    name: str
    max: Fraction
    min_normal: Fraction
    min_subnormal: Fraction | None  # None: the format has no subnormals
    flush_max: float
    subnormal_max: float
    finite_max_input: float

    @classmethod
    def of(cls, name: str) -> FormatRange:
        """The range of a format name or spec (`get_format` spelling); raises ValueError."""
        return format_range(name)

    @property
    def smallest_positive(self) -> Fraction:
        return self.min_subnormal if self.min_subnormal is not None else self.min_normal

    @property
    def thresholds(self) -> tuple[float, float, float]:
        return (self.flush_max, self.subnormal_max, self.finite_max_input)

    def header_json(self) -> dict[str, float]:
        """The run-log header's range: floats, nearest to the exact values. `min_subnormal`
        is the smallest positive value (min_normal in a format without subnormals)."""
        return {
            "max": _nearest_float(self.max),
            "min_normal": _nearest_float(self.min_normal),
            "min_subnormal": _nearest_float(self.smallest_positive),
        }


@functools.cache
def format_range(name: str) -> FormatRange:
    fmt = get_format(name)
    zero = _last_true(lambda v: _rounds_to(fmt, v) == 0)
    below_normal = _last_true(lambda v: _below(_rounds_to(fmt, v), fmt.min_normal))
    finite = _last_true(lambda v: not fmt.round(v).overflow)
    return FormatRange(
        name=fmt.name,
        max=fmt.max,
        min_normal=fmt.min_normal,
        min_subnormal=fmt.min_subnormal,
        flush_max=zero if zero is not None else 0.0,
        subnormal_max=max(below_normal, zero or 0.0) if below_normal is not None else 0.0,
        finite_max_input=finite if finite is not None else 0.0,
    )


def format_ranges(names: Iterable[str]) -> tuple[FormatRange, ...]:
    """Ranges of the named formats, each once (first spelling wins), in the given order."""
    ranges: dict[str, FormatRange] = {}
    for name in names:
        found = format_range(name)
        ranges.setdefault(found.name, found)
    return tuple(ranges.values())


def boundaries(ranges: Sequence[FormatRange]) -> list[float]:
    """Every magnitude the format shares compare |g * scale| with, ascending, and 0.0."""
    return sorted({0.0} | {bound for fmt in ranges for bound in fmt.thresholds})


def floor_log2(value: Fraction) -> int:
    """floor(log2(value)) of a positive Fraction, exactly."""
    guess = value.numerator.bit_length() - value.denominator.bit_length()
    return guess if Fraction(2) ** guess <= value else guess - 1


def _rounds_to(fmt: FloatFormat, value: Fraction) -> Fraction | None:
    """The value `value` rounds to; None for an input the format cannot encode (zero in
    E8M0) or an overflow to inf/NaN: it counts on no side."""
    rounded = fmt.round(value)
    if rounded.invalid or not rounded.value.is_finite:
        return None
    return rounded.value.fraction


def _below(rounded: Fraction | None, limit: Fraction) -> bool:
    return rounded is not None and abs(rounded) < limit


def _float32_at(pattern: int) -> float:
    return float(np.array(pattern, dtype=np.uint32).view(np.float32))


def _last_true(holds: Callable[[Fraction], bool]) -> float | None:
    """The largest non-negative finite float32 v with holds(v), for a predicate that holds
    on a prefix of the float32 patterns (rounding is monotone); None when it holds nowhere."""
    if not holds(Fraction(0)):
        # A prefix may still start above zero (zero itself can be invalid, as in E8M0).
        if not holds(Fraction(_float32_at(1))):
            return None
    low, high = 0, _FLOAT32_MAX_PATTERN + 1  # holds at low (or low is 0), not at high
    if holds(Fraction(_float32_at(_FLOAT32_MAX_PATTERN))):
        return _float32_at(_FLOAT32_MAX_PATTERN)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(Fraction(_float32_at(middle))):
            low = middle
        else:
            high = middle
    return _float32_at(low)


def _nearest_float(value: Fraction) -> float:
    try:
        return float(value)
    except OverflowError:  # a custom format wider than float64
        return math.inf
