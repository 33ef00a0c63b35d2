"""The torch block quantizer (`training.lowprec.block_torch`) and the per-tensor cast
(`training.lowprec.tensorwise`) against independent oracles: the exact numpy quantizer
(bit for bit, every block format and scale rule), torchao's `MXTensor` / `NVFP4Tensor`,
torch's own float8 casts, and the engine's scalar rounding for stochastic rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import MXTensor
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

from fpexplorer.formats import get_block_format, get_format, quantize
from fpexplorer.formats.block import POWER_OF_TWO_RULES, BlockFormat, list_block_formats
from fpexplorer.training.lowprec.block_torch import quantize_blocks, quantize_tiles
from fpexplorer.training.lowprec.tensorwise import quantize_tensorwise

FORMATS_AND_RULES = [
    (fmt.name, rule)
    for fmt in list_block_formats()
    for rule in (POWER_OF_TWO_RULES if fmt.power_of_two_scale else ("nearest",))
]


def _tensor(seed: int, shape: tuple[int, ...] = (40, 250), special: bool = True) -> np.ndarray:
    """Values over 80 binades per row, outliers, zeros of both signs, FP32 subnormals, huge
    values near FP32's max, all-zero and all-subnormal stretches, inf and NaN; float32."""
    rng = np.random.default_rng(seed)
    rows = int(np.prod(shape[:-1]))
    cols = shape[-1]
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-40, 40, (rows, 1)))
    outliers = rng.random((rows, cols)) < 0.01
    x[outliers] *= np.exp2(rng.integers(5, 30, outliers.sum()))
    x[rng.random((rows, cols)) < 0.05] = 0.0
    x[rng.random((rows, cols)) < 0.01] = -0.0
    subnormal = rng.random((rows, cols)) < 0.01
    x[subnormal] = rng.standard_normal(subnormal.sum()) * 2.0**-140
    x[0, :] = 0.0  # all-zero blocks
    clamped = min(40, cols)  # blocks clamped at the smallest scale:
    x[1, :clamped] = rng.standard_normal(clamped) * 2.0**-135
    x[2, :] = rng.standard_normal(cols) * 2.0**125  # near FP32's max (3.4e38)
    x[3, 7] = np.float32(3.4e38)
    if special:
        x[rng.random((rows, cols)) < 0.002] = math.inf
        x[rng.random((rows, cols)) < 0.002] = -math.inf
        x[rng.random((rows, cols)) < 0.002] = math.nan
    return x.astype(np.float32).reshape(shape)


def _bits_equal(ours: torch.Tensor, reference: np.ndarray) -> np.ndarray:
    """Per element: the same float32 bits (so -0 differs from +0), or both NaN. The exact
    float64 reference rounds to float32 as torch's values did (2**128, which the CEIL rule
    gives at the top of FP32's range, becomes inf in both)."""
    a = ours.detach().numpy().astype(np.float32)
    with np.errstate(over="ignore"):
        b = np.asarray(reference).astype(np.float32)
    result: np.ndarray = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    return result


@pytest.mark.parametrize(("name", "rule"), FORMATS_AND_RULES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_bit_for_bit_equal_to_the_numpy_quantizer(name: str, rule: str, axis: int) -> None:
    fmt = get_block_format(name, rule)
    x = _tensor(1)  # 250 columns: a tail of 26 (MX) or 10 (NVFP4) elements
    reference = quantize(x, fmt, axis=axis)
    ours = quantize_blocks(torch.from_numpy(x), fmt, axis=axis)
    assert ours.values.dtype == torch.float32 and ours.values.shape == x.shape
    assert _bits_equal(ours.values, reference.values).all()
    assert ours.block_scales.shape == reference.scales.shape
    assert _bits_equal(ours.block_scales, reference.scales).all()
    if fmt.tensor_scale:
        assert ours.per_tensor_scale is not None
        assert float(ours.per_tensor_scale) == reference.tensor_scale
    else:
        assert ours.per_tensor_scale is None
    # The data really holds the cases named in _tensor.
    if axis == 0:
        return
    bottom = 2.0**-127 if fmt.power_of_two_scale else float(fmt.scale_format.min_normal)
    assert np.isnan(reference.scales).any() and (reference.scales == bottom).any()


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "mxint8", "nvfp4"])
def test_three_dimensional_tensors_blocked_along_the_middle_axis(name: str) -> None:
    x = _tensor(3, shape=(3, 37, 20))
    reference = quantize(x, name, axis=1)
    ours = quantize_blocks(torch.from_numpy(x), name, axis=1)
    assert _bits_equal(ours.values, reference.values).all()
    assert _bits_equal(ours.block_scales, reference.scales).all()


