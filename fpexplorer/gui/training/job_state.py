"""The states of a training job and the moves allowed between them. Qt-free.

Like torch.amp.GradScaler's OptState, a misuse (pausing a job that is not running,
starting one twice) raises a clear `JobStateError` instead of doing something odd.
"""

from __future__ import annotations

import enum


class JobState(enum.Enum):
    IDLE = "idle"  # nothing started yet
    RUNNING = "running"
    PAUSED = "paused"  # the process is stopped (SIGSTOP) and holds its memory
    STOPPING = "stopping"  # asked to finish its step and write `end`; killed after a timeout
    DONE = "done"  # ended with an `end` record (completed or stopped)
    FAILED = "failed"  # exception, NaN storm, out of memory, killed, or never started


class JobStateError(RuntimeError):
    """A job was asked to do something its state does not allow."""


# action -> {state it may be taken from: state it leads to}
_MOVES: dict[str, dict[JobState, JobState]] = {
    "start": {
        JobState.IDLE: JobState.RUNNING,
        JobState.DONE: JobState.RUNNING,
        JobState.FAILED: JobState.RUNNING,
    },
    "pause": {JobState.RUNNING: JobState.PAUSED},
    "resume": {JobState.PAUSED: JobState.RUNNING},
    "stop": {JobState.RUNNING: JobState.STOPPING, JobState.PAUSED: JobState.STOPPING},
    "finish": {
        JobState.RUNNING: JobState.DONE,
        JobState.PAUSED: JobState.DONE,
        JobState.STOPPING: JobState.DONE,
    },
    "fail": {
        JobState.RUNNING: JobState.FAILED,
        JobState.PAUSED: JobState.FAILED,
        JobState.STOPPING: JobState.FAILED,
    },
}

ACTIVE_STATES = frozenset({JobState.RUNNING, JobState.PAUSED, JobState.STOPPING})


class JobStateMachine:
    """Holds the current JobState; `move(action)` changes it or raises JobStateError."""

    def __init__(self) -> None:
        self.state = JobState.IDLE

    def allowed(self, action: str) -> bool:
        return self.state in _MOVES[action]

    def move(self, action: str) -> JobState:
        if action not in _MOVES:
            raise JobStateError(f"unknown job action {action!r}")
        targets = _MOVES[action]
        if self.state not in targets:
            possible = ", ".join(sorted(s.value for s in targets))
            raise JobStateError(
                f"cannot {action} a job that is {self.state.value} (only when {possible})"
            )
        self.state = targets[self.state]
        return self.state

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES
