"""Block formats (MX, NVFP4): the rules as worked numbers, the exact one-block path against
the vectorized path, special inputs, tails, axes, forced scales and error statistics."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpexplorer.formats import block_quantize
from fpexplorer.formats.block import (
    SCALE_RULES,
    BlockFormat,
    IntElement,
    get_block_format,
    list_block_formats,
    shared_exponent,
)
from fpexplorer.formats.block_quantize import (
    dequantize,
    quantize,
    quantize_block_exact,
    tensor_scale_for,
)
from fpexplorer.formats.registry import get_format

MX_NAMES = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8")
NON_STOCHASTIC = (
    "nearest_even",
    "nearest_away",
    "toward_zero",
    "toward_positive",
    "toward_negative",
    "round_to_odd",
)


def _all_formats_and_rules() -> list[BlockFormat]:
    formats = []
    for fmt in list_block_formats():
        rules = ("nearest",) if fmt.name == "nvfp4" else ("floor", "ceil", "even", "rceil")
        formats.extend(fmt.with_rule(rule) for rule in rules)
    return formats


ALL = _all_formats_and_rules()


def _ids(fmt: BlockFormat) -> str:
    return f"{fmt.name}-{fmt.scale_rule}"


def _rounding_modes(fmt: BlockFormat) -> tuple[str, ...]:
    from fpexplorer.formats import ROUNDING_MODES

    return tuple(mode for mode in NON_STOCHASTIC if mode in ROUNDING_MODES)


# ---- the formats as data -----------------------------------------------------------------


def test_named_block_formats_have_the_issue_parameters() -> None:
    expected = {
        "mxfp8_e4m3": ("float8_e4m3fn", 32, "float8_e8m0fnu", 8),
        "mxfp8_e5m2": ("float8_e5m2", 32, "float8_e8m0fnu", 15),
        "mxfp6_e2m3": ("float6_e2m3fn", 32, "float8_e8m0fnu", 2),
        "mxfp6_e3m2": ("float6_e3m2fn", 32, "float8_e8m0fnu", 4),
        "mxfp4": ("float4_e2m1fn", 32, "float8_e8m0fnu", 2),
        "mxint8": ("int8", 32, "float8_e8m0fnu", 0),
        "nvfp4": ("float4_e2m1fn", 16, "float8_e4m3fn", 2),
    }
    assert [f.name for f in list_block_formats()] == list(expected)
    for fmt in list_block_formats():
        element, size, scale, emax = expected[fmt.name]
        assert (fmt.element.name, fmt.block_size, fmt.scale_format.name) == (element, size, scale)
        assert fmt.element_emax == emax
        assert fmt.scale_rule == ("nearest" if fmt.name == "nvfp4" else "floor")
        assert fmt.tensor_scale == (fmt.name == "nvfp4")
    assert get_block_format("mxfp4").bits_per_element == 4.25
    assert get_block_format("nvfp4").bits_per_element == 4.5
    assert get_block_format("MXFP8") is get_block_format("mxfp8_e4m3")


def test_int8_element_is_twos_complement_times_2_to_the_minus_6() -> None:
    int8 = IntElement()
    assert int8.max == Fraction(127, 64)
    assert int8.to_fraction(0x80) == -2 and int8.to_fraction(0x7F) == Fraction(127, 64)
    assert int8.to_fraction(0xFF) == Fraction(-1, 64)
    assert int8.code_to_bits(0x81) == "10000001" and int8.code_to_hex(5) == "0x05"
    # Saturation is symmetric: -2 decodes but is never produced.
    assert int8.from_value(-2) == 0x81 and int8.from_value(5) == 0x7F
    assert int8.from_value("-0.0078125") == 0x00  # -0.5/64: a tie to even, 0 (no -0)
    assert int8.from_value("0.0234375") == 0x02  # 1.5/64 ties to the even 2
    assert int8.from_value("0.0234375", "nearest_away") == 0x02
    assert int8.from_value("-0.0234375", "toward_zero") == 0xFF  # -1/64
    assert int8.from_value(float("nan")) == 0 and int8.from_value(float("-inf")) == 0x81
    codes = np.arange(256, dtype=np.uint8)
    values = int8.to_float_array(codes)
    assert [Fraction(v) for v in values] == [int8.to_fraction(c) for c in range(256)]
    for mode in NON_STOCHASTIC:
        x = np.linspace(-2.2, 2.2, 2001)
        expected = [int8.from_value(float(v), mode) for v in x]
        assert int8.from_float_array(x, mode).tolist() == expected, mode


def test_bad_block_formats_and_names_are_refused() -> None:
    e8m0, e4m3 = get_format("e8m0"), get_format("e4m3")
    fp4 = get_format("fp4")
    with pytest.raises(ValueError, match="unknown scale rule"):
        BlockFormat("x", fp4, 32, e8m0, "round")
    with pytest.raises(ValueError, match="does not fit"):
        BlockFormat("x", fp4, 32, e8m0, "nearest")
    with pytest.raises(ValueError, match="does not fit"):
        BlockFormat("x", fp4, 16, e4m3, "floor")
    with pytest.raises(ValueError, match="block size"):
        BlockFormat("x", fp4, 0, e8m0)
    with pytest.raises(ValueError, match="per-tensor"):
        BlockFormat("x", fp4, 32, e8m0, tensor_scale=True)
    with pytest.raises(ValueError, match="too wide"):
        BlockFormat("x", get_format("fp32"), 16, get_format("bf16"), "nearest", True)
    with pytest.raises(ValueError, match="unknown block format 'mxfp5'"):
        get_block_format("mxfp5")
    assert get_block_format("mxfp4", "rceil").scale_rule == "rceil"
    assert set(SCALE_RULES) == {"floor", "ceil", "even", "rceil", "nearest"}


# ---- scale rules as worked numbers -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule", "amax", "exponent"),
    [
        ("mxfp8_e4m3", "floor", Fraction(1), -8),  # floor(log2 1) - 8
        ("mxfp8_e4m3", "floor", Fraction(511), 0),  # 511 → 1.996 × 2**8, saturates to 448
        ("mxfp8_e4m3", "ceil", Fraction(3, 2), -7),
        ("mxfp8_e4m3", "ceil", Fraction(2), -7),  # a power of two stays
        ("mxfp8_e4m3", "even", Fraction(31, 16), -7),  # 1.9375 rounds to 2 at 3 bits
        ("mxfp8_e4m3", "even", Fraction(30, 16), -8),  # 1.875 is on the grid
        ("mxfp8_e4m3", "rceil", Fraction(448), 0),  # amax/max = 1
        ("mxfp8_e4m3", "rceil", Fraction(449), 1),
        ("mxfp8_e4m3", "rceil", Fraction(224), -1),
        ("mxfp8_e5m2", "floor", Fraction(1), -15),
        ("mxfp6_e2m3", "floor", Fraction(7), 0),
        ("mxfp6_e3m2", "floor", Fraction(16), 0),
        ("mxfp4", "floor", Fraction(6), 0),
        ("mxfp4", "rceil", Fraction(6), 0),
        ("mxfp4", "rceil", Fraction(13, 2), 1),
        ("mxint8", "floor", Fraction(1), 0),
        ("mxint8", "rceil", Fraction(2), 1),  # 2 / (127/64) = 1.008
        ("mxfp8_e4m3", "floor", Fraction(1, 2**140), -127),  # clamped at -127
        ("mxfp8_e4m3", "floor", Fraction(2**135), 127),
        ("mxfp8_e4m3", "floor", Fraction(2**136), None),  # 128 > 127: NaN
        ("mxfp8_e4m3", "floor", Fraction(0), -127),
    ],
)
def test_shared_exponent_worked_values(
    name: str, rule: str, amax: Fraction, exponent: int | None
) -> None:
    fmt = get_block_format(name, rule)
    assert shared_exponent(amax, fmt) == exponent
    if amax < 2**1000:  # and the vectorized rule agrees on the float64 amax
        x = np.zeros(fmt.block_size)
        x[0] = float(amax)
        code = quantize(x, fmt).scale_codes[0]
        assert code == (0xFF if exponent is None else exponent + 127)


def test_nvfp4_worked_block() -> None:
    # amax 6 over a tensor whose amax is 6·448: s_global = 1/448 rounded to FP32.
    values = [6.0, 3.0, -1.0, 0.5, 0.2, 0.0, -0.0, 2688.0] + [0.0] * 8
    block = quantize_block_exact(values[:8], "nvfp4", tensor_scale=2688 / 2688)
    assert block.tensor_scale == 1
    assert block.scale == 448  # (2688 / 6) / 1 = 448
    whole = quantize(np.array(values), "nvfp4")
    assert whole.tensor_scale == float(np.float32(2688.0 / 2688))
    scale = Fraction(whole.scales[0])
    assert scale == 448
    assert whole.values[7] == 2688.0 and whole.values[1] == 0.0  # 3/448 flushes to 0
    # A block of small values gets its own scale: amax 0.5 → 0.5/6 rounded to E4M3.
    small = quantize_block_exact([0.5, 0.25, -0.125], "nvfp4", tensor_scale=1)
    assert small.scale == get_format("e4m3").to_fraction(get_format("e4m3").from_value(0.5 / 6))
    assert small.scale == Fraction(11, 128)  # 0.0833 = 1.33·2**-4 → 1.375·2**-4
    # 5.82 → 6, 2.91 → 3, -1.45 → -1.5 (E2M1), times 11/128
    assert [v.to_float() for v in small.values] == [0.515625, 0.2578125, -0.12890625]


# ---- exact path == vectorized path ---------------------------------------------------


def _random_blocks(rng: np.random.Generator, rows: int, size: int) -> np.ndarray:
    x = rng.standard_normal((rows, size)) * np.exp2(rng.integers(-40, 40, (rows, 1)))
    outliers = rng.random((rows, size)) < 0.03
    x[outliers] *= np.exp2(rng.integers(4, 20, outliers.sum()))
    x[rng.random((rows, size)) < 0.08] = 0.0
    x[rng.random((rows, size)) < 0.02] = -0.0
    tiny = rng.random((rows, size)) < 0.02
    x[tiny] = rng.standard_normal(tiny.sum()) * 2.0**-135
    x[2] = rng.standard_normal(size) * 2.0**-140  # a whole block below the smallest scale
    x[3] = 0.0
    return x


def _assert_same(
    fmt: BlockFormat, rows: np.ndarray, rounding: str, tensor_scale: float | None
) -> None:
    quantized = quantize(rows, fmt, rounding, tensor_scale=tensor_scale)
    for r, row in enumerate(rows):
        block = quantize_block_exact(list(row), fmt, rounding, tensor_scale=tensor_scale)
        assert block.scale_code == quantized.scale_codes[r, 0], (fmt.name, row)
        assert list(block.codes) == quantized.codes[r].tolist(), (fmt.name, rounding, row)
        exact = [v.to_float() for v in block.values]
        vector = quantized.values[r].tolist()
        assert [Fraction(v) for v in exact if not math.isnan(v)] == [
            Fraction(v) for v in vector if not math.isnan(v)
        ]
        assert [math.copysign(1, v) for v in exact] == [math.copysign(1, v) for v in vector]


@pytest.mark.parametrize("fmt", ALL, ids=_ids)
@pytest.mark.slow  # a sweep, every block format, exact path: ~3 s in all
def test_vectorized_path_equals_exact_path(fmt: BlockFormat) -> None:
    rng = np.random.default_rng(abs(hash(_ids(fmt))) % 2**32)
    rows = _random_blocks(rng, 24, fmt.block_size)
    for dtype in (np.float32, np.float64):
        data = rows.astype(dtype)
        for rounding in _rounding_modes(fmt):
            # A forced per-tensor scale only where the format has one (NVFP4): MX refuses it.
            forced = 0.015625 if fmt.tensor_scale else None
            _assert_same(fmt, data, rounding, tensor_scale=forced)


@pytest.mark.parametrize("rounding", NON_STOCHASTIC[:5])
def test_nvfp4_quotients_next_to_every_rounding_boundary(rounding: str) -> None:
    """The float64 quotient x / (s_block·s_global) is rounded once more into E2M1: values
    one float64 step either side of every element value and midpoint times an awkward
    divisor still round as the exact quotient does."""
    fp4 = get_format("fp4")
    grid = sorted({abs(float(fp4.to_float(c))) for c in range(16)})
    boundaries = grid + [(a + b) / 2 for a, b in itertools.pairwise(grid)]
    tensor_scale = float(np.float32(1 / 3))  # 24 significant bits
    fmt = get_block_format("nvfp4")
    for scale_code in (0x38, 0x3B, 0x4D, 0x7E):  # 1, 1.375, 6.5, 448
        divisor = float(fmt.scale_value(scale_code)) * tensor_scale
        values = []
        for b in boundaries:
            center = b * divisor
            values += [np.nextafter(center, -np.inf), center, np.nextafter(center, np.inf)]
        values = np.array(values)
        values = np.concatenate([values, -values])
        quantized = quantize(
            values, fmt, rounding, tensor_scale=tensor_scale, scale_codes=scale_code
        )
        for start in range(0, values.size, 16):
            chunk = list(values[start : start + 16])
            block = quantize_block_exact(
                chunk, fmt, rounding, tensor_scale=tensor_scale, scale_code=scale_code
            )
            assert list(block.codes) == quantized.codes[start : start + 16].tolist()


# ---- special inputs, tails, axes --------------------------------------------------------


@pytest.mark.parametrize("name", MX_NAMES)
def test_mx_nan_or_inf_in_a_block_makes_the_scale_nan(name: str) -> None:
    for special in (math.nan, math.inf, -math.inf):
        x = np.linspace(-1, 1, 64)
        x[40] = special
        quantized = quantize(x, name)
        assert quantized.scale_codes.tolist() == [quantized.scale_codes[0], 0xFF]
        assert quantized.scale_codes[0] != 0xFF
        assert np.isnan(quantized.values[32:]).all() and np.isfinite(quantized.values[:32]).all()
        assert (quantized.codes[32:] == 0).all()
        block = quantize_block_exact(list(x[32:]), name)
        assert block.scale_code == 0xFF and block.scale is None
        assert all(v.is_nan for v in block.values)


def test_nvfp4_inf_saturates_and_nan_makes_the_block_scale_nan() -> None:
    x = np.linspace(-1, 1, 48)
    x[20] = math.inf
    x[40] = math.nan
    quantized = quantize(x, "nvfp4")
    # The per-tensor amax is over the finite elements: 1 / 2688 rounded to FP32.
    assert quantized.tensor_scale == float(np.float32(1 / 2688))
    assert quantized.scale_codes.tolist() == [0x7E, 0x7E, 0x7F]  # 448, 448 (inf), NaN
    assert quantized.codes[20] == 0x7  # +6: saturated
    assert quantized.values[20] == 6 * 448 * quantized.tensor_scale
    assert np.isnan(quantized.values[32:]).all()
    block = quantize_block_exact(list(x[16:32]), "nvfp4", tensor_scale=quantized.tensor_scale)
    assert block.scale_code == 0x7E and block.codes[4] == 0x7


def test_zero_blocks_take_the_smallest_scale_and_keep_signs() -> None:
    x = np.array([0.0, -0.0] * 16)
    mx = quantize(x, "mxfp8_e4m3")
    assert mx.scale_codes.tolist() == [0]
    assert mx.codes.tolist() == [0x00, 0x80] * 16
    assert np.signbit(mx.values).tolist() == [False, True] * 16
    nv = quantize(x[:16], "nvfp4")
    assert nv.tensor_scale == 1.0 and nv.scale_codes.tolist() == [0x08]  # 2**-6
    assert nv.codes.tolist() == [0x0, 0x8] * 8
    assert quantize(x, "mxint8").codes.tolist() == [0] * 32  # no -0 in INT8
    assert mx.tensor_stats().sqnr_db == math.inf and mx.tensor_stats().max_abs_error == 0


def test_a_block_whose_amax_is_subnormal_in_the_element_format() -> None:
    # E4M3's subnormals are k·2**-9; with the scale clamped at 2**-127 an amax of
    # 3·2**-137 is 3·2**-10 in element units: subnormal, and 2**-138 rounds to a tie.
    x = np.zeros(32)
    x[:4] = [3 * 2.0**-137, 2.0**-137, 2.0**-138, 2.0**-139]
    quantized = quantize(x, "mxfp8_e4m3")
    assert quantized.scale_codes[0] == 0
    assert quantized.codes[:4].tolist() == [0x02, 0x00, 0x00, 0x00]  # 1.5 → 2, 0.5 → 0
    assert quantized.values[0] == 2 * 2.0**-136
    stats = quantized.block_stats()
    assert stats.share_flushed[0] == 3 / 32
    assert quantize_block_exact(list(x), "mxfp8_e4m3").codes[:4] == (2, 0, 0, 0)


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "mxint8"])
def test_a_short_tail_is_a_block_of_its_own(name: str) -> None:
    fmt = get_block_format(name)
    rng = np.random.default_rng(7)
    length = fmt.block_size * 2 + 5
    x = rng.standard_normal((3, length)) * 10
    quantized = quantize(x, fmt)
    assert quantized.codes.shape == x.shape and quantized.scale_codes.shape == (3, 3)
    for r in range(3):
        tail = list(x[r, -5:])
        block = quantize_block_exact(tail, fmt, tensor_scale=quantized.tensor_scale)
        assert block.scale_code == quantized.scale_codes[r, 2]
        assert list(block.codes) == quantized.codes[r, -5:].tolist()
    assert quantized.block_stats().count[:, 2].tolist() == [5, 5, 5]


def test_axis_chooses_the_direction_of_the_blocks() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 3, 5)).astype(np.float32)
    along_first = quantize(x, "mxfp6_e3m2", axis=0)
    moved = quantize(np.moveaxis(x, 0, -1), "mxfp6_e3m2")
    assert along_first.scale_codes.shape == (2, 3, 5)
    assert np.array_equal(np.moveaxis(along_first.codes, 0, -1), moved.codes)
    assert np.array_equal(np.moveaxis(along_first.scale_codes, 0, -1), moved.scale_codes)
    assert np.array_equal(np.moveaxis(along_first.values, 0, -1), moved.values)
    assert np.array_equal(
        dequantize(along_first.codes, along_first.scale_codes, "mxfp6_e3m2", axis=0),
        along_first.values,
    )


def test_forced_scale_codes_move_every_element() -> None:
    x = np.array([1.0, -0.75, 0.3, 5.0] + [0.0] * 28)
    natural = quantize(x, "mxfp4")
    assert natural.scale_codes[0] == 127  # floor(log2 5) - 2 = 0
    doubled = quantize(x, "mxfp4", scale_codes=128)  # one scale bit toggled: ×2
    assert doubled.values[:4].tolist() == [1.0, -1.0, 0.0, 4.0]
    assert doubled.codes[:4].tolist() == [0x1, 0x9, 0x0, 0x4]
    nan = quantize(x, "mxfp4", scale_codes=0xFF)
    assert np.isnan(nan.values).all()
    editor = quantize_block_exact(list(x), "mxfp4", scale_code=128)
    assert list(editor.codes) == doubled.codes.tolist()
    with pytest.raises(ValueError, match="non-negative"):
        quantize(x[:16], "nvfp4", scale_codes=0x80)
    with pytest.raises(ValueError, match=r"0\.\.0xff"):
        quantize(x, "mxfp4", scale_codes=256)
    with pytest.raises(ValueError, match="do not fit"):
        quantize(x, "mxfp4", scale_codes=[1, 2, 3])
    zero_scale = quantize(x[:16], "nvfp4", scale_codes=0, tensor_scale=1)
    assert zero_scale.codes[:4].tolist() == [0x7, 0xF, 0x7, 0x7]  # x / 0 saturates
    assert (zero_scale.values == 0).all()


def test_bad_input_is_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="empty"):
        quantize(np.array([]), "mxfp4")
    with pytest.raises(ValueError, match="axis 2"):
        quantize(np.ones((2, 2)), "mxfp4", axis=2)
    with pytest.raises(ValueError, match="array of numbers"):
        quantize(np.array(["a"]), "mxfp4")
    with pytest.raises(ValueError, match="rounding"):
        quantize(np.ones(4), "mxfp4", "sideways")
    with pytest.raises(ValueError, match=r"1\.\.32 values"):
        quantize_block_exact([1.0] * 33, "mxfp4")
    with pytest.raises(ValueError, match="positive FP32"):
        quantize(np.ones(4), "nvfp4", tensor_scale=0)
    assert quantize(np.array([1, 2, 3]), "mxint8").values.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("name", MX_NAMES)
def test_a_tensor_scale_for_a_format_without_one_is_refused(name: str) -> None:
    """MX has no per-tensor scale: one given was ignored, leaving the caller believing it
    applied. Every entry that takes it refuses it, naming the format."""
    message = f"{name} has no per-tensor scale"
    with pytest.raises(ValueError, match=message):
        quantize(np.ones(4), name, tensor_scale=0.5)
    with pytest.raises(ValueError, match=message):
        quantize_block_exact([1.0, 2.0], name, tensor_scale=0.5)
    codes = quantize(np.ones(4), name)
    with pytest.raises(ValueError, match=message):
        dequantize(codes.codes, codes.scale_codes, name, tensor_scale=0.5)


# ---- error statistics --------------------------------------------------------------------


def test_error_statistics_per_block_and_per_tensor() -> None:
    x = np.zeros(64)
    x[:4] = [4.0, 3.1, 0.01, -7.0]  # block 0: amax 7 → scale 1 (FP4 grid 0..6)
    x[32:36] = [1.0, 0.5, 0.25, 0.0]  # block 1: exact
    quantized = quantize(x, "mxfp4")
    assert quantized.scales.tolist() == [1.0, 0.25]
    assert quantized.values[:4].tolist() == [4.0, 3.0, 0.0, -6.0]
    stats = quantized.block_stats()
    assert stats.count.tolist() == [32, 32]
    assert stats.max_abs_error.tolist() == [1.0, 0.0]
    squared = float(np.sum((quantized.values[:32] - x[:32]) ** 2))
    assert stats.rmse[0] == pytest.approx(math.sqrt(squared / 32))
    assert stats.share_saturated.tolist() == [1 / 32, 0.0]  # -7 beyond ±6 × 1
    assert stats.share_flushed.tolist() == [1 / 32, 0.0]  # 0.01
    signal = float(np.sum(x[:32] ** 2))
    assert stats.sqnr_db[0] == pytest.approx(10 * math.log10(signal / squared))
    assert stats.sqnr_db[1] == math.inf
    whole = quantized.tensor_stats()
    assert whole.count == 64 and whole.max_abs_error == 1.0
    assert whole.share_saturated == 1 / 64 and whole.share_flushed == 1 / 64
    assert whole.rmse == pytest.approx(math.sqrt(squared / 64))
    # A finite input in a NaN block has an infinite error: nothing is hidden.
    x[40] = math.nan
    broken = quantize(x, "mxfp4")
    assert broken.block_stats().count.tolist() == [32, 31]
    assert broken.tensor_stats().max_abs_error == math.inf
    assert broken.tensor_stats().sqnr_db == -math.inf


# ---- properties --------------------------------------------------------------------------

finite_floats = st.floats(
    min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, allow_infinity=False, width=32
)


@pytest.mark.slow  # a property test over many blocks: about a second
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ALL),
    st.lists(finite_floats, min_size=1, max_size=32),
)
def test_dequantized_values_are_within_the_documented_bound(
    fmt: BlockFormat, values: list[float]
) -> None:
    """Each element is off by at most half a step of the element grid at its magnitude
    (times the scale), or, when saturated, by its distance beyond ±max × scale; flushed
    elements by at most half the smallest step."""
    values = values[: fmt.block_size]
    block = quantize_block_exact(values, fmt)
    multiplier = block.multiplier
    assert multiplier is not None
    element = fmt.element
    decoded = [element.to_exact(c) for c in range(1 << element.width)]
    grid = sorted({v.fraction for v in decoded if v.is_finite})
    for x, value in zip(block.inputs, block.values, strict=True):
        exact = x.fraction
        scaled = abs(exact) / multiplier
        if scaled >= element.max:
            bound = (scaled - element.max) * multiplier
        else:
            above = min(g for g in grid if g >= scaled)
            below = max(g for g in grid if g <= scaled)
            bound = (above - below) / 2 * multiplier
        assert abs(value.fraction - exact) <= bound


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(
        [get_block_format(name, rule) for name in MX_NAMES for rule in SCALE_RULES[:4]]
    ),
    st.lists(finite_floats.filter(lambda v: abs(v) > 1e-20), min_size=1, max_size=32),
    st.integers(min_value=-40, max_value=40),
)
def test_scaling_a_block_by_a_power_of_two_shifts_only_the_scale(
    fmt: BlockFormat, values: list[float], shift: int
) -> None:
    block = quantize_block_exact(values, fmt)
    moved = quantize_block_exact([Fraction(v) * Fraction(2) ** shift for v in values], fmt)
    if block.scale_code in (0, 255) or block.scale_code + shift not in range(1, 255):
        return  # the scale clamped or overflowed: a different block, by the rules
    assert moved.scale_code == block.scale_code + shift
    assert moved.codes == block.codes


def test_module_exports_from_the_package() -> None:
    import fpexplorer.formats as formats

    for name in ("BlockFormat", "QuantizedTensor", "quantize", "quantize_block_exact"):
        assert getattr(formats, name) is not None
    assert formats.quantize is block_quantize.quantize


@pytest.mark.parametrize("name", ["mxfp8_e5m2", "nvfp4", "mxint8"])
def test_exact_error_stats_agree_with_the_vectorized_ones(name: str) -> None:
    from fpexplorer.formats import exact_error_stats, tensor_scale_for

    fmt = get_block_format(name)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(fmt.block_size * 5) * np.exp2(rng.integers(-8, 8, fmt.block_size * 5))
    x[3] = 0.0
    quantized = quantize(x, fmt)
    scale = None
    if fmt.tensor_scale:
        scale = tensor_scale_for(float(np.abs(x).max()))
        assert float(scale) == quantized.tensor_scale
    blocks = [
        quantize_block_exact(list(x[i : i + fmt.block_size]), fmt, tensor_scale=scale)
        for i in range(0, x.size, fmt.block_size)
    ]
    exact, vector = exact_error_stats(blocks), quantized.tensor_stats()
    assert exact.count == vector.count == x.size
    assert exact.max_abs_error == vector.max_abs_error
    assert exact.rmse == pytest.approx(vector.rmse, rel=1e-12)
    assert exact.sqnr_db == pytest.approx(vector.sqnr_db, rel=1e-12)
    assert (exact.share_saturated, exact.share_flushed) == (
        vector.share_saturated,
        vector.share_flushed,
    )
    per_block = quantized.block_stats()
    for i, block in enumerate(blocks):
        assert exact_error_stats([block]).max_abs_error == per_block.max_abs_error[i]
    assert tensor_scale_for(0) == 1 and tensor_scale_for(Fraction(1, 2**200)) == Fraction(1, 2**149)


def test_dequantize_inverts_quantize_and_needs_the_nvfp4_tensor_scale() -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 48))
    for name in ("nvfp4", "mxfp8_e5m2", "mxint8"):
        quantized = quantize(x, name)
        again = dequantize(
            quantized.codes, quantized.scale_codes, name, tensor_scale=quantized.tensor_scale
        )
        assert np.array_equal(again, quantized.values)
    with pytest.raises(ValueError, match="per-tensor scale"):
        dequantize(quantized.codes[:, :16], [[0x38]] * 4, "nvfp4")


def test_stochastic_rounding_is_seeded_and_draws_per_element() -> None:
    x = np.full(32 * 200, 0.3)
    x[::32] = 4.0  # amax 4: scale 1, and 0.3 lies between 0 and 0.5 (rounds up with p 0.6)
    first = quantize(x, "mxfp4", "stochastic", seed=5)
    assert np.array_equal(first.codes, quantize(x, "mxfp4", "stochastic", seed=5).codes)
    ups = (first.values == 0.5).sum() / (x.size - 200)
    assert 0.55 < ups < 0.65
    block = quantize_block_exact(list(x[:32]), "mxfp4", "stochastic", seed=5)
    outcomes = {v.to_float() for v in block.values[1:]}
    assert outcomes == {0.0, 0.5}  # not one draw for the whole block
    assert block == quantize_block_exact(list(x[:32]), "mxfp4", "stochastic", seed=5)


@pytest.mark.parametrize("name", MX_NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.slow  # a sweep, every MX element format at every rounding boundary: ~1.5 s in all
def test_mx_elements_next_to_every_rounding_boundary(name: str, dtype: type) -> None:
    """Every element value and midpoint, and one float step either side, under scales from
    2**-127 to 2**20: the vectorized path (float32 stays float32 there) equals the exact."""
    fmt = get_block_format(name)
    element = fmt.element
    decoded = [element.to_exact(c) for c in range(1 << element.width)]
    grid = sorted({v.magnitude for v in decoded if v.is_finite})
    boundaries = grid + [(a + b) / 2 for a, b in itertools.pairwise(grid)]
    for exponent in (-127, -100, -3, 0, 20):
        scale = 2.0**exponent
        centers = np.array([float(b) * scale for b in boundaries], dtype=dtype)
        x = np.concatenate(
            [centers, np.nextafter(centers, dtype(np.inf)), np.nextafter(centers, dtype(0))]
        )
        x = np.concatenate([x, -x])
        for mode in ("nearest_even", "toward_zero"):
            quantized = quantize(x, fmt, mode, scale_codes=exponent + 127)
            for start in range(0, x.size, 32):
                block = quantize_block_exact(
                    list(x[start : start + 32]), fmt, mode, scale_code=exponent + 127
                )
                assert list(block.codes) == quantized.codes[start : start + 32].tolist()


def test_per_element_flags_and_worst_blocks() -> None:
    block = quantize_block_exact([7, 0.01, -3, math.inf, 0], "mxfp4", scale_code=127)
    assert block.saturated == (True, False, False, True, False)
    assert block.flushed == (False, True, False, False, False)
    x = np.ones((2, 96))
    x[1, 40] = 1000.0  # block (1, 1): the others flush to zero
    x[0, 70] = 1.3  # block (0, 2): a small error
    quantized = quantize(x, "mxfp4")
    assert quantized.worst_blocks(2) == [(1, 1), (0, 2)]
    assert len(quantized.worst_blocks(99)) == 6 and quantized.worst_blocks(0) == []


def test_nvfp4_block_scales_next_to_every_e4m3_boundary() -> None:
    e4m3 = get_format("e4m3")
    decoded = [e4m3.to_exact(c) for c in range(0x7F)]
    grid = sorted({v.magnitude for v in decoded if v.is_finite})
    boundaries = grid + [(a + b) / 2 for a, b in itertools.pairwise(grid)]
    tensor_scale = float(np.float32(1 / 3))
    centers = np.array([float(b) * 6 * tensor_scale for b in boundaries])
    amaxes = np.concatenate(
        [centers, np.nextafter(centers, np.inf), np.nextafter(centers, 0)]
    ).astype(np.float32)
    blocks = np.zeros((amaxes.size, 16), dtype=np.float32)
    blocks[:, 0] = amaxes
    quantized = quantize(blocks, "nvfp4", tensor_scale=tensor_scale)
    for row, code in zip(blocks, quantized.scale_codes[:, 0], strict=True):
        assert (
            quantize_block_exact(list(row), "nvfp4", tensor_scale=tensor_scale).scale_code == code
        )


any_float32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


@pytest.mark.slow  # a property test over many blocks: a third of a second
@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(ALL),
    st.lists(any_float32, min_size=1, max_size=40),
    st.sampled_from(["nearest_even", "toward_negative"]),
)
def test_vectorized_equals_exact_on_any_float32_block(
    fmt: BlockFormat, values: list[float], rounding: str
) -> None:
    x = np.array(values, dtype=np.float32)
    quantized = quantize(x, fmt, rounding)
    scale = None if quantized.tensor_scale is None else Fraction(quantized.tensor_scale)
    for number, start in enumerate(range(0, x.size, fmt.block_size)):
        chunk = [float(v) for v in x[start : start + fmt.block_size]]
        block = quantize_block_exact(chunk, fmt, rounding, tensor_scale=scale)
        assert block.scale_code == quantized.scale_codes[number]
        assert list(block.codes) == quantized.codes[start : start + fmt.block_size].tolist()
        exact = [v.to_float() for v in block.values]
        vector = quantized.values[start : start + fmt.block_size].tolist()
        assert all(
            a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(exact, vector, strict=True)
        )


def test_nvfp4_tensor_scale_saturates_where_amax_over_2688_overflows_fp32() -> None:
    # amax / 2688 beyond FP32's max (float64 or typed values from ~9.1e41) rounded to inf
    # and raised "code 0x7f800000 of float32 is inf, not a finite number": the CLI said so
    # and the block editor's readout threw. It gets FP32's max, as a quotient that rounds
    # to zero gets the smallest subnormal.
    fp32_max = float(np.finfo(np.float32).max)
    exact = quantize_block_exact(["1e42", "1", "-3e41"], "nvfp4")
    assert exact.tensor_scale == Fraction(fp32_max) and exact.scale == 448
    vectorized = quantize(np.array([1e42, 1.0, -3e41]), "nvfp4")
    assert vectorized.tensor_scale == fp32_max
    assert list(vectorized.codes.ravel()) == list(exact.codes)
    assert list(vectorized.values.ravel()) == [float(v.fraction) for v in exact.values]


def test_dequantize_checks_its_arguments_as_quantize_does() -> None:
    # axis 2 of a 1-d array was read as axis 0, scale codes of the wrong shape failed in
    # numpy's broadcast ("remapped shapes").
    x = np.linspace(-3, 3, 40)
    q = quantize(x, "mxfp4")
    assert np.array_equal(dequantize(q.codes, q.scale_codes, "mxfp4"), q.values)
    with pytest.raises(ValueError, match="axis 2 is out of range for an array of 1 dimensions"):
        dequantize(q.codes, q.scale_codes, "mxfp4", axis=2)
    with pytest.raises(ValueError, match=r"scale_codes of shape \(3,\) do not fit the scale grid"):
        dequantize(q.codes, np.array([127, 127, 127]), "mxfp4")


def test_tensor_scale_for_given_the_tensor_says_it_takes_its_amax() -> None:
    x = np.array([0.5, -3.0, 2.0])
    assert tensor_scale_for(np.abs(x).max()) == tensor_scale_for(3)
    with pytest.raises(ValueError, match=r"takes the tensor's amax, one number"):
        tensor_scale_for(x)