@pytest.mark.parametrize("name", ["mxfp6_e3m2", "nvfp4"])
def test_single_values_and_tiny_tensors(name: str) -> None:
    for values in ([0.0], [-0.0], [1e-40], [3.0e38], [-7.25], [math.inf], [math.nan], [1.0, -2.0]):
        x = np.array(values, dtype=np.float32)
        ours = quantize_blocks(torch.from_numpy(x), name)
        assert _bits_equal(ours.values, quantize(x, name).values).all()
    scalar = quantize_blocks(torch.tensor(-5.5), name)
    assert scalar.values.shape == () and scalar.block_scales.shape == ()
    assert _bits_equal(scalar.values, quantize(np.float32(-5.5), name).values[0]).all()


def test_nvfp4_with_a_forced_per_tensor_scale() -> None:
    x = _tensor(4, special=False)
    for forced in (1.0, 0.1, 3.0e-3, torch.tensor(0.1, dtype=torch.float64)):
        number = float(forced)
        reference = quantize(x, "nvfp4", tensor_scale=number)
        ours = quantize_blocks(torch.from_numpy(x), "nvfp4", per_tensor_scale=forced)
        assert ours.per_tensor_scale is not None
        assert float(ours.per_tensor_scale) == reference.tensor_scale
        assert _bits_equal(ours.values, reference.values).all()


def test_half_precision_inputs_are_read_exactly() -> None:
    x = _tensor(5, special=False)
    for dtype in (torch.bfloat16, torch.float16):
        narrow = torch.from_numpy(x).to(dtype)
        widened = narrow.float().numpy()
        reference = quantize(widened, "mxfp8_e4m3")
        ours = quantize_blocks(narrow, "mxfp8_e4m3")
        assert ours.values.dtype == dtype
        # MX values of float32 inputs are exact in float32; in the narrow dtype they are
        # rounded once, as torch rounds the exact reference.
        with np.errstate(over="ignore"):
            exact = torch.from_numpy(reference.values.astype(np.float32))
        assert torch.equal(ours.values.view(torch.int16), exact.to(dtype).view(torch.int16))


def test_a_custom_block_format_is_read_from_the_engine() -> None:
    # E3M3 elements in blocks of 8 under the CEIL rule: no hand-typed table could know it.
    fmt = BlockFormat("e3m3x8", get_format("e3m3"), 8, get_format("float8_e8m0fnu"), "ceil")
    x = _tensor(6)
    reference = quantize(x, fmt)
    assert _bits_equal(quantize_blocks(torch.from_numpy(x), fmt).values, reference.values).all()


# ---- torchao --------------------------------------------------------------------------

TORCHAO_ELEMENTS = {
    "mxfp8_e4m3": torch.float8_e4m3fn,
    "mxfp8_e5m2": torch.float8_e5m2,
    "mxfp6_e2m3": "fp6_e2m3",
    "mxfp6_e3m2": "fp6_e3m2",
    "mxfp4": torch.float4_e2m1fn_x2,
}


@pytest.mark.parametrize("mode", list(ScaleCalculationMode), ids=lambda m: m.value)
@pytest.mark.parametrize("name", list(TORCHAO_ELEMENTS))
def test_equal_to_torchao_mx_dequantized(name: str, mode: ScaleCalculationMode) -> None:
    # torchao departs from the spec in blocks holding inf or NaN and in blocks clamped at
    # the smallest scale (tests/formats/test_block_oracles.py pins where); elsewhere the
    # dequantized values agree bit for bit.
    x = _tensor(7, shape=(40, 256))
    x[1, :] = 0.5  # replaces the smallest-scale blocks of _tensor
    torchao = MXTensor.to_mx(torch.from_numpy(x), TORCHAO_ELEMENTS[name], 32, scaling_mode=mode)
    theirs = torchao.dequantize(torch.float32).numpy()
    ours = quantize_blocks(torch.from_numpy(x), get_block_format(name, mode.value))
    special = ~np.isfinite(x).reshape(40, -1, 32).all(axis=-1)
    ordinary = np.repeat(~special, 32, axis=1)
    assert ordinary.mean() > 0.8
    assert _bits_equal(ours.values, theirs)[ordinary].all()
    assert torch.isnan(ours.values[torch.from_numpy(~ordinary)]).all()


