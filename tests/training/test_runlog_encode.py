"""The generated text encoder of each record class (`runlog._compile_text`): the same text
as the record's `_TextEncoder` and as the codec (`json.dumps` of `to_json()`), for every
record class, any value (NaN, infinities, -0.0, subnormals, None, any text, nested
records), every float16 and bfloat16 value; values it does not write itself go to the
`_TextEncoder`; lines read back as the records they were."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Callable
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_record_contract import _record_classes

from fpexplorer.training import records, runlog
from fpexplorer.training.records import (
    EndRecord,
    Histogram,
    LayerStats,
    StepRecord,
    StepStats,
    decode_record,
    encode_line,
)
from fpexplorer.training.runlog import fast_encode_line

FLOATS = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(width=16)
    | st.floats(width=32)
    | st.sampled_from(
        [
            0.0,
            -0.0,
            5e-324,
            -1e-310,
            1.7976931348623157e308,
            1e16,
            1e-5,
            1e22,
            2.0**53,
            65504.0,
            2.0**-24,
            math.nan,
            -math.nan,
            math.inf,
            -math.inf,
        ]
    )
)
# Any text: quotes, backslashes, control characters, non-ASCII, lone surrogates.
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=6)
INTS = st.integers(min_value=-(2**70), max_value=2**70)
COUNTS = st.integers(min_value=0, max_value=2**70)
JSON = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
# Fields whose record refuses other values (its __post_init__ checks).
FIELD_VALUES: dict[tuple[type, str], st.SearchStrategy[Any]] = {
    (Histogram, "lo"): st.integers(min_value=-records.MAX_BINADE, max_value=records.MAX_BINADE),
    (Histogram, "counts"): st.lists(COUNTS, max_size=40).map(tuple),
    (Histogram, "zero"): COUNTS,
    (Histogram, "inf"): COUNTS,
    (Histogram, "nan"): COUNTS,
    (EndRecord, "status"): st.sampled_from(records.END_STATUSES),
    (records.RankEnd, "status"): st.sampled_from(records.RANK_END_STATUSES),
}


def _values(hint: Any) -> st.SearchStrategy[Any]:
    """Any value of a record field's type hint (records nested, built from their fields)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is float:
        return FLOATS
    if hint is bool:
        return st.booleans()
    if hint is int:
        return INTS
    if hint is str:
        return TEXT
    if hint is Any:
        return JSON
    if type(None) in args:
        return st.none() | _values(next(a for a in args if a is not type(None)))
    if origin is tuple:
        return st.lists(_values(args[0]), max_size=4).map(tuple)
    if origin is dict:
        return st.dictionaries(TEXT, _values(args[1]), max_size=3)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _records(hint)
    raise AssertionError(f"no values for {hint!r}")


def _records(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for item in dataclasses.fields(cls):
        special = FIELD_VALUES.get((cls, item.name))
        fields[item.name] = (
            special
            if special is not None
            else st.deferred(lambda hint=hints[item.name]: _values(hint))
        )
    return st.builds(cls, **fields)


def _codec_text(record: Any) -> str:
    """The codec's text of a record, nested ones too (`encode_line` of a top-level one)."""
    return json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False)


def _text_encoder(cls: type) -> runlog._TextEncoder:
    encoder = runlog._text_encoder(cls)
    assert encoder is not None, cls.__name__
    return encoder


def _compiled(cls: type) -> Callable[[Any], str]:
    compiled = runlog._compiled_text(cls)
    assert compiled is not None, cls.__name__
    return compiled


# Records with many or nested fields take half a second to 4 s each to draw: the slow set.
_LARGE_RECORDS = (
    "StepRecord",
    "StepStats",
    "HeaderRecord",
    "RankStep",
    "QuantTensorStats",
    "EndRecord",
)


