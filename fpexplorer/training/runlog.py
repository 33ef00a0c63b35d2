"""The run log on disk and on the wire: writing records, reading them back. Torch-free.

What a record holds is `fpexplorer.training.records` (the contract); this module moves
records as JSON Lines:

- `RunWriter` writes typed records to a file as JSON lines, holding an exclusive lock
  (`fcntl.flock`) so that a second writer on the same file is refused instead of
  interleaving its lines; it may also send each line to a stream channel (a pipe). Plain
  step records (no statistics, not skipped) are batched for at most `flush_interval`
  (50 ms); every other record is written at once, with everything before it.
- `RecordStream` is the one reader: bytes in (any chunking), typed records out. It holds
  back a line until its newline arrives, resynchronises on the next whole record after
  garbage (bytes of a user's print glued to a record), upgrades older schemas and refuses
  newer ones. Everything that reads records goes through it: `RunReader` (a file that may
  still grow), the GUI's replay and job reader, and `fpexplorer runs`.

Reading never raises on a damaged log: `problems` says what was skipped and why.
"""

from __future__ import annotations

import atexit
import codecs
import dataclasses
import json
import os
import threading
import time
import types
import typing
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fpexplorer.training.records import (
    END_STATUSES,
    RECORD_TYPES,
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
    record_fields,
    record_kind,
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
    "NotUtf8Error",
    "Record",
    "RecordStream",
    "Run",
    "RunAssembly",
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


# A plain step record waits at most this long (seconds) before it reaches the file and the
# stream: a live panel sees it that late at worst, and a killed job loses at most the
# plain steps of this window.
FLUSH_INTERVAL = 0.05


# `json.dumps` of a str, without its Python layers (its encoder calls this very function).
_json_string = json.encoder.encode_basestring_ascii

_SPELLED = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _float_text(value: Any) -> str:
    """A float as `json.dumps` writes it (its repr), non-finite ones spelled as the codec
    spells them (repr writes them nan, inf, -inf)."""
    text = float.__repr__(float(value))
    return _SPELLED.get(text, text)


def _scalar_text(hint: Any) -> Callable[[Any], str] | None:
    """How one scalar field is written (the codec's rule, as text); None when not a scalar."""
    if hint is float:
        return _float_text
    if hint is bool:  # before int: a bool is an int
        return lambda value: "true" if value else "false"
    if hint is int:
        return lambda value: int.__repr__(int(value))
    if hint is str:
        return lambda value: _json_string(str(value))
    return None


# "[%d,%d,...]" by length: a histogram's counts written by one `%` (half the time of a join
# over each int's repr). Kept up to this length (float32's binades, -149..127, are 277;
# every length up to it, about 400 kB); longer counts are joined.
_INT_LIST_FORMAT_MAX = 512
_INT_LIST_FORMATS: dict[int, str] = {}


def _int_list_text(values: Any) -> str:
    """A tuple of ints (a histogram's counts) as the codec writes it: one join over the
    ints' own repr (a bool is written as 1 or 0, as `int()` makes it); values that are not
    ints (numpy integers, floats) go through `int()` one by one, as the codec takes them.

    A tuple goes through `%d` first, which is each of these in C: an int (bool and other
    subclasses included) as its own value, anything else as `int()` of it (CPython's `%d`
    calls the same `PyNumber_Long` as `int()`); where `%d` refuses a value, the rest
    below writes it or raises the codec's error."""
    if type(values) is tuple:
        size = len(values)
        form = _INT_LIST_FORMATS.get(size)
        if form is None and size <= _INT_LIST_FORMAT_MAX:
            form = _INT_LIST_FORMATS[size] = "[" + ",".join(["%d"] * size) + "]"
        if form is not None:
            try:
                return form % values
            except (TypeError, ValueError, OverflowError):
                pass
    try:
        return "[" + ",".join(map(int.__repr__, values)) + "]"
    except TypeError:
        return "[" + ",".join([int.__repr__(int(value)) for value in values]) + "]"


def _free_json_text(value: Any) -> str:
    """A free-form (`Any`) field, as the codec writes it."""
    return json.dumps(encode_json_value(value), separators=(",", ":"), allow_nan=False)


def _text_of(hint: Any) -> Callable[[Any], str] | None:
    """How a field of this type hint is written, as text (the codec's rule, `_codec_of`);
    None for a shape the codec does not know (then `encode_line` writes the record)."""
    if hint is Any:
        return _free_json_text
    scalar = _scalar_text(hint)
    if scalar is not None:
        return scalar
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _text_of(next(a for a in args if a is not type(None)))
        if inner is None:
            return None
        present = inner
        return lambda value: "null" if value is None else present(value)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] is int:
            return _int_list_text
        item = _text_of(args[0])
        if item is None:
            return None
        each = item
        return lambda values: "[" + ",".join([each(value) for value in values]) + "]"
    if origin in (dict, Mapping) and args and args[0] is str:
        if args[1] is int:
            return _int_mapping_text
        item = _text_of(args[1])
        if item is None:
            return None
        return _mapping_text(item)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        nested = _TextEncoder(hint)
        return nested.encode if nested.usable else None
    return None


