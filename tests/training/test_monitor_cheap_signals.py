"""The signals of every step (loss, scale, growth tracker, hysteresis, gradient norm, max
|gradient|) on the plain path, against numpy and the scaler's own state: with each kind of
scaler, with 16-bit, mixed and float64 gradients, with inf and NaN gradients; and the same
figures as a statistics step reads for the same gradients."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.records import StepRecord
from fpexplorer.training.scaler_rules import resolve_settings
from fpexplorer.training.scalers import make_grad_scaler


class FixedScale:
    """Any object with get_scale() serves as the monitor's scaler."""

    def get_scale(self) -> float:
        return 1024.0


def make_scaler(kind: str) -> Any:
    if kind == "none":
        return None
    if kind == "grad":
        return torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    if kind == "disabled":
        return torch.amp.GradScaler("cpu", enabled=False)
    if kind == "deepspeed":
        return make_grad_scaler(resolve_settings("deepspeed"), "cpu")
    return FixedScale()


def numpy_norm(tensors: list[torch.Tensor]) -> float:
    """The 2-norm of all gradients in float64 (16-bit values are exact in float64)."""
    return float(np.linalg.norm(np.concatenate([t.double().numpy().ravel() for t in tensors])))


Seen = list[tuple[StepRecord, dict[str, Any]]]