@pytest.mark.parametrize(
    "cls",
    [
        pytest.param(cls, marks=pytest.mark.slow) if cls.__name__ in _LARGE_RECORDS else cls
        for cls in _record_classes()
    ],
    ids=lambda cls: cls.__name__,
)
@given(data=st.data())
def test_every_record_class_is_written_as_its_text_encoder_and_the_codec_write_it(
    cls: type, data: st.DataObject
) -> None:
    record = data.draw(_records(cls))
    text = _compiled(cls)(record)
    assert text == _text_encoder(cls).encode(record)
    assert text == _codec_text(record)


@given(record=_records(StepRecord))
def test_a_line_reads_back_as_the_record_it_was(record: StepRecord) -> None:
    line = fast_encode_line(record)
    assert line == encode_line(record)
    back = decode_record(json.loads(line))
    assert isinstance(back, StepRecord)
    # Written again, the same line (a record holding NaN is not equal to itself).
    assert fast_encode_line(back) == line
    if "NaN" not in line:
        assert back == record


@pytest.mark.slow  # about a second: 131072 records, each written twice
def test_every_float16_and_bfloat16_value_is_written_as_the_codec_writes_it() -> None:
    """Exhaustive over the 2 x 65536 16-bit patterns (NaNs, infinities, -0, subnormals),
    as the values an fp16 or bf16 run's statistics hold (Python floats)."""
    encode = _compiled(LayerStats)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        with np.errstate(invalid="ignore"):  # NaN patterns, cast as they are
            values = np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(np.float64).tolist()
        for value in values:
            record = LayerStats(name="fc", grad_norm=value, amax=value, underflow_share=0.5)
            assert encode(record) == _codec_text(record), (dtype, value)


def _routing(cls: type, record: Any) -> tuple[str, bool]:
    """The generated encoder's text of `record`, and whether it sent the record to the
    `_TextEncoder` (a fresh encoder of `cls`, its fallback watched)."""
    generic = _text_encoder(cls)
    sent: list[Any] = []

    def fallback(value: Any) -> str:
        sent.append(value)
        return generic.encode(value)

    encode = runlog._compile_text(cls, generic, fallback)
    assert encode is not None
    return encode(record), bool(sent)


@pytest.mark.parametrize(
    ("changes", "sent"),
    [
        ({}, False),
        ({"grad_norm": None, "headroom_log2": None}, False),
        ({"amax": -0.0, "underflow_share": 5e-324}, False),
        ({"amax": math.nan}, True),
        ({"amax": math.inf}, True),
        ({"grad_norm": -math.inf}, True),
        ({"headroom_log2": math.nan}, True),
        # Finite, but their sum is not: written right by the _TextEncoder.
        ({"amax": 1.7976931348623157e308, "underflow_share": 1.7976931348623157e308}, True),
        ({"amax": np.float64(0.5)}, True),  # repr() would write np.float64(0.5)
        ({"amax": 2}, True),  # the codec writes 2.0
        ({"nonfinite": np.bool_(True)}, True),
        ({"name": np.str_("fc")}, True),
    ],
)
def test_values_the_generated_encoder_does_not_write_go_to_the_text_encoder(
    changes: dict[str, Any], sent: bool
) -> None:
    record = dataclasses.replace(
        LayerStats(
            name="fc", grad_norm=0.25, amax=46.375, headroom_log2=10.46, underflow_share=0.1
        ),
        **changes,
    )
    text, was_sent = _routing(LayerStats, record)
    assert was_sent is sent
    assert text == _codec_text(record)


def test_a_nested_record_with_a_nonfinite_value_leaves_its_parent_generated() -> None:
    stats = StepStats(layers=(LayerStats(name="a", amax=math.inf), LayerStats(name="b")))
    text, was_sent = _routing(StepStats, stats)
    assert not was_sent  # only the layers went to their _TextEncoder
    assert text == _codec_text(stats)
    step = StepRecord(step=1, loss=math.nan, stats=stats)
    text, was_sent = _routing(StepRecord, step)
    assert was_sent
    assert text == encode_line(step)


