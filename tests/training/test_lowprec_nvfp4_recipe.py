"""NVIDIA's NVFP4 training recipe in `training.lowprec`: 2-D (16×16) weight tiles, bit for bit
against the exact numpy quantizer applied tile by tile; forward and backward multiplying the
same quantized weight; the random Hadamard transform (orthogonal, neutral before rounding,
and what it does to an operand with an outlier); the layer against a hand-composed
reference; the monitor's statistics of a tiled weight; the options that choose the recipe."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.formats import get_block_format, quantize
from fpexplorer.training.config import NVFP4_WEIGHT_BLOCKS, TrainConfig
from fpexplorer.training.lowprec.block_linear import (
    WEIGHT_BLOCKS,
    BlockScaledLinear,
    swap_linears,
    wgrad_operands,
)
from fpexplorer.training.lowprec.block_torch import quantize_blocks, quantize_tiles
from fpexplorer.training.lowprec.hadamard import (
    SIGNS,
    hadamard_rows,
    inverse_hadamard_rows,
    rht_matrix,
)
from fpexplorer.training.lowprec.stats import quant_stats


def _matrix(seed: int, shape: tuple[int, int], special: bool = True) -> np.ndarray:
    """float32: values whose magnitude changes by tile (over 40 binades), outliers, zeros
    of both signs, an all-zero top-left tile, FP32 subnormals, and (`special`) ±inf and
    NaN in a few places."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    magnitude = np.exp2(rng.integers(-20, 20, (-(-rows // 16), -(-cols // 16))))
    x = rng.standard_normal(shape) * np.kron(magnitude, np.ones((16, 16)))[:rows, :cols]
    outliers = rng.random(shape) < 0.01
    x[outliers] *= 2.0**12
    x[rng.random(shape) < 0.05] = 0.0
    x[rng.random(shape) < 0.01] = -0.0
    subnormal = rng.random(shape) < 0.01
    x[subnormal] = rng.standard_normal(subnormal.sum()) * 2.0**-140
    if special:
        x[rng.random(shape) < 0.003] = math.inf
        x[rng.random(shape) < 0.003] = -math.inf
        x[rng.random(shape) < 0.003] = math.nan
    x[:16, :16] = 0.0
    return x.astype(np.float32)


