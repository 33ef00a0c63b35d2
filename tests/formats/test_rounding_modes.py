"""round_to_odd and stochastic rounding with N random bits, in the scalar and array paths,
exactly: against gfloat, and stochastic's distribution counted over all 2**N draws."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import gfloat.formats as gf
import numpy as np
import pytest
from gfloat import RoundMode, encode_float, round_float, round_ndarray

from fpexplorer.formats import FloatFormat, get_format
from fpexplorer.formats.format import stochastic_threshold

# Engine format name -> gfloat FormatInfo of the same format.
ORACLES: dict[str, Any] = {
    "float16": gf.format_info_binary16,
    "bfloat16": gf.format_info_bfloat16,
    "float8_e4m3fn": gf.format_info_ocp_e4m3,
    "float8_e5m2": gf.format_info_ocp_e5m2,
    "float6_e2m3fn": gf.format_info_ocp_e2m3,
    "float4_e2m1fn": gf.format_info_ocp_e2m1,
    "binary8p3se": gf.format_info_p3109(8, 3),
    "binary8p1se": gf.format_info_p3109(8, 1),
    "binary8p4sf": gf.format_info_p3109(8, 4, gf.Signedness.Signed, gf.Domain.Finite),
    "binary6p3ue": gf.format_info_p3109(6, 3, gf.Signedness.Unsigned, gf.Domain.Extended),
}


def _points(fmt: FloatFormat, count: int = 400) -> np.ndarray[Any, Any]:
    """Finite values (sampled for wide formats), points a quarter, half and three quarters
    between neighbours, and their float64 neighbours."""
    codes = np.arange(1 << fmt.width, dtype=np.uint64)
    values = fmt.to_float_array(codes)
    values = np.unique(values[np.isfinite(values) & (values >= 0)])
    if values.size > count:
        values = values[:: values.size // count]
    gaps = np.diff(values)
    inside = np.concatenate([values[:-1] + gaps * q for q in (0.25, 0.5, 0.75)])
    points = np.concatenate([values, inside])
    points = np.concatenate([points, np.nextafter(points, 0.0), np.nextafter(points, np.inf)])
    return np.concatenate([points, -points]) if fmt.signed else points


@pytest.mark.parametrize("name", list(ORACLES))
@pytest.mark.slow  # a sweep, every oracle format: ~1 s in all
def test_round_to_odd_is_the_odd_one_of_the_truncation_and_its_successor(name: str) -> None:
    """Oracle from gfloat: x if exact, else whichever of toward_zero(x) and away(x) has the odd
    code (gfloat 0.5.2 has no round-to-odd mode of its own)."""
    fmt, fi = get_format(name), ORACLES[name]
    x = _points(fmt)
    toward_zero = round_ndarray(fi, x, RoundMode.TowardZero, sat=True)
    up = round_ndarray(fi, x, RoundMode.TowardPositive, sat=True)
    down = round_ndarray(fi, x, RoundMode.TowardNegative, sat=True)
    away = np.where(x < 0, down, up)
    got = fmt.to_float_array(fmt.from_float_array(x, "round_to_odd"))
    for i, value in enumerate(x):
        if toward_zero[i] == value or abs(value) > fi.max:
            expected = toward_zero[i]  # exact, or beyond max: truncation keeps ±max
        else:
            odd = [v for v in (toward_zero[i], away[i]) if encode_float(fi, v) & 1]
            expected = odd[0]
        assert got[i] == expected, (name, value, got[i], expected)
        assert fmt.to_float(fmt.from_value(float(value), "round_to_odd")) == expected


def test_round_to_odd_makes_a_second_rounding_correct() -> None:
    """Why round-to-odd exists: rounding to odd with two extra bits, then to nearest even,
    equals rounding once (Boldo and Melquiond). float32 -> e5m4 (odd) -> e5m2 against
    float32 -> e5m2, over a sweep of float32 values."""
    wide, narrow = get_format("e5m4"), get_format("e5m2")
    x = np.linspace(-60000, 60000, 200_001, dtype=np.float32)
    x = np.concatenate([x, np.geomspace(1e-7, 1, 20001, dtype=np.float32)])
    odd = wide.to_float_array(wide.from_float_array(x, "round_to_odd"))
    twice = narrow.from_float_array(odd)
    once = narrow.from_float_array(x)
    np.testing.assert_array_equal(twice, once)
    nearest = wide.to_float_array(wide.from_float_array(x))
    assert (narrow.from_float_array(nearest) != once).any()  # nearest twice is not enough


def test_round_to_odd_edges() -> None:
    e4m3 = get_format("e4m3")  # max code 0x7e is even: beyond max it stays ±max, not NaN
    assert e4m3.from_value(1000, "round_to_odd") == 0x7E
    assert e4m3.from_value(-1000, "round_to_odd") == 0xFE
    no_subnormals = get_format("e4m3:subnormals=off")
    # 0 and min_normal are both even codes: the nonzero one, so inexact never looks exact.
    assert no_subnormals.from_value("1/1000", "round_to_odd") == 0x08
    assert no_subnormals.from_value(0, "round_to_odd") == 0
    assert get_format("fp16").from_value("0.1", "round_to_odd") == 0x2E67  # 0x2e66 truncated


@pytest.mark.parametrize("bits", [1, 2, 3, pytest.param(5, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["binary8p3se", "float8_e4m3fn", "binary8p1se", "float16"])
def test_stochastic_over_every_draw(name: str, bits: int) -> None:
    """Every one of the 2**N draws, scalar and array, against gfloat's Stochastic mode; the
    number that round up is d = round_half_even(p * 2**N), p the distance to the lower
    neighbour as a fraction of the gap."""
    fmt, fi = get_format(name), ORACLES[name]
    draws = np.arange(1 << bits)
    values = fmt.to_float_array(np.arange(1 << fmt.width, dtype=np.uint64))
    values = np.unique(values[np.isfinite(values) & (values >= 0)])
    fractions = [Fraction(k, 2**bits) for k in range(1 << bits)] + [
        Fraction(11, 2 ** (bits + 4)),  # not a multiple of 2**-N
        Fraction(1, 2 ** (bits + 1)),  # a tie at N bits: d goes to the even side
        Fraction(3, 2 ** (bits + 1)),
        Fraction(1, 2**40),
    ]
    step = max(1, values.size // 16)  # neighbours, a sample of them
    for low, high in zip(values[:-1:step], values[1::step], strict=True):
        for p in fractions:
            x = Fraction(float(low)) + p * (Fraction(float(high)) - Fraction(float(low)))
            for sign in (1, -1):
                value = float(sign * x)
                assert Fraction(value) == sign * x  # exact in float64 for these formats
                codes = [
                    fmt.from_value(value, "stochastic", random_bits=bits, random_draw=int(r))
                    for r in draws
                ]
                array = fmt.from_float_array(
                    np.full(draws.size, value), "stochastic", random_bits=bits, random_draws=draws
                )
                assert list(array) == codes
                oracle = [
                    round_float(fi, value, RoundMode.Stochastic, srbits=int(r), srnumbits=bits)
                    for r in draws
                ]
                assert [fmt.to_float(c) for c in codes] == oracle, (name, value, bits)
                if p == 0:
                    assert set(codes) == {fmt.from_value(value)}
                    continue
                ups = sum(abs(fmt.to_fraction(c)) > x for c in codes)
                assert ups == round(p * 2**bits)  # Python's round of a Fraction: half to even
                assert abs(Fraction(ups, 2**bits) - p) <= Fraction(1, 2 ** (bits + 1))


def test_stochastic_threshold_and_arguments() -> None:
    assert stochastic_threshold(1, 3, 2) == 1  # 1/3 * 4 = 1.33 -> 1
    assert stochastic_threshold(1, 8, 2) == 0  # 0.5 -> 0 (even)
    assert stochastic_threshold(3, 8, 2) == 2  # 1.5 -> 2 (even)
    assert stochastic_threshold(7, 8, 64) == 7 << 61
    fp16 = get_format("fp16")
    with pytest.raises(ValueError, match="random_bits"):
        fp16.from_value(0.1, "nearest_even", random_bits=4)
    with pytest.raises(ValueError, match="random_bits must be 1"):
        fp16.from_value(0.1, "stochastic", random_bits=65)
    with pytest.raises(ValueError, match="random_draw"):
        fp16.from_value(0.1, "stochastic", random_bits=4, random_draw=16)
    with pytest.raises(ValueError, match="random_draws"):
        fp16.from_float_array(np.array([0.1]), "stochastic", random_bits=4, random_draws=[16])
    # Seeded draws with few bits: repeatable, and only the two neighbours.
    x = np.full(1000, 0.1)
    first = fp16.from_float_array(x, "stochastic", seed=3, random_bits=3)
    np.testing.assert_array_equal(
        first, fp16.from_float_array(x, "stochastic", seed=3, random_bits=3)
    )
    assert set(np.unique(first)) == {0x2E66, 0x2E67}


def test_documented_rules_nan_policy_and_formats_without_zero() -> None:
    """The two rules the README states: under the nan policy the directions that round toward
    zero keep ±max; E8M0 has no zero, so every mode sends 2**-200 to 2**-127."""
    for name in ("fp16", "e4m3", "binary8p3se"):
        fmt = get_format(name)
        top = fmt.from_value("max")
        bottom = fmt.from_value("-max")
        for rounding, x, expected in (
            ("toward_zero", 1e6, top),
            ("toward_zero", -1e6, bottom),
            ("toward_negative", 1e6, top),
            ("toward_positive", -1e6, bottom),
            ("round_to_odd", 1e6, top),
        ):
            assert fmt.from_value(x, rounding, "nan") == expected, (name, rounding, x)
            array = fmt.from_float_array(np.array([x]), rounding, "nan")
            assert int(array[0]) == expected
        assert fmt.classify(fmt.from_value(1e6, "nearest_even", "nan")) == "nan"
        assert fmt.classify(fmt.from_value(-1e6, "toward_negative", "nan")) == "nan"
    e8m0 = get_format("e8m0")
    for rounding in ("nearest_even", "toward_zero", "toward_negative", "round_to_odd"):
        rounded = e8m0.round(Fraction(1, 2**200), rounding)
        assert rounded.value.fraction == Fraction(1, 2**127), rounding
        assert rounded.underflow and rounded.inexact
    assert e8m0.from_float_array(np.array([2.0**-200]), "toward_zero")[0] == 0