class _NotText(Exception):
    """A value the text encoder does not write as the codec would: `fast_encode_line` hands
    the record to the codec, which writes it or refuses it."""


def _mapping_text(member: Callable[[Any], str]) -> Callable[[Any], str]:
    def text(mapping: Any) -> str:
        parts = []
        for key, value in mapping.items():
            if type(key) is not str:  # the codec's str(key) may make two keys one
                raise _NotText
            parts.append(_json_string(key) + ":" + member(value))
        return "{" + ",".join(parts) + "}"

    return text


def _int_mapping_text(mapping: Any) -> str:
    """`_mapping_text` of ints (a Memory's bytes by dtype) with no call per item: an int
    written as f-string text is its repr; anything else as `int.__repr__(int(value))`."""
    parts = []
    for key, value in mapping.items():
        if type(key) is not str:  # the codec's str(key) may make two keys one
            raise _NotText
        text = value if type(value) is int else int.__repr__(int(value))
        parts.append(f"{_json_string(key)}:{text}")
    return "{" + ",".join(parts) + "}"


class _TextEncoder:
    """`encode_line` written straight to text, nested records, lists and mappings included,
    a writer per field: about three fifths of the generic codec's cost (a dict per record,
    then `json.dumps`) for a plain step; a statistics step's record cost about as much
    either way (36 vs 41 us hot on the built-in mlp, 87 vs 89 on the transformer). Records
    are written by the encoder generated for their class (`_compile_text`, about half of
    this), which comes here for the values it does not write itself (non-finite floats,
    numpy numbers, None where a value goes). Derived from the dataclass like the codec,
    field by field from the type hints (an added field needs nothing here); a class with a
    field of a shape the codec does not know is not `usable` (`encode_line` writes it).
    `tests/training/test_runlog_writer.py` holds it equal to `encode_line`."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        self.cls = cls
        kind = record_kind(cls)  # top-level records only: "type" leads the line
        self.opening = None if kind is None else f'"type":{json.dumps(kind)}'
        # (attribute, '"key":', writer, left out when None); a None kept is the writer's:
        # null for an optional field, the codec's value or error for any other.
        self.fields: list[tuple[str, str, Callable[[Any], str], bool]] = []
        self.usable = True
        for item, key in zip(dataclasses.fields(cls), record_fields(cls), strict=True):
            text = _text_of(hints[item.name])
            if text is None:
                self.usable = False
                continue
            self.fields.append((item.name, json.dumps(key) + ":", text, item.default is None))

    def encode(self, record: Any) -> str:
        """The record's line. Raises `_NotText`, TypeError, ValueError or AttributeError for
        a value its field's type hint does not describe (`fast_encode_line` then asks the
        codec, which encodes by the value's own type)."""
        if type(record) is not self.cls:  # a nested value of another type, None included
            raise _NotText
        parts = [] if self.opening is None else [self.opening]
        for name, key, text, omit_none in self.fields:
            value = getattr(record, name)
            if value is None and omit_none:
                continue
            parts.append(key + text(value))
        return "{" + ",".join(parts) + "}"


_TEXT_ENCODERS: dict[type, _TextEncoder | None] = {}


def _text_encoder(cls: type) -> _TextEncoder | None:
    """The class's `_TextEncoder`, built once; None where the codec writes the class."""
    encoder = _TEXT_ENCODERS.get(cls, False)
    if encoder is False:
        built = _TextEncoder(cls)
        encoder = _TEXT_ENCODERS[cls] = built if built.usable else None
    return encoder  # type: ignore[return-value]


_COMPILED: dict[type, Callable[[Any], str] | None] = {}


def _compiled_text(cls: type) -> Callable[[Any], str] | None:
    """The class's generated encoder (`_compile_text`), built once; None where there is
    none (the class has no `_TextEncoder`, or a field of a shape it does not write)."""
    if cls in _COMPILED:
        return _COMPILED[cls]
    generic = _text_encoder(cls)
    _COMPILED[cls] = None  # while it is built: a record that held itself would stay generic
    if generic is not None:
        _COMPILED[cls] = _compile_text(cls, generic, generic.encode)
    return _COMPILED[cls]


