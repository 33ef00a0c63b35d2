"""`training.lowprec.stats.quant_stats`: hand-checked tensors, and the numpy quantizer's
`ErrorStats` as the oracle on random ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fpexplorer.formats import quantize
from fpexplorer.formats.block import list_block_formats
from fpexplorer.training.lowprec.block_torch import quantize_blocks
from fpexplorer.training.lowprec.stats import measure_quantized, quant_stats, read_pending_stats
from fpexplorer.training.lowprec.tensorwise import quantize_tensorwise
from fpexplorer.training.records import Histogram, QuantTensorStats


def test_an_mxfp4_block_by_hand() -> None:
    # amax 8: shared exponent floor(log2 8) - 2 = 1, scale 2; x / 2 = 4, 0.05, 1.5, -0.1
    # rounds into E2M1 to 4, 0, 1.5, -0: two of four flushed, none beyond 6 × 2.
    x = torch.tensor([8.0, 0.1, 3.0, -0.2])
    q = quantize_blocks(x, "mxfp4")
    assert q.values.tolist() == [8.0, 0.0, 3.0, -0.0]
    stats = quant_stats("fc1", "input", x, q, "mxfp4")
    f32 = [float(v) for v in x]  # 0.1 and 0.2 as float32 holds them
    signal = sum(v * v for v in f32)
    noise = f32[1] ** 2 + f32[3] ** 2
    assert stats == QuantTensorStats(
        layer="fc1",
        role="input",
        format="mxfp4",
        amax=8.0,
        scale=None,
        scale_hist=Histogram(lo=1, counts=(1,)),
        saturated=0.0,
        flushed=0.5,
        sqnr_db=stats.sqnr_db,
    )
    assert stats.sqnr_db == pytest.approx(10 * math.log10(signal / noise), rel=1e-14)


def test_saturation_under_the_floor_rule_by_hand() -> None:
    # amax 7: exponent floor(log2 7) - 2 = 0, scale 1; 7 > 6 = max E2M1 is clipped.
    x = torch.tensor([7.0, 1.0, 0.0, -0.0])
    q = quantize_blocks(x, "mxfp4")
    assert q.values.tolist() == [6.0, 1.0, 0.0, -0.0]
    stats = quant_stats("fc", "weight", x, q, "mxfp4")
    assert stats.saturated == 0.25 and stats.flushed == 0.0
    assert stats.sqnr_db == pytest.approx(10 * math.log10(50.0 / 1.0), rel=1e-14)


def test_nvfp4_records_the_per_tensor_scale_as_a_multiplier() -> None:
    x = torch.tensor([2688.0, 1.0] + [0.0] * 30)  # s_global = 2688 / 2688 = 1
    q = quantize_blocks(x, "nvfp4")
    stats = quant_stats("fc", "grad_output", x, q, "nvfp4")
    assert stats.scale == 1.0
    # Block 1: s_block = 2688 / 6 = 448; block 2, all zero: the smallest E4M3 normal 2**-6.
    assert stats.scale_hist == Histogram(lo=-6, counts=(1,) + (0,) * 13 + (1,))
    x = torch.tensor([12.0, 1.0])  # s_global = FP32(12 / 2688)
    stats = quant_stats("fc", "input", x, quantize_blocks(x, "nvfp4"), "nvfp4")
    assert stats.scale == 1.0 / float(np.float32(12.0 / 2688.0))


def test_tensorwise_e4m3_by_hand() -> None:
    x = torch.tensor([500.0, 448.0, 1e-4, 0.0, -3.0])
    q = quantize_tensorwise(x, "float8_e4m3fn", 1.0)
    assert q.values.tolist() == [448.0, 448.0, 0.0, 0.0, -3.0]
    stats = quant_stats("head", "input", x, q, "float8_e4m3fn")
    assert stats.amax == 500.0 and stats.scale == 1.0 and stats.scale_hist is None
    assert stats.saturated == 0.2  # 500 only: 448 is the largest value, not clipped
    assert stats.flushed == 0.2  # 1e-4 is below half the smallest subnormal, 2**-10
    # With the scale torchao's current scaling would use (448 / amax) nothing saturates.
    scaled = quant_stats("head", "input", x, quantize_tensorwise(x, "e4m3", 448 / 500), "e4m3")
    assert scaled.saturated == 0.0 and scaled.scale == float(np.float32(448 / 500))


def test_row_scales_are_counted_as_the_factor_that_dequantizes_a_row() -> None:
    # torchao's rowwise recipe: per row, the power of two at or below 448 / amax_row. The
    # histogram counts 1 / that scale, the factor the FP8 values are multiplied by to give
    # x back, as block scales are counted: here 2**-7 (amax 3), 2**-5 (amax 12), 2**-9 (amax
    # 0.5), and a zero row at 448 / 1e-12's power of two, 2**48, so 1 / it is 2**-48.
    x = torch.tensor([[3.0, -1.0], [12.0, 0.25], [0.5, 0.0], [0.0, 0.0]])
    scale = torch.tensor([[128.0], [32.0], [512.0], [2.0**48]])
    q = quantize_tensorwise(x, "float8_e4m3fn", scale)
    stats = quant_stats("fc", "input", x, q, "float8_e4m3fn")
    assert stats.scale is None
    assert stats.scale_hist == Histogram(lo=-48, counts=(1,) + (0,) * 38 + (1, 0, 1, 0, 1))
    assert stats.amax == 12.0 and stats.saturated == 0.0 and stats.flushed == 0.0
    assert stats.sqnr_db == math.inf  # every value is exact in E4M3 after its row's scale
    # Scales twice as large clip the amax of three rows: 3 × 256, 12 × 64, 0.5 × 1024 > 448.
    clipped = quant_stats("fc", "input", x, quantize_tensorwise(x, "e4m3", scale * 2), "e4m3")
    assert clipped.saturated == 3 / 8 and clipped.sqnr_db < 30


def test_nan_and_inf_count_in_the_denominator_only() -> None:
    x = torch.tensor([1.0, math.nan, 2.0, 0.5] + [0.0] * 28 + [math.inf, 3.0])
    q = quantize_blocks(x, "mxfp8_e4m3")
    stats = quant_stats("fc", "input", x, q, "mxfp8_e4m3")
    assert math.isnan(stats.amax)
    assert stats.scale_hist is not None and stats.scale_hist.nan == 2  # both blocks
    assert stats.saturated == 0.0 and stats.flushed == 0.0
    assert stats.sqnr_db == -math.inf  # finite inputs became NaN


@pytest.mark.parametrize("name", [fmt.name for fmt in list_block_formats()])
def test_equal_to_the_numpy_error_stats(name: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 200)) * np.exp2(rng.integers(-20, 20, (24, 1)))
    x[rng.random(x.shape) < 0.02] *= 2.0**12  # outliers: saturation under the floor rule
    x[rng.random(x.shape) < 0.02] *= 2.0**-40  # far below their block's scale: flushed
    x[rng.random(x.shape) < 0.05] = 0.0
    x[3, 5] = math.inf
    x = x.astype(np.float32)
    reference = quantize(x, name)
    errors = reference.tensor_stats()
    q = quantize_blocks(torch.from_numpy(x), name)
    stats = quant_stats("layer", "weight", torch.from_numpy(x), q, name)
    assert stats.amax == math.inf
    # ErrorStats' shares are of the finite inputs, the record's of all elements.
    assert stats.saturated * x.size == pytest.approx(errors.share_saturated * errors.count)
    assert stats.flushed * x.size == pytest.approx(errors.share_flushed * errors.count)
    assert stats.saturated > 0 and stats.flushed > 0
    # MX values are exact in float32; NVFP4's (element × s_block × s_global) are rounded to
    # float32 once, which moves the noise by a few parts in 2**24.
    tolerance = 1e-12 if q.per_tensor_scale is None else 1e-6
    assert stats.sqnr_db == pytest.approx(errors.sqnr_db, rel=tolerance, abs=0)
    binades = np.floor(np.log2(reference.scales[np.isfinite(reference.scales)])).astype(int)
    values, counts = np.unique(binades, return_counts=True)
    assert stats.scale_hist is not None
    hist = dict(zip(stats.scale_hist.exponents, stats.scale_hist.counts, strict=True))
    assert {k: v for k, v in hist.items() if v} == dict(
        zip(values.tolist(), counts.tolist(), strict=True)
    )
    assert stats.scale_hist.nan == int(np.isnan(reference.scales).sum())


def test_the_record_survives_the_run_log_codec() -> None:
    x = torch.tensor([8.0, 0.1, math.inf, -0.2])
    stats = quant_stats("fc1", "input", x, quantize_blocks(x, "nvfp4"), "nvfp4")
    assert QuantTensorStats.from_json(stats.to_json()) == stats


def test_bad_arguments() -> None:
    x = torch.ones(4)
    q = quantize_blocks(x, "mxfp4")
    with pytest.raises(ValueError, match="unknown role 'bias'"):
        quant_stats("fc", "bias", x, q, "mxfp4")
    with pytest.raises(ValueError, match="shape"):
        quant_stats("fc", "input", torch.ones(5), q, "mxfp4")
    empty = torch.ones(0, 4)
    with pytest.raises(ValueError, match="the tensor is empty"):
        quant_stats("fc", "input", empty, quantize_tensorwise(empty, "e4m3", 1.0), "e4m3")


def test_many_measurements_read_in_one_transfer_equal_one_by_one() -> None:
    x = torch.linspace(-3, 5, 100)
    casts = [
        ("a", "input", quantize_blocks(x, "mxfp4"), "mxfp4"),
        ("a", "weight", quantize_tensorwise(x, "e5m2", 0.5), "float8_e5m2"),
        ("b", "grad_output", quantize_blocks(x, "nvfp4"), "nvfp4"),
        ("c", "input", quantize_tensorwise(x.reshape(4, 25), "e4m3", torch.rand(4, 1)), "e4m3"),
    ]
    pending = [measure_quantized(layer, role, q.input, q, name) for layer, role, q, name in casts]
    assert all(isinstance(item.values, torch.Tensor) for item in pending)
    together = read_pending_stats(pending)
    one_by_one = tuple(quant_stats(layer, role, q.input, q, name) for layer, role, q, name in casts)
    assert together == one_by_one
    assert read_pending_stats([]) == ()
