"""AmpMonitor watching several optimizers under one GradScaler: PyTorch's AMP example with two
models, two losses and two optimizers, a GAN's alternating discriminator and generator steps,
a fused optimizer beside a plain one. Every record is compared with the scaler's own state,
read in the loop before `update()` (GradScaler skips per optimizer: each has its own
found-inf flags; `update()` backs off when any has one)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor
from fpexplorer.training.monitor.updates import UpdateSample, hoeffding_bound
from fpexplorer.training.records import StepRecord
from fpexplorer.training.runlog import load_run
from fpexplorer.training.scaler_rules import resolve_settings
from fpexplorer.training.scalers import DeepSpeedGradScaler
from fpexplorer.training.summary import format_summary, summarize_file


def scaler_found_inf(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> float:
    """The scaler's inf/NaN flag for `optimizer` this step (before update(), which adds the
    flags together in place), 0 when the scaler did not see it."""
    state = scaler._per_optimizer_states.get(id(optimizer))
    if not state:
        return 0.0
    return float(sum(flag.item() for flag in state["found_inf_per_device"].values()))


def weights(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def weights_and_grads(module: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    return weights(module), [p.grad.clone() for p in module.parameters() if p.grad is not None]


def make_optimizer(kind: str, module: nn.Module, lr: float) -> torch.optim.Optimizer:
    if kind == "fused":
        return torch.optim.AdamW(module.parameters(), lr=lr, fused=True)
    return torch.optim.SGD(module.parameters(), lr=lr, foreach=False)


def optimizer_state_bytes(*optimizers: torch.optim.Optimizer) -> dict[str, int]:
    total: dict[str, int] = {}
    for optimizer in optimizers:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    name = str(value.dtype).removeprefix("torch.")
                    total[name] = total.get(name, 0) + value.numel() * value.element_size()
    return total


def make_scaler(policy: str) -> torch.amp.GradScaler:
    if policy == "torch":
        return torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    # DeepSpeed's policy (hysteresis 2: the first overflow skips the step, the scale stays).
    settings = resolve_settings("deepspeed", init_scale=2.0**10, growth_interval=2)
    return DeepSpeedGradScaler(settings, "cpu")


@pytest.mark.parametrize(
    ("second", "stats_every", "policy"),
    [("plain", 0, "torch"), ("plain", 1, "torch"), ("fused", 0, "torch"), ("fused", 1, "torch"),
     ("plain", 1, "deepspeed"), ("fused", 0, "deepspeed")],
)  # fmt: skip
def test_the_amp_examples_two_optimizer_loop_records_each_skip(
    tmp_path: Path, second: str, stats_every: int, policy: str
) -> None:
    # "Working with Multiple Models, Losses, and Optimizers" (PyTorch AMP examples), in FP16
    # autocast on the CPU, tiny. An inf put into one model's gradient: GradScaler skips that
    # model's optimizer only, the other steps, update() backs off once.
    torch.manual_seed(0)
    model0, model1 = nn.Linear(8, 4), nn.Linear(8, 4)
    optimizer0 = torch.optim.SGD(model0.parameters(), lr=0.1, foreach=False)
    optimizer1 = make_optimizer(second, model1, 0.01)
    scaler = make_scaler(policy)
    inf_into = {1: model1, 3: model0, 4: model1, 5: model0}
    both_at = 5  # and model1 too
    generator = torch.Generator().manual_seed(1)
    truth: list[dict[str, Any]] = []
    records: list[StepRecord] = []
    watched = nn.ModuleDict({"model0": model0, "model1": model1})
    path = tmp_path / "run.jsonl"
    with AmpMonitor(watched, [optimizer0, optimizer1], scaler, out=path,
                    stats_every=stats_every, precision="fp16") as monitor:  # fmt: skip
        for step in range(7):
            inputs = torch.randn(4, 8, generator=generator)
            target = torch.randn(4, 4, generator=generator)
            optimizer0.zero_grad()
            optimizer1.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                output0, output1 = model0(inputs), model1(inputs)
                loss0 = nn.functional.mse_loss(2 * output0 + 3 * output1, target)
                loss1 = nn.functional.mse_loss(3 * output0 - 5 * output1, target)
            scaler.scale(loss0).backward(retain_graph=True)
            scaler.scale(loss1).backward()
            if step in inf_into:
                inf_into[step].weight.grad[0, 0] = math.inf
            if step == both_at:
                model1.bias.grad[1] = math.nan
            scale_used = scaler.get_scale()
            before = (weights(model0), weights(model1))
            scaler.unscale_(optimizer0)  # as the example: optional, per optimizer
            scaler.step(optimizer0)
            scaler.step(optimizer1)
            found = (scaler_found_inf(scaler, optimizer0), scaler_found_inf(scaler, optimizer1))
            scaler.update()
            after = (weights(model0), weights(model1))
            # What GradScaler did, as torch does it: an optimizer whose gradients hold an
            # inf/NaN leaves its weights alone, the other updates them.
            for flag, old, new in zip(found, before, after, strict=True):
                unchanged = all(torch.equal(a, b) for a, b in zip(old, new, strict=True))
                assert unchanged == (flag > 0)
            truth.append({
                "scale": scale_used,
                "found": found,
                "growth_tracker": int(scaler._growth_tracker.item()),
                "hysteresis": getattr(scaler, "hysteresis_tracker", None),
                "state_bytes": optimizer_state_bytes(optimizer0, optimizer1),
            })  # fmt: skip
            records.append(monitor.step(loss0))
    assert [t["found"] for t in truth] == [
        (0.0, 0.0), (0.0, 1.0), (0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.0, 0.0)
    ]  # fmt: skip
    for record, expected in zip(records, truth, strict=True):
        outcomes = tuple("skipped" if flag > 0 else "stepped" for flag in expected["found"])
        assert record.optimizer_outcomes == outcomes, record.step
        assert record.skipped == any(flag > 0 for flag in expected["found"])
        assert record.scale == expected["scale"]
        assert record.growth_tracker == expected["growth_tracker"]
        assert record.hysteresis == expected["hysteresis"]
        assert record.lr == 0.1  # the first optimizer's
        if stats_every:
            assert record.stats is not None and record.stats.memory is not None
            assert record.stats.memory.optimizer == expected["state_bytes"]
            # A step that skipped an optimizer has no lost-update figure; the others do.
            assert (record.lost_updates is None) == record.skipped
    # The log reads back with the per-optimizer outcomes.
    run = load_run(path)
    assert [step.optimizer_outcomes for step in run.steps] == [
        r.optimizer_outcomes for r in records
    ]
    # `fpexplorer runs summarize` counts each optimizer's skips (step 5 skipped both).
    summary = summarize_file(path)
    assert summary.skipped_steps == 4 and summary.skipped_by_optimizer == (2, 3)
    assert "skipped steps 4 (optimizer 0: 2, optimizer 1: 3)" in format_summary(summary)


def fp16_lost_updates(
    old: list[torch.Tensor], new: list[torch.Tensor], grads: list[torch.Tensor]
) -> tuple[int, int]:
    """(updates intended, updates lost) as FP16 weights would lose them, by numpy: among the
    weights with a non-zero gradient, those where FP16(FP16(old) + (new - old)) equals
    FP16(old) (the sum in float32)."""
    intended = lost = 0
    for before, after, grad in zip(old, new, grads, strict=True):
        w_old = before.numpy().astype(np.float32).ravel()
        w_new = after.numpy().astype(np.float32).ravel()
        wanted = grad.numpy().ravel() != 0
        half_old = w_old.astype(np.float16)
        updated = (half_old.astype(np.float32) + (w_new - w_old)).astype(np.float16)
        intended += int(wanted.sum())
        lost += int((wanted & (updated == half_old)).sum())
    return intended, lost


def test_a_gan_loop_records_each_optimizers_step_and_their_lost_updates(tmp_path: Path) -> None:
    # A WGAN-like loop, one GradScaler: the discriminator steps every iteration, the
    # generator every second one (its loss goes through the discriminator, adding to the
    # discriminator's gradients after its step). One monitor.step() per iteration.
    torch.manual_seed(0)
    generator_net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6))
    discriminator = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer_d = torch.optim.SGD(discriminator.parameters(), lr=1e-3, foreach=False)
    optimizer_g = torch.optim.AdamW(generator_net.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    watched = nn.ModuleDict({"generator": generator_net, "discriminator": discriminator})
    noise = torch.Generator().manual_seed(2)
    inf_into_d, inf_into_g = {3, 4}, {6}
    truth: list[dict[str, Any]] = []
    records: list[StepRecord] = []
    with AmpMonitor(watched, (optimizer_d, optimizer_g), scaler, out=tmp_path / "run.jsonl",
                    stats_every=1, precision="bf16") as monitor:  # fmt: skip
        for step in range(8):
            real = torch.randn(8, 6, generator=noise)
            optimizer_d.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                fake = generator_net(torch.randn(8, 4, generator=noise))
                loss_d = discriminator(fake.detach()).mean() - discriminator(real).mean()
            scaler.scale(loss_d).backward()
            if step in inf_into_d:
                discriminator[2].weight.grad[0, 0] = math.inf
            scaler.unscale_(optimizer_d)
            kept = {"d": weights_and_grads(discriminator)}
            scaler.step(optimizer_d)
            found_d = scaler_found_inf(scaler, optimizer_d)
            generator_steps = step % 2 == 0
            found_g = None
            if generator_steps:
                optimizer_g.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    fake = generator_net(torch.randn(8, 4, generator=noise))
                    loss_g = -discriminator(fake).mean()
                scaler.scale(loss_g).backward()
                if step in inf_into_g:
                    generator_net[0].bias.grad[0] = math.nan
                scaler.unscale_(optimizer_g)
                kept["g"] = weights_and_grads(generator_net)
                scaler.step(optimizer_g)
                found_g = scaler_found_inf(scaler, optimizer_g)
            scaler.update()
            stepped = [(kept["d"], discriminator)] if not found_d else []
            if found_g == 0.0:
                stepped.append((kept["g"], generator_net))
            old = [w for (before, _), _ in stepped for w in before]
            grads = [g for (_, grads_then), _ in stepped for g in grads_then]
            new = [w for _, module in stepped for w in weights(module)]
            truth.append({"found": (found_d, found_g), "lost": fp16_lost_updates(old, new, grads)})
            records.append(monitor.step(loss_d))
    expected_outcomes = []
    for t in truth:
        found_d, found_g = t["found"]
        expected_outcomes.append((
            "skipped" if found_d else "stepped",
            "idle" if found_g is None else "skipped" if found_g else "stepped",
        ))  # fmt: skip
    assert expected_outcomes == [
        ("stepped", "stepped"), ("stepped", "idle"), ("stepped", "stepped"),
        ("skipped", "idle"),  # no optimizer called: still a step of its own, not a repeat
        ("skipped", "stepped"), ("stepped", "idle"), ("stepped", "skipped"), ("stepped", "idle"),
    ]  # fmt: skip
    assert [r.step for r in records] == list(range(8))
    for record, outcomes, t in zip(records, expected_outcomes, truth, strict=True):
        assert record.optimizer_outcomes == outcomes
        assert record.skipped == ("skipped" in outcomes)
        lost = record.lost_updates
        if record.skipped:
            assert lost is None
            continue
        # Over the parameters of the optimizers that stepped, as they were when each stepped
        # (the discriminator's gradients then, not with the generator loss's added).
        intended, lost_count = t["lost"]
        assert lost is not None and lost.intended == intended and lost.sampled is None
        assert lost.share == pytest.approx(lost_count / intended, abs=0, rel=1e-12)
    assert any(r.lost_updates is not None and r.lost_updates.share > 0 for r in records)


def test_a_param_group_added_after_the_monitor_is_watched(tmp_path: Path) -> None:
    # Layers unfrozen mid-run: a group added to the second optimizer after the monitor was
    # built. Its parameters' updates were missing from the lost-update count with several
    # optimizers (the layout was read once; one optimizer re-reads it): this failed before.
    torch.manual_seed(0)
    encoder, head, late = nn.Linear(4, 6), nn.Linear(6, 2), nn.Linear(4, 2)
    model = nn.ModuleDict({"encoder": encoder, "head": head, "late": late})
    optimizer_a = torch.optim.SGD(encoder.parameters(), lr=1e-2, foreach=False)
    optimizer_b = torch.optim.SGD(head.parameters(), lr=1e-2, foreach=False)
    inputs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    records, truth = [], []
    with AmpMonitor(model, (optimizer_a, optimizer_b), None, out=tmp_path / "run.jsonl",
                    stats_every=1) as monitor:  # fmt: skip
        for step in range(3):
            if step == 1:  # a tiny lr: FP16 weights would lose these updates
                optimizer_b.add_param_group({"params": list(late.parameters()), "lr": 1e-7})
            optimizer_a.zero_grad()
            optimizer_b.zero_grad()
            loss = head(torch.tanh(encoder(inputs))).square().mean() + late(inputs).sum()
            loss.backward()
            stepping = [encoder, head, *([late] if step >= 1 else [])]
            old = [w for module in stepping for w in weights(module)]
            grads = [p.grad.clone() for module in stepping for p in module.parameters()]
            everything = [p.grad for p in model.parameters() if p.grad is not None]
            norm = math.sqrt(sum(float(g.double().square().sum()) for g in everything))
            optimizer_a.step()
            optimizer_b.step()
            new = [w for module in stepping for w in weights(module)]
            truth.append((norm, fp16_lost_updates(old, new, grads)))
            records.append(monitor.step(loss))
    for record, (norm, (intended, lost_count)) in zip(records, truth, strict=True):
        assert record.grad_norm == pytest.approx(norm, rel=1e-6)
        lost = record.lost_updates
        assert lost is not None and lost.intended == intended
        assert lost.share == pytest.approx(lost_count / intended, abs=0, rel=1e-12)
    assert truth[1][1][0] == truth[0][1][0] + late.weight.numel() + late.bias.numel()
    assert records[1].lost_updates is not None and records[1].lost_updates.share > 0


def test_two_optimizers_stepping_once_each_is_one_step_and_twice_warns(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    second = torch.optim.SGD(model[1].parameters(), lr=0.2)
    inputs = torch.randn(4, 8)

    def backward() -> torch.Tensor:
        first.zero_grad()
        second.zero_grad()
        loss = model(inputs).square().mean()
        loss.backward()
        return loss

    with AmpMonitor(model, [first, second], out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # each optimizer once: a training step, no warning
            for _ in range(3):
                loss = backward()
                first.step()
                second.step()
                record = monitor.step(loss)
                assert record.optimizer_outcomes == ("stepped", "stepped") and not record.skipped
                assert record.lr == 0.1
        with pytest.warns(RuntimeWarning, match=r"2 optimizer steps \(optimizer 1 of 2\)"):
            loss = backward()
            first.step()
            second.step()
            backward()
            second.step()
            monitor.step(loss)


def test_one_optimizer_in_a_list_records_as_one_optimizer(tmp_path: Path) -> None:
    records = {}
    for given in ("alone", "listed"):
        torch.manual_seed(0)
        model = nn.Linear(8, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
        path = tmp_path / f"{given}.jsonl"
        watched = optimizer if given == "alone" else [optimizer]
        with AmpMonitor(model, watched, scaler, out=path, stats_every=1) as monitor:
            generator = torch.Generator().manual_seed(1)
            for step in range(3):
                optimizer.zero_grad()
                loss = model(torch.randn(4, 8, generator=generator)).square().mean()
                scaler.scale(loss * (math.inf if step == 1 else 1.0)).backward()
                scaler.step(optimizer)
                scaler.update()
                monitor.step(loss)
        records[given] = [
            {k: v for k, v in step.to_json().items() if k not in ("time", "steps_per_s")}
            for step in load_run(path).steps
        ]
    assert records["listed"] == records["alone"]
    assert [r["skipped"] for r in records["alone"]] == [False, True, False]
    assert not any("optimizer_outcomes" in r for r in records["alone"])
    summary = summarize_file(tmp_path / "alone.jsonl")
    assert summary.skipped_by_optimizer == ()
    assert "skipped steps 1\n" in format_summary(summary) + "\n"


@pytest.mark.parametrize(
    ("optimizer", "message"),
    [
        ("model", "not a Linear"),
        (None, "not None"),
        ([], "an empty sequence"),
        ("model and optimizer", "a sequence holding a Linear"),
        ("twice", "listed twice"),
        ("name", "not a str"),
    ],
)
def test_a_bad_optimizer_argument_is_refused_before_anything_is_written(
    tmp_path: Path, optimizer: Any, message: str
) -> None:
    model = nn.Linear(4, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    named = {
        "model": model,
        "model and optimizer": [sgd, model],
        "twice": [sgd, sgd],
        "name": "sgd",
    }
    given = named.get(optimizer, optimizer) if isinstance(optimizer, str) else optimizer
    path = tmp_path / "run.jsonl"
    with pytest.raises(TypeError, match=message):
        AmpMonitor(model, given, out=path)
    assert not path.exists()


def test_lost_updates_of_two_optimizers_on_a_sampled_model(tmp_path: Path) -> None:
    # More weights than LOST_UPDATE_SAMPLE: the old weights of both optimizers' parameters
    # are a fixed random sample of their layout (the first's, then the second's), each
    # optimizer's part gathered as it steps. The oracle counts the same sampled weights.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 8))
    first = torch.optim.SGD(model[0].parameters(), lr=1e-3, foreach=False)
    second = torch.optim.SGD(model[1].parameters(), lr=1e-3, foreach=False)
    params = [*model[0].parameters(), *model[1].parameters()]
    sample = UpdateSample(tuple(p.numel() for p in params), torch.device("cpu"))
    assert sample.sampled
    inputs = torch.randn(4, 1024)
    with AmpMonitor(model, [first, second], out=tmp_path / "run.jsonl", stats_every=1) as monitor:
        for step in range(2):
            first.zero_grad()
            second.zero_grad()
            loss = model(inputs).square().mean()
            loss.backward()
            old = [p.detach().clone() for p in params]
            grads = [p.grad.clone() for p in params]
            first.step()
            if step == 0:
                second.step()  # at step 1 the second is idle: its parameters are left out
            record = monitor.step(loss)
            counted = len(params) if step == 0 else 2
            new = [p.detach().clone() for p in params]
            flat = [
                sample.gather([t.reshape(-1) for t in tensors])
                for tensors in (old, new, [g if i < counted else torch.zeros_like(g)
                                           for i, g in enumerate(grads)])
            ]  # fmt: skip
            in_sample, lost = fp16_lost_updates([flat[0]], [flat[1]], [flat[2]])
            lost_updates = record.lost_updates
            assert record.optimizer_outcomes == (("stepped", "stepped") if step == 0 else
                                                 ("stepped", "idle"))  # fmt: skip
            assert lost_updates is not None
            assert lost_updates.sampled == in_sample
            assert lost_updates.intended == sum(int(g.count_nonzero()) for g in grads[:counted])
            assert lost_updates.share == pytest.approx(lost / in_sample, abs=0, rel=1e-12)
            assert lost_updates.bound == pytest.approx(hoeffding_bound(in_sample))


def test_step_called_before_update_reads_this_steps_scaler_records(tmp_path: Path) -> None:
    # monitor.step() before scaler.update(): the scaler's per-optimizer records are still its
    # current ones. The second optimizer steps on even steps only: idle, not skipped, on odd
    # ones (the last step's records said it stepped).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    first = torch.optim.SGD(model[0].parameters(), lr=0.1, foreach=False)
    second = torch.optim.SGD(model[1].parameters(), lr=0.1, foreach=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    inputs = torch.randn(4, 8)
    outcomes = []
    with AmpMonitor(model, [first, second], scaler, out=tmp_path / "run.jsonl",
                    stats_every=0) as monitor:  # fmt: skip
        for step in range(5):
            first.zero_grad()
            second.zero_grad()
            loss = model(inputs).square().mean()
            scaler.scale(loss).backward()
            if step == 3:
                model[0].bias.grad[0] = math.inf
            scaler.step(first)
            if step % 2 == 0:
                scaler.step(second)
            outcomes.append(monitor.step(loss).optimizer_outcomes)
            scaler.update()
    assert outcomes == [
        ("stepped", "stepped"), ("stepped", "idle"), ("stepped", "stepped"),
        ("skipped", "idle"), ("stepped", "stepped"),
    ]  # fmt: skip


@pytest.mark.parametrize("optimizers", [1, 2])
def test_the_accelerators_one_copy_path_reads_the_same_signals(
    tmp_path: Path, optimizers: int
) -> None:
    # On an accelerator the cheap signals (each optimizer's skip flag among them) come back
    # in one host copy, not item() by item(): the same loop read both ways, on this CPU.
    records = {}
    for one_copy in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
        first = torch.optim.SGD(model[0].parameters(), lr=0.1, foreach=False)
        second = torch.optim.AdamW(model[1].parameters(), lr=0.01, fused=True)
        watched = [first, second] if optimizers == 2 else [first]
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        path = tmp_path / f"{one_copy}.jsonl"
        inputs = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
        with AmpMonitor(model, watched, scaler, out=path, stats_every=0) as monitor:
            monitor._on_cpu = not one_copy
            for step in range(4):
                for optimizer in watched:
                    optimizer.zero_grad()
                loss = model(inputs).square().mean()
                scaler.scale(loss).backward()
                if step in (1, 2):
                    model[step - 1].weight.grad[0, 0] = math.inf
                for optimizer in watched:
                    scaler.step(optimizer)
                scaler.update()
                monitor.step(loss)
        records[one_copy] = [
            {k: v for k, v in step.to_json().items() if k not in ("time", "steps_per_s")}
            for step in load_run(path).steps
        ]
    assert records[True] == records[False]
    assert [r["skipped"] for r in records[True]] == [False, True, optimizers == 2, False]
    if optimizers == 2:
        assert [r["optimizer_outcomes"] for r in records[True]] == [
            ["stepped", "stepped"], ["skipped", "stepped"], ["stepped", "skipped"],
            ["stepped", "stepped"],
        ]  # fmt: skip


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("case", ["outside the model", "not in an optimizer"])
def test_lost_updates_count_what_the_optimizers_update(
    tmp_path: Path, count: int, case: str
) -> None:
    """One rule for one optimizer and several: the updates lost are among the parameters
    the optimizers update. A learnable temperature held only by the optimizer counted with
    several and not with one; a model parameter no optimizer holds (its gradient computed,
    never applied) counted with one and not with several (this failed before, count=1)."""
    torch.manual_seed(0)
    first, second = nn.Linear(4, 6), nn.Linear(6, 2)
    model = nn.Sequential(first, nn.Tanh(), second)
    temperature = nn.Parameter(torch.tensor([1.5]))
    if case == "outside the model":
        updated = [*first.parameters(), *second.parameters(), temperature]
    else:  # `second` is left out of the optimizers, and gets gradients all the same
        updated = list(first.parameters())
    halves = [updated] if count == 1 else [updated[:1], updated[1:]]
    # A tiny learning rate: FP16 weights would lose some of these updates, not all.
    optimizers = [torch.optim.SGD(part, lr=1e-2, foreach=False) for part in halves]
    inputs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    records, truth = [], []
    with AmpMonitor(model, optimizers if count > 1 else optimizers[0], None,
                    out=tmp_path / "run.jsonl", stats_every=1) as monitor:  # fmt: skip
        for _ in range(3):
            for optimizer in optimizers:
                optimizer.zero_grad()
            model.zero_grad()
            loss = (model(inputs) / temperature).square().mean()
            loss.backward()
            old = [p.detach().clone() for p in updated]
            grads = [p.grad.clone() for p in updated]  # type: ignore[union-attr]
            for optimizer in optimizers:
                optimizer.step()
            new = [p.detach().clone() for p in updated]
            truth.append(fp16_lost_updates(old, new, grads))
            records.append(monitor.step(loss))
    for record, (intended, lost_count) in zip(records, truth, strict=True):
        lost = record.lost_updates
        assert lost is not None and lost.intended == intended
        assert lost.share == pytest.approx(lost_count / intended, abs=0, rel=1e-12)
    assert 0 < truth[0][1] < truth[0][0]