def _tuple_item(hint: Any) -> Any:
    """X of `tuple[X, ...]`; None for any other hint."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def _compile_text(
    cls: type, generic: _TextEncoder, fallback: Callable[[Any], str]
) -> Callable[[Any], str] | None:
    """`generic.encode` (the class's `_TextEncoder`) as one function generated for the class
    (as dataclasses generates `__init__`: its source built from the fields, `exec`-ed
    once), for the values a record nearly always holds: finite Python floats, Python ints,
    bools and strings, nested records of their declared class. Each is written as the
    `_TextEncoder` writes it (a float's repr, an int's repr, `json.dumps` of a string), all
    in one f-string (one for each way its fields left out when None can be, where they are
    few): no call per field, no list, no join. About half the `_TextEncoder`'s time on a
    statistics step's record, the float reprs left as the most of it.

    Any other value (a non-finite float, which the codec spells out; a numpy number; None
    where the field takes none) sends the record to `fallback(record)`, the class's
    `_TextEncoder` (the record, not the line: a nested record holding an inf goes there,
    its parent stays here). Raises `_NotText` for a value of another class where a record
    goes, and TypeError or AttributeError where a list or mapping is not one
    (`fast_encode_line` then asks the `_TextEncoder`, then the codec). None where a field
    has a shape the `_TextEncoder` does not write. `tests/training/test_runlog_encode.py`
    holds it equal to the `_TextEncoder` and the codec."""
    hints = typing.get_type_hints(cls)
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_fallback": fallback,
        "_NotText": _NotText,
        "_string": _json_string,
        "_join": ",".join,
        "_bools": ("false", "true"),
    }
    reads: list[str] = []  # each field's value into a local: v0, v1, ...
    unusual: list[str] = []  # a value none of the f-string's fields writes as the codec
    finite: list[str] = []  # floats always written: their sum is finite when each is
    nulls: list[str] = []  # the text of each optional field written as null when None
    # Each field as f-string text ('"key":' and its value, no comma), with the local that
    # holds its value when the field is left out when None (else None).
    fields: list[tuple[str, str | None]] = []
    for index, (name, key, writer, omit_none) in enumerate(generic.fields):
        value = f"v{index}"
        reads.append(f"    {value} = _record.{name}")
        hint = hints[name]
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and (
            len(args) == 2 and type(None) in args
        )
        inner = next(a for a in args if a is not type(None)) if optional else hint
        item = _tuple_item(inner)
        text: str  # the field's value as f-string text (the value is not None there)
        check: str | None  # true for a value `text` does not write as the codec does
        if inner is float:
            text, check = f"{{{value}!r}}", f"type({value}) is not float"
        elif inner is bool:
            text, check = f"{{_bools[{value}]}}", f"type({value}) is not bool"
        elif inner is int:
            text, check = f"{{{value}}}", f"type({value}) is not int"
        elif inner is str:
            text, check = f"{{_string({value})}}", f"type({value}) is not str"
        elif isinstance(inner, type) and dataclasses.is_dataclass(inner):
            # The nested encoder checks the value's class itself (raises _NotText).
            namespace[f"_w{index}"] = _compiled_text(inner) or _text_of(inner)
            text, check = f"{{_w{index}({value})}}", None
        elif isinstance(item, type) and dataclasses.is_dataclass(item):
            # A tuple of records (a step's layers): each by its class's encoder.
            namespace[f"_w{index}"] = _compiled_text(item) or _text_of(item)
            text, check = f"[{{_join(map(_w{index}, {value}))}}]", None
        else:  # lists of scalars, mappings, free-form JSON: the _TextEncoder's own writer
            namespace[f"_w{index}"] = _text_of(inner) if optional else writer
            text, check = f"{{_w{index}({value})}}", None
        if namespace.get(f"_w{index}", True) is None:
            return None
        written = key.replace("{", "{{").replace("}", "}}") + text
        if omit_none or optional:
            if check is not None:
                if inner is float:
                    check = f"{check} or {value} - {value} != 0.0"
                unusual.append(f"({value} is not None and ({check}))")
        else:
            if check is not None:
                unusual.append(check)
            if inner is float:
                finite.append(value)
        if omit_none:
            fields.append((written, value))
        elif optional:  # made apart: its text or null
            nulls.append(f"    n{index} = {key + 'null'!r} if {value} is None else f{written!r}")
            fields.append((f"{{n{index}}}", None))
        else:
            fields.append((written, None))
    lines = ["def encode(_record):", "    if type(_record) is not _cls:", "        raise _NotText"]
    lines += reads
    if unusual:
        lines += [f"    if {' or '.join(unusual)}:", "        return _fallback(_record)"]
    if finite:
        # x - x is 0.0 for every finite x, NaN for inf and NaN (a sum that overflows sends
        # finite values to the fallback, which writes them right).
        lines += [
            f"    total = {' + '.join(finite)}",
            "    if total - total != 0.0:",
            "        return _fallback(_record)",
        ]
    lines += nulls
    opening = [] if generic.opening is None else [generic.opening]  # "type" first
    omissible = [local for _, local in fields if local is not None]
    if len(omissible) <= _MOST_OMISSIBLE_VARIANTS:
        # An f-string for each way the fields left out when None can be (LayerStats, its
        # grad_norm and headroom_log2: four): none of them made apart.
        lines += _variants(opening, fields, omissible, frozenset(), "    ")
    else:
        # Each field left out when None made apart: "" or a comma and its text.
        for written, local in fields:
            if local is not None:
                lines.append(f"    p{local} = '' if {local} is None else f{',' + written!r}")
        parts = [text.replace("{", "{{").replace("}", "}}") for text in opening]
        if parts or fields[0][1] is None:  # a field always written first
            for written, local in fields:
                parts.append(
                    f"{{p{local}}}" if local is not None else ("," if parts else "") + written
                )
            lines.append(f"    return f{'{{' + ''.join(parts) + '}}'!r}")
        else:
            # The first field may be left out, then the next (StepStats: grad_hist,
            # act_hist): each after a comma, the first comma dropped.
            body = "".join(
                f"{{p{local}}}" if local is not None else "," + written for written, local in fields
            )
            lines += [f"    body = f{body!r}", "    return '{' + body[1:] + '}'"]
    # Generated from the dataclass: attribute names are identifiers, every other text
    # (the JSON keys, the "type") is a literal made by repr().
    exec("\n".join(lines), namespace)
    encode: Callable[[Any], str] = namespace["encode"]
    encode.__qualname__ = f"_compile_text.<{cls.__name__}>"
    return encode


# Records with at most this many fields left out when None get an f-string for each way
# they can be (2**n of them); others make each such field's text apart.
_MOST_OMISSIBLE_VARIANTS = 2


def _variants(
    opening: list[str],
    fields: list[tuple[str, str | None]],
    omissible: list[str],
    left_out: frozenset[str],
    indent: str,
) -> list[str]:
    """The statements returning the record's text, one f-string for each combination of
    the `omissible` fields (their locals) being None: `if v is None:` (without it), then
    with it. `left_out`: those already known to be None."""
    if omissible:
        first, rest = omissible[0], omissible[1:]
        return [
            f"{indent}if {first} is None:",
            *_variants(opening, fields, rest, left_out | {first}, indent + "    "),
            *_variants(opening, fields, rest, left_out, indent),
        ]
    literal = [text.replace("{", "{{").replace("}", "}}") for text in opening]
    present = [written for written, value in fields if value not in left_out]
    return [f"{indent}return f{'{{' + ','.join(literal + present) + '}}'!r}"]


def fast_encode_line(record: Record) -> str:
    """`encode_line(record)`, the same text, written without the codec's dicts."""
    cls = type(record)
    try:
        compiled = _COMPILED[cls]
    except KeyError:
        compiled = _compiled_text(cls)
    if compiled is not None:
        try:
            return compiled(record)
        except (_NotText, TypeError, ValueError, AttributeError):
            pass  # the _TextEncoder's turn: it writes such values, or refuses them
    encoder = _text_encoder(cls)
    if encoder is not None:
        try:
            return encoder.encode(record)
        except (_NotText, TypeError, ValueError, AttributeError):
            # A value its field cannot hold (None for a float, a key that is not a string):
            # the codec writes it as it does, or raises its own error for it (a line of
            # `null` where a number goes would be refused by every reader of the log).
            pass
    return encode_line(record)


def _typed_record(record: Record | Mapping[str, Any]) -> Record:
    """A record as given, or a plain dict read as schema 1's layout (the monitor's old
    hand-built dicts)."""
    if not isinstance(record, Mapping):
        if not isinstance(record, tuple(RECORD_TYPES.values())):
            # Was a TypeError from dataclasses.fields, or from the timer thread's encoding.
            raise TypeError(
                "RunWriter writes a HeaderRecord, StepRecord or EndRecord, not "
                f"{'None' if record is None else 'a ' + type(record).__name__}"
            )
        record_kind(type(record))  # a subclass of one: TypeError where its line cannot say it
        return record
    typed = from_schema1_dict(record)
    if typed is None:
        raise ValueError(f"not a record type: {record.get('type')!r}")
    return typed


# Writers still open when the interpreter exits: what they hold is written then (a script
# that never closes its writer still gets every record it wrote; a writer that has held
# records stays alive until then anyway, its timer thread refers to it).
_OPEN_WRITERS: weakref.WeakSet[RunWriter] = weakref.WeakSet()


@atexit.register
def _flush_open_writers() -> None:
    for writer in list(_OPEN_WRITERS):
        try:
            writer.flush()
        except (OSError, ValueError):
            pass


class RunWriter:
    """Writes records to a run log as JSON lines; optionally copies each line to `echo` (a
    text stream, e.g. stdout for `--stream`) and/or `channel` (a binary file, e.g. the write
    end of a pipe to the panel).

    Plain step records (no statistics, not skipped) are held for at most `flush_interval`
    seconds (default 50 ms), then written together: a fast loop pays one system call per
    window instead of one per step. Any other record (the header, a statistics step, a
    skipped step, the end) is written at once, with everything held before it, and so is
    everything at `flush()`, `close()` and the interpreter's exit; a background timer writes
    what a stalled loop left held. A job killed at any moment (SIGKILL) therefore loses at
    most the plain steps of the last `flush_interval`, and leaves every earlier record
    intact and at most one torn last line (each batch is one unbuffered `write`).
    `flush_interval=0` writes every record at once.

    The file is locked for as long as the writer is open: a second writer raises
    `RunLogLocked` before touching the file (it is truncated only once the lock is held).

    When `echo` or `channel` cannot be written any more (its reader went away) the file
    still gets every record, and `on_stream_lost` (if given) is called once, possibly from
    the writer's timer thread: a job streaming to a panel that has gone can stop itself
    instead of training on with nobody to see it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        echo: IO[str] | None = None,
        channel: IO[bytes] | None = None,
        exclusive: bool = False,
        flush_interval: float = FLUSH_INTERVAL,
        on_stream_lost: Callable[[], None] | None = None,
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
        self._on_stream_lost = on_stream_lost
        self.records_written = 0
        self.flush_interval = flush_interval
        # Not yet written: lines (with their newline), and plain step records (encoded when
        # written).
        self._held: list[str | Record] = []
        self._held_since = 0.0
        self._lock = threading.Lock()
        self._timer: threading.Thread | None = None
        self._wake = threading.Event()  # something is held: the timer starts its window
        self._closing = threading.Event()
        self._timer_error: OSError | ValueError | None = None
        _OPEN_WRITERS.add(self)

    def write(self, record: Record | Mapping[str, Any]) -> None:
        """Write one record (or hold it, see the class).

        A plain dict is accepted for now, read as schema 1's layout (the monitor's
        hand-built dicts) and written as the current schema; build records instead.
        """
        typed = record if type(record) is StepRecord else _typed_record(record)  # fast first
        held: str | Record = typed
        plain = isinstance(typed, StepRecord) and typed.stats is None and not typed.skipped
        if not plain or self.flush_interval <= 0:
            held = fast_encode_line(typed) + "\n"
        with self._lock:
            if self._file.closed:
                raise ValueError("write to a closed RunWriter")
            if self._timer_error is not None:
                self._raise_timer_error()
            # A plain step is held as the record itself and encoded with the others when
            # the window is written: one tight loop over the same code, a fraction of the
            # cost of encoding between two training steps (measured in bench_monitor).
            self._held.append(held)
            self.records_written += 1
            if isinstance(held, str):
                self._flush_held()
            elif len(self._held) == 1:
                self._held_since = time.monotonic()
                self._start_timer()
            elif time.monotonic() - self._held_since >= self.flush_interval:
                self._flush_held()

    def flush(self) -> None:
        """Write every held record now."""
        with self._lock:
            if not self._file.closed:
                self._flush_held()
                self._raise_timer_error()

    def _raise_timer_error(self) -> None:
        error, self._timer_error = self._timer_error, None
        if error is not None:
            raise error

    def _flush_held(self) -> None:
        """Write the held lines: one write to the file, one to each stream (lock held)."""
        if not self._held:
            return
        held, self._held = self._held, []
        lines: list[str] = []
        unwritable: ValueError | None = None
        for item in held:
            if isinstance(item, str):
                lines.append(item)
                continue
            try:
                lines.append(fast_encode_line(item) + "\n")
            except (TypeError, ValueError, OverflowError) as error:
                # A value its field cannot hold (OverflowError: int(inf), float(10**400)).
                # Encoded late: the records around it are still written, and the error
                # reaches the writer's caller (at once, or at its next write from the timer).
                unwritable = unwritable or ValueError(f"a step record cannot be written: {error}")
        text = "".join(lines)
        data = text.encode("utf-8")
        self._file.write(data)
        if self._channel is not None:
            try:
                self._channel.write(data)
                self._channel.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._channel = None  # the reader went away; the file keeps every record
                self._stream_lost()
        if self._echo is not None:
            try:
                self._echo.write(text)
                self._echo.flush()
            except (BrokenPipeError, ValueError, OSError):
                # The reader of the stream went away (e.g. the window closed): the file
                # still receives every record, so the run is not lost.
                self._echo = None
                self._stream_lost()
        if unwritable is not None:
            raise unwritable

    def _stream_lost(self) -> None:
        callback, self._on_stream_lost = self._on_stream_lost, None
        if callback is not None:
            callback()

    def _start_timer(self) -> None:
        """Wake the background writer (started on first use) for a new window."""
        if self._timer is None:
            self._timer = threading.Thread(
                target=self._run_timer, name=f"RunWriter {self.path.name}", daemon=True
            )
            self._timer.start()
        self._wake.set()

    def _run_timer(self) -> None:
        """Write what was held once its window has passed, if no later write did it."""
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                if self._closing.is_set():
                    return
                with self._lock:
                    if self._file.closed:
                        return
                    if not self._held:
                        break
                    remaining = self._held_since + self.flush_interval - time.monotonic()
                    if remaining <= 0:
                        try:
                            self._flush_held()
                        except (OSError, ValueError) as error:  # raised to the next write()
                            self._timer_error = error
                        break
                self._closing.wait(remaining)

    def close(self) -> None:
        """Write what is held, stop the timer, close the file (releasing the lock)."""
        self._closing.set()
        self._wake.set()
        try:
            with self._lock:
                if not self._file.closed:
                    self._flush_held()
                    self._raise_timer_error()
        finally:
            if self._timer is not None and self._timer is not threading.current_thread():
                self._timer.join()
            self._file.close()  # closing the descriptor releases the lock
            _OPEN_WRITERS.discard(self)
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
        decoded = _loads_utf8(line) if isinstance(line, bytes) else json.loads(line)
    except ValueError as error:  # JSONDecodeError and NotUtf8Error alike
        raise ValueError(f"not valid JSON: {error}") from None
    return decode_record(decoded, schema)


_JSON_DECODER = json.JSONDecoder()
_JSON_WHITESPACE = " \t\n\r"  # what json.loads allows around a value


def _loads(line: bytes) -> Any:
    """`json.loads(line)` (the same value; the same errors, but for a line that is not
    UTF-8: `NotUtf8Error`), faster for a record's line.

    `json.loads` of bytes first guesses the encoding from the first bytes and matches
    whitespace with regular expressions: a third of its time on a 200-byte step line. A
    line that opens with `{` is UTF-8 (a UTF-16/32 text would have a zero byte next or
    a BOM first, and then does not parse here): decoded as `json.loads` decodes it and
    parsed with the same decoder; anything else, or any error, goes to `_loads_utf8`."""
    if line[:1] == b"{":
        try:
            text = line.decode("utf-8", "surrogatepass")
            value, end = _JSON_DECODER.raw_decode(text)
        except ValueError:
            return _loads_utf8(line)  # raises its own error
        if end == len(text) or not text[end:].strip(_JSON_WHITESPACE):
            return value
    return _loads_utf8(line)


class NotUtf8Error(ValueError):
    """A line that is not UTF-8 text (a run log is UTF-8 JSON Lines)."""

    def __str__(self) -> str:
        return "not UTF-8 text"


def _loads_utf8(line: bytes) -> Any:
    """`json.loads` of a line read as UTF-8, a UTF-8 byte order mark allowed first (as
    `json.loads` of bytes allows it). `json.loads` of bytes guesses the encoding from the
    NUL bytes in the first four: a binary line was "not a record ('utf-32-be' codec can't
    decode...)", an encoding the file never claimed; it is "not UTF-8 text" now."""
    if line[:3] == codecs.BOM_UTF8:
        line = line[3:]
    try:
        text = line.decode("utf-8", "surrogatepass")  # as json.loads decodes UTF-8
    except UnicodeDecodeError:
        raise NotUtf8Error from None
    return json.loads(text)


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
        self.refused_schema: int | None = None  # the first newer schema met, if any
        # Byte offset (from the first byte fed) of the line each record of the last
        # feed()/finish() came from: where to seek to read a record again.
        self.offsets: list[int] = []
        self._line_start = 0
        # The line so far, extended in place: a long line arriving in small pieces (the
        # panel reads 16 KiB at a time) was copied whole for every piece, quadratic: a
        # 60 MB line took over a minute of CPU.
        self._pending = bytearray()
        self._discarding = False  # inside an over-long line: drop up to its newline
        self._refusing = False
        self.problem_count = 0  # every problem reported, also those past MAX_PROBLEMS
        # The input ended in a line that does not parse: what a job killed mid-write leaves
        # (RunWriter writes each batch at once), so a summary can tell it from damage.
        self.torn_last_line: str | None = None  # its problem line, as reported
        # Where the records stop being one run's, said here, where the line is known; the
        # readers that assemble a run (`collect_run`, `summary.RunSummarizer`, the panel's
        # `RunModel`) apply the same rules to the same records and say nothing more:
        # - a step whose number is not above the step before it (before an end record): the
        #   log holds a second run (two logs concatenated) or a repeat; that step and the
        #   steps and end after it are not the run's;
        # - a first header after step records: not the run's header (whose settings it
        #   may not be), and no "no header record" besides.
        self.step_records = 0  # step records read (a header after some is not the run's)
        self._header_read = False
        # The step number of the step record before (below any step before the first),
        # until one is out of order.
        self._last_step = -(2**63)
        self._watching_steps = True  # until an end record or the first step out of order

    @property
    def partial_line(self) -> bool:
        """True when the input so far ends in a line without its newline."""
        return bool(self._pending.strip())

    def feed(self, data: bytes) -> list[Record]:
        """The records completed by `data` (possibly none)."""
        if isinstance(data, str):  # was "must be str or None, not bytes", from inside split
            raise TypeError("RecordStream.feed takes bytes (a file opened 'rb', or text.encode())")
        base = self.bytes_fed
        self.bytes_fed += len(data)
        records: list[Record] = []
        offsets: list[int] = []
        self.offsets = offsets
        # One split in C rather than a find() and a slice per line: the chunk's lines and,
        # last, what follows its last newline (b"" when it ends with one).
        pieces = data.split(b"\n")
        rest = pieces.pop()
        position = base
        for piece in pieces:
            position += len(piece) + 1
            line_start, self._line_start = self._line_start, position
            if self._discarding:
                self._discarding = False
                self._pending.clear()
                continue
            if self._pending:
                line = bytes(self._pending + piece)
                self._pending.clear()
            else:
                line = piece
            self.line_number += 1
            if not line or line.isspace():  # (strip() made a copy of every line)
                continue
            before = len(records)
            try:
                decoded = _loads(line)
            except ValueError as error:
                self._resynchronise(line, error, records)
            else:
                self._use(decoded, records)
            if len(records) > before:
                offsets += [line_start] * (len(records) - before)
        if not self._discarding:
            self._pending += rest
            if len(self._pending) > self.max_line_bytes:
                self.line_number += 1
                self._report(f"line {self.line_number}: longer than {self.max_line_bytes} bytes")
                self._pending.clear()
                self._discarding = True
        return records

    def finish(self) -> list[Record]:
        """End of input: a whole last line without its newline is accepted, a torn one
        reported. The stream may be fed again afterwards (a file that grew)."""
        records: list[Record] = []
        self.offsets = []
        if self._pending.strip():
            self.line_number += 1
            line, self._pending = bytes(self._pending), bytearray()
            try:
                decoded = _loads(line)
            except ValueError as error:
                if not line.lstrip().startswith(b"{"):
                    # Not the start of a record cut short (RunWriter's lines begin with
                    # "{"): garbage, as anywhere else (a binary file with no newline).
                    self._resynchronise(line, error, records)
                    self.offsets = [self._line_start] * len(records)
                else:
                    # Listed even past MAX_PROBLEMS (one line at most): a reader that knows
                    # the run was killed takes it out again.
                    self.torn_last_line = f"line {self.line_number}: torn last line ignored"
                    self.problem_count += 1
                    self.problems.append(self.torn_last_line)
            else:
                self._use(decoded, records)
                self.offsets = [self._line_start] * len(records)
        self._pending.clear()
        self._line_start = self.bytes_fed
        self._discarding = False
        if self.refused_records:
            self._report(
                f"{self.refused_records} record(s) of schema {self.schema} not read "
                f"(this fpexplorer reads schema {SCHEMA_VERSION} and older)"
            )
            self.refused_records = 0
        return records

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
                    if self.refused_schema is None:
                        self.refused_schema = schema
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
        if record is None:
            return
        records.append(record)
        # One comparison for a step in order (most records): these lines cost the reader
        # no more than noise (benchmarks/bench_runs_read.py).
        if type(record) is StepRecord:
            self.step_records += 1
            step = record.step
            if step > self._last_step:
                self._last_step = step
            elif self._watching_steps:
                self._watching_steps = False
                self._report(
                    f"line {self.line_number}: step {step} after step {self._last_step}: the "
                    "step numbers do not increase from here on (a second run in the same "
                    "log?); its records are not counted"
                )
        elif isinstance(record, HeaderRecord):
            if not self._header_read:
                self._header_read = True
                if self.step_records:
                    records_text = "record" if self.step_records == 1 else "records"
                    self._report(
                        f"line {self.line_number}: the header comes after "
                        f"{self.step_records} step {records_text}: not used (the run's "
                        "settings are unknown)"
                    )
        elif isinstance(record, EndRecord):
            self._watching_steps = False

    def _report(self, message: str) -> None:
        self.problem_count += 1
        if self.problem_count <= MAX_PROBLEMS:
            self.problems.append(message)
        else:
            # The last line stands for itself and every problem after it (it used to say
            # one fewer than were left out).
            hidden = self.problem_count - MAX_PROBLEMS + 1
            self.problems[-1] = f"... and {hidden} more problems"


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


