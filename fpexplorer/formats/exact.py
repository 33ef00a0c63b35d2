"""Exact values with a sign (so -0, ±inf and NaN exist) and their exact decimal expansions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from .quoting import quote_text

KINDS = ("finite", "inf", "nan")

# Python refuses int <-> str conversions of more than 4300 digits by default (a guard against
# quadratic-time attacks). Exact values of wide custom formats have far more digits, so the
# conversions below work in chunks instead of changing that interpreter-wide setting.
_CHUNK_DIGITS = 4000
_CHUNK_LIMIT = 10**_CHUNK_DIGITS


def int_to_decimal_str(value: int) -> str:
    """`str(value)` for non-negative ints of any length."""
    if value < 0:
        raise ValueError("int_to_decimal_str takes a non-negative int")
    if value < _CHUNK_LIMIT:  # few enough digits for the builtin
        return str(value)
    split_digits = _CHUNK_DIGITS
    while 10 ** (2 * split_digits) <= value:
        split_digits *= 2
    high, low = divmod(value, 10**split_digits)
    return int_to_decimal_str(high) + int_to_decimal_str(low).rjust(split_digits, "0")


def decimal_str_to_int(digits: str) -> int:
    """`int(digits)` for strings of ASCII digits of any length."""
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"not a string of decimal digits: {quote_text(digits)}")
    if len(digits) <= _CHUNK_DIGITS:
        return int(digits, 10)
    middle = len(digits) // 2
    tail = len(digits) - middle
    scale: int = 10**tail
    return decimal_str_to_int(digits[:middle]) * scale + decimal_str_to_int(digits[middle:])


@dataclass(frozen=True, slots=True)
class ExactValue:
    """A real value with its sign kept apart, so that -0, ±inf and NaN are representable."""

    kind: str  # "finite" | "inf" | "nan"
    negative: bool
    magnitude: Fraction  # |value| when finite, else 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if self.magnitude < 0:
            raise ValueError("magnitude must be non-negative")
        if self.kind != "finite" and self.magnitude != 0:
            raise ValueError("inf and NaN carry no magnitude")

    @staticmethod
    def of(value: Fraction | int) -> ExactValue:
        """The finite value `value` (zero is +0)."""
        fraction = Fraction(value)
        return ExactValue("finite", fraction < 0, abs(fraction))

    @staticmethod
    def infinity(negative: bool = False) -> ExactValue:
        return ExactValue("inf", negative, Fraction(0))

    @staticmethod
    def nan(negative: bool = False) -> ExactValue:
        return ExactValue("nan", negative, Fraction(0))

    @property
    def is_finite(self) -> bool:
        return self.kind == "finite"

    @property
    def is_zero(self) -> bool:
        return self.kind == "finite" and self.magnitude == 0

    @property
    def is_nan(self) -> bool:
        return self.kind == "nan"

    @property
    def is_inf(self) -> bool:
        return self.kind == "inf"

    @property
    def fraction(self) -> Fraction:
        """The signed value; ValueError for inf and NaN."""
        if self.kind != "finite":
            raise ValueError(f"{self} has no exact rational value")
        return -self.magnitude if self.negative else self.magnitude

    def to_float(self) -> float:
        """The nearest Python float (±inf beyond float64's range, signed zero kept)."""
        sign = -1.0 if self.negative else 1.0
        if self.kind == "nan":
            return math.copysign(math.nan, sign)
        if self.kind == "inf":
            return math.copysign(math.inf, sign)
        try:
            return math.copysign(float(self.magnitude), sign)
        except OverflowError:
            return math.copysign(math.inf, sign)

    def __str__(self) -> str:
        sign = "-" if self.negative else ""
        if self.kind == "nan":
            return f"{sign}nan"
        if self.kind == "inf":
            return f"{sign}inf"
        magnitude = self.magnitude
        if magnitude.denominator == 1:
            return f"{sign}{int_to_decimal_str(magnitude.numerator)}"
        if _is_terminating(magnitude):
            return sign + exact_decimal(magnitude)
        numerator = int_to_decimal_str(magnitude.numerator)  # any length (str() stops at
        denominator = int_to_decimal_str(magnitude.denominator)  # 4300 digits)
        return f"{sign}{numerator}/{denominator}"


def _twos_and_fives(denominator: int) -> tuple[int, int] | None:
    """(a, b) with denominator == 2**a * 5**b, or None when another prime divides it.

    Found without dividing out one factor at a time: that loop is quadratic in the size of
    the number and took seconds for the tiny values of wide custom formats (2**-32813)."""
    twos = (denominator & -denominator).bit_length() - 1
    rest = denominator >> twos
    if rest == 1:
        return twos, 0
    # 5**b has about b * log2(5) bits: try the one or two exponents that size allows.
    estimate = int(rest.bit_length() / math.log2(5))
    for fives in (estimate - 1, estimate, estimate + 1):
        if fives > 0 and 5**fives == rest:
            return twos, fives
    return None


def _is_terminating(value: Fraction) -> bool:
    return _twos_and_fives(value.denominator) is not None


def exact_decimal(x: Fraction | ExactValue | int, max_digits: int | None = None) -> str:
    """The decimal expansion of `x`, every digit.

    Dyadic values (every float) terminate and are printed in full, positionally (the smallest
    float64 subnormal has 1074 decimals). A value that does not terminate, such as 1/3, is cut
    after `max_digits` significant digits (60 by default) and marked with "…"; so is a
    terminating one longer than an explicit `max_digits`.
    """
    if isinstance(x, ExactValue):
        if not x.is_finite:
            return str(x)
        sign = "-" if x.negative else ""
        magnitude = x.magnitude
    else:
        try:
            value = Fraction(x)
        except (TypeError, ValueError, OverflowError):  # None, "abc", a float inf or NaN
            raise ValueError(f"exact_decimal takes a finite number, not {x!r}") from None
        sign = "-" if value < 0 else ""
        magnitude = abs(value)
    if max_digits is not None and max_digits < 1:
        raise ValueError("max_digits must be at least 1")
    if magnitude == 0:
        return f"{sign}0"
    numerator, denominator = magnitude.numerator, magnitude.denominator
    factors = _twos_and_fives(denominator)
    if factors is not None:
        twos, fives = factors
        places = max(twos, fives)
        scaled = numerator * 2 ** (places - twos) * 5 ** (places - fives)  # value * 10**places
        digits = int_to_decimal_str(scaled)
        text = _place_point(digits, places)
        if max_digits is None or _significant_count(digits) <= max_digits:
            return sign + text
    # Cut to max_digits significant digits (truncated, never rounded, then "…").
    wanted = 60 if max_digits is None else max_digits
    digits, exponent10, _ = leading_digits(magnitude, wanted)
    digits = digits.ljust(wanted, "0")
    shift = wanted - 1 - exponent10  # digits == floor(magnitude * 10**shift)
    if shift >= 0:
        text = _place_point(digits, shift)
    else:
        text = digits + "0" * (-shift)
    return sign + text + "…"


def leading_digits(x: Fraction | ExactValue | int, count: int) -> tuple[str, int, bool]:
    """The first `count` significant digits of |x|, truncated: (digits, exponent10, exact).

    |x| = d1.d2d3… × 10**exponent10. `exact` is True when no nonzero digit was cut; then
    trailing zeros are dropped ("65504", 4, True for 65504; "1", 99999, True for 1e99999).
    Integer arithmetic only, so it is cheap for values of any size, unlike a full expansion.
    Zero gives ("0", 0, True).
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    if isinstance(x, ExactValue):
        magnitude = x.magnitude if x.is_finite else Fraction(0)
        if not x.is_finite:
            raise ValueError(f"{x} has no digits")
    else:
        magnitude = abs(Fraction(x))
    return _leading_digits(magnitude, count)


# The app shows one value many times over (the entry, the read-outs, the number line, the
# errors): for 1e99999 each call divides numbers of 330,000 bits, about a millisecond, and
# one keystroke made 75 of them. A Fraction hashes in time linear in its size.
@lru_cache(maxsize=256)
def _leading_digits(magnitude: Fraction, count: int) -> tuple[str, int, bool]:
    if magnitude == 0:
        return "0", 0, True
    numerator, denominator = magnitude.numerator, magnitude.denominator
    # floor(log10(x)) to within one, from the bit lengths; corrected below.
    exponent10 = math.floor((numerator.bit_length() - denominator.bit_length()) * math.log10(2))
    while True:
        shift = count - 1 - exponent10
        if shift >= 0:
            integer, rest = divmod(numerator * 10**shift, denominator)
        else:
            integer, rest = divmod(numerator, denominator * 10**-shift)
        if integer >= 10**count:
            exponent10 += 1
        elif integer < 10 ** (count - 1):
            exponent10 -= 1
        else:
            break
    digits = str(integer)
    exact = rest == 0
    return (digits.rstrip("0") or "0") if exact else digits, exponent10, exact


def _significant_count(digits: str) -> int:
    return len(digits.lstrip("0").rstrip("0")) or 1


def _place_point(digits: str, places: int) -> str:
    """Put a decimal point `places` digits from the right of the integer `digits`."""
    if places <= 0:
        return digits + "0" * (-places)
    if len(digits) <= places:
        digits = "0" * (places - len(digits) + 1) + digits
    whole, decimals = digits[:-places], digits[-places:].rstrip("0")
    return f"{whole}.{decimals}" if decimals else whole
