"""The All codes map's colours: brighter is larger, for every format it draws."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.formats import get_format
from fpexplorer.gui.formats.codes_map import code_image


def _brightness(fmt_name: str) -> np.ndarray:
    image = code_image(get_format(fmt_name)).reshape(-1, 4)
    return image[:, :3].astype(int).sum(axis=1)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("name", "bias"), [("e15m0", 16383), ("e11m4", 1023)])
def test_formats_past_float64_are_not_one_colour(name: str, bias: int) -> None:
    # e15m0's values run from 2**-16382 to 2**16383: as float64 they were 0 or inf, and
    # every normal cell got the same colour. Oracle: a positive normal code c of e15m0 is
    # 2**(c - bias) (no fraction bits); of e11m4, (16 + c % 16) / 16 * 2**(c // 16 - bias).
    fmt = get_format(name)
    brightness = _brightness(name)
    m = fmt.mantissa_bits
    normal = range(1 << m, fmt.finite_count // 2)  # from the first normal to max
    values = [
        Fraction((1 << m) + c % (1 << m), 1 << m) * Fraction(2) ** (c // (1 << m) - bias)
        for c in normal
    ]
    assert values == sorted(values)
    shown = brightness[list(normal)]
    assert np.all(np.diff(shown) >= 0) and shown[-1] - shown[0] > 200  # brighter = larger
    assert len(set(shown.tolist())) > 100


@pytest.mark.parametrize(("name", "dtype"), [("fp16", np.float16), ("e5m2", ml_dtypes.float8_e5m2)])
def test_brightness_follows_the_magnitude_of_named_formats(name: str, dtype: object) -> None:
    codes = np.arange(
        1 << np.dtype(dtype).itemsize * 8, dtype=np.uint16 if name == "fp16" else np.uint8
    )
    values = codes.view(dtype).astype(np.float64)
    normal = np.isfinite(values) & (np.abs(values) >= float(ml_dtypes.finfo(dtype).smallest_normal))
    positive = np.flatnonzero(normal & (values > 0))
    order = positive[np.argsort(values[positive], kind="stable")]
    assert np.all(np.diff(_brightness(name)[order]) >= 0)
