"""How numbers are written on screen. Pure string work on the engine's exact decimals.

No arithmetic happens here: the engine gives the digits (`exact_decimal`, every one;
`display_decimal`, the display rule), and these helpers only place the decimal point. A cut
is always marked with "…", never rounded silently.
"""

from __future__ import annotations

import re
from fractions import Fraction

from fpexplorer.formats import ExactValue
from fpexplorer.formats.decimal import display_decimal, display_decimals

ELLIPSIS = "…"
# Unicode's WORD JOINER: zero width, no glyph, no line break beside it.
WORD_JOINER = "\u2060"
_CUT_BEFORE_EXPONENT = re.compile(ELLIPSIS + r"(?=e[-+]?\d)")
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def keep_numbers_whole(text: str) -> str:
    """`text` for a label that wraps, with no line break inside a cut number: Unicode lets a
    line end after "…", so "1.60501067…e-15" wrapped as "1.60501067…" (read as 1.6) with
    "e-15" on the next line. A word joiner after each "…" that an exponent follows."""
    return _CUT_BEFORE_EXPONENT.sub(ELLIPSIS + WORD_JOINER, text)


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


def short(x: Fraction | ExactValue | int | None) -> str:
    """A value by the display rule ("65504", "0.100000001…", "1.52587890625e-5"), "—" for None.

    The engine's `display_decimal`: exact when the exact decimal is short, otherwise cut to
    a few significant digits and marked with "…". Built from leading digits, never a full
    expansion: an error of 1e99999 has a hundred thousand digits.
    """
    if x is None:
        return "—"
    return display_decimal(x)


def typed(value: ExactValue, max_length: int = 22) -> str:
    """A typed value as the user would write it: "1/3" stays a fraction when short,
    anything else follows the display rule."""
    if (
        value.is_finite
        and value.magnitude.denominator != 1
        and max(value.magnitude.numerator.bit_length(), value.magnitude.denominator.bit_length())
        <= 4 * max_length
    ):
        text = str(value)
        if "/" in text and len(text) <= max_length:
            return text
    return display_decimal(value)


def power_of_two(exponent: int) -> str:
    """2 raised to an integer, written with superscripts: 2⁻¹⁴."""
    return "2" + str(exponent).translate(SUPERSCRIPT)


def value_and_typed(value: ExactValue, typed_value: ExactValue) -> tuple[str, str]:
    """(a code's value, the typed value) for one line that shows both ("0.1000000015… ←
    0.1"): with as many digits as it takes for different values to read differently, as
    in the tables. Each alone by the display rule made float64's 1/3 and a typed 300-digit
    0.333… both "0.333333333…", "rounded" to itself."""
    value_text, typed_text = display_decimals([value, typed_value])
    written = typed(typed_value)
    return value_text or "", written if "/" in written else typed_text or ""
