"""The reader's fast paths (records._FlatDecoder for plain step lines, runlog._loads for
JSON) read exactly what the generic codec and `json.loads` read: the same records (types
included), the same problems, byte-identical summaries, over synthetic logs with
statistics, skipped steps, non-finite values, schema 1, torn and damaged lines."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Any

import pytest

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training import records as records_module
from fpexplorer.training import runlog as runlog_module
from fpexplorer.training.records import (
    EndRecord,
    StepRecord,
    decode_record,
    encode_line,
    record_fields,
)
from fpexplorer.training.runlog import RecordStream, RunWriter
from fpexplorer.training.summary import format_summary, summarize_file

DATA = Path(__file__).parent / "data"


class _NoFastPath:
    def decode(self, raw: dict[str, Any]) -> None:
        return None


def _write_synthetic(path: Path) -> None:
    with RunWriter(path) as writer:
        for record in synthetic_records(700, stats_every=10, overflow_every=37, quant="mxfp4"):
            writer.write(record)


# Damaged, odd and non-finite lines, appended to a synthetic log's steps.
ODD_LINES = [
    '{"type":"step","step":1000,"loss":"NaN","scale":"Infinity","grad_norm":"-Infinity"}',
    '{"type":"step","step":1001,"loss":1,"scale":65536,"growth_tracker":2.0,"skipped":1}',
    '{"type":"step","step":1002,"loss":0.5,"grad_amax":null,"hysteresis":null,"stats":null}',
    '{"type":"step","step":1003,"loss":0.5,"grad_amax":"Infinity","hysteresis":2,"x":[1]}',
    '{"type":"step","step":1004,"loss":"oops"}',
    '{"type":"step","step":1005}',
    '{"type":"step","loss":0.5}',
    '{"type":"step","step":1.5,"loss":0.5}',
    '{"type":"step","step":true,"loss":0.5}',
    '{"type":"step","step":1006,"loss":0.5,"skipped":2}',
    '{"type":"step","step":1007,"loss":0.5,"lr":null}',
    '{"type":"step","step":1008,"loss":0.5,"lr":"nan"}',
    '{"type":"step","step":1009,"loss":0.5,"grad_amax":true}',
    '{"type":"step","step":1010,"loss":0.5,"ranks":{"losses":[1.0,"NaN"]}}',
    '{"type":"step","step":1011,"loss":0.5,"ranks":{"losses":"bad"}}',
    '{"type":"step","step":1012,"loss":0.5,"stats":{"grad_hist":{"lo":-3,"counts":[1]}}}',
    '  {"type":"step","step":1013,"loss":0.25}  \r',
    '{"type":"step","step":1014,"loss":0.25} x',
    'print output {"type":"step","step":1015,"loss":0.25}',
    '{"type":"step","step":1016,"loss":0.25,"loss":0.5}',
    '{"type":"step","step":1017,"loss":1e400}',
    '{"type":"step","step":1018,"loss":NaN}',
    '{"type":"step","step":1019,"loss":0.5,"time":"\\ud800"}',
    "[1, 2]",
    '{"type":"mystery","step":1}',
    '{"step":1020,"loss":0.5}',
    "",
    "   ",
    '{"type":"step","step":1022,"loss":0.5,"optimizer_outcomes":["stepped","idle"]}',
    '{"type":"step","step":1023,"loss":0.5,"optimizer_outcomes":"stepped"}',
    '{"type":"step","step":1021,"loss":0.5,"skipped":false,"lr":0.001}',
]


def _damaged_log(path: Path, *, torn: bool) -> None:
    _write_synthetic(path)
    lines = path.read_bytes().splitlines()
    end = lines.pop()  # the end record goes last again, after the odd lines
    body = b"\n".join([*lines, *(line.encode() for line in ODD_LINES), b"\xff\xfe{bad utf-8"])
    tail = b'\n{"type":"step","step":20' if torn else b"\n" + end + b"\n"
    path.write_bytes(body + tail)


def _read(path: Path, chunk: int = 4096) -> tuple[list[str], list[str], list[list[int]]]:
    """repr of every record (types visible: 1 vs 1.0), the problems, the offsets."""
    stream = RecordStream()
    found: list[str] = []
    offsets: list[list[int]] = []
    data = path.read_bytes()
    for start in range(0, len(data), chunk):
        found += [repr(record) for record in stream.feed(data[start : start + chunk])]
        offsets.append(list(stream.offsets))
    found += [repr(record) for record in stream.finish()]
    offsets.append(list(stream.offsets))
    return found, stream.problems, offsets


def _summary_texts(path: Path) -> tuple[str, str]:
    summary = summarize_file(path)
    as_json = runlog_module.encode_json_line(dataclasses.asdict(summary))
    return format_summary(summary), as_json


def _logs(folder: Path) -> list[Path]:
    synthetic = folder / "synthetic.jsonl"
    _write_synthetic(synthetic)
    damaged, torn = folder / "damaged.jsonl", folder / "torn.jsonl"
    _damaged_log(damaged, torn=False)
    _damaged_log(torn, torn=True)
    return [synthetic, damaged, torn, *sorted(DATA.glob("schema1-*.jsonl"))]


def test_fast_paths_read_what_the_generic_reader_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _logs(tmp_path)
    fast = {path: (_read(path), _summary_texts(path)) for path in logs}
    monkeypatch.setattr(records_module, "_flat_decoder", lambda cls: _NoFastPath())
    monkeypatch.setattr(runlog_module, "_loads", runlog_module._loads_utf8)
    for path in logs:
        generic = (_read(path), _summary_texts(path))
        assert fast[path][0] == generic[0], path.name
        assert fast[path][1] == generic[1], path.name  # byte-identical summaries
    # The logs do hold what the comparison is about.
    synthetic_records_read, _, _ = fast[logs[0]][0]
    assert sum("stats=StepStats" in text for text in synthetic_records_read) >= 70
    assert sum("skipped=True" in text for text in synthetic_records_read) >= 10
    damaged_records, damaged_problems, _ = fast[logs[1]][0]
    assert len(damaged_problems) >= 10
    assert any("loss=nan, scale=inf" in text for text in damaged_records)
    assert "torn last line" in fast[logs[2]][0][1][-1]


def test_the_flat_decoder_is_used_and_equals_the_codec_line_by_line(tmp_path: Path) -> None:
    """Line by line (no stream): the fast decoder gives what `from_json` gives, and the
    same error message when it refuses; and it does serve the plain step lines."""
    path = tmp_path / "synthetic.jsonl"
    _write_synthetic(path)
    lines = [line for line in path.read_text().splitlines()] + ODD_LINES
    served = 0
    flat = records_module._flat_decoder(StepRecord)
    for line in lines:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not (isinstance(raw, dict) and raw.get("type") == "step"):
            continue
        outcome_fast: tuple[str, str]
        try:
            outcome_fast = ("record", repr(decode_record(raw)))
        except ValueError as error:
            outcome_fast = ("error", str(error))
        try:
            outcome_generic = ("record", repr(StepRecord.from_json(raw)))
        except (TypeError, ValueError, AttributeError) as error:
            outcome_generic = ("error", f"malformed step record: {error}")
        assert outcome_fast == outcome_generic, line
        try:
            served += flat.decode(raw) is not None
        except ValueError:
            pass
    assert served >= 600  # the plain steps went the fast way


def test_the_flat_decoder_follows_the_dataclass() -> None:
    """Derived from the fields: every field of StepRecord is either read by the flat
    decoder (a scalar, or an optional one) or left to the codec (`stats`, `ranks`, any
    other nested value); EndRecord's tuple of ranks likewise."""
    flat = records_module._FlatDecoder(StepRecord)
    hints = typing.get_type_hints(StepRecord)
    read = {name for _key, name, _type, _decode, _required in flat.fields}
    assert read | set(flat.nested_keys) == set(record_fields(StepRecord))
    assert not read & set(flat.nested_keys)
    scalars = {float, int, bool, str}
    for name in read:  # a scalar, an optional scalar, a tuple of scalars (or optional)
        hint = hints[name]
        if type(None) in typing.get_args(hint):  # X | None: X
            (hint,) = set(typing.get_args(hint)) - {type(None)}
        if typing.get_origin(hint) is tuple:  # tuple[X, ...]: X
            assert typing.get_args(hint)[1] is Ellipsis
            hint = typing.get_args(hint)[0]
        assert hint in scalars, name
    assert {"step", "loss", "scale", "skipped", "grad_amax", "hysteresis"} <= read
    assert {"stats", "ranks"} <= set(flat.nested_keys)
    assert records_module._FlatDecoder(EndRecord).nested_keys == ["ranks"]


