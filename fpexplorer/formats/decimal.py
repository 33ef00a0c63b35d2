"""Shortest round-trip decimal strings, found exactly (no float64 in the loop)."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from .exact import ExactValue, int_to_decimal_str

if TYPE_CHECKING:
    from .format import FloatFormat


def _floor_log10(value: Fraction) -> int:
    """floor(log10(value)) for a positive Fraction, exactly."""
    guess = len(int_to_decimal_str(value.numerator)) - len(int_to_decimal_str(value.denominator))
    while Fraction(10) ** guess > value:
        guess -= 1
    while Fraction(10) ** (guess + 1) <= value:
        guess += 1
    return guess


def format_repr_style(negative: bool, digits: str, exponent10: int) -> str:
    """Digits d1d2... meaning 0.d1d2... * 10**(exponent10 + 1), written as Python's repr would.

    `exponent10` is the decimal exponent of the first digit (1234 -> digits "1234", 3).
    """
    sign = "-" if negative else ""
    digits = digits.rstrip("0") or "0"
    if -4 <= exponent10 < 16:
        if exponent10 >= 0:
            whole = (digits + "0" * (exponent10 + 1))[: exponent10 + 1]
            decimals = digits[exponent10 + 1 :] or "0"
        else:
            whole = "0"
            decimals = "0" * (-exponent10 - 1) + digits
        return f"{sign}{whole}.{decimals}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{exponent10:+03d}"


def shortest_decimal(fmt: FloatFormat, code: int) -> str:
    """The shortest decimal string that rounds (nearest_even) back to `code`.

    Among equally short candidates the one nearest the exact value is taken. Written like
    Python's repr of a float ("0.1", "65504.0", "6e-08", "-0.0", "inf", "nan"); for float64
    it is exactly `repr(float)`.
    """
    exact = fmt.to_exact(code)
    if exact.is_nan:
        return "nan"
    if exact.is_inf:
        return "-inf" if exact.negative else "inf"
    if exact.is_zero:
        return "-0.0" if exact.negative else "0.0"
    target = exact.magnitude
    exponent10 = _floor_log10(target)
    # Enough digits always suffice: ceil((m+1)*log10 2) + 1 identifies any value of the format.
    limit = int(fmt.decimal_digits) + 3
    for count in range(1, limit + 1):
        scale = Fraction(10) ** (exponent10 - count + 1)
        scaled = target / scale
        low = scaled.numerator // scaled.denominator
        candidates = sorted({low, low + 1}, key=lambda n: (abs(n * scale - target), n % 2))
        for integer in candidates:
            if integer == 0:
                continue
            candidate = ExactValue("finite", exact.negative, integer * scale)
            if fmt.from_value(candidate) == code:
                digits = int_to_decimal_str(integer)
                # low + 1 may carry into one more digit (9.99 -> 10.0).
                first_exponent = exponent10 + len(digits) - count
                return format_repr_style(exact.negative, digits, first_exponent)
    from .exact import exact_decimal

    return exact_decimal(exact)
