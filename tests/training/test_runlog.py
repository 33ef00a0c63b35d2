"""The run log: typed round trip, schema-1 logs read forever, the one RecordStream
(chunking, torn lines, resynchronisation after garbage), the writer's lock."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fpexplorer.training.records import (
    SCHEMA_VERSION,
    DeviceInfo,
    EndRecord,
    FormatRange,
    FormatShares,
    HeaderRecord,
    Histogram,
    LayerStats,
    LostUpdates,
    Memory,
    ModelInfo,
    StepRecord,
    StepStats,
    decode_record,
    encode_line,
)
from fpexplorer.training.runlog import (
    RecordStream,
    RunLogLocked,
    RunReader,
    RunWriter,
    load_run,
    parse_record,
)

DATA = Path(__file__).parent / "data"

HEADER = HeaderRecord(
    fpexplorer_version="0.1.0",
    torch_version="2.13.0",
    started="2026-01-01T00:00:00+00:00",
    config={"task": "mlp", "precision": "fp16", "init_scale": 65536.0},
    device=DeviceInfo(type="cpu", name="x86_64"),
    model=ModelInfo(params=10, layers=("fc1", "fc2")),
    formats={"float16": FormatRange(max=65504.0, min_normal=2.0**-14, min_subnormal=2.0**-24)},
)
FULL_STATS = StepStats(
    grad_hist=Histogram(lo=-30, counts=(1, 0, 2), zero=3, inf=0, nan=1),
    act_hist=Histogram(lo=-20, counts=(4,), zero=5, inf=1, nan=0, dtype="float16"),
    act_zero_share=0.5,
    layers=(
        LayerStats("fc1", grad_norm=0.1, amax=2.0, headroom_log2=14.9, underflow_share=0.25),
        LayerStats("fc2", grad_norm=math.nan, amax=math.inf, headroom_log2=None, nonfinite=True),
    ),
    first_nonfinite="fc2",
    format_shares={"float16": FormatShares(underflow=0.1, subnormal=0.2, overflow=0.0)},
    lost_updates=LostUpdates(share=0.3, kind="fp16_would_lose", intended=10),
    memory=Memory(params={"float32": 40}, grads={"float32": 40}, activations={"float16": 100}),
)


def _step(i: int, loss: float = 1.0, stats: StepStats | None = None) -> StepRecord:
    return StepRecord(
        step=i, loss=loss, scale=65536.0, skipped=False, growth_tracker=i, lr=0.1,
        grad_norm=0.5, steps_per_s=10.0, time=0.1 * i, stats=stats,
    )  # fmt: skip


END = EndRecord(status="completed", steps=2, elapsed=0.5)


def _nan_equal(a: object, b: object) -> bool:
    """Records equal up to NaN != NaN: compared through their JSON."""
    return json.dumps(a.to_json()) == json.dumps(b.to_json())  # type: ignore[attr-defined]


def test_typed_round_trip_with_non_finite_floats(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    written = [HEADER, _step(0, loss=math.nan, stats=FULL_STATS), _step(1, loss=math.inf), END]
    with RunWriter(path) as writer:
        for record in written:
            writer.write(record)
    text = path.read_text()
    # Strict JSON: every line parses with non-finite constants refused; "type" comes first.
    for line in text.splitlines():
        json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        assert line.startswith('{"type":')
    assert '"loss":"NaN"' in text and '"loss":"Infinity"' in text
    run = load_run(path)
    assert run.problems == ()
    assert run.header == HEADER and run.end == END
    assert all(_nan_equal(a, b) for a, b in zip(run.steps, written[1:3], strict=True))
    first, second = run.steps
    assert math.isnan(first.loss) and second.loss == math.inf
    assert first.grad_hist is not None and first.grad_hist.total == 7
    assert list(first.grad_hist.exponents) == [-30, -29, -28]
    assert first.stats is not None and first.stats.layers[1].amax == math.inf
    assert first.has_stats and not second.has_stats
    assert '"stats"' not in encode_line(second)  # None with a None default: left out


def test_schema1_logs_are_read_forever() -> None:
    """Logs written by schema 1 (kept in tests/training/data) read as today's records,
    every figure the same as in the file."""
    for path in sorted(DATA.glob("schema1-*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines[0]["schema"] == 1
        run = load_run(path)
        assert run.problems == (), path
        assert run.header is not None and run.header.schema == SCHEMA_VERSION
        assert run.header.config == lines[0]["config"]
        assert run.header.layers == tuple(lines[0]["model"]["layers"])
        raw_steps = [line for line in lines if line["type"] == "step"]
        assert len(run.steps) == len(raw_steps) > 0
        for record, raw in zip(run.steps, raw_steps, strict=True):
            assert record.step == raw["step"] and record.skipped == raw["skipped"]
            assert encode_line(record).count('"loss":') == 1
            assert json.loads(encode_line(record))["loss"] == raw["loss"]
            assert (record.stats is not None) == ("grad_hist" in raw)
            if record.stats is None:
                continue
            assert record.stats.grad_hist is not None
            assert list(record.stats.grad_hist.counts) == raw["grad_hist"]["counts"]
            assert [layer.name for layer in record.stats.layers] == [
                layer["name"] for layer in raw["layers"]
            ]
            assert record.stats.first_nonfinite == raw.get("first_nonfinite")
            if "lost_updates" in raw:
                assert record.stats.lost_updates is not None
                assert record.stats.lost_updates.share == raw["lost_updates"]["share"]
        assert run.end is not None and run.end.status == lines[-1]["status"]


def test_a_newer_schema_is_not_read_as_if_old() -> None:
    stream = RecordStream()
    header = {**HEADER.to_json(), "schema": SCHEMA_VERSION + 1}
    step = {"type": "step", "step": 0, "loss": 1.0, "grad_hist": "a new meaning"}
    data = (json.dumps(header) + "\n" + json.dumps(step) + "\n").encode()
    assert stream.feed(data) == [] and stream.finish() == []
    assert "newer than this fpexplorer reads" in stream.problems[0]
    assert "1 record(s) of schema" in stream.problems[1]
    with pytest.raises(ValueError, match="newer"):
        decode_record(step, schema=SCHEMA_VERSION + 1)


def _log_bytes() -> bytes:
    records = [HEADER, _step(0, stats=FULL_STATS), _step(1), _step(2), END]
    return b"".join(encode_line(r).encode() + b"\n" for r in records)


def test_stream_gives_the_same_records_whatever_the_chunking() -> None:
    data = _log_bytes()
    whole = RecordStream()
    expected = whole.feed(data) + whole.finish()
    assert len(expected) == 5
    for size in (1, 7, 64, 1000):
        stream = RecordStream()
        got = []
        for start in range(0, len(data), size):
            got += stream.feed(data[start : start + size])
        got += stream.finish()
        assert [encode_line(r) for r in got] == [encode_line(r) for r in expected]
        assert stream.problems == []


def test_stream_resynchronises_on_the_next_record_after_garbage() -> None:
    lines = [encode_line(r).encode() for r in (HEADER, _step(0), _step(1), _step(2), END)]
    data = (
        lines[0] + b"\n"
        + b"hello from print() without a newline" + lines[1] + b"\n"  # glued in front
        + b"\xff\xfe binary junk\n"
        + lines[2] + b"trailing junk\n"  # glued behind
        + lines[3][:30] + b"\n"  # a record cut by someone else's newline: lost
        + lines[4] + b"\n"
    )  # fmt: skip
    stream = RecordStream()
    records = stream.feed(data) + stream.finish()
    assert [type(r).__name__ for r in records] == [
        "HeaderRecord", "StepRecord", "StepRecord", "EndRecord"
    ]  # fmt: skip
    assert [r.step for r in records if isinstance(r, StepRecord)] == [0, 1]
    assert len(stream.problems) == 4 and all(p.startswith("line ") for p in stream.problems)


def test_torn_last_line_and_over_long_lines() -> None:
    data = _log_bytes()
    stream = RecordStream()
    records = stream.feed(data[:-7])
    assert stream.partial_line and len(records) == 4
    assert stream.finish() == [] and stream.problems == ["line 5: torn last line ignored"]
    # A complete last line without its newline is accepted at the end.
    stream = RecordStream()
    assert len(stream.feed(data[:-1]) + stream.finish()) == 5 and stream.problems == []
    # An over-long line is dropped up to its newline; the records after it are read.
    stream = RecordStream(max_line_bytes=100)
    got = stream.feed(b"x" * 150) + stream.feed(b"y" * 150 + b"\n" + encode_line(END).encode())
    got += stream.finish()
    assert got == [END] and "longer than 100 bytes" in stream.problems[0]


def test_damage_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(
        b"\xff\xfe garbage\n"
        + encode_line(HEADER).encode() + b"\n"
        + b"[1, 2]\n"
        + b'{"type": "step", "loss": 1.0}\n'
        + b'{"type": "step", "step": 0, "loss": "one"}\n'
        + encode_line(_step(0)).encode() + b"\n"
        + b'{"type": "end", "status": "exploded"}\n'
        + b'{"type": "step", "step": 1, "loss": 1.0, "stats": {"grad_hist": {"lo": 0, '
        + b'"counts": [-1]}}}\n'
    )  # fmt: skip
    run = load_run(path)
    assert len(run.steps) == 1 and run.header is not None and run.end is None
    assert len(run.problems) == 6, run.problems
    assert all(problem.startswith("line ") for problem in run.problems)
    assert "without 'step'" in run.problems[2]
    assert "negative" in run.problems[5]


def test_unknown_record_types_are_skipped() -> None:
    assert parse_record('{"type": "note", "text": "from the future"}') is None
    end = parse_record('{"type": "end", "status": "failed", "error": "boom"}')
    assert isinstance(end, EndRecord) and end.error == "boom" and end.traceback is None


def test_reader_tails_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    reader = RunReader(path)
    assert reader.read_new() == [] and reader.problems  # no file yet: reported
    reader.problems.clear()
    lines = [encode_line(HEADER), encode_line(_step(0)), encode_line(_step(1))]
    with open(path, "w") as handle:
        handle.write(lines[0] + "\n" + lines[1][:20])
        handle.flush()
        first = reader.read_new()
        assert [type(r) for r in first] == [HeaderRecord] and reader.partial_line
        handle.write(lines[1][20:] + "\n" + lines[2] + "\n")
        handle.flush()
        second = reader.read_new()
    assert [r.step for r in second if isinstance(r, StepRecord)] == [0, 1]
    assert reader.read_new() == [] and reader.problems == []


def test_missing_and_empty_files(tmp_path: Path) -> None:
    missing = load_run(tmp_path / "nope.jsonl")
    assert missing.header is None and missing.problems and "cannot read" in missing.problems[0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert load_run(empty).problems == ("the file holds no records",)


def test_a_second_writer_is_refused_and_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with RunWriter(path) as first:
        first.write(HEADER)
        with pytest.raises(RunLogLocked, match="another job"):
            RunWriter(path)
        first.write(_step(0))
    run = load_run(path)
    assert run.header == HEADER and len(run.steps) == 1 and run.problems == ()
    # Once the first writer is closed the file can be written again.
    with RunWriter(path) as again:
        again.write(HEADER)
    assert len(load_run(path).steps) == 0


def test_writer_survives_a_closed_echo_stream(tmp_path: Path) -> None:
    import io

    echo = io.StringIO()
    with RunWriter(tmp_path / "run.jsonl", echo=echo) as writer:
        writer.write(HEADER)
        echo.close()  # the reader went away
        writer.write(_step(0))
    run = load_run(tmp_path / "run.jsonl")
    assert run.header is not None and len(run.steps) == 1


def test_writer_still_takes_schema1_dicts(tmp_path: Path) -> None:
    """The monitor's hand-built dicts (schema 1's layout) are written as schema 2."""
    path = tmp_path / "run.jsonl"
    with RunWriter(path) as writer:
        writer.write({"type": "header", "schema": 1, "config": {"task": "t"}})
        writer.write({"type": "step", "step": 0, "loss": 1.0, "grad_hist": {"lo": 0,
                      "counts": [2]}})  # fmt: skip
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["schema"] == SCHEMA_VERSION
    assert lines[1]["stats"]["grad_hist"] == {"lo": 0, "counts": [2], "zero": 0, "inf": 0,
                                              "nan": 0}  # fmt: skip


def test_a_nested_record_with_a_kind_field_is_not_given_a_record_type() -> None:
    # LostUpdates has a data field named `kind`; only header/step/end carry "type".
    lost = LostUpdates(share=0.25, kind="actual", intended=4)
    encoded = lost.to_json()
    assert "type" not in encoded
    assert encoded["kind"] == "actual"
    assert LostUpdates.from_json(encoded) == lost
