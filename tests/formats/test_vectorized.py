"""The array paths agree exactly with the scalar (exact) path: every format, mode, policy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.formats import (
    CLASSES,
    OVERFLOW_POLICIES,
    ROUNDING_MODES,
    FloatFormat,
    get_format,
    list_formats,
    quantize,
)

CUSTOM = [
    get_format(spec)
    for spec in (
        "e6m9",
        "e4m3:subnormals=off",
        "e3m2:encoding=fnuz",
        "e5m3:bias=3",
        "e2m2:encoding=fn",
        "e5m0",
        "e4m2:encoding=finite:subnormals=off",
        "e5m2:unsigned",
        "e3m3:encoding=fnu",
        "e11m20",
        # Negative biases: quanta above 1, where float64 subnormals scaled down underflow.
        "e1m2:encoding=finite:bias=-3",
        "e3m1:bias=-2:subnormals=off",
        # Ranges wider than float32's: the float32 kernel must still see inf and NaN.
        "e8m3:bias=120",
        "e8m10:bias=100",
    )
]
FORMATS = list_formats() + CUSTOM
MODES = [m for m in ROUNDING_MODES if m != "stochastic"]


def _inputs(fmt: FloatFormat, count: int = 160) -> np.ndarray:
    """Values across the format's whole range and beyond, specials, and exact codes."""
    rng = np.random.default_rng(fmt.width * 1000 + fmt.mantissa_bits)
    low = int(np.log2(float(fmt.min_subnormal or fmt.min_normal))) - 3
    high = min(int(np.log2(float(fmt.max))) + 3, 1023)
    low = max(low, -1074)
    exponents = rng.integers(low, high, count)
    values = rng.uniform(1, 2, count) * 2.0 ** exponents.astype(np.float64)
    values *= rng.choice([-1.0, 1.0], count)
    codes = rng.integers(0, 1 << min(fmt.width, 63), 60, dtype=np.uint64)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = fmt.to_float_array(codes)
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            float(fmt.max),
            -float(fmt.max),
            float(fmt.min_normal),
            float(fmt.min_normal) / 2,
            1.0,
            -1.5,
            5e-324,  # the float64 subnormals: nonzero, whatever the scale
            -5e-324,
            3 * 2.0**-1074,
        ]
    )
    return np.concatenate([values, exact, specials])


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.slow  # a sweep, every format against the scalar path: ~3 s in all
def test_from_float_array_matches_from_value(fmt: FloatFormat) -> None:
    x = _inputs(fmt)
    for rounding in MODES:
        for policy in (None, *OVERFLOW_POLICIES):
            vector = fmt.from_float_array(x, rounding, policy)
            scalar = [fmt.from_value(float(v), rounding, policy) for v in x]
            bad = np.nonzero(vector != np.array(scalar, dtype=np.uint64))[0]
            assert bad.size == 0, f"{fmt.name} {rounding} {policy}: " + ", ".join(
                f"{x[i]!r}: {int(vector[i]):#x} vs {scalar[i]:#x}" for i in bad[:4]
            )


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.slow  # a sweep, every format's float32 kernels against the scalar path: ~8 s in all
def test_float32_kernels_match_from_value(fmt: FloatFormat) -> None:
    """float32 input with nearest_even takes specialised bit-trick kernels: same answers."""
    with np.errstate(over="ignore"):
        x = _inputs(fmt, 2000).astype(np.float32)
    rng = np.random.default_rng(fmt.width)
    random_bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([x, random_bits.view(np.float32)])
    for policy in (None, *OVERFLOW_POLICIES):
        vector = fmt.from_float_array(x, "nearest_even", policy)
        scalar = np.array(
            [fmt.from_value(float(v), "nearest_even", policy) for v in x], dtype=np.uint64
        )
        nan = np.isnan(x)
        np.testing.assert_array_equal(vector[~nan], scalar[~nan])
        # NaN payloads aside: NaN in, a NaN code out (or ml_dtypes' zero where none exists).
        np.testing.assert_array_equal(
            fmt.classify_array(vector[nan]), fmt.classify_array(scalar[nan])
        )


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_decode_and_classify_arrays_match_scalar(fmt: FloatFormat) -> None:
    rng = np.random.default_rng(fmt.width)
    codes = rng.integers(0, 1 << min(fmt.width, 63), 400, dtype=np.uint64)
    edge = np.arange(min(1 << fmt.width, 64), dtype=np.uint64)
    codes = np.concatenate([codes, edge, np.uint64((1 << fmt.width) - 1) - edge])
    values = fmt.to_float_array(codes)
    scalar = np.array([fmt.to_float(int(c)) for c in codes])
    np.testing.assert_array_equal(values, scalar)
    np.testing.assert_array_equal(np.signbit(values), np.signbit(scalar))
    classes = fmt.classify_array(codes)
    np.testing.assert_array_equal(classes, [CLASSES.index(fmt.classify(int(c))) for c in codes])


