"""float32, float64 and tfloat32: edge cases and random values against numpy and bit tricks."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fpexplorer.formats import get_format

RNG_SEED = 20261130
FP32, FP64, TF32 = get_format("fp32"), get_format("fp64"), get_format("tf32")

EDGE64 = np.array(
    [
        0.0,
        -0.0,
        5e-324,
        -5e-324,
        2.2250738585072014e-308,
        2.225073858507201e-308,
        1.0,
        np.nextafter(1.0, 2.0),
        np.nextafter(1.0, 0.0),
        1.7976931348623157e308,
        np.inf,
        -np.inf,
        0.1,
        -0.1,
        1e-45,
        7e-46,
        1.4e-45,
        3.4028235e38,
        3.4028235677973366e38,
        3.402823669e38,
        1.1754943508222875e-38,
        1.1754942e-38,
        2.0**-150,
        2.0**-150 * 1.0000001,
        2.0**-149,
        65504.0,
        1e300,
        -1e300,
        16777217.0,
        33554435.0,
    ],
    dtype=np.float64,
)


def _random_float64(count: int) -> np.ndarray:
    """Random bit patterns (every exponent equally likely), NaNs removed."""
    bits = np.random.default_rng(RNG_SEED).integers(0, 2**64, size=count, dtype=np.uint64)
    values = bits.view(np.float64)
    return values[~np.isnan(values)]


def _random_float32_bits(count: int) -> np.ndarray:
    bits = np.random.default_rng(RNG_SEED + 1).integers(0, 2**32, size=count, dtype=np.uint64)
    return bits.astype(np.uint32)


def test_float64_to_float32_like_numpy() -> None:
    values = np.concatenate([EDGE64, _random_float64(4000)])
    # Also values within float32's range, where the rounding is interesting.
    scaled = np.random.default_rng(RNG_SEED).standard_normal(4000) * 10.0 ** np.random.default_rng(
        RNG_SEED
    ).integers(-45, 39, 4000)
    values = np.concatenate([values, scaled])
    with np.errstate(over="ignore"):
        expected = values.astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(FP32.from_float_array(values), expected)
    scalar = [FP32.from_value(float(v)) for v in values]
    np.testing.assert_array_equal(scalar, expected)


def test_float64_and_float32_decode_like_numpy() -> None:
    bits64 = np.random.default_rng(RNG_SEED).integers(0, 2**64, size=3000, dtype=np.uint64)
    bits64 = np.concatenate([bits64, EDGE64.view(np.uint64)])
    expected64 = bits64.view(np.float64)
    np.testing.assert_array_equal(FP64.to_float_array(bits64), expected64)
    np.testing.assert_array_equal([FP64.to_float(int(b)) for b in bits64], expected64)
    bits32 = _random_float32_bits(3000)
    with np.errstate(invalid="ignore"):  # NaN payloads
        expected32 = bits32.view(np.float32).astype(np.float64)
    np.testing.assert_array_equal(FP32.to_float_array(bits32), expected32)
    np.testing.assert_array_equal([FP32.to_float(int(b)) for b in bits32], expected32)
    finite = np.isfinite(expected64)
    for code, value in zip(bits64[finite][:500], expected64[finite][:500], strict=True):
        assert FP64.to_fraction(int(code)) == Fraction(float(value))
        assert FP64.from_value(float(value)) == int(code)


@pytest.mark.parametrize(
    ("fmt", "dtype", "udtype"),
    [(FP32, np.float32, np.uint32), (FP64, np.float64, np.uint64)],
    ids=["float32", "float64"],
)
def test_neighbours_and_gaps_like_nextafter(fmt, dtype, udtype) -> None:  # type: ignore[no-untyped-def]
    with np.errstate(over="ignore"):
        edge = EDGE64.astype(dtype)
        random = _random_float64(1500).astype(dtype)
        values = np.concatenate([edge, random, np.array([-np.inf, np.inf], dtype=dtype)])
        up = np.nextafter(values, dtype(np.inf))
        down = np.nextafter(values, dtype(-np.inf))
    for value, expected_up, expected_down in zip(values, up, down, strict=True):
        code = int(np.array([value], dtype=dtype).view(udtype)[0])
        assert fmt.next_up(code) == int(np.array([expected_up]).view(udtype)[0]), value
        assert fmt.next_down(code) == int(np.array([expected_down]).view(udtype)[0]), value
        if np.isfinite(value) and np.isfinite(expected_up):
            assert fmt.gap_up(code) == Fraction(float(expected_up)) - Fraction(float(value))
        if np.isfinite(value) and np.isfinite(expected_down):
            assert fmt.gap_down(code) == Fraction(float(value)) - Fraction(float(expected_down))


def test_float64_shortest_decimal_is_repr() -> None:
    values = np.concatenate([EDGE64, _random_float64(300)])
    for value in values:
        code = int(np.array([value]).view(np.uint64)[0])
        assert FP64.shortest_decimal(code) == repr(float(value))


def test_float32_shortest_decimal_round_trips_and_is_shortest() -> None:
    bits = _random_float32_bits(300)
    for code, value in zip(bits, bits.view(np.float32), strict=True):
        if not np.isfinite(value):
            continue
        ours = FP32.shortest_decimal(int(code))
        assert np.float32(float(Fraction(ours))) == value or float(ours) == float(value)
        assert FP32.from_value(ours) == int(code)
        numpy_digits = np.format_float_scientific(value, unique=True).split("e")[0]
        mantissa = ours.split("e")[0].lstrip("-")
        assert len(mantissa.replace(".", "").strip("0")) <= len(
            numpy_digits.lstrip("-").replace(".", "").rstrip("0")
        )


def test_decimal_strings_to_float64_like_python_float() -> None:
    """Python's float() parses decimal strings correctly rounded: an oracle for any text."""
    rng = np.random.default_rng(RNG_SEED)
    texts = [
        "2.4703282292062328e-324",
        "2.4703282292062327e-324",
        "1e-400",
        "1.8e308",
        "1.7976931348623158e308",
        "1.7976931348623157e308",
        "0.1",
        "-0",
        "123456789e-30",
    ]
    for _ in range(400):
        digits = "".join(str(d) for d in rng.integers(0, 10, int(rng.integers(1, 30))))
        texts.append(f"{digits[0]}.{digits[1:] or '0'}e{int(rng.integers(-330, 310))}")
    for text in texts:
        expected = np.array([float(text)]).view(np.uint64)[0]
        assert FP64.from_value(text) == int(expected), text


