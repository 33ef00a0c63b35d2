"""Arithmetic in a format against numpy/ml_dtypes (nearest even) and MPFR (every IEEE mode,
fma, sqrt, flags); IEEE 754 special cases; double rounding."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from fpexplorer.formats import ExactValue, get_format
from fpexplorer.formats.arith import (
    DETERMINISTIC_MODES,
    calculate,
    double_round,
    double_rounding_cases,
    exact_square_root,
    square_root_bracket,
)

NUMPY_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
MPFR_MODES = {
    "nearest_even": gmpy2.RoundToNearest,
    "toward_zero": gmpy2.RoundToZero,
    "toward_positive": gmpy2.RoundUp,
    "toward_negative": gmpy2.RoundDown,
}
MPFR_OPS = {
    "add": gmpy2.add,
    "sub": gmpy2.sub,
    "mul": gmpy2.mul,
    "div": gmpy2.div,
    "fma": gmpy2.fma,
    "sqrt": gmpy2.sqrt,
}


def _same(value: ExactValue, expected: float) -> bool:
    if np.isnan(expected):
        return value.is_nan
    return value.to_float() == expected and np.signbit(value.to_float()) == np.signbit(expected)


def _pairs(width: int, count: int, seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << width, size=(count, 2))


@pytest.mark.parametrize("operation", list(NUMPY_OPS))
@pytest.mark.parametrize(
    ("name", "dtype"), [("fp16", np.float16), ("e4m3", ml_dtypes.float8_e4m3fn)]
)
@pytest.mark.slow  # every operation over whole formats: ~1 s in all
def test_nearest_even_matches_numpy_and_ml_dtypes(operation: str, name: str, dtype: Any) -> None:
    """numpy/ml_dtypes compute in float32 and round once more; float32 has at least 2p + 2
    bits for these formats, so that second rounding is innocuous and they are exact oracles."""
    fmt = get_format(name)
    storage = np.uint16 if fmt.width == 16 else np.uint8
    codes = _pairs(fmt.width, 1500, fmt.width)
    a = codes[:, 0].astype(storage).view(dtype)
    b = codes[:, 1].astype(storage).view(dtype)
    with np.errstate(all="ignore"):
        expected = NUMPY_OPS[operation](a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    for i in range(len(codes)):
        operands = [fmt.to_exact(int(codes[i, 0])), fmt.to_exact(int(codes[i, 1]))]
        result = calculate(operation, operands, fmt, modes=("nearest_even",)).result("nearest_even")
        assert _same(result.value, float(expected[i])), (operation, operands, result.value)


@pytest.mark.slow
@pytest.mark.parametrize("operation", list(NUMPY_OPS))
def test_every_pair_of_e4m3_values_matches_ml_dtypes(operation: str) -> None:
    fmt = get_format("e4m3")
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    with np.errstate(all="ignore"):
        table = NUMPY_OPS[operation](values[:, None], values[None, :])
        expected = table.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    exact = [fmt.to_exact(code) for code in range(256)]
    for i in range(256):
        for j in range(256):
            result = calculate(operation, [exact[i], exact[j]], fmt, modes=("nearest_even",))
            assert _same(result.results[0].value, expected[i, j]), (operation, i, j)


def _mpfr(operation: str, operands: list[float], rounding: str) -> tuple[float, Any]:
    """The operation in MPFR emulating float16 (precision 11, exponents -24..15, subnormals)."""
    context = gmpy2.context(
        precision=11, emin=-23, emax=16, subnormalize=True, round=MPFR_MODES[rounding]
    )
    with context as ctx:
        result = MPFR_OPS[operation](*[gmpy2.mpfr(x) for x in operands])
        return float(result), ctx


@pytest.mark.parametrize("operation", list(MPFR_OPS))
@pytest.mark.slow  # every operation x mode against MPFR: ~1 s in all
def test_every_ieee_mode_and_flags_match_mpfr(operation: str) -> None:
    fmt = get_format("fp16")
    arity = {"fma": 3, "sqrt": 1}.get(operation, 2)
    rng = np.random.default_rng(len(operation))
    codes = rng.integers(0, 1 << 16, size=(500, arity))
    # Specials and exact cancellations among them.
    special = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x3C00, 0xBC00, 0x0001, 0x7BFF]
    codes = np.concatenate([codes, rng.choice(special, size=(300, arity))])
    for row in codes:
        operands = [fmt.to_exact(int(c)) for c in row]
        calc = calculate(operation, operands, fmt, modes=tuple(MPFR_MODES))
        for rounding in MPFR_MODES:
            expected, ctx = _mpfr(operation, [v.to_float() for v in operands], rounding)
            got = calc.result(rounding)
            assert _same(got.value, expected), (operation, operands, rounding, got.value, expected)
            flags = got.flags
            # A NaN operand is quiet here: MPFR raises its NaN flag, IEEE 754 raises nothing.
            if not any(v.is_nan for v in operands):
                assert flags.invalid == ctx.invalid, (operation, operands)
                assert flags.divide_by_zero == ctx.divzero, (operation, operands)
            assert flags.overflow == ctx.overflow, (operation, operands, rounding)
            if np.isfinite(expected):
                assert flags.inexact == ctx.inexact, (operation, operands, rounding)


@pytest.mark.slow  # exact square roots of 9363 fp16 codes: about a second
def test_sqrt_of_every_fp16_code_matches_numpy() -> None:
    fmt = get_format("fp16")
    codes = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(invalid="ignore"):
        expected = np.sqrt(codes.view(np.float16).astype(np.float32)).astype(np.float16)
    for code in range(0, 1 << 16, 7):
        result = calculate("sqrt", [fmt.to_exact(code)], fmt, modes=("nearest_even",))
        assert _same(result.results[0].value, float(expected[code])), hex(code)


def test_square_roots_are_exact_or_bracketed() -> None:
    assert exact_square_root(Fraction(9, 4)) == Fraction(3, 2)
    assert exact_square_root(Fraction(2)) is None
    low, high = square_root_bracket(Fraction(2), 100)
    assert low**2 < 2 < high**2 and high - low == Fraction(1, 2**100)
    calc = calculate("sqrt", ["2"], "fp32")
    assert not calc.exact.is_exact
    assert calc.exact.lower is not None and calc.exact.upper is not None
    assert calc.exact.lower**2 < 2 < calc.exact.upper**2
    assert calc.result("nearest_even").code == np.float32(np.sqrt(2)).view(np.uint32)
    assert all(r.flags.inexact and r.error_is_approximate for r in calc.results)
    exact = calculate("sqrt", ["2.25"], "fp16")
    assert exact.exact.is_exact and exact.result("round_to_odd").value.fraction == Fraction(3, 2)
    assert not exact.result("nearest_even").flags.inexact


def test_ieee_special_cases() -> None:
    fp16 = get_format("fp16")

    def value(operation: str, *operands: Any, rounding: str = "nearest_even") -> Any:
        return calculate(operation, operands, fp16).result(rounding)

    # §6.3: an exact zero sum is +0, or -0 rounding toward -inf; like signs keep theirs.
    assert str(value("add", "1", "-1").value) == "0"
    assert str(value("add", "1", "-1", rounding="toward_negative").value) == "-0"
    assert str(value("sub", "-0", "0").value) == "-0"
    assert str(value("add", "-0", "-0").value) == "-0"
    assert str(value("mul", "-0", "3").value) == "-0"
    assert str(value("sqrt", "-0").value) == "-0"
    assert str(value("fma", "2", "-3", "6").value) == "0"
    assert str(value("fma", "2", "-3", "6", rounding="toward_negative").value) == "-0"
    # §7.2 invalid, §7.3 divide by zero
    for operation, operands in (
        ("add", ("inf", "-inf")),
        ("mul", ("0", "inf")),
        ("div", ("0", "0")),
        ("div", ("inf", "-inf")),
        ("sqrt", ("-1",)),
        ("fma", ("0", "inf", "1")),
    ):
        result = value(operation, *operands)
        assert result.value.is_nan and result.flags.raised() == ("invalid",), operation
    result = value("div", "1", "-0")
    assert str(result.value) == "-inf" and result.flags.raised() == ("divide_by_zero",)
    # A NaN operand propagates quietly.
    assert value("add", "nan", "1").value.is_nan and not value("add", "nan", "1").flags.invalid
    # §7.4 overflow: toward zero keeps max
    big = value("mul", "300", "300")
    assert str(big.value) == "inf" and big.flags.raised() == ("overflow", "inexact")
    assert value("mul", "300", "300", rounding="toward_zero").value.fraction == 65504
    # §7.5 underflow: tiny and inexact
    tiny = value("mul", "0x1p-14", "0x1.8p-10")
    assert tiny.flags.underflow and tiny.flags.inexact
    # Formats without inf: 1/0 is NaN in E4M3 (overflow policy nan), ±max saturating.
    e4m3 = calculate("div", ["1", "0"], "e4m3")
    assert e4m3.result("nearest_even").value.is_nan
    assert calculate("div", ["1", "0"], "e4m3", overflow="saturate").results[0].code == 0x7E


def test_calculation_record() -> None:
    calc = calculate("add", ["0.1", "0.2"], "fp16")
    assert [r.rounding for r in calc.results] == list(DETERMINISTIC_MODES)
    assert calc.operands[0].inexact and calc.operands[0].code == 0x2E66
    assert calc.expression == "0.0999755859375 + 0.199951171875"
    assert calc.exact.value.fraction == Fraction(2457, 8192)
    result = calc.result("nearest_even")
    assert result.code == 0x34CC and result.error_abs == Fraction(1, 8192)
    assert result.error_ulps == Fraction(1, 2)
    with pytest.raises(KeyError, match="stochastic"):
        calc.result("stochastic")
    seeded = calculate("add", ["0.1", "0.2"], "fp16", modes=("stochastic",), seed=4)
    assert seeded.results[0].code in (0x34CC, 0x34CD)
    with pytest.raises(ValueError, match="takes 2"):
        calculate("add", ["1"], "fp16")
    with pytest.raises(ValueError, match="unknown operation"):
        calculate("pow", ["1", "2"], "fp16")


@pytest.mark.slow  # tries every fp16 code four times: about half a second
def test_double_rounding_window_search_finds_what_trying_every_code_finds() -> None:
    for via, target, rounding in (
        ("e5m3", "e4m3", "nearest_even"),
        ("e5m4", "e5m2", "nearest_even"),
        ("e5m2", "e4m3", "toward_zero"),
        ("bf16", "e5m2", "nearest_even"),
    ):
        every = double_rounding_cases("fp16", via, target, rounding, exhaustive=True)
        windows = double_rounding_cases("fp16", via, target, rounding, exhaustive=False)
        assert [c.input for c in windows] == [c.input for c in every], (via, target)
        assert every, (via, target)
        for case in every[:: max(1, len(every) // 50)]:
            again = double_round(case.input, via, target, rounding)
            assert again.differs and again.direct_code == case.direct_code


@pytest.mark.slow
def test_double_rounding_fp32_through_fp16_into_e4m3() -> None:
    cases = double_rounding_cases("fp32", "fp16", "e4m3", limit=2000)
    assert len(cases) == 2000
    first = cases[0]
    # -464.125 rounds to fp16 -464, a tie in E4M3 that goes to -448; directly it is NaN.
    assert first.input.fraction == Fraction(-3713, 8) and first.via_code == 0xDF40
    assert (first.through_code, first.direct_code) == (0xFE, 0xFF)
    # Random float32 values near E4M3 midpoints: each that differs is found by the search.
    rng = np.random.default_rng(1)
    e4m3 = get_format("e4m3")
    values = e4m3.to_float_array(np.arange(0, 0x7E, dtype=np.uint8)).astype(np.float64)
    midpoints = (values[1:] + values[:-1]) / 2
    x = (rng.choice(midpoints, 20000) * (1 + rng.uniform(-2e-3, 2e-3, 20000))).astype(np.float32)
    every = double_rounding_cases("fp32", "fp16", "e4m3")
    found = {c.input.fraction for c in every}
    for value in x:
        if double_round(float(value), "fp16", "e4m3").differs:
            assert Fraction(float(value)) in found
