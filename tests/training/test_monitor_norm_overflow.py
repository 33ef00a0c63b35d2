"""A gradient norm above float32's sqrt(max) (~1.8e19), every element finite: a float32
sum of squares overflows, and the record said inf, the layer "non-finite" and named it the
first inf/NaN gradient, while no gradient element was inf or NaN. The norms against numpy
in float64; an inf gradient still reads inf."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.records import StepRecord
from fpexplorer.training.runlog import load_run


def _huge_gradient_steps(path: Path, stats_every: int, factor: float) -> list[StepRecord]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay as they are
    inputs = torch.ones(2, 4)
    with AmpMonitor(model, optimizer, None, out=path, stats_every=stats_every) as monitor:
        for _ in range(3):
            optimizer.zero_grad()
            # d loss / d output = factor: each gradient element ~1e19, finite in float32.
            (model(inputs).sum() * factor).backward()
            optimizer.step()
            monitor.step((model(inputs).sum() * factor).detach())
    return load_run(path).steps


def _numpy_norm(model_grads: list[np.ndarray]) -> float:
    return float(np.linalg.norm(np.concatenate([g.ravel() for g in model_grads])))


@pytest.mark.parametrize("stats_every", [1, 0])
def test_a_finite_gradient_norm_above_float32s_reach_is_recorded(
    tmp_path: Path, stats_every: int
) -> None:
    factor = 1e19
    steps = _huge_gradient_steps(tmp_path / "run.jsonl", stats_every, factor)
    # The oracle: the same model's gradients in float64.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 1)).double()
    (model(torch.ones(2, 4, dtype=torch.float64)).sum() * factor).backward()
    grads = [p.grad.numpy() for p in model.parameters()]  # type: ignore[union-attr]
    expected = _numpy_norm(grads)
    assert expected > 2.0**64  # float32's sum of squares overflows: the case under test
    assert all(np.isfinite(g).all() for g in grads)
    for step in steps:
        assert step.grad_norm == pytest.approx(expected, rel=1e-6)
        assert not step.skipped
    if stats_every == 0:  # nothing went wrong: no alarm statistics on any step
        assert all(step.stats is None for step in steps)
        return
    first = steps[0].stats
    assert first is not None
    assert first.first_nonfinite is None
    assert first.grad_hist.inf == 0 and first.grad_hist.nan == 0
    by_layer = {layer.name: layer for layer in first.layers}
    for name, params in (("0", grads[:2]), ("1", grads[2:])):
        assert by_layer[name].grad_norm == pytest.approx(_numpy_norm(params), rel=1e-6)
        assert not by_layer[name].nonfinite


def test_an_inf_gradient_still_reads_inf(tmp_path: Path) -> None:
    steps = _huge_gradient_steps(tmp_path / "run.jsonl", 1, math.inf)
    stats = steps[0].stats
    assert math.isinf(steps[0].grad_norm) or math.isnan(steps[0].grad_norm)
    assert stats is not None and stats.first_nonfinite is not None
