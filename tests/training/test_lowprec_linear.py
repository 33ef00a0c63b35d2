"""`training.lowprec.block_linear`: the emulated MX / NVFP4 linear layer against a
reference composed by hand from the numpy quantizer and float64 matmuls, gradients, the
swap, statistics, and a tiny training run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.formats import quantize
from fpexplorer.training.lowprec.block_linear import BlockScaledLinear, swap_linears
from fpexplorer.training.lowprec.block_torch import quantize_blocks, quantize_tiles
from fpexplorer.training.lowprec.hadamard import hadamard_rows

M, K, N = 40, 72, 48  # rows, in_features, out_features: tails in every blocking


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=generator) * torch.exp2(
        torch.randint(-6, 6, (M, 1), generator=generator).float()
    )
    w = torch.randn(N, K, generator=generator) * 0.1
    g = torch.randn(M, N, generator=generator) * 1e-3
    return x, w, g


def _q(array: torch.Tensor, name: str, axis: int) -> np.ndarray:
    """The numpy quantizer's exact dequantized values (float64)."""
    values: np.ndarray = quantize(array.numpy(), name, axis=axis).values
    return values


def _assert_float32_matmul_of(ours: torch.Tensor, a: np.ndarray, b: np.ndarray) -> None:
    """`ours` is a·b (exact operands, float64 product as the reference) up to float32
    accumulation: |error| <= length · 2**-23 · (|a|·|b|), the textbook bound."""
    reference = a @ b
    bound = a.shape[1] * 2.0**-23 * (np.abs(a) @ np.abs(b))
    error = np.abs(ours.detach().double().numpy() - reference)
    assert (error <= bound).all()
    assert np.abs(reference).max() > 0


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp6_e3m2", "mxfp4", "nvfp4"])
def test_forward_and_backward_equal_the_hand_composed_reference(name: str) -> None:
    x, w, g = _data(1)
    # Blocks along each matmul's reduction dimension (NVFP4's 2-D weight tiles and
    # Hadamard transform: tests/training/test_lowprec_nvfp4_recipe.py).
    layer = BlockScaledLinear(
        K, N, block=name, stochastic_gradients=False, weight_blocks="1d", hadamard=False
    )
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.fill_(0.25)
    inputs = x.clone().requires_grad_(True)
    output = layer(inputs)
    output.backward(g)
    # forward: Q_K(x) · Q_K(W)ᵀ + b
    _assert_float32_matmul_of(output - 0.25, _q(x, name, -1), _q(w, name, -1).T)
    # grad_input: Q_N(g) · Q_N(W), blocks along out_features
    assert inputs.grad is not None
    _assert_float32_matmul_of(inputs.grad, _q(g, name, -1), _q(w, name, 0))
    # grad_weight: Q_M(g)ᵀ · Q_M(x), blocks along the batch rows
    assert layer.weight.grad is not None and layer.bias.grad is not None
    _assert_float32_matmul_of(layer.weight.grad, _q(g, name, 0).T, _q(x, name, 0))
    assert torch.allclose(layer.bias.grad, g.sum(0), rtol=1e-6, atol=0)
    # The quantization is real: the plain product differs.
    assert not torch.allclose(output, nn.functional.linear(x, w, layer.bias), rtol=1e-3)


