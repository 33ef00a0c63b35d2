"""RunWriter's fast path: the text encoding of records (equal to the codec's, statistics
included, for any field the contract adds) and the flush rules of batched plain steps (what
reaches the file when, and what a killed writer can lose)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_record_contract import _record_classes, _sample

from fpexplorer.training import records
from fpexplorer.training.records import (
    EndRecord,
    HeaderRecord,
    Histogram,
    StepRecord,
    StepStats,
    encode_line,
)
from fpexplorer.training.runlog import RecordStream, RunWriter, fast_encode_line, load_run

ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e-310, 5e-324, 1.7976931348623157e308, 0.1, 65504.0, 2.0**-24]
)


@given(
    step=st.integers(min_value=0, max_value=2**62),
    loss=ANY_FLOAT,
    scale=ANY_FLOAT,
    skipped=st.booleans(),
    tracker=st.integers(min_value=0, max_value=10**9),
    lr=ANY_FLOAT,
    norm=ANY_FLOAT,
    rate=ANY_FLOAT,
    clock=ANY_FLOAT,
)
def test_the_flat_encoding_of_a_step_equals_the_codec(
    step: int,
    loss: float,
    scale: float,
    skipped: bool,
    tracker: int,
    lr: float,
    norm: float,
    rate: float,
    clock: float,
) -> None:
    record = StepRecord(step=step, loss=loss, scale=scale, skipped=skipped,
                        growth_tracker=tracker, lr=lr, grad_norm=norm, steps_per_s=rate,
                        time=clock)  # fmt: skip
    assert fast_encode_line(record) == encode_line(record)


def test_a_step_with_statistics_and_other_records_use_the_codec() -> None:
    stats = StepStats(grad_hist=Histogram(lo=-3, counts=(1, 2)))
    for record in (
        StepRecord(step=1, loss=0.5, stats=stats),
        HeaderRecord(config={"task": "t", "lr": math.inf}),
        EndRecord(status="failed", error='bad "input"', steps=3, elapsed=0.25),
    ):
        assert fast_encode_line(record) == encode_line(record)


NAMES = st.text(max_size=6)  # any text: quotes, escapes, non-ASCII
COUNTS = st.lists(st.integers(min_value=0, max_value=2**40), max_size=8).map(tuple)
HISTOGRAMS = st.builds(
    Histogram,
    lo=st.integers(min_value=-149, max_value=127),
    counts=COUNTS,
    zero=st.integers(min_value=0, max_value=10**6),
    inf=st.integers(min_value=0, max_value=3),
    nan=st.integers(min_value=0, max_value=3),
    dtype=st.none() | st.sampled_from(["float32", "bfloat16"]),
)
BYTES = st.dictionaries(NAMES, st.integers(min_value=0, max_value=2**40), max_size=3)
STATS = st.builds(
    StepStats,
    grad_hist=st.none() | HISTOGRAMS,
    act_hist=st.none() | HISTOGRAMS,
    act_zero_share=st.none() | ANY_FLOAT,
    layers=st.lists(
        st.builds(
            records.LayerStats,
            name=NAMES,
            grad_norm=st.none() | ANY_FLOAT,
            amax=ANY_FLOAT,
            headroom_log2=st.none() | ANY_FLOAT,
            underflow_share=ANY_FLOAT,
            nonfinite=st.booleans(),
        ),
        max_size=3,
    ).map(tuple),
    first_nonfinite=st.none() | NAMES,
    format_shares=st.dictionaries(
        NAMES, st.builds(records.FormatShares, ANY_FLOAT, ANY_FLOAT, ANY_FLOAT), max_size=2
    ),
    lost_updates=st.none()
    | st.builds(
        records.LostUpdates,
        share=ANY_FLOAT,
        kind=NAMES,
        intended=st.none() | st.integers(min_value=0, max_value=2**40),
        sampled=st.none() | st.integers(min_value=0),
        bound=st.none() | ANY_FLOAT,
    ),
    memory=st.none()
    | st.builds(
        records.Memory,
        params=BYTES,
        grads=BYTES,
        optimizer=BYTES,
        activations=BYTES,
        peak_device=st.none() | st.integers(min_value=0),
    ),
    quant=st.lists(
        st.builds(
            records.QuantTensorStats,
            layer=NAMES,
            role=st.sampled_from(records.QUANT_ROLES),
            format=NAMES,
            amax=ANY_FLOAT,
            scale=st.none() | ANY_FLOAT,
            scale_hist=st.none() | HISTOGRAMS,
            saturated=ANY_FLOAT,
            flushed=ANY_FLOAT,
            sqnr_db=ANY_FLOAT,
        ),
        max_size=2,
    ).map(tuple),
    activations_not_measured=st.none() | NAMES,
)


@given(stats=STATS, loss=ANY_FLOAT, outcomes=st.none() | st.lists(NAMES, max_size=2).map(tuple))
def test_the_text_encoding_of_a_statistics_step_equals_the_codec(
    stats: StepStats, loss: float, outcomes: tuple[str, ...] | None
) -> None:
    """Statistics steps are written by the text encoder too: nested records, lists of
    records, mappings, non-finite values and any text must come out as the codec's."""
    record = StepRecord(step=3, loss=loss, stats=stats, grad_amax=loss,
                        optimizer_outcomes=outcomes)  # fmt: skip
    assert fast_encode_line(record) == encode_line(record)


