"""The run log: JSON Lines written a line at a time, read incrementally. Torch-free.

Format (schema 1, documented in the README): a `header` record, one `step` record per
training step, an `end` record. Non-finite floats are written as the JSON strings "NaN",
"Infinity" and "-Infinity" so that strict JSON parsers can read the file; the typed records
here turn them back into floats (`.raw` keeps the line as decoded, strings included).

Reading never raises on a damaged file: `RunReader.problems` and `Run.problems` say what
was skipped and why. A torn last line (a job killed mid-write) is kept back while the
file may still grow and ignored at the end.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Union

SCHEMA_VERSION = 1

_NONFINITE_TO_TEXT = {math.inf: "Infinity", -math.inf: "-Infinity"}
_TEXT_TO_FLOAT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# A line longer than this is damage, not a record (keeps a garbage file from filling memory).
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_PROBLEMS = 200


# ---------------------------------------------------------------------------------------
# Encoding


def _encodable(value: Any) -> Any:
    """`value` with non-finite floats replaced by their JSON string spellings."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else _NONFINITE_TO_TEXT[value]
    if isinstance(value, dict):
        return {str(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(item) for item in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return _encodable(value.item())
    raise TypeError(f"cannot write {type(value).__name__} to a run log")


def encode_record(record: Mapping[str, Any]) -> str:
    """One record as one line of strict JSON (no newline)."""
    return json.dumps(_encodable(dict(record)), separators=(",", ":"), allow_nan=False)


def decode_float(value: Any) -> float:
    """A float from a JSON value: numbers, "NaN", "Infinity", "-Infinity". Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in _TEXT_TO_FLOAT:
        return _TEXT_TO_FLOAT[value]
    raise ValueError(f"expected a number, got {value!r}")


class RunWriter:
    """Writes records to a run log, one flushed line each; optionally echoes them to a stream.

    Each line goes to the file in a single unbuffered write, so a job killed at any moment
    leaves every earlier record intact and at most one torn last line.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, echo: IO[str] | None = None, exclusive: bool = False
    ) -> None:
        self.path = Path(path)
        self._file = open(self.path, "xb" if exclusive else "wb", buffering=0)
        self._echo = echo
        self.records_written = 0

    def write(self, record: Mapping[str, Any]) -> str:
        """Write one record; returns the line written (without its newline)."""
        line = encode_record(record)
        self._file.write((line + "\n").encode("utf-8"))
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
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class Histogram:
    """Counts of |x| by binade: `counts[i]` = number of finite non-zero x with
    floor(log2 |x|) == lo + i; plus exact zeros, infinities and NaNs."""

    lo: int
    counts: tuple[int, ...]
    zero: int
    inf: int
    nan: int
    dtype: str | None = None

    @property
    def total(self) -> int:
        return sum(self.counts) + self.zero + self.inf + self.nan

    @property
    def exponents(self) -> range:
        """floor(log2 |x|) of each bin."""
        return range(self.lo, self.lo + len(self.counts))

    @classmethod
    def from_json(cls, value: Any) -> Histogram:
        return cls(
            lo=int(value["lo"]),
            counts=tuple(int(c) for c in value["counts"]),
            zero=int(value.get("zero", 0)),
            inf=int(value.get("inf", 0)),
            nan=int(value.get("nan", 0)),
            # A name or nothing: anything else is damage, and must not reach code that
            # counts dtypes (a list there is unhashable).
            dtype=dtype if isinstance(dtype := value.get("dtype"), str) else None,
        )


@dataclass(frozen=True, slots=True)
class LayerStats:
    """Statistics of one module's gradients on a statistics step."""

    name: str
    grad_norm: float
    amax: float  # max |scaled gradient|
    headroom_log2: float | None  # log2(65504 / amax); None when amax == 0
    underflow_share: float  # share below FP16's smallest subnormal (2**-24)
    nonfinite: bool

    @classmethod
    def from_json(cls, value: Any) -> LayerStats:
        headroom = value.get("headroom_log2")
        return cls(
            name=str(value["name"]),
            grad_norm=decode_float(value.get("grad_norm", "NaN")),
            amax=decode_float(value.get("amax", "NaN")),
            headroom_log2=None if headroom is None else decode_float(headroom),
            underflow_share=decode_float(value.get("underflow_share", 0.0)),
            nonfinite=bool(value.get("nonfinite", False)),
        )


@dataclass(frozen=True, slots=True)
class FormatShares:
    """Shares of the current gradients that a format would flush, make subnormal or overflow."""

    underflow: float
    subnormal: float
    overflow: float

    @classmethod
    def from_json(cls, value: Any) -> FormatShares:
        return cls(
            underflow=decode_float(value["underflow"]),
            subnormal=decode_float(value["subnormal"]),
            overflow=decode_float(value["overflow"]),
        )


@dataclass(frozen=True, slots=True)
class LostUpdates:
    """Share of parameter updates lost to rounding: "actual" in pure-fp16, otherwise
    "fp16_would_lose" (what FP16 weights would have lost)."""

    share: float
    kind: str

    @classmethod
    def from_json(cls, value: Any) -> LostUpdates:
        return cls(share=decode_float(value["share"]), kind=str(value["kind"]))


@dataclass(frozen=True, slots=True)
class Memory:
    """Bytes by dtype of parameters, gradients, optimizer state and saved activations."""

    params: dict[str, int]
    grads: dict[str, int]
    optimizer: dict[str, int]
    activations: dict[str, int]
    peak_device: int | None

    @property
    def total(self) -> int:
        return sum(
            sum(part.values())
            for part in (self.params, self.grads, self.optimizer, self.activations)
        )

    @classmethod
    def from_json(cls, value: Any) -> Memory:
        def by_dtype(key: str) -> dict[str, int]:
            return {str(k): int(v) for k, v in (value.get(key) or {}).items()}

        peak = value.get("peak_device")
        return cls(
            params=by_dtype("params"),
            grads=by_dtype("grads"),
            optimizer=by_dtype("optimizer"),
            activations=by_dtype("activations"),
            peak_device=None if peak is None else int(peak),
        )


@dataclass(frozen=True, slots=True)
class HeaderRecord:
    schema: int
    config: dict[str, Any]
    device_type: str
    device_name: str
    params: int
    layers: tuple[str, ...]
    formats: dict[str, dict[str, float]]
    fpexplorer_version: str | None
    torch_version: str | None
    started: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def precision(self) -> str:
        return str(self.config.get("precision", ""))

    @property
    def task(self) -> str:
        return str(self.config.get("task", ""))


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    loss: float
    scale: float
    skipped: bool
    growth_tracker: int
    lr: float
    grad_norm: float
    steps_per_s: float
    time: float
    # Only on statistics steps:
    grad_hist: Histogram | None
    act_hist: Histogram | None
    act_zero_share: float | None
    layers: tuple[LayerStats, ...]
    first_nonfinite: str | None  # backward order: where the gradient overflow started
    first_nonfinite_forward: str | None  # forward order: the first module with an inf output
    format_shares: dict[str, FormatShares]
    lost_updates: LostUpdates | None
    memory: Memory | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def has_stats(self) -> bool:
        return self.grad_hist is not None


@dataclass(frozen=True, slots=True)
class EndRecord:
    status: str  # "completed" | "stopped" | "failed"
    error: str | None
    steps: int
    elapsed: float
    raw: dict[str, Any] = field(repr=False, compare=False)


Record = Union[HeaderRecord, StepRecord, EndRecord]  # noqa: UP007 (runtime alias on 3.10)
END_STATUSES = ("completed", "stopped", "failed")


def _optional(value: Any, convert: Any) -> Any:
    return None if value is None else convert(value)


def parse_record(line_or_dict: str | bytes | Mapping[str, Any]) -> Record | None:
    """A typed record from one line (or an already decoded dict).

    Returns None for a record of a type this version does not know (newer writers may add
    some). Raises ValueError when the line is not JSON or a known record is malformed.
    """
    if isinstance(line_or_dict, (str, bytes)):
        try:
            decoded = json.loads(line_or_dict)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"not valid JSON: {error}") from None
    else:
        decoded = dict(line_or_dict)
    if not isinstance(decoded, dict):
        raise ValueError(f"a record is a JSON object, got {type(decoded).__name__}")
    kind = decoded.get("type")
    try:
        if kind == "step":
            return _parse_step(decoded)
        if kind == "header":
            return _parse_header(decoded)
        if kind == "end":
            return _parse_end(decoded)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        what = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise ValueError(f"malformed {kind} record: {what}") from None
    if kind is None:
        raise ValueError('a record without a "type"')
    return None


