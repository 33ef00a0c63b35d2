"""Block formats against independent implementations: torchao (`MXTensor.to_mx`,
`NVFP4Tensor.to_nvfp4`, emulated on CPU) and gfloat (`encode_block`, `compute_scale_amax`).

Bit for bit on random tensors with outliers, zeros, subnormals, inf and NaN. Where an oracle
departs from the OCP MX v1.0 spec (or from the rule it implements), the engine keeps the
spec and a test below pins the difference:

torchao 0.18
- MX, a block holding ±inf: torchao reads the FP32 exponent field of inf (128) and gives a
  finite scale 2**(128 - emax_elem) (RCEIL: 0xFE), saturating the inf and flushing the rest;
  the spec's floor(log2(inf)) - emax is above 127, so the engine's scale is NaN.
- MX, a block clamped at the smallest scale (amax < 2**(emax_elem - 126)): the scale code
  is 0 (2**-127) in both, but torchao divides by 2**-126 (it clamps the FP32 scale to the
  smallest normal), so its elements are half the spec's and dequantize to half the input.
- MX RCEIL: torchao takes ceil(torch.log2(amax / max_elem)) in float32; log2 of a value
  just above 2**k rounds to k exactly for large |k|, one scale too small (the element then
  saturates). The engine compares exactly, as Transformer Engine's integer rule does.
- MX, a NaN block: the scale is NaN (0xFF) in both; torchao's element codes are whatever
  x / inf gave, the engine's are 0 (every value of the block is NaN either way).
- NVFP4: torchao computes the block scale in float32, (amax / 6) / s_global, and that
  quotient can round onto an E4M3 midpoint, tipping the scale one step (double rounding);
  the engine rounds the exact quotient once. Elsewhere codes and scales agree bit for bit.
  torchao dequantizes in float32 as element × FP32(s_block × s_global) (two roundings),
  the engine exactly in float64.

gfloat 0.5.2
- it takes floor(np.log2(amax)) in float64, which rounds up just below a power of two
  (2**100·(1 - 2**-53) gives 100, not 99);
- it clips the shared exponent at 127 instead of making the scale NaN (2**140 in E4M3);
- ±inf in a block gives the scale 2**127 (the spec: NaN);
- MXINT8 elements saturate to [-2, 127/64] (0x80 is produced); the engine saturates to
  ±max = ±127/64 as the issue's "saturated to ±max" says.
"""

from __future__ import annotations

import math

import gfloat
import numpy as np
import pytest
import torch
from gfloat.block import compute_scale_amax
from gfloat.formats import (
    format_info_mxfp4_e2m1,
    format_info_mxfp6_e2m3,
    format_info_mxfp6_e3m2,
    format_info_mxfp8_e4m3,
    format_info_mxfp8_e5m2,
    format_info_mxint8,
)
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import MXTensor
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

from fpexplorer.formats import get_block_format, get_format, quantize

TORCHAO_ELEMENTS = {
    "mxfp8_e4m3": torch.float8_e4m3fn,
    "mxfp8_e5m2": torch.float8_e5m2,
    "mxfp6_e2m3": "fp6_e2m3",
    "mxfp6_e3m2": "fp6_e3m2",
    "mxfp4": torch.float4_e2m1fn_x2,
}
GFLOAT_FORMATS = {
    "mxfp8_e4m3": format_info_mxfp8_e4m3,
    "mxfp8_e5m2": format_info_mxfp8_e5m2,
    "mxfp6_e2m3": format_info_mxfp6_e2m3,
    "mxfp6_e3m2": format_info_mxfp6_e3m2,
    "mxfp4": format_info_mxfp4_e2m1,
    "mxint8": format_info_mxint8,
}
MODES = list(ScaleCalculationMode)


