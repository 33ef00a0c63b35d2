"""Decimal strings of exact values: the display rule, and shortest round-trip decimals.

Both are found exactly (integers and Fractions, no float64 in the loop).

The display rule (`display_decimal`), used wherever the app shows a value: a value whose
exact decimal has at most `EXACT_DIGITS` significant digits is written in full; any other
is cut to `CUT_DIGITS` significant digits, truncated (never rounded up) and marked with
"…", so that a reader can always tell an exact value from a shortened one. One notation
throughout: positional between 1e-4 and 1e16, otherwise "1.52587890625e-5" (no "+", no
padded exponent digits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

from .exact import ExactValue, int_to_decimal_str, leading_digits

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
    found = _shortest_digits(fmt, code, exact)
    if found is None:
        from .exact import exact_decimal

        return exact_decimal(exact)
    digits, first_exponent = found
    return format_repr_style(exact.negative, digits, first_exponent)


def shortest_display(fmt: FloatFormat, code: int) -> str:
    """`shortest_decimal` written in the display rule's notation ("2e-5", "65500", "-0").

    A label of its own wherever it is shown: it reads back to the code, but it is not the
    value (E5M2's smallest subnormal 1.52587890625e-5 reads back from "2e-5").
    """
    exact = fmt.to_exact(code)
    if exact.is_nan:
        # "nan" reads back to the format's one NaN of that sign, never to another payload
        # (FP16's 0x7D01 showed "nan", which gives 0x7E00).
        text = display_decimal(exact)
        return text if fmt.from_value(text) == code else NAN_PAYLOAD_SHORTEST
    if not exact.is_finite or exact.is_zero:
        return display_decimal(exact)
    found = _shortest_digits(fmt, code, exact)
    if found is None:
        return display_decimal(exact)
    digits, first_exponent = found
    return _written(exact.negative, digits.rstrip("0") or "0", first_exponent, cut=False)


def _shortest_digits(fmt: FloatFormat, code: int, exact: ExactValue) -> tuple[str, int] | None:
    """(digits, decimal exponent of the first digit) of the shortest decimal, or None."""
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
                return digits, exponent10 + len(digits) - count
    return None


NAN_PAYLOAD_SHORTEST = "— (NaN payload)"  # no text reads back a NaN other than the canonical one
EXACT_DIGITS = 20  # exact decimals this short are shown whole (2**-27 = 7.450580596923828125e-9)
CUT_DIGITS = 9  # significant digits kept of a longer one, then "…"
POSITIONAL_EXPONENTS = range(-4, 16)  # 0.0001 .. 9999999999999999 are written without "e"
MAX_DISTINGUISHING_DIGITS = 1100  # more than any float64 value has (767)

ValueLike = Fraction | ExactValue | int


def display_decimal(
    x: ValueLike, *, exact_digits: int = EXACT_DIGITS, cut_digits: int = CUT_DIGITS
) -> str:
    """A value as the app shows it: exact when short, else cut and marked with "…".

    >>> display_decimal(Fraction(1, 2**16))  # E5M2's smallest subnormal, exactly
    '1.52587890625e-5'
    >>> display_decimal(Fraction(13421773, 2**27))  # float32 0.1: 27 digits, cut
    '0.100000001…'
    >>> display_decimal(Fraction(1, 3)), display_decimal(65504), display_decimal(2**128)
    ('0.333333333…', '65504', '3.40282366…e38')

    The kept digits are the value's own (truncated, not rounded): "0.100000001…" is
    0.100000001 followed by more digits, never a rounded neighbour.
    """
    if exact_digits < 1 or cut_digits < 1:
        raise ValueError("exact_digits and cut_digits must be at least 1")
    if isinstance(x, ExactValue) and not x.is_finite:
        return str(x)
    negative, magnitude = _sign_and_magnitude(x)
    if magnitude == 0:
        return "-0" if negative else "0"
    digits, exponent10, exact = leading_digits(magnitude, max(exact_digits, cut_digits))
    if exact and len(digits) <= max(exact_digits, cut_digits):
        return _written(negative, digits, exponent10, cut=False)  # nothing left out
    return _written(negative, digits[:cut_digits], exponent10, cut=True)


def display_decimals(
    values: Sequence[ValueLike | None],
    *,
    exact_digits: int = EXACT_DIGITS,
    cut_digits: int = CUT_DIGITS,
) -> list[str | None]:
    """`display_decimal` of each value (None stays None), with more digits where needed so
    that two different values never read the same: float32's and float64's 1/3 share nine
    digits ("0.333333343…" and "0.333333333…" differ, but float64's and an e11m60's do not).
    """
    count = cut_digits
    while True:
        texts = [
            None if v is None else display_decimal(v, exact_digits=exact_digits, cut_digits=count)
            for v in values
        ]
        seen: dict[str, object] = {}
        clash = False
        for value, text in zip(values, texts, strict=True):
            if value is None or text is None:
                continue
            key = _comparable(value)
            if seen.setdefault(text, key) != key:
                clash = True
                break
        if not clash or count >= MAX_DISTINGUISHING_DIGITS:
            return texts
        count += max(1, count // 4)


def _sign_and_magnitude(x: ValueLike | Decimal | float) -> tuple[bool, Fraction]:
    """Whether a finite value is negative (an ExactValue -0 is), and its magnitude, exactly."""
    if isinstance(x, ExactValue):
        return x.negative, x.magnitude
    value = Fraction(x)
    return value < 0, abs(value)


def _comparable(value: ValueLike) -> object:
    """What makes two values the same value: -0 and +0 differ, as do NaN and inf."""
    if isinstance(value, ExactValue):
        return (value.kind, value.negative, value.magnitude)
    fraction = Fraction(value)
    return ("finite", fraction < 0, abs(fraction))


def approximate_decimal(
    x: ValueLike | Decimal | float, *, keep: int, shown: int, inexact: bool = False
) -> str:
    """A value for a read-out that has room for a few digits, in the display rule's notation:
    exact when its decimal has at most `keep` significant digits, else rounded to nearest
    (ties to even) to `shown` digits and marked "≈" ("≈1.86e-8", "≈1.798e308", never
    Python's "1.86e-08" or "1.798e+308"). `inexact` marks a value that is itself already
    rounded (a float64 sum, a square root): it is never shown without "≈".

    >>> approximate_decimal(Fraction(1, 4), keep=4, shown=4)
    '0.25'
    >>> approximate_decimal(2**1024, keep=4, shown=4), approximate_decimal(2**-27, keep=4, shown=3)
    ('≈1.798e308', '≈7.45e-9')
    """
    if keep < 1 or shown < 1:
        raise ValueError("keep and shown must be at least 1")
    if isinstance(x, ExactValue) and not x.is_finite:
        return str(x)
    if isinstance(x, float | Decimal) and not math.isfinite(x):
        return str(float(x))  # "inf", "-inf", "nan"
    negative, magnitude = _sign_and_magnitude(x)
    if magnitude == 0:
        return "-0" if negative else "0"
    digits, exponent10, exact = leading_digits(magnitude, keep)
    if exact and not inexact:
        return _written(negative, digits, exponent10, cut=False)
    digits, exponent10, _ = leading_digits(magnitude, shown)
    unit = Fraction(10) ** (exponent10 - shown + 1)  # the place of the last digit kept
    kept = int(digits.ljust(shown, "0"))
    rest = magnitude - kept * unit
    if 2 * rest > unit or (2 * rest == unit and kept % 2):
        kept += 1
        if kept == 10**shown:  # 9.999 -> 10.00
            kept, exponent10 = 10 ** (shown - 1), exponent10 + 1
    # Placed with every kept digit (10.00 is positional, "10"; 65500 of 3 digits is not),
    # then the trailing zeros of the fraction dropped.
    mantissa, e, exponent = _written(negative, str(kept), exponent10, cut=True, mark="").partition(
        "e"
    )
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"≈{mantissa}{e}{exponent}"


def figure_text(x: ValueLike | Decimal | float, *, decimals: int = 1, most: int = 7) -> str:
    """A measured figure (a rate, a size in KiB) with `decimals` decimal places and at least
    three significant digits, at most `most`: exact where that holds it ("1710", "12.5"),
    else rounded to nearest and marked "≈" ("≈29367.5", "≈0.0123", "≈1.234568e9");
    `approximate_decimal`'s notation. inf and NaN as "inf", "-inf", "nan".

    >>> figure_text(29367.53), figure_text(1710.0), figure_text(49376 / 1024, decimals=1)
    ('≈29367.5', '1710', '≈48.2')
    """
    if decimals < 0 or most < 3:
        raise ValueError("decimals must be at least 0 and most at least 3")
    if isinstance(x, float | Decimal) and not math.isfinite(x):
        return str(float(x))
    if isinstance(x, ExactValue) and not x.is_finite:
        return str(x)
    _, magnitude = _sign_and_magnitude(x)
    whole = magnitude.numerator // magnitude.denominator
    integer_digits = len(int_to_decimal_str(whole)) if whole else 0
    shown = min(max(3, integer_digits + decimals), most)
    return approximate_decimal(x, keep=shown, shown=shown)


def _written(
    negative: bool, digits: str, exponent10: int, *, cut: bool, mark: str | None = None
) -> str:
    """Digits d1d2… meaning d1.d2… × 10**exponent10, in the app's one notation. `cut` digits
    (marked "…" unless `mark` says otherwise) are positional only when every integer digit
    is among them."""
    sign = "-" if negative else ""
    if mark is None:
        mark = "…" if cut else ""
    # Positional only when every shown digit keeps its place (a cut value needs its whole
    # integer part among the shown digits: "123456789…" would hide where the point is).
    if exponent10 in POSITIONAL_EXPONENTS and (not cut or exponent10 < len(digits)):
        if exponent10 >= 0:
            whole = digits[: exponent10 + 1].ljust(exponent10 + 1, "0")
            decimals = digits[exponent10 + 1 :]
            return f"{sign}{whole}{'.' + decimals if decimals else ''}{mark}"
        return f"{sign}0.{'0' * (-exponent10 - 1)}{digits}{mark}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}{mark}e{exponent10}"


def share_percent(share: float, count: int, decimals: int = 2) -> str:
    """A share of `count` items (k / count, given as a float) as a percentage: "20.00%" when
    `decimals` places hold it exactly, else rounded and marked, "≈42.86%" for 3 of 7.

    >>> share_percent(0.2, 5), share_percent(3 / 7, 7), share_percent(0.0, 0)
    ('20.00%', '≈42.86%', '0.00%')
    """
    if count <= 0:
        return f"{0:.{decimals}f}%"
    hits = round(share * count)  # the count behind the share (exact below 2**53 items)
    units, rest = divmod(hits * 100 * 10**decimals, count)  # in 10**-decimals percent
    if 2 * rest > count or (2 * rest == count and units % 2):
        units += 1  # to nearest, ties to even
    whole, part = divmod(units, 10**decimals)
    text = f"{whole}.{part:0{decimals}d}%" if decimals else f"{whole}%"
    return text if rest == 0 else f"≈{text}"