def test_fast_json_reader_is_json_loads(tmp_path: Path) -> None:
    """`runlog._loads` returns json.loads' value, or raises an error of the same type (for
    a line that is not UTF-8, `NotUtf8Error`: json.loads guesses another encoding)."""
    samples = [line.encode("utf-8", "surrogatepass") for line in ODD_LINES] + [
        b'{"a":1}\n',
        b'{"a":1}\x0b',
        b'{"a":1}\t\r\n ',
        b"{\x00\x00\x00",
        b'{"a":"\xff"}',
        b'{"a":"\xed\xa0\x80"}',  # a lone surrogate, as surrogatepass reads it
        b"\xef\xbb\xbf{}",
        b'{"a":1}{"b":2}',
        b"{",
        b"{}",
    ]
    for sample in samples:
        try:
            expected: Any = ("value", json.loads(sample))
        except UnicodeDecodeError:
            expected = ("error", runlog_module.NotUtf8Error)
        except ValueError as error:
            expected = ("error", type(error))
        try:
            got: Any = ("value", runlog_module._loads(sample))
        except ValueError as error:
            got = ("error", type(error))
        if expected[0] == "value":
            assert got[0] == "value"
            assert json.dumps(got[1]) == json.dumps(expected[1]), sample
        else:
            assert got == expected, sample


