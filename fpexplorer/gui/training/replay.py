"""Replaying a run file into a RunModel piece by piece, in bounded memory. Qt-free.

Reading a long run with statistics on every step in one go means hundreds of MB of
record objects and seconds of parsing. The panel instead reads a chunk at a time through
the run log's `RecordStream` (the one reader: its damage rules, schema upgrades and
resynchronisation), hands the typed records to the model straight away (the model keeps
only bounded buffers), and stops after a time budget so the event loop can run between
pieces. The stream's problems become the model's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import BinaryIO

from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.training.runlog import NO_HEADER, Record, RecordStream

CHUNK_BYTES = 16 * 1024  # ~8 records with statistics: fine-grained time budget


class RunFileReplay:
    """Feeds one run file into `model`; call `advance()` until it returns True."""

    def __init__(self, path: str | os.PathLike[str], model: RunModel) -> None:
        self.path = Path(path)
        self.model = model
        self.size = 0
        self.bytes_read = 0
        self.done = False
        self.shrank = False  # the file was cut short while it was read
        self._stream = RecordStream()
        self._problems_passed = 0
        self._handle: BinaryIO | None = None
        try:
            self._handle = open(self.path, "rb")
            self.size = os.fstat(self._handle.fileno()).st_size
        except OSError as error:
            model.add_problem(f"cannot read {self.path}: {error.strerror or error}")
            self.done = True

    @property
    def torn_last_line(self) -> str | None:
        """The problem line of a last line cut short, if the file ends in one."""
        return self._stream.torn_last_line

    @property
    def torn_first_line(self) -> bool:
        """The file's one line is a record cut short (a job killed writing its header)."""
        return self._stream.torn_last_line is not None and self._stream.line_number == 1

    @property
    def refused_schema(self) -> int | None:
        """The newer schema of a header met (its records are not read), if any."""
        return self._stream.refused_schema

    @property
    def fraction(self) -> float:
        """The share of the file read so far, at most 1 (a file still growing counts its
        size now: "Loading… 159%" was shown for one written while it was read)."""
        return min(1.0, self.bytes_read / self.size) if self.size else 1.0

    def advance(self, budget_s: float | None = None) -> bool:
        """Read and apply chunks until the file ends or `budget_s` is spent; True when done."""
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        while not self.done:
            assert self._handle is not None
            try:
                chunk = self._handle.read(CHUNK_BYTES)
            except OSError as error:
                self.model.add_problem(f"cannot read {self.path}: {error.strerror or error}")
                self._finish()
                break
            if not chunk:
                self._finish()
                break
            self.bytes_read += len(chunk)
            if self.bytes_read > self.size:  # written to while read: its size now
                self.size = self._size_now()
            self._apply(self._stream.feed(chunk))
            if deadline is not None and time.perf_counter() > deadline:
                break
        return self.done

    def _apply(self, records: list[Record]) -> None:
        if records:
            self.model.add_records(records)
        problems = self._stream.problems
        for message in problems[self._problems_passed :]:
            self.model.add_problem(message)
        self._problems_passed = len(problems)

    def _size_now(self) -> int:
        assert self._handle is not None
        try:
            return os.fstat(self._handle.fileno()).st_size
        except OSError:
            return self.bytes_read

    def _finish(self) -> None:
        if self.bytes_read < self.size and self._size_now() < self.size:
            self.shrank = True
            # Cut short under us (truncated or rewritten while read): its end is not a
            # killed job's torn last line.
            self.model.add_problem(
                f"the file shrank while it was read (to {self._size_now():,} bytes, from "
                f"{self.size:,}): what was read is shown"
            )
        self._apply(self._stream.finish())
        model = self.model
        has_run = model.steps_seen or model.end is not None
        if model.header is None and has_run and not any("header" in p for p in model.problems):
            model.add_problem(NO_HEADER)  # as `runs check` says it (a late header says where)
        if self._handle is not None:
            self._handle.close()
        self.done = True

    def close(self) -> None:
        """Stop early (e.g. the panel is shut down mid-replay)."""
        if self._handle is not None and not self._handle.closed:
            self._handle.close()
        self.done = True
