"""Real training jobs (tiny, CPU) run from the panel through `fpexplorer train --stream`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from fpexplorer.gui.training.job_state import JobState, JobStateError
from fpexplorer.training.runlog import load_run

JOB_TIMEOUT_MS = 90_000  # torch's import alone takes seconds on a busy 2-core machine


def _configure(panel, steps: int, precision: str = "bf16", task: str = "mlp") -> None:  # type: ignore[no-untyped-def]
    form = panel.form
    form.task_combo.setCurrentText(task)
    form.precision_combo.setCurrentText(precision)
    form.device_combo.setCurrentIndex(form.device_combo.findData("cpu"))
    form.fields["steps"].edit.setText(str(steps))
    form.fields["stats_every"].edit.setText("1")
    assert form.problems() == {}


def _steps_seen(panel) -> int:  # type: ignore[no-untyped-def]
    live = panel.current_run
    return live.model.steps_seen if live is not None else 0


def _process_state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..."; the state letter follows the closing parenthesis.
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[0]


@pytest.mark.slow  # a real training job in a child process: seconds
def test_a_short_job_runs_to_its_end_record(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=6, precision="fp16")
    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    assert panel.job.state in (JobState.RUNNING, JobState.DONE)
    qtbot.waitUntil(lambda: not panel.job.active, timeout=JOB_TIMEOUT_MS)
    assert panel.job.state is JobState.DONE, panel.status_label.text()
    panel.refresh()
    entry = panel.current_run
    assert entry is not None and not entry.live  # the job ended: no longer "(live)"
    assert "(live)" not in panel.run_list.item(0).text()
    model = entry.model
    assert model.end is not None and model.end.status == "completed"
    assert model.steps_seen == 6
    assert model.header is not None and model.header.torch_version  # the real header arrived
    x, _ = panel.loss_plot.curves.curves[entry.key].getData()
    assert len(x) == 6
    x, _ = panel.scale_plot.curves.curves[entry.key].getData()
    assert len(x) == 6
    assert len(panel.hist_plot.bars.opts["height"]) > 3
    assert panel.layer_table.table.rowCount() >= 2
    assert panel.memory.table.rowCount() >= 3
    assert panel.progress.value() == 1000  # thousandths: 6 of 6 steps
    assert panel.progress.format().startswith("6/6 steps")
    assert "completed after 6 steps" in panel.status_label.text().lower()
    # The run file holds the same run, readable with no problems.
    run = load_run(entry.path)
    assert run.status == "completed" and len(run.steps) == 6 and not run.problems
    assert panel.start_button.isEnabled() and not panel.stop_button.isEnabled()


@pytest.mark.slow  # a real training job in a child process: seconds
def test_stop_mid_run_ends_with_a_stopped_record(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000)
    assert panel.start_job()
    qtbot.waitUntil(lambda: _steps_seen(panel) >= 3, timeout=JOB_TIMEOUT_MS)
    assert panel.stop_button.isEnabled()
    panel.stop_button.click()
    assert panel.job.state in (JobState.STOPPING, JobState.DONE)
    qtbot.waitUntil(lambda: not panel.job.active, timeout=30_000)
    assert panel.job.state is JobState.DONE, panel.status_label.text()
    model = panel.current_run.model
    assert model.end is not None and model.end.status == "stopped"
    assert model.end.steps == model.steps_seen >= 3
    run = load_run(panel.current_run.path)
    assert run.status == "stopped" and not run.problems


@pytest.mark.slow  # a child process: about half a second
def test_stop_while_the_job_is_starting_is_a_stop_not_a_crash(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000)
    assert panel.start_job()
    panel.stop_button.click()  # at once: the job is still importing torch
    qtbot.waitUntil(lambda: not panel.job.active, timeout=30_000)
    assert panel.job.state is JobState.DONE, panel.status_label.text()
    assert "stopped while starting" in panel.status_label.text()
    assert "crashed" not in panel.status_label.text()
    # Quick Start/Stop left empty "incomplete (live)" runs behind: none is listed now.
    assert panel.runs == [] and panel.run_list.count() == 0
    assert "No step was recorded, so the run is not listed" in panel.status_label.text()


@pytest.mark.skipif(sys.platform == "win32" or not Path("/proc").is_dir(), reason="POSIX /proc")
@pytest.mark.slow  # a real training job in a child process: seconds
def test_pause_stops_the_process_and_resume_continues(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000)
    assert panel.start_job()
    qtbot.waitUntil(lambda: _steps_seen(panel) >= 2, timeout=JOB_TIMEOUT_MS)
    pid = panel.job.pid
    panel.pause_button.click()
    assert panel.job.state is JobState.PAUSED
    assert panel.pause_button.text() == "Resume"
    qtbot.waitUntil(lambda: _process_state(pid) == "T", timeout=5_000)
    with pytest.raises(JobStateError, match="cannot pause a job that is paused"):
        panel.job.pause()
    panel.pause_button.click()
    assert panel.job.state is JobState.RUNNING
    seen = _steps_seen(panel)
    qtbot.waitUntil(lambda: _steps_seen(panel) > seen + 2, timeout=30_000)
    # Stop straight from pause works too (the job is continued so it can act on SIGTERM).
    panel.pause_button.click()
    panel.stop_button.click()
    qtbot.waitUntil(lambda: panel.job.state is JobState.DONE, timeout=30_000)
    assert panel.current_run.model.end.status == "stopped"


@pytest.mark.slow  # a real training job in a child process: seconds
def test_a_job_killed_from_outside_leaves_the_window_and_the_plots(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000, precision="mxfp8")  # it reports its layers on stderr
    assert panel.start_job()
    qtbot.waitUntil(lambda: _steps_seen(panel) >= 3, timeout=JOB_TIMEOUT_MS)
    os.kill(panel.job.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: panel.job.state is JobState.FAILED, timeout=30_000)
    panel.refresh()
    entry = panel.current_run
    seen = entry.model.steps_seen
    assert seen >= 3
    assert entry.model.end is None
    assert "killed" in panel.status_label.text()
    # The job's last stderr line is its report, shown as such, not as the cause.
    assert "(no end record) — its last output: fpexplorer train: 3 linear layers in" in (
        panel.status_label.text()
    )
    assert panel.isVisible()
    x, _ = panel.scale_plot.curves.curves[entry.key].getData()
    assert len(x) == seen  # everything plotted so far is still there
    run = load_run(entry.path)  # the run file stays readable
    assert run.status == "incomplete" and len(run.steps) >= seen - 1
    assert panel.start_button.isEnabled()


@pytest.mark.slow  # a real training job in a child process: seconds
def test_a_failing_task_is_reported_not_raised(panel, qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task_file = tmp_path / "broken_task.py"
    task_file.write_text("def make():\n    raise RuntimeError('the data set is missing')\n")
    _configure(panel, steps=5, task=f"{task_file}:make")
    assert panel.start_job()
    qtbot.waitUntil(lambda: panel.job.state is JobState.FAILED, timeout=JOB_TIMEOUT_MS)
    assert "the data set is missing" in panel.status_label.text()
    assert panel.isVisible() and panel.start_button.isEnabled()


@pytest.mark.slow  # a real training job in a child process: seconds
def test_closing_the_panel_stops_the_job(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000)
    assert panel.start_job()
    qtbot.waitUntil(lambda: _steps_seen(panel) >= 2, timeout=JOB_TIMEOUT_MS)
    pid = panel.job.pid
    panel.shutdown()
    assert not panel.job.active
    assert not Path(f"/proc/{pid}").exists() or _process_state(pid) == "Z"
    run = load_run(panel.current_run.path)
    assert run.status == "stopped"


def test_shutdown_ends_a_device_search_still_running(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QProcess

    finder = panel.form.device_finder
    finder.waitForFinished(5000)
    finder.start(sys.executable, ["-c", "import time; time.sleep(60)"])  # a hung nvidia-smi
    assert finder.waitForStarted(5000)
    panel.shutdown()
    assert finder.state() == QProcess.ProcessState.NotRunning


@pytest.mark.slow  # a child process and its kill timeout: about a second
def test_stop_kills_a_job_that_ignores_sigterm_after_the_timeout(
    panel, qtbot, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # A job stuck in a long step does not act on SIGTERM: Stop falls back to killing it.
    stubborn = textwrap.dedent(
        """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('{"type": "header", "schema": 1, "config": {"task": "x", "steps": 5}}', flush=True)
        time.sleep(60)
        """
    )
    job = panel.job
    job.stop_timeout_ms = 300
    # Its header arrives after it has installed SIG_IGN: from then on SIGTERM is ignored.
    with qtbot.waitSignal(job.records_received, timeout=10_000):
        job.start_command([sys.executable, "-c", stubborn], tmp_path / "stubborn.jsonl")
    job.stop()
    assert job.state is JobState.STOPPING
    with qtbot.waitSignal(job.finished, timeout=10_000) as finished:
        pass
    assert job.state is JobState.FAILED
    assert "killed" in finished.args[0] and "did not stop in time" in finished.args[0]


def test_misuse_of_the_job_controller_raises_a_clear_error(panel) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(JobStateError, match="cannot pause a job that is idle"):
        panel.job.pause()
    with pytest.raises(JobStateError, match="cannot stop a job that is idle"):
        panel.job.stop()


@pytest.mark.slow  # a real training job in a child process: seconds
def test_the_gui_process_never_imports_torch(tmp_path: Path) -> None:
    """A fresh GUI process runs a real job from the panel, replays it: torch stays out."""
    script = textwrap.dedent(
        f"""
        import json, os, sys
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        os.environ["FPEXPLORER_RUN_DIR"] = {str(tmp_path)!r}
        from PySide6.QtCore import QEventLoop, QTimer
        from PySide6.QtWidgets import QApplication
        app = QApplication([])
        from fpexplorer.gui.training.panel import TrainingPanel
        panel = TrainingPanel()
        panel.show()
        form = panel.form
        form.precision_combo.setCurrentText("fp16")
        form.device_combo.setCurrentIndex(form.device_combo.findData("cpu"))
        form.fields["steps"].edit.setText("3")
        loop = QEventLoop()
        panel.job.finished.connect(loop.quit)
        QTimer.singleShot(120000, loop.quit)
        started = panel.start_job()
        loop.exec()
        path = panel.current_run.path
        panel.load_run(path)
        panel.export_to({str(tmp_path / "export")!r})
        print(json.dumps({{"started": started, "state": panel.job.state.value,
                          "steps": panel.current_run.model.steps_seen,
                          "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}}))
        panel.shutdown()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"started": True, "state": "done", "steps": 3, "torch": []}


@pytest.mark.slow  # a training job in a child process: a second
def test_start_while_a_job_runs_is_refused_and_adds_no_run(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    _configure(panel, steps=1_000_000)
    assert panel.start_job()
    assert not panel.start_button.isEnabled()
    assert not panel.start_job()
    assert "Cannot start: a job is running" in panel.status_label.text()
    assert len(panel.runs) == 1
    panel.stop_button.click()
    qtbot.waitUntil(lambda: not panel.job.active, timeout=JOB_TIMEOUT_MS)
