"""`StatsPlan.decode` against the decoder it replaced (`previous_decode` below, the per-layer
`np.add.at` version kept as the oracle), on the plans and host values of real statistics
steps: layers called twice, layers without parameters, a parameter owned by a parent
module, FP16 autocast, steps whose gradients overflow (skipped, non-finite layers), and
the statistics after an alarm step (no activations)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.monitor import plan as plan_module
from fpexplorer.training.monitor.kernels import (
    BINADE_LO,
    CODES,
    INF_CODE,
    NAN_CODE,
    ZERO_CODE,
    histogram_record,
)
from fpexplorer.training.monitor.plan import HostValues, StatsPlan
from fpexplorer.training.records import LayerStats, LostUpdates, StepStats


def previous_decode(plan: StatsPlan, host: HostValues, *, skipped: bool) -> StepStats:
    """The decoder before `np.bincount` (format shares, which it computed the same way
    through `_scaled_at_most`, are left out: the runs below do not ask for them)."""
    layer_count = len(plan.layer_names)
    layer_sumsq = np.zeros(layer_count)
    layer_nonfinite = np.zeros(layer_count, dtype=bool)
    if plan.param_layers:
        norms = host["norms"]
        param_layers = np.asarray(plan.param_layers, dtype=np.int64)
        np.add.at(layer_sumsq, param_layers, norms**2)
        np.logical_or.at(layer_nonfinite, param_layers, ~np.isfinite(norms))
    first_forward = None
    if plan.forward_layers:
        for layer_at, finite in zip(plan.forward_layers, host["forward_finite"], strict=True):
            if not finite:
                first_forward = plan.layer_names[layer_at]
                break
    segments = plan.segments
    histograms = plan._histograms(host, segments)
    n_groups = len(plan.param_groups)
    is_act = np.arange(len(segments)) >= n_groups
    segment_layer = np.asarray([s.layer for s in segments], dtype=np.int64)
    grad_counts = histograms[~is_act].sum(axis=0)
    act_counts = histograms[is_act].sum(axis=0)
    act_layers = segment_layer[is_act]
    layer_act = np.zeros((layer_count, CODES))
    np.add.at(layer_act, act_layers, histograms[is_act])
    layer_amax = np.zeros(layer_count)
    if plan.act_segments:
        with np.errstate(invalid="ignore"):
            np.maximum.at(layer_amax, act_layers, host["act_amax"])
    segment_nonfinite = (histograms[:, INF_CODE] + histograms[:, NAN_CODE]) > 0
    np.logical_or.at(layer_nonfinite, act_layers, segment_nonfinite[is_act])
    lost_updates = None
    if plan.lost_update_kind is not None and not skipped:
        intended = plan.n_param - int(grad_counts[ZERO_CODE])
        in_sample, applied, nonfinite = (int(v) for v in host["lost_updates"])
        share = (in_sample - applied) / in_sample if in_sample else 0.0
        lost_updates = LostUpdates(share, plan.lost_update_kind, intended,
                                   nonfinite_weights=nonfinite or None)  # fmt: skip
    below_fp16 = -24 - BINADE_LO
    layers = []
    for index, name in enumerate(plan.layer_names):
        row = layer_act[index]
        peak = float(layer_amax[index])
        underflow = float(row[:below_fp16].sum() + row[ZERO_CODE])
        total = float(row.sum())
        layers.append(
            LayerStats(
                name=name,
                grad_norm=(
                    math.sqrt(float(layer_sumsq[index])) if index in plan.param_layers else None
                ),
                amax=peak,
                headroom_log2=(
                    math.log2(65504.0 / peak) if peak > 0 and math.isfinite(peak) else None
                ),
                underflow_share=underflow / total if total else 0.0,
                nonfinite=bool(layer_nonfinite[index]),
            )
        )
    act_total = float(act_counts.sum())
    return StepStats(
        grad_hist=histogram_record(grad_counts),
        act_hist=histogram_record(act_counts, plan._act_dtype()) if plan.activations else None,
        act_zero_share=(
            (float(act_counts[ZERO_CODE]) / act_total if act_total else 0.0)
            if plan.activations
            else None
        ),
        layers=tuple(layers),
        first_nonfinite=previous_first_nonfinite(
            plan, act_layers, segment_nonfinite[is_act], layer_nonfinite
        ),
        first_nonfinite_forward=first_forward,
        lost_updates=lost_updates,
        memory=plan.memory,
    )


def previous_first_nonfinite(
    plan: StatsPlan,
    act_layers: np.ndarray,
    act_nonfinite: np.ndarray,
    layer_nonfinite: np.ndarray,
) -> str | None:
    for layer_at in act_layers[act_nonfinite][:1]:
        return plan.layer_names[int(layer_at)]
    for index in reversed(range(len(plan.layer_names))):
        if layer_nonfinite[index]:
            return plan.layer_names[index]
    return None


def test_maximum_is_numpys() -> None:
    values = [0.0, -0.0, 1.0, -1.0, 2.5, math.inf, -math.inf, math.nan, 5e-324]
    for first in values:
        for second in values:
            with np.errstate(invalid="ignore"):  # NaN in, NaN out
                expected = float(np.maximum(np.float64(first), np.float64(second)))
                accumulated = np.array([first])
                np.maximum.at(accumulated, [0], [second])  # the reduction decode replaced
            got = plan_module._maximum(first, second)
            assert repr(got) == repr(expected), (first, second)
            assert repr(got) == repr(float(accumulated[0])), (first, second)


class Shared(nn.Module):
    """One module called twice (two activation gradients for one layer), a parameter of
    its own beside leaf modules, and a layer without parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16))
        self.inner = nn.Linear(16, 16)
        self.act = nn.ReLU()  # zero gradients: underflow shares above 0
        self.head = nn.Linear(16, 3)

        # Zero gradients for some outputs of the second call too (both calls underflow).
        self.register_buffer("mask", (torch.arange(16) % 3 != 0).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inner(x * self.scale))
        return self.head(self.inner(h) * self.mask)


