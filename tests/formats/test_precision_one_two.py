"""Formats of precision 1 and 2 (no or one fraction bit), exhaustively at every tie and at
the overflow threshold, against MPFR (gmpy2), gfloat and ml_dtypes.

At precision 1 every significand is 1, so "the even least significant digit" of IEEE 754's
roundTiesToEven cannot choose between two neighbours; IEEE 754-2019 4.3.1 then takes the one
larger in magnitude, and gives the overflow threshold b**emax * (b - b**(1-p) / 2), which is
1.5 * 2**emax at p = 1, inclusive. MPFR and ml_dtypes (float8_e8m0fnu) round so; so does the
engine, except in P3109 formats, where it follows gfloat (P3109's reference code), which
breaks those ties to the even code (the exponent's last bit). At precision 2 the code's last
bit is the significand's and every oracle agrees.

The points: every value, every midpoint between neighbours (between max and the next value
of the unbounded grid too: the threshold), the next value itself, and one ulp of a format 12
bits wider on either side of each; both signs where the format is signed.
"""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction
from typing import Any

import gmpy2
import ml_dtypes
import numpy as np
import pytest
from gfloat import RoundMode, round_float
from gfloat.formats import format_info_p3109
from gfloat.types import Domain, Signedness

from fpexplorer.formats import OVERFLOW_POLICIES, ROUNDING_MODES, FloatFormat, get_format
from fpexplorer.formats.p3109 import p3109_format

from .test_differential import GFLOAT_MODES, _gfloat_info, _oracle

WIDER_BITS = 12  # "one ulp of a wider format": a gap / 2**12
RANDOM_BITS = 4  # stochastic rounding over all 16 draws

# Every IEEE-style family with p = 1 and p = 2 and 2..5 exponent bits: with inf (ieee), NaN
# without inf (fn, fnuz), neither (finite), without subnormals, unsigned, without zero (fnu).
IEEE_STYLE_SPECS = (
    *(
        spec
        for e, m in itertools.product(range(2, 6), (0, 1))
        for spec in (
            f"e{e}m{m}:encoding=ieee",
            f"e{e}m{m}:encoding=fn",
            f"e{e}m{m}:encoding=fnuz",
            f"e{e}m{m}:encoding=finite",
            f"e{e}m{m}:encoding=ieee:subnormals=off",
            f"e{e}m{m}:encoding=finite:unsigned",
            *([f"e{e}m{m}:encoding=fnu"] if m == 0 else []),
        )
    ),
    "float8_e8m0fnu",
    "float4_e2m1fn",
)
P3109_FORMATS = tuple(
    (k, p, signed, extended)
    for k in range(3, 7)
    for p in (1, 2)
    for signed in (True, False)
    for extended in (True, False)
)
# Every mode but stochastic, whose two outcomes are tested apart.
MODES = tuple(mode for mode in ROUNDING_MODES if mode != "stochastic")


def _floor_log2(value: Fraction) -> int:
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    return exponent if value >= Fraction(2) ** exponent else exponent - 1


def _grid(fmt: FloatFormat) -> list[Fraction]:
    """The non-negative finite values, then the next value of the unbounded grid past max."""
    values = sorted(
        {abs(fmt.to_fraction(c)) for c in range(1 << fmt.width) if fmt.to_exact(c).is_finite}
    )
    step = Fraction(2) ** (_floor_log2(fmt.max) - fmt.mantissa_bits)
    return [*values, fmt.max + step]


def _points(fmt: FloatFormat) -> list[Fraction]:
    grid = _grid(fmt)
    points = set(grid)
    for low, high in itertools.pairwise(grid):
        nudge = (high - low) / 2**WIDER_BITS
        for centre in (low, (low + high) / 2, high):
            points.update((centre - nudge, centre, centre + nudge))
    points.discard(Fraction(0))
    positive = sorted(p for p in points if p > 0)
    return positive + [-p for p in positive] if fmt.signed else positive


def _same(got: Any, wanted: Any) -> bool:
    return (got.kind, got.negative, got.magnitude) == (
        wanted.kind,
        wanted.negative,
        wanted.magnitude,
    ) or (got.is_nan and wanted.is_nan)


@pytest.mark.parametrize("spec", IEEE_STYLE_SPECS)
@pytest.mark.slow  # a sweep over every point of the format
def test_ieee_style_formats_against_mpfr(spec: str) -> None:
    fmt = get_format(spec)
    for x, rounding, policy in itertools.product(_points(fmt), MODES, OVERFLOW_POLICIES):
        got = fmt.round(x, rounding, policy).value
        wanted = _oracle(fmt, x, rounding, policy)
        assert _same(got, wanted), (spec, x, rounding, policy, got, wanted)


