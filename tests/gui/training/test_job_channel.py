"""The panel's job reader gets every record however the task writes to its stdout."""

from __future__ import annotations

from pathlib import Path

import pytest

from fpexplorer.gui.training.job import TrainingJob
from fpexplorer.gui.training.job_state import JobState
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.records import EndRecord, StepRecord

JOB_TIMEOUT_MS = 90_000  # torch's import alone takes seconds on a busy 2-core machine

CHATTY_TASK = """
import os, subprocess, sys
import torch
from torch import nn

def make():
    def loss_fn(output, target):
        print("print without a newline", end="")
        os.write(1, b'{"type":"step","step":')  # even bytes that look like a record
        sys.__stdout__.write("sys.__stdout__ text")
        sys.__stdout__.flush()
        subprocess.run([sys.executable, "-c", "print('a subprocess', end='')"], check=True)
        return nn.functional.mse_loss(output, target)
    batch = (torch.ones(4, 3), torch.zeros(4, 3))
    return nn.Linear(3, 3), iter([batch] * 100), loss_fn
"""


@pytest.mark.slow  # a real training job in a child process: seconds
def test_the_job_reader_gets_every_step_of_a_task_that_writes_to_fd_1(
    qtbot, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "chatty.py"
    task.write_text(CHATTY_TASK)
    job = TrainingJob()
    received: list[object] = []
    problems: list[str] = []
    job.records_received.connect(received.extend)
    job.problem.connect(problems.append)
    config = TrainConfig(task=f"{task}:make", device="cpu", steps=9, stats_every=1)
    job.start(config, tmp_path / "run.jsonl")
    qtbot.waitUntil(lambda: not job.active, timeout=JOB_TIMEOUT_MS)
    assert job.state is JobState.DONE, job.exit_summary
    assert problems == []
    assert [r.step for r in received if isinstance(r, StepRecord)] == list(range(9))
    assert isinstance(received[-1], EndRecord) and received[-1].status == "completed"
    # What the task wrote went to the job's stderr, where the panel keeps a tail of it.
    assert any("a subprocess" in line for line in job.stderr_tail)


STUCK_TASK = """
import torch
from torch import nn
calls = 0

def make():
    def loss_fn(output, target):
        global calls
        calls += 1
        while calls == 3:  # the third step never ends: stuck in Python
            pass
        return nn.functional.mse_loss(output, target)
    batch = (torch.ones(4, 3), torch.zeros(4, 3))
    return nn.Linear(3, 3), iter([batch] * 100), loss_fn
"""


@pytest.mark.slow  # a real training job in a child process: seconds
def test_stop_ends_a_step_stuck_in_python_with_an_end_record(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Stop's SIGTERM waits for a step that never ends; after the timeout a second SIGTERM
    ends it there, and the run still closes with `end` "stopped" (no kill needed)."""
    task = tmp_path / "stuck.py"
    task.write_text(STUCK_TASK)
    job = TrainingJob(stop_timeout_ms=1500)
    received: list[object] = []
    job.records_received.connect(received.extend)
    config = TrainConfig(task=f"{task}:make", device="cpu", steps=50, stats_every=1)
    job.start(config, tmp_path / "run.jsonl")
    qtbot.waitUntil(
        lambda: sum(isinstance(r, StepRecord) for r in received) == 2, timeout=JOB_TIMEOUT_MS
    )
    job.stop()
    qtbot.waitUntil(lambda: not job.active, timeout=30_000)
    assert job.state is JobState.DONE, job.exit_summary
    assert isinstance(received[-1], EndRecord) and received[-1].status == "stopped"
    assert received[-1].steps == 2
