"""The scalar engine against independent oracles: MPFR (through gmpy2) and gfloat.

MPFR rounds to the significand grid of each format (precision m + 1, its smallest exponent,
subnormals); the format's own top (max, inf, NaN codes) and the overflow policies are then
applied from their documented rules. gfloat describes custom formats (biases, encodings,
unsigned) as FormatInfo and rounds them itself. Every code, every midpoint between
neighbours and points just either side of it, every mode, every policy.
"""

from __future__ import annotations

import itertools
import warnings
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np
import pytest
from gfloat import Domain, FormatInfo, RoundMode, decode_float, round_ndarray

from fpexplorer.formats import OVERFLOW_POLICIES, FloatFormat, get_format
from fpexplorer.formats.exact import ExactValue
from fpexplorer.formats.format import P3109_ENCODINGS

SPECS = (
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "float8_e8m0fnu",
    "e3m3:encoding=fnu",
    "e4m3:bias=3",
    "e4m3:bias=12:encoding=ieee",
    "e3m4:bias=-2:encoding=finite",
    "e4m3:subnormals=off",
    "e5m2:encoding=fn:subnormals=off",
    "e3m1:encoding=finite:subnormals=off",
    "e4m3:unsigned",
    "e4m4:encoding=finite:unsigned",
    "e5m0",
    "binary8p3se",
    "binary8p1ue",
    "binary7p4uf",
    "binary6p5sf",
)
MPFR_MODES = {
    "toward_zero": gmpy2.RoundToZero,
    "toward_positive": gmpy2.RoundUp,
    "toward_negative": gmpy2.RoundDown,
    "nearest_even": gmpy2.RoundToNearest,
}
ALL_MODES = (*MPFR_MODES, "nearest_away", "round_to_odd")


def _fraction(value: Any) -> Fraction:
    return Fraction(*value.as_integer_ratio())


def _mpfr_grid(fmt: FloatFormat, x: Fraction, mode: Any) -> Fraction:
    """x (positive) rounded by MPFR to precision m + 1 with fmt's exponent floor and
    subnormals, and no exponent ceiling."""
    precision = fmt.mantissa_bits + 1
    emin = 1 - fmt.bias if fmt.encoding != "fnu" else -fmt.bias  # exponent of min_normal
    # MPFR's exponents are those of 0.1xxx significands: one more than IEEE's.
    with gmpy2.context(
        precision=precision,
        emin=emin - precision + 2 if fmt.subnormals else emin + 1,
        emax=1 << 20,
        subnormalize=fmt.subnormals,
        round=mode,
    ):
        return _fraction(gmpy2.mpfr(gmpy2.mpq(x.numerator, x.denominator)))


def _oracle(fmt: FloatFormat, x: Fraction, rounding: str, policy: str) -> ExactValue:
    """x rounded into fmt: MPFR for the grid, the documented rules for the top and the bottom."""
    negative = x < 0
    magnitude = abs(x)
    if x == 0:
        return ExactValue("finite", negative and fmt.has_negative_zero, Fraction(0))
    tiny = magnitude < fmt.min_normal
    if tiny and fmt.encoding == "fnu":
        value = fmt.min_normal  # no zero: the smallest value is the nearest there is
    elif tiny and not fmt.subnormals:
        # 0 or min_normal, as an integer rounding of magnitude / min_normal
        low, high = Fraction(0), fmt.min_normal
        value = _between(low, high, magnitude, rounding, negative, odd_high=False)
    else:
        # MPFR's directed modes see signed values: round the signed one and take |.|.
        directed = {
            "toward_zero": gmpy2.RoundToZero,
            "toward_positive": gmpy2.RoundUp,
            "toward_negative": gmpy2.RoundDown,
        }
        # MPFR at precision 1 breaks ties away (every significand is 1), as IEEE 754-2019
        # 4.3.1 does and the engine with it; P3109 formats break them to the even code, whose
        # parity is that of the exponent field there (gfloat).
        by_code = fmt.encoding in P3109_ENCODINGS and not fmt.mantissa_bits
        if rounding in directed or (rounding == "nearest_even" and not by_code):
            value = abs(_mpfr_grid(fmt, x, MPFR_MODES[rounding]))
        else:
            low = _mpfr_grid(fmt, magnitude, gmpy2.RoundToZero)
            high = _mpfr_grid(fmt, magnitude, gmpy2.RoundAwayZero)
            value = _between(low, high, magnitude, rounding, negative, odd_high=_odd(fmt, high))
    if value > fmt.max:
        truncating = rounding in ("toward_zero", "round_to_odd") or rounding == (
            "toward_positive" if negative else "toward_negative"
        )
        if truncating or policy in ("saturate", "saturate_propagate"):
            value = fmt.max
        else:
            order = ("nan", "inf") if policy == "nan" else ("inf", "nan")
            for kind in order:
                if kind == "inf" and fmt.has_inf:
                    return ExactValue.infinity(negative)
                if kind == "nan" and fmt.has_nan:
                    return ExactValue.nan(negative)
            value = fmt.max
    return ExactValue("finite", negative and (value != 0 or fmt.has_negative_zero), value)


def _between(
    low: Fraction, high: Fraction, x: Fraction, rounding: str, negative: bool, *, odd_high: bool
) -> Fraction:
    if low == x or high == x:
        return x
    if rounding == "nearest_away":
        return low if x - low < high - x else high
    if rounding == "nearest_even":
        # A tie goes to the even one (see _odd): low when high is odd, and 0 below min_normal
        # without subnormals, where min_normal is even too.
        tie_low = odd_high or low == 0
        return low if x - low < high - x or (x - low == high - x and tie_low) else high
    if rounding == "round_to_odd":
        return high if odd_high or low == 0 else low
    up = {"toward_zero": False, "toward_positive": not negative, "toward_negative": negative}
    return high if up[rounding] else low