@pytest.mark.parametrize("seed", [8, 9])
def test_equal_to_torchao_nvfp4_codes_and_scales(seed: int) -> None:
    x = _tensor(seed, shape=(40, 128), special=False)
    per_tensor = torch.tensor(np.abs(x).max(), dtype=torch.float32) / (448 * 6)
    nvfp4 = NVFP4Tensor.to_nvfp4(torch.from_numpy(x), 16, per_tensor_scale=per_tensor)
    ours = quantize_blocks(torch.from_numpy(x), "nvfp4")
    assert ours.per_tensor_scale is not None and float(ours.per_tensor_scale) == float(per_tensor)
    block_scales = nvfp4.scale.float()
    assert torch.equal(ours.block_scales, block_scales)
    # torchao's own dequantize rounds s_block × s_global first; from its codes and scales,
    # the exact product rounded once is what a correct dequantization gives.
    codes = unpack_uint4(nvfp4.qdata.contiguous().view(torch.uint8)).numpy().reshape(x.shape)
    elements = get_format("fp4").to_float_array(codes)
    exact = elements * np.repeat(block_scales.double().numpy(), 16, axis=1) * float(per_tensor)
    assert _bits_equal(ours.values, exact).all()


# ---- stochastic rounding --------------------------------------------------------------


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4"])
def test_stochastic_rounding_has_the_exact_probabilities(name: str) -> None:
    # One block whose multiplier is 1 (amax 6 = max of E2M1; NVFP4 with s_global forced to
    # 1), so each value sits at a known fraction of the gap between two E2M1 neighbours.
    cases = [  # value, lower neighbour, upper neighbour (by magnitude)
        (2.25, 2.0, 3.0),
        (0.75, 0.5, 1.0),
        (4.5, 4.0, 6.0),
        (-1.125, -1.0, -1.5),
        (5.5, 4.0, 6.0),
        (0.125 + 2.0**-20, 0.0, 0.5),
    ]
    block = [6.0] + [value for value, _, _ in cases]
    draws = 20_000
    x = torch.tensor([block] * draws, dtype=torch.float32)
    generator = torch.Generator().manual_seed(12)
    forced = 1.0 if name == "nvfp4" else None
    q = quantize_blocks(x, name, stochastic=True, generator=generator, per_tensor_scale=forced)
    assert (q.block_scales == 1.0).all()
    for column, (value, low, high) in enumerate(cases, start=1):
        got = q.values[:, column]
        assert ((got == low) | (got == high)).all()
        p_up = (abs(value) - abs(low)) / (abs(high) - abs(low))
        share_up = float((got == high).double().mean())
        sigma = math.sqrt(p_up * (1 - p_up) / draws)
        assert abs(share_up - p_up) < 5 * sigma
        # Unbiased: the mean of the rounded values approaches the value itself.
        mean_error = float(got.double().mean()) - value
        assert abs(mean_error) < 5 * sigma * (abs(high) - abs(low))
    assert (q.values[:, 0] == 6.0).all()


@pytest.mark.parametrize("name", ["mxfp8_e5m2", "mxfp4", "mxint8", "nvfp4"])
def test_stochastic_rounding_gives_one_of_the_two_neighbours(name: str) -> None:
    x = _tensor(10, special=False)
    down = quantize(x, name, "toward_negative").values.astype(np.float32)
    up = quantize(x, name, "toward_positive").values.astype(np.float32)
    generator = torch.Generator().manual_seed(3)
    ours = quantize_blocks(torch.from_numpy(x), name, stochastic=True, generator=generator)
    either = _bits_equal(ours.values, down) | _bits_equal(ours.values, up)
    # -0 and +0 both stand for zero between a tiny negative value's neighbours.
    either |= (ours.values.numpy() == 0) & ((down == 0) | (up == 0))
    assert either.all()
    assert (ours.values.numpy() != down).any() and (ours.values.numpy() != up).any()


def test_stochastic_rounding_is_deterministic_under_a_seeded_generator() -> None:
    x = torch.from_numpy(_tensor(11, special=False))

    def draw(seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return quantize_blocks(x, "nvfp4", stochastic=True, generator=generator).values

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))


# ---- bad input ------------------------------------------------------------------------


