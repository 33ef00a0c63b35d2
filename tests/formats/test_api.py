"""The public API promised in formats_api.md: names, specs, errors, records, decimals."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.formats import (
    OVERFLOW_POLICIES,
    ROUNDING_MODES,
    ExactValue,
    Fields,
    FloatFormat,
    calculate,
    exact_decimal,
    get_format,
    leading_digits,
    list_formats,
    make_format,
    p3109_parameters,
    parse_code,
    parse_value,
    quantize_block_exact,
)


def test_named_formats_widest_first_with_aliases() -> None:
    names = [f.name for f in list_formats()]
    assert names[:5] == ["float64", "float32", "tfloat32", "float16", "bfloat16"]
    widths = [f.width for f in list_formats()]
    assert widths == sorted(widths, reverse=True)
    for alias, name in [
        ("fp64", "float64"),
        ("fp32", "float32"),
        ("tf32", "tfloat32"),
        ("fp16", "float16"),
        ("half", "float16"),
        ("bf16", "bfloat16"),
        ("e4m3", "float8_e4m3fn"),
        ("e5m2", "float8_e5m2"),
        ("e8m0", "float8_e8m0fnu"),
        ("fp6_e2m3", "float6_e2m3fn"),
        ("fp6_e3m2", "float6_e3m2fn"),
        ("fp4", "float4_e2m1fn"),
        ("FP16", "float16"),
    ]:
        assert get_format(alias).name == name
        assert alias.lower() in get_format(alias).aliases
    assert get_format("tf32").width == 19
    assert {f.name for f in list_formats()} >= {
        "float8_e4m3fnuz",
        "float8_e4m3b11fnuz",
        "float8_e4m3",
        "float8_e3m4",
        "float8_e5m2fnuz",
    }


def test_unknown_name_lists_close_ones() -> None:
    with pytest.raises(ValueError, match=r"did you mean.*float16"):
        get_format("flaot16")
    with pytest.raises(ValueError, match="unknown format"):
        get_format("")


@pytest.mark.parametrize("fmt", list_formats(), ids=lambda f: f.name)
def test_spec_round_trips(fmt: FloatFormat) -> None:
    again = get_format(fmt.spec)
    assert (again.exponent_bits, again.mantissa_bits, again.bias, again.encoding) == (
        fmt.exponent_bits,
        fmt.mantissa_bits,
        fmt.bias,
        fmt.encoding,
    )
    assert (again.subnormals, again.signed) == (fmt.subnormals, fmt.signed)
    assert fmt.description


def test_custom_specs() -> None:
    e6m9 = get_format("e6m9")
    assert (e6m9.width, e6m9.bias, e6m9.encoding) == (16, 31, "ieee")
    custom = get_format("e4m3:bias=11:encoding=fnuz:subnormals=off")
    assert (custom.bias, custom.encoding, custom.subnormals) == (11, "fnuz", False)
    assert get_format(custom.spec) == custom
    assert make_format(4, 3, encoding="fn").max == 448
    assert get_format("e5m2:unsigned").signed is False
    assert get_format("e4m3:encoding=ieee").name == "e4m3:encoding=ieee"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("e0m3", "exponent bits"),
        ("e20m3", "exponent bits"),
        ("e11m60", "at most 64 bits"),
        ("e1m3", "at least 2 exponent bits"),
        ("e4m3:encoding=nope", "encoding"),
        ("e4m3:bias=x", "bias must be an integer"),
        ("e4m3:frob=1", "unknown option"),
        ("e4m3:subnormals=maybe", "on or off"),
        ("e8m0:encoding=fnu:subnormals=on", "no subnormals"),
        ("e4m3:encoding=fnuz:unsigned", "sign bit"),
        ("e11m53:unsigned", "at most 63 bits"),
        ("e1m0:encoding=fn", "no nonzero value"),  # +-0 and NaN only: no max, no range
    ],
)
def test_impossible_formats_are_clear_value_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_format(spec)


def test_fields_classify_bits() -> None:
    fp16 = get_format("fp16")
    assert fp16.fields(0x3C00) == Fields(0, 15, 0, 0, Fraction(1), False)
    assert fp16.fields(0x0001) == Fields(0, 0, -14, 1, Fraction(1, 1024), True)
    assert fp16.code_to_bits(0x3C00) == "0|01111|0000000000"
    assert fp16.code_to_hex(0x3C00) == "0x3c00"
    assert [fp16.classify(c) for c in (0, 0x8000, 1, 0x3C00, 0x7C00, 0x7E00)] == [
        "zero",
        "zero",
        "subnormal",
        "normal",
        "inf",
        "nan",
    ]
    assert get_format("e8m0").code_to_bits(127) == "01111111"
    with pytest.raises(ValueError, match="out of range"):
        fp16.classify(1 << 16)
    with pytest.raises(ValueError, match="not a finite number"):
        fp16.to_fraction(0x7C00)
    assert math.isinf(fp16.to_float(0xFC00)) and fp16.to_float(0xFC00) < 0
    assert str(fp16.to_exact(0x8000)) == "-0"


@pytest.mark.parametrize("name", ["e4m3", "fp16", "e8m0", "fp4"])
def test_a_numpy_code_decodes_as_its_int(name: str) -> None:
    # The codes from_float_array returns are numpy uint8/uint16: each element decodes as
    # the Python int would (a uint8 once wrapped in the exponent arithmetic: E4M3 0x38 read 0).
    fmt = get_format(name)
    codes = np.arange(fmt.code_count, dtype=fmt.from_float_array(np.zeros(1)).dtype)
    for code in codes:
        assert str(fmt.to_exact(code)) == str(fmt.to_exact(int(code)))
        assert fmt.to_float(code) == fmt.to_float(int(code)) or math.isnan(fmt.to_float(code))
        assert fmt.ulp(code) == fmt.ulp(int(code))
    assert get_format("e4m3").to_fraction(np.uint8(0x38)) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # Each was accepted as something else or failed deep inside before.
        (lambda: make_format(4, 3, subnormals="no"), "subnormals must be True or False"),
        (lambda: make_format(4, 3, signed=1), "signed must be True or False"),
        (lambda: calculate("add", "12", "fp16"), r"operands are a list, as \['12'\]"),
        (lambda: quantize_block_exact("0.1", "mxfp4"), "a block is a list of values"),
        (lambda: parse_code(None, get_format("fp16")), "a code to read must be text"),
        (lambda: p3109_parameters("binary8p3se"), "takes a FloatFormat, not str"),
        (lambda: exact_decimal(None), "exact_decimal takes a finite number, not None"),
        (lambda: exact_decimal(math.inf), "exact_decimal takes a finite number, not inf"),
        (
            lambda: get_format("fp16").from_value(np.array([0.1, 0.2])),
            "cannot round a ndarray: .*; for an array, from_float_array",
        ),
        # numpy's generator refused these in the array path, random.Random took "a" and 1.5
        # in the scalar path and refused a numpy integer: one rule for both.
        (lambda: get_format("fp16").round(0.1, "stochastic", seed="a"), "seed must be a whole"),
        (lambda: get_format("fp16").round(0.1, "stochastic", seed=1.5), "seed must be a whole"),
        (
            lambda: get_format("fp16").from_float_array([0.1], "stochastic", seed="a"),
            "seed must be a whole number >= 0, not 'a'",
        ),
        (
            lambda: quantize_block_exact(["0.1"], "mxfp4", rounding="stochastic", seed=-1),
            "seed must be a whole number >= 0, not -1",
        ),
    ],
)
def test_a_wrong_argument_is_a_value_error_saying_so(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_a_numpy_integer_seed_is_the_int_seed() -> None:
    fp16 = get_format("fp16")
    assert fp16.round(0.1, "stochastic", seed=np.int64(3)) == fp16.round(0.1, "stochastic", seed=3)


@pytest.mark.parametrize("code", [1.5, 1.0, np.float32(56.0), True, "0x38", None])
def test_a_code_that_is_no_integer_is_a_value_error(code: object) -> None:
    # Never truncated (1.5 read as code 1) nor a TypeError from the bit arithmetic inside.
    fp16 = get_format("fp16")
    for method in (fp16.to_exact, fp16.to_float, fp16.classify, fp16.code_to_hex, fp16.ulp):
        with pytest.raises(ValueError, match="a code must be an int"):
            method(code)  # type: ignore[operator]


def test_every_input_type() -> None:
    fp32 = get_format("fp32")
    one = 0x3F800000
    for x in (1, 1.0, Fraction(1), Decimal("1"), "1", "1.000", "0x1p0", "2/2", ExactValue.of(1)):
        assert fp32.from_value(x) == one
    assert fp32.from_value(Decimal("-0")) == 0x80000000
    assert fp32.from_value(Decimal("-Infinity")) == 0xFF800000
    assert fp32.classify(fp32.from_value(Decimal("NaN"))) == "nan"
    assert fp32.from_value("max") == 0x7F7FFFFF
    assert fp32.from_value("-min_subnormal") == 0x80000001
    assert fp32.from_value(Decimal("-1.5E+3")) == 0xC4BB8000
    # Decimals go through the text limits, not a billion-digit integer (that hung).
    with pytest.raises(ValueError, match="exponent out of range"):
        fp32.from_value(Decimal("1e999999999"))
    # ml_dtypes scalars, as in a user's notebook.
    assert fp32.from_value(ml_dtypes.bfloat16(-2.5)) == 0xC0200000
    assert fp32.from_value(np.array(1.0, dtype=ml_dtypes.float8_e4m3fn)) == one
    with pytest.raises(ValueError):
        fp32.from_value(True)
    with pytest.raises(ValueError, match="rounding mode"):
        fp32.from_value(1, rounding="up")
    with pytest.raises(ValueError, match="overflow policy"):
        fp32.from_value(1, overflow="wrap")
    assert set(ROUNDING_MODES) == {
        "nearest_even",
        "nearest_away",
        "toward_zero",
        "toward_positive",
        "toward_negative",
        "round_to_odd",
        "stochastic",
    }
    assert OVERFLOW_POLICIES == ("ieee", "saturate", "saturate_propagate", "nan")


def test_overflow_policies_and_directed_overflow() -> None:
    fp16 = get_format("fp16")
    assert fp16.from_value(1e6) == 0x7C00
    assert fp16.from_value(1e6, overflow="saturate") == 0x7BFF
    assert fp16.classify(fp16.from_value(1e6, overflow="nan")) == "nan"
    assert fp16.from_value(1e6, "toward_zero") == 0x7BFF  # IEEE: no overflow to inf
    assert fp16.from_value(-1e6, "toward_positive") == 0xFBFF
    assert fp16.from_value(-1e6, "toward_negative") == 0xFC00
    assert fp16.from_value(65519) == 0x7BFF  # below max + half ulp
    assert fp16.from_value(65520) == 0x7C00  # the tie goes to "even" infinity
    e4m3 = get_format("e4m3")
    assert e4m3.from_value(464) == 0x7E  # tie between 448 (even) and 480 (NaN's slot)
    assert e4m3.classify(e4m3.from_value(465)) == "nan"  # ml_dtypes: fn overflow is NaN
    assert e4m3.from_value(465, overflow="saturate") == 0x7E
    assert e4m3.classify(e4m3.from_value(math.inf)) == "nan"
    assert e4m3.from_value(math.inf, overflow="saturate") == 0x7E
    fp4 = get_format("fp4")
    assert fp4.from_value(100) == 0x7 and fp4.from_value(-math.inf) == 0xF  # saturate
    e8m0 = get_format("e8m0")
    assert e8m0.classify(e8m0.from_value(0)) == "nan"
    assert e8m0.classify(e8m0.from_value(-1)) == "nan"
    assert e8m0.from_value(2.0**-140) == 0  # nothing below 2**-127
    rounded = e8m0.round(-1)
    assert rounded.invalid and rounded.error_abs is None


@pytest.mark.timeout(8)  # a hang guard: well under a second now, 18 s before
def test_rounding_values_of_a_hundred_thousand_digits() -> None:
    # What the cross-format table does when someone types 1e99999: every format, every
    # mode. Fraction division of 330,000-bit integers made each rounding take ~0.3 s.
    huge, tiny = parse_value("1e99999"), parse_value("-1e-99999")
    for fmt in list_formats():
        for mode in ROUNDING_MODES:
            big = fmt.round(huge, mode)
            assert big.overflow and big.inexact
            truncating = ("toward_zero", "toward_negative", "round_to_odd")
            expected = fmt.max if mode in truncating else None
            assert (big.value.fraction if big.value.is_finite else None) == (
                expected if fmt.has_inf or fmt.has_nan else fmt.max
            )
            small = fmt.round(tiny, mode)
            if fmt.signed and fmt.subnormals:
                assert small.underflow and small.inexact
                # round_to_odd: -0 would look exact; -min_subnormal has the odd code.
                away = mode in ("toward_negative", "round_to_odd")
                assert small.value.fraction == (-fmt.min_subnormal if away else 0)
    deep = get_format("e16m47")
    assert deep.round(parse_value("1e-9900"), "toward_positive").code == 1


def test_rounded_record_errors_and_flags() -> None:
    fp16 = get_format("fp16")
    r = fp16.round("0.1")
    assert r.code == 0x2E66
    assert r.value.fraction == Fraction(819, 8192)
    assert r.error_abs == abs(Fraction(819, 8192) - Fraction(1, 10))
    assert r.error_rel == r.error_abs / Fraction(1, 10)
    assert r.error_ulps == r.error_abs / fp16.ulp(r.code)
    assert r.inexact and not r.overflow and not r.underflow
    assert r.rounding == "nearest_even" and r.overflow_policy == "ieee"
    tiny = fp16.round("1e-6")
    assert tiny.underflow and tiny.inexact
    exact = fp16.round(0.5)
    assert not exact.inexact and exact.error_abs == 0 and exact.error_ulps == 0
    big = fp16.round(1e9)
    assert big.overflow and big.error_abs is None and big.value.is_inf
    zero = fp16.round(0)
    assert zero.error_rel is None and zero.error_abs == 0


def test_neighbours_and_gaps_at_a_power_of_two() -> None:
    fp16 = get_format("fp16")
    one = 0x3C00
    assert fp16.next_up(one) == 0x3C01 and fp16.next_down(one) == 0x3BFF
    assert fp16.gap_up(one) == Fraction(1, 1024)
    assert fp16.gap_down(one) == Fraction(1, 2048)
    assert fp16.ulp(one) == Fraction(1, 1024)
    assert fp16.next_up(0x8000) == 0x0001 and fp16.next_down(0x0000) == 0x8001
    assert fp16.next_up(0x8001) == 0x8000
    assert fp16.next_up(0x7BFF) == 0x7C00 and fp16.next_up(0x7C00) == 0x7C00
    assert fp16.next_down(0x7C00) == 0x7BFF and fp16.next_up(0xFC00) == 0xFBFF
    assert fp16.gap_up(0x7BFF) is None and fp16.ulp(0x7C00) is None
    e4m3 = get_format("e4m3")
    assert e4m3.next_up(0x7E) == 0x7E  # no inf: max has no larger neighbour
    fnuz = get_format("e4m3fnuz")
    assert fnuz.next_up(0x81) == 0x00  # no -0: -min_subnormal steps up to +0
    flush = get_format("e4m3:subnormals=off")
    assert flush.next_up(0) == 0x08 and flush.classify(0x03) == "zero"
    assert flush.from_value(float(flush.min_normal) * 0.6) == 0x08
    assert flush.from_value(float(flush.min_normal) * 0.4) == 0x00
    assert flush.from_value(float(flush.min_normal) * 0.5) == 0x00  # tie: both even, to 0
    assert flush.min_subnormal is None


def test_exact_decimal() -> None:
    assert exact_decimal(Fraction(1, 3)) == "0." + "3" * 60 + "…"
    assert exact_decimal(Fraction(1, 3), max_digits=5) == "0.33333…"
    assert exact_decimal(Fraction(-5, 4)) == "-1.25"
    assert exact_decimal(10**30) == "1" + "0" * 30
    fp64 = get_format("fp64")
    smallest = exact_decimal(fp64.to_exact(1))
    assert smallest.startswith("0." + "0" * 323 + "4940656458412465441765687928682213")
    assert len(smallest) == 2 + 1074 and smallest.endswith("625")
    assert exact_decimal(get_format("fp16").to_exact(0x2E66)) == "0.0999755859375"
    assert exact_decimal(ExactValue.infinity(True)) == "-inf"
    assert exact_decimal(ExactValue("finite", True, Fraction(0))) == "-0"
    # Wider than Python's 4300-digit int/str limit.
    huge = get_format("e16m3").max
    assert exact_decimal(huge) == str(ExactValue.of(huge))
    assert len(exact_decimal(huge)) > 9000
    assert parse_value(exact_decimal(huge)).fraction == huge


@pytest.mark.timeout(10)  # a hang guard, far above the few ms this takes
def test_exact_decimal_of_values_with_huge_denominators() -> None:
    # 1e-99999 as typed and the smallest value of a 16-exponent-bit format: the expansion
    # used to divide the denominator by 2 and 5 one factor at a time (quadratic: 30 s here).
    assert exact_decimal(parse_value("1e-99999")) == "0." + "0" * 99998 + "1"
    tiny = get_format("e16m47").to_exact(1)  # 2**-32813
    text = exact_decimal(tiny)
    assert text.startswith("0." + "0" * 9877) and len(text) == 2 + 32813
    assert text.endswith("5") and parse_value(text) == tiny
    assert exact_decimal(Fraction(7, 3 * 10**5000), max_digits=3) == "0." + "0" * 4999 + "233…"


def test_leading_digits() -> None:
    assert leading_digits(65504, 7) == ("65504", 4, True)
    assert leading_digits(Fraction(-1, 3), 4) == ("3333", -1, False)
    assert leading_digits(get_format("fp16").min_subnormal, 4) == ("5960", -8, False)
    assert leading_digits(parse_value("1e99999"), 3) == ("1", 99999, True)
    assert leading_digits(Fraction(10**50 - 1, 10**100), 2) == ("99", -51, False)
    assert leading_digits(0, 5) == ("0", 0, True)
    with pytest.raises(ValueError):
        leading_digits(ExactValue.nan(), 3)


def test_shortest_decimal() -> None:
    fp16 = get_format("fp16")
    assert fp16.shortest_decimal(0x2E66) == "0.1"
    assert fp16.shortest_decimal(0x7BFF) == "65500.0"
    assert fp16.shortest_decimal(0x0001) == "6e-08"
    assert fp16.shortest_decimal(0x8000) == "-0.0"
    assert fp16.shortest_decimal(0x7C00) == "inf"
    assert fp16.shortest_decimal(0xFE00) == "nan"
    bf16 = get_format("bf16")
    assert bf16.shortest_decimal(bf16.from_value("3.14159")) == "3.14"
    assert get_format("e4m3").shortest_decimal(0x7E) == "450.0"  # 450 rounds to 448


def test_exact_value_strings() -> None:
    # More digits than Python's int/str limit (4300): 10**5000 / 3.
    assert str(parse_value("-1e5000/3")) == "-1" + "0" * 5000 + "/3"
    assert str(ExactValue.of(Fraction(1, 3))) == "1/3"
    assert str(ExactValue.of(Fraction(1, 2))) == "0.5"
    assert str(ExactValue.nan()) == "nan" and str(ExactValue.infinity()) == "inf"
    assert ExactValue("finite", True, Fraction(0)).is_zero
    with pytest.raises(ValueError):
        ExactValue.nan().fraction  # noqa: B018
    with pytest.raises(ValueError):
        ExactValue("finite", False, Fraction(-1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.1", Fraction(1, 10)),
        ("  -12.5e-3 ", Fraction(-125, 10000)),
        ("1/3", Fraction(1, 3)),
        ("-2.5/5", Fraction(-1, 2)),
        ("0x1.8p3", Fraction(12)),
        ("-0x.8", Fraction(-1, 2)),
        ("0x10p0", Fraction(16)),
        ("1_000", Fraction(1000)),
        ("0x1_0p1_0", Fraction(16 * 1024)),
        ("1_0/2_0", Fraction(1, 2)),
        ("." + "0" * 5000 + "1", Fraction(1, 10**5001)),
        ("1" * 10000, Fraction((10**10000 - 1) // 9)),
        ("+5", Fraction(5)),
        ("1E3", Fraction(1000)),
    ],
)
def test_parse_value_numbers(text: str, expected: Fraction) -> None:
    assert parse_value(text).fraction == expected


def test_parse_value_specials_and_constants() -> None:
    assert parse_value("inf").is_inf and not parse_value("+inf").negative
    assert parse_value("-inf").negative and parse_value("-Infinity").is_inf
    assert parse_value("nan").is_nan
    minus_zero = parse_value("-0")
    assert minus_zero.is_zero and minus_zero.negative
    fp16 = get_format("fp16")
    assert parse_value("max", fp16).fraction == 65504
    assert parse_value("-max", fp16).fraction == -65504
    assert parse_value("eps", fp16).fraction == Fraction(1, 1024)
    assert parse_value("min_normal", fp16).fraction == Fraction(1, 2**14)
    assert parse_value("min_subnormal", fp16).fraction == Fraction(1, 2**24)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "not a number"),
        ("1..2", "not a number"),
        ("1/0", "division by zero"),
        ("max", "needs a format"),
        ("--1", "more than one sign"),
        ("-", "a sign with no number"),
        ("1e999999999", "exponent out of range"),
        ("0x1p99999999", "exponent out of range"),
        ("0xg", "not a hex code"),
        ("0x.g", "hex float"),
        ("1/", "missing"),
        ("1e", "not a number"),
        ("١٢", "not a number"),
        ("_1", "only group digits"),
        ("1__0", "only group digits"),
        ("1_", "only group digits"),
        ("1_.5", "only group digits"),
        ("1e_5", "only group digits"),
        # A decimal comma is named, with the spelling to use (it was "not a number").
        ("1,5", "a comma is not a decimal point here: write 1.5$"),
        ("-1,5e3", "write -1.5e3$"),
        ("1,2,3", "not a number"),
    ],
)
def test_parse_value_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_value(text)


NINES = "9" * 3000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("abc", "not a number: 'a' at character 1 of 3"),
        ("1..2", "not a number: '.' at character 3 of 4"),
        (" 1e5e3 ", "not a number: 'e' at character 4 of 5"),
        ("1/-2", "not a number: '-' at character 3 of 4"),
        ("0x1.8q3", "not a hex float: 'q' at character 6 of 7"),
        ("1__0", "'_' at character 2 of 4 is misplaced"),
        (NINES + "x", "not a number: 'x' at character 3001 of 3001"),
        (NINES + "_", "'_' at character 3001 of 3001 is misplaced"),
        # Written as a code (a bare hex integer is one), wrongly: the code reader's message.
        ("0x" + "f" * 3000 + "g", "not a hex code: 'g' at character 3003 of 3003"),
        ("0x" + "f" * 3000 + ".g", "not a hex float: 'g' at character 3004 of 3004"),
    ],
)
def test_parse_value_points_at_the_first_wrong_character(text: str, where: str) -> None:
    # Failed before: 3000 nines and an "x" were quoted as 60 nines, "not a number": the
    # character that is wrong appeared nowhere in the message.
    with pytest.raises(ValueError) as caught:
        parse_value(text)
    assert where in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        NINES + "x",
        "--" + NINES,
        NINES + "/0",
        NINES + "_",
        NINES + ",5",
        "0x" + NINES + "q",
        "0x" + NINES + "p" + NINES,
    ],
)
def test_a_long_input_is_quoted_cut_and_marked_as_cut(text: str) -> None:
    # Failed before: cut to 60 characters with no mark (it passed for the whole input), or,
    # for a second sign or a zero divisor, quoted whole: 3000 characters in one message.
    with pytest.raises(ValueError) as caught:
        parse_value(text)
    message = str(caught.value)
    assert "9…" in message
    assert "9" * 61 not in message and len(message) < 300, message


def test_parse_code_quotes_a_long_code_cut_and_points_at_the_wrong_digit() -> None:
    fp16 = get_format("fp16")
    with pytest.raises(ValueError, match="not a hex code: 'G' at character 4 of 6"):
        parse_code("0x3G00", fp16)
    with pytest.raises(ValueError, match="not a binary code: '2' at character 5 of 5"):
        parse_code("0b012", fp16)
    long_codes = {
        "0x" + "F" * 3000 + "G": "'G' at character 3003 of 3003",
        "-0x" + "F" * 3000: "a code has no sign",
        "0x1" + "0" * 3000: "has more than 16 bits",
        # Over 4,300 digits Python's int() refuses a decimal string with its own message.
        "9" * 5000: "has more than 16 bits",
    }
    for text, words in long_codes.items():
        with pytest.raises(ValueError) as caught:
            parse_code(text, fp16, decimal=True)
        message = str(caught.value)
        assert words in message and "…" in message, message
        assert len(message) < 300, message
    with pytest.raises(ValueError, match="no min subnormal"):
        parse_value("min_subnormal", get_format("e8m0"))


@pytest.mark.parametrize("policy", [None, *OVERFLOW_POLICIES])
def test_an_infinity_that_changes_is_never_called_exact(policy: str | None) -> None:
    # -inf into FP4 gave -6 and inf into E4M3FN NaN with no flag at all: the CLI and the
    # bit editor then said "exact". A result that is not the input must raise a flag.
    for fmt in list_formats():
        for negative in (False, True):
            infinity = ExactValue.infinity(negative)
            rounded = fmt.round(infinity, overflow=policy)
            flagged = rounded.inexact or rounded.invalid or rounded.overflow
            assert flagged == (rounded.value != infinity), (fmt.name, policy, negative)


def test_infinity_flags_per_format() -> None:
    fp4, e4m3, fp16 = get_format("fp4"), get_format("e4m3"), get_format("fp16")
    # No code for inf (as NaN into FP4): invalid, whatever stands in for it.
    assert fp4.round("-inf").invalid and fp4.round("-inf").code == 0xF
    assert e4m3.round("inf").invalid and e4m3.round("inf").value.is_nan
    assert e4m3.round("inf", overflow="saturate").invalid
    # A format with inf keeps it (exact), or saturates it to max by the policy.
    kept = fp16.round("-inf")
    assert kept.code == 0xFC00 and not (kept.inexact or kept.overflow or kept.invalid)
    saturated = fp16.round("-inf", overflow="saturate")
    assert saturated.code == 0xFBFF and saturated.overflow and saturated.inexact
    assert not saturated.invalid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("−1", -1),
        ("−0.5e−3", Fraction(-1, 2000)),
        ("−∞", "-inf"),
        ("∞", "inf"),
        ("+∞", "inf"),
        ("−0", "-0"),
    ],
)
def test_the_apps_own_minus_and_infinity_can_be_typed_back(text: str, expected: object) -> None:
    # The app writes "−∞ (NaN scale)" and "(−1)^1 × ∞"; typed back they were not numbers.
    value = parse_value(text)
    assert str(value) == str(expected) if isinstance(expected, str) else value.fraction == expected
