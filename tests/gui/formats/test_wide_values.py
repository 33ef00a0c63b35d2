"""Values of 330,000 bits (1e99999, -1e-99999) in a wide custom format (e16m47): what is
shown is what plain Fraction arithmetic gives. Typing them froze the window 0.4-0.8 s (a
gcd of two such numbers per division, dozens per keystroke); the shortcuts that removed
that (codes without errors, comparisons before divisions, ratios left unreduced, powers
of two cancelled by shifts) must not change a digit. Speed: benchmarks/bench_wide_entry.py.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fpexplorer.formats import ROUNDING_MODES, get_format, leading_digits, parse_value
from fpexplorer.formats.format import DEFAULT_RANDOM_BITS, _times_power_of_two
from fpexplorer.gui.formats.number_line_model import (
    OFF_SCALE_MARGIN,
    is_random,
    number_line_picture,
    stochastic_outcomes,
)

WIDE_VALUES = ["1e99999", "-1e99999", "1e-99999", "-1e-99999", "3e-9870", "1e9000", "1.5"]


@pytest.mark.slow  # 100,000-digit fractions: a third of a second to 0.8 s each
@pytest.mark.parametrize("overflow", [None, "saturate"])
@pytest.mark.parametrize("text", WIDE_VALUES)
def test_the_errors_are_plain_fraction_arithmetic(text: str, overflow: str | None) -> None:
    fmt = get_format("e16m47")
    typed = parse_value(text)
    for mode in ROUNDING_MODES:
        rounded = fmt.round(typed, mode, overflow, seed=1)
        if not rounded.value.is_finite:
            assert rounded.error_abs is rounded.error_ulps is None
            continue
        error = abs(rounded.value.fraction - typed.fraction)
        ulp = fmt.ulp(rounded.code)
        assert ulp is not None
        assert rounded.error_abs == error
        assert rounded.error_rel == error / typed.magnitude
        assert rounded.error_ulps == error / ulp


@given(
    st.fractions(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-300, max_value=300),
)
def test_times_power_of_two_is_exact(value: Fraction, exponent: int) -> None:
    result = _times_power_of_two(value, exponent)
    assert result == value * Fraction(2) ** exponent
    # A Fraction built already reduced: the same numerator and denominator as Python's.
    expected = value * Fraction(2) ** exponent
    assert (result.numerator, result.denominator) == (expected.numerator, expected.denominator)


@pytest.mark.parametrize("overflow", [None, "saturate"])
@pytest.mark.parametrize("text", WIDE_VALUES)
def test_the_number_line_places_a_huge_value_as_exact_arithmetic_does(
    text: str, overflow: str | None
) -> None:
    fmt = get_format("e16m47")
    typed = parse_value(text)
    code = fmt.from_value(typed, "nearest_even", overflow)
    picture = number_line_picture(fmt, code, typed, overflow)
    assert picture.message is None
    center = fmt.to_exact(picture.codes[picture.xs.index(0.0)]).fraction
    offset = (typed.fraction - center) / picture.unit
    high, low = max(picture.xs) + OFF_SCALE_MARGIN, min(picture.xs) - OFF_SCALE_MARGIN
    expected = high if offset > high else low if offset < low else float(offset)
    assert picture.input_x == expected
    assert picture.off_scale == (not low <= offset <= high)
    for row in picture.rows:
        if is_random(row.mode):
            continue
        (pick,) = row.picks
        assert pick.code == fmt.round(typed, row.mode, overflow).code


@pytest.mark.parametrize("text", WIDE_VALUES)
def test_stochastic_probabilities_of_huge_values_are_exactly_the_engines(text: str) -> None:
    fmt = get_format("e16m47")
    value = parse_value(text)
    outcomes = stochastic_outcomes(fmt, value, None)
    assert sum(p for _, p in outcomes) == 1
    draws = 1 << DEFAULT_RANDOM_BITS
    if len(outcomes) == 1:
        ((code, _),) = outcomes
        for draw in (0, draws // 2, draws - 1):
            assert fmt.round(value, "stochastic", random_draw=draw).code == code
        return
    (down, _), (up, p_up) = outcomes
    ups = p_up * draws
    assert ups.denominator == 1
    # Replayed draws: exactly the top `ups` of the 2**64 draws go up.
    boundary = draws - int(ups)
    assert fmt.round(value, "stochastic", random_draw=boundary).code == up
    assert fmt.round(value, "stochastic", random_draw=boundary - 1).code == down


def test_leading_digits_of_huge_values_repeat_exactly() -> None:
    for _ in range(2):  # the second time from the cache
        assert leading_digits(Fraction(10**99999), 17) == ("1", 99999, True)
        assert leading_digits(Fraction(-1, 10**99999), 17) == ("1", -99999, True)
        assert leading_digits(Fraction(10**99999 - 1), 3) == ("999", 99998, False)
