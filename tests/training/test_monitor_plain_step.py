"""AmpMonitor's plain-step path (`_plain_step`, taken on most steps of a run) against its
general path (every step of a run where the plain path is switched off): the same records,
field for field, whatever the loop does (each kind of scaler, a fused optimizer that skips
inside its kernel, inf/NaN gradients, 16-bit, float64 and sparse gradients, dtypes changed
mid-run, several optimizer steps or none between two calls, a repeated call); and the plain
path really taken where it should be, and not where it must not be."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from test_monitor_cheap_signals import make_scaler  # the loops' scalers, by kind
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.records import StepRecord, decode_float
from fpexplorer.training.runlog import load_run


class TwoLayers(nn.Module):
    """Each layer takes its input in its own dtype: one can be converted alone."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 5)
        self.second = nn.Linear(5, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.first(inputs.to(self.first.weight.dtype)))
        return self.second(hidden.to(self.second.weight.dtype))


# What a loop does at each step, beyond a plain training step (the step index is the key).
Events = dict[int, str]


def run_loop(
    path: Path,
    *,
    scaler_kind: str = "none",
    optimizer_kind: str = "plain",
    dtype: torch.dtype = torch.float32,
    events: Events | None = None,
    steps: int = 8,
    sparse: bool = False,
    stats_every: int | None = 0,
    one_copy: bool = False,
) -> list[StepRecord]:
    """A small loop (seed 0) watched by a monitor; returns what step() returned. `one_copy`:
    the signals read as on an accelerator (one host copy of them all), here on the CPU."""
    events = events or {}
    torch.manual_seed(0)
    if sparse:
        model: nn.Module = nn.Sequential(nn.Embedding(20, 6, sparse=True), nn.Linear(6, 3))
    else:
        model = TwoLayers().to(dtype)
    options = {"fused": {"fused": True}, "foreach": {"foreach": True}}.get(optimizer_kind, {})
    optimizer: torch.optim.Optimizer = (
        torch.optim.SGD(model.parameters(), lr=0.01)
        if sparse or optimizer_kind == "sgd"
        else torch.optim.AdamW(model.parameters(), lr=0.01, **options)
    )
    scaler = make_scaler(scaler_kind)
    generator = torch.Generator().manual_seed(1)
    returned = []
    settings = {} if stats_every is None else {"stats_every": stats_every}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the misuse warnings: tested elsewhere
        with AmpMonitor(model, optimizer, scaler, out=path, **settings) as monitor:
            monitor._on_cpu = not one_copy
            for step in range(steps):
                event = events.get(step, "")
                if event == "to_bf16":
                    model.second.to(torch.bfloat16)
                if sparse:
                    inputs = torch.randint(0, 20, (8,), generator=generator)
                else:
                    inputs = torch.randn(8, 6, generator=generator)
                loss = model(inputs).float().square().mean()
                optimizer.zero_grad()
                scaled = scaler is not None and hasattr(scaler, "scale")
                (scaler.scale(loss) if scaled else loss).backward()
                if event in ("inf", "nan"):
                    first = next(model.parameters())
                    assert first.grad is not None
                    first.grad.view(-1)[0] = math.inf if event == "inf" else math.nan
                for _ in range(0 if event == "no_step" else 2 if event == "two_steps" else 1):
                    if scaled:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                returned.append(monitor.step(loss if event != "float_loss" else loss.item()))
                if event == "repeat":
                    returned.append(monitor.step(loss))
    return returned


@contextmanager
def plain_path_counted(monkeypatch: pytest.MonkeyPatch, *, enabled: bool) -> Iterator[list[int]]:
    """Counts the steps the plain path recorded (with `enabled=False`, the monitor never
    tries it: every step takes the general path)."""
    taken: list[int] = []
    original: Callable[..., StepRecord | None] = AmpMonitor._plain_step

    def counted(self: AmpMonitor, *args: Any) -> StepRecord | None:
        record = original(self, *args)
        if record is not None:
            taken.append(record.step)
        return record

    with monkeypatch.context() as patch:
        patch.setattr(AmpMonitor, "_plain_step", counted)
        if not enabled:
            patch.setattr(AmpMonitor, "_plain_path", lambda self: False)
        yield taken


