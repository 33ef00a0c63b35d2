"""Runs `fpexplorer train --stream` in a child process (QProcess) and reports its records.

The GUI process never imports torch: the job is this same program started again
(`fpexplorer.entry.self_command()`, which is the bundled executable when frozen), and
its records come back as JSON Lines on stdout (and in the run file). With `--stream` the
job keeps its stdout for records alone: before the task's code runs it points fd 1 at
stderr, so nothing the task prints, writes to fd 1 or starts can reach the records (see
`training.job._RecordChannel` for why this channel rather than a second pipe). The
records are read by the run log's one reader, `RecordStream`, which would resynchronise
after garbage anyway; what the task printed arrives on stderr (`stderr_tail`).

Pause/Resume send SIGSTOP/SIGCONT on POSIX. Windows has no such signals, so there pause
is not offered (`PAUSE_SUPPORTED` is False) and Stop is the only way to end a job early.
Stop sends SIGTERM (the job finishes its step and writes its `end` record); if the
process is still there after `stop_timeout_ms` (a step stuck in Python), a second SIGTERM
makes the job abandon the step and still write `end` "stopped"; if it is there after
another `stop_timeout_ms`, it is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from fpexplorer.entry import self_command
from fpexplorer.gui.training.job_state import JobState, JobStateError, JobStateMachine
from fpexplorer.training.config import TrainConfig
from fpexplorer.training.runlog import EndRecord, Record, RecordStream
from fpexplorer.training.summary import steps_text

PAUSE_SUPPORTED = hasattr(signal, "SIGSTOP") and sys.platform != "win32"
MAX_STDERR_LINES = 200
PARSE_BUDGET_S = 0.005  # parse records for at most this long per event-loop turn
FEED_BYTES = 16 * 1024  # parsed in pieces of this size (~8 records with statistics)
MAX_BACKLOG_BYTES = 64 * 1024 * 1024


def job_argv(config: TrainConfig, run_path: str | os.PathLike[str]) -> list[str]:
    """The full command line of a job: this program, `train --stream`, the options, `--out`."""
    # The panel picks a free file name itself: a run's settings never make it replace one.
    options = config.replace(out=None, stream=False, overwrite=False).to_argv()
    return [*self_command(), "train", "--stream", *options, "--out", str(run_path)]


class TrainingJob(QObject):
    """One child process at a time; its state in a JobStateMachine.

    Signals:
        records_received(list): typed records (`runlog.Record`), in order, as they arrive.
        state_changed(JobState)
        problem(str): a line of stdout that was not a record, or a failure explanation.
        finished(str): one line saying how the job ended (also after failures).
    """

    records_received = Signal(list)
    state_changed = Signal(object)
    problem = Signal(str)
    finished = Signal(str)

    def __init__(self, parent: QObject | None = None, stop_timeout_ms: int = 10_000) -> None:
        super().__init__(parent)
        self._machine = JobStateMachine()
        self._process: QProcess | None = None
        self._stderr_pending = b""
        self._stream = RecordStream()
        self._problems_passed = 0
        self._backlog: deque[bytes] = deque()  # output not parsed yet, in FEED_BYTES pieces
        self._backlog_bytes = 0
        self._drain_scheduled = False
        self.stderr_tail: deque[str] = deque(maxlen=MAX_STDERR_LINES)
        self.end_record: EndRecord | None = None
        self.run_path: Path | None = None
        self.stop_timeout_ms = stop_timeout_ms
        self.exit_summary = ""
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self._on_kill_timer_timeout)
        self._killed_by_us = False
        self._stop_sent = False
        self._second_stop_sent = False

    # ----- state ----------------------------------------------------------------------

    @property
    def state(self) -> JobState:
        return self._machine.state

    @property
    def active(self) -> bool:
        return self._machine.active

    def can(self, action: str) -> bool:
        if action == "pause" and not PAUSE_SUPPORTED:
            return False
        return self._machine.allowed(action)

    def _move(self, action: str) -> None:
        self._machine.move(action)
        self.state_changed.emit(self._machine.state)

    @property
    def pid(self) -> int | None:
        if self._process is None:
            return None
        pid = int(self._process.processId())
        return pid or None

    # ----- actions --------------------------------------------------------------------

    def start(self, config: TrainConfig, run_path: str | os.PathLike[str]) -> None:
        """Start a job writing to `run_path`. Raises JobStateError while one is active."""
        if not self._machine.allowed("start"):
            raise JobStateError(f"cannot start a job while one is {self.state.value}")
        problems = config.validate()
        if problems:
            raise ValueError("; ".join(f"{k}: {v}" for k, v in problems.items()))
        self.start_command(job_argv(config, run_path), run_path)

    def start_command(self, argv: list[str], run_path: str | os.PathLike[str]) -> None:
        """Start any command that writes run-log records to stdout (benchmarks use a
        synthetic job through this same path). Raises JobStateError while one is active."""
        if not self._machine.allowed("start"):
            raise JobStateError(f"cannot start a job while one is {self.state.value}")
        self.run_path = Path(run_path)
        self.end_record = None
        self.stderr_tail.clear()
        self._stderr_pending = b""
        self._stream = RecordStream()
        self._problems_passed = 0
        self._backlog.clear()
        self._backlog_bytes = 0
        self._killed_by_us = False
        self._stop_sent = False
        self._second_stop_sent = False
        self.exit_summary = ""
        process = QProcess(self)
        environment = QProcessEnvironment.systemEnvironment()
        # Unbuffered: records reach the panel when written, not when a buffer fills.
        environment.insert("PYTHONUNBUFFERED", "1")
        process.setProcessEnvironment(environment)
        process.readyReadStandardOutput.connect(self._on_process_stdout)
        process.readyReadStandardError.connect(self._on_process_stderr)
        process.finished.connect(self._on_process_finished)
        process.errorOccurred.connect(self._on_process_error)
        self._process = process
        self._move("start")
        process.start(argv[0], argv[1:])

    def pause(self) -> None:
        if not PAUSE_SUPPORTED:
            raise JobStateError("pausing a job needs POSIX signals (SIGSTOP); not on this system")
        self._machine.move("pause")  # raises on misuse before any signal is sent
        self._signal(signal.SIGSTOP)
        self.state_changed.emit(self.state)

    def resume(self) -> None:
        self._machine.move("resume")
        self._signal(signal.SIGCONT)
        self.state_changed.emit(self.state)

    def stop(self) -> None:
        """Ask the job to finish its step and write `end`; kill it after the timeout."""
        was_paused = self.state is JobState.PAUSED
        self._move("stop")
        if was_paused:
            self._signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        if self._process is not None:
            self._stop_sent = True
            self._process.terminate()  # SIGTERM on POSIX
        self._kill_timer.start(self.stop_timeout_ms)

    def kill(self) -> None:
        """End the process now (no `end` record)."""
        if self._process is not None and self.active:
            self._killed_by_us = True
            if self.state is JobState.PAUSED:
                self._signal(signal.SIGCONT)
            self._process.kill()

    def shutdown(self, wait_ms: int = 5000) -> None:
        """Stop an active job and wait (bounded) for it to go; used when the window closes.

        As Stop does, in a shorter time: SIGTERM; after half of `wait_ms` a second SIGTERM
        (a step stuck in Python is abandoned and the job still writes its `end` record);
        after the other half, kill. Killing at once after the first wait left the run
        file of a hung job without its end record."""
        if not self.active or self._process is None:
            return
        if self.state is not JobState.STOPPING:
            self.stop()
        if self._process.waitForFinished(wait_ms // 2):
            return
        if not self._second_stop_sent:
            self._second_stop_sent = True
            self._process.terminate()
        if not self._process.waitForFinished(wait_ms - wait_ms // 2):
            self._process.kill()
            self._process.waitForFinished(2000)

    def _signal(self, signum: int) -> None:
        pid = self.pid
        if pid is not None:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass  # it has just exited; finished() will follow

    # ----- process output -------------------------------------------------------------

    def _on_process_stdout(self) -> None:
        if self._process is None:
            return
        data = bytes(self._process.readAllStandardOutput().data())
        # Cut into pieces so that parsing one never holds the event loop for long.
        for start in range(0, len(data), FEED_BYTES):
            self._backlog.append(data[start : start + FEED_BYTES])
            self._backlog_bytes += min(FEED_BYTES, len(data) - start)
        if not self._drain_scheduled:
            # Parsed on a later turn of the loop, so reading the pipe and parsing never add
            # up in one turn.
            self._drain_scheduled = True
            QTimer.singleShot(0, self._drain)

    def _drain(self, budget_s: float | None = PARSE_BUDGET_S) -> None:
        """Parse waiting output for at most `budget_s`, then let the event loop breathe.

        A job that streams faster than one loop iteration can parse would otherwise hold
        the loop for as long as its burst takes. Past MAX_BACKLOG_BYTES the budget is
        ignored so that memory stays bounded when the panel cannot keep up.
        """
        self._drain_scheduled = False
        if self._backlog_bytes > MAX_BACKLOG_BYTES:
            budget_s = None
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        while self._backlog:
            piece = self._backlog.popleft()
            self._backlog_bytes -= len(piece)
            self._emit(self._stream.feed(piece))
            if deadline is not None and time.perf_counter() > deadline:
                break
        if self._backlog and not self._drain_scheduled:
            self._drain_scheduled = True
            QTimer.singleShot(0, self._drain)

    def _emit(self, records: list[Record]) -> None:
        for message in self._stream.problems[self._problems_passed :]:
            # "job output: line 5: not a record (...)". The stream's problems are not all
            # about output that is not a record (a step out of order, a newer schema): the
            # prefix said they were.
            self.problem.emit(f"job output: {message}")
        self._problems_passed = len(self._stream.problems)
        for record in records:
            if isinstance(record, EndRecord):
                self.end_record = record
        if records:
            self.records_received.emit(records)

    def _on_process_stderr(self) -> None:
        if self._process is None:
            return
        data = self._stderr_pending + bytes(self._process.readAllStandardError().data())
        lines = data.split(b"\n")
        self._stderr_pending = lines.pop()[-4096:]
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    def _on_process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self.active:
            message = "the training job could not be started: " + (
                self._process.errorString() if self._process else "unknown reason"
            )
            self.exit_summary = message
            self._kill_timer.stop()
            self._move("fail")
            self.finished.emit(message)

    def _on_kill_timer_timeout(self) -> None:
        if self._process is None or not self.active:
            return
        if self._stop_sent and not self._second_stop_sent:
            # The step in progress did not end: a second SIGTERM makes the job abandon it
            # and still write its `end` record (training.job._StopFlag).
            self._second_stop_sent = True
            self._process.terminate()
            self._kill_timer.start(self.stop_timeout_ms)
            return
        waited = (1 + self._second_stop_sent) * self.stop_timeout_ms / 1000
        self.problem.emit(f"the job did not stop within {waited:g} s: killed")
        self.kill()

    def _on_process_finished(self, exit_code: int, exit_status: QProcess.ExitStatus) -> None:
        self._kill_timer.stop()
        if self._process is not None:
            # Drain whatever is left, including a last line without its newline.
            self._on_process_stdout()
            self._drain(budget_s=None)  # the end record may still be waiting
            self._on_process_stderr()
            self._emit(self._stream.finish())  # a torn last line is reported there
        if not self.active:
            return  # already failed (e.g. never started)
        crashed = exit_status == QProcess.ExitStatus.CrashExit
        end = self.end_record
        if end is not None and end.status in ("completed", "stopped"):
            summary = f"job {end.status} after {steps_text(end.steps)}"
            self._move("finish")
        elif end is None and self._stop_sent and not self._killed_by_us and crashed:
            # Stop pressed while the job was still starting (importing torch takes seconds):
            # SIGTERM ended it before it could handle the signal. Asked for, not a failure.
            started = self.run_path is not None and self.run_path.is_file()
            summary = "job stopped while starting" + (
                " (its run file has no end record)" if started else ", before its first step"
            )
            self._move("finish")
        else:
            if end is not None and end.status == "failed":
                summary = f"job failed: {end.error or 'no reason given'}"
            elif self._killed_by_us:
                summary = "job killed (it did not stop in time)"
            elif crashed:
                summary = "job killed from outside or crashed (no end record)"
            else:
                summary = f"job exited with status {exit_code} without an end record"
            last = [line for line in self.stderr_tail if line.strip()][-3:]
            if last and (end is None or not end.error):
                # Labelled: after a SIGKILL the last line is the job's own report (the layers
                # it quantized), which read as the cause when it followed the dash alone.
                summary += " — its last output: " + " | ".join(last)
            self._move("fail")
        self.exit_summary = summary
        self.finished.emit(summary)
