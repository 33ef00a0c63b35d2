"""Replaying a run file into a RunModel piece by piece, in bounded memory. Qt-free.

`RunReader.read_new()` returns every record of the file at once, which for a long run
with statistics on every step means hundreds of MB of record objects and seconds of
parsing in one go. The panel instead reads a chunk at a time, hands each record's raw
dict to the model straight away (the model keeps only bounded buffers), and stops after
a time budget so the event loop can run between pieces.

The damage rules are the run log's: a line that is not a record is reported in the
model's problems and skipped; a last line without its newline is accepted if it parses
and otherwise reported as a torn last line.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.training.runlog import MAX_LINE_BYTES, parse_record

CHUNK_BYTES = 16 * 1024  # ~8 records with statistics: fine-grained time budget


class RunFileReplay:
    """Feeds one run file into `model`; call `advance()` until it returns True."""

    def __init__(self, path: str | os.PathLike[str], model: RunModel) -> None:
        self.path = Path(path)
        self.model = model
        self.size = 0
        self.bytes_read = 0
        self.done = False
        self._pending = b""
        self._line_number = 0
        self._handle = None
        try:
            self._handle = open(self.path, "rb")
            self.size = os.fstat(self._handle.fileno()).st_size
        except OSError as error:
            model.add_problem(f"cannot read {self.path}: {error.strerror or error}")
            self.done = True

    @property
    def fraction(self) -> float:
        return self.bytes_read / self.size if self.size else 1.0

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
            lines = (self._pending + chunk).split(b"\n")
            self._pending = lines.pop()
            if len(self._pending) > MAX_LINE_BYTES:
                self._line_number += 1
                self.model.add_problem(f"line {self._line_number}: too long, skipped")
                self._pending = b""
            self._apply(lines)
            if deadline is not None and time.perf_counter() > deadline:
                break
        return self.done

    def _apply(self, lines: list[bytes]) -> None:
        records = []
        for line in lines:
            self._line_number += 1
            if not line.strip():
                continue
            try:
                record = parse_record(line)
            except ValueError as error:
                self.model.add_problem(f"line {self._line_number}: {error}")
                continue
            if record is not None:
                records.append(record.raw)
        if records:
            self.model.add_records(records)

    def _finish(self) -> None:
        if self._pending.strip():
            self._line_number += 1
            try:
                record = parse_record(self._pending)
            except ValueError:
                self.model.add_problem(f"line {self._line_number}: torn last line ignored")
            else:
                if record is not None:
                    self.model.add_records([record.raw])
        self._pending = b""
        if self._handle is not None:
            self._handle.close()
        self.done = True

    def close(self) -> None:
        """Stop early (e.g. the panel is shut down mid-replay)."""
        if self._handle is not None and not self._handle.closed:
            self._handle.close()
        self.done = True
