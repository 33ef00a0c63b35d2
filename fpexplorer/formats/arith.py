"""Arithmetic in a format: a op b computed exactly, then rounded under each mode, with the
error and the IEEE 754 flags; and double rounding (x -> via -> target against x -> target).

The operands are values of the format (typed inputs are first rounded into it, nearest
even). The exact result is a Fraction (add, sub, mul, div, fma), or for the square root of a
non-square a bracket (lower, upper) of width far below the format's quantum, computed with
integer square roots: no float is involved anywhere. Rounding an irrational square root
rounds the bracket's midpoint, which gives the correctly rounded result in every mode, since
no value of the format and no midpoint between two lies inside the bracket.

Special values follow IEEE 754: §6.1 infinity arithmetic, §6.2 NaN propagation (a NaN
operand gives NaN without raising invalid: operands here are quiet), §6.3 the sign of zero
(an exact zero sum is +0 in every mode but toward_negative, where it is -0; x - x likewise;
products and quotients take the exclusive or of the signs; sqrt(-0) is -0), §7.2 invalid
(inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt of a negative number, fma(0, inf, c)), §7.3
divide by zero (finite nonzero / 0 gives ±inf), §7.4 overflow, §7.5 underflow (tiny and
inexact) and §7.6 inexact, as the rounding into the format reports them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .exact import ExactValue
from .format import ROUNDING_MODES, FloatFormat, ValueLike, to_exact_value
from .registry import get_format

OPERATIONS: dict[str, int] = {"add": 2, "sub": 2, "mul": 2, "div": 2, "fma": 3, "sqrt": 1}
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
# Every mode whose result is a function of the value: stochastic is left out of the table
# (ask for it by name, with a seed).
DETERMINISTIC_MODES = tuple(mode for mode in ROUNDING_MODES if mode != "stochastic")
# Bits of an irrational square root's bracket below its leading bit: at least 64 beyond the
# quantum of any format of 64 bits or fewer (62 fraction bits at most), so rounding the
# bracket's midpoint is rounding the root, and the midpoint shows the error to 2**-64 ulp.
_SQRT_BITS = 128


@dataclass(frozen=True, slots=True)
class Flags:
    """The IEEE 754 exception flags an operation raises."""

    invalid: bool = False
    divide_by_zero: bool = False
    overflow: bool = False
    underflow: bool = False
    inexact: bool = False

    def raised(self) -> tuple[str, ...]:
        """The names of the raised flags, in IEEE 754's order."""
        names = ("invalid", "divide_by_zero", "overflow", "underflow", "inexact")
        return tuple(name for name in names if getattr(self, name))


@dataclass(frozen=True, slots=True)
class ExactResult:
    """The exact result of an operation on the operands' values.

    `value` is exact when `is_exact`; otherwise (the square root of a non-square) the true
    result lies strictly between `lower` and `upper`, and `value` is their midpoint.
    """

    value: ExactValue
    is_exact: bool
    lower: Fraction | None = None
    upper: Fraction | None = None
    invalid: bool = False  # an invalid operation (its value is NaN)
    divide_by_zero: bool = False  # an exact infinity from a finite nonzero / 0


@dataclass(frozen=True, slots=True)
class ModeResult:
    """The exact result rounded into the format under one rounding mode."""

    rounding: str
    code: int
    value: ExactValue
    error_abs: Fraction | None  # |value - exact|; None when either is not finite
    error_ulps: Fraction | None  # error_abs / ulp at the result
    error_is_approximate: bool  # True for an irrational square root (see ExactResult)
    flags: Flags


@dataclass(frozen=True, slots=True)
class Operand:
    """One input and the value of the format it became (rounded to nearest even)."""

    input: ExactValue
    code: int
    value: ExactValue
    inexact: bool  # the value differs from the input (rounded, or inf saturated to max)


