"""Hypothesis properties of rounding and stepping, over named and custom formats."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fpexplorer.formats import ExactValue, FloatFormat, get_format, list_formats, parse_value

FORMATS = [
    *list_formats(),
    *(
        get_format(s)
        for s in (
            "e6m9",
            "e4m3:subnormals=off",
            "e3m2:encoding=fnuz",
            "e5m0",
            "e5m3:bias=3",
            "e3m3:encoding=fnu",
            "e5m2:unsigned",
        )
    ),
]
DIRECTED = ("toward_zero", "toward_positive", "toward_negative")
NEAREST = ("nearest_even", "nearest_away")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

formats = st.sampled_from(FORMATS)


@st.composite
def format_and_value(draw: st.DrawFn) -> tuple[FloatFormat, Fraction]:
    """A format and an exact value in (or a little beyond) its range, of either sign."""
    fmt = draw(formats)
    top = fmt.max.numerator.bit_length() - fmt.max.denominator.bit_length() + 2
    smallest = fmt.min_subnormal or fmt.min_normal
    bottom = smallest.numerator.bit_length() - smallest.denominator.bit_length() - 2
    exponent = draw(st.integers(bottom, top))
    significand = draw(st.fractions(min_value=1, max_value=2, max_denominator=2**70))
    value = significand * Fraction(2) ** exponent
    if fmt.signed and draw(st.booleans()):
        value = -value
    return fmt, value


def _value(fmt: FloatFormat, code: int) -> Fraction | None:
    exact = fmt.to_exact(code)
    if exact.is_inf:
        return Fraction(10) ** 5000 * (-1 if exact.negative else 1)  # stands for ±inf
    return exact.fraction if exact.is_finite else None


@pytest.mark.slow  # a property test over many pairs: a third of a second
@SETTINGS
@given(format_and_value(), format_and_value(), st.sampled_from(NEAREST + DIRECTED))
def test_rounding_is_monotone(
    a: tuple[FloatFormat, Fraction], b: tuple[FloatFormat, Fraction], rounding: str
) -> None:
    fmt, x = a
    y = b[1]
    assume(fmt.signed or y >= 0)
    low, high = sorted((x, y))
    v_low = _value(fmt, fmt.from_value(low, rounding, "saturate"))
    v_high = _value(fmt, fmt.from_value(high, rounding, "saturate"))
    assert v_low is not None and v_high is not None
    assert v_low <= v_high


@pytest.mark.slow  # a property test over many values: about half a second
@SETTINGS
@given(format_and_value())
def test_directed_modes_bracket_and_nearest_is_nearest(pair: tuple[FloatFormat, Fraction]) -> None:
    fmt, x = pair
    assume(abs(x) <= fmt.max)
    smallest = fmt.to_fraction(fmt.next_up(0)) if fmt.encoding != "fnu" else fmt.min_normal
    assume(fmt.encoding != "fnu" or x >= smallest)  # nothing below 2**-127 in E8M0
    down = fmt.to_fraction(fmt.from_value(x, "toward_negative"))
    up = fmt.to_fraction(fmt.from_value(x, "toward_positive"))
    zero = fmt.to_fraction(fmt.from_value(x, "toward_zero"))
    assert down <= x <= up
    assert zero == (down if x >= 0 else up)
    if down != up:  # neighbours: nothing representable strictly between
        code_down = fmt.from_value(x, "toward_negative")
        assert fmt.to_fraction(fmt.next_up(code_down)) == up
    for rounding in NEAREST:
        nearest = fmt.to_fraction(fmt.from_value(x, rounding))
        assert nearest in (down, up)
        assert abs(nearest - x) <= min(abs(down - x), abs(up - x))


@SETTINGS
@given(formats, st.integers(min_value=0))
def test_every_finite_code_round_trips(fmt: FloatFormat, seed: int) -> None:
    code = seed % (1 << fmt.width)
    exact = fmt.to_exact(code)
    assume(not exact.is_nan)
    back = fmt.from_value(exact)
    if exact.is_zero:
        assert fmt.to_exact(back).is_zero
    else:
        assert back == code
    for rounding in ("nearest_even", "toward_zero", "stochastic"):
        assert fmt.round(exact, rounding).inexact is False


@SETTINGS
@given(formats, st.integers(min_value=0))
def test_next_up_and_next_down_are_inverse(fmt: FloatFormat, seed: int) -> None:
    code = seed % (1 << fmt.width)
    kind = fmt.classify(code)
    assume(kind not in ("nan", "zero"))
    up = fmt.next_up(code)
    if up != code and fmt.classify(up) != "zero":
        assert fmt.next_down(up) == code
        gap = fmt.gap_up(code)
        if gap is not None:
            assert gap == fmt.to_fraction(up) - fmt.to_fraction(code)
            assert gap == fmt.gap_down(up)
    down = fmt.next_down(code)
    if down != code and fmt.classify(down) != "zero":
        assert fmt.next_up(down) == code


@pytest.mark.slow  # hundreds of draws per example: a second
@SETTINGS
@given(format_and_value(), st.integers(0, 2**32))
def test_stochastic_rounding_is_unbiased(pair: tuple[FloatFormat, Fraction], seed: int) -> None:
    fmt, x = pair
    assume(abs(x) < fmt.max and (fmt.encoding != "fnu" or x > fmt.min_normal))
    down = fmt.to_fraction(fmt.from_value(x, "toward_negative"))
    up = fmt.to_fraction(fmt.from_value(x, "toward_positive"))
    assume(up != down)
    p_up = (x - down) / (up - down)
    # Scalar path: a few hundred seeds.
    draws = 300
    ups = sum(
        fmt.to_fraction(fmt.from_value(x, "stochastic", seed=seed + i)) == up for i in range(draws)
    )
    sigma = float(p_up * (1 - p_up) / draws) ** 0.5
    assert abs(ups / draws - float(p_up)) <= 5 * sigma + 1e-9
    # Array path (float64 inputs only): many draws, mean within 5 sigma of x.
    if Fraction(float(x)) == x:
        n = 20000
        codes = fmt.from_float_array(np.full(n, float(x)), "stochastic", seed=seed)
        values = fmt.to_float_array(codes)
        assert set(values) <= {float(down), float(up)}
        p = float((Fraction(float(x)) - down) / (up - down))
        sigma_mean = float(up - down) * (p * (1 - p) / n) ** 0.5
        assert abs(values.mean() - float(x)) <= 5 * sigma_mean + abs(float(x)) * 1e-12


@settings(max_examples=400, deadline=None)
@given(st.text(), st.sampled_from([None, get_format("fp16"), get_format("e8m0")]))
def test_parse_value_raises_only_value_error(text: str, fmt: FloatFormat | None) -> None:
    try:
        value = parse_value(text, fmt)
    except ValueError as error:
        assert str(error)
    else:
        assert isinstance(value, ExactValue)


NUMBERISH = st.text(alphabet="0123456789+-.eExXpP/_ abcdfinmaxt", max_size=30)


@settings(max_examples=400, deadline=None)
@given(NUMBERISH)
def test_parse_value_on_numberish_text(text: str) -> None:
    try:
        value = parse_value(text, get_format("bf16"))
    except ValueError as error:
        assert str(error)
    else:
        assert isinstance(value, ExactValue)
        # Whatever parses also rounds without error.
        get_format("bf16").round(value)


@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_parse_value_reads_python_float_reprs_exactly(x: float) -> None:
    assert parse_value(repr(x)).to_float() == x
    assert parse_value(x.hex()).fraction == Fraction(x)
