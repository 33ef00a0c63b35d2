"""`parse_value`: text typed by a person into an exact value. Only ValueError escapes."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import TYPE_CHECKING

from .exact import ExactValue, decimal_str_to_int

if TYPE_CHECKING:
    from .format import FloatFormat

# Exact values of 10**exponent are built as Python ints: beyond this the number would take
# megabytes and no format of 64 bits or fewer could tell it from infinity or zero anyway.
MAX_DECIMAL_EXPONENT = 100_000
MAX_BINARY_EXPONENT = 340_000
MAX_TEXT_LENGTH = 200_000

CONSTANTS = ("max", "min_normal", "min_subnormal", "eps")

_DECIMAL = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?")
_HEX = re.compile(
    r"0[xX](?P<int>[0-9a-fA-F]*)(?:\.(?P<frac>[0-9a-fA-F]*))?(?:[pP](?P<exp>[+-]?[0-9]+))?"
)


def parse_value(text: str, fmt: FloatFormat | None = None) -> ExactValue:
    """Parse a number exactly.

    Accepts decimals of any length ("0.1", "-12.5e-3"), fractions ("1/3", "-2.5/7"), hex
    floats ("0x1.8p3"), "inf", "-inf", "+inf", "nan", "-0", and with `fmt` the named constants
    "max", "min_normal", "min_subnormal", "eps" (optionally signed). Anything else raises
    ValueError saying what is wrong.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_LENGTH:
        raise ValueError(f"value text too long ({len(text)} characters, at most {MAX_TEXT_LENGTH})")
    stripped = text.strip()
    if not stripped:
        raise ValueError("empty value")
    negative = False
    body = stripped
    if body[0] in "+-":
        negative = body[0] == "-"
        body = body[1:].lstrip()
    if not body:
        raise ValueError(f"{text.strip()!r}: a sign with no number")
    lowered = body.lower()
    if lowered in ("inf", "infinity"):
        return ExactValue.infinity(negative)
    if lowered == "nan":
        return ExactValue.nan(negative)
    if lowered in CONSTANTS:
        return _constant(lowered, negative, fmt)
    if body[0] in "+-":
        raise ValueError(f"{text.strip()!r}: more than one sign")
    if "_" in body:
        # Digit grouping, as in Python literals: 1_000, 0x1_0p3; "_1" or "1__0" is a typo.
        digit = "[0-9a-fA-F]" if body[:2].lower() == "0x" else "[0-9]"
        if re.search(f"(?<!{digit})_|_(?!{digit})", body):
            raise ValueError(f"{text.strip()[:60]!r}: '_' may only group digits, as in 1_000")
        body = body.replace("_", "")
    if "/" in body:
        numerator_text, _, denominator_text = body.partition("/")
        numerator = _unsigned_number(numerator_text.strip(), text)
        denominator = _unsigned_number(denominator_text.strip(), text)
        if denominator == 0:
            raise ValueError(f"{text.strip()!r}: division by zero")
        magnitude = numerator / denominator
    else:
        magnitude = _unsigned_number(body, text)
    return ExactValue("finite", negative, magnitude)


def _constant(name: str, negative: bool, fmt: FloatFormat | None) -> ExactValue:
    if fmt is None:
        raise ValueError(f"{name!r} needs a format (it is a property of one)")
    value = getattr(fmt, name)
    if value is None:
        raise ValueError(f"{fmt.name} has no {name.replace('_', ' ')}")
    if negative and not fmt.signed:
        raise ValueError(f"{fmt.name} is unsigned: -{name} does not exist")
    return ExactValue("finite", negative, value)


def _unsigned_number(body: str, original: str) -> Fraction:
    where = repr(original.strip()[:60])
    if not body:
        raise ValueError(f"{where}: a number is missing")
    if body[:2] in ("0x", "0X"):
        match = _HEX.fullmatch(body)
        if match is None or not (match["int"] or match["frac"]):
            raise ValueError(f"{where}: not a hex float (expected e.g. 0x1.8p3)")
        whole = match["int"] or ""
        fraction_digits = match["frac"] or ""
        exponent = _exponent(match["exp"], MAX_BINARY_EXPONENT, where)
        mantissa = int(whole + fraction_digits, 16) if whole + fraction_digits else 0
        return Fraction(mantissa) * Fraction(2) ** (exponent - 4 * len(fraction_digits))
    match = _DECIMAL.fullmatch(body)
    if match is None or not (match["int"] or match["frac"]):
        raise ValueError(
            f"{where}: not a number (expected a decimal such as 1.5e-3, a fraction such as "
            "1/3, a hex float such as 0x1.8p3, inf, nan, or max/min_normal/min_subnormal/eps)"
        )
    whole = match["int"] or ""
    fraction_digits = match["frac"] or ""
    exponent = _exponent(match["exp"], MAX_DECIMAL_EXPONENT, where)
    all_digits = (whole + fraction_digits).lstrip("0") or "0"
    mantissa = decimal_str_to_int(all_digits)
    power = exponent - len(fraction_digits)
    if mantissa and abs(power) > MAX_DECIMAL_EXPONENT + len(all_digits):
        raise ValueError(
            f"{where}: decimal exponent out of range (at most ±{MAX_DECIMAL_EXPONENT})"
        )
    return Fraction(mantissa) * Fraction(10) ** power


def _exponent(text: str | None, limit: int, where: str) -> int:
    if text is None:
        return 0
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > len(str(limit)) or int(digits) > limit:
        raise ValueError(f"{where}: exponent out of range (at most ±{limit})")
    return -int(digits) if text.startswith("-") else int(digits)