def test_nvfp4_rounds_gradients_stochastically_from_the_layers_generator() -> None:
    x, w, g = _data(2)
    layer = BlockScaledLinear(K, N, bias=False, block="nvfp4")
    assert layer.stochastic_gradients
    with torch.no_grad():
        layer.weight.copy_(w)

    def gradients(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer.generator = torch.Generator().manual_seed(seed)
        layer.weight.grad = None
        inputs = x.clone().requires_grad_(True)
        layer(inputs).backward(g)
        assert inputs.grad is not None and layer.weight.grad is not None
        return inputs.grad, layer.weight.grad

    grad_input, grad_weight = gradients(7)
    # The same draws, in the layer's order: grad_output along N, then (rotated by the
    # Hadamard transform, NVIDIA's recipe) along M. The weight: 16×16 tiles.
    replay = torch.Generator().manual_seed(7)
    g_n = quantize_blocks(g, "nvfp4", axis=-1, stochastic=True, generator=replay).values
    g_m = quantize_blocks(
        hadamard_rows(g), "nvfp4", axis=0, stochastic=True, generator=replay
    ).values
    tiles = quantize_tiles(w, "nvfp4").values.double().numpy()
    _assert_float32_matmul_of(grad_input, g_n.double().numpy(), tiles)
    _assert_float32_matmul_of(grad_weight, g_m.double().numpy().T, _q(hadamard_rows(x), "nvfp4", 0))
    # Stochastic: another seed gives other gradients, nearest rounding none of these.
    assert not torch.equal(gradients(8)[0], grad_input)
    assert not torch.allclose(torch.from_numpy(_q(g, "nvfp4", -1)).float(), g_n)


def test_autocast_does_not_round_the_emulated_matmul_again() -> None:
    x, w, _ = _data(3)
    layer = BlockScaledLinear(K, N, block="mxfp8_e4m3")
    with torch.no_grad():
        layer.weight.copy_(w)
        plain = layer(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = layer(x)
    assert autocast.dtype == torch.float32 and torch.equal(autocast, plain)
    bf16 = layer(x.bfloat16())
    assert bf16.dtype == torch.bfloat16


@pytest.mark.slow  # trains three models: about a second
def test_gradients_flow_through_a_swapped_model_and_it_learns() -> None:
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    inputs = torch.randn(256, 16)
    with torch.no_grad():
        targets = teacher(inputs)
    for name in ("mxfp8_e4m3", "mxfp4", "nvfp4"):
        torch.manual_seed(1)
        model = nn.Sequential(
            nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)
        )
        assert swap_linears(model, name) == ["0", "2", "4"]
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(40):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        for parameter in model.parameters():
            assert parameter.grad is not None and torch.isfinite(parameter.grad).all()
            assert parameter.grad.abs().sum() > 0
        assert losses[-1] < 0.5 * losses[0], (name, losses[0], losses[-1])


def test_swap_keeps_parameters_and_names() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16),
        nn.ReLU(),
        nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16, bias=False)),
        nn.Linear(16, 2),
    )
    before = dict(model.named_parameters())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    swapped = swap_linears(model, "mxfp6_e2m3", keep_first_last=True)
    assert swapped == ["2.0", "2.1"]
    assert type(model[0]) is nn.Linear and type(model[3]) is nn.Linear
    inner = model[2]
    assert isinstance(inner[0], BlockScaledLinear) and isinstance(inner[1], BlockScaledLinear)
    assert inner[1].bias is None and inner[0].layer_name == "2.0"
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)  # the same Parameter objects
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    # A second swap finds no nn.Linear left but those kept.
    assert swap_linears(model, "mxfp4", keep=["0", "3"]) == []
    assert "block=mxfp6_e2m3" in repr(inner[0])


def test_swap_leaves_attention_projections_that_never_call_forward() -> None:
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    swapped = swap_linears(layer, "nvfp4")
    assert swapped == ["linear1", "linear2"]
    assert not isinstance(layer.self_attn.out_proj, BlockScaledLinear)
    # First and last count every linear layer, as the FP8 recipes count them: the first is
    # the attention's output projection (never swapped), the last linear2.
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    assert swap_linears(layer, "nvfp4", keep_first_last=True) == ["linear1"]
    output = layer(torch.randn(2, 5, 32))
    assert output.shape == (2, 5, 32) and torch.isfinite(output).all()


def test_statistics_are_collected_only_when_asked() -> None:
    x, _, g = _data(4)
    model = nn.Sequential(nn.Linear(K, N))
    swap_linears(model, "mxfp4")
    layer = model[0]
    assert isinstance(layer, BlockScaledLinear)
    model(x.requires_grad_(True)).backward(g)
    assert layer.take_quant_stats() == ()
    layer.collect_stats = True
    model(x).backward(g)
    stats = layer.take_quant_stats()
    assert [(s.layer, s.role, s.format) for s in stats] == [
        ("0", "input", "mxfp4"),
        ("0", "weight", "mxfp4"),
        ("0", "grad_output", "mxfp4"),
    ]
    amaxes = [float(t.detach().abs().max()) for t in (x, layer.weight, g)]
    assert [s.amax for s in stats] == amaxes
    assert all(s.scale_hist is not None and s.scale_hist.total > 0 for s in stats)
    assert layer.take_quant_stats() == ()
    # The first layer of a model gets no input gradient, but its grad_output is measured.
    layer(x.detach()).backward(g)
    assert [s.role for s in layer.take_quant_stats()] == ["input", "weight", "grad_output"]


def test_bad_arguments() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="no module named 'head'"):
        swap_linears(model, "mxfp4", keep=["head"])
    with pytest.raises(ValueError, match=r"itself one nn\.Linear"):
        swap_linears(nn.Linear(4, 4), "mxfp4")
    with pytest.raises(ValueError, match="unknown block format"):
        swap_linears(model, "mxfp5")
    empty = BlockScaledLinear(4, 3, block="mxfp4")(torch.zeros(0, 4))
    assert empty.shape == (0, 3)