def without_clocks(record: StepRecord) -> dict[str, Any]:
    raw = record.to_json()
    del raw["time"], raw["steps_per_s"]  # wall-clock figures: not the same in two runs
    return raw


def both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **loop: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """The records of one loop run with the plain path and without it (the written ones
    too: the same as the returned ones), and the steps the plain path recorded."""
    runs, written = [], []
    for enabled in (True, False):
        path = tmp_path / f"run-{enabled}.jsonl"
        with plain_path_counted(monkeypatch, enabled=enabled) as taken:
            records = run_loop(path, **loop)
        if enabled:
            plain_steps = list(taken)
        else:
            assert taken == []
        runs.append([without_clocks(record) for record in records])
        written.append([without_clocks(record) for record in load_run(path).steps])
    assert written[0] == written[1]
    return runs[0], runs[1], plain_steps


def alarm_steps(records: list[dict[str, Any]]) -> list[int]:
    """The steps with an alarm: skipped, or a loss or gradient norm that is not finite."""
    return [
        step for step, record in enumerate(records)
        if record["skipped"] or not math.isfinite(decode_float(record["loss"]))
        or not math.isfinite(decode_float(record["grad_norm"]))
    ]  # fmt: skip


@pytest.mark.parametrize("scaler_kind", ["none", "grad", "disabled", "deepspeed"])
@pytest.mark.parametrize("optimizer_kind", ["plain", "foreach", "fused"])
def test_the_plain_path_records_what_the_general_path_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scaler_kind: str, optimizer_kind: str
) -> None:
    # An overflow at step 3 (the scaler skips it, a fused optimizer inside its kernel), a
    # NaN at step 5, a loss given as a float at step 6.
    events = {3: "inf", 5: "nan", 6: "float_loss"}
    plain, general, taken = both_paths(
        tmp_path, monkeypatch, scaler_kind=scaler_kind, optimizer_kind=optimizer_kind,
        events=events, steps=9,
    )  # fmt: skip
    assert plain == general
    if scaler_kind == "deepspeed":  # a hysteresis policy: the general path reads it
        assert taken == []
        return
    # The plain path records every step but step 0 (which finds the gradients' dtypes on
    # the general path) and those with an alarm: skipped, or a loss or norm not finite
    # (their parameter-gradient statistics are taken at once). Without a scaler that skips,
    # the inf at step 3 reaches the weights: every later step is NaN.
    alarms = alarm_steps(general)
    assert taken == [step for step in range(1, 9) if step not in alarms]
    assert alarms == ([3, 5] if scaler_kind == "grad" else [3, 4, 5, 6, 7, 8])
    assert all(plain[step].get("stats") is None for step in taken)


@pytest.mark.parametrize("scaler_kind", ["none", "grad", "disabled"])
@pytest.mark.parametrize("optimizer_kind", ["plain", "fused"])
def test_the_accelerators_one_host_copy_reads_what_the_cpus_items_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scaler_kind: str, optimizer_kind: str
) -> None:
    # An accelerator reads the signals with one host copy (each item() would be a sync):
    # run here on the CPU, the same records as the CPU's item() reads, on both paths.
    loop = {"scaler_kind": scaler_kind, "optimizer_kind": optimizer_kind, "steps": 9,
            "events": {3: "inf", 6: "float_loss"}}  # fmt: skip
    (tmp_path / "copy").mkdir()
    (tmp_path / "items").mkdir()
    plain, general, taken = both_paths(tmp_path / "copy", monkeypatch, one_copy=True, **loop)
    assert plain == general
    assert taken == [step for step in range(1, 9) if step not in alarm_steps(general)]
    assert len(taken) >= 2
    items, _, _ = both_paths(tmp_path / "items", monkeypatch, **loop)
    assert plain == items


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_the_plain_path_sums_each_dtype_as_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype
) -> None:
    # SGD: AdamW's eps underflows in float16 weights (NaN from step 1).
    plain, general, taken = both_paths(
        tmp_path, monkeypatch, dtype=dtype, optimizer_kind="sgd", steps=5
    )
    assert plain == general
    assert taken == [1, 2, 3, 4]


