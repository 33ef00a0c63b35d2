"""Real training loops the monitor must survive and describe truthfully: fused, foreach and
plain optimizers under GradScaler, a disabled GradScaler, a float64 model, BF16 autocast
with a scaler, a run log that cannot be written, NaNs whose payload is in the low bits."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from monitor_helpers import flat
from torch import nn

from fpexplorer.training.monitor import AmpMonitor, code_histogram
from fpexplorer.training.monitor.kernels import INF_CODE, NAN_CODE
from fpexplorer.training.runlog import load_run

OPTIMIZER_KINDS = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "plain": {"foreach": False},
}


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def amp_loop(
    monitor: AmpMonitor,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    steps: int,
    *,
    dtype: torch.dtype = torch.float16,
    overflow_at: tuple[int, ...] = (),
    autocast: bool = True,
) -> list[dict[str, Any]]:
    records = []
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        inputs = torch.randn(4, 8, generator=generator, dtype=next(model.parameters()).dtype)
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            loss = model(inputs).float().square().mean()
        if step in overflow_at:
            loss = loss * math.inf  # every gradient becomes inf or NaN: the scaler must skip
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        records.append(flat(monitor.step(loss)))
    return records


@pytest.mark.parametrize("kind", OPTIMIZER_KINDS)
@pytest.mark.parametrize("stats_every", [1, 0])
def test_skipped_steps_are_seen_with_fused_foreach_and_plain_optimizers(
    tmp_path: Path, kind: str, stats_every: int
) -> None:
    # A fused optimizer is called on every step and skips inside its kernel: the monitor
    # must read the scaler's found-inf flag rather than rely on the step being skipped.
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **OPTIMIZER_KINDS[kind])
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with AmpMonitor(model, optimizer, scaler, out=tmp_path / "run.jsonl",
                    stats_every=stats_every) as monitor:  # fmt: skip
        records = amp_loop(monitor, model, optimizer, scaler, 6, overflow_at=(1, 3, 4))
    assert [r["skipped"] for r in records] == [False, True, False, True, True, False]
    assert [r["scale"] for r in records] == [65536.0, 65536.0, 32768.0, 32768.0, 16384.0, 8192.0]
    if stats_every:
        # A skipped step updated nothing: it has no lost-update figure.
        assert ["lost_updates" in r for r in records] == [True, False, True, False, False, True]
    run = load_run(tmp_path / "run.jsonl")
    assert sum(step.skipped for step in run.steps) == 3


def test_a_disabled_grad_scaler_is_a_run_without_loss_scaling(tmp_path: Path) -> None:
    # GradScaler(enabled=use_amp) with use_amp False: no scale settings exist at all.
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    path = tmp_path / "run.jsonl"
    with AmpMonitor(model, optimizer, scaler, out=path, stats_every=1) as monitor:
        records = amp_loop(monitor, model, optimizer, scaler, 3, autocast=False)
    assert [r["scale"] for r in records] == [1.0, 1.0, 1.0]
    assert not any(r["skipped"] for r in records)
    lines = read_records(path)
    assert [r["type"] for r in lines] == ["header", "step", "step", "step", "end"]
    assert lines[0]["config"]["precision"] == "fp32"
    assert "init_scale" not in lines[0]["config"]


def test_a_float64_model_gets_statistics(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "run.jsonl"
    with AmpMonitor(model, optimizer, None, out=path, stats_every=1) as monitor:
        loss = model(torch.randn(4, 8, dtype=torch.float64)).square().mean()
        loss.backward()
        optimizer.step()
        record = flat(monitor.step(loss))
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert record["grad_norm"] == pytest.approx(float(grads.norm()), rel=1e-12)
    assert sum(record["grad_hist"]["counts"]) + record["grad_hist"]["zero"] == grads.numel()
    assert read_records(path)[0]["config"]["precision"] == "fp64"


@pytest.mark.parametrize("stats_every", [0, 1])
def test_sparse_embedding_gradients_are_recorded_not_fatal(
    tmp_path: Path, stats_every: int
) -> None:
    # nn.Embedding(sparse=True) gives a sparse gradient: the norms and counts once raised
    # NotImplementedError out of step() and stopped the training.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with AmpMonitor(model, optimizer, out=tmp_path / "run.jsonl", stats_every=stats_every,
                    precision="fp32") as monitor:  # fmt: skip
        for _ in range(2):
            loss = model(torch.randint(0, 50, (16,))).square().mean()
            optimizer.zero_grad()
            loss.backward()
            assert model[0].weight.grad is not None and model[0].weight.grad.is_sparse
            optimizer.step()
            record = flat(monitor.step(loss))
            dense = [p.grad.to_dense().double().reshape(-1).numpy() for p in model.parameters()]
            values = np.concatenate(dense)
            assert record["grad_norm"] == pytest.approx(float(np.linalg.norm(values)), rel=1e-6)
            if stats_every:
                histogram = record["grad_hist"]
                assert histogram["zero"] == int(np.count_nonzero(values == 0))
                assert sum(histogram["counts"]) + histogram["zero"] == values.size


@pytest.mark.parametrize(
    ("dtype", "scaled", "label"),
    [
        (torch.bfloat16, True, "bf16"),
        (torch.float16, True, "fp16"),
        (torch.float16, False, "fp16-noscale"),
        (None, False, "fp32"),
    ],
)
def test_the_precision_label_comes_from_the_autocast_dtype_in_use(
    tmp_path: Path, dtype: torch.dtype | None, scaled: bool, label: str
) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=scaled)
    path = tmp_path / "run.jsonl"
    with AmpMonitor(model, optimizer, scaler, out=path) as monitor:
        amp_loop(monitor, model, optimizer, scaler, 2, dtype=dtype or torch.float32,
                 autocast=dtype is not None)  # fmt: skip
    assert read_records(path)[0]["config"]["precision"] == label


def test_a_given_precision_is_written_at_once(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    path = tmp_path / "run.jsonl"
    monitor = AmpMonitor(model, torch.optim.SGD(model.parameters(), lr=0.1), out=path,
                         precision="bf16")  # fmt: skip
    assert read_records(path)[0]["config"]["precision"] == "bf16"
    monitor.close()
    assert [r["type"] for r in read_records(path)] == ["header", "end"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_run_log_that_cannot_be_written_never_stops_the_training() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.warns(RuntimeWarning, match="logging stopped") as warned:
        with AmpMonitor(model, optimizer, scaler, out="/dev/full", precision="fp16") as monitor:
            records = amp_loop(monitor, model, optimizer, scaler, 4)
    assert len(warned) == 1  # once, not once per step
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # the loop went on, records returned
    assert monitor.write_error is not None and monitor.closed


def low_payload_nans(*others: float) -> torch.Tensor:
    """float32 NaNs whose mantissa bits are all in the low 16 bits (their top half is
    inf's), then `others`. Made from bits: a float64 round trip would quiet them."""
    bits = torch.tensor([0x7F800001, 0xFF80FFFF - 2**32], dtype=torch.int32)
    return torch.cat([bits.view(torch.float32), torch.tensor(others, dtype=torch.float32)])


def test_a_nan_with_its_payload_in_the_low_bits_is_counted_as_nan() -> None:
    tensor = low_payload_nans(math.inf, -math.inf, 1.0, math.nan)
    assert bool(tensor[:2].isnan().all())
    assert (tensor[:2].view(torch.int32) & 0x7FFF0000 == 0x7F800000).all()
    counts = code_histogram(tensor)
    assert int(counts[NAN_CODE]) == 3 and int(counts[INF_CODE]) == 2


def test_the_monitor_counts_low_payload_nans_as_nan(tmp_path: Path) -> None:
    model = nn.Linear(6, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl") as monitor:
        model.weight.grad = low_payload_nans(math.inf, 2.0, 0.0, 1e-40).reshape(1, -1)
        optimizer.step()
        record = flat(monitor.step(0.0))
    hist = record["grad_hist"]
    assert (hist["nan"], hist["inf"], hist["zero"], sum(hist["counts"])) == (2, 1, 1, 2)


@pytest.mark.parametrize("stats_every", [0, 1])
def test_the_gradient_norm_of_fp16_gradients_is_summed_in_float32(
    tmp_path: Path, stats_every: int
) -> None:
    # 4096 FP16 gradients of 2000: each fits FP16, their norm (128000) does not.
    model = nn.Linear(64, 64, bias=False).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with AmpMonitor(model, optimizer, None, out=tmp_path / "run.jsonl",
                    stats_every=stats_every) as monitor:  # fmt: skip
        model.weight.grad = torch.full((64, 64), 2000.0, dtype=torch.float16)
        optimizer.step()
        record = monitor.step(0.0)
    assert record.grad_norm == 128000.0


def test_the_first_module_whose_forward_output_overflows_is_named(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        model[2].weight.fill_(1e5)  # FP16 outputs beyond 65504: inf from module "2" on
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with AmpMonitor(model, optimizer, scaler, out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.full((4, 8), 3.0)).float().sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        record = flat(monitor.step(loss))
    assert record.get("first_nonfinite_forward") == "2"
