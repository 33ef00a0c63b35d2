"""A job streaming its records (`--stream`) stops when the reader goes away.

The panel reads a job's records on the job's stdout. When the window was killed (SIGTERM,
SIGKILL, a crash) the job, orphaned, trained on to its last step with nobody to see it: a
GPU busy for hours. Now losing the stream's reader is a stop, as a first SIGTERM is: the
step in progress finishes, the run file gets every record and an `end` "stopped" that
says why.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from training_helpers import REPO

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import RunState, run_job
from fpexplorer.training.runlog import RunWriter, load_run

TINY_TASK = """
import torch
from torch import nn

def make():
    batch = (torch.ones(4, 3), torch.zeros(4, 3))
    return nn.Linear(3, 3), [batch], nn.functional.mse_loss
"""


class _GoneReader(io.StringIO):
    """A text stream whose reader has gone: every write fails as a closed pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_writer_calls_back_once_when_its_channel_breaks(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first record
    lost: list[int] = []
    records = list(synthetic_records(20, stats_every=5))
    with open(write_end, "wb", buffering=0) as channel:
        writer = RunWriter(tmp_path / "run.jsonl", channel=channel, flush_interval=0,
                           on_stream_lost=lambda: lost.append(1))  # fmt: skip
        for record in records:
            writer.write(record)
        writer.close()
    assert lost == [1]
    run = load_run(tmp_path / "run.jsonl")  # the file has every record all the same
    assert len(run.steps) == 20 and run.status == "completed" and run.problems == ()


def test_a_job_whose_stream_reader_went_away_stops(tmp_path: Path) -> None:
    task = tmp_path / "tiny.py"
    task.write_text(TINY_TASK)
    out = tmp_path / "run.jsonl"
    config = TrainConfig(task=f"{task}:make", device="cpu", steps=500, stream=True, out=str(out))
    result = run_job(config, stdout=_GoneReader(), stderr=io.StringIO(), handle_signals=False)
    assert result.state is RunState.STOPPED
    run = load_run(out)
    assert run.status == "stopped" and len(run.steps) < 500
    assert run.end is not None and "went away" in (run.end.error or "")
    assert result.error == run.end.error  # the job says why, as its end record does


def test_the_command_says_why_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fpexplorer train --stream > /dev/full` (or a pipe whose reader ended) printed
    "stopped after 0 steps; run log: ..." and nothing of why."""
    from fpexplorer.training.job import run_job_cli

    task = tmp_path / "tiny.py"
    task.write_text(TINY_TASK)
    out = tmp_path / "run.jsonl"
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _GoneReader())
    monkeypatch.setattr(sys, "stderr", stderr)
    config = TrainConfig(task=f"{task}:make", device="cpu", steps=500, stream=True, out=str(out))
    assert run_job_cli(config) == 0
    last = stderr.getvalue().strip().splitlines()[-1]
    end = load_run(out).end
    assert end is not None and end.error is not None
    assert last.startswith("fpexplorer train: stopped after ")
    assert f": {end.error}; run log: {out}" in last


@pytest.mark.slow  # a real training job in a child process: seconds
def test_closing_the_stream_pipe_stops_the_child(tmp_path: Path) -> None:
    out = tmp_path / "orphan.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "train", "--task", "mlp", "--precision", "bf16",
         "--steps", "100000", "--stats-every", "0", "--device", "cpu", "--stream",
         "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        while b'"type":"step"' not in process.stdout.readline():
            pass
        process.stdout.close()  # what the panel's death does to the pipe
        process.wait(timeout=120)  # a guard against a hang, not a measure of speed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    run = load_run(out)
    assert run.status == "stopped" and len(run.steps) < 100000


@pytest.mark.slow  # two ranks through the launcher: seconds
def test_closing_the_stream_pipe_stops_every_rank_of_a_launched_job(tmp_path: Path) -> None:
    """Rank 0 carries the stream; when its reader goes away it asks the launcher to stop
    every rank (as the panel's Stop does), instead of stopping alone while its peer waits
    in a collective, or all of them training on with nobody watching."""
    out = tmp_path / "ranked.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "train", "--task", "mlp", "--precision", "bf16",
         "--steps", "100000", "--stats-every", "0", "--device", "cpu", "--stream",
         "--nproc-per-node", "2", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stderr is not None
        while b'"type":"step"' not in process.stdout.readline():
            assert process.poll() is None, process.stderr.read().decode()
        process.stdout.close()  # what the panel's death does to the pipe
        process.wait(timeout=120)  # a guard against a hang, not a measure of speed
        stderr = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    assert process.returncode == 0, stderr
    assert "stopped by SIGTERM (2 ranks)" in stderr
    merged = load_run(out)
    assert merged.status == "stopped" and len(merged.steps) < 100000
    assert merged.end is not None and merged.end.ranks
    assert "went away" in (merged.end.ranks[0].error or "")  # rank 0 says why it stopped
    for rank in (0, 1):
        log = load_run(out.with_name(f"ranked.rank-{rank}.jsonl"))
        assert log.status == "stopped", rank
        assert len(log.steps) == len(merged.steps)  # every rank stopped at the same step