def test_a_record_whose_first_fields_are_left_out_is_written_without_a_leading_comma() -> None:
    encode = _compiled(StepStats)
    for stats in (
        StepStats(),
        StepStats(act_zero_share=0.5),
        StepStats(grad_hist=Histogram(lo=0, counts=())),
    ):
        assert encode(stats) == _codec_text(stats)
    only_optional = dataclasses.make_dataclass(
        "OnlyOptional",
        [("a", typing.Optional[float], None), ("b", typing.Optional[int], None)],  # noqa: UP045
        bases=(records._Codable,),
        frozen=True,
        slots=True,
    )
    for values in ({}, {"b": 3}, {"a": 0.5}, {"a": 0.5, "b": 3}):
        record = only_optional(**values)
        assert _compiled(only_optional)(record) == _codec_text(record)


def test_keys_of_any_text_are_written_as_the_codec_writes_them() -> None:
    """A field's JSON key (its metadata's "json") is put in generated source: braces,
    quotes and backslashes in it must come out as the codec writes them."""
    odd = dataclasses.make_dataclass(
        "OddKeys",
        [
            ("a", float, dataclasses.field(default=0.5, metadata={"json": "x{y}\"'\\"})),
            ("b", typing.Optional[str], dataclasses.field(default=None, metadata={"json": "{}"})),  # noqa: UP045
            ("c", typing.Optional[int], dataclasses.field(default=1, metadata={"json": "é\n"})),  # noqa: UP045
            ("kind", ClassVar[str], 'st"{ep}'),
        ],
        bases=(records._Codable,),
        frozen=True,
        slots=True,
    )
    for values in ({}, {"b": "{v}", "c": None}, {"a": math.nan}):
        record = odd(**values)
        assert _compiled(odd)(record) == _codec_text(record)


def _int_list_codec(values: Any) -> str | type[BaseException]:
    """The codec's text of a tuple of ints (int() of each), or the type of its error."""
    try:
        return json.dumps([int(value) for value in values], separators=(",", ":"))
    except Exception as error:
        return type(error)


def _int_list_text(values: Any) -> str | type[BaseException]:
    try:
        return runlog._int_list_text(values)
    except Exception as error:
        return type(error)


ITEMS = (
    INTS
    | st.booleans()
    | INTS.map(lambda value: np.int64(value % 2**63))
    | st.sampled_from([np.uint8(7), np.int32(-3), np.bool_(True)])
    | FLOATS
    | st.sampled_from(["3", " 12 ", "x", None, 2.5, b"1"])
)


@given(values=st.lists(ITEMS, max_size=6))
def test_counts_of_any_type_are_written_as_the_codec_writes_them_or_refused_alike(
    values: list[Any],
) -> None:
    """`_int_list_text` writes a tuple by one `%d` format: whatever it is given (bools,
    numpy numbers, floats, strings), its text or its error is the codec's."""
    for given_as in (tuple(values), values):
        assert _int_list_text(given_as) == _int_list_codec(given_as)


def test_byte_counts_of_any_int_type_are_written_as_the_codec_writes_them() -> None:
    # Memory's dict[str, int] fields: numpy integers and bools through int(), as the codec.
    for params in ({"float32": np.int64(4096), "bfloat16": True}, {"a": 2**70, "b": -1}, {}):
        record = StepRecord(step=0, loss=0.5, stats=StepStats(memory=records.Memory(params=params)))  # type: ignore[arg-type]
        assert fast_encode_line(record) == encode_line(record)


def test_counts_longer_than_any_histogram_are_written_too() -> None:
    for size in (runlog._INT_LIST_FORMAT_MAX, runlog._INT_LIST_FORMAT_MAX + 1, 2500):
        counts = tuple(range(size))
        assert runlog._int_list_text(counts) == json.dumps(list(counts), separators=(",", ":"))
    assert max(runlog._INT_LIST_FORMATS) <= runlog._INT_LIST_FORMAT_MAX