@dataclass(frozen=True, slots=True)
class Calculation:
    """`operation` applied to `operands` in `format`: the exact result and its roundings."""

    operation: str
    format: FloatFormat
    operands: tuple[Operand, ...]
    overflow_policy: str
    exact: ExactResult
    results: tuple[ModeResult, ...]

    def result(self, rounding: str) -> ModeResult:
        """The result under one rounding mode (KeyError naming the computed modes)."""
        for result in self.results:
            if result.rounding == rounding:
                return result
        modes = ", ".join(r.rounding for r in self.results)
        raise KeyError(f"no result for {rounding!r}; computed: {modes}")

    @property
    def expression(self) -> str:
        """The operation as text: "a + b", "fma(a, b, c)", "sqrt(a)" with the operands' values."""
        texts = [str(operand.value) for operand in self.operands]
        if self.operation in SYMBOLS:
            return f"{texts[0]} {SYMBOLS[self.operation]} {texts[1]}"
        return f"{self.operation}({', '.join(texts)})"


def calculate(
    operation: str,
    operands: Sequence[ValueLike],
    fmt: FloatFormat | str,
    *,
    modes: Sequence[str] = DETERMINISTIC_MODES,
    overflow: str | None = None,
    seed: int | None = None,
    random_bits: int | None = None,
) -> Calculation:
    """Compute `operation` ("add", "sub", "mul", "div", "fma", "sqrt") on `operands` in `fmt`.

    Each operand (int, float, Fraction, Decimal, str, ExactValue) is rounded into the format
    first (nearest even); the result is computed exactly from those values and rounded under
    every one of `modes` with `overflow` (None: the format's default); stochastic rounding
    draws `random_bits` bits (default 64) from `seed`. ValueError for an
    unknown operation, a wrong number of operands or an operand that is not a number.
    """
    fmt = get_format(fmt)
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; one of {', '.join(OPERATIONS)}")
    if isinstance(operands, (str, bytes)) or not hasattr(operands, "__len__"):
        # calculate("sqrt", "2", ...) reads one operand; "12" as ("1", "2") would be a wrong sum.
        raise ValueError(f"operands are a list, as [{operands!r}], not a {type(operands).__name__}")
    if len(operands) != OPERATIONS[operation]:
        raise ValueError(
            f"{operation} takes {OPERATIONS[operation]} operand(s), not {len(operands)}"
        )
    converted = tuple(_operand(fmt, x) for x in operands)
    values = [operand.value for operand in converted]
    exact_by_mode = {mode: exact_operation(operation, values, mode) for mode in modes}
    reference = exact_operation(operation, values, "nearest_even")
    results = tuple(
        _round_result(fmt, exact_by_mode[mode], mode, overflow, seed, random_bits) for mode in modes
    )
    return Calculation(
        operation=operation,
        format=fmt,
        operands=converted,
        overflow_policy=overflow or fmt.default_overflow,
        exact=reference,
        results=results,
    )


def _operand(fmt: FloatFormat, x: ValueLike) -> Operand:
    rounded = fmt.round(x)
    # inf into a format without inf (saturated to max, or NaN) changes too, though exactly.
    same = rounded.value == rounded.input or (rounded.value.is_nan and rounded.input.is_nan)
    return Operand(rounded.input, rounded.code, rounded.value, inexact=not same)


def exact_operation(operation: str, values: Sequence[ExactValue], rounding: str) -> ExactResult:
    """The exact result of an operation on exact values (the rounding mode decides only the
    sign of an exact zero sum, IEEE 754 §6.3)."""
    if any(value.is_nan for value in values):
        return ExactResult(ExactValue.nan(), True)
    if operation == "add":
        return _add(values[0], values[1], rounding)
    if operation == "sub":
        negated = values[1]
        negated = ExactValue(negated.kind, not negated.negative, negated.magnitude)
        return _add(values[0], negated, rounding)
    if operation == "mul":
        return _multiply(values[0], values[1])
    if operation == "div":
        return _divide(values[0], values[1])
    if operation == "fma":
        product = _multiply(values[0], values[1])
        if product.invalid:
            return product
        return _add(product.value, values[2], rounding)
    if operation == "sqrt":
        return _square_root(values[0])
    raise ValueError(f"unknown operation {operation!r}")


