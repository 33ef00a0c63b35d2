"""The monitor's numbers against oracles: numpy for binade histograms, ml_dtypes for what
each format flushes, rounds to a subnormal or overflows."""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from monitor_helpers import flat
from torch import nn

from fpexplorer.training.monitor import (
    FORMAT_RANGES,
    AmpMonitor,
    FormatRange,
    binade_histogram,
)
from fpexplorer.training.monitor.kernels import count_at_most
from fpexplorer.training.runlog import load_run


def numpy_histogram(arrays: list[np.ndarray]) -> dict[str, object]:
    """Oracle: floor(log2 |x|) via numpy's frexp in float64, counted with a Counter."""
    values = np.concatenate([a.astype(np.float64).ravel() for a in arrays])
    zero = int(np.sum(values == 0))
    inf = int(np.sum(np.isinf(values)))
    nan = int(np.sum(np.isnan(values)))
    finite = values[np.isfinite(values) & (values != 0)]
    _, exponent = np.frexp(np.abs(finite))
    binades = exponent - 1
    if len(binades) == 0:
        return {"lo": 0, "counts": [], "zero": zero, "inf": inf, "nan": nan}
    lo, hi = int(binades.min()), int(binades.max())
    counts = np.bincount(binades - lo, minlength=hi - lo + 1)
    return {"lo": lo, "counts": counts.tolist(), "zero": zero, "inf": inf, "nan": nan}


def edge_values(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    smallest = info.tiny * info.eps
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, info.max, -info.max, info.tiny,
                smallest, -smallest, 3 * smallest, info.tiny - smallest, 1.0, -1.5]  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    # Magnitudes across the whole range of the dtype, subnormals included.
    exponents = torch.randint(int(math.log2(smallest)), int(math.log2(info.max)), (4000,),
                              generator=generator)  # fmt: skip
    signs = torch.where(torch.rand(4000, generator=generator) < 0.5, -1.0, 1.0)
    randoms = signs * torch.rand(4000, generator=generator).add(1) * torch.pow(2.0, exponents)
    return torch.cat([torch.tensor(specials), randoms]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_binade_histogram_equals_numpy(dtype: torch.dtype) -> None:
    tensors = [edge_values(dtype), edge_values(dtype)[::7].reshape(-1, 1)]
    arrays = [t.float().numpy() for t in tensors]  # exact: each is a float32 value
    assert binade_histogram(tensors).to_json() == numpy_histogram(arrays)


def test_float32_subnormals_have_their_own_binades() -> None:
    values = torch.tensor([2.0**-149, 3 * 2.0**-149, 2.0**-127, 2.0**-126], dtype=torch.float32)
    assert binade_histogram([values]).to_json() == numpy_histogram([values.numpy()])
    assert binade_histogram([values]).lo == -149


ML_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}


@pytest.mark.parametrize("fmt", FORMAT_RANGES, ids=lambda f: f.name)
def test_format_thresholds_agree_with_ml_dtypes_rounding(fmt: object) -> None:
    assert isinstance(fmt, FormatRange)
    target = ML_DTYPES[fmt.name]
    finfo = ml_dtypes.finfo(target)
    # Every threshold and its float32 neighbours, plus values spread over the range.
    assert fmt.min_subnormal is not None
    anchors = [fmt.flush_max, fmt.subnormal_max, fmt.finite_max_input, float(fmt.min_normal),
               float(fmt.min_subnormal), float(fmt.max)]  # fmt: skip
    values = []
    for anchor in anchors:
        a = np.float32(anchor)
        values += [np.nextafter(a, np.float32(0)), a, np.nextafter(a, np.float32(np.inf))]
    values += list(np.geomspace(float(fmt.min_subnormal) / 8, min(float(fmt.max) * 4, 3e38), 2000))
    with np.errstate(over="ignore"):  # overflowing is the point of some values
        rounded_all = np.array(values, dtype=np.float32).astype(target).astype(np.float64)
    for value, rounded in zip(np.array(values, dtype=np.float32), rounded_all, strict=True):
        flushed = rounded == 0
        overflow = not np.isfinite(rounded)
        subnormal = (not flushed) and (not overflow) and abs(rounded) < float(finfo.smallest_normal)
        assert flushed == (0 < value <= fmt.flush_max), (fmt.name, value)
        assert subnormal == (fmt.flush_max < value <= fmt.subnormal_max), (fmt.name, value)
        assert overflow == (value > fmt.finite_max_input), (fmt.name, value)


