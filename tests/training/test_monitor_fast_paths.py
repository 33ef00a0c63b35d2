"""The monitor's cheap paths against oracles: format shares read from pattern counts at any
scale (powers of two, others, below 1), gradients exactly on a threshold, BF16-valued and
FP16 gradients, deep subnormals; lost updates; per-layer max |activation gradient|."""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from monitor_helpers import flat
from torch import nn

from fpexplorer.training.monitor import FORMAT_RANGES, AmpMonitor

ML_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}


class FixedScale:
    """Any object with get_scale() serves as the monitor's scaler."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def get_scale(self) -> float:
        return self.scale


def expected_shares(grads: np.ndarray, scale: float) -> dict[str, dict[str, float]]:
    with np.errstate(over="ignore"):  # products past float32's range are inf: overflow
        scaled = grads.astype(np.float32) * np.float32(scale)
    shares = {}
    for name, target in ML_DTYPES.items():
        with np.errstate(over="ignore", invalid="ignore"):
            cast = scaled.astype(target).astype(np.float64)
        smallest_normal = float(ml_dtypes.finfo(target).smallest_normal)
        shares[name] = {
            "underflow": np.sum((scaled != 0) & (cast == 0)) / scaled.size,
            "subnormal": np.sum((cast != 0) & (np.abs(cast) < smallest_normal)) / scaled.size,
            "overflow": np.sum(~np.isfinite(cast)) / scaled.size,
        }
    return shares


def tricky_gradients(scale: float, seed: int) -> torch.Tensor:
    """Every threshold divided by the scale and its float32 neighbours (both signs), exact
    powers of two, deep subnormals, zeros, and a spread over the float32 range."""
    values: list[np.float32] = []
    with np.errstate(over="ignore", under="ignore"):
        for fmt in FORMAT_RANGES:
            for bound in (fmt.flush_max, fmt.subnormal_max, fmt.finite_max_input):
                centre = np.float32(bound) / np.float32(scale)
                down = np.nextafter(centre, np.float32(0))
                up = np.nextafter(centre, np.float32(np.inf))
                values += [down, centre, up, np.nextafter(down, np.float32(0))]
    generator = np.random.default_rng(seed)
    spread = generator.standard_normal(3000) * np.exp2(generator.integers(-149, 100, 3000))
    specials = [0.0, -0.0, 2.0**-149, 2.0**-140, -(2.0**-134), 2.0**-25, 2.0**-10, 1.0]
    array = np.concatenate([values, -np.array(values), spread, specials]).astype(np.float32)
    array = array[np.isfinite(array)]
    return torch.from_numpy(array)


def one_step(tmp_path: Path, grads: torch.Tensor, scale: float, dtype: torch.dtype) -> dict:
    model = nn.Linear(grads.numel(), 1, bias=False).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(
        model, optimizer, FixedScale(scale), out=tmp_path / "run.jsonl", format_shares=True
    ) as monitor:
        model.weight.grad = grads.to(dtype).reshape(1, -1).clone()
        optimizer.step()
        return flat(monitor.step(0.0))


@pytest.mark.parametrize("scale", [1.0, 2.0**16, 2.0**-3, 1000.0, 0.1, 3.0, 2.0**100])
def test_format_shares_equal_ml_dtypes_at_any_scale(tmp_path: Path, scale: float) -> None:
    grads = tricky_gradients(scale, seed=int(scale * 7) % 1000)
    record = one_step(tmp_path, grads, scale, torch.float32)
    assert record["format_shares"] == expected_shares(grads.numpy(), scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scale", [1.0, 2.0**16, 1000.0])
def test_format_shares_of_16_bit_valued_gradients(
    tmp_path: Path, dtype: torch.dtype, scale: float
) -> None:
    # float32 gradients holding BF16/FP16 values (autocast), and FP16 gradients (pure FP16).
    exact = tricky_gradients(scale, seed=5).to(dtype).float()
    exact = exact[torch.isfinite(exact)]
    record = one_step(tmp_path, exact, scale, torch.float32)
    assert record["format_shares"] == expected_shares(exact.numpy(), scale)
    if dtype == torch.float16:
        record = one_step(tmp_path, exact, scale, torch.float16)
        assert record["format_shares"] == expected_shares(exact.numpy(), scale)


@pytest.mark.parametrize("scale", [1.0, 2.0**16, 1000.0])
def test_format_shares_of_float64_gradients_are_those_of_their_float32_values(
    tmp_path: Path, scale: float
) -> None:
    # A float64 model's gradients are counted by their float32 values, as its histogram
    # is: the exact check of a bound inside an occupied pattern wrote |g| of float64
    # gradients into its float32 buffer, a RuntimeError ("Found dtype Float but expected
    # Double") at every such statistics step (this failed before, and before this session).
    generator = np.random.default_rng(12)
    spread = generator.standard_normal(2000) * np.exp2(generator.integers(-140, 40, 2000))
    grads = torch.cat([tricky_gradients(scale, seed=12).double(), torch.from_numpy(spread)])
    record = one_step(tmp_path, grads, scale, torch.float64)
    assert record["format_shares"] == expected_shares(grads.numpy(), scale)


def test_lost_updates_equal_numpy(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 1))
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(40).add_(1.0)  # weights where FP16 ulps are large
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        loss = model(torch.randn(8, 64)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        model[0].weight.grad[:4] = 0.0  # zero gradients are not updates
        old = [p.detach().clone().numpy().ravel() for p in model.parameters()]
        optimizer.step()
        record = flat(monitor.step(loss))
    new = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    grads = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
    old_all = np.concatenate(old)
    old16 = old_all.astype(np.float16)
    stepped = (old16.astype(np.float32) + (new - old_all)).astype(np.float16)
    lost = np.sum((stepped == old16) & (grads != 0))
    intended = np.sum(grads != 0)
    figures = record["lost_updates"]
    assert (figures["share"], figures["kind"], figures["intended"]) == (
        lost / intended,
        "fp16_would_lose",
        int(intended),
    )
    assert 0 < lost < intended


def test_lost_updates_of_fp16_weights(tmp_path: Path) -> None:
    torch.manual_seed(4)
    model = nn.Linear(32, 4).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        loss = model(torch.randn(8, 32).half()).float().square().mean()
        loss.backward()
        old = np.concatenate([p.detach().clone().numpy().ravel() for p in model.parameters()])
        optimizer.step()
        record = flat(monitor.step(loss))
    new = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    grads = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
    intended = np.sum(grads != 0)
    assert record["lost_updates"]["kind"] == "actual"
    assert record["lost_updates"]["share"] == np.sum((new == old) & (grads != 0)) / intended


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_layer_amax_is_the_largest_activation_gradient(tmp_path: Path, dtype: torch.dtype) -> None:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    captured: dict[str, list[torch.Tensor]] = {}

    def capture(name: str):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
            output.register_hook(lambda g: captured.setdefault(name, []).append(g.clone()))

        return hook

    for name, module in model.named_children():
        module.register_forward_hook(capture(name))
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(torch.randn(8, 16)).float().square().mean() * 3
        loss.backward()
        optimizer.step()
        record = flat(monitor.step(loss))
    if dtype != torch.float32:  # the 16-bit path reads max |g| from the pattern counts
        assert captured["0"][0].dtype == dtype
    # The activation histogram too (ReLU makes exact zeros; float32 counts them apart).
    values = np.concatenate([g.float().numpy().ravel() for gs in captured.values() for g in gs])
    _, exponent = np.frexp(np.abs(values[values != 0]))
    binades = exponent - 1
    counts = np.bincount(binades - binades.min()).tolist()
    assert record["act_hist"]["lo"] == binades.min() and record["act_hist"]["counts"] == counts
    assert record["act_hist"]["zero"] == np.sum(values == 0) > 0
    for layer in record["layers"]:
        grads = captured[layer["name"]]
        expected = max(float(g.abs().max()) for g in grads)
        assert layer["amax"] == expected, layer["name"]
        headroom = math.log2(65504.0 / expected) if expected > 0 else None
        assert layer["headroom_log2"] == headroom


@pytest.mark.parametrize("scale", [1.0, 2.0**16, 1000.0])
def test_format_shares_of_mixed_gradient_tensors(tmp_path: Path, scale: float) -> None:
    # One tensor of BF16 values (read from its patterns alone), one of full float32 values.
    coarse = tricky_gradients(scale, seed=8).bfloat16().float()
    coarse = coarse[torch.isfinite(coarse)]
    fine = tricky_gradients(scale, seed=9)
    model = nn.ModuleDict({"a": nn.Linear(coarse.numel(), 1), "b": nn.Linear(fine.numel(), 1)})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(
        model, optimizer, FixedScale(scale), out=tmp_path / "run.jsonl", format_shares=True
    ) as monitor:
        model["a"].weight.grad = coarse.reshape(1, -1).clone()
        model["a"].bias.grad = torch.tensor([2.0**-25])
        model["b"].weight.grad = fine.reshape(1, -1).clone()
        model["b"].bias.grad = torch.tensor([3.0])
        optimizer.step()
        record = flat(monitor.step(0.0))
    everything = np.concatenate([coarse.numpy(), [2.0**-25], fine.numpy(), [3.0]])
    assert record["format_shares"] == expected_shares(everything.astype(np.float32), scale)
    hist = record["grad_hist"]
    assert sum(hist["counts"]) + hist["zero"] == everything.size


@pytest.mark.parametrize("scale", [1e39, 1e-50])
def test_format_shares_at_scales_float32_cannot_hold(tmp_path: Path, scale: float) -> None:
    grads = tricky_gradients(1.0, seed=11)
    record = one_step(tmp_path, grads, scale, torch.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = expected_shares(grads.numpy(), float(np.float32(scale)))
    assert record["format_shares"] == expected


def test_lost_updates_of_a_large_model_are_sampled_and_say_so(tmp_path: Path) -> None:
    # Beyond 2**20 weights the old weights are kept for a random sample only: the record
    # says how many updates the share was measured on and bounds it.
    torch.manual_seed(6)
    model = nn.Linear(1100, 1000)  # 1.1M weights
    with torch.no_grad():
        model.weight.mul_(40).add_(1.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        loss = model(torch.randn(8, 1100)).square().mean()
        loss.backward()
        old = np.concatenate([p.detach().clone().numpy().ravel() for p in model.parameters()])
        optimizer.step()
        record = monitor.step(loss)
        figures = record.lost_updates
    new = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    grads = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
    old16 = old.astype(np.float16)
    stepped = (old16.astype(np.float32) + (new - old)).astype(np.float16)
    intended = int(np.sum(grads != 0))
    exact = np.sum((stepped == old16) & (grads != 0)) / intended
    assert figures is not None and figures.intended == intended
    assert figures.sampled is not None and 0.9 * 2**20 < figures.sampled <= 2**20
    assert figures.bound is not None and figures.bound < 0.002
    assert abs(figures.share - exact) <= figures.bound
    assert 0.05 < exact < 0.95  # a share the sample could get wrong
    # The gradient histogram of more than 2**20 values, counted a chunk at a time: exact.
    _, exponent = np.frexp(np.abs(grads[grads != 0]).astype(np.float64))
    binades = exponent - 1
    hist = record.grad_hist
    assert hist is not None and hist.lo == binades.min() and hist.zero == np.sum(grads == 0)
    assert list(hist.counts) == np.bincount(binades - binades.min()).tolist()