@pytest.mark.parametrize("spec", [s for s in IEEE_STYLE_SPECS if "fn:" not in s + ":"])
def test_overflow_threshold_is_mpfrs_own(spec: str) -> None:
    """Where max is MPFR's largest number at the format's emax (every format here but fn with
    a fraction bit, whose all-ones code is NaN), MPFR's own overflow says where nearest_even
    leaves max: at 1.5 * max for p = 1, inclusive (IEEE 754-2019 4.3.1), (2 - 2**-2) * 2**emax
    for p = 2."""
    fmt = get_format(spec)
    precision = fmt.mantissa_bits + 1
    emax = _floor_log2(fmt.max)
    assert fmt.max == (2 - Fraction(1, 2**fmt.mantissa_bits)) * Fraction(2) ** emax
    threshold = Fraction(2) ** emax * (2 - Fraction(1, 2**precision))
    nudge = fmt.max / 2**WIDER_BITS
    for x in (threshold - nudge, threshold, threshold + nudge):
        with gmpy2.context(precision=precision, emax=emax + 1, emin=-(1 << 20)):
            overflows = gmpy2.is_infinite(gmpy2.mpfr(gmpy2.mpq(x.numerator, x.denominator)))
        assert overflows == (x >= threshold)
        rounded = fmt.round(x, "nearest_even")
        assert rounded.overflow == overflows, (spec, x)
        if not overflows:
            assert rounded.value.magnitude == fmt.max, (spec, x)


# gfloat takes custom formats with subnormals and a zero (E8M0 is checked by ml_dtypes below).
GFLOAT_SPECS = [s for s in IEEE_STYLE_SPECS if not any(t in s for t in ("=off", "fnu", "e8m0"))]


@pytest.mark.parametrize("spec", GFLOAT_SPECS)
@pytest.mark.slow  # a sweep: every point, five modes, two policies
def test_ieee_style_formats_against_gfloat(spec: str) -> None:
    """gfloat agrees in every mode but one: at p = 1 its TiesToEven picks the even code (P3109's
    rule), where IEEE 754 and MPFR, and the engine, pick the larger magnitude."""
    fmt = get_format(spec)
    info = _gfloat_info(fmt)
    points = [float(x) for x in _points(fmt)]
    differ = 0
    for rounding, mode in GFLOAT_MODES.items():
        for policy, saturate in (("ieee", False), ("saturate", True)):
            if not saturate and not (fmt.has_inf or fmt.has_nan):
                continue  # gfloat raises: overflow with nowhere to go
            for x in points:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    expected = round_float(info, x, mode, saturate)
                got = fmt.to_float(fmt.from_value(x, rounding, policy))
                same = got == expected or (math.isnan(got) and math.isnan(expected))
                if fmt.mantissa_bits == 0 and rounding == "nearest_even":
                    differ += not same
                    continue
                assert same, (spec, x, rounding, policy, got, expected)
    if fmt.mantissa_bits == 0:
        assert differ > 0  # the documented difference is real: ties between 2**e, 2**(e+1)


@pytest.mark.parametrize("spec", ["e3m0:encoding=ieee", "e3m0:encoding=finite", "e4m0:encoding=fn"])
def test_p1_tie_above_max_overflows_in_ieee_style_formats(spec: str) -> None:
    """The reviewer's case, by hand: 1.5 * max is exactly halfway to 2 * max; nearest_even and
    nearest_away overflow (inf, NaN or max by the policy), the truncating modes keep max."""
    fmt = get_format(spec)
    tie = fmt.max * Fraction(3, 2)
    for rounding in ("nearest_even", "nearest_away"):
        rounded = fmt.round(tie, rounding)
        assert rounded.overflow
        expected = "inf" if fmt.has_inf else "nan" if fmt.has_nan else "finite"
        assert rounded.value.kind == expected
        assert fmt.round(tie, rounding, "saturate").value.magnitude == fmt.max
        below = fmt.round(tie - fmt.max / 2**WIDER_BITS, rounding)
        assert not below.overflow and below.value.magnitude == fmt.max
    for rounding in ("toward_zero", "round_to_odd"):
        assert fmt.round(tie, rounding).value.magnitude == fmt.max


def _p3109_info(k: int, p: int, signed: bool, extended: bool) -> Any:
    return format_info_p3109(
        k,
        p,
        Signedness.Signed if signed else Signedness.Unsigned,
        Domain.Extended if extended else Domain.Finite,
    )