def _parse_header(raw: dict[str, Any]) -> HeaderRecord:
    schema = int(raw["schema"])
    if schema > SCHEMA_VERSION:
        raise ValueError(f"schema {schema} is newer than this reader ({SCHEMA_VERSION})")
    device = raw.get("device") or {}
    model = raw.get("model") or {}
    formats = {
        str(name): {str(k): decode_float(v) for k, v in info.items()}
        for name, info in (raw.get("formats") or {}).items()
    }
    config = raw.get("config")
    if not isinstance(config, dict):
        raise ValueError('"config" must be an object')
    return HeaderRecord(
        schema=schema,
        config=config,
        device_type=str(device.get("type", "")),
        device_name=str(device.get("name", "")),
        params=int(model.get("params", 0)),
        layers=tuple(str(name) for name in model.get("layers", ())),
        formats=formats,
        fpexplorer_version=_optional(raw.get("fpexplorer"), str),
        torch_version=_optional(raw.get("torch"), str),
        started=_optional(raw.get("started"), str),
        raw=raw,
    )


def _parse_step(raw: dict[str, Any]) -> StepRecord:
    act_zero = raw.get("act_zero_share")
    return StepRecord(
        step=int(raw["step"]),
        loss=decode_float(raw["loss"]),
        scale=decode_float(raw.get("scale", 1.0)),
        skipped=bool(raw.get("skipped", False)),
        growth_tracker=int(raw.get("growth_tracker", 0)),
        lr=decode_float(raw.get("lr", "NaN")),
        grad_norm=decode_float(raw.get("grad_norm", "NaN")),
        steps_per_s=decode_float(raw.get("steps_per_s", "NaN")),
        time=decode_float(raw.get("time", "NaN")),
        grad_hist=_optional(raw.get("grad_hist"), Histogram.from_json),
        act_hist=_optional(raw.get("act_hist"), Histogram.from_json),
        act_zero_share=None if act_zero is None else decode_float(act_zero),
        layers=tuple(LayerStats.from_json(layer) for layer in raw.get("layers") or ()),
        first_nonfinite=_optional(raw.get("first_nonfinite"), str),
        first_nonfinite_forward=_optional(raw.get("first_nonfinite_forward"), str),
        format_shares={
            str(name): FormatShares.from_json(shares)
            for name, shares in (raw.get("format_shares") or {}).items()
        },
        lost_updates=_optional(raw.get("lost_updates"), LostUpdates.from_json),
        memory=_optional(raw.get("memory"), Memory.from_json),
        raw=raw,
    )