def _tile_oracle(x: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, float | None]:
    """The numpy quantizer applied to each flattened tile as one block of size² elements
    (a tile cut by the edge: a block of the elements it has), under the format's rule, with
    NVFP4's s_global taken from the whole matrix: (values, tile scales, s_global)."""
    fmt = get_block_format(name)
    size = fmt.block_size
    one_block = fmt.with_block_size(size * size)
    global_scale = quantize(x, fmt).tensor_scale
    rows, cols = x.shape
    values = np.empty(x.shape)
    scales = np.empty((-(-rows // size), -(-cols // size)))
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            part = np.s_[i * size : (i + 1) * size, j * size : (j + 1) * size]
            tile = x[part]
            q = quantize(tile.reshape(-1), one_block, tensor_scale=global_scale)
            values[part] = q.values.reshape(tile.shape)
            scales[i, j] = q.scales[0]
    return values, scales, global_scale


def _bits_equal(ours: torch.Tensor, reference: np.ndarray) -> bool:
    """The same float32 bits everywhere (-0 differs from +0), NaN where both are NaN."""
    a = ours.detach().numpy().astype(np.float32)
    with np.errstate(over="ignore"):
        b = np.asarray(reference).astype(np.float32)
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    return bool(same.all())


# --- the 2-D quantizer ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(48, 64), (40, 72), (17, 250), (5, 3), (1, 1)])
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_tiles_equal_the_numpy_quantizer_tile_by_tile(name: str, shape: tuple[int, int]) -> None:
    x = _matrix(1, shape)
    values, scales, global_scale = _tile_oracle(x, name)
    ours = quantize_tiles(torch.from_numpy(x), name)
    assert ours.values.dtype == torch.float32 and ours.values.shape == x.shape
    assert _bits_equal(ours.values, values)
    assert ours.block_scales.shape == scales.shape and _bits_equal(ours.block_scales, scales)
    if global_scale is None:
        assert ours.per_tensor_scale is None
    else:
        assert ours.per_tensor_scale is not None
        assert float(ours.per_tensor_scale) == global_scale
    if shape == (40, 72):  # the data holds what _matrix says: NaN tiles (and a zero tile)
        assert np.isnan(scales).any() and np.isnan(values).any()
        if name == "nvfp4":
            assert scales[0, 0] == float(get_block_format(name).scale_format.min_normal)


def test_tiles_with_a_forced_per_tensor_scale_and_in_half_precision() -> None:
    x = _matrix(2, (40, 72), special=False)
    forced = 0.125
    ours = quantize_tiles(torch.from_numpy(x), "nvfp4", per_tensor_scale=forced)
    assert ours.per_tensor_scale is not None and float(ours.per_tensor_scale) == forced
    fmt = get_block_format("nvfp4")
    tile = x[16:32, 16:32].reshape(-1)
    reference = quantize(tile, fmt.with_block_size(256), tensor_scale=forced)
    assert _bits_equal(ours.values[16:32, 16:32].reshape(-1), reference.values)
    narrow = torch.from_numpy(x).bfloat16()
    half = quantize_tiles(narrow, "nvfp4")
    assert half.values.dtype == torch.bfloat16
    widened = quantize_tiles(narrow.float(), "nvfp4").values
    assert torch.equal(half.values, widened.bfloat16())


def test_the_transpose_has_the_transposed_tiles_and_1d_blocks_do_not() -> None:
    w = torch.randn(40, 72, generator=torch.Generator().manual_seed(3))
    tiles, transposed = quantize_tiles(w, "nvfp4"), quantize_tiles(w.t(), "nvfp4")
    assert torch.equal(transposed.values, tiles.values.t())
    assert torch.equal(transposed.block_scales, tiles.block_scales.t())
    # 1-D blocks: W blocked along K (forward) and along N (backward) are two tensors.
    along_k = quantize_blocks(w, "nvfp4", axis=-1).values
    along_n = quantize_blocks(w, "nvfp4", axis=0).values
    assert (along_k != along_n).float().mean() > 0.3


def test_tiles_bad_input_gets_a_clear_message() -> None:
    with pytest.raises(ValueError, match="takes a matrix, not a tensor of 1 dimensions"):
        quantize_tiles(torch.ones(16), "nvfp4")
    with pytest.raises(ValueError, match="takes a matrix, not a tensor of 3 dimensions"):
        quantize_tiles(torch.ones(2, 16, 16), "nvfp4")
    with pytest.raises(ValueError, match="the tensor is empty"):
        quantize_tiles(torch.ones(0, 16), "nvfp4")
    with pytest.raises(ValueError, match="float64"):
        quantize_tiles(torch.ones(16, 16, dtype=torch.float64), "nvfp4")


# --- the random Hadamard transform ----------------------------------------------------------


def _closed_form_rht() -> np.ndarray:
    """S·H₁₆/4 from the closed form of the Sylvester matrix, H[i, j] = (-1)^popcount(i & j)."""
    index = np.arange(16)
    popcount = np.vectorize(lambda v: bin(v).count("1"))(index[:, None] & index[None, :])
    hadamard = np.where(popcount % 2 == 0, 1.0, -1.0)
    return np.asarray(SIGNS, dtype=np.float64)[:, None] * hadamard / 4.0


def test_the_rht_matrix_is_the_signed_hadamard_matrix_and_orthogonal() -> None:
    h = rht_matrix()
    assert h.dtype == torch.float32 and torch.equal(
        h.double(), torch.from_numpy(_closed_form_rht())
    )
    # Entries ±1/4: every product and sum of the Gram matrices is exact in float32.
    assert torch.equal(h.t() @ h, torch.eye(16)) and torch.equal(h @ h.t(), torch.eye(16))
    assert sorted(set(SIGNS)) == [-1, 1] and len(SIGNS) == 16


def test_rotated_rows_equal_a_float64_reference_and_invert() -> None:
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(40, 24, generator=generator) * 3.0  # 40 rows: padded to 48
    rotated = hadamard_rows(x)
    assert rotated.shape == (48, 24)
    padded = np.zeros((48, 24))
    padded[:40] = x.double().numpy()
    reference = np.kron(np.eye(3), _closed_form_rht()).T @ padded  # tile by tile: Hᵀ·t
    # A rotated element sums 16 terms of at most max|x| / 4: float32 error <= 16 · 2**-24
    # · 4 · max|x| (and twice that through the rotation back).
    scale = np.abs(padded).max()
    assert np.abs(rotated.double().numpy() - reference).max() <= 64 * 2.0**-24 * scale
    restored = inverse_hadamard_rows(rotated, 40)
    assert restored.shape == x.shape
    assert float((restored - x).abs().max()) <= 256 * 2.0**-24 * scale
    assert not torch.equal(rotated[:40], x)
    # The padding rotated into non-zero rows: it is part of the product, not dropped.
    assert rotated[40:].abs().max() > 0


def test_grad_w_through_the_rht_without_quantization_equals_grad_w() -> None:
    generator = torch.Generator().manual_seed(5)
    g = torch.randn(72, 20, generator=generator)  # 72 rows: a tail of 8
    x = torch.randn(72, 36, generator=generator) * torch.exp2(
        torch.randn(72, 1, generator=generator) * 2
    )
    g_rows, x_rows = wgrad_operands(g, x, hadamard=True)
    assert g_rows.shape == (80, 20) and x_rows.shape == (80, 36)
    exact = g.double().t() @ x.double()
    # float32 rounding of the rotations (16 terms each) and of the 80-term products: a
    # rotated row is at most a quarter of its tile's sum of magnitudes, so the error is
    # within (16 + 16 + 80) · 2**-24 · Σ_tiles (Σ_tile |g|)ᵀ(Σ_tile |x|).
    tile_g = torch.nn.functional.pad(g.double().abs(), (0, 0, 0, 8)).reshape(5, 16, 20).sum(1)
    tile_x = torch.nn.functional.pad(x.double().abs(), (0, 0, 0, 8)).reshape(5, 16, 36).sum(1)
    bound = 112 * 2.0**-24 * (tile_g.t() @ tile_x)
    error = ((g_rows.t() @ x_rows).double() - exact).abs()
    assert error.le(bound).all() and float(error.max()) > 0
    assert wgrad_operands(g, x, hadamard=False) == (g, x)


def test_the_rht_reduces_the_error_of_an_operand_with_an_outlier() -> None:
    """One outlier 2**19 above a Gaussian operand sets NVFP4's per-tensor scale so high that
    every other block's E4M3 scale sits at its floor (2**-6) and its elements keep ~1 bit.
    Rotated, the outlier is spread over its 16-row tile: the tensor's amax drops 4x, so
    does s_global, and every block's effective scale (s_block × s_global) with it. The
    error is measured in the operand's own coordinates (the rotation undone)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=generator)
    x[5, 7] = 2.0**19
    rest = torch.ones_like(x, dtype=torch.bool)
    rest[5, 7] = False

    def sqnr_db(q: torch.Tensor, mask: torch.Tensor) -> float:
        signal = x[mask].double().pow(2).sum()
        return 10 * math.log10(float(signal / (q[mask].double() - x[mask].double()).pow(2).sum()))

    everything = torch.ones_like(rest)
    plain = quantize_blocks(x, "nvfp4", axis=0)
    rotated = quantize_blocks(hadamard_rows(x), "nvfp4", axis=0)
    through_rht = inverse_hadamard_rows(rotated.values, 64)
    assert float(x.abs().max()) / float(hadamard_rows(x).abs().max()) > 3.9
    assert float((plain.block_scales == 2.0**-6).float().mean()) > 0.99
    gain_everything = sqnr_db(through_rht, everything) - sqnr_db(plain.values, everything)
    gain_rest = sqnr_db(through_rht, rest) - sqnr_db(plain.values, rest)
    # Measured (seed 0): 88.3 -> 94.3 dB over the operand, 7.2 -> 16.2 dB without the outlier.
    assert gain_everything > 4.0 and gain_rest > 7.0, (gain_everything, gain_rest)


# --- the layer ------------------------------------------------------------------------------


def test_the_recipe_is_the_default_for_nvfp4_only() -> None:
    nvfp4 = BlockScaledLinear(32, 16, block="nvfp4")
    assert (nvfp4.weight_blocks, nvfp4.hadamard, nvfp4.stochastic_gradients) == ("2d", True, True)
    assert "2-D weight blocks" in repr(nvfp4) and "Hadamard" in repr(nvfp4)
    mx = BlockScaledLinear(32, 16, block="mxfp4")
    assert (mx.weight_blocks, mx.hadamard, mx.stochastic_gradients) == ("1d", False, False)
    chosen = BlockScaledLinear(32, 16, block="nvfp4", weight_blocks="1d", hadamard=False)
    assert (chosen.weight_blocks, chosen.hadamard) == ("1d", False)
    with pytest.raises(ValueError, match="weight_blocks must be '1d' or '2d', not '3d'"):
        BlockScaledLinear(32, 16, block="nvfp4", weight_blocks="3d")  # type: ignore[arg-type]
    assert WEIGHT_BLOCKS == tuple(sorted(choice.name for choice in NVFP4_WEIGHT_BLOCKS))


@pytest.mark.parametrize(("weight_blocks", "same"), [("2d", True), ("1d", False)])
def test_forward_and_backward_multiply_the_same_weight_with_2d_blocks(
    weight_blocks: str, same: bool
) -> None:
    """x = I and g = I make the two matmuls show the weights they used: output = c·Q_fwd(W)ᵀ
    and grad_input = c·Q_bwd(W), with c the same dequantized 1 in both (identity rows
    quantize alike)."""
    size = 48
    w = torch.from_numpy(_matrix(6, (size, size), special=False)) * 1e-3
    layer = BlockScaledLinear(size, size, bias=False, block="nvfp4", stochastic_gradients=False,
                              weight_blocks=weight_blocks, hadamard=False)  # type: ignore[arg-type]  # fmt: skip
    with torch.no_grad():
        layer.weight.copy_(w)
    eye = torch.eye(size).requires_grad_(True)
    output = layer(eye)
    output.backward(torch.eye(size))
    assert eye.grad is not None
    forward_weight, backward_weight = output.detach().t(), eye.grad
    assert torch.equal(forward_weight, backward_weight) == same
    one = quantize_blocks(torch.eye(size), "nvfp4").values[0, 0]  # 1 as NVFP4 holds it
    if same:
        tiles = quantize_tiles(w, "nvfp4").values
        assert torch.equal(layer.quantize_weight().values, tiles)
        assert torch.equal(forward_weight, one * tiles)
    else:
        assert torch.equal(forward_weight, one * quantize_blocks(w, "nvfp4", axis=-1).values)
        assert torch.equal(backward_weight, one * quantize_blocks(w, "nvfp4", axis=0).values)


def test_the_nvfp4_recipe_equals_a_hand_composed_reference() -> None:
    """output = Q_K(x)·T(W)ᵀ, grad_input = Q_N(g)·T(W), grad_W = Q_M(Hᵀg)ᵀ·Q_M(Hᵀx), T the
    tiles (numpy, tile by tile), Q the numpy quantizer; the matmuls within float32's
    accumulation bound of the float64 product of the exact operands."""
    m, k, n = 40, 72, 48  # tails in every blocking, and rows padded to 48 for the RHT
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(m, k, generator=generator) * torch.exp2(
        torch.randint(-6, 6, (m, 1), generator=generator).float()
    )
    w = torch.randn(n, k, generator=generator) * 0.1
    g = torch.randn(m, n, generator=generator) * 1e-3
    layer = BlockScaledLinear(k, n, bias=False, block="nvfp4", stochastic_gradients=False)
    with torch.no_grad():
        layer.weight.copy_(w)
    inputs = x.clone().requires_grad_(True)
    output = layer(inputs)
    output.backward(g)
    tiles, _, _ = _tile_oracle(w.numpy(), "nvfp4")

    def q(array: torch.Tensor, axis: int) -> np.ndarray:
        values: np.ndarray = quantize(array.numpy(), "nvfp4", axis=axis).values
        return values

    def close(ours: torch.Tensor, a: np.ndarray, b: np.ndarray) -> None:
        reference = a @ b
        bound = a.shape[1] * 2.0**-23 * (np.abs(a) @ np.abs(b))
        assert (np.abs(ours.detach().double().numpy() - reference) <= bound).all()

    close(output, q(x, -1), tiles.T)
    assert inputs.grad is not None and layer.weight.grad is not None
    close(inputs.grad, q(g, -1), tiles)
    close(layer.weight.grad, q(hadamard_rows(g), 0).T, q(hadamard_rows(x), 0))
    # Each part of the recipe changes the result: without the RHT, with 1-D weight blocks.
    plain = BlockScaledLinear(k, n, bias=False, block="nvfp4", stochastic_gradients=False,
                              weight_blocks="1d", hadamard=False)  # fmt: skip
    with torch.no_grad():
        plain.weight.copy_(w)
    other = x.clone().requires_grad_(True)
    plain_output = plain(other)
    plain_output.backward(g)
    assert plain.weight.grad is not None and other.grad is not None
    assert not torch.equal(plain.weight.grad, layer.weight.grad)
    assert not torch.equal(plain_output, output) and not torch.equal(other.grad, inputs.grad)


def test_swap_linears_passes_the_recipe_on() -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))
    swap_linears(model, "nvfp4", weight_blocks="1d", hadamard=False)
    assert all(
        (layer.weight_blocks, layer.hadamard) == ("1d", False)
        for layer in model
        if isinstance(layer, BlockScaledLinear)
    )
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))
    swap_linears(model, "nvfp4")
    assert isinstance(model[0], BlockScaledLinear) and model[0].weight_blocks == "2d"


# --- statistics -----------------------------------------------------------------------------


def test_the_weight_statistics_of_2d_tiles_count_each_tile_once() -> None:
    n, k = 40, 72  # 3 × 5 tiles, the last row and column of tiles cut by the edge
    w = _matrix(8, (n, k), special=False)
    w[20, 30] = 1e6  # an outlier: its tile's small values flush, others saturate
    layer = BlockScaledLinear(k, n, block="nvfp4")
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w))
    layer.collect_stats = True
    layer(torch.randn(4, k))
    stats = {s.role: s for s in layer.take_quant_stats()}["weight"]
    values, scales, global_scale = _tile_oracle(w, "nvfp4")
    assert global_scale is not None
    assert stats.amax == float(np.abs(w).max())
    assert stats.scale == 1.0 / global_scale
    assert stats.scale_hist is not None and stats.scale_hist.total == 15
    binades, counts = np.unique(np.floor(np.log2(scales)).astype(int), return_counts=True)
    hist = dict(zip(stats.scale_hist.exponents, stats.scale_hist.counts, strict=True))
    assert {e: c for e, c in hist.items() if c} == dict(
        zip(binades.tolist(), counts.tolist(), strict=True)
    )
    limit = np.kron(scales, np.ones((16, 16)))[:n, :k] * 6.0 * global_scale
    finite = np.isfinite(w)
    saturated = (finite & (np.abs(w) > limit)).sum()
    flushed = (finite & (w != 0) & (values == 0)).sum()
    assert flushed > 0
    assert stats.saturated == saturated / w.size and stats.flushed == flushed / w.size
    signal = float((w.astype(np.float64) ** 2).sum())
    noise = float(((values.astype(np.float32).astype(np.float64) - w) ** 2).sum())
    assert stats.sqnr_db == pytest.approx(10 * math.log10(signal / noise), rel=1e-9)
    # The same record as measuring the layer's own tiled weight directly.
    direct = quant_stats("", "weight", layer.weight, layer.quantize_weight(), "nvfp4")
    assert (direct.scale_hist, direct.flushed, direct.sqnr_db) == (
        stats.scale_hist, stats.flushed, stats.sqnr_db,
    )  # fmt: skip


# --- options --------------------------------------------------------------------------------


def test_the_options_default_to_nvidias_recipe_and_are_refused_elsewhere() -> None:
    config = TrainConfig(precision="nvfp4")
    assert (config.nvfp4_weight_blocks, config.hadamard) == ("2d", True)
    assert config.validate() == {}
    header = config.replace(nvfp4_weight_blocks="1d", hadamard=False).to_dict()
    assert (header["nvfp4_weight_blocks"], header["hadamard"]) == ("1d", False)
    for precision in ("mxfp4", "fp8", "bf16"):
        other = TrainConfig(precision=precision)
        assert {"nvfp4_weight_blocks", "hadamard"} <= set(other.inapplicable())
        assert other.validate() == {}  # the defaults are never refused
        problems = other.replace(hadamard=False, nvfp4_weight_blocks="1d").validate()
        assert problems == {
            "hadamard": "--no-hadamard is not used with these settings: an option of the "
            "nvfp4 mode only",
            "nvfp4_weight_blocks": "--nvfp4-weight-blocks is not used with these settings: "
            "an option of the nvfp4 mode only",
        }
    assert (
        "use 2d or 1d" in config.replace(nvfp4_weight_blocks="3d").validate()["nvfp4_weight_blocks"]
    )


@pytest.mark.parametrize(
    "options", [{}, {"nvfp4_weight_blocks": "1d"}, {"hadamard": False}, {"hadamard": True}]
)
def test_the_options_travel_through_argv_and_into_the_layers(options: dict[str, Any]) -> None:
    import argparse

    from fpexplorer.training.config import add_train_arguments
    from fpexplorer.training.lowprec.recipes import apply_recipe, recipe_label
    from fpexplorer.training.precision import precision_mode

    config = TrainConfig(precision="nvfp4", **options)
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    argv = config.to_argv()
    assert ("--no-hadamard" in argv) == (not config.hadamard)
    assert TrainConfig.from_args(parser.parse_args(argv)) == config
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))
    mode = precision_mode("nvfp4")
    choice = apply_recipe(model, mode, config, torch.device("cpu"))
    assert choice is not None and len(choice.quantized) == 2
    for layer in (model[0], model[2]):
        assert isinstance(layer, BlockScaledLinear)
        assert (layer.weight_blocks, layer.hadamard) == (
            config.nvfp4_weight_blocks,
            config.hadamard,
        )
    label = recipe_label(mode, config)
    assert ("16x16 weight tiles" in label) == (config.nvfp4_weight_blocks == "2d")
    assert ("no Hadamard" in label) == (not config.hadamard)
