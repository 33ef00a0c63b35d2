"""The figures the project was asked about, and every format's constants against ml_dtypes."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.formats import FloatFormat, get_format, list_formats

from .oracles import DTYPES


def test_the_figures_asked_about() -> None:
    fp16, bf16, fp32 = get_format("fp16"), get_format("bf16"), get_format("fp32")
    assert fp16.max == 65504
    assert fp16.min_subnormal == Fraction(1, 2**24)
    assert float(fp16.min_subnormal) == pytest.approx(5.96e-8, rel=1e-3)
    assert bf16.min_subnormal is not None
    assert float(bf16.min_subnormal) == pytest.approx(9.2e-41, rel=1e-2)
    assert float(bf16.max) == pytest.approx(3.39e38, rel=1e-2)
    assert float(fp32.max) == pytest.approx(3.40e38, rel=1e-2)
    # Same range: the same smallest normal and maxima within one bf16 step.
    assert bf16.min_normal == fp32.min_normal
    assert fp32.max - bf16.max < bf16.max * bf16.eps
    assert fp32.min_subnormal is not None
    assert float(fp32.min_subnormal) == pytest.approx(1.4e-45, rel=1e-2)
    assert get_format("e4m3").max == 448
    assert get_format("e5m2").max == 57344
    assert get_format("fp4").max == 6


@pytest.mark.parametrize(
    "fmt", [f for f in list_formats() if f.name in DTYPES], ids=lambda f: f.name
)
def test_constants_match_finfo(fmt: FloatFormat) -> None:
    info = ml_dtypes.finfo(DTYPES[fmt.name])
    assert fmt.max == Fraction(float(info.max))
    assert fmt.min_normal == Fraction(float(info.smallest_normal))
    assert fmt.eps == Fraction(float(info.eps))
    if fmt.min_subnormal is None:  # E8M0: finfo reports the smallest normal there
        assert fmt.name == "float8_e8m0fnu"
    else:
        assert fmt.min_subnormal == Fraction(float(info.smallest_subnormal))
    assert fmt.width == info.bits
    assert fmt.mantissa_bits == info.nmant
    codes = np.arange(1 << min(fmt.width, 16), dtype=np.uint64)
    if fmt.width <= 16:
        values = fmt.to_float_array(codes)
        assert fmt.finite_count == int(np.isfinite(values).sum())
        assert fmt.has_inf == bool(np.isinf(values).any())
        assert fmt.has_nan == bool(np.isnan(values).any())
        assert fmt.has_negative_zero == bool(((values == 0) & np.signbit(values)).any())


def test_decimal_digits_and_counts() -> None:
    fp16 = get_format("fp16")
    assert fp16.decimal_digits == pytest.approx(11 * np.log10(2))
    assert fp16.finite_count == 2**16 - 2 * 1024
    assert get_format("fp32").finite_count == 2**32 - 2 * 2**23
    assert get_format("e4m3fnuz").finite_count == 255
    assert get_format("e8m0").finite_count == 255