# The problem of a run log with steps or an end but no header anywhere (a header after the
# steps is its own problem, which says where).
NO_HEADER = "no header record: the run's settings are unknown"


class RunAssembly:
    """Which records of a log, taken in file order, are one run's: the one rule of
    `collect_run`, `summary.RunSummarizer` and the panel's `RunModel`, each of which says
    in its own words what it leaves out. The header is the first, before any step (with
    `replace_header`, a later one before any step replaces it: a live job's provisional
    header); a first header after step records is not the run's; the steps are those
    before the end record and before the first step whose number is not above the one
    before it (a second run in the log, whose end is not this run's either); the end is the
    first. `RecordStream` reports, with the line, the late header and where the step
    numbers stop increasing: `place` says LATE_HEADER and OTHER_RUN without a problem."""

    HEADER, STEP, END = "header", "step", "end"  # the run's
    LATE_HEADER, OTHER_RUN = "late header", "other run"  # left out; the stream said so
    SECOND_HEADER, AFTER_END, SECOND_END = "second header", "after end", "second end"

    def __init__(self, *, replace_header: bool = False) -> None:
        self.replace_header = replace_header
        self.step_records = 0  # every step record placed, the run's or not
        self.late_header = False  # the first header came after step records
        self.other_run = False  # a step number did not increase: the records from there on
        self._header = False
        self._end = False
        self._last_step: int | None = None

    def place(self, record: Record) -> str:
        """Where `record` goes: HEADER, STEP or END (the run's), or why it is left out."""
        if isinstance(record, StepRecord):
            self.step_records += 1
            if self._end:
                return self.AFTER_END
            if self.other_run or (self._last_step is not None and record.step <= self._last_step):
                self.other_run = True
                return self.OTHER_RUN
            self._last_step = record.step
            return self.STEP
        if isinstance(record, HeaderRecord):
            if self.step_records:
                if self._header or self.late_header:
                    return self.SECOND_HEADER
                self.late_header = True
                return self.LATE_HEADER
            if self._header and not self.replace_header:
                return self.SECOND_HEADER
            self._header = True
            return self.HEADER
        if self.other_run:
            return self.OTHER_RUN
        if self._end:
            return self.SECOND_END
        self._end = True
        return self.END