def _invalid() -> ExactResult:
    return ExactResult(ExactValue.nan(), True, invalid=True)


def _add(a: ExactValue, b: ExactValue, rounding: str) -> ExactResult:
    if a.is_inf or b.is_inf:
        if a.is_inf and b.is_inf and a.negative != b.negative:
            return _invalid()  # inf - inf
        return ExactResult(a if a.is_inf else b, True)
    total = a.fraction + b.fraction
    if total != 0:
        return ExactResult(ExactValue.of(total), True)
    if a.is_zero and b.is_zero and a.negative == b.negative:
        return ExactResult(ExactValue("finite", a.negative, Fraction(0)), True)
    # An exact zero from operands of opposite signs: -0 only when rounding toward -inf.
    return ExactResult(ExactValue("finite", rounding == "toward_negative", Fraction(0)), True)


def _multiply(a: ExactValue, b: ExactValue) -> ExactResult:
    negative = a.negative != b.negative
    if a.is_inf or b.is_inf:
        if a.is_zero or b.is_zero:
            return _invalid()  # 0 * inf
        return ExactResult(ExactValue.infinity(negative), True)
    return ExactResult(ExactValue("finite", negative, a.magnitude * b.magnitude), True)


def _divide(a: ExactValue, b: ExactValue) -> ExactResult:
    negative = a.negative != b.negative
    if a.is_inf:
        if b.is_inf:
            return _invalid()  # inf / inf
        return ExactResult(ExactValue.infinity(negative), True)
    if b.is_inf:
        return ExactResult(ExactValue("finite", negative, Fraction(0)), True)
    if b.is_zero:
        if a.is_zero:
            return _invalid()  # 0 / 0
        return ExactResult(ExactValue.infinity(negative), True, divide_by_zero=True)
    return ExactResult(ExactValue("finite", negative, a.magnitude / b.magnitude), True)


def _square_root(a: ExactValue) -> ExactResult:
    if a.is_zero:
        return ExactResult(a, True)  # sqrt(±0) = ±0
    if a.negative:
        return _invalid()
    if a.is_inf:
        return ExactResult(a, True)
    root = exact_square_root(a.magnitude)
    if root is not None:
        return ExactResult(ExactValue("finite", False, root), True)
    lower, upper = square_root_bracket(a.magnitude, _SQRT_BITS)
    middle = (lower + upper) / 2
    return ExactResult(ExactValue("finite", False, middle), False, lower=lower, upper=upper)


def exact_square_root(x: Fraction) -> Fraction | None:
    """sqrt(x) when it is rational (numerator and denominator both squares), else None."""
    if x < 0:
        raise ValueError("the square root of a negative number is not real")
    numerator, denominator = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if numerator * numerator == x.numerator and denominator * denominator == x.denominator:
        return Fraction(numerator, denominator)
    return None


