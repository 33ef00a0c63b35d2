"""A user's own torchrun loop (plain torch, DDP, AmpMonitor; no fpexplorer job code) under 2
gloo ranks: the monitor puts the check of each rank's own gradients before communication
into the DDP model itself, so an overflow that starts in a weight-gradient product on rank
1 is traced to rank 1 and its layer, as under `fpexplorer train`; a user's own DDP
communication hook stays (one warning); `check_reduction=False` installs nothing.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from training_helpers import HANG_GUARD_S, REPO, run_cli, torchrun

from fpexplorer.gui.training.code_snippet import pytorch_code
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.view_model import settings_of
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.monitor.ranks import (
    RDZV_ENDPOINT_ENV,
    RankContext,
    launch_settings,
    parallel_of,
    rank_log_path,
)
from fpexplorer.training.records import HeaderRecord, RankInfo
from fpexplorer.training.runlog import Run, load_run

# MODE: "plain", "user-hook" (the user's fp16 compression hook is registered first) or
# "opt-out" (AmpMonitor(check_reduction=False), then the script registers a hook itself:
# DDP takes one, so that succeeds only when the monitor installed none).
USER_LOOP = """
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook,
    fp16_compress_hook,
)

from fpexplorer.training.monitor import AmpMonitor

out, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
# At step 2 rank 1's weight gradient of layer 2 goes inf while its activation gradients
# stay finite: an overflow that starts in a weight-gradient product.
armed = False
net[2].weight.register_hook(lambda grad: torch.full_like(grad, float("inf")) if armed else None)
model = nn.parallel.DistributedDataParallel(net)
if mode == "user-hook":
    model.register_comm_hook(None, fp16_compress_hook)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
options = {"check_reduction": False} if mode == "opt-out" else {}
monitor = AmpMonitor(model, optimizer, scaler, out=out, stats_every=1, **options)
for step in range(4):
    armed = rank == 1 and step == 2
    loss = model(torch.randn(16, 4)).square().mean()
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    monitor.step(loss)
monitor.close()
if mode == "opt-out":
    model.register_comm_hook(None, allreduce_hook)
    print(f"rank {rank}: the model took a communication hook", file=sys.stderr)