def collect_run(path: str | os.PathLike[str], records: list[Record], problems: list[str]) -> Run:
    """Assemble records (in file order) into a Run, adding problems for misplaced records.

    The rules are `RecordStream`'s (which reports, with the line, a header after steps and
    steps whose numbers do not increase): the header is the first one, before any step;
    the steps are those before the end record and before the first step whose number is
    not above the one before it (a second run, whose end is not this run's either)."""
    header: HeaderRecord | None = None
    end: EndRecord | None = None
    steps: list[StepRecord] = []
    found = list(problems)
    assembly = RunAssembly()
    for record in records:
        place = assembly.place(record)
        if isinstance(record, StepRecord):
            if place == RunAssembly.STEP:
                steps.append(record)
            elif place == RunAssembly.AFTER_END:
                found.append(f"step {record.step} after the end record ignored")
        elif isinstance(record, HeaderRecord):
            if place == RunAssembly.HEADER:
                header = record
            elif place == RunAssembly.SECOND_HEADER:
                found.append("a second header record ignored")
        elif place == RunAssembly.END:
            end = record
        elif place == RunAssembly.SECOND_END:
            found.append("a second end record ignored")
    if header is None and (steps or end is not None) and not assembly.late_header:
        found.append(NO_HEADER)
    elif header is None and not found:
        found.append("the file holds no records")
    return Run(Path(path), header, tuple(steps), end, tuple(found))


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read a whole run log. Never raises: problems are listed in `Run.problems`."""
    reader = RunReader(path)
    records = reader.finish()
    return collect_run(path, records, reader.problems)