def _parse_end(raw: dict[str, Any]) -> EndRecord:
    status = str(raw["status"])
    if status not in END_STATUSES:
        raise ValueError(f"unknown end status {status!r}")
    return EndRecord(
        status=status,
        error=_optional(raw.get("error"), str),
        steps=int(raw.get("steps", 0)),
        elapsed=decode_float(raw.get("elapsed", "NaN")),
        raw=raw,
    )


# ---------------------------------------------------------------------------------------
# Reading


class RunReader:
    """Reads a run log that may still be growing.

    `read_new()` returns the records completed since the last call; a last line without
    its newline is kept until the newline arrives. Damage is reported in `problems`
    (a list of one-line messages), never raised.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.problems: list[str] = []
        self._offset = 0
        self._pending = b""
        self._line_number = 0
        self._dropped_problems = 0

    def read_new(self) -> list[Record]:
        """Records completed since the last call (possibly none)."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self._offset:
                    self._report(f"{self.path.name} shrank: reading it again from the start")
                    self._offset, self._pending, self._line_number = 0, b"", 0
                handle.seek(self._offset)
                data = handle.read()
        except OSError as error:
            self._report(f"cannot read {self.path}: {error.strerror or error}")
            return []
        self._offset += len(data)
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE_BYTES:
            self._line_number += 1
            self._report(f"line {self._line_number}: longer than {MAX_LINE_BYTES} bytes, skipped")
            self._pending = b""
        records: list[Record] = []
        for line in lines:
            self._line_number += 1
            record = self._parse_line(line)
            if record is not None:
                records.append(record)
        return records

    @property
    def partial_line(self) -> bool:
        """True when the file ends in a line without its newline (being written, or torn)."""
        return bool(self._pending.strip())

    def finish(self) -> list[Record]:
        """Call when the file will not grow any more: a complete, parseable last line without
        a newline is accepted; a torn one is ignored (and reported as such)."""
        records = self.read_new()
        if self._pending.strip():
            self._line_number += 1
            try:
                record = parse_record(self._pending)
            except ValueError:
                self._report(f"line {self._line_number}: torn last line ignored")
                record = None
            if record is not None:
                records.append(record)
        self._pending = b""
        return records

    def _parse_line(self, line: bytes) -> Record | None:
        if not line.strip():
            return None
        try:
            return parse_record(line)
        except ValueError as error:
            self._report(f"line {self._line_number}: {error}")
            return None

    def _report(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)
        else:
            self._dropped_problems += 1
            self.problems[-1] = f"... and {self._dropped_problems} more problems"


@dataclass(frozen=True, slots=True)
class Run:
    """A whole run log: the header, the step records in order, the end record, what was wrong."""

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
        else:
            if end is None:
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
    records = reader.read_new()
    records += reader.finish()
    return collect_run(path, records, reader.problems)