dist.destroy_process_group()
"""

WARNING = (
    "RuntimeWarning: AmpMonitor: DDP already has a communication hook (fp16_compress_hook); "
    "it stays, so the rank and layer where a weight-gradient overflow starts cannot be named "
    "(check_reduction=False turns this check off)"
)


def run_user_loop(tmp_path: Path, mode: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path / f"{mode}.jsonl"
    done = torchrun(tmp_path, USER_LOOP, str(out), mode)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def check_complete(out: Path) -> Run:
    """Both rank logs and the merged log completed, 4 steps, step 2 skipped everywhere
    (DDP averaged rank 1's inf into both), the layers named as in the unwrapped model."""
    merged = load_run(out)
    ranks = [load_run(rank_log_path(out, rank)) for rank in (0, 1)]
    for run in (merged, *ranks):
        assert run.status == "completed" and len(run.steps) == 4
        assert [s.step for s in run.steps if s.skipped] == [2]
        assert run.header is not None and run.header.model.layers == ("0", "1", "2")
    assert all(s.ranks is not None and len(s.ranks.losses) == 2 for s in merged.steps)
    for run in ranks:  # finite activation gradients: only the check can tell the origin
        step = run.steps[2]
        assert step.layers and all(math.isfinite(layer.amax) for layer in step.layers)
    return merged


def check_launch_stated(out: Path, parallel: str) -> None:
    """Every log's header states the launch as `fpexplorer train --nproc-per-node 2`'s
    does (2 ranks on 1 node, DDP or FSDP), and the panel's form shows it: before, a user's
    loop under torchrun wrote none of it and the form showed Ranks 1."""
    for rank, path in ((None, out), (0, rank_log_path(out, 0)), (1, rank_log_path(out, 1))):
        header = load_run(path).header
        assert header is not None and header.ranks is not None
        assert (header.ranks.world_size, header.ranks.parallel) == (2, parallel)
        assert header.ranks.merged == (rank is None)
        assert header.ranks.rank == (rank or 0)
        launch = {
            name: header.config.get(name) for name in ("nproc_per_node", "nnodes", "parallel")
        }
        assert launch == {"nproc_per_node": 2, "nnodes": 1, "parallel": parallel}
    model = RunModel()
    model.add_records([load_run(out).header])
    settings = settings_of(model)
    assert isinstance(settings, TrainConfig), settings
    assert (settings.nproc_per_node, settings.nnodes, settings.parallel) == (2, 1, parallel)


# A user's loop with an FSDP model, no fpexplorer job code: WRAP shards it.
FSDP_LOOP = """
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

from fpexplorer.training.monitor import AmpMonitor

dist.init_process_group("gloo")
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
WRAP
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
monitor = AmpMonitor(net, optimizer, None, out=sys.argv[1], stats_every=1)
for step in range(2):
    loss = net(torch.randn(16, 4)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    monitor.step(loss)
monitor.close()
dist.destroy_process_group()
"""
FSDP_WRAPS = {
    # FSDP2: `fully_shard` on each linear and the whole.
    "fsdp2": "for module in (net[0], net[2], net):\n    fully_shard(module)",
    # The old FSDP (FSDP1) runs on CPU under gloo in torch 2.13 when its device is named:
    # with device_id=None it raises "FSDP needs a non-CPU accelerator device".
    "fsdp1": 'net = FullyShardedDataParallel(net, device_id=torch.device("cpu"))',
}


@pytest.mark.slow  # a torchrun launch of 2 ranks and FSDP's imports: seconds
@pytest.mark.parametrize("wrap", sorted(FSDP_WRAPS))
def test_a_user_fsdp_loop_states_its_launch_in_the_header(tmp_path: Path, wrap: str) -> None:
    out = tmp_path / "fsdp.jsonl"
    done = torchrun(tmp_path, FSDP_LOOP.replace("WRAP", FSDP_WRAPS[wrap]), str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert load_run(out).status == "completed" and len(load_run(out).steps) == 2
    # Both detected as FSDP by the monitor (FSDP1 by its wrapper class): "fsdp" in every
    # log's header and in the form.
    check_launch_stated(out, "fsdp")


def origins(merged: Run) -> list[tuple[tuple[int, ...], int | None, str | None]]:
    found = []
    for step in merged.steps:
        assert step.ranks is not None
        figures = step.ranks
        found.append(
            (figures.nonfinite_ranks, figures.first_nonfinite_rank, figures.first_nonfinite_layer)
        )
    return found


@pytest.mark.slow
def test_a_user_loop_traces_a_weight_gradient_overflow_to_its_rank_and_layer(
    tmp_path: Path,
) -> None:
    out, done = run_user_loop(tmp_path, "plain")
    assert "RuntimeWarning" not in done.stderr
    merged = check_complete(out)
    check_launch_stated(out, "ddp")
    none: tuple[tuple[int, ...], int | None, str | None] = ((), None, None)
    assert origins(merged) == [none, none, ((1,), 1, "2"), none]
    # The summary reads as it does for `fpexplorer train --nproc-per-node 2`.
    summary = run_cli("runs", "summarize", str(out))
    assert summary.returncode == 0, summary.stderr
    assert "overflow   started on: rank 1, layer 2 (1)" in summary.stdout


@pytest.mark.slow
def test_a_user_comm_hook_stays_with_one_warning_and_the_log_is_intact(tmp_path: Path) -> None:
    out, done = run_user_loop(tmp_path, "user-hook")
    # One line per rank, each from its own monitor.
    warned = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warned) == 2 and all(line.endswith(WARNING) for line in warned), done.stderr
    merged = check_complete(out)
    # The user's hook did the communication, so the origin cannot be named.
    assert all(found == ((), None, None) for found in origins(merged))


@pytest.mark.slow
def test_check_reduction_false_installs_no_hook(tmp_path: Path) -> None:
    out, done = run_user_loop(tmp_path, "opt-out")
    assert "RuntimeWarning" not in done.stderr
    for rank in (0, 1):  # DDP takes one hook: the monitor left the place free
        assert f"rank {rank}: the model took a communication hook" in done.stderr
    merged = check_complete(out)
    assert all(found == ((), None, None) for found in origins(merged))


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    """A process group of one gloo rank in this process: enough for DDP to take hooks."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # DDP set-up and its imports: about 2 s
def test_the_check_flags_before_the_all_reduce_is_kept_by_its_model_and_goes_inert(
    one_rank_group: None,
) -> None:
    import torch
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    from fpexplorer.training.monitor.reduction import (
        ReductionInUse,
        check_before_reduction,
        watched_module,
    )

    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    armed = [False]
    net[2].weight.register_hook(  # type: ignore[no-untyped-call]
        lambda grad: torch.full_like(grad, math.inf) if armed[0] else None
    )
    model = nn.parallel.DistributedDataParallel(net)
    assert watched_module(model) is net and watched_module(net) is net
    assert check_before_reduction(net) is None  # neither DDP nor FSDP2

    def backward(overflow: bool) -> None:
        armed[0] = overflow
        model.zero_grad()
        model(torch.ones(3, 4)).sum().backward()

    check = check_before_reduction(model)
    assert check is not None
    backward(overflow=False)
    assert check.first_nonfinite_layer() is None
    backward(overflow=True)
    assert check.first_nonfinite_layer() == "2"  # the unwrapped model's name
    check.clear()
    assert check.first_nonfinite_layer() is None
    check.active = False  # its monitor closed: the hook stays in DDP, and flags nothing
    backward(overflow=True)
    assert check.first_nonfinite_layer() is None
    # A later monitor of the same model takes the same check up again (DDP takes no second
    # hook), active.
    assert check_before_reduction(model) is check and check.active
    backward(overflow=True)
    assert check.first_nonfinite_layer() == "2"

    # A model with the user's own hook keeps it.
    other = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    other.register_comm_hook(None, fp16_compress_hook)
    with pytest.raises(ReductionInUse, match=r"^DDP already has a communication hook "
                       r"\(fp16_compress_hook\)$"):  # fmt: skip
        check_before_reduction(other)
    assert other._get_ddp_logging_data().get("comm_hook") == "fp16_compress_hook"


@pytest.mark.slow  # importing FSDP2: seconds when it comes first
def test_an_fsdp2_model_gets_the_check_unless_its_reduce_scatter_is_the_users(
    one_rank_group: None,
) -> None:
    from torch import nn
    from torch.distributed.fsdp import FSDPModule, fully_shard

    # FSDP2's own reduce-scatter, which a user's custom one may extend (the interface is
    # documented on `set_custom_reduce_scatter`; torch 2.13 exports no implementation).
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    from fpexplorer.training.monitor.reduction import ReductionInUse, check_before_reduction

    def sharded() -> nn.Sequential:
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        for module in (net[0], net[2], net):
            fully_shard(module)
        return net

    def comms(model: nn.Module) -> list[str]:
        """The class of the reduce-scatter each FSDP2 parameter group uses (FSDP2 keeps it
        on private state: it has a setter only)."""
        return [
            type(group._reduce_scatter_comm).__name__
            for module in model.modules()
            if isinstance(module, FSDPModule)
            for group in module._get_fsdp_state()._fsdp_param_groups
        ]

    checked = sharded()
    assert parallel_of(checked) == "fsdp"  # what the header says under several ranks
    assert check_before_reduction(checked) is not None
    assert comms(checked) == ["CheckedReduceScatter"] * 2

    class UsersReduceScatter(DefaultReduceScatter):  # type: ignore[misc]
        pass

    net = sharded()
    net[2].set_custom_reduce_scatter(UsersReduceScatter())  # type: ignore[operator]
    with pytest.raises(ReductionInUse, match=r"custom reduce-scatter \(UsersReduceScatter\)$"):
        check_before_reduction(net)
    assert comms(net) == ["DefaultReduceScatter", "UsersReduceScatter"]  # nothing replaced


@pytest.mark.parametrize("value", ["no", 0, None])
def test_check_reduction_that_is_not_a_bool_is_refused_before_anything_is_written(
    tmp_path: Path, value: object
) -> None:
    # "no" is truthy: taken as given it would install the check the user meant to turn off.
    import torch
    from torch import nn

    from fpexplorer.training.monitor import AmpMonitor

    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "run.jsonl"
    with pytest.raises(TypeError, match=rf"check_reduction is True or False, not {value!r}"):
        AmpMonitor(model, optimizer, out=out, check_reduction=value)  # type: ignore[arg-type]
    assert not out.exists()


@pytest.mark.slow  # DDP set-up and dynamo: a few seconds
def test_a_compiled_ddp_model_is_named_and_checked_as_uncompiled(
    one_rank_group: None, tmp_path: Path
) -> None:
    # `torch.compile(DDP(net))` was watched with its layers named `module.0`, `module.2`
    # (not overlaying the same model's uncompiled runs, `0`, `2`), the pre-reduction check
    # looked for a DDP model at the compiled wrapper and found none, and the monitor's
    # forward checks in its graph made dynamo warn (an error under this suite's filter).
    import torch
    from torch import nn

    from fpexplorer.training.monitor import AmpMonitor
    from fpexplorer.training.monitor.amp_monitor import COMPILED_MODEL_UNCHECKED
    from fpexplorer.training.monitor.reduction import check_before_reduction

    torch._dynamo.reset()
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ddp = nn.parallel.DistributedDataParallel(net)
    compiled = torch.compile(ddp, backend="eager")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    out = tmp_path / "run.jsonl"
    with AmpMonitor(compiled, optimizer, out=out, stats_every=1) as monitor:
        for _ in range(2):
            optimizer.zero_grad()
            loss = compiled(torch.ones(3, 4)).sum()
            loss.backward()
            optimizer.step()
            monitor.step(loss)
    steps = load_run(out).steps
    stats = steps[-1].stats
    assert stats is not None and [layer.name for layer in stats.layers] == ["0", "1", "2"]
    # No checks in its graph (dynamo would warn on every compile): said so.
    assert stats.activations_not_measured == COMPILED_MODEL_UNCHECKED
    check = check_before_reduction(compiled)
    assert check is not None and check is check_before_reduction(ddp)  # the DDP's own
    # The header's "parallel" (under several ranks) sees the DDP inside the compiled wrapper.
    assert parallel_of(compiled) == parallel_of(ddp) == "ddp" and parallel_of(net) is None


# MODE: "rank-0-only" (only rank 0 makes a monitor) or "cadences" (rank 1's stats_every
# differs). JOIN_SECONDS is cut so the refusal comes in seconds.
LOPSIDED_LOOP = """
import sys

import torch
import torch.distributed as dist
from torch import nn

from fpexplorer.training.monitor import AmpMonitor, ranks

out, mode = sys.argv[1], sys.argv[2]
ranks.JOIN_SECONDS = 3.0
dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
monitor = None
if mode == "cadences":
    monitor = AmpMonitor(model, optimizer, out=out, stats_every=1 + rank)
elif rank == 0:
    monitor = AmpMonitor(model, optimizer, out=out)
for step in range(3):
    loss = model(torch.randn(8, 4)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if monitor is not None:
        monitor.step(loss)
"""


@pytest.mark.slow  # two torchrun launches of a few seconds each
@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("rank-0-only", "RuntimeError: AmpMonitor: rank 1 made no AmpMonitor within 3 s of "
         "rank 0's; under torch.distributed make it on every rank, with the same stats_every"),
        ("cadences", "RuntimeError: AmpMonitor: the ranks' monitors were made with different "
         "stats_every (rank 0 1, rank 1 2); give every rank the same"),
    ],
)  # fmt: skip
def test_a_monitor_missing_on_a_rank_or_on_another_cadence_is_refused_not_hung(
    tmp_path: Path, mode: str, message: str
) -> None:
    """Before, a monitor on rank 0 alone waited for ever in its first exchange (an
    all_reduce rank 1 never joins), and so did monitors whose cadences differ."""
    done = torchrun(tmp_path, LOPSIDED_LOOP, str(tmp_path / "run.jsonl"), mode)
    assert done.returncode == 1, done.stderr[-3000:]
    assert message in done.stderr, done.stderr[-3000:]


# What torchrun's agent puts in the environment of rank 3 of 2 nodes x 2 ranks (torch's
# LocalElasticAgent). MASTER_ADDR/PORT is the store the process group starts from: with
# the c10d rendezvous node 0's host name and a port free there, whatever endpoint the
# nodes were given (`torchrun --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29413` gave
# its ranks localhost:42165).
TWO_NODES_RANK_3 = {
    "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "ROLE_RANK": "3",
    "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2",
    "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "node0.cluster", "MASTER_PORT": "42165",
    "TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}  # fmt: skip


@pytest.mark.parametrize(
    ("environment", "stated"),
    [
        # A user's torchrun: the nodes, never the store's address as if it were the
        # endpoint (was: "node0.cluster:42165", which no node was given).
        (TWO_NODES_RANK_3, {"nnodes": 2, "rdzv_endpoint": None}),
        # `fpexplorer train --nnodes 2 --rdzv-endpoint [fd00::1]:29400`: its own, as given.
        ({**TWO_NODES_RANK_3, RDZV_ENDPOINT_ENV: "[fd00::1]:29400"},
         {"rdzv_endpoint": "[fd00::1]:29400"}),
        # One node: no endpoint (a run on one node takes any free port).
        ({**TWO_NODES_RANK_3, "GROUP_WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "4"},
         {"nnodes": 1, "nproc_per_node": 4, "rdzv_endpoint": None}),
    ],
)  # fmt: skip
def test_a_torchrun_launch_on_several_nodes_is_stated_from_its_environment(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], stated: dict[str, object]
) -> None:
    """A run on several nodes under torchrun: its header states the node count, and the
    endpoint where the nodes met only where it was given one, in `fpexplorer train
    --nnodes`'s own fields; the panel's form and code view re-create the launch, with
    HOST:PORT to fill in where the endpoint is not known."""
    for name in (
        "GROUP_WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        RDZV_ENDPOINT_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    launch = launch_settings(RankContext(rank=3, world_size=4, local_rank=1, host="n1"), "ddp")
    want = {"nproc_per_node": 2, "nnodes": 2, "rdzv_endpoint": None, "parallel": "ddp", **stated}
    assert {name: launch.get(name) for name in want} == want
    monkeypatch.undo()  # the panel reading the log is not a rank
    header = HeaderRecord(
        config={**TrainConfig(task="mlp", device="cpu").to_dict(), **launch},
        ranks=RankInfo(rank=3, world_size=4, host="n1", local_rank=1, parallel="ddp"),
    )
    model = RunModel()
    model.add_records([header])
    settings = settings_of(model)
    assert isinstance(settings, TrainConfig), settings
    assert {name: getattr(settings, name) for name in want} == want
    argv = settings.to_argv()
    code = pytorch_code(settings)
    endpoint = want["rdzv_endpoint"]
    if want["nnodes"] == 1:
        assert settings.validate() == {}
        assert "--rdzv-endpoint" not in argv and "--nnodes" not in code
        return
    assert argv[argv.index("--nnodes") + 1] == "2"
    # torchrun's default rendezvous (static) would make every node node-rank 0.
    shown = endpoint if endpoint is not None else "HOST:PORT"
    line = f"torchrun --nproc-per-node 2 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint {shown} "
    assert line in code
    if endpoint is not None:
        assert settings.validate() == {}
        assert argv[argv.index("--rdzv-endpoint") + 1] == endpoint
    else:
        # The form shows the settings and asks for the endpoint at the field.
        assert list(settings.validate()) == ["nnodes"]
        assert "--rdzv-endpoint" not in argv


@pytest.mark.slow  # two torchrun agents of one rank each: seconds
def test_a_user_loop_on_two_nodes_under_c10d_states_no_endpoint_it_was_not_given(
    tmp_path: Path,
) -> None:
    """Two torchrun agents ("nodes") meet at a c10d endpoint; their ranks get node 0's
    host and a port free there as MASTER_ADDR/PORT. The header states 2 nodes and no
    endpoint (was: that store's address, an endpoint no node was given)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{probe.getsockname()[1]}"
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(USER_LOOP))
    out = tmp_path / "run.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
               "--rdzv-id", "two-nodes", str(script), str(out), "plain"]  # fmt: skip
    agents = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        for _node in range(2)
    ]
    try:
        for agent in agents:
            _, stderr = agent.communicate(timeout=HANG_GUARD_S)
            assert agent.returncode == 0, stderr[-3000:]
    finally:
        for agent in agents:  # one failed or hung: the other is not left behind
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
    header = load_run(out).header
    assert header is not None
    launch = {name: header.config.get(name) for name in ("nproc_per_node", "nnodes")}
    assert launch == {"nproc_per_node": 1, "nnodes": 2}
    assert header.config.get("rdzv_endpoint") is None, header.config.get("rdzv_endpoint")
    model = RunModel()
    model.add_records([header])
    settings = settings_of(model)
    assert isinstance(settings, TrainConfig), settings
    assert "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT " in pytorch_code(settings)