def test_counts_that_are_not_python_ints_are_written_as_the_codec_writes_them() -> None:
    # numpy integers and bools in a count tuple: the codec's int() of each.
    import numpy as np

    for counts in ((np.int64(3), np.int32(0)), (True, 2, False)):
        record = StepRecord(step=0, loss=0.5,
                            stats=StepStats(grad_hist=Histogram(lo=-3, counts=counts)))  # type: ignore[arg-type]  # fmt: skip
        assert fast_encode_line(record) == encode_line(record)


def _encoding(encode: Callable[[Any], str], record: Any) -> str | type[BaseException]:
    """What `encode` makes of `record`: its line, or the type of the error it raises."""
    try:
        return encode(record)
    except Exception as error:  # the codec's own errors: TypeError, AttributeError
        return type(error)


@pytest.mark.parametrize("cls", _record_classes(), ids=lambda cls: cls.__name__)
def test_none_in_any_field_is_written_as_the_codec_writes_it_or_refused_alike(
    cls: type,
) -> None:
    """A None where the field does not take one (a caller's record built without the type
    checker): the codec refuses a float, an int, a list or a record (TypeError), writes a
    bool false and a string "None"; the text encoder must do the same, never write `null`
    where the reader then refuses the whole line (`"loss":null` made a log that `load_run`
    reports as malformed while the writer said nothing)."""
    for item in dataclasses.fields(cls):
        record = _sample(cls, 1)
        object.__setattr__(record, item.name, None)  # past __init__, as a hostile caller can
        assert _encoding(fast_encode_line, record) == _encoding(encode_line, record), item.name


def test_a_mapping_whose_keys_collide_as_text_is_written_as_the_codec_writes_it() -> None:
    # The codec writes str(key): 1 and "1" are one key, the last value kept; the text
    # encoder wrote both (a line with a duplicate key).
    for record in (
        HeaderRecord(config={1: "a", "1": "b", "c": {2: 0, "2": 1}}),
        StepRecord(step=0, loss=0.5, stats=StepStats(memory=records.Memory(params={1: 4, "1": 8}))),  # type: ignore[dict-item]
    ):
        assert fast_encode_line(record) == encode_line(record)


