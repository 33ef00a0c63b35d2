"""`monitor.quant.QuantCollector`: every kind of quantized layer in one model (torchao's
Float8Linear, the delayed-scaling linear, an MX linear), read in one host copy."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from fpexplorer.training.lowprec.block_linear import BlockScaledLinear
from fpexplorer.training.lowprec.fp8 import (
    DelayedScaling,
    DelayedScalingLinear,
    convert_torchao_fp8,
)
from fpexplorer.training.monitor.quant import QuantCollector
from fpexplorer.training.records import QUANT_ROLES


def _mixed_model() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 16))  # fmt: skip
    first = nn.Sequential(model[0])  # torchao converts every nn.Linear, subclasses too
    convert_torchao_fp8(first, "tensorwise", torch.device("cpu"), keep_first_last=False)
    model[0] = first[0]
    model[2] = DelayedScalingLinear.from_linear(model[2], DelayedScaling(amax_history=2), "2")
    model[4] = BlockScaledLinear.from_linear(model[4], "mxfp8_e4m3", name="4")
    return model


def _step(model: nn.Module) -> None:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    model(x).square().mean().backward()


def _count_host_reads(monkeypatch: pytest.MonkeyPatch) -> list[torch.device]:
    """The device of every tensor read to the host as a list (how the reader gets its
    numbers)."""
    reads: list[torch.device] = []
    original = torch.Tensor.tolist

    def counting(self: torch.Tensor) -> Any:
        reads.append(self.device)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    return reads


def test_every_kind_of_layer_is_read_in_one_host_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _mixed_model()
    collector = QuantCollector(model)
    assert [name for name, _ in collector.torchao] == ["0"]
    assert collector.self_measuring == [model[2], model[4]]
    collector.arm(True)
    _step(model)
    reads = _count_host_reads(monkeypatch)
    stats = collector.take()
    assert reads == [torch.device("cpu")]
    # torchao's layer first (its casts in the order made), then the others in model order.
    assert [(s.layer, s.role) for s in stats] == [("0", "input"), ("0", "weight"),
                                                  ("0", "grad_output")] + [
        (layer, role) for layer in ("2", "4") for role in QUANT_ROLES
    ]  # fmt: skip
    formats = {s.layer: s.format for s in stats if s.role == "input"}
    assert formats == {"0": "float8_e4m3fn", "2": "float8_e4m3fn", "4": "mxfp8_e4m3"}
    # Nothing is left pending in the layers, and an unarmed step measures nothing.
    assert model[2].take_pending_stats() == [] and model[4].take_pending_stats() == []
    collector.arm(False)
    _step(model)
    assert collector.take() == ()


def test_a_discarded_step_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _mixed_model()
    collector = QuantCollector(model)
    collector.arm(True)
    _step(model)
    reads = _count_host_reads(monkeypatch)
    collector.discard()
    assert reads == []
    assert collector.take() == ()
    _step(model)
    assert len(collector.take()) == 9  # three layers, three roles each
