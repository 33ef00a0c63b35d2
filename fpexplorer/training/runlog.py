"""The run log on disk and on the wire: writing records, reading them back. Torch-free.

What a record holds is `fpexplorer.training.records` (the contract); this module moves
records as JSON Lines:

- `RunWriter` writes typed records to a file, one flushed line each, holding an exclusive
  lock (`fcntl.flock`) so that a second writer on the same file is refused instead of
  interleaving its lines; it may also send each line to a stream channel (a pipe).
- `RecordStream` is the one reader: bytes in (any chunking), typed records out. It holds
  back a line until its newline arrives, resynchronises on the next whole record after
  garbage (bytes of a user's print glued to a record), upgrades older schemas and refuses
  newer ones. Everything that reads records goes through it: `RunReader` (a file that may
  still grow), the GUI's replay and job reader, and `fpexplorer runs`.

Reading never raises on a damaged log: `problems` says what was skipped and why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fpexplorer.training.records import (
    END_STATUSES,
    SCHEMA_VERSION,
    EndRecord,
    FormatShares,
    HeaderRecord,
    Histogram,
    LayerStats,
    LostUpdates,
    Memory,
    NewerSchemaError,
    Record,
    StepRecord,
    StepStats,
    decode_float,
    decode_record,
    encode_json_value,
    encode_line,
    from_schema1_dict,
)

__all__ = [
    "END_STATUSES",
    "MAX_LINE_BYTES",
    "SCHEMA_VERSION",
    "EndRecord",
    "FormatShares",
    "HeaderRecord",
    "Histogram",
    "LayerStats",
    "LostUpdates",
    "Memory",
    "Record",
    "RecordStream",
    "Run",
    "RunLogLocked",
    "RunReader",
    "RunWriter",
    "StepRecord",
    "StepStats",
    "collect_run",
    "decode_float",
    "encode_json_line",
    "encode_line",
    "load_run",
    "parse_record",
]

# A line longer than this is damage, not a record (keeps a garbage file from filling memory).
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_PROBLEMS = 200
# Records are written with "type" first, so a record starts with these bytes: the stream
# looks for them to find the next whole record after garbage.
_RECORD_START = '{"type":'


class RunLogLocked(OSError):
    """Another writer holds the run file."""


# ---------------------------------------------------------------------------------------
# Writing


def encode_json_line(value: Mapping[str, Any]) -> str:
    """Free-form JSON (e.g. a run summary) as one strict line, non-finite floats spelled."""
    return json.dumps(encode_json_value(dict(value)), separators=(",", ":"), allow_nan=False)


def _lock(fd: int, path: Path) -> None:
    """An exclusive, non-blocking lock on the whole run file (POSIX; a no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks through fcntl
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunLogLocked(
            f"{path} is being written by another job (it holds the file's lock)"
        ) from None


class RunWriter:
    """Writes records to a run log, one flushed line each; optionally copies each line
    to `echo` (a text stream, e.g. stdout for `--stream`) and/or `channel` (a binary
    file, e.g. the write end of a pipe to the panel).

    Each line goes to the file in a single unbuffered write, so a job killed at any moment
    leaves every earlier record intact and at most one torn last line. The file is locked
    for as long as the writer is open: a second writer raises `RunLogLocked` before
    touching the file (it is truncated only once the lock is held).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        echo: IO[str] | None = None,
        channel: IO[bytes] | None = None,
        exclusive: bool = False,
    ) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0)
        fd = os.open(self.path, flags, 0o666)
        try:
            _lock(fd, self.path)
            if self.path.is_file():  # not /dev/null or a FIFO
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._echo = echo
        self._channel = channel
        self.records_written = 0

    def write(self, record: Record | Mapping[str, Any]) -> str:
        """Write one record; returns the line written (without its newline).

        A plain dict is accepted for now, read as schema 1's layout (the monitor's
        hand-built dicts) and written as the current schema; build records instead.
        """
        if isinstance(record, Mapping):
            typed = from_schema1_dict(record)
            if typed is None:
                raise ValueError(f"not a record type: {record.get('type')!r}")
        else:
            typed = record
        line = encode_line(typed)
        data = (line + "\n").encode("utf-8")
        self._file.write(data)
        if self._channel is not None:
            try:
                self._channel.write(data)
                self._channel.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._channel = None  # the reader went away; the file keeps every record
        if self._echo is not None:
            try:
                self._echo.write(line + "\n")
                self._echo.flush()
            except (BrokenPipeError, ValueError, OSError):
                # The reader of the stream went away (e.g. the window closed): the file
                # still receives every record, so the run is not lost.
                self._echo = None
        self.records_written += 1
        return line

    def close(self) -> None:
        self._file.close()  # closing the descriptor releases the lock
        if self._channel is not None:
            try:
                self._channel.close()
            except OSError:
                pass
            self._channel = None

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------
# Reading


def parse_record(line: str | bytes, schema: int = SCHEMA_VERSION) -> Record | None:
    """One line (without its newline) as a typed record; None for an unknown record type.
    Raises ValueError when it is not a record. Prefer RecordStream for more than a line."""
    try:
        decoded = json.loads(line)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError alike
        raise ValueError(f"not valid JSON: {error}") from None
    return decode_record(decoded, schema)


class RecordStream:
    """Bytes in, typed records out, incrementally: the one reader of run logs.

    `feed(data)` takes any chunk of the log (a file read, a pipe read) and returns the
    records completed by it; a line is held back until its newline arrives. `finish()`
    ends the input: a last line that parses is accepted, a torn one reported.

    Damage never raises; it goes to `problems` (one line each, "line N: ..."):
    - a line that is not a record is skipped; where a record's first bytes (`{"type":`)
      appear later on the line (a user's output glued in front of it), the record is
      read from there on;
    - a line over `MAX_LINE_BYTES` is dropped up to its newline;
    - a header of a newer schema than SCHEMA_VERSION: it and the records after it (up to
      the next header) are not read, and the problem says so once; older schemas are
      upgraded (`records.upgrade`).
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.problems: list[str] = []
        self.max_line_bytes = max_line_bytes
        self.schema = SCHEMA_VERSION  # the schema of the records now coming (their header's)
        self.line_number = 0
        self.bytes_fed = 0
        self.refused_records = 0  # records after a newer-schema header, not read
        # Byte offset (from the first byte fed) of the line each record of the last
        # feed()/finish() came from: where to seek to read a record again.
        self.offsets: list[int] = []
        self._line_start = 0
        self._pending = b""
        self._discarding = False  # inside an over-long line: drop up to its newline
        self._refusing = False
        self._dropped_problems = 0

    @property
    def partial_line(self) -> bool:
        """True when the input so far ends in a line without its newline."""
        return bool(self._pending.strip())

    def feed(self, data: bytes) -> list[Record]:
        """The records completed by `data` (possibly none)."""
        base = self.bytes_fed
        self.bytes_fed += len(data)
        records: list[Record] = []
        self.offsets = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            piece = data[start:newline]
            start = newline + 1
            line_start, self._line_start = self._line_start, base + start
            if self._discarding:
                self._discarding = False
                self._pending = b""
                continue
            line = self._pending + piece if self._pending else piece
            self._pending = b""
            self.line_number += 1
            before = len(records)
            self._read_line(line, records)
            self.offsets += [line_start] * (len(records) - before)
        if not self._discarding:
            self._pending += data[start:]
            if len(self._pending) > self.max_line_bytes:
                self.line_number += 1
                self._report(f"line {self.line_number}: longer than {self.max_line_bytes} bytes")
                self._pending = b""
                self._discarding = True
        return records

    def finish(self) -> list[Record]:
        """End of input: a whole last line without its newline is accepted, a torn one
        reported. The stream may be fed again afterwards (a file that grew)."""
        records: list[Record] = []
        self.offsets = []
        if self._pending.strip():
            self.line_number += 1
            line, self._pending = self._pending, b""
            try:
                decoded = json.loads(line)
            except ValueError:
                self._report(f"line {self.line_number}: torn last line ignored")
            else:
                self._use(decoded, records)
                self.offsets = [self._line_start] * len(records)
        self._pending = b""
        self._line_start = self.bytes_fed
        self._discarding = False
        if self.refused_records:
            self._report(
                f"{self.refused_records} record(s) of schema {self.schema} not read "
                f"(this fpexplorer reads schema {SCHEMA_VERSION} and older)"
            )
            self.refused_records = 0
        return records

    def _read_line(self, line: bytes, records: list[Record]) -> None:
        if not line.strip():
            return
        try:
            decoded = json.loads(line)
        except ValueError as error:
            self._resynchronise(line, error, records)
            return
        self._use(decoded, records)

    def _resynchronise(self, line: bytes, error: ValueError, records: list[Record]) -> None:
        """Records inside a line that is not one: garbage before, between or after them."""
        text = line.decode("utf-8", "replace")
        decoder = json.JSONDecoder()
        position = text.find(_RECORD_START)
        found = 0
        while position >= 0:
            try:
                decoded, end = decoder.raw_decode(text, position)
            except ValueError:
                position = text.find(_RECORD_START, position + 1)
                continue
            found += 1
            self._use(decoded, records)
            position = text.find(_RECORD_START, end)
        if found:
            self._report(f"line {self.line_number}: output that is not a record skipped")
        else:
            reason = str(error).split(":")[0]
            self._report(f"line {self.line_number}: not a record ({reason}): {text[:60]!r}")

    def _use(self, decoded: Any, records: list[Record]) -> None:
        if isinstance(decoded, dict) and decoded.get("type") == "header":
            schema = decoded.get("schema")
            if isinstance(schema, int) and not isinstance(schema, bool):
                self._refusing = schema > SCHEMA_VERSION
                self.schema = schema
                if self._refusing:
                    self._report(
                        f"line {self.line_number}: schema {schema} is newer than this "
                        f"fpexplorer reads ({SCHEMA_VERSION}): update fpexplorer to read "
                        "this run; its records are not read"
                    )
                    return
        if self._refusing:
            self.refused_records += 1
            return
        try:
            record = decode_record(decoded, self.schema)
        except NewerSchemaError:  # a header with an odd schema value
            self._refusing = True
            return
        except ValueError as error:
            self._report(f"line {self.line_number}: {error}")
            return
        if record is not None:
            records.append(record)

    def _report(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)
        else:
            self._dropped_problems += 1
            self.problems[-1] = f"... and {self._dropped_problems} more problems"


READ_CHUNK_BYTES = 1 << 20


class RunReader:
    """Reads a run log that may still be growing (a file tail) through a RecordStream.

    `read_new()` returns the records completed since the last call; `finish()` once the
    file will not grow any more. Problems (the stream's, and unreadable files) are in
    `problems`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.stream = RecordStream()
        self._offset = 0

    @property
    def problems(self) -> list[str]:
        return self.stream.problems

    @property
    def partial_line(self) -> bool:
        return self.stream.partial_line

    def read_new(self, max_bytes: int | None = None) -> list[Record]:
        """Records completed since the last call (reads at most `max_bytes` when given)."""
        records: list[Record] = []
        for chunk in self.chunks(max_bytes):
            records += self.stream.feed(chunk)
        return records

    def chunks(self, max_bytes: int | None = None) -> Iterator[bytes]:
        """The new bytes of the file, a chunk at a time (bounded memory)."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self._offset:
                    self.stream._report(f"{self.path.name} shrank: reading it again")
                    self._offset = 0
                    self.stream = RecordStream()
                handle.seek(self._offset)
                left = max_bytes
                while left is None or left > 0:
                    want = READ_CHUNK_BYTES if left is None else min(left, READ_CHUNK_BYTES)
                    chunk = handle.read(want)
                    if not chunk:
                        break
                    self._offset += len(chunk)
                    if left is not None:
                        left -= len(chunk)
                    yield chunk
        except OSError as error:
            self.stream._report(f"cannot read {self.path}: {error.strerror or error}")

    def finish(self) -> list[Record]:
        """Call when the file will not grow any more."""
        records = self.read_new()
        return records + self.stream.finish()


@dataclass(frozen=True, slots=True)
class Run:
    """A whole run log in memory: the header, the steps in order, the end, what was wrong.
    For small logs (tests, the selftest); `fpexplorer runs` streams instead."""

    path: Path
    header: HeaderRecord | None
    steps: tuple[StepRecord, ...]
    end: EndRecord | None
    problems: tuple[str, ...]

    @property
    def status(self) -> str:
        """The end record's status ("completed", "stopped", "failed"), or "incomplete"."""
        return self.end.status if self.end is not None else "incomplete"


def collect_run(path: str | os.PathLike[str], records: list[Record], problems: list[str]) -> Run:
    """Assemble records (in file order) into a Run, adding problems for misplaced records."""
    header: HeaderRecord | None = None
    end: EndRecord | None = None
    steps: list[StepRecord] = []
    found = list(problems)
    for record in records:
        if isinstance(record, HeaderRecord):
            if header is None and not steps:
                header = record
            else:
                found.append("a second header record ignored")
        elif isinstance(record, StepRecord):
            if end is not None:
                found.append(f"step {record.step} after the end record ignored")
                continue
            steps.append(record)
        elif end is None:
            end = record
        else:
            found.append("a second end record ignored")
    if header is None and (steps or end is not None):
        found.append("no header record: the run's settings are unknown")
    elif header is None and not found:
        found.append("the file holds no records")
    return Run(Path(path), header, tuple(steps), end, tuple(found))


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read a whole run log. Never raises: problems are listed in `Run.problems`."""
    reader = RunReader(path)
    records = reader.finish()
    return collect_run(path, records, reader.problems)
