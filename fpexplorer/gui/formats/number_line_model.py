"""What the number line shows, computed without Qt (tested without a window).

The x axis counts ulps of the value shown (the rounded value, or max when the typed value
overflowed): the same unit as the read-outs' "ulp" and the rounding error "in ulp", and it
is stated on the axis. Positions are computed exactly and only then turned into floats, so
FP64 neighbours 2^-52 apart plot as clearly as FP4 ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise

from fpexplorer.formats import ROUNDING_MODES, ExactValue, FloatFormat
from fpexplorer.formats.decimal import display_decimal, display_decimals
from fpexplorer.formats.format import DEFAULT_RANDOM_BITS, stochastic_threshold
from fpexplorer.gui.formats.state import STOCHASTIC_SEED
from fpexplorer.gui.formats.text import typed as typed_text

FINITE = ("zero", "subnormal", "normal")
NEIGHBOURS_EACH_SIDE = 3
# A typed value further than this (in units) beyond the outermost neighbour is drawn at that
# distance and marked off scale: 1e10 typed into FP16 would otherwise squash the neighbours
# into one dot, and 1e99999 into a 16-exponent-bit format does not even fit a float. Wide
# enough that a value just past max (E4M3FN 500: 1.625 units past 448) sits where it is.
OFF_SCALE_MARGIN = 3
MIN_SEPARATION = Fraction(1, 3)  # units: closer neighbours are not drawn (they would overlap)
MAX_STEP = 8  # units: neither are neighbours this far beyond the previous one
LANDING_GAP = 0.8  # units between the last drawn thing and where non-finite results land


def is_random(mode: str) -> bool:
    """Modes that draw a random number (stochastic rounding): shown with probabilities."""
    return mode.startswith("stochastic")


def mode_rows() -> tuple[str, ...]:
    """Every rounding mode the engine has, one row each (the engine's order)."""
    return tuple(ROUNDING_MODES)


@dataclass(frozen=True, slots=True)
class Pick:
    """Where a rounding mode sends the typed value: an x, and words when x is not the
    place of a finite value ("NaN", "inf") or a probability ("p = 0.375")."""

    code: int
    x: float
    text: str


@dataclass(frozen=True, slots=True)
class ModeRow:
    mode: str
    picks: tuple[Pick, ...]  # one; two (or one, when exact) for stochastic rounding


@dataclass(frozen=True, slots=True)
class NumberLinePicture:
    format_name: str
    message: str | None  # when there is nothing to draw (NaN, inf typed, no finite value)
    unit: Fraction  # one unit of x: the ulp of the value shown
    axis_label: str
    codes: tuple[int, ...]
    xs: tuple[float, ...]
    labels: tuple[str, ...]
    midpoint_xs: tuple[float, ...]
    result_x: float | None  # the rounded value; None when it is not finite
    input_x: float | None
    input_label: str
    off_scale: bool
    rows: tuple[ModeRow, ...]
    left: float
    right: float


def _floor_log2(value: Fraction) -> int:
    guess = value.numerator.bit_length() - value.denominator.bit_length()
    return guess if Fraction(2) ** guess <= value else guess - 1


def stochastic_outcomes(
    fmt: FloatFormat, value: ExactValue, overflow: str | None
) -> tuple[tuple[int, Fraction], ...]:
    """The codes stochastic rounding can give `value`, each with its exact probability.

    The value lies `rest / quantum` of the way from the grid point below its magnitude to
    the one above (IEEE-style: the grid continues past max, and a point past max overflows
    by the policy). The engine rounds that fraction to its random bits (d / 2**N, ties to
    even) and goes up for exactly d of the 2**N draws: that is the probability shown, not
    the fraction itself (0.1 into FP16 goes up
    with 7378697629483820646 / 2**64, a hair under 0.4). Without
    subnormals the grid below min_normal is just 0 and min_normal.
    """
    # Codes only (from_value), never `round`: its errors divide numbers of 330,000 bits for
    # 1e99999 typed into e16m47 (50 ms a division), and nothing here shows them.
    single = ((fmt.from_value(value, "stochastic", overflow, seed=STOCHASTIC_SEED), Fraction(1)),)
    if not value.is_finite or value.is_zero or (value.negative and not fmt.signed):
        return single
    magnitude = value.magnitude
    emin = _floor_log2(fmt.min_normal)
    exponent = _floor_log2(magnitude)
    if exponent < emin and not fmt.subnormals:
        if fmt.round(ExactValue.of(0)).invalid:
            return single  # no zero (E8M0): the smallest value is the only choice
        quantum = fmt.min_normal
    else:
        quantum = Fraction(2) ** (max(exponent, emin) - fmt.mantissa_bits)
    steps = magnitude // quantum
    low = steps * quantum
    above_low = magnitude - low
    if above_low == 0:
        return single
    # rest = above_low / quantum as a ratio of integers, not reduced: reducing it is a gcd of
    # two numbers of 330,000 bits for 1e99999 (most of the half second it took to show).
    draws = 1 << DEFAULT_RANDOM_BITS
    rest_numerator = above_low.numerator * quantum.denominator
    rest_denominator = above_low.denominator * quantum.numerator
    up = Fraction(
        stochastic_threshold(rest_numerator, rest_denominator, DEFAULT_RANDOM_BITS), draws
    )
    outcomes: dict[int, Fraction] = {}
    for point, probability in ((low, 1 - up), (low + quantum, up)):
        if probability == 0:
            continue
        code = fmt.from_value(ExactValue("finite", value.negative, point), "nearest_even", overflow)
        outcomes[code] = outcomes.get(code, Fraction(0)) + probability
    return tuple(outcomes.items())


def _anchor_for(fmt: FloatFormat, typed: ExactValue) -> Fraction:
    """Where to look when the typed value has no finite code: the end of the range it fell
    off (overflow), or the smallest value when the format cannot hold it at all (a negative
    value or zero in an unsigned format such as E8M0)."""
    if (typed.negative and not fmt.signed) or typed.is_zero:
        return fmt.min_subnormal or fmt.min_normal
    return -fmt.max if typed.negative else fmt.max


def _neighbour_codes(fmt: FloatFormat, code: int) -> list[int]:
    below: list[int] = []
    current = code
    for _ in range(NEIGHBOURS_EACH_SIDE):
        step = fmt.next_down(current)
        if step == current or fmt.classify(step) not in FINITE:
            break
        below.append(step)
        current = step
    above: list[int] = []
    current = code
    for _ in range(NEIGHBOURS_EACH_SIDE):
        step = fmt.next_up(current)
        if step == current or fmt.classify(step) not in FINITE:
            break
        above.append(step)
        current = step
    return [*reversed(below), code, *above]


def _apart(
    codes: list[int], values: list[Fraction], anchor: int, unit: Fraction
) -> tuple[list[int], list[Fraction]]:
    """The neighbours out to the first one that would sit on top of the previous one (less
    than MIN_SEPARATION units on) or far off (more than MAX_STEP units: zero, seen from a
    flushed min_normal). Cut, not thinned, so adjacent points stay adjacent codes."""

    def fits(step: Fraction) -> bool:
        return MIN_SEPARATION <= step / unit <= MAX_STEP

    low, high = anchor, anchor
    while low > 0 and fits(values[low] - values[low - 1]):
        low -= 1
    while high < len(values) - 1 and fits(values[high + 1] - values[high]):
        high += 1
    return codes[low : high + 1], values[low : high + 1]


def _message(fmt: FloatFormat, text: str) -> NumberLinePicture:
    return NumberLinePicture(
        format_name=fmt.name,
        message=text,
        unit=Fraction(1),
        axis_label="",
        codes=(),
        xs=(),
        labels=(),
        midpoint_xs=(),
        result_x=None,
        input_x=None,
        input_label="",
        off_scale=False,
        rows=(),
        left=-1.0,
        right=1.0,
    )


def _landing_text(value: ExactValue) -> str:
    if value.is_nan:
        return "→ NaN"
    if value.is_inf:
        return "→ −inf" if value.negative else "→ +inf"
    return ""


def number_line_picture(
    fmt: FloatFormat,
    code: int,
    typed: ExactValue | None,
    overflow: str | None,
) -> NumberLinePicture:
    """The picture for an editor showing `code`, after `typed` (or None) was rounded."""
    kind = fmt.classify(code)
    anchor_code = code
    if kind not in FINITE:
        if typed is None or not typed.is_finite:
            shown = display_decimal(fmt.to_exact(code))
            return _message(fmt, f"{shown} has no place on the number line")
        anchor_code = fmt.from_value(_anchor_for(fmt, typed))
        if fmt.classify(anchor_code) not in FINITE:
            return _message(fmt, f"{fmt.name} has no finite values to show")
    center = fmt.to_fraction(anchor_code)
    unit = fmt.ulp(anchor_code) or Fraction(1)
    codes = _neighbour_codes(fmt, anchor_code)
    values = [fmt.to_fraction(c) for c in codes]
    codes, values = _apart(codes, values, codes.index(anchor_code), unit)

    def x_of(value: Fraction) -> float:
        return float((value - center) / unit)

    xs = [x_of(v) for v in values]
    labels = [text or "" for text in display_decimals(values)]
    midpoint_xs = [x_of((a + b) / 2) for a, b in pairwise(values)]
    left, right = min(xs) - 0.6, max(xs) + 0.6
    low_reach, high_reach = min(xs) - OFF_SCALE_MARGIN, max(xs) + OFF_SCALE_MARGIN

    high_edge = center + Fraction(high_reach) * unit
    low_edge = center + Fraction(low_reach) * unit

    def clamped_x(value: Fraction) -> tuple[float, bool]:
        # Compared before dividing: (1e99999 - center) / unit reduces numbers of 330,000 bits.
        if value > high_edge:
            return high_reach, True
        if value < low_edge:
            return low_reach, True
        # As a ratio of integers, not reduced: 1e-99999's reduction is a gcd of two numbers
        # of 330,000 bits; int / int rounds correctly, as float(Fraction) does.
        offset = value - center
        return offset.numerator * unit.denominator / (offset.denominator * unit.numerator), False

    axis_label = (
        f"distance from {display_decimal(center)}, in ulps of it "
        f"(1 ulp = {display_decimal(unit)}, the unit of the read-outs)"
    )
    result_x = x_of(center) if kind in FINITE else None
    if typed is None or not typed.is_finite:
        return NumberLinePicture(
            format_name=fmt.name,
            message=None,
            unit=unit,
            axis_label=axis_label,
            codes=tuple(codes),
            xs=tuple(xs),
            labels=tuple(labels),
            midpoint_xs=tuple(midpoint_xs),
            result_x=result_x,
            input_x=None,
            input_label="",
            off_scale=False,
            rows=(),
            left=left,
            right=right,
        )
    input_x, off_scale = clamped_x(typed.fraction)
    left, right = min(left, input_x - 0.3), max(right, input_x + 0.3)
    # Non-finite results land past everything drawn, on the side the value went off.
    landing_right = right + LANDING_GAP
    landing_left = left - LANDING_GAP

    def pick(code_picked: int, extra: str = "") -> Pick:
        value = fmt.to_exact(code_picked)
        if value.is_finite:
            x, _ = clamped_x(value.fraction)
            return Pick(code_picked, x, extra)
        words = _landing_text(value)
        text = f"{words} {extra}".strip() if extra else words
        side_right = not typed.negative if value.is_nan else not value.negative
        return Pick(code_picked, landing_right if side_right else landing_left, text)

    rows: list[ModeRow] = []
    landed_outside = False
    for mode in mode_rows():
        if is_random(mode):
            outcomes = stochastic_outcomes(fmt, typed, overflow)
            picks = tuple(pick(c, f"p = {display_decimal(p)}") for c, p in outcomes)
        else:
            picks = (pick(fmt.from_value(typed, mode, overflow, seed=STOCHASTIC_SEED)),)
        landed_outside |= any(not fmt.to_exact(p.code).is_finite for p in picks)
        rows.append(ModeRow(mode, picks))
    if landed_outside:
        left, right = min(left, landing_left - 0.4), max(right, landing_right + 0.4)
    where = " (far right, off scale)" if input_x > 0 else " (far left, off scale)"
    return NumberLinePicture(
        format_name=fmt.name,
        message=None,
        unit=unit,
        axis_label=axis_label,
        codes=tuple(codes),
        xs=tuple(xs),
        labels=tuple(labels),
        midpoint_xs=tuple(midpoint_xs),
        result_x=result_x,
        input_x=input_x,
        input_label=f" typed {typed_text(typed)}{where if off_scale else ''}",
        off_scale=off_scale,
        rows=tuple(rows),
        left=left,
        right=right,
    )
