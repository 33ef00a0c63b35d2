"""FP8 recipes: torchao's float8 linears measured by the monitor (the recomputed casts equal
torchao's own, bit for bit), and delayed scaling (the scale lags a spike, which saturates)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
import torchao.float8.float8_scaling_utils as scaling_utils
from torch import nn

from fpexplorer.training.lowprec.fp8 import (
    DelayedScaling,
    DelayedScalingLinear,
    choose_linears,
    convert_delayed_fp8,
    convert_torchao_fp8,
    format_max,
    needs_emulation,
    rowwise_scale,
    tensorwise_scale,
    torchao_cast,
)
from fpexplorer.training.lowprec.tensorwise import quantize_tensorwise
from fpexplorer.training.monitor.quant import QuantCollector
from fpexplorer.training.records import Histogram, QuantTensorStats


def test_format_limits_come_from_the_engine_and_match_torch() -> None:
    assert format_max("float8_e4m3fn") == 448.0 == torch.finfo(torch.float8_e4m3fn).max
    assert format_max("float8_e5m2") == 57344.0 == torch.finfo(torch.float8_e5m2).max


def test_a_cpu_emulates_fp8() -> None:
    assert needs_emulation(torch.device("cpu"))
    assert needs_emulation(torch.device("cpu"), "rowwise")


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 48), nn.ReLU(),
                         nn.Linear(48, 16), nn.ReLU(), nn.Linear(16, 3))  # fmt: skip


def test_linears_kernels_cannot_take_stay_in_high_precision_and_say_why() -> None:
    choice = choose_linears(_model(), keep_first_last=False)
    assert choice.quantized == ("2", "4")
    assert [name for name, _ in choice.kept] == ["0", "6"]
    assert "2->32" in choice.kept[0][1] and "divisible by 16" in choice.kept[0][1]
    kept = choose_linears(_model(), keep_first_last=True)
    assert kept.quantized == ("2", "4")
    assert all("first/last" in why for _, why in kept.kept)
    wide = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 16))
    assert choose_linears(wide, keep_first_last=True).quantized == ("1",)
    assert choose_linears(wide, keep_first_last=False).quantized == ("0", "1", "2")


def _record_torchao_casts(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every cast torchao's float8 linears make: the high-precision tensor, the scale and
    the FP8 data, by the role torchao gives the tensor."""
    casts: list[dict[str, Any]] = []
    original = scaling_utils.hp_tensor_and_scale_to_float8

    def recording(hp: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, config: Any,
                  role: Any, axiswise_dim: int | None = None) -> Any:  # fmt: skip
        result = original(hp, scale, dtype, config, role, axiswise_dim)
        casts.append({"hp": hp.detach().clone(), "scale": scale.clone(), "dtype": dtype,
                      "data": result._data.clone(), "role": role.name.lower(),
                      "axis": axiswise_dim})  # fmt: skip
        return result

    monkeypatch.setattr(scaling_utils, "hp_tensor_and_scale_to_float8", recording)
    return casts


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_recomputed_casts_equal_torchaos_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, recipe: Any
) -> None:
    model = _model()
    convert_torchao_fp8(model, recipe, torch.device("cpu"), keep_first_last=False)
    collector = QuantCollector(model)
    assert [name for name, _ in collector.torchao] == ["2", "4"]
    casts = _record_torchao_casts(monkeypatch)
    collector.arm(True)
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(1)) * 3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().square().mean().backward()
    stats = collector.take()
    collector.arm(False)
    assert casts, "torchao cast nothing: the recipe was not applied"
    monitored: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}
    for cast in casts:
        fmt = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}[
            cast["dtype"]
        ]
        hp, their_scale = cast["hp"], cast["scale"]
        # The dequantized FP8 values the emulated matmul sees.
        theirs = cast["data"].float() / their_scale
        if recipe == "tensorwise":
            scale = tensorwise_scale(hp.abs().max(), fmt)
        elif cast["axis"] == 0:  # scaled along dim 0: the rows of the transpose
            scale = rowwise_scale(hp.t(), fmt).t()
        else:
            scale = rowwise_scale(hp, fmt)
        assert torch.equal(scale, their_scale)
        ours = quantize_tensorwise(hp.float(), fmt, scale).values
        assert torch.equal(ours.view(torch.int32), theirs.view(torch.int32))
        # torchao hands the weight over transposed: the monitor casts the module's weight.
        # It measures the casts of the forward matmul and of grad_input's: along dim 0 of
        # that transpose, along the last dimension of the input and the output gradient.
        transposed = cast["role"] == "weight"
        if recipe == "rowwise" and transposed != (cast["axis"] == 0):
            continue
        rows, values = (hp.t(), theirs.t()) if transposed else (hp, theirs)
        measured = torchao_cast(collector.torchao[0][1].config, cast["role"], rows)
        assert measured is not None
        assert torch.equal(measured.values.view(torch.int32), values.float().view(torch.int32))
        monitored.setdefault((cast["role"], tuple(rows.shape)), {**cast, "rows": rows,
                             "values": values, "fmt": fmt})  # fmt: skip
    # The monitor's records: each of the two layers, each role, in the order torchao cast.
    assert [(s.layer, s.role) for s in stats] == [
        ("2", "input"), ("2", "weight"), ("4", "input"), ("4", "weight"),
        ("4", "grad_output"), ("2", "grad_output"),
    ]  # fmt: skip
    for record in stats:
        out_features, in_features = model[int(record.layer)].weight.shape
        shape = {"input": (64, in_features), "weight": (out_features, in_features),
                 "grad_output": (64, out_features)}[record.role]  # fmt: skip
        expected = _expected_record(record.layer, record.role, monitored[record.role, shape])
        assert dataclasses.replace(record, sqnr_db=0.0) == dataclasses.replace(
            expected, sqnr_db=0.0
        )
        assert record.sqnr_db == pytest.approx(expected.sqnr_db, rel=1e-12)
        assert record.sqnr_db > 10
    # Nothing is measured on a step the collector is not armed for.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x).float().sum().backward()
    assert collector.take() == ()


