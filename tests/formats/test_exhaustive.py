"""Every code of every format of 16 bits or fewer against numpy / ml_dtypes.

Decoding of every code; encoding of every code's value, of every midpoint between
neighbours and of each midpoint one step either side (a float32 step and a float64 step).
The scalar path (exact Fractions) and the array path are both checked.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from fpexplorer.formats import CLASSES, FloatFormat, get_format

from .oracles import (
    ORACLE_SMALL_FORMATS,
    SMALL_FORMATS,
    midpoints,
    oracle_decode,
    oracle_encode,
)

IDS = [f.name for f in ORACLE_SMALL_FORMATS]
# Decoding and encoding all 65536 codes of a 16-bit format take about half a second each:
# those cases are `slow` (CI runs them); the fast loop still sweeps every smaller format.
SWEEPS = [
    pytest.param(f, id=f.name, marks=[pytest.mark.slow] if f.width > 8 else [])
    for f in ORACLE_SMALL_FORMATS
]


def _scalar_codes(fmt: FloatFormat, values: np.ndarray[Any, Any], rounding: str) -> np.ndarray:
    return np.array([fmt.from_value(float(v), rounding) for v in values], dtype=np.uint64)


def _assert_same_codes(
    fmt: FloatFormat, inputs: np.ndarray[Any, Any], ours: np.ndarray, oracle: np.ndarray
) -> None:
    bad = np.nonzero(ours.astype(np.uint64) != oracle.astype(np.uint64))[0]
    assert bad.size == 0, f"{fmt.name}: {bad.size} of {inputs.size} differ, e.g. " + ", ".join(
        f"{inputs[i]!r} -> ours {int(ours[i]):#x}, oracle {int(oracle[i]):#x}" for i in bad[:5]
    )


@pytest.mark.parametrize("fmt", SWEEPS)
def test_every_code_decodes_like_the_oracle(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.width, dtype=np.uint64)
    expected = oracle_decode(fmt, codes)
    scalar = np.array([fmt.to_float(int(c)) for c in codes])
    vector = fmt.to_float_array(codes)
    for ours in (scalar, vector):
        np.testing.assert_array_equal(ours, expected)  # NaNs compare equal here
        not_nan = ~np.isnan(expected)
        np.testing.assert_array_equal(np.signbit(ours[not_nan]), np.signbit(expected[not_nan]))
    # Exact values agree with the floats wherever finite.
    for code in codes[np.isfinite(expected)]:
        assert fmt.to_fraction(int(code)) == Fraction(float(expected[code]))


@pytest.mark.parametrize("fmt", ORACLE_SMALL_FORMATS, ids=IDS)
def test_every_code_classifies_like_the_oracle(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.width, dtype=np.uint64)
    values = oracle_decode(fmt, codes)
    magnitude = np.abs(values)
    with np.errstate(invalid="ignore"):
        expected = np.select(
            [np.isnan(values), np.isinf(values), magnitude == 0, magnitude < float(fmt.min_normal)],
            [CLASSES.index(c) for c in ("nan", "inf", "zero", "subnormal")],
            default=CLASSES.index("normal"),
        )
    np.testing.assert_array_equal(fmt.classify_array(codes), expected)
    scalar = [CLASSES.index(fmt.classify(int(c))) for c in codes]
    np.testing.assert_array_equal(scalar, expected)


@pytest.mark.parametrize("fmt", SWEEPS)
def test_every_value_encodes_like_the_oracle(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.width, dtype=np.uint64)
    values = oracle_decode(fmt, codes)
    not_nan = ~np.isnan(values)
    inputs = values[not_nan]
    oracle = oracle_encode(fmt, inputs)
    _assert_same_codes(fmt, inputs, fmt.from_float_array(inputs), oracle)
    _assert_same_codes(fmt, inputs, _scalar_codes(fmt, inputs, "nearest_even"), oracle)
    # NaN in: NaN out where the format has one (payloads aside); else what ml_dtypes gives.
    nans = np.array([np.nan, -np.nan])
    for path in (fmt.from_float_array(nans), _scalar_codes(fmt, nans, "nearest_even")):
        if fmt.has_nan:
            assert all(fmt.classify(int(c)) == "nan" for c in path)
        else:
            np.testing.assert_array_equal(path, oracle_encode(fmt, nans))


def _steps(points: list[Fraction], dtype: Any) -> np.ndarray[Any, Any]:
    """The points (exact in dtype) and one step of dtype either side of each."""
    exact = np.array([float(p) for p in points], dtype=dtype)
    assert all(Fraction(float(e)) == p for e, p in zip(exact, points, strict=True)), (
        "midpoint not exact"
    )
    up = np.nextafter(exact, dtype(np.inf))
    down = np.nextafter(exact, dtype(-np.inf))
    return np.concatenate([exact, up, down])


@pytest.mark.parametrize("fmt", ORACLE_SMALL_FORMATS, ids=IDS)
@pytest.mark.slow  # a sweep, every midpoint of every small format: ~4 s in all
def test_midpoints_and_float32_steps_encode_like_the_oracle(fmt: FloatFormat) -> None:
    inputs = _steps(midpoints(fmt), np.float32)
    if fmt.name == "float8_e8m0fnu" and not ML_DTYPES_ROUNDS_ONCE:
        inputs = inputs[~_E8M0_ML_DTYPES_ROUNDS_UP(inputs)]
    oracle = oracle_encode(fmt, inputs)
    # E8M0 too: its ties go to the larger magnitude, as ml_dtypes rounds them.
    rounding = "nearest_even"
    _assert_same_codes(fmt, inputs, fmt.from_float_array(inputs, rounding), oracle)
    if fmt.width <= 8:
        _assert_same_codes(fmt, inputs, _scalar_codes(fmt, inputs, rounding), oracle)
    else:
        # The scalar path on every midpoint of a 16-bit format takes seconds; every 5th
        # input here, and tests/formats/test_vectorized.py ties the two paths together.
        sample = inputs[::5]
        _assert_same_codes(fmt, sample, _scalar_codes(fmt, sample, rounding), oracle[::5])


@pytest.mark.parametrize("fmt", ORACLE_SMALL_FORMATS, ids=IDS)
@pytest.mark.slow  # a sweep, every midpoint of every small format: ~3 s in all
def test_midpoints_float64_steps_round_correctly(fmt: FloatFormat) -> None:
    """One float64 step either side of a midpoint rounds away from the midpoint.

    numpy converts float64 to float16 directly, so it is the oracle as is. ml_dtypes
    converts float64 through float32 (the step is lost, the midpoint becomes a tie: see
    test_ml_dtypes_double_rounds_float64), so its oracle here is the same side of the
    midpoint taken one float32 step away, which lies in the same rounding interval.
    """
    points = midpoints(fmt)
    inputs = _steps(points, np.float64)
    n = len(points)
    keep = np.arange(inputs.size) >= n  # the exact midpoints were checked in float32 above
    if fmt.name == "float16":
        with np.errstate(over="ignore"):
            oracle = inputs.astype(np.float16).view(np.uint16).astype(np.uint64)
    else:
        float32_steps = _steps(points, np.float32)
        oracle = oracle_encode(fmt, float32_steps)
        if fmt.name == "float8_e8m0fnu" and not ML_DTYPES_ROUNDS_ONCE:
            keep &= ~_E8M0_ML_DTYPES_ROUNDS_UP(float32_steps)
    inputs, oracle = inputs[keep], oracle[keep]
    # E8M0 too: its ties go to the larger magnitude, as ml_dtypes rounds them.
    rounding = "nearest_even"
    _assert_same_codes(fmt, inputs, fmt.from_float_array(inputs, rounding), oracle)
    stride = 1 if fmt.width <= 8 else 7
    sample = inputs[::stride]
    _assert_same_codes(fmt, sample, _scalar_codes(fmt, sample, rounding), oracle[::stride])


def test_ml_dtypes_double_rounds_float64_before_0_7() -> None:
    """Why float64 inputs are not compared with ml_dtypes directly (documented in README):
    before 0.7 it converted float64 through float32, rounding twice; 0.7 rounds once, as
    the engine does."""
    import ml_dtypes

    x = 1 + 2.0**-8 + 2.0**-40  # just above the midpoint between 1 and 1 + 2**-7
    bf16 = get_format("bfloat16")
    assert bf16.from_value(x) == 0x3F81  # correctly rounded: up
    assert bf16.from_float_array(np.array([x]))[0] == 0x3F81
    via_ml_dtypes = int(np.array([x]).astype(ml_dtypes.bfloat16).view(np.uint16)[0])
    if ML_DTYPES_ROUNDS_ONCE:
        assert via_ml_dtypes == 0x3F81
    else:
        assert via_ml_dtypes == 0x3F80  # through float32 the step is lost, the tie goes even


def _ml_dtypes_rounds_once() -> bool:
    """ml_dtypes 0.7 fixed both known differences (float64 through float32; E8M0 below
    float32's normals): CI installs the newest, a developer's venv may hold an older one."""
    import ml_dtypes

    major, minor = (int(part) for part in ml_dtypes.__version__.split(".")[:2])
    return (major, minor) >= (0, 7)


ML_DTYPES_ROUNDS_ONCE = _ml_dtypes_rounds_once()


def _E8M0_ML_DTYPES_ROUNDS_UP(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float32 subnormals in (2**-127, 2**-126): ml_dtypes rounds every one of them up."""
    magnitude = np.abs(x.astype(np.float64))
    return (magnitude > 2.0**-127) & (magnitude < 2.0**-126)


def test_ml_dtypes_rounds_e8m0_up_below_float32_normals_before_0_7() -> None:
    """The one other known difference from ml_dtypes before 0.7 (documented in README);
    0.7 rounds these to nearest, as the engine does."""
    import ml_dtypes

    e8m0 = get_format("e8m0")
    x = np.array([2.0**-127 * 1.2, 1.5 * 2.0**-127 - 2.0**-149], dtype=np.float32)
    via_ml_dtypes = list(x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8))
    assert via_ml_dtypes == ([0, 0] if ML_DTYPES_ROUNDS_ONCE else [1, 1])  # [1, 1]: 2**-126
    assert list(e8m0.from_float_array(x)) == [0, 0]  # nearest is 2**-127
    assert [e8m0.from_value(float(v)) for v in x] == [0, 0]