def test_array_dtypes_shapes_and_inputs() -> None:
    fp16 = get_format("fp16")
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    codes = fp16.from_float_array(x)
    assert codes.dtype == np.uint16 and codes.shape == (3, 4)
    np.testing.assert_array_equal(codes, x.astype(np.float16).view(np.uint16))
    assert get_format("fp4").from_float_array(x).dtype == np.uint8
    assert get_format("tf32").from_float_array(x).dtype == np.uint32
    assert get_format("fp64").from_float_array(x).dtype == np.uint64
    np.testing.assert_array_equal(fp16.to_float_array(codes), x.astype(np.float16))
    half_input = fp16.from_float_array(x.astype(np.float16))
    np.testing.assert_array_equal(half_input, codes)
    assert fp16.from_float_array(np.array([], dtype=np.float64)).size == 0
    with pytest.raises(ValueError, match="floats"):
        fp16.from_float_array(np.arange(3))
    with pytest.raises(ValueError, match="out of range"):
        fp16.to_float_array(np.array([1 << 16]))
    with pytest.raises(ValueError, match="integer array"):
        fp16.to_float_array(np.array([1.0]))
    with pytest.raises(ValueError, match="rounding mode"):
        fp16.from_float_array(x, "up")


ML_DTYPES_FLOATS = [
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float4_e2m1fn",
]


@pytest.mark.parametrize("source", ML_DTYPES_FLOATS)
@pytest.mark.parametrize("target", ["e4m3", "fp4", "e8m0", "bf16"])
def test_an_ml_dtypes_array_rounds_as_its_float32_values(source: str, target: str) -> None:
    # Every value of the source type (it was refused: "takes a float array, not bfloat16",
    # where quantize took it). float32 holds each exactly, so the rounding stays single.
    dtype = np.dtype(getattr(ml_dtypes, source))
    every = np.arange(1 << (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype)
    if source.startswith(("float6", "float4")):  # codes above the width are not values
        every = (
            get_format(source)
            .to_float_array(np.arange(1 << get_format(source).width))
            .astype(dtype)
        )
    fmt = get_format(target)
    for mode in ("nearest_even", "toward_zero", "round_to_odd"):
        np.testing.assert_array_equal(
            fmt.from_float_array(every, mode), fmt.from_float_array(every.astype(np.float32), mode)
        )
    with pytest.raises(ValueError, match="floats"):
        fmt.from_float_array(np.ones(2, dtype=ml_dtypes.int4))


def test_a_torch_tensor_numpy_cannot_read_is_a_value_error_saying_what_to_pass() -> None:
    import torch

    e4m3 = get_format("e4m3")
    # One number in a 0-d tensor is read exactly (its item()); it was "cannot round a Tensor".
    assert e4m3.from_value(torch.tensor(0.3)) == e4m3.from_value(float(np.float32(0.3)))
    assert e4m3.from_value(torch.tensor(-3, dtype=torch.int8)) == e4m3.from_value(-3)
    with pytest.raises(ValueError, match=r"cannot round a Tensor: .*; for an array, from_float"):
        e4m3.from_value(torch.ones(2))
    np.testing.assert_array_equal(
        e4m3.from_float_array(torch.tensor([0.3, 1.0])), e4m3.from_float_array([0.3, 1.0])
    )
    for tensor in (
        torch.ones(2, dtype=torch.bfloat16),  # was TypeError: Got unsupported ScalarType
        torch.ones(2, requires_grad=True),  # was RuntimeError from Tensor.numpy
    ):
        for convert in (e4m3.from_float_array, lambda t: quantize(t, "mxfp4")):
            with pytest.raises(ValueError, match=r"give x\.detach\(\)\.float\(\)\.cpu\(\)"):
                convert(tensor)


def test_stochastic_arrays_are_seeded_and_unbiased() -> None:
    bf16 = get_format("bf16")
    x = np.full(40000, 1 + 2.0**-9)  # a quarter of the way from 1 to 1 + 2**-7
    first = bf16.from_float_array(x, "stochastic", seed=7)
    np.testing.assert_array_equal(first, bf16.from_float_array(x, "stochastic", seed=7))
    assert set(np.unique(first)) == {0x3F80, 0x3F81}
    mean = bf16.to_float_array(first).mean()
    sigma = 2.0**-7 * np.sqrt(0.25 * 0.75 / x.size)
    assert abs(mean - x[0]) < 5 * sigma


@pytest.mark.parametrize("name", ["fp16", "bf16", "e4m3"])
def test_any_memory_layout(name: str) -> None:
    fmt = get_format(name)
    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    expected = fmt.from_float_array(x.copy())
    np.testing.assert_array_equal(fmt.from_float_array(x[::-1]), expected[::-1])
    np.testing.assert_array_equal(fmt.from_float_array(x[::3]), expected[::3])
    np.testing.assert_array_equal(fmt.from_float_array(x.astype(">f4")), expected)
    grid = np.asfortranarray(x[:1000].reshape(20, 50))
    np.testing.assert_array_equal(fmt.from_float_array(grid), expected[:1000].reshape(20, 50))


@pytest.mark.parametrize(("spec", "mantissa_bits"), [("e8m3:bias=120", 3), ("e8m10:bias=100", 10)])
def test_float32_kernel_keeps_inf_and_nan_in_formats_wider_than_float32(
    spec: str, mantissa_bits: int
) -> None:
    """Regression: the float32 kernel rebiased the bits of inf to 0x7c0 (3.4e38) in e8m3 with
    bias 120, and NaN to a finite code in e8m10 with bias 100."""
    fmt = get_format(spec)
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 3e38], dtype=np.float32)
    codes = fmt.from_float_array(x)
    assert [fmt.classify(int(c)) for c in codes] == ["inf", "inf", "nan", "nan", "normal"]
    infinity = 0xFF << mantissa_bits
    assert int(codes[0]) == infinity and int(codes[1]) == infinity | (1 << (8 + mantissa_bits))
    assert codes[4] == fmt.from_value(float(x[4]))