def _expected_record(layer: str, role: str, cast: dict[str, Any]) -> QuantTensorStats:
    """The record of a torchao cast, by numpy: shares of all elements, SQNR over the
    dequantized values, and for row scales the binades of 1 / torchao's scale (the factor
    that dequantizes a row, as a block scale does)."""
    x = cast["rows"].double().numpy()
    q = cast["values"].double().numpy()
    scale = cast["scale"].numpy()  # float32
    if cast["rows"] is not cast["hp"]:
        scale = scale.T
    amax = float(np.abs(x).max())
    fmt = cast["fmt"]
    # Saturated: x * scale as the cast computes it, in float32, beyond the format's max.
    saturated = np.abs(x.astype(np.float32) * scale) > format_max(fmt)
    per_tensor: float | None = None
    scale_hist: Histogram | None = None
    if scale.size == 1:
        per_tensor = float(scale)
    else:
        binades, counts = np.unique(np.floor(np.log2(1.0 / scale)), return_counts=True)
        dense = dict(zip(binades.astype(int).tolist(), counts.tolist(), strict=True))
        lo, hi = min(dense), max(dense)
        scale_hist = Histogram(lo=lo, counts=tuple(dense.get(b, 0) for b in range(lo, hi + 1)))
    return QuantTensorStats(
        layer=layer,
        role=role,
        format=fmt,
        amax=amax,
        scale=per_tensor,
        scale_hist=scale_hist,
        saturated=float(saturated.sum()) / x.size,
        flushed=float(((x != 0) & (q == 0)).sum()) / x.size,
        sqnr_db=10 * math.log10((x * x).sum() / ((x - q) ** 2).sum()),
    )


def _spiky_steps(layer: DelayedScalingLinear, amaxes: list[float]) -> list[Any]:
    """One forward and backward per amax, with inputs whose largest magnitude is that amax."""
    base = torch.linspace(-1.0, 1.0, 16 * 16).reshape(16, 16)
    records = []
    for amax in amaxes:
        layer.collect_stats = True
        x = (base * amax).requires_grad_()
        layer(x).sum().backward()
        records.append({s.role: s for s in layer.take_quant_stats()})
    return records


def test_the_delayed_scale_lags_a_spike_which_saturates() -> None:
    torch.manual_seed(0)
    layer = DelayedScalingLinear.from_linear(nn.Linear(16, 16), DelayedScaling(amax_history=3))
    records = _spiky_steps(layer, [1.0, 1.0, 64.0, 1.0, 1.0, 1.0, 1.0])
    scales = [r["input"].scale for r in records]
    # The first cast has no history (scale 1, as in Transformer Engine); then the scale
    # comes from the largest amax of the last three steps: the spike at step 2 is cast
    # with the scale of amax 1, and the scale stays at the spike's for three steps.
    assert scales == [1.0, 448.0, 448.0, 7.0, 7.0, 7.0, 448.0]
    spike = records[2]["input"]
    assert spike.amax == 64.0
    values = torch.linspace(-1.0, 1.0, 256) * 64.0
    assert spike.saturated == float((values.abs() * 448.0 > 448.0).sum()) / 256
    assert spike.saturated > 0.9 and spike.sqnr_db < 10
    assert records[3]["input"].saturated == 0.0  # the scale caught up
    # Current (per-step) scaling of the same tensor saturates nothing.
    assert float(tensorwise_scale(torch.tensor(64.0), "float8_e4m3fn")) == 7.0
    # The cast uses the scale before the update: the one after it is the next step's.
    assert float(layer.fp8_scale[0]) == 448.0


def test_most_recent_amax_and_the_margin() -> None:
    settings = DelayedScaling(amax_history=8, amax_compute="most_recent", margin=1)
    layer = DelayedScalingLinear.from_linear(nn.Linear(16, 16), settings)
    records = _spiky_steps(layer, [1.0, 64.0, 1.0, 1.0])
    # most_recent: the previous step's amax alone; margin 1 halves the scale.
    assert [r["input"].scale for r in records] == [1.0, 224.0, 3.5, 224.0]
    assert records[1]["input"].saturated > 0  # 64 * 224 > 448


def test_delayed_scaling_trains_like_fp32_and_keeps_the_parameters() -> None:
    fp32 = _model()
    fp8 = _model()
    choice = convert_delayed_fp8(fp8, DelayedScaling(amax_history=4), keep_first_last=False)
    assert choice.quantized == ("2", "4")
    assert isinstance(fp8[2], DelayedScalingLinear) and type(fp8[0]) is nn.Linear
    assert all(torch.equal(a, b) for a, b in zip(fp32.parameters(), fp8.parameters(),
                                                   strict=True))  # fmt: skip
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(2))
    losses = []
    for model in (fp32, fp8):
        loss = model(x).square().mean()
        loss.backward()
        losses.append(float(loss.detach()))
        assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())
    assert losses[1] == pytest.approx(losses[0], rel=0.05)
    state = fp8.state_dict()
    assert state["2.amax_history"].shape == (3, 4) and state["2.fp8_scale"].shape == (3,)