def _tensor(seed: int, rows: int = 48, cols: int = 256, special: bool = True) -> np.ndarray:
    """Normal values over 80 binades, with outliers, zeros, FP32 subnormals, inf and NaN."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-40, 40, (rows, 1)))
    outliers = rng.random((rows, cols)) < 0.01
    x[outliers] *= np.exp2(rng.integers(5, 30, outliers.sum()))
    x[rng.random((rows, cols)) < 0.05] = 0.0
    x[rng.random((rows, cols)) < 0.01] = -0.0
    subnormal = rng.random((rows, cols)) < 0.01
    x[subnormal] = rng.standard_normal(subnormal.sum()) * 2.0**-140
    if special:
        x[rng.random((rows, cols)) < 0.002] = math.inf
        x[rng.random((rows, cols)) < 0.002] = -math.inf
        x[rng.random((rows, cols)) < 0.002] = math.nan
    return x.astype(np.float32)


def _torchao_mx(x: np.ndarray, name: str, mode: ScaleCalculationMode) -> tuple[np.ndarray, ...]:
    mx = MXTensor.to_mx(torch.from_numpy(x), TORCHAO_ELEMENTS[name], 32, scaling_mode=mode)
    data = mx.qdata
    if data.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = data.view(torch.uint8).numpy()
    elif name == "mxfp4":
        codes = unpack_uint4(data.contiguous().view(torch.uint8)).numpy().reshape(x.shape)
    else:
        codes = data.numpy()
    scales = mx.scale.view(torch.uint8).numpy()
    return codes, scales, mx.dequantize(torch.float32).numpy()


def _per_block(mask: np.ndarray, block: int) -> np.ndarray:
    return mask.reshape(mask.shape[0], -1, block).any(axis=-1)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("name", list(TORCHAO_ELEMENTS))
def test_mx_bit_for_bit_against_torchao(name: str, mode: ScaleCalculationMode) -> None:
    x = _tensor(1)
    codes, scales, values = _torchao_mx(x, name, mode)
    ours = quantize(x, get_block_format(name, mode.value))
    inf_block = _per_block(np.isinf(x), 32) & ~_per_block(np.isnan(x), 32)
    nan_block = _per_block(np.isnan(x), 32)
    assert inf_block.sum() > 5 and nan_block.sum() > 5 and (~inf_block & ~nan_block).sum() > 300
    # Scales: equal everywhere but in the blocks holding inf (pinned below).
    assert np.array_equal(scales[~inf_block], ours.scale_codes[~inf_block])
    assert (ours.scale_codes[inf_block | nan_block] == 0xFF).all()
    # Codes and dequantized values: equal in every block without NaN or inf.
    ordinary = np.repeat(~inf_block & ~nan_block, 32, axis=1)
    assert np.array_equal(codes[ordinary], ours.codes[ordinary])
    assert np.array_equal(values[ordinary], ours.values[ordinary])
    both_nan = np.repeat(nan_block, 32, axis=1)
    assert np.isnan(values[both_nan]).all() and np.isnan(ours.values[both_nan]).all()


def test_torchao_gives_a_block_with_inf_a_finite_scale_the_spec_a_nan_one() -> None:
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    x[5] = np.inf
    for mode, torchao_scale in [
        (ScaleCalculationMode.FLOOR, 128 - 8 + 127),
        (ScaleCalculationMode.CEIL, 128 - 8 + 127),
        (ScaleCalculationMode.EVEN, 128 - 8 + 127),
        (ScaleCalculationMode.RCEIL, 0xFE),
    ]:
        codes, scales, _ = _torchao_mx(x[None], "mxfp8_e4m3", mode)
        assert scales.tolist() == [[torchao_scale]]
        assert codes[0, 5] == 0x7E  # inf saturated to 448
        ours = quantize(x, get_block_format("mxfp8_e4m3", mode.value))
        assert ours.scale_codes.tolist() == [0xFF] and np.isnan(ours.values).all()


def test_torchao_divides_a_block_at_the_smallest_scale_by_2_to_the_minus_126() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [2.0**-120, 3 * 2.0**-124, -(2.0**-121)]
    codes, scales, values = _torchao_mx(x, "mxfp8_e4m3", ScaleCalculationMode.FLOOR)
    ours = quantize(x, "mxfp8_e4m3")
    assert scales.tolist() == ours.scale_codes.tolist() == [[0]]  # 2**-127 in both
    e4m3 = get_format("e4m3")
    assert [e4m3.to_float(c) for c in ours.codes[0, :3]] == [128.0, 24.0, -64.0]  # × 2**127
    assert [e4m3.to_float(c) for c in codes[0, :3]] == [64.0, 12.0, -32.0]  # × 2**126
    assert ours.values[0, :3].tolist() == x[0, :3].tolist()  # exact
    assert values[0, :3].tolist() == (x[0, :3] / 2).tolist()  # torchao: half


def test_torchao_rceil_loses_a_scale_step_to_float32_log2() -> None:
    # amax / 448 = 2**20 · (1 + 2**-23): ceil(log2) is 21; float32 log2 rounds it to 20.
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = np.float32(448 * 2.0**20) * np.float32(1 + 2.0**-23)
    codes, scales, _ = _torchao_mx(x, "mxfp8_e4m3", ScaleCalculationMode.RCEIL)
    ours = quantize(x, get_block_format("mxfp8_e4m3", "rceil"))
    assert ours.scale_codes.tolist() == [[127 + 21]] and scales.tolist() == [[127 + 20]]
    assert ours.codes[0, 0] == 0x76 and codes[0, 0] == 0x7E  # 224 vs a saturated 448


@pytest.mark.parametrize("seed", [0, 2])
def test_nvfp4_bit_for_bit_against_torchao(seed: int) -> None:
    x = _tensor(seed, cols=128, special=seed == 2)
    finite = np.abs(x[np.isfinite(x)]).max()
    # The per-tensor scale as torchao users compute it: amax / (448·6) in float32.
    per_tensor = torch.tensor(finite, dtype=torch.float32) / (448 * 6)
    nvfp4 = NVFP4Tensor.to_nvfp4(torch.from_numpy(x), 16, per_tensor_scale=per_tensor)
    codes = unpack_uint4(nvfp4.qdata.contiguous().view(torch.uint8)).numpy().reshape(x.shape)
    scales = nvfp4.scale.view(torch.uint8).numpy()
    ours = quantize(x, "nvfp4")
    assert ours.tensor_scale == float(per_tensor)
    assert np.array_equal(scales, ours.scale_codes)
    nan_block = np.repeat(np.isnan(ours.scales), 16, axis=1)
    assert np.array_equal(codes[~nan_block], ours.codes[~nan_block])
    if seed == 2:
        assert nan_block.any() and np.isinf(x).any()
    # torchao dequantizes as element × FP32(s_block × s_global), in float32:
    element = get_format("fp4").to_float_array(ours.codes).astype(np.float32)
    block_scale = np.repeat(ours.scales, 16, axis=1).astype(np.float32)
    torchao_rule = element * (block_scale * np.float32(ours.tensor_scale))
    values = nvfp4.dequantize(torch.float32).numpy()
    assert _same(values, torchao_rule).all()


def test_torchao_nvfp4_block_scale_double_rounds_in_float32() -> None:
    # amax 13.5, s_global = FP32(1/3) = 0.3333333433: (13.5 / 6) / s_global = 6.74999980,
    # just below the E4M3 midpoint 6.75 between 6.5 and 7. torchao divides in float32,
    # which rounds the quotient to 6.75, and the tie then goes to the even 7.
    x = np.array([[12.0 + 0.1 * i for i in range(16)]], np.float32)
    per_tensor = torch.tensor(1 / 3, dtype=torch.float32)
    nvfp4 = NVFP4Tensor.to_nvfp4(torch.from_numpy(x), 16, per_tensor_scale=per_tensor)
    ours = quantize(x, "nvfp4", tensor_scale=float(per_tensor))
    e4m3 = get_format("e4m3")
    assert e4m3.to_float(int(ours.scale_codes[0, 0])) == 6.5
    assert e4m3.to_float(int(nvfp4.scale.view(torch.uint8)[0, 0])) == 7.0


def _gfloat_block(fi: gfloat.BlockFormatInfo, values: np.ndarray) -> list[int]:
    scale = compute_scale_amax(fi.etype.emax, values)
    return list(gfloat.encode_block(fi, scale, values / scale, gfloat.RoundMode.TiesToEven))


@pytest.mark.parametrize("name", list(GFLOAT_FORMATS))
def test_mx_bit_for_bit_against_gfloat(name: str) -> None:
    fi = GFLOAT_FORMATS[name]
    x = _tensor(3, rows=40, cols=32, special=False).astype(np.float64)
    x[7] = 0.0
    x[8] = np.random.default_rng(4).standard_normal(32) * 2.0**-135  # clamped at 2**-127
    ours = quantize(x, name)
    for row, codes, scale in zip(x, ours.codes, ours.scale_codes[:, 0], strict=True):
        assert _gfloat_block(fi, row) == [scale, *codes.tolist()]


def test_where_gfloat_departs_from_the_spec() -> None:
    e4m3 = GFLOAT_FORMATS["mxfp8_e4m3"]
    block = np.zeros(32)
    # floor(np.log2(amax)) rounds up just below a power of two.
    block[0] = 2.0**100 * (1 - 2.0**-53)
    assert _gfloat_block(e4m3, block)[0] == 127 + 100 - 8
    assert quantize(block, "mxfp8_e4m3").scale_codes.tolist() == [127 + 99 - 8]
    # A shared exponent above 127 is clipped, not NaN.
    block[0] = 2.0**140
    assert _gfloat_block(e4m3, block)[0] == 254
    assert quantize(block, "mxfp8_e4m3").scale_codes.tolist() == [0xFF]
    # inf gives the scale 2**127.
    block[0] = math.inf
    assert _gfloat_block(e4m3, block)[0] == 254
    assert quantize(block, "mxfp8_e4m3").scale_codes.tolist() == [0xFF]
    # MXINT8 saturates to -2 (0x80) on the negative side; the engine to -127/64.
    block[:2] = [-1.995, 1.0]
    assert _gfloat_block(GFLOAT_FORMATS["mxint8"], block)[:3] == [127, 0x80, 0x40]
    assert quantize(block, "mxint8").codes[:2].tolist() == [0x81, 0x40]