def test_e8m0_ties_go_to_the_larger_magnitude_with_nearest_even() -> None:
    """Both neighbours' only significand digit is 1 (odd): IEEE 754-2019 4.3.1 takes the larger,
    as ml_dtypes does, whatever the parity of the codes (3 lies between 2, code 128, and 4,
    code 129); 1.5 * 2**127 overflows to NaN."""
    import ml_dtypes

    e8m0 = get_format("e8m0")
    ties = np.array([1.5, 3.0, 1.5 * 2.0**127])
    assert list(ties.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)) == [128, 129, 255]
    assert [e8m0.from_value(float(v)) for v in ties] == [128, 129, 255]
    assert list(e8m0.from_float_array(ties)) == [128, 129, 255]
    assert e8m0.from_value(3, "round_to_odd") == 128  # both odd: truncated


@pytest.mark.parametrize("fmt", [f for f in SMALL_FORMATS if f.width <= 8], ids=lambda f: f.name)
def test_every_code_round_trips_and_steps(fmt: FloatFormat) -> None:
    for code in range(1 << fmt.width):
        kind = fmt.classify(code)
        if kind == "nan":
            continue
        back = fmt.from_value(fmt.to_exact(code))
        if kind == "zero" and not fmt.has_negative_zero:
            assert back == 0
        else:
            assert back == code
        up, down = fmt.next_up(code), fmt.next_down(code)
        if up != code:
            assert fmt.next_down(up) == code or fmt.classify(code) == "zero"
            assert fmt.to_float(up) > fmt.to_float(code)
        if down != code:
            assert fmt.next_up(down) == code or fmt.classify(code) == "zero"
            assert fmt.to_float(down) < fmt.to_float(code)
