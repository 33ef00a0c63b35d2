"""Reference implementations the engine is checked against: numpy and ml_dtypes dtypes."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from fpexplorer.formats import FloatFormat, list_formats

# Every named format that numpy or ml_dtypes implements, with its dtype.
DTYPES: dict[str, Any] = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    **{f.name: getattr(ml_dtypes, f.name) for f in list_formats() if hasattr(ml_dtypes, f.name)},
}
SMALL_FORMATS = [f for f in list_formats() if f.width <= 16]
ORACLE_SMALL_FORMATS = [f for f in SMALL_FORMATS if f.name in DTYPES]


def uint_dtype(fmt: FloatFormat) -> Any:
    """Unsigned dtype of the oracle's storage (ml_dtypes keeps FP6/FP4 in one byte each)."""
    return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[max(8, _storage(fmt))]


def _storage(fmt: FloatFormat) -> int:
    return np.dtype(DTYPES[fmt.name]).itemsize * 8


def oracle_decode(fmt: FloatFormat, codes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float64 values of codes, decoded by the oracle dtype."""
    stored = codes.astype(uint_dtype(fmt))
    with np.errstate(invalid="ignore"):  # NaN payloads warn in ml_dtypes' cast
        return stored.view(DTYPES[fmt.name]).astype(np.float64)


def oracle_encode(fmt: FloatFormat, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Codes of values (float32 or float64 array) cast by the oracle dtype (nearest even)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(DTYPES[fmt.name]).view(uint_dtype(fmt)).astype(np.uint64)


def finite_values(fmt: FloatFormat) -> list[Fraction]:
    """All distinct finite values of a small format, ascending (exact)."""
    values = {
        fmt.to_fraction(code)
        for code in range(1 << fmt.width)
        if fmt.classify(code) not in ("inf", "nan")
    }
    return sorted(values)


def midpoints(fmt: FloatFormat) -> list[Fraction]:
    """Every midpoint between neighbouring values, plus the one above max (where the overflow
    threshold of round-to-nearest lies), both signs."""
    values = [v for v in finite_values(fmt) if v >= 0]
    points = [(a + b) / 2 for a, b in itertools.pairwise(values)]
    if fmt.mantissa_bits:
        points.append(fmt.max + (fmt.max - values[-2]) / 2)
    else:
        points.append(fmt.max * Fraction(3, 2))
    if fmt.signed:
        points += [-p for p in points]
    return points