def _extended_step_record() -> type:
    """StepRecord with fields another feature might add: a float, an optional float left
    out when None, an optional int written as null, a string."""
    hints = typing.get_type_hints(StepRecord)
    fields = [
        (item.name, hints[item.name], dataclasses.field(default=item.default))
        if item.default is not dataclasses.MISSING
        else (item.name, hints[item.name])
        for item in dataclasses.fields(StepRecord)
    ]
    return dataclasses.make_dataclass(
        "StepRecord",
        [
            *fields,
            ("amax_unscaled", float, dataclasses.field(default=math.nan)),
            ("overflow_share", typing.Optional[float], dataclasses.field(default=None)),  # noqa: UP045
            ("rank", typing.Optional[int], dataclasses.field(default=0)),  # noqa: UP045
            ("note", str, dataclasses.field(default="")),
            ("kind", ClassVar[str], "step"),
        ],
        bases=(records._Codable,),
        frozen=True,
        slots=True,
    )


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"amax_unscaled": math.inf, "overflow_share": 0.25, "rank": None, "note": 'a "b"\n\u00e9'},
        {"overflow_share": math.nan, "rank": 3},
    ],
)
def test_the_flat_encoding_follows_fields_the_contract_adds(extra: dict[str, object]) -> None:
    extended = _extended_step_record()
    record = extended(step=2, loss=1.5, **extra)
    assert fast_encode_line(record) == encode_line(record)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _plain(step: int) -> StepRecord:
    return StepRecord(step=step, loss=1.0 / (step + 1), grad_norm=0.5)


def test_plain_steps_are_held_and_any_other_record_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    stats = StepStats(grad_hist=Histogram(lo=0, counts=(1,)))
    with RunWriter(path, flush_interval=3600.0) as writer:
        writer.write(HeaderRecord(config={"task": "t"}))
        assert len(_lines(path)) == 1  # the header at once
        writer.write(_plain(0))
        writer.write(_plain(1))
        assert len(_lines(path)) == 1  # plain steps are held...
        writer.write(StepRecord(step=2, loss=1.0, stats=stats))
        assert [line.get("step") for line in _lines(path)] == [None, 0, 1, 2]  # ...until this
        writer.write(_plain(3))
        writer.write(StepRecord(step=4, loss=1.0, skipped=True))  # a skip: at once
        assert [line.get("step") for line in _lines(path)][-2:] == [3, 4]
        writer.write(_plain(5))
        writer.flush()
        assert _lines(path)[-1]["step"] == 5
        writer.write(_plain(6))
    # close() writes what is held; the order is the order written.
    assert [line.get("step") for line in _lines(path)] == [None, 0, 1, 2, 3, 4, 5, 6]
    assert writer.records_written == 8


def test_held_steps_are_encoded_when_written_exactly_as_the_codec_encodes_them(
    tmp_path: Path,
) -> None:
    """Plain steps are held as records and encoded when their window is written: the
    lines must be the codec's, non-finite values and optional fields included."""
    path = tmp_path / "run.jsonl"
    held = [
        StepRecord(step=0, loss=math.nan, grad_norm=math.inf, scale=65536.0),
        StepRecord(step=1, loss=-math.inf, grad_norm=1e-45, grad_amax=3.4e38, hysteresis=2),
        StepRecord(step=2, loss=0.1 + 0.2, lr=1e-3, steps_per_s=123.456, time=7.0),
    ]
    with RunWriter(path, flush_interval=3600.0) as writer:
        for record in held:
            writer.write(record)
        assert path.read_text() == ""  # all three still held
    assert path.read_text().splitlines() == [encode_line(record) for record in held]


@pytest.mark.parametrize(
    "bad",
    [
        StepRecord(step=1, loss="not a number"),  # type: ignore[arg-type]
        StepRecord(step=1, loss=0.5, growth_tracker=math.inf),  # type: ignore[arg-type]
        StepRecord(step=1, loss=10**400),  # an int no float holds
    ],
    ids=["text loss", "inf count", "huge loss"],
)
def test_a_held_step_that_cannot_be_encoded_is_reported_and_loses_no_other_record(
    tmp_path: Path, bad: StepRecord
) -> None:
    """Plain steps are encoded late: one whose value its field cannot hold (a caller's own
    record, built without the type checker) must still raise at the caller, not vanish in
    the timer thread, and the records around it must still be written. int(inf) and
    float(10**400) raise OverflowError (an ArithmeticError, not a ValueError), in the codec
    too: the whole batch held with it was lost, and the caller got the bare OverflowError
    (from the timer thread, the thread died; this failed before)."""
    path = tmp_path / "run.jsonl"
    writer = RunWriter(path, flush_interval=3600.0)
    writer.write(_plain(0))
    writer.write(bad)
    writer.write(_plain(2))
    with pytest.raises(ValueError, match="cannot be written"):
        writer.flush()
    assert [line["step"] for line in _lines(path)] == [0, 2]
    writer.write(_plain(3))  # the writer goes on
    writer.close()
    assert [line["step"] for line in _lines(path)] == [0, 2, 3]