@pytest.mark.parametrize("parameters", P3109_FORMATS, ids=lambda t: "k{}p{}{}{}".format(*t))
@pytest.mark.slow  # a sweep over every point of the format
def test_p3109_formats_against_gfloat(parameters: tuple[int, int, bool, bool]) -> None:
    """Every mode with SatFinite and OvfInf, and stochastic rounding over every draw."""
    k, p, signed, extended = parameters
    fmt = p3109_format(k, p, signed=signed, extended=extended)
    info = _p3109_info(k, p, signed, extended)
    points = [float(x) for x in _points(fmt)]
    for rounding, mode in GFLOAT_MODES.items():
        for policy, saturate in (("ieee", False), ("saturate", True)):
            for x in points:
                expected = round_float(info, x, mode, saturate)
                got = fmt.to_float(fmt.from_value(x, rounding, policy))
                same = got == expected or (math.isnan(got) and math.isnan(expected))
                assert same, (fmt.name, x, rounding, policy, got, expected)
    for policy, saturate in (("ieee", False), ("saturate", True)):
        for x in points:
            for draw in range(1 << RANDOM_BITS):
                expected = round_float(
                    info, x, RoundMode.Stochastic, saturate, srbits=draw, srnumbits=RANDOM_BITS
                )
                code = fmt.from_value(
                    x, "stochastic", policy, random_bits=RANDOM_BITS, random_draw=draw
                )
                got = fmt.to_float(code)
                same = got == expected or (math.isnan(got) and math.isnan(expected))
                assert same, (fmt.name, x, draw, policy, got, expected)


@pytest.mark.parametrize("spec", IEEE_STYLE_SPECS)
@pytest.mark.slow  # a sweep over every point of the format
def test_stochastic_outcomes_and_their_counts(spec: str) -> None:
    """Over all 2**N draws, stochastic rounding gives only the two directed results (each
    checked against MPFR above), the one away from zero for exactly d of them, d the fraction
    of the gap rounded to N bits ties to even; past max that one is the policy's overflow."""
    fmt = get_format(spec)
    grid = _grid(fmt)
    for x in _points(fmt):
        magnitude = abs(x)
        if magnitude in grid or magnitude > grid[-1] or magnitude < grid[0]:
            continue  # exact, or with one neighbour only (past 2 * max; below E8M0's least)
        high = next(v for v in grid if v > magnitude)
        low = max(v for v in grid if v < magnitude)
        share = (magnitude - low) / (high - low) * 2**RANDOM_BITS
        whole, rest = divmod(share, 1)
        count = int(whole) + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2))
        away = "toward_positive" if x > 0 else "toward_negative"
        for policy in OVERFLOW_POLICIES:
            down = fmt.from_value(x, "toward_zero", policy)
            up = fmt.from_value(x, away, policy)  # past max: the overflow the policy gives
            outcomes = [
                fmt.from_value(x, "stochastic", policy, random_bits=RANDOM_BITS, random_draw=r)
                for r in range(1 << RANDOM_BITS)
            ]
            assert set(outcomes) <= {down, up}, (spec, x, policy)
            assert sum(o == up for o in outcomes) == (count if up != down else 1 << RANDOM_BITS)


@pytest.mark.parametrize("spec", ["float8_e8m0fnu", "float4_e2m1fn"])
def test_ml_dtypes_formats_at_every_tie(spec: str) -> None:
    """The two p <= 2 formats ml_dtypes has, in its default rounding and overflow."""
    fmt = get_format(spec)
    # ml_dtypes before 0.7 rounds E8M0 through float32, whose subnormals (below 2**-126) it
    # rounds up (test_exhaustive pins that); every tie of E8M0 lies above.
    points = np.array([float(x) for x in _points(fmt) if abs(x) >= Fraction(1, 2**126)])
    with np.errstate(over="ignore", invalid="ignore"):
        oracle = points.astype(getattr(ml_dtypes, spec)).view(np.uint8)
    ours = [fmt.from_value(float(x)) for x in points]
    assert [int(c) for c in oracle] == ours
    assert [int(c) for c in fmt.from_float_array(points)] == ours


@pytest.mark.parametrize("parameters", P3109_FORMATS, ids=lambda t: "k{}p{}{}{}".format(*t))
def test_p3109_round_to_odd_and_ties_follow_the_formal_specification(
    parameters: tuple[int, int, bool, bool],
) -> None:
    """gfloat has no round-to-odd; the P3109 working group's formal specification (Imandra's
    ieee-p3109, RoundToPrecision) does, with the same code parity as its ties: codeIsEven is
    the significand's evenness for P > 1, and for P = 1 "floor(s) = 0 or q + bias even" (the
    exponent field's). Transcribed here for values that stay within max."""
    k, p, signed, extended = parameters
    fmt = p3109_format(k, p, signed=signed, extended=extended)
    for x in _points(fmt):
        magnitude = abs(x)
        q = max(_floor_log2(magnitude), 1 - fmt.bias) - p + 1
        s = magnitude / Fraction(2) ** q
        floor, nu = divmod(s, 1)
        code_is_even = floor % 2 == 0 if p > 1 else floor == 0 or (q + fmt.bias) % 2 == 0
        for rounding, away in (
            ("round_to_odd", nu > 0 and code_is_even),
            ("nearest_even", nu > Fraction(1, 2) or (nu == Fraction(1, 2) and not code_is_even)),
        ):
            wanted = (floor + away) * Fraction(2) ** q
            if wanted > fmt.max:
                continue  # saturation, checked against gfloat above
            got = fmt.round(x, rounding, "saturate").value
            assert (got.magnitude, got.negative) == (wanted, x < 0 and wanted != 0), (
                fmt.name,
                x,
                rounding,
            )