def test_recorded_histograms_equal_numpy_on_the_same_tensors(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 3))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
    captured: list[torch.Tensor] = []

    # The test's own hooks, independent of the monitor's, see the same activation gradients.
    def capture(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
        output.register_hook(lambda grad: captured.append(grad.detach().clone()))

    for module in model:
        module.register_forward_hook(capture)
    with AmpMonitor(
        model, optimizer, scaler, out=tmp_path / "run.jsonl", stats_every=1, format_shares=True
    ) as monitor:
        for _ in range(2):
            captured.clear()
            # Inputs from 1 down to 1e-12: the gradients span every format's range.
            x = torch.randn(64, 8) * torch.logspace(0, -12, 8)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x).float().square().mean() * 1e-4
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            record = flat(monitor.step(loss))
            grads = [p.grad.numpy() for p in model.parameters() if p.grad is not None]
            assert {k: record["grad_hist"][k] for k in ("lo", "counts", "zero", "inf", "nan")} \
                == numpy_histogram(grads)  # fmt: skip
            assert sum(record["grad_hist"]["counts"]) + record["grad_hist"]["zero"] == sum(
                p.numel() for p in model.parameters()
            )  # every parameter-gradient element once
            act_oracle = numpy_histogram([g.float().numpy() for g in captured])
            assert {k: record["act_hist"][k] for k in act_oracle} == act_oracle
            assert record["act_hist"]["dtype"] == "float16"
            total = sum(g.numel() for g in captured)
            zeros = sum(int((g == 0).sum()) for g in captured)
            assert record["act_zero_share"] == zeros / total
            # Format shares: the unscaled gradients times this step's scale, vs ml_dtypes.
            scaled = np.concatenate([g.ravel() for g in grads]).astype(np.float32)
            scaled = scaled * np.float32(record["scale"])
            for name, target in ML_DTYPES.items():
                with np.errstate(over="ignore"):
                    cast = scaled.astype(target).astype(np.float64)
                smallest_normal = float(ml_dtypes.finfo(target).smallest_normal)
                expected = {
                    "underflow": np.sum((scaled != 0) & (cast == 0)) / scaled.size,
                    "subnormal": np.sum((cast != 0) & (np.abs(cast) < smallest_normal))
                    / scaled.size,
                    "overflow": np.sum(~np.isfinite(cast)) / scaled.size,
                }
                assert record["format_shares"][name] == expected, name
            shares = record["format_shares"]
            assert shares["float8_e4m3fn"]["underflow"] > 0 and shares["float16"]["subnormal"] > 0
    run = load_run(tmp_path / "run.jsonl")
    assert run.problems == () and run.status == "completed" and len(run.steps) == 2