def test_non_finite_and_integral_values_keep_the_field_types() -> None:
    record = decode_record(json.loads(ODD_LINES[1]))
    assert isinstance(record, StepRecord)
    assert type(record.loss) is float and type(record.scale) is float
    assert type(record.growth_tracker) is int and record.skipped is True
    record = decode_record(json.loads(ODD_LINES[0]))
    assert isinstance(record, StepRecord)
    assert math.isnan(record.loss) and record.scale == math.inf
    assert record.grad_norm == -math.inf
    assert encode_line(record).startswith('{"type":"step","step":1000,"loss":"NaN"')


def test_a_record_made_without_init_is_the_record_init_makes() -> None:
    """The flat decoder sets a plain step's fields itself (no __init__ call): the result
    equals, hashes and prints as StepRecord(**fields), and stays frozen."""
    line = ODD_LINES[3]  # grad_amax "Infinity", hysteresis 2, an unknown key
    raw = json.loads(line)
    record = records_module._flat_decoder(StepRecord).decode(raw)
    assert records_module._flat_decoder(StepRecord).usable_directly
    expected = StepRecord(step=1003, loss=0.5, grad_amax=math.inf, hysteresis=2)
    assert type(record) is StepRecord
    assert record == expected and hash(record) == hash(expected)
    assert repr(record) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.loss = 1.0  # type: ignore[misc]


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked(records_module._Codable):
    count: int
    label: str = ""

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("a negative count")


@dataclasses.dataclass(frozen=True, slots=True)
class _WithFactory(records_module._Codable):
    count: int
    names: tuple[str, ...] = dataclasses.field(default_factory=tuple)


def test_records_whose_init_does_more_are_made_by_it() -> None:
    """A __post_init__ (validation) or a default_factory: the flat decoder calls __init__."""
    checked = records_module._FlatDecoder(_Checked)
    assert not checked.usable_directly
    assert checked.decode({"count": 2}) == _Checked(2)
    with pytest.raises(ValueError, match="a negative count"):
        checked.decode({"count": -1})
    with_factory = records_module._FlatDecoder(_WithFactory)
    assert not with_factory.usable_directly
    assert with_factory.decode({"count": 1}) == _WithFactory(1, ())


