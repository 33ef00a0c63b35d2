"""How numbers are written on screen. Pure string work on the engine's exact decimals.

No arithmetic happens here: the engine gives the digits (`exact_decimal`, every one;
`leading_digits`, the first few), and these helpers only place the decimal point, in
scientific notation or cut short for a table cell. A cut is always marked with "…", never
rounded silently.
"""

from __future__ import annotations

from fractions import Fraction

from fpexplorer.formats import ExactValue, leading_digits

ELLIPSIS = "…"
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def scientific(decimal_text: str, max_digits: int = 17) -> str:
    """Rewrite a plain decimal ("-0.000123", "65504", "0.333…") as "-1.23e-4".

    Keeps at most `max_digits` significant digits; when digits are dropped (or the input
    was already cut, ending in "…") the mantissa ends with "…".
    """
    text = decimal_text.strip()
    if not text or not (text[0].isdigit() or text[0] in "+-"):
        return text  # inf, nan and other words pass through
    negative = text.startswith("-")
    body = text.lstrip("+-")
    truncated = body.endswith(ELLIPSIS)
    body = body.rstrip(ELLIPSIS)
    if "e" in body.lower() or not body.replace(".", "", 1).isdigit():
        return decimal_text
    integer_part, _, fraction_part = body.partition(".")
    digits = (integer_part + fraction_part).lstrip("0")
    if not digits:
        return ("-" if negative else "") + "0"
    # Position of the first significant digit relative to the decimal point.
    all_digits = integer_part + fraction_part
    first = len(all_digits) - len(all_digits.lstrip("0"))
    exponent = len(integer_part) - first - 1
    significant = digits.rstrip("0") if not truncated else digits
    if len(significant) > max_digits:
        significant = significant[:max_digits]
        truncated = True
    mantissa = significant[0]
    if len(significant) > 1:
        mantissa += "." + significant[1:]
    if truncated:
        mantissa += ELLIPSIS
    return f"{'-' if negative else ''}{mantissa}e{exponent}"


def short(x: Fraction | ExactValue | int | None, max_digits: int = 7) -> str:
    """A compact exact-or-marked rendering for tables: "65504", "6.1035156…e-5", "—".

    Built from the engine's leading digits, never a full expansion: an error of 1e99999
    has a hundred thousand digits and writing them all out took seconds per cell.
    """
    if x is None:
        return "—"
    if isinstance(x, ExactValue):
        if x.kind != "finite":
            return str(x)
        negative, magnitude = x.negative, x.magnitude
    else:
        value = Fraction(x)
        negative, magnitude = value < 0, abs(value)
    sign = "-" if negative else ""
    digits, exponent, exact = leading_digits(magnitude, max_digits)
    if magnitude == 0:
        return sign + "0"
    if exact and exponent + 1 <= max_digits and -exponent - 1 + len(digits) <= max_digits:
        if exponent < 0:
            return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
        whole, decimals = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
        return f"{sign}{whole}.{decimals}" if decimals else sign + whole
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}{'' if exact else ELLIPSIS}e{exponent}"


def typed(value: ExactValue, max_length: int = 22) -> str:
    """A typed value as the user would write it ("1/3", "0.1"), shortened when long."""
    if (
        value.is_finite
        and max(value.magnitude.numerator.bit_length(), value.magnitude.denominator.bit_length())
        > 4 * max_length
    ):
        return short(value, 12)  # far too long to write out (and slow to: 1e99999)
    text = str(value)
    return text if len(text) <= max_length else short(value, 12)


def power_of_two(exponent: int) -> str:
    """2 raised to an integer, written with superscripts: 2⁻¹⁴."""
    return "2" + str(exponent).translate(SUPERSCRIPT)
