"""The monitor's format thresholds come from the exact engine for any format: checked against
ml_dtypes' rounding (every named format it has, FP6/FP4/E8M0 included) and, for custom
formats and saturating overflow, against the rounding-boundary formulas; the header lists
the formats asked for, with the engine's exact ranges."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.formats import get_format
from fpexplorer.training.monitor import AmpMonitor, format_range
from fpexplorer.training.monitor.thresholds import FormatRange, floor_log2

ML_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}


def probes(fmt: FormatRange) -> np.ndarray:
    """Each threshold and range end with its float32 neighbours, and a spread between."""
    anchors = [*fmt.thresholds, float(fmt.min_normal), float(fmt.smallest_positive),
               min(float(fmt.max), 3e38)]  # fmt: skip
    values: list[np.float32] = []
    for anchor in anchors:
        a = np.float32(anchor)
        values += [np.nextafter(a, np.float32(0)), a, np.nextafter(a, np.float32(np.inf))]
    low = float(fmt.smallest_positive) / 8 or 1e-45
    values += list(np.geomspace(max(low, 1e-45), min(float(fmt.max) * 4, 3e38), 3000))
    return np.array(values, dtype=np.float32)


def overflow_boundary_oracle(name: str) -> float:
    """The largest float32 that rounds (nearest even) to at most max: above max the next
    step would be max + ulp; the midpoint ties to even (up when max's significand is odd)."""
    fmt = get_format(name)
    ulp = Fraction(2) ** (floor_log2(fmt.max) - fmt.mantissa_bits)
    midpoint = fmt.max + ulp / 2
    odd = (fmt.max / ulp) % 2 == 1
    m32 = np.float32(float(midpoint))
    assert Fraction(float(m32)) == midpoint  # the midpoints of these formats are float32 values
    return float(np.nextafter(m32, np.float32(0))) if odd else float(m32)


@pytest.mark.parametrize("name", ML_DTYPES)
def test_thresholds_agree_with_ml_dtypes_rounding(name: str) -> None:
    fmt = format_range(name)
    target = ML_DTYPES[name]
    smallest_normal = float(ml_dtypes.finfo(target).smallest_normal)
    saturates = get_format(name).default_overflow == "saturate"
    values = probes(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded_all = values.astype(target).astype(np.float64)
    for value, rounded in zip(values, rounded_all, strict=True):
        flushed = rounded == 0
        subnormal = (not flushed) and math.isfinite(rounded) and abs(rounded) < smallest_normal
        assert flushed == (0 < value <= fmt.flush_max), (name, value)
        assert subnormal == (fmt.flush_max < value <= fmt.subnormal_max), (name, value)
        if not saturates and value > 0:  # zero has no E8M0 code: invalid, not overflow
            assert (not math.isfinite(rounded)) == (value > fmt.finite_max_input), (name, value)
    if saturates:  # the output says max either way: check the boundary itself
        assert fmt.finite_max_input == overflow_boundary_oracle(name)


@pytest.mark.parametrize("spec", ["e3m3", "e4m2", "e5m1", "e2m2", "e6m4"])
def test_thresholds_of_custom_formats_follow_the_boundary_formulas(spec: str) -> None:
    fmt = format_range(spec)
    engine = get_format(spec)
    assert engine.min_subnormal is not None
    # Flush: up to half the smallest subnormal (the tie rounds to even: zero).
    assert fmt.flush_max == float(np.float32(float(engine.min_subnormal / 2)))
    # Subnormal: below min_normal - min_subnormal / 2 (the tie rounds up to min_normal).
    edge = np.float32(float(engine.min_normal - engine.min_subnormal / 2))
    assert fmt.subnormal_max == float(np.nextafter(edge, np.float32(0)))
    assert fmt.finite_max_input == overflow_boundary_oracle(spec)
    assert (fmt.max, fmt.min_normal, fmt.min_subnormal) == (
        engine.max,
        engine.min_normal,
        engine.min_subnormal,
    )


def test_e8m0_flushes_nothing_and_has_no_subnormals() -> None:
    fmt = format_range("e8m0")
    assert fmt.name == "float8_e8m0fnu"
    assert (fmt.flush_max, fmt.subnormal_max) == (0.0, 0.0)
    assert fmt.header_json()["min_subnormal"] == 2.0**-127  # its smallest value


def test_the_header_lists_the_formats_asked_for_with_exact_ranges(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    path = tmp_path / "run.jsonl"
    names = ("float6_e3m2fn", "fp4", "e8m0", "e4m2")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = AmpMonitor(model, optimizer, out=path, precision="fp32", formats=names)
    monitor.close()
    header = json.loads(path.read_text().splitlines()[0])
    expected = {}
    for name in names:
        engine = get_format(name)
        smallest = engine.min_subnormal or engine.min_normal
        expected[engine.name] = {"max": float(engine.max), "min_normal": float(engine.min_normal),
                                 "min_subnormal": float(smallest)}  # fmt: skip
    assert header["formats"] == expected


def test_an_unknown_format_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    path = tmp_path / "run.jsonl"
    with pytest.raises(ValueError):
        AmpMonitor(model, torch.optim.SGD(model.parameters(), lr=0.1), out=path,
                   formats=("float16", "no-such-format"))  # fmt: skip
    assert not path.exists()