def test_count_at_most_is_exact_at_every_bound() -> None:
    bounds = sorted({b for f in FORMAT_RANGES for b in
                     (f.flush_max, f.subnormal_max, f.finite_max_input)})  # fmt: skip
    near = []
    for bound in bounds:
        b = np.float32(bound)
        near += [np.nextafter(b, np.float32(0)), b, np.nextafter(b, np.float32(np.inf))]
    generator = np.random.default_rng(3)
    spread = generator.standard_normal(5000) * np.exp2(generator.integers(-150, 128, 5000))
    values = np.concatenate([near, -np.array(near), spread, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    with np.errstate(over="ignore"):  # the spread reaches past float32's range: inf
        values = values.astype(np.float32)
    counts = count_at_most(torch.from_numpy(values), bounds).tolist()
    with np.errstate(invalid="ignore"):
        expected = [int(np.sum(np.abs(values) <= np.float32(b))) for b in bounds]
    assert counts == [*expected, int(np.sum(values == 0))]


def test_a_layer_without_gradients_is_counted_as_absent(tmp_path: Path) -> None:
    class PartlyUsed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 2)
            self.unused = nn.Linear(4, 2)  # never called: its gradients stay None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)  # type: ignore[no-any-return]

    model = PartlyUsed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        loss = model(torch.ones(3, 4)).sum()
        loss.backward()
        optimizer.step()
        record = flat(monitor.step(loss))
    assert sum(record["grad_hist"]["counts"]) + record["grad_hist"]["zero"] == 10
    assert record["lost_updates"]["intended"] == 10
    assert [layer["name"] for layer in record["layers"]] == ["used", "unused"]


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_recorded_activation_figures_equal_numpy_for_large_and_small_tensors(
    tmp_path: Path, autocast: torch.dtype | None
) -> None:
    # A batch of 600: the 32-wide outputs (19200 elements) are counted in their backward
    # hook, the 3-wide one (1800) with the step's other small ones; ReLU makes zeros.
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                          nn.Linear(32, 3))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    captured: list[torch.Tensor] = []

    def capture(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
        output.register_hook(lambda grad: captured.append(grad.detach().clone()))

    for module in model:
        module.register_forward_hook(capture)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for _ in range(2):
            captured.clear()
            x = torch.randn(600, 8) * torch.logspace(0, -30, 8)
            with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=bool(autocast)):
                loss = model(x).float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record = flat(monitor.step(loss))
            assert {t.numel() for t in captured} == {19200, 1800}
            act_oracle = numpy_histogram([g.float().numpy() for g in captured])
            assert {k: record["act_hist"][k] for k in act_oracle} == act_oracle
            total = sum(g.numel() for g in captured)
            zeros = sum(int((g == 0).sum()) for g in captured)
            assert zeros > 0 and record["act_zero_share"] == zeros / total
            # Backward reaches the layers in reverse: the captures are in backward order.
            peaks = [float(g.float().abs().max()) for g in reversed(captured)]
            assert [layer["amax"] for layer in record["layers"]] == peaks


@pytest.mark.parametrize("values", ["ordinary", "edge"])
def test_a_large_float32_parameter_group_on_a_cpu_equals_numpy(tmp_path: Path, values: str) -> None:
    # Parameter gradients of 2**14 float32 elements or more are counted on a CPU by their
    # exponent fields and placed with the activation gradients' ("exponents" rows); the
    # record's histogram equals numpy's, with zeros of both signs, and with subnormals,
    # infinities and NaN (counted again from the values) in the "edge" case.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 160), nn.ReLU(), nn.Linear(160, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for step in range(2):
            optimizer.zero_grad()
            loss = model(torch.randn(16, 128)).square().mean()
            loss.backward()
            weight_grad = model[0].weight.grad
            assert weight_grad is not None and weight_grad.numel() >= 2**14
            flat_grad = weight_grad.view(-1)
            flat_grad[::7] = 0.0
            flat_grad[1::11] = -0.0
            if values == "edge":
                special = edge_values(torch.float32)
                flat_grad[2 : 2 + special.numel()] = special
            optimizer.step()
            record = flat(monitor.step(loss))
            grads = [p.grad.numpy() for p in model.parameters() if p.grad is not None]
            histogram = numpy_histogram(grads)
            assert {k: record["grad_hist"][k] for k in histogram} == histogram, step
            assert histogram["zero"] > 2**14 // 7
            assert (histogram["nan"] > 0) == (values == "edge")