def test_a_layer_converted_mid_run_is_summed_in_its_new_dtype_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 3's gradients are partly bfloat16: the general path finds their norm's dtype
    # (float32), and the plain path takes the new dtypes from step 4.
    plain, general, taken = both_paths(
        tmp_path, monkeypatch, events={3: "to_bf16"}, optimizer_kind="sgd", steps=6
    )
    assert plain == general
    assert taken == [1, 2, 4, 5]


def test_sparse_gradients_take_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, general, taken = both_paths(tmp_path, monkeypatch, sparse=True, steps=4)
    assert plain == general
    assert taken == []
    assert all(math.isfinite(record["grad_norm"]) for record in plain)


@pytest.mark.parametrize("event", ["no_step", "two_steps", "repeat"])
def test_misused_calls_take_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event: str
) -> None:
    # No optimizer step since the last call (recorded as skipped), two (one record for
    # both), and a call repeated for the same step (not recorded, the last record returned).
    plain, general, taken = both_paths(tmp_path, monkeypatch, events={2: event}, steps=5)
    assert plain == general
    if event == "repeat":  # step 2 is plain; its repeated call is not a step
        assert taken == [1, 2, 3, 4]
        assert plain[2] == plain[3]  # the repeated call returned step 2's record again
    else:
        assert taken == [1, 3, 4]


def test_statistics_steps_and_the_plain_steps_between_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, general, taken = both_paths(tmp_path, monkeypatch, stats_every=3, steps=8)
    assert plain == general
    assert taken == [2, 4, 5, 7]  # 0, 3, 6 take statistics; 1 finds the dtypes
    assert [record.get("stats") is not None for record in plain] == [
        step % 3 == 0 for step in range(8)
    ]


def test_after_close_step_still_raises(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = AmpMonitor(model, optimizer, out=tmp_path / "run.jsonl", stats_every=0)
    for _ in range(3):
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
        monitor.step(1.0)
    monitor.close()
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    with pytest.raises(RuntimeError, match="after close"):
        monitor.step(1.0)


class FullDisk:
    """A writer whose writes fail from its `fails_from`-th record on (a disk filling up)."""

    path = Path("full.jsonl")

    def __init__(self, fails_from: int) -> None:
        self.fails_from = fails_from
        self.written: list[Any] = []

    def write(self, record: Any) -> None:
        if len(self.written) + 1 >= self.fails_from:
            raise OSError(28, "No space left on device")
        self.written.append(record)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fails_from", [1, 4])  # the header (at step 0); a plain step
def test_a_write_error_warns_once_at_the_users_line_and_training_goes_on(fails_from: int) -> None:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = FullDisk(fails_from)
    with pytest.warns(RuntimeWarning, match="logging stopped") as warned:
        monitor = AmpMonitor(model, optimizer, writer=writer, stats_every=0)  # type: ignore[arg-type]
        records = []
        for _ in range(6):
            model(torch.ones(1, 3)).sum().backward()
            optimizer.step()
            records.append(monitor.step(1.0))
        monitor.close()
    assert len(warned) == 1
    assert warned[0].filename == __file__  # this loop's line, not the monitor's
    assert [record.step for record in records] == list(range(6))
    # Record 4 is step 2's, on the plain path (step 0 found the gradients' dtypes).
    assert len(writer.written) == fails_from - 1