def test_a_held_step_with_none_where_a_number_goes_is_refused_not_written_unreadable(
    tmp_path: Path,
) -> None:
    """`loss=None` in a plain step: refused at the caller as the codec refuses it, not
    written as `"loss":null`, a line the reader then reports as malformed."""
    path = tmp_path / "run.jsonl"
    writer = RunWriter(path, flush_interval=3600.0)
    writer.write(HeaderRecord(config={"task": "t"}))
    writer.write(_plain(0))
    writer.write(StepRecord(step=1, loss=None))  # type: ignore[arg-type]
    writer.write(_plain(2))
    with pytest.raises(ValueError, match="cannot be written"):
        writer.flush()
    writer.close()
    run = load_run(path)
    assert [step.step for step in run.steps] == [0, 2]
    assert run.problems == ()


def test_an_unencodable_step_found_by_the_timer_reaches_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with RunWriter(path, flush_interval=0.01) as writer:
        writer.write(StepRecord(step=0, loss="x"))  # type: ignore[arg-type]
        deadline = time.monotonic() + 30  # a bound on a stuck test, not a speed check
        while writer._held and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ValueError, match="cannot be written"):
            writer.write(_plain(1))


def test_a_held_step_reaches_the_file_and_the_stream_with_no_further_write(
    tmp_path: Path,
) -> None:
    """A loop that stalls after a plain step (an evaluation, a checkpoint) still shows it:
    the writer's timer writes it once its window has passed."""
    import io

    path = tmp_path / "run.jsonl"
    echo = io.StringIO()
    with RunWriter(path, echo=echo, flush_interval=0.02) as writer:
        writer.write(HeaderRecord(config={"task": "t"}))
        writer.write(_plain(0))
        deadline = time.monotonic() + 30  # a bound on a stuck test, not a speed check
        while len(_lines(path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [line.get("step") for line in _lines(path)] == [None, 0]
        assert echo.getvalue().splitlines()[-1] == fast_encode_line(_plain(0))


def test_flush_interval_zero_writes_every_record_at_once(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with RunWriter(path, flush_interval=0) as writer:
        writer.write(HeaderRecord(config={"task": "t"}))
        writer.write(_plain(0))
        assert len(_lines(path)) == 2


UNCLOSED_WRITER = textwrap.dedent(
    """
    import sys
    from fpexplorer.training.records import HeaderRecord, StepRecord
    from fpexplorer.training.runlog import RunWriter

    writer = RunWriter(sys.argv[1], flush_interval=3600.0)
    writer.write(HeaderRecord(config={"task": "t"}))
    for step in range(4):
        writer.write(StepRecord(step=step, loss=1.0))
    """
)


def test_a_writer_never_closed_writes_what_it_holds_when_the_interpreter_exits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    done = subprocess.run([sys.executable, "-c", UNCLOSED_WRITER, str(path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = load_run(path)
    assert run.problems == () and [step.step for step in run.steps] == [0, 1, 2, 3]


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from fpexplorer.training.records import HeaderRecord, Histogram, StepRecord, StepStats
    from fpexplorer.training.runlog import RunWriter

    writer = RunWriter(sys.argv[1], flush_interval=float(sys.argv[2]))
    writer.write(HeaderRecord(config={"task": "t"}))
    for step in range(5):
        writer.write(StepRecord(step=step, loss=1.0))
    stats = StepStats(grad_hist=Histogram(lo=0, counts=(1,)))
    writer.write(StepRecord(step=5, loss=1.0, stats=stats))
    for step in range(6, 9):
        writer.write(StepRecord(step=step, loss=1.0))
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize(("interval", "kept"), [(3600.0, 6), (0.0, 9)])
def test_a_killed_writer_loses_at_most_the_held_plain_steps(
    tmp_path: Path, interval: float, kept: int
) -> None:
    """Killed (SIGKILL: no close, no flush) after three plain steps: with a window longer
    than the run, exactly those three are lost and every record before them is intact;
    with no window, nothing is lost."""
    path = tmp_path / "run.jsonl"
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path), str(interval)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == -9, done.stderr
    run = load_run(path)
    assert run.problems == () and run.header is not None and run.end is None
    assert [step.step for step in run.steps] == list(range(kept))


class UserStep(StepRecord):
    """A step record with a method of a user's own (a plain subclass, with a __dict__)."""

    def loss_text(self) -> str:
        return f"{self.loss:.3f}"


@dataclasses.dataclass(frozen=True, slots=True)
class SlottedStep(StepRecord):
    """A dataclass subclass adding nothing."""


class UserHeader(HeaderRecord):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class UserEnd(EndRecord):
    pass


def _as_record_type(record: Any) -> Any:
    """The record as one of its record type's own class, field by field."""
    base = next(c for c in type(record).__mro__ if c in (HeaderRecord, StepRecord, EndRecord))
    return base(**{item.name: getattr(record, item.name) for item in dataclasses.fields(base)})


def test_a_subclass_of_a_record_type_is_written_as_that_type_and_read_back(
    tmp_path: Path,
) -> None:
    # The "type" was looked up in the record class's own __dict__: a subclass's lines had
    # none, from RunWriter's generated encoder and from `to_json` alike, and RecordStream
    # refused every one ('a record without a "type"'; this failed before).
    stats = StepStats(grad_hist=Histogram(lo=0, counts=(1, 2)))
    written = [
        UserHeader(config={"task": "t"}),
        UserStep(step=0, loss=0.5),  # plain steps: held, encoded when their window is
        SlottedStep(step=1, loss=0.25),
        SlottedStep(step=2, loss=0.125, stats=stats),  # written at once
        UserStep(step=3, loss=1.0, skipped=True),
        UserEnd(status="completed", steps=4),
    ]
    expected = [_as_record_type(record) for record in written]
    path = tmp_path / "run.jsonl"
    with RunWriter(path, flush_interval=3600.0) as writer:
        for record in written:
            writer.write(record)
    assert path.read_text().splitlines() == [encode_line(record) for record in expected]
    assert [record.to_json() for record in written] == [record.to_json() for record in expected]
    stream = RecordStream()
    assert stream.feed(path.read_bytes()) + stream.finish() == expected
    assert stream.problems == []


@dataclasses.dataclass(frozen=True, slots=True)
class NotedStep(StepRecord):
    note: str = ""


class OwnKindStep(StepRecord):
    kind: ClassVar[str] = "noted step"


@pytest.mark.parametrize(
    ("cls", "reason"),
    [(NotedStep, "no place for the fields note"), (OwnKindStep, "no place for the kind")],
)
def test_a_subclass_its_line_could_not_carry_is_refused_with_the_reason(
    tmp_path: Path, cls: type[StepRecord], reason: str
) -> None:
    # Readers drop keys they do not know and skip record types they do not know: such a
    # record would be written and lost on reading.
    path = tmp_path / "run.jsonl"
    with RunWriter(path) as writer:
        with pytest.raises(
            TypeError, match=f"{cls.__name__} is written as a StepRecord .*{reason}"
        ):
            writer.write(cls(step=0, loss=0.5))
        writer.write(StepRecord(step=1, loss=0.5))  # the writer goes on
    with pytest.raises(TypeError, match=reason):
        cls(step=0, loss=0.5).to_json()
    assert [line["step"] for line in _lines(path)] == [1]