def test_bad_input_gets_a_clear_message() -> None:
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        quantize_blocks(torch.zeros(4, dtype=torch.float64), "mxfp4")
    with pytest.raises(ValueError, match="empty"):
        quantize_blocks(torch.zeros(0), "mxfp4")
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        quantize_blocks(torch.zeros(3, 4), "mxfp4", axis=2)
    with pytest.raises(ValueError, match="unknown block format"):
        quantize_blocks(torch.zeros(4), "mxfp3")
    with pytest.raises(ValueError, match="positive FP32"):
        quantize_blocks(torch.zeros(4), "nvfp4", per_tensor_scale=0.0)
    with pytest.raises(ValueError, match="positive FP32"):
        quantize_blocks(torch.zeros(4), "nvfp4", per_tensor_scale=1e-50)
    # MX has no per-tensor scale: one given was ignored, the caller believing it applied.
    with pytest.raises(ValueError, match="mxfp4 has no per-tensor scale"):
        quantize_blocks(torch.zeros(4), "mxfp4", per_tensor_scale=0.5)
    with pytest.raises(ValueError, match="mxfp8_e4m3 has no per-tensor scale"):
        quantize_tiles(torch.zeros(4, 4), "mxfp8_e4m3", per_tensor_scale=torch.tensor(0.5))
    no_subnormals = BlockFormat(
        "flush", get_format("e4m3:subnormals=off"), 32, get_format("float8_e8m0fnu")
    )
    with pytest.raises(ValueError, match="no subnormals"):
        quantize_blocks(torch.zeros(4), no_subnormals)


# ---- per-tensor casts -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype"), [("float8_e4m3fn", torch.float8_e4m3fn), ("float8_e5m2", torch.float8_e5m2)]
)
def test_tensorwise_equals_torchs_float8_cast(name: str, dtype: torch.dtype) -> None:
    x = torch.from_numpy(_tensor(12, special=True))
    fp8_max = float(torch.finfo(dtype).max)
    finite = x[torch.isfinite(x)]
    amax = float(finite.abs().max())
    for scale in (fp8_max / amax, 1.0, 2.0**40, 3.7e-3, torch.tensor(fp8_max / 1000.0)):
        ours = quantize_tensorwise(x, name, scale)
        s = ours.scale
        theirs = (x * s).clamp(-fp8_max, fp8_max).to(dtype).float() / s
        assert _bits_equal(ours.values, theirs.numpy()).all()
        assert _bits_equal(ours.scaled_input(), (x * s).numpy()).all()


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_tensorwise_into_narrow_formats_equals_the_engine(name: str) -> None:
    x = _tensor(13, special=False)
    scale = np.float32(0.37)
    fmt = get_format(name)
    scaled = x * scale  # float32, as the cast sees it
    codes = fmt.from_float_array(scaled, "nearest_even", overflow="saturate")
    expected = (fmt.to_float_array(codes).astype(np.float32) / scale).astype(np.float32)
    ours = quantize_tensorwise(torch.from_numpy(x), name, float(scale))
    assert _bits_equal(ours.values, expected).all()


@pytest.mark.parametrize(
    ("name", "dtype"), [("float8_e4m3fn", torch.float8_e4m3fn), ("float8_e5m2", torch.float8_e5m2)]
)
def test_one_scale_per_row_or_column_equals_torchs_float8_cast(
    name: str, dtype: torch.dtype
) -> None:
    x = torch.from_numpy(_tensor(14, special=True))
    fp8_max = float(torch.finfo(dtype).max)
    rows, cols = x.shape
    generator = torch.Generator().manual_seed(5)
    for shape in ((rows, 1), (1, cols)):
        scale = torch.exp2(torch.randint(-60, 60, shape, generator=generator).float()) * 1.37
        ours = quantize_tensorwise(x, name, scale)
        assert not ours.per_tensor and ours.scale.shape == shape
        theirs = (x * scale).clamp(-fp8_max, fp8_max).to(dtype).float() / scale
        assert _bits_equal(ours.values, theirs.numpy()).all()
    assert quantize_tensorwise(x, name, torch.tensor(2.0)).per_tensor


def test_tensorwise_bad_input() -> None:
    with pytest.raises(ValueError, match=r"scales of shape \(3, 1\) do not broadcast"):
        quantize_tensorwise(torch.ones(4, 2), "e4m3", torch.ones(3, 1))
    with pytest.raises(ValueError, match="do not broadcast"):
        quantize_tensorwise(torch.ones(4), "e4m3", torch.ones(1, 4))
    with pytest.raises(ValueError, match="positive float32"):
        quantize_tensorwise(torch.ones(3), "e4m3", -1.0)
    with pytest.raises(ValueError, match="float64"):
        quantize_tensorwise(torch.ones(3, dtype=torch.float64), "e4m3", 1.0)
    with pytest.raises(ValueError, match="e9m9x"):
        quantize_tensorwise(torch.ones(3), "e9m9x", 1.0)
