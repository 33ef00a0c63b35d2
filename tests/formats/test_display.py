"""The display rule: a shown value is exact, or cut and marked with "…", in one notation."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fpexplorer.formats import ExactValue, get_format, parse_value
from fpexplorer.formats.decimal import (
    CUT_DIGITS,
    EXACT_DIGITS,
    display_decimal,
    display_decimals,
    share_percent,
    shortest_display,
)

# The app's one notation: optional "-", digits with at most one ".", optional "…", optional
# "e" and a plain exponent ("e-5", "e38": no "+", no padded digits).
NOTATION = re.compile(r"-?[0-9]+(\.[0-9]+)?…?(e-?[1-9][0-9]*)?")


def _check_truthful(value: Fraction, text: str, cut_digits: int | None = CUT_DIGITS) -> None:
    """`text` is the value exactly, or a truncation of it marked with "…"."""
    assert NOTATION.fullmatch(text), text
    shown = parse_value(text.replace("…", "")).fraction
    if "…" not in text:
        assert shown == value, text
        return
    # Truncated toward zero, and the next digit up would be too far.
    assert abs(shown) < abs(value), text
    mantissa = text.split("e")[0].replace("…", "").lstrip("-")
    significant = len(mantissa.replace(".", "").lstrip("0"))
    if cut_digits is not None:
        assert significant == cut_digits
    exponent = int(text.split("e")[1]) if "e" in text else 0
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    last_place = Fraction(10) ** (exponent - decimals)
    assert abs(value) - abs(shown) < last_place, text


@pytest.mark.parametrize(
    ("name", "code", "expected"),
    [
        # The cases: the shortest round-trip strings read "2e-05", "9e-41", "6e-08".
        ("float8_e5m2", 0x01, "1.52587890625e-5"),
        ("bfloat16", 0x0001, "9.18354961…e-41"),
        ("float16", 0x0001, "5.9604644775390625e-8"),
        ("float16", 0x7BFF, "65504"),
        ("float32", 0x3DCCCCCD, "0.100000001…"),
        ("float32", 0x7F7FFFFF, "3.40282346…e38"),
        ("float64", 0x0000000000000001, "4.94065645…e-324"),
        ("float16", 0x8000, "-0"),
        ("float16", 0x7C00, "inf"),
        ("float16", 0xFC00, "-inf"),
        ("float16", 0x7E00, "nan"),
    ],
)
def test_display_of_codes(name: str, code: int, expected: str) -> None:
    fmt = get_format(name)
    assert display_decimal(fmt.to_exact(code)) == expected


def test_gaps_that_are_short_show_exactly() -> None:
    # 2**-27 has 19 significant digits: short enough to be shown whole.
    assert display_decimal(Fraction(1, 2**27)) == "7.450580596923828125e-9"
    assert EXACT_DIGITS >= 19


def test_shortest_round_trip_uses_the_same_notation() -> None:
    e5m2, fp16 = get_format("float8_e5m2"), get_format("float16")
    assert shortest_display(e5m2, 0x01) == "2e-5"  # repr style would be "2e-05"
    assert shortest_display(fp16, 0x7BFF) == "65500"
    assert shortest_display(fp16, 0x8000) == "-0"
    assert shortest_display(fp16, 0x7C00) == "inf"
    assert shortest_display(get_format("float32"), 0x3DCCCCCD) == "0.1"
    # The CLI keeps Python's repr style for the shortest decimal.
    assert e5m2.shortest_decimal(0x01) == "2e-05"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("float16", marks=pytest.mark.slow),
        pytest.param("bfloat16", marks=pytest.mark.slow),
        "float8_e4m3fn",
        "float8_e5m2",
        "float6_e2m3fn",
        "float4_e2m1fn",
    ],
)
def test_every_code_of_small_formats_is_shown_truthfully(name: str) -> None:
    fmt = get_format(name)
    for code in range(1 << fmt.width):
        value = fmt.to_exact(code)
        text = display_decimal(value)
        if not value.is_finite:
            assert text in ("inf", "-inf", "nan", "-nan")
            continue
        _check_truthful(value.fraction, text)
        shortest = shortest_display(fmt, code)
        assert NOTATION.fullmatch(shortest), shortest
        assert fmt.from_value(shortest.replace("…", "")) == code or value.is_zero


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float64_values_are_shown_truthfully(x: float) -> None:
    _check_truthful(Fraction(x), display_decimal(Fraction(x)))


@given(st.fractions(max_denominator=10**12).filter(lambda f: f != 0))
def test_fractions_are_shown_truthfully(x: Fraction) -> None:
    _check_truthful(x, display_decimal(x))


def test_values_that_differ_look_different_in_a_column() -> None:
    fp32, fp64, wide = get_format("float32"), get_format("float64"), get_format("e11m50")
    third = parse_value("1/3")
    values = [fmt.to_exact(fmt.from_value(third)) for fmt in (fp32, fp64, wide)]
    alone = [display_decimal(value) for value in values]
    assert alone[1] == alone[2]  # nine digits cannot tell float64's 1/3 from e11m50's
    texts = display_decimals([*values, None, values[0]])
    assert len(set(texts[:3])) == 3
    assert texts[3] is None and texts[4] == texts[0]
    for value, text in zip(values, texts[:3], strict=True):
        assert text is not None
        _check_truthful(value.fraction, text, cut_digits=None)
    # Equal values keep equal texts, and -0 is not 0.
    assert display_decimals([ExactValue.of(0), parse_value("-0")]) == ["0", "-0"]


def test_bad_digit_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        display_decimal(Fraction(1, 3), cut_digits=0)


def test_share_percent_is_exact_or_marked() -> None:
    # "flushed to zero 42.86%" for 3 of 7 read as exact.
    for count in range(1, 60):
        for hits in range(count + 1):
            text = share_percent(hits / count, count)
            exact = Fraction(hits * 100, count)
            shown = Fraction(text.lstrip("≈").rstrip("%"))
            assert abs(shown - exact) <= Fraction(1, 200), (hits, count, text)
            assert text.startswith("≈") == (shown != exact), (hits, count, text)
    assert share_percent(3 / 7, 7) == "≈42.86%" and share_percent(0.2, 5) == "20.00%"


def _check_rounded_to_nearest(value: Fraction, text: str, digits: int) -> None:
    """`text` is `value` exactly, or rounded once to `digits` significant digits (to
    nearest, ties to even) and marked "≈", in the app's notation. The oracle: the decimal
    module, exact (a dyadic value has a finite decimal), then rounded once."""
    from decimal import ROUND_HALF_EVEN, Context, Decimal

    written = text.removeprefix("≈")
    assert NOTATION.fullmatch(written) and "…" not in written, text
    wide = Context(prec=2000, Emax=10**6, Emin=-(10**6))
    exact = wide.divide(Decimal(value.numerator), Decimal(value.denominator))
    assert Fraction(exact) == value
    rounded = Context(prec=digits, rounding=ROUND_HALF_EVEN, Emax=10**6, Emin=-(10**6))
    expected = Fraction(rounded.plus(exact))
    assert Fraction(Decimal(written)) == expected, text
    assert text.startswith("≈") == (expected != value), text


@given(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=-1200, max_value=1200),
    st.integers(min_value=1, max_value=8),
)
def test_approximate_decimal_is_exact_or_rounded_to_nearest_and_marked(
    mantissa: int, exponent: int, shown: int
) -> None:
    from fpexplorer.formats.decimal import approximate_decimal

    value = Fraction(mantissa) * Fraction(2) ** exponent
    _check_rounded_to_nearest(value, approximate_decimal(value, keep=shown, shown=shown), shown)


@given(
    st.integers(min_value=-(2**60), max_value=2**60),
    st.integers(min_value=-80, max_value=80),
    st.integers(min_value=0, max_value=3),
)
def test_figure_text_keeps_its_decimals_and_marks_what_it_rounds(
    mantissa: int, exponent: int, decimals: int
) -> None:
    from fpexplorer.formats.decimal import figure_text

    value = Fraction(mantissa) * Fraction(2) ** exponent
    # Its significant digits: the whole part and `decimals` places, at least three and at
    # most seven.
    magnitude = abs(value)
    integer_digits = len(str(int(magnitude))) if magnitude >= 1 else 0
    digits = min(max(3, integer_digits + decimals), 7)
    _check_rounded_to_nearest(value, figure_text(value, decimals=decimals), digits)


def test_figure_text_of_rates_and_sizes() -> None:
    from fpexplorer.formats.decimal import figure_text

    assert figure_text(29367.53) == "≈29367.5"  # a rate: one decimal, marked
    assert figure_text(1710.0) == "1710" and figure_text(12.5) == "12.5"  # exact
    assert figure_text(49376 / 1024) == "≈48.2"  # 48.21875 KiB
    assert figure_text(0.0123) == "≈0.0123"  # three significant digits below 1
    assert figure_text(float("inf")) == "inf" and figure_text(float("nan")) == "nan"
    with pytest.raises(ValueError, match="decimals"):
        figure_text(1.0, decimals=-1)


def test_command_line_tables_use_the_display_notation(capsys: pytest.CaptureFixture[str]) -> None:
    # `formats` printed 1.798e+308 and 1.192e-07 where `inspect` and the GUI print e308, e-7.
    from fpexplorer.cli import main

    python_style = re.compile(r"[0-9…]e\+|[0-9…]e-?0[0-9]")
    for argv in (
        ["formats"],
        ["inspect", "1e300", "-f", "fp64", "fp16", "bf16"],
        ["inspect", "1e-40", "-f", "fp32", "e8m0"],
        ["calc", "sqrt(2e300)", "-f", "fp64"],
        ["calc", "1e-300 * 3", "-f", "fp64"],
        ["quantize", "-f", "mxfp8_e4m3", "1e-30", "3e30", "0.1"],
        ["quantize", "-f", "nvfp4", "1e-30", "3e30", "0.1"],
    ):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert python_style.search(out) is None, (argv, python_style.search(out))


@pytest.mark.parametrize("name", ["float16", "float8_e5m2", "float8_e4m3fn", "binary8p3se", "e3m2"])
def test_the_shortest_text_of_a_nan_reads_back_or_says_it_cannot(name: str) -> None:
    # FP16's 0x7D01 (a signaling NaN with payload 0x101) showed "nan", which reads back as
    # 0x7E00; and 0xFE00 is "-nan" (the JSON's repr-style "nan" gives 0x7E00).
    from fpexplorer.formats.decimal import NAN_PAYLOAD_SHORTEST

    fmt = get_format(name)
    for code in range(1 << fmt.width):
        if not fmt.to_exact(code).is_nan:
            continue
        text = shortest_display(fmt, code)
        assert text == NAN_PAYLOAD_SHORTEST or fmt.from_value(text) == code, (hex(code), text)
    if name == "float16":
        assert shortest_display(fmt, 0x7D01) == NAN_PAYLOAD_SHORTEST
        assert shortest_display(fmt, 0xFE00) == "-nan"
        assert shortest_display(fmt, 0x7E00) == "nan"