def square_root_bracket(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """(lower, upper) with lower < sqrt(x) < upper and upper - lower = 2**-q, where q makes
    the bracket at least `bits` bits finer than sqrt(x)'s leading bit (and below 2**-bits
    in absolute terms too, so that subnormal quanta are covered): integer square roots only.
    For x > 0 whose square root is irrational."""
    exponent = (x.numerator.bit_length() - x.denominator.bit_length()) // 2  # ~log2 sqrt(x)
    q = max(bits - exponent, bits)
    # floor(sqrt(x) * 2**q) = isqrt(floor(x * 4**q)); strict bounds since sqrt(x) is irrational
    scaled = math.isqrt((x.numerator << (2 * q)) // x.denominator)
    return Fraction(scaled, 1 << q), Fraction(scaled + 1, 1 << q)


def _round_result(
    fmt: FloatFormat,
    exact: ExactResult,
    rounding: str,
    overflow: str | None,
    seed: int | None,
    random_bits: int | None = None,
) -> ModeResult:
    _check_bracket_fine_enough(fmt, exact)
    draws = rounding == "stochastic"  # the other modes take no random bits
    rounded = fmt.round(
        exact.value, rounding, overflow, seed, random_bits=random_bits if draws else None
    )
    flags = Flags(
        invalid=exact.invalid or rounded.invalid,
        divide_by_zero=exact.divide_by_zero,
        overflow=rounded.overflow,
        underflow=rounded.underflow,
        # An irrational square root is never exact, whatever its bracket's midpoint does.
        inexact=rounded.inexact or not exact.is_exact,
    )
    return ModeResult(
        rounding=rounding,
        code=rounded.code,
        value=rounded.value,
        error_abs=rounded.error_abs,
        error_ulps=rounded.error_ulps,
        error_is_approximate=not exact.is_exact,
        flags=flags,
    )


def _check_bracket_fine_enough(fmt: FloatFormat, exact: ExactResult) -> None:
    """The bracket of an irrational root must be finer than half the format's smallest
    quantum near it, or rounding its midpoint could differ from rounding the root."""
    if exact.is_exact or exact.lower is None or exact.upper is None:
        return
    ulp_floor = fmt.min_subnormal or fmt.min_normal
    width = exact.upper - exact.lower
    quantum = max(ulp_floor, exact.lower * fmt.eps / 2)
    if width * 4 > quantum:
        raise AssertionError("square-root bracket too coarse for this format")  # a bug


# ---- double rounding ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DoubleRounding:
    """A value rounded into `target` directly and through `via`, under one mode."""

    input: ExactValue
    via: FloatFormat
    target: FloatFormat
    rounding: str
    via_code: int
    through_code: int  # target code after the detour
    direct_code: int  # target code straight from the input

    @property
    def differs(self) -> bool:
        return self.through_code != self.direct_code


def double_round(
    x: ValueLike,
    via: FloatFormat | str,
    target: FloatFormat | str,
    rounding: str = "nearest_even",
    overflow: str | None = None,
) -> DoubleRounding:
    """Round `x` into `target` directly and through `via` (round into via, then into target)."""
    via, target = get_format(via), get_format(target)
    exact = to_exact_value(x)
    via_code = via.from_value(exact, rounding, overflow)
    through = target.from_value(via.to_exact(via_code), rounding, overflow)
    direct = target.from_value(exact, rounding, overflow)
    return DoubleRounding(exact, via, target, rounding, via_code, through, direct)


def double_rounding_cases(
    source: FloatFormat | str,
    via: FloatFormat | str,
    target: FloatFormat | str,
    rounding: str = "nearest_even",
    overflow: str | None = None,
    *,
    limit: int | None = None,
    exhaustive: bool | None = None,
) -> list[DoubleRounding]:
    """Every value of `source` whose rounding into `target` through `via` differs from its
    direct rounding (ascending), at most `limit` of them.

    Sources of up to 20 bits are searched code by code (`exhaustive` None; True or False
    forces one search or the other). Wider ones (FP32) are searched in
    windows around every place where either path can change its answer: each decision point
    of the target (its values and the midpoints between them, min_normal's half below it
    and the top of its range) and of `via` (the top of its range and, without subnormals,
    its flush threshold), each window one of via's quanta wide on either side (a value
    moves by less than that on its way through via). Both paths
    are monotone step functions whose steps lie there, so a difference anywhere starts in a
    window. Where it runs on beyond a window (a target whose range exceeds via's, say) only
    the window's part is listed. Vectorized: FP32 through FP16 into FP8 searches 8 million
    codes in about 3 s and finds 1,040,384 cases; building each case costs ~10 us more.
    """
    import numpy as np

    source, via, target = get_format(source), get_format(via), get_format(target)
    if not _float64_holds(source):
        raise ValueError(f"{source.name} values do not all fit float64; use double_round")
    if exhaustive is None:
        exhaustive = source.width <= 20
    if exhaustive:
        if source.width > 32:
            raise ValueError(f"{source.name} has too many codes to try them all")
        codes = np.arange(1 << source.width, dtype=np.uint64)
    else:
        codes = _candidate_codes(source, via, target)
    values = source.to_float_array(codes)
    finite = np.isfinite(values)
    codes, values = codes[finite], values[finite]
    via_codes = via.from_float_array(values, rounding, overflow)
    through = target.from_float_array(via.to_float_array(via_codes), rounding, overflow)
    direct = target.from_float_array(values, rounding, overflow)
    differ = np.flatnonzero(through != direct)
    order = differ[np.argsort(values[differ], kind="stable")]
    if limit is not None:
        order = order[:limit]
    return [
        DoubleRounding(
            source.to_exact(int(codes[i])),
            via,
            target,
            rounding,
            int(via_codes[i]),
            int(through[i]),
            int(direct[i]),
        )
        for i in order
    ]


def _float64_holds(fmt: FloatFormat) -> bool:
    """Every finite value of fmt is a float64 (so the array paths see it exactly)."""
    if fmt.mantissa_bits > 52:
        return False
    smallest = fmt.min_subnormal or fmt.min_normal
    return fmt.max < Fraction(2) ** 1024 and smallest >= Fraction(1, 2**1074)


def _candidate_codes(source: FloatFormat, via: FloatFormat, target: FloatFormat) -> Any:
    import numpy as np

    points: set[Fraction] = set()
    target_values = sorted(
        {
            abs(target.to_fraction(code))
            for code in range(1 << target.width)
            if target.to_exact(code).is_finite
        }
    )
    if len(target_values) > 1 << 17:
        raise ValueError(f"{target.name} is too wide a target for a window search")
    for below, above in itertools.pairwise(target_values):
        points.update((below, (below + above) / 2))
    top = target_values[-1]
    points.update((top, top + (top - target_values[-2]) / 2))
    points.update((via.max, target.min_normal, target.min_normal / 2))
    points.add(via.min_normal / 2)
    # At 0 both paths step at 0 itself (the sign): no window, which would hold every tiny code.
    points.discard(Fraction(0))
    intervals: list[tuple[int, int]] = []
    mask = _magnitude_mask(source)
    for point in sorted(points):
        # A value moves by at most one quantum of via on its way through it.
        width = _quantum_near(via, point)
        start = source.from_value(max(point - width, Fraction(0)), "toward_negative", "saturate")
        stop = source.from_value(point + width, "toward_positive", "saturate")
        if stop & mask >= start & mask:
            intervals.append((start & mask, stop & mask))
    merged: list[tuple[int, int]] = []
    for low, high in sorted(intervals):  # magnitude codes ascend with the magnitude
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    total = sum(high - low + 1 for low, high in merged)
    if total > _MAX_CANDIDATES:
        raise ValueError(
            f"{source.name} has too many codes near the decision points of "
            f"{via.name} and {target.name} for a search ({total:,} > {_MAX_CANDIDATES:,})"
        )
    windows = [np.arange(low, high + 1, dtype=np.uint64) for low, high in merged]
    positive = np.concatenate(windows) if windows else np.zeros(0, np.uint64)
    if not source.signed:
        return positive
    sign = np.uint64(1 << (source.width - 1))
    return np.concatenate([positive, positive | sign])


_MAX_CANDIDATES = 20_000_000


def _magnitude_mask(fmt: FloatFormat) -> int:
    return (1 << (fmt.width - int(fmt.signed))) - 1


def _quantum_near(fmt: FloatFormat, point: Fraction) -> Fraction:
    """The gap between values of fmt at `point` (at least its smallest gap)."""
    smallest = fmt.min_subnormal or fmt.min_normal
    if point <= fmt.min_normal:
        return smallest
    exponent = point.numerator.bit_length() - point.denominator.bit_length()
    quantum = Fraction(2) ** exponent / 2**fmt.mantissa_bits
    return quantum if quantum > smallest else smallest
