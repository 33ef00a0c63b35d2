"""Closing the window while a job's step hangs: the job still writes its end record.

Before, shutdown waited 5 s after its SIGTERM and killed the job: a task stuck in Python
(measured: a loss function looping forever) left its run file without an end record,
'incomplete', although a second SIGTERM makes the job abandon the step and write
`end` "stopped" (what Stop does, after its own timeout).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

# Stands for the job's stop flag: the first SIGTERM waits for a step that never ends, the
# second writes the end record and leaves.
STUCK_STEP = textwrap.dedent(
    """
    import signal, sys, time
    terms = []
    def on_term(signum, frame):
        terms.append(signum)
        if len(terms) == 2:
            print('{"type": "end", "status": "stopped", "steps": 0, "elapsed": 0.0}', flush=True)
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print('{"type": "header", "schema": 2, "config": {"task": "x", "steps": 5}}', flush=True)
    while True:
        time.sleep(0.01)
    """
)


@pytest.mark.slow  # a child process: about a second
def test_shutdown_sends_the_second_stop_before_it_kills(panel, qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = panel.job
    with qtbot.waitSignal(job.records_received, timeout=10_000):  # its handler is installed
        job.start_command([sys.executable, "-c", STUCK_STEP], tmp_path / "stuck.jsonl")
    job.shutdown(wait_ms=2000)
    assert not job.active
    assert job.end_record is not None and job.end_record.status == "stopped"
    assert "stopped" in job.exit_summary