def _tf32_oracle(bits: np.ndarray, *, ties_away: bool) -> np.ndarray:
    """NVIDIA-style bit rounding of float32 to TF32 (its 10 fraction bits), as integers."""
    bits = bits.astype(np.uint64)
    if ties_away:  # cvt.rna.tf32.f32: add half an ulp and truncate
        rounded = bits + 0x1000
    else:  # round half to even
        rounded = bits + 0xFFF + ((bits >> 13) & 1)
    return (rounded >> 13).astype(np.uint64)


@pytest.mark.parametrize("rounding", ["nearest_away", "nearest_even"])
def test_tf32_against_bit_manipulation(rounding: str) -> None:
    bits = _random_float32_bits(20000)
    # Also every tie and tie ± 1 around a few binades, and near the top.
    ties = np.array(
        [(e << 23) | (f << 13) | 0x1000 for e in (1, 100, 127, 254) for f in range(0, 1024, 37)],
        dtype=np.uint64,
    )
    bits = np.concatenate([bits, ties, ties + 1, ties - 1, np.array([0x7F7FFFFF, 0x7F7FF000])])
    bits = bits.astype(np.uint32)
    values = bits.view(np.float32)
    finite = np.isfinite(values)
    bits, values = bits[finite], values[finite]
    expected = _tf32_oracle(bits, ties_away=rounding == "nearest_away")
    np.testing.assert_array_equal(TF32.from_float_array(values, rounding), expected)
    sample = slice(0, None, 20)
    scalar = [TF32.from_value(float(v), rounding) for v in values[sample]]
    np.testing.assert_array_equal(scalar, expected[sample])
    # TF32 codes are the top 19 bits of a float32: decoding is exact.
    np.testing.assert_array_equal(
        TF32.to_float_array(expected),
        (expected.astype(np.uint32) << np.uint32(13)).view(np.float32).astype(np.float64),
    )
