"""Several ranks through torchrun (2 CPU ranks on gloo): DDP and FSDP2 runs, one log per
rank and the merged log, which rank and layer overflowed first, a lost rank, bad arguments.

Each run starts real processes through `fpexplorer train --nproc-per-node 2` (or a user
script under `python -m torch.distributed.run`); the overflow is injected on rank 1 only
through the job's test hook (FPEXPLORER_TEST_FAULT, see training/distributed.py).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_job import replay_grad_scaler
from training_helpers import HANG_GUARD_S, REPO, run_cli, torchrun

from fpexplorer.training.monitor.ranks import rank_log_path
from fpexplorer.training.ranked import NoRunError, find_run
from fpexplorer.training.records import Histogram, StepRecord
from fpexplorer.training.runlog import Run, load_run


def train(tmp_path: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("FPEXPLORER_TEST_FAULT", None)
    if fault:
        env["FPEXPLORER_TEST_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "fpexplorer", "train", "--device", "cpu", *args],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env=env, cwd=tmp_path,
    )  # fmt: skip


def logs(out: Path, world: int = 2) -> tuple[Run, list[Run]]:
    return load_run(out), [load_run(rank_log_path(out, rank)) for rank in range(world)]


def weight_gradient_overflow_log(out: Path) -> Run:
    """The merged log of a run whose layer-2 weight gradient went inf on rank 1 at step 2: each
    rank skipped it with finite activation gradients and names layer 2 as non-finite."""
    merged, ranks = logs(out)
    for run in ranks:
        step = run.steps[2]
        assert step.skipped and all(math.isfinite(layer.amax) for layer in step.layers)
        assert [layer.name for layer in step.layers if layer.nonfinite] == ["2"]
    return merged


def dense(histogram: Histogram | None) -> dict[object, int]:
    """A histogram as {binade: count, "zero"/"inf"/"nan": count}, for sums across ranks."""
    assert histogram is not None
    counts: dict[object, int] = dict(zip(histogram.exponents, histogram.counts, strict=True))
    counts.update(zero=histogram.zero, inf=histogram.inf, nan=histogram.nan)
    return {key: value for key, value in counts.items() if value}


def summed(histograms: list[Histogram | None]) -> dict[object, int]:
    total: dict[object, int] = {}
    for histogram in histograms:
        for key, value in dense(histogram).items():
            total[key] = total.get(key, 0) + value
    return total


def check_overflow_run(out: Path, *, parallel: str) -> None:
    merged, ranks = logs(out)
    assert merged.status == "completed" and all(run.status == "completed" for run in ranks)
    assert merged.header is not None and merged.header.ranks is not None
    assert merged.header.ranks.merged and merged.header.ranks.world_size == 2
    assert merged.header.ranks.parallel == parallel
    for rank, run in enumerate(ranks):
        assert run.header is not None and run.header.ranks is not None
        assert (run.header.ranks.rank, run.header.ranks.merged) == (rank, False)
        assert run.header.ranks.host

    # The overflow injected at layer "2" on rank 1, step 2: every rank skips the step (the
    # gradients are averaged or the found-inf flag all-reduced), the merged log names rank 1.
    step = merged.steps[2]
    assert step.skipped and all(run.steps[2].skipped for run in ranks)
    assert step.ranks is not None
    assert step.ranks.nonfinite_ranks == (1,)
    assert (step.ranks.first_nonfinite_rank, step.ranks.first_nonfinite_layer) == (1, "2")
    assert step.first_nonfinite == "2"
    # Rank 0 received non-finite parameter gradients only through the communication.
    assert ranks[0].steps[2].layers
    assert all(math.isfinite(layer.amax) for layer in ranks[0].steps[2].layers)
    assert all(s.ranks is not None and s.ranks.first_nonfinite_rank is None
               for s in merged.steps if s.step != 2)  # fmt: skip

    # Loss scales: the same on both ranks, and what GradScaler's rule gives from the skips.
    traces = [[s.scale for s in run.steps] for run in ranks]
    assert traces[0] == traces[1] == [s.scale for s in merged.steps]
    assert traces[0] == replay_grad_scaler(ranks[0])[0]
    assert len(set(traces[0])) >= 2  # the rule was exercised (a backoff, a growth)
    assert not any(s.ranks is not None and s.ranks.scale_mismatch for s in merged.steps)

    # Merged histograms are the sums of the rank logs' (and every step exchanged).
    for index, step_record in enumerate(merged.steps):
        per_rank: list[StepRecord] = [run.steps[index] for run in ranks]
        assert summed([s.grad_hist for s in per_rank]) == dense(step_record.grad_hist)
        assert summed([s.act_hist for s in per_rank]) == dense(step_record.act_hist)
        assert step_record.ranks is not None
        assert step_record.ranks.losses == tuple(s.loss for s in per_rank)
        assert step_record.loss == pytest.approx(sum(s.loss for s in per_rank) / 2, rel=1e-12)
    # The ranks trained on different batches (the task's stream is sharded by rank).
    assert ranks[0].steps[0].loss != ranks[1].steps[0].loss
    assert merged.end is not None
    assert [(r.rank, r.status) for r in merged.end.ranks] == [(0, "completed"), (1, "completed")]


FP16_RUN = ("--precision", "fp16", "--steps", "5", "--stats-every", "1",
            "--growth-interval", "2", "--batch-size", "64")  # fmt: skip


@pytest.mark.slow
def test_ddp_run_names_the_rank_and_layer_that_overflowed(tmp_path: Path) -> None:
    folder = tmp_path / "ddp"
    folder.mkdir()
    out = folder / "run.jsonl"
    done = train(tmp_path, *FP16_RUN, "--nproc-per-node", "2", "--out", str(out),
                 fault="nonfinite:1:2:2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_overflow_run(out, parallel="ddp")

    # `fpexplorer runs` reads the run directory: the merged summary, then the ranks'.
    summary = run_cli("runs", "summarize", str(folder))
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout
    assert "overflow   started on: rank 1, layer 2 (1)" in text
    assert "ended      rank 0 completed, rank 1 completed" in text
    assert "scale mismatches 0   skip disagreements 0" in text
    rows = [line.split() for line in text.splitlines() if ".rank-" in line]
    assert [row[:3] for row in rows] == [["0", "completed", "5"], ["1", "completed", "5"]]
    assert sum("<- slowest" in line for line in text.splitlines()) == 1
    as_json = json.loads(run_cli("runs", "summarize", "--json", str(folder)).stdout)
    assert [item["path"] for item in as_json["ranks"]] == [
        str(rank_log_path(out, rank)) for rank in (0, 1)
    ]
    assert as_json["merged"]["steps"] == 5
    assert as_json["disagreements"]["first_overflow"] == [["rank 1, layer 2", 1]]
    check = run_cli("runs", "check", str(out))  # the merged log stands for the run too
    assert check.returncode == 0
    assert check.stdout.count(", completed, ok") == 3
    compare = run_cli("runs", "compare", str(rank_log_path(out, 1)))
    names = [line.split("|")[1].strip() for line in compare.stdout.splitlines()[2:]]
    assert names == ["run.jsonl", "run.rank-0.jsonl", "run.rank-1.jsonl"]
    # replay-scaler takes the folder too: the merged log is replayed, as when named.
    replayed = run_cli("runs", "replay-scaler", str(folder))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith(f"{out}: 5 steps")
    assert replayed.stdout == run_cli("runs", "replay-scaler", str(out)).stdout


@pytest.mark.slow
def test_ddp_traces_a_weight_gradient_overflow_to_its_rank(tmp_path: Path) -> None:
    # Only layer 2's weight gradient goes inf on rank 1 (its activation gradients stay
    # finite): the DDP hook saw it before the all-reduce spread it to rank 0.
    out = tmp_path / "weights.jsonl"
    done = train(tmp_path, *FP16_RUN, "--nproc-per-node", "2", "--out", str(out),
                 fault="weightgrad:1:2:2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    merged = weight_gradient_overflow_log(out)
    figures = merged.steps[2].ranks
    assert figures is not None and figures.nonfinite_ranks == (1,)
    assert (figures.first_nonfinite_rank, figures.first_nonfinite_layer) == (1, "2")


@pytest.mark.slow
def test_fsdp_traces_a_weight_gradient_overflow_to_its_rank(tmp_path: Path) -> None:
    # As under DDP, with FSDP2's reduce-scatter in place of the all-reduce: rank 1's
    # unsharded gradient of layer 2 is checked before it is reduce-scattered to rank 0.
    out = tmp_path / "fsdp-weights.jsonl"
    done = train(tmp_path, *FP16_RUN, "--nproc-per-node", "2", "--parallel", "fsdp",
                 "--out", str(out), fault="weightgrad:1:2:2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr  # torch's own ShardedGradScaler noise is not shown
    merged = weight_gradient_overflow_log(out)
    for record in merged.steps:
        figures = record.ranks
        assert figures is not None
        expected = ((1,), 1, "2") if record.step == 2 else ((), None, None)
        got = (figures.nonfinite_ranks, figures.first_nonfinite_rank,
               figures.first_nonfinite_layer)  # fmt: skip
        assert got == expected, record.step


@pytest.mark.slow
@pytest.mark.parametrize(
    ("parallel", "fault", "layer"),
    [("ddp", "nonfinite:1:2,4:2", "2"), ("fsdp", "weightgrad:1:2,4:0", "0")],
)
def test_skipped_steps_between_statistics_steps_name_the_rank(
    tmp_path: Path, parallel: str, fault: str, layer: str
) -> None:
    # Statistics every 3 steps (0, 3): the overflows at steps 2 and 4 fall between them.
    # A skipped step is skipped on every rank, so it is an exchange step all the same, and
    # rank 1's gradients were flagged before communication: it is named both times.
    out = tmp_path / "between.jsonl"
    done = train(tmp_path, "--precision", "fp16", "--steps", "6", "--stats-every", "3",
                 "--batch-size", "64", "--nproc-per-node", "2", "--parallel", parallel,
                 "--out", str(out), fault=fault)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    merged, ranks = logs(out)
    assert [s.step for s in merged.steps if s.skipped] == [2, 4]
    assert all([s.step for s in run.steps if s.skipped] == [2, 4] for run in ranks)
    for record in merged.steps:
        scheduled = record.step % 3 == 0
        assert (record.ranks is not None) == (scheduled or record.skipped), record.step
        if record.skipped:
            assert record.ranks is not None
            assert record.ranks.nonfinite_ranks == (1,), record.step
            assert (record.ranks.first_nonfinite_rank, record.ranks.first_nonfinite_layer) == (
                1, layer,
            ), record.step  # fmt: skip
            assert all(math.isfinite(loss) for loss in record.ranks.losses)
        elif record.ranks is not None:
            assert record.ranks.first_nonfinite_rank is None


@pytest.mark.slow
def test_fsdp_run_names_the_rank_and_layer_that_overflowed(tmp_path: Path) -> None:
    out = tmp_path / "fsdp.jsonl"
    done = train(tmp_path, *FP16_RUN, "--nproc-per-node", "2", "--parallel", "fsdp",
                 "--out", str(out), fault="nonfinite:1:2:2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_overflow_run(out, parallel="fsdp")
    merged, ranks = logs(out)
    # FSDP2: each rank holds half of the parameters' gradients; together, all of them.
    header = merged.header
    assert header is not None
    first = merged.steps[0].grad_hist
    assert first is not None and first.total == header.model.params
    total = first.total
    assert all(run.steps[0].grad_hist is not None and run.steps[0].grad_hist.total < total
               for run in ranks)  # fmt: skip
    # Each rank's memory is its own shard's: its parameters and Adam's two moments of them
    # (plus a 4-byte step count per parameter tensor: 6 in the mlp). The state was counted
    # at its global size, twice this rank's share.
    for run in ranks:
        memory = run.steps[-1].stats.memory if run.steps[-1].stats else None
        assert memory is not None
        params, state = memory.params["float32"], memory.optimizer["float32"]
        assert 2 * params <= state <= 2 * params + 4 * 6


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_and_is_named(tmp_path: Path) -> None:
    out = tmp_path / "killed.jsonl"
    done = train(tmp_path, "--precision", "bf16", "--steps", "50", "--nproc-per-node", "2",
                 "--out", str(out), fault="kill:1:3")  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "rank 1 was killed by SIGKILL" in last, last
    merged, ranks = logs(out)
    assert ranks[1].end is None and len(ranks[1].steps) == 3  # killed at the start of step 3
    assert ranks[0].end is not None and ranks[0].status == "failed"
    assert ranks[0].end.error is not None
    assert ranks[0].end.error.startswith("rank 1 lost (no end record within 5 s)")
    assert merged.end is not None and merged.status == "failed"
    assert merged.end.error == "lost rank 1"
    assert [(r.rank, r.status) for r in merged.end.ranks] == [(0, "failed"), (1, "lost")]
    check = run_cli("runs", "check", str(tmp_path))
    assert check.returncode == 3  # rank 1's log has no end record
    summary = run_cli("runs", "summarize", str(tmp_path))
    assert "ended      rank 0 failed, rank 1 lost" in summary.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow  # seven child processes that import torch: seconds
def test_bad_distributed_arguments_get_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = {
            ("--nproc-per-node", "100000"): "more than this machine can start",
            ("--parallel", "fsdp"): "needs several ranks",
            ("--nnodes", "2"): "needs --rdzv-endpoint",
            ("--nproc-per-node", "2", "--rdzv-endpoint", "nowhere"): "is not HOST:PORT",
            ("--nproc-per-node", "2", "--rdzv-endpoint", f"localhost:{port}"): "is in use",
            ("--nproc-per-node", "2", "--rdzv-endpoint", "no-such-host.invalid:29400"):
                "cannot resolve",
            ("--nproc-per-node", "2", "--parallel", "fsdp", "--precision", "fp16-static"):
                "fixed loss scale",
        }  # fmt: skip
        for args, message in cases.items():
            done = train(tmp_path, "--steps", "1", *args)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2, (args, done.stderr)
            assert len(lines) == 1 and message in lines[0], (args, done.stderr)
            assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_rendezvous_that_never_completes_times_out_with_exit_2(tmp_path: Path) -> None:
    # Two nodes expected, one comes: the rendezvous gives up after --rdzv-timeout.
    done = train(tmp_path, "--steps", "1", "--nnodes", "2", "--nproc-per-node", "1",
                 "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-timeout", "3")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "did not complete within 3 s" in last and "Traceback" not in done.stderr


@pytest.mark.slow
def test_two_nodes_meet_at_a_rendezvous_endpoint(tmp_path: Path) -> None:
    # Two "nodes" on one machine: two launchers, one rank each, the same endpoint and --out.
    out = tmp_path / "run.jsonl"
    endpoint = f"127.0.0.1:{_free_port()}"
    args = ["--precision", "bf16", "--steps", "4", "--nproc-per-node", "1", "--nnodes", "2",
            "--rdzv-endpoint", endpoint, "--rdzv-timeout", "60",
            "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "fpexplorer", "train", "--device", "cpu", *args]
    first = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    second = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=HANG_GUARD_S)  # fmt: skip
    _, first_err = first.communicate(timeout=HANG_GUARD_S)
    assert (first.returncode, second.returncode) == (0, 0), (
        first_err[-2000:] + second.stderr[-2000:]
    )
    merged, ranks = logs(out)
    assert merged.status == "completed" and len(merged.steps) == 4
    assert all(run.status == "completed" for run in ranks)
    assert merged.header is not None and merged.header.config["nnodes"] == 2
    # Where the nodes met, as given (was not recorded: the form could not re-create it).
    assert merged.header.config["rdzv_endpoint"] == endpoint
    assert merged.end is not None and len(merged.end.ranks) == 2


USER_SCRIPT = """
import sys, warnings
import torch, torch.distributed as dist
from torch import nn
from fpexplorer.training.monitor import AmpMonitor

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    monitor = AmpMonitor(model, optimizer, out=sys.argv[1], stats_every=1, precision="fp32")
    for _ in range(3):
        loss = model(torch.randn(16, 4)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    monitor.close()
print(f"rank {rank} warnings: {[str(w.message) for w in caught]}", file=sys.stderr)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_user_script_under_torchrun_and_a_rank_whose_log_cannot_be_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "mine.jsonl"
    rank_log_path(out, 1).mkdir()  # rank 1's log cannot be opened: a folder is in its place
    done = torchrun(tmp_path, USER_SCRIPT, str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 warnings: ['AmpMonitor: cannot write the run log" in done.stderr
    merged = load_run(out)
    # Rank 1 kept joining the exchanges: the merged log has both ranks on every step.
    assert merged.status == "completed" and len(merged.steps) == 3
    assert all(s.ranks is not None and len(s.ranks.losses) == 2 for s in merged.steps)
    assert load_run(rank_log_path(out, 0)).status == "completed"


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_every_log_ends_stopped(tmp_path: Path) -> None:
    # SIGINT to the launcher alone (what Ctrl-C in a terminal sends it; the ranks run in
    # sessions of their own): torchrun's agent stops the ranks, each ends its log.
    out = tmp_path / "stopped.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("FPEXPLORER_TEST_FAULT", None)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "train", "--device", "cpu", "--precision", "bf16",
         "--steps", "1000000", "--nproc-per-node", "2", "--out", str(out)],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        # Mid-run: wait (bounded by the hang guard) until both ranks have logged steps.
        deadline = time.monotonic() + HANG_GUARD_S
        while not all(_logged_steps(rank_log_path(out, rank)) >= 3 for rank in (0, 1)):
            assert launcher.poll() is None, launcher.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the ranks never logged 3 steps"
            time.sleep(0.2)
        launcher.send_signal(signal.SIGINT)
        _, stderr = launcher.communicate(timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 0, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("fpexplorer train: stopped by SIGINT (2 ranks); run logs: "), last
    for rank in (0, 1):  # each rank names its own log
        assert f"; rank {rank}'s log: {rank_log_path(out, rank)}\n" in stderr
    merged, ranks = logs(out)
    assert merged.status == "stopped" and all(run.status == "stopped" for run in ranks)
    assert merged.end is not None
    assert [(r.rank, r.status) for r in merged.end.ranks] == [(0, "stopped"), (1, "stopped")]
    # No rank outlived the launcher.
    assert _processes_naming(str(out)) == []


def _logged_steps(path: Path) -> int:
    try:
        return path.read_bytes().count(b'"type":"step"')
    except OSError:
        return 0


def _processes_naming(text: str) -> list[int]:
    """The processes whose command line contains `text` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in command:
                found.append(int(entry.name))
    return found


def test_the_launcher_says_which_logs_exist(tmp_path: Path) -> None:
    from fpexplorer.training.distributed import _logs_text

    out = tmp_path / "exp-01.jsonl"
    assert _logs_text(out) == "none (stopped before any rank began its log)"
    rank_log_path(out, 1).write_text("")
    assert _logs_text(out) == f"no merged log; in {tmp_path}: exp-01.rank-1.jsonl"
    out.write_text("")
    assert _logs_text(out) == f"{out} (merged) and exp-01.rank-K.jsonl beside it"


@pytest.mark.slow  # twelve child processes: about a second
def test_runs_on_a_folder_without_a_run_gets_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("hello")
    (other / "looks.jsonl").mkdir()  # a folder named like a log is not one
    two = tmp_path / "two"
    two.mkdir()
    (two / "a.jsonl").write_text("not json")
    (two / "b.jsonl").write_text('{"a": 1}')
    cases = {
        empty: f"{empty} holds no run log (no .jsonl file)",
        other: f"{other} holds no run log (no .jsonl file)",
        two: f"{two} holds 2 .jsonl files (a.jsonl, b.jsonl) and no RUN.rank-K.jsonl: name one",
    }
    for folder, message in cases.items():
        for verb in ("summarize", "check", "compare", "replay-scaler"):
            done = run_cli("runs", verb, str(folder))
            assert done.returncode == 2, (verb, folder, done.stdout)
            assert done.stderr == f"fpexplorer runs: error: {message}\n", (verb, done.stderr)


FILE_INIT_SCRIPT = """
import gc
import sys
import torch, torch.distributed as dist
from torch import nn
from fpexplorer.training.monitor import AmpMonitor

rank = int(sys.argv[3])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
torch.manual_seed(rank)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
monitor = AmpMonitor(model, optimizer, out=sys.argv[1], stats_every=1, precision="fp32")
for _ in range(2):
    loss = model(torch.randn(16, 4)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    monitor.step(loss)
monitor.close()
# Teardown in order: DDP's reducer (its threads and hooks hold the group) goes before the
# group, which goes once neither rank still uses it. A reducer left to the interpreter's exit
# after the group was destroyed was seen to abort one rank in CI ("terminate called without an
# active exception"), after every record was written.
del model, optimizer, monitor, loss
gc.collect()
dist.barrier()  # neither rank tears the group down while the other still uses it
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_group_started_without_torchrun_still_holds_its_roll_call(tmp_path: Path) -> None:
    # No MASTER_ADDR/MASTER_PORT (a file:// rendezvous): the end's roll-call goes through
    # the group's own store, and the merged end still says how every rank ended.
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(FILE_INIT_SCRIPT))
    out = tmp_path / "file-init.jsonl"
    env = {key: value for key, value in os.environ.items()
           if key not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}  # fmt: skip
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(script), str(out), str(tmp_path / "rendezvous")]
    ranks = [subprocess.Popen([*command, str(rank)], env=env, cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]  # fmt: skip
    errors = [rank.communicate(timeout=HANG_GUARD_S)[1] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], errors
    merged = load_run(out)
    assert merged.status == "completed" and merged.end is not None, (merged.end, errors)
    ends = [(r.rank, r.status) for r in merged.end.ranks]
    assert ends == [(0, "completed"), (1, "completed")], (merged.end, errors)


def test_find_run_takes_a_folder_the_merged_log_or_a_rank_log(tmp_path: Path) -> None:
    for name in ("run.jsonl", "run.rank-0.jsonl", "run.rank-1.jsonl", "run.rank-10.jsonl"):
        (tmp_path / name).write_text("")
    expected = [tmp_path / f"run.rank-{rank}.jsonl" for rank in (0, 1, 10)]  # by rank
    for given in (tmp_path, tmp_path / "run.jsonl", tmp_path / "run.rank-1.jsonl"):
        files = find_run(given)
        assert files.merged == tmp_path / "run.jsonl" and list(files.ranks) == expected
    (tmp_path / "other.rank-0.jsonl").write_text("")
    with pytest.raises(NoRunError, match="several runs"):
        find_run(tmp_path)
    single = tmp_path / "single"
    single.mkdir()
    (single / "a.jsonl").write_text("")
    assert find_run(single) == find_run(single / "a.jsonl") and not find_run(single).ranked
    with pytest.raises(NoRunError, match="no such run log"):
        find_run(tmp_path / "missing.jsonl")


def test_histograms_survive_the_exchange_layout_and_ends_merge_by_the_worst() -> None:
    from fpexplorer.training.monitor.kernels import histogram_record
    from fpexplorer.training.monitor.ranks import _dense, _merged_end
    from fpexplorer.training.records import EndRecord, RankEnd

    histogram = Histogram(lo=-149, counts=(1, 0, 2), zero=3, inf=4, nan=5, dtype="float16")
    top = Histogram(lo=125, counts=(7, 0, 9))  # up to binade 127, the layout's last
    for item in (histogram, top):
        assert histogram_record(_dense(item), item.dtype) == item
    assert histogram_record(_dense(histogram) + _dense(top)).total == histogram.total + top.total
    with pytest.raises(ValueError, match="outside"):
        _dense(Histogram(lo=126, counts=(1, 1, 1)))

    own = EndRecord(status="completed", steps=5, elapsed=1.0)
    done = (RankEnd(rank=0, status="completed"), RankEnd(rank=1, status="completed"))
    assert _merged_end(own, done).status == "completed" and _merged_end(own, done).error is None
    stopped = (done[0], RankEnd(rank=1, status="stopped"))
    assert _merged_end(own, stopped).status == "stopped"
    failed = (RankEnd(rank=0, status="failed", error="E: x"), RankEnd(rank=1, status="lost"))
    merged = _merged_end(own, failed)
    assert (merged.status, merged.error, merged.ranks) == ("failed", "lost rank 1", failed)
    one_failed = (done[0], RankEnd(rank=1, status="failed", error="ValueError: bad"))
    assert _merged_end(own, one_failed).error == "rank 1: ValueError: bad"
    # Rank 1's task failed first; rank 0 then failed in the collective rank 1 left.
    both = (RankEnd(rank=0, status="failed", error="RuntimeError: gloo", ended_at=12.0),
            RankEnd(rank=1, status="failed", error="ValueError: bad", ended_at=7.0))  # fmt: skip
    assert _merged_end(own, both).error == "rank 1: ValueError: bad"


def test_out_default_is_what_its_help_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fpexplorer.training.config import TrainConfig, train_options
    from fpexplorer.training.distributed import launch_out_path

    monkeypatch.setenv("FPEXPLORER_RUN_DIR", str(tmp_path))
    spec = next(spec for name, spec, _ in train_options() if name == "out")
    assert spec.none_means is not None and "run.rank-K.jsonl" in spec.none_means
    config = TrainConfig(task="mlp", precision="bf16", nproc_per_node=2)
    first, second = launch_out_path(config), launch_out_path(config)
    # A new folder each time, named as a single run's file, holding run.jsonl.
    assert first.name == second.name == "run.jsonl"
    assert first.parent != second.parent and first.parent.parent == tmp_path
    assert first.parent.name.startswith("run-mlp-bf16-") and first.parent.is_dir()
    assert rank_log_path(first, 1) == first.parent / "run.rank-1.jsonl"
    given = tmp_path / "mine" / "a.jsonl"
    assert launch_out_path(config.replace(out=str(given))) == given
    assert rank_log_path(given, 0).name == "a.rank-0.jsonl"