@pytest.mark.parametrize("chunk", [1, 7, 333, 4096, 1 << 30])
def test_stream_records_and_offsets_whatever_the_chunking(tmp_path: Path, chunk: int) -> None:
    """Each record's offset is where its line starts in the file, whatever the chunks
    (the stream splits each chunk into lines at once); the records are those of one feed."""
    path = tmp_path / "damaged.jsonl"
    _damaged_log(path, torn=True)
    data = path.read_bytes()[: 200_000 if chunk < 100 else None]
    whole = RecordStream()
    expected = [repr(record) for record in [*whole.feed(data), *whole.finish()]]
    stream = RecordStream()
    found: list[tuple[Any, int]] = []
    for start in range(0, len(data), chunk):
        found += zip(stream.feed(data[start : start + chunk]), stream.offsets, strict=True)
    found += zip(stream.finish(), stream.offsets, strict=True)
    assert [repr(record) for record, _ in found] == expected
    assert stream.problems == whole.problems and stream.line_number == whole.line_number
    checked = 0
    for record, offset in found:
        assert offset == 0 or data[offset - 1 : offset] == b"\n"
        end = data.find(b"\n", offset)
        line = data[offset : None if end < 0 else end]
        try:
            again = runlog_module.parse_record(line, schema=2)
        except ValueError:
            continue  # a line with output glued to its record, or the torn last one
        assert repr(again) == repr(record)
        checked += 1
    assert checked >= len(found) - 5


@pytest.mark.parametrize(
    "counts",
    [[], [0, 1, 2**70], [1.0, 2], [1, True], [1, 2.5], [1, "2"], [1, None], [-1, 3]],
)
def test_a_tuple_of_scalars_decodes_as_its_items_do(counts: list[Any]) -> None:
    """Histogram counts (tuple[int, ...]): the list taken whole when every item is an int
    gives what decoding item by item gives, and the same error otherwise."""

    def item_by_item() -> Any:
        items = tuple(records_module._decode_int(item) for item in counts)
        return repr(records_module.Histogram(lo=0, counts=items))

    try:
        expected: Any = ("value", item_by_item())
    except ValueError as error:
        expected = ("error", str(error))
    try:
        got: Any = ("value", repr(records_module.Histogram.from_json({"lo": 0, "counts": counts})))
    except ValueError as error:
        got = ("error", str(error))
    assert got == expected
    if all(type(item) is int for item in counts) and min(counts, default=0) >= 0:
        decoded = records_module.Histogram.from_json({"lo": 0, "counts": counts})
        assert all(type(item) is int for item in decoded.counts)


@pytest.mark.parametrize(
    "value",
    [
        {"name": "fc1", "grad_norm": 0.5, "amax": 2.0, "underflow_share": 0.25},
        {"name": "fc1", "grad_norm": None, "amax": 2, "headroom_log2": "Infinity"},
        {"name": "fc1", "amax": "NaN", "nonfinite": 1, "underflow_share": 0},
        {"name": "fc1", "amax": True},
        {"name": 3},
        {"name": "fc1", "nonfinite": 2},
        {"amax": 1.0},
    ],
)
def test_nested_records_skip_the_decoder_only_for_values_of_the_exact_type(
    value: dict[str, Any],
) -> None:
    """The generic codec takes a value of a scalar field's exact type as is: the same
    record (types included) or error as calling every field's decoder."""
    codecs = records_module._plan(records_module.LayerStats)

    def field_by_field() -> str:
        arguments = {}
        for codec in codecs:
            if codec.key in value:
                arguments[codec.name] = codec.decode(value[codec.key])
            elif codec.required:
                raise ValueError(f"LayerStats without {codec.key!r}")
        return repr(records_module.LayerStats(**arguments))

    try:
        expected = ("value", field_by_field())
    except ValueError as error:
        expected = ("error", str(error))
    try:
        got = ("value", repr(records_module.LayerStats.from_json(value)))
    except ValueError as error:
        got = ("error", str(error))
    assert got == expected