def recorded_steps(tmp_path: Path, autocast: bool) -> list[tuple[Any, HostValues, bool]]:
    recorded: list[tuple[Any, HostValues, bool]] = []
    decode = StatsPlan.decode

    def recording(self: StatsPlan, host: HostValues, *, skipped: bool) -> StepStats:
        recorded.append((self, host, skipped))
        return decode(self, host, skipped=skipped)

    torch.manual_seed(0)
    model = Shared()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module.StatsPlan, "decode", recording)
        with AmpMonitor(model, optimizer, scaler, out=tmp_path / "run.jsonl",
                        stats_every=2) as monitor:  # fmt: skip
            for step in range(7):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = model(torch.randn(8, 16)).float().square().mean()
                if step in (2, 5):
                    loss = loss * math.inf  # overflowing gradients: a skipped step
                if step == 3:
                    loss = loss * 2.0**-40  # gradients below FP16's range
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                monitor.step(loss)
    return recorded


@pytest.mark.parametrize("autocast", [False, True])
def test_decode_equals_the_previous_decoder(tmp_path: Path, autocast: bool) -> None:
    recorded = recorded_steps(tmp_path, autocast)
    # Statistics steps, a skipped one among them, and the late statistics of a skipped step
    # without statistics (its activation gradients are gone).
    assert len(recorded) >= 5
    assert sum(skipped for _, _, skipped in recorded) == 2
    assert any(not plan.activations for plan, _, _ in recorded)
    assert any(plan.lost_update_kind is not None for plan, _, _ in recorded)
    for plan, host, skipped in recorded:
        layers = [segment.layer for segment in plan.act_segments]
        assert not plan.activations or len(set(layers)) < len(layers)  # "inner" twice
        got = plan.decode(host, skipped=skipped)
        # repr: NaN equals NaN there, and -0.0 differs from 0.0.
        assert repr(got) == repr(previous_decode(plan, host, skipped=skipped))
    shares = [layer.underflow_share for plan, host, s in recorded
              for layer in plan.decode(host, skipped=s).layers]  # fmt: skip
    assert 0 < max(shares) < 1
    nonfinite = [plan.decode(host, skipped=s) for plan, host, s in recorded if s]
    assert all(stats.first_nonfinite is not None for stats in nonfinite)
