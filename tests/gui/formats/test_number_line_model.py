"""The number line's picture, without Qt: one stated unit, every mode, where overflow goes."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fpexplorer.formats import ROUNDING_MODES, get_format, parse_value
from fpexplorer.gui.formats.number_line_model import (
    OFF_SCALE_MARGIN,
    is_random,
    number_line_picture,
    stochastic_outcomes,
)


def picture_of(name: str, text: str, overflow: str | None = None):  # type: ignore[no-untyped-def]
    fmt = get_format(name)
    typed = parse_value(text, fmt)
    rounded = fmt.round(typed, "nearest_even", overflow)
    return fmt, rounded, number_line_picture(fmt, rounded.code, typed, overflow)


@pytest.mark.parametrize(
    ("name", "text", "unit"),
    [
        # Was: the read-out said 0.5 ulp and the line put 2049 at +1 (counted in the gap
        # below 2048, which is half an ulp of 2048).
        ("fp16", "2049", Fraction(2)),
        # Was: read-out ulp 0.125, axis unit 0.0625.
        ("float8_e8m0fnu", "0.1", Fraction(1, 8)),
        ("fp32", "0.1", Fraction(1, 2**27)),
        ("e8m23:subnormals=off", "1e-39", get_format("e8m23:subnormals=off").min_normal),
    ],
)
def test_the_unit_is_the_read_outs_ulp_and_is_stated(name: str, text: str, unit: Fraction) -> None:
    fmt, rounded, picture = picture_of(name, text)
    assert picture.unit == unit == fmt.ulp(rounded.code)
    assert f"1 ulp = {picture.axis_label.split('1 ulp = ')[1].split(',')[0]}" in picture.axis_label
    assert rounded.error_ulps is not None
    # The typed value sits exactly as many units away as the read-out's error says.
    assert abs(picture.input_x or 0) == pytest.approx(float(rounded.error_ulps))
    assert 0.0 in picture.xs


def test_fp16_2049_is_half_an_ulp_from_2048() -> None:
    _, _, picture = picture_of("fp16", "2049")
    assert picture.input_x == 0.5
    assert "1 ulp = 2" in picture.axis_label
    assert "distance from 2048" in picture.axis_label


def test_an_overflowing_value_sits_where_it_is_and_modes_say_where_they_go() -> None:
    _, rounded, picture = picture_of("float8_e4m3fn", "500")
    # 500 is (500 - 448) / 32 = 1.625 ulps past max: drawn there (was 1.5, clamped).
    assert picture.input_x == 1.625 and not picture.off_scale
    assert rounded.value.is_nan
    rows = {row.mode: row for row in picture.rows}
    assert tuple(rows) == ROUNDING_MODES  # every mode the engine has gets its row
    (nearest,) = rows["nearest_even"].picks
    assert nearest.text == "→ NaN" and nearest.x > picture.input_x
    (toward_zero,) = rows["toward_zero"].picks
    assert (toward_zero.x, toward_zero.text) == (0.0, "")  # max, where max is drawn
    assert picture.right > nearest.x
    # Saturation sends everything to max, drawn at its place.
    _, _, saturated = picture_of("float8_e4m3fn", "500", "saturate")
    assert all(pick.x == 0.0 for row in saturated.rows for pick in row.picks)
    # IEEE formats overflow to infinity, on the value's side.
    _, _, fp16 = picture_of("fp16", "-70000")
    (down,) = {row.mode: row for row in fp16.rows}["nearest_even"].picks
    assert down.text == "→ −inf" and down.x < (fp16.input_x or 0)


def test_a_value_far_off_is_marked_off_scale() -> None:
    _, _, picture = picture_of("fp16", "1e10")
    assert picture.off_scale and picture.input_x == max(picture.xs) + OFF_SCALE_MARGIN
    assert "off scale" in picture.input_label


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("fp16", "0.1"),
        ("fp16", "2049"),
        ("fp16", "-1e-9"),
        ("fp16", "65519"),  # up to inf with probability 15/32
        ("float8_e4m3fn", "460"),  # up to NaN
        ("e8m23:subnormals=off", "1e-39"),  # between 0 and min_normal only
        ("float8_e8m0fnu", "0.1"),
        ("fp4", "5.5"),
    ],
)
def test_stochastic_outcomes_are_what_the_engine_draws(name: str, text: str) -> None:
    fmt = get_format(name)
    value = parse_value(text, fmt)
    outcomes = dict(stochastic_outcomes(fmt, value, None))
    assert sum(outcomes.values()) == 1
    assert all(0 < p <= 1 for p in outcomes.values())
    drawn = [fmt.round(value, "stochastic", seed=seed).code for seed in range(300)]
    assert set(drawn) <= set(outcomes)
    for code, probability in outcomes.items():
        share = drawn.count(code) / len(drawn)
        assert abs(share - float(probability)) < 0.1, (code, share, probability)


@pytest.mark.parametrize(("name", "text"), [("fp16", "0.1"), ("fp16", "-2049.5"), ("fp4", "5.5")])
def test_stochastic_probabilities_are_exactly_the_engines(name: str, text: str) -> None:
    from fpexplorer.formats.format import DEFAULT_RANDOM_BITS

    fmt = get_format(name)
    value = parse_value(text, fmt)
    (down, p_down), (up, p_up) = stochastic_outcomes(fmt, value, None)
    draws = 1 << DEFAULT_RANDOM_BITS
    ups = p_up * draws
    assert ups.denominator == 1 and p_down + p_up == 1
    # Replayed draws: exactly the top `ups` of the 2**64 draws go up.
    boundary = draws - int(ups)
    assert fmt.round(value, "stochastic", random_draw=boundary).code == up
    assert fmt.round(value, "stochastic", random_draw=boundary - 1).code == down
    assert fmt.round(value, "stochastic", random_draw=0).code == down
    assert fmt.round(value, "stochastic", random_draw=draws - 1).code == up


def test_the_stochastic_row_shows_both_outcomes_with_probabilities() -> None:
    _, _, picture = picture_of("fp16", "2049")
    (row,) = [row for row in picture.rows if is_random(row.mode)]
    assert sorted(pick.x for pick in row.picks) == [0.0, 1.0]
    assert sorted(pick.text for pick in row.picks) == ["p = 0.5", "p = 0.5"]
    # An exact value has one outcome, certain.
    _, _, exact = picture_of("fp16", "2048")
    (row,) = [row for row in exact.rows if is_random(row.mode)]
    assert [pick.text for pick in row.picks] == ["p = 1"]


def test_labels_of_neighbours_that_differ_read_differently() -> None:
    _, _, picture = picture_of("fp64", "0.1")
    assert len(set(picture.labels)) == len(picture.labels) == 7


def test_nothing_to_draw_is_said() -> None:
    fmt = get_format("fp16")
    picture = number_line_picture(fmt, 0x7E00, parse_value("nan"), None)
    assert picture.message == "nan has no place on the number line"