def _odd(fmt: FloatFormat, value: Fraction) -> bool:
    """Whether the upper neighbour `value` counts as odd: its last significand bit at the
    lower neighbour's quantum (with no fraction bits that is 10 in binary, even), or in a
    P3109 format with no fraction bits the last bit of its exponent field (its code's)."""
    if fmt.mantissa_bits == 0:
        if fmt.encoding not in P3109_ENCODINGS:
            return False
        return (_floor_log2(value) + fmt.bias) % 2 == 1
    quantum = max(fmt.min_normal, Fraction(2) ** _floor_log2(value)) / 2**fmt.mantissa_bits
    return (value / quantum).numerator % 2 == 1


def _floor_log2(value: Fraction) -> int:
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    return exponent if value >= Fraction(2) ** exponent else exponent - 1


def _points(fmt: FloatFormat) -> list[Fraction]:
    """Every finite value, every midpoint (and past max), and points 2**-30 of a gap either
    side of each midpoint and value; negatives too where the format is signed."""
    values = sorted(
        {
            abs(fmt.to_fraction(code))
            for code in range(1 << fmt.width)
            if fmt.to_exact(code).is_finite
        }
    )
    values += [2 * values[-1] - values[-2], 2 * values[-1]]
    gaps = [b - a for a, b in itertools.pairwise(values)]
    points = set(values)
    for low, gap in zip(values, gaps, strict=False):
        for centre in (low, low + gap / 2):
            points.update((centre, centre + gap / 2**30, centre - gap / 2**30))
    points.update((values[1] / 3, values[1] / 2**40))
    points.discard(Fraction(0))
    positive = sorted(p for p in points if p > 0)
    return positive + [-p for p in positive] if fmt.signed else positive


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.slow  # a sweep, MPFR over many specs: ~6 s in all
def test_scalar_engine_against_mpfr(spec: str) -> None:
    fmt = get_format(spec)
    points = _points(fmt)
    top = fmt.max * Fraction(9, 10)
    for x in points:
        for rounding in ALL_MODES:
            policies = OVERFLOW_POLICIES if abs(x) > top else (None,)
            for policy in policies:
                got = fmt.round(x, rounding, policy).value
                wanted = _oracle(fmt, x, rounding, policy or fmt.default_overflow)
                assert (got.kind, got.negative, got.magnitude) == (
                    wanted.kind,
                    wanted.negative,
                    wanted.magnitude,
                ) or (got.is_nan and wanted.is_nan), (spec, x, rounding, policy, got, wanted)


def _gfloat_info(fmt: FloatFormat) -> FormatInfo:
    """The same format described to gfloat (ieee, fn, fnuz and finite encodings)."""
    nans = {
        "ieee": (1 << fmt.mantissa_bits) - 1,
        "fn": 1,
        "fnuz": 0,
        "finite": 0,
    }[fmt.encoding]
    return FormatInfo(
        name=fmt.spec,
        k=fmt.width,
        precision=fmt.mantissa_bits + 1,
        bias=fmt.bias,
        has_nz=fmt.has_negative_zero,
        domain=Domain.Extended if fmt.has_inf else Domain.Finite,
        num_high_nans=nans,
        has_subnormals=True,
        is_signed=fmt.signed,
        is_twos_complement=False,
    )


GFLOAT_SPECS = (
    "e4m3:bias=3",
    "e4m3:bias=12:encoding=ieee",
    "e5m2:bias=20",
    "e3m4:bias=-2:encoding=finite",
    "e4m3:encoding=fn:bias=9",
    "e4m3:encoding=fnuz:bias=5",
    "e5m2:encoding=fnuz:bias=13",
    "e2m5:encoding=finite",
    "e4m3:unsigned:encoding=finite",
    "e5m4",
)
GFLOAT_MODES = {
    "nearest_even": RoundMode.TiesToEven,
    "nearest_away": RoundMode.TiesToAway,
    "toward_zero": RoundMode.TowardZero,
    "toward_positive": RoundMode.TowardPositive,
    "toward_negative": RoundMode.TowardNegative,
}


@pytest.mark.parametrize("spec", GFLOAT_SPECS)
@pytest.mark.slow  # a sweep, gfloat over many specs: ~3 s in all
def test_custom_formats_against_gfloat(spec: str) -> None:
    fmt = get_format(spec)
    fi = _gfloat_info(fmt)
    for code in range(1 << fmt.width):
        expected = decode_float(fi, code).fval
        got = fmt.to_float(code)
        assert got == expected or (np.isnan(got) and np.isnan(expected)), (spec, hex(code))
    # NaN into a format without NaN: the engine gives ml_dtypes' zero and the invalid flag
    # (tests/formats/test_api.py); gfloat refuses.
    specials = [np.inf, np.nan] if fmt.has_nan else [np.inf]
    points = np.array([float(p) for p in _points(fmt)] + specials)
    if fmt.signed:
        points = np.concatenate([points, [-np.inf]])
    for rounding, mode in GFLOAT_MODES.items():
        for policy, sat in (("ieee", False), ("saturate", True)):
            if not sat and not (fmt.has_inf or fmt.has_nan):
                continue  # gfloat raises: overflow with nowhere to go
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                expected = round_ndarray(fi, points, mode, sat)
            got = np.array(
                [fmt.to_float(fmt.from_value(float(p), rounding, policy)) for p in points]
            )
            same = (got == expected) | (np.isnan(got) & np.isnan(expected))
            assert same.all(), (spec, rounding, policy, points[~same][:3], got[~same][:3])