def train(model: nn.Module, scaler: Any, stats_every: int, steps: int, path: Path) -> Seen:
    """A plain loop; each record with what the oracle saw at that step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(3)
    dtype = next(model.parameters()).dtype
    seen = []
    with AmpMonitor(model, optimizer, scaler, out=path, stats_every=stats_every) as monitor:
        for _ in range(steps):
            inputs = torch.randn(8, 6, generator=generator, dtype=dtype)
            loss = model(inputs).float().square().mean()
            optimizer.zero_grad()
            scaled = scaler is not None and hasattr(scaler, "scale")
            (scaler.scale(loss) if scaled else loss).backward()
            if scaled:
                scaler.step(optimizer)  # unscales the gradients in place
                scaler.update()
            else:
                optimizer.step()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            # Loss-scaled runs (any scaler but a disabled GradScaler) record max |gradient|.
            scaling = scaler is not None and (not scaled or scaler.is_enabled())
            oracle = {
                "loss": loss.item(),
                "grad_norm": numpy_norm(grads),
                "grad_amax": max(float(g.abs().max()) for g in grads) if scaling else None,
                "scale_after": float(scaler.get_scale()) if scaler is not None else 1.0,
            }
            seen.append((monitor.step(loss), oracle))
    return seen


@pytest.mark.parametrize("kind", ["none", "grad", "disabled", "deepspeed", "fixed"])
def test_the_plain_signals_equal_the_oracles_with_each_kind_of_scaler(
    tmp_path: Path, kind: str
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    scaler = make_scaler(kind)
    seen = train(model, scaler, 0, 8, tmp_path / "run.jsonl")
    previous_scale = seen[0][0].scale
    for record, oracle in seen:
        assert record.stats is None
        assert record.loss == oracle["loss"]
        assert record.grad_norm == pytest.approx(oracle["grad_norm"], rel=1e-6)
        assert record.scale == previous_scale  # the scale this step used
        previous_scale = oracle["scale_after"]
        if oracle["grad_amax"] is None:
            assert record.grad_amax is None
        else:
            assert record.grad_amax == oracle["grad_amax"]
    if kind == "grad":
        trackers = [record.growth_tracker for record, _ in seen]
        assert trackers == [1, 2, 0, 1, 2, 0, 1, 2]  # growth_interval 3, no overflow
    if kind == "deepspeed":
        assert all(record.hysteresis == scaler.hysteresis_tracker for record, _ in seen)
    else:
        assert all(record.hysteresis is None for record, _ in seen)


@pytest.mark.parametrize(
    ("poison", "expected"),
    [
        ({0: math.inf}, math.inf),
        ({0: -math.inf}, math.inf),
        ({0: math.nan}, math.nan),
    ],
)
@pytest.mark.parametrize("stats_every", [0, 1])
def test_a_non_finite_gradient_gives_an_inf_or_nan_norm(
    tmp_path: Path, poison: dict[int, float], expected: float, stats_every: int
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl",
                    stats_every=stats_every) as monitor:  # fmt: skip
        model(torch.randn(4, 6)).square().mean().backward()
        model[0].weight.grad.view(-1)[0] = poison[0]  # type: ignore[union-attr]
        optimizer.step()
        record = monitor.step(torch.tensor(0.5))
    if math.isnan(expected):
        assert math.isnan(record.grad_norm)
    else:
        assert record.grad_norm == expected
    assert record.stats is not None  # a non-finite norm is an alarm: statistics at once


@pytest.mark.parametrize("stats_every", [0, 1])
def test_inf_and_nan_gradients_together_give_a_nan_norm(tmp_path: Path, stats_every: int) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl",
                    stats_every=stats_every) as monitor:  # fmt: skip
        for param in model.parameters():
            param.grad = torch.ones_like(param)
        model[0].weight.grad[0, 0] = math.inf  # type: ignore[index]
        model[1].weight.grad[0, 0] = math.nan  # type: ignore[index]
        optimizer.step()
        record = monitor.step(0.0)
    assert math.isnan(record.grad_norm)  # numpy's norm of the same values is NaN too


@pytest.mark.parametrize("stats_every", [0, 1])
@pytest.mark.parametrize("wide", [torch.float32, torch.float64])
@pytest.mark.parametrize("wide_has_grad", [True, False])
def test_a_model_of_16_bit_and_wider_layers_sums_16_bit_gradients_in_float32(
    tmp_path: Path, stats_every: int, wide: torch.dtype, wide_has_grad: bool
) -> None:
    # 4096 FP16 gradients of 2000: each fits FP16, their norm (128000) does not.
    model = nn.Sequential(nn.Linear(64, 64, bias=False).half(), nn.Linear(4, 4, bias=False))
    model[1].to(wide)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl",
                    stats_every=stats_every) as monitor:  # fmt: skip
        model[0].weight.grad = torch.full((64, 64), 2000.0, dtype=torch.float16)
        if wide_has_grad:
            model[1].weight.grad = torch.full((4, 4), 3.0, dtype=wide)  # norm 12
        optimizer.step()
        record = monitor.step(0.0)
    assert record.grad_norm == (math.hypot(128000.0, 12.0) if wide_has_grad else 128000.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_model_converted_after_the_monitor_was_made_gets_its_norm_in_the_right_dtype(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    model = nn.Linear(64, 64, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=0) as monitor:
        model.weight.grad = torch.full((64, 64), 0.5)
        optimizer.step()
        assert monitor.step(0.0).grad_norm == 32.0
        model.to(dtype)  # the parameters change dtype in place
        model.weight.grad = torch.full((64, 64), 2000.0, dtype=dtype)
        optimizer.step()
        # Summed in float32 (in FP16 the norm overflows to inf), or float64's own.
        assert monitor.step(0.0).grad_norm == 128000.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("converted", [0, 1])
def test_a_layer_converted_after_the_monitor_was_made_gets_its_norm_in_the_right_dtype(
    tmp_path: Path, dtype: torch.dtype, converted: int
) -> None:
    # One layer of a float32 model (the first or the last) changes dtype after the monitor
    # was made: its gradients are summed in float32 (FP16's sum overflows, BF16's rounds
    # to 8 bits) or float64, beside the other layer's float32.
    model = nn.Sequential(nn.Linear(64, 64, bias=False), nn.Linear(64, 64, bias=False))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=0) as monitor:
        for layer in model:
            layer.weight.grad = torch.full((64, 64), 0.5)
        optimizer.step()
        assert monitor.step(0.0).grad_norm == math.hypot(32.0, 32.0)
        model[converted].to(dtype)
        # 1000..1250: each fits FP16, their norm (~72000) does not.
        grad = (torch.arange(64 * 64).reshape(64, 64) % 251 + 1000).to(dtype)
        model[converted].weight.grad = grad
        model[1 - converted].weight.grad = torch.full((64, 64), 0.5)
        optimizer.step()
        oracle = numpy_norm([grad, torch.full((64, 64), 0.5)])
        # float32's rounding of the sum of squares, far below FP16's or BF16's.
        assert monitor.step(0.0).grad_norm == pytest.approx(oracle, rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_the_plain_norm_of_bf16_and_float64_gradients_equals_numpy(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(dtype)
    seen = train(model, None, 0, 3, tmp_path / "run.jsonl")
    for record, oracle in seen:
        # bf16 gradients summed in float32: float32's rounding, far below bf16's.
        assert record.grad_norm == pytest.approx(oracle["grad_norm"], rel=1e-6)


@pytest.mark.parametrize("kind", ["none", "grad", "deepspeed"])
def test_a_statistics_step_reads_the_same_signals_as_a_plain_one(tmp_path: Path, kind: str) -> None:
    runs = []
    for stats_every in (0, 1):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        runs.append(train(model, make_scaler(kind), stats_every, 5,
                          tmp_path / f"run-{stats_every}.jsonl"))  # fmt: skip
    for (plain, _), (full, _) in zip(*runs, strict=True):
        assert full.stats is not None and plain.stats is None
        assert (plain.loss, plain.scale, plain.skipped, plain.growth_tracker, plain.lr) == (
            full.loss, full.scale, full.skipped, full.growth_tracker, full.lr
        )  # fmt: skip
        assert (plain.grad_amax, plain.hysteresis) == (full.grad_amax, full.hysteresis)
        assert plain.grad_norm == pytest.approx(full.grad_norm, rel=1e-12)
