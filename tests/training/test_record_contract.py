"""The record contract has one owner: adding a field to the step record is a change to
`training/records.py` and to the one consumer that shows it, nothing else.

Three checks make that true rather than hoped for:
- every field of every record round-trips through the codec derived from the dataclass
  (so a new field needs no encoder or decoder of its own);
- a step record with an extra field, swapped in for `StepRecord`, is written by RunWriter,
  read back by RecordStream and offered by the GUI model's scalar columns with no other
  change;
- no module outside the contract spells a record's field names as dict keys (a hand-built
  record would need editing for every new field).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fpexplorer.gui.training import run_model
from fpexplorer.training import records
from fpexplorer.training.records import (
    EndRecord,
    HeaderRecord,
    StepRecord,
    decode_record,
    encode_line,
    record_fields,
)
from fpexplorer.training.runlog import RecordStream, RunWriter

PACKAGE = Path(records.__file__).resolve().parents[1]
CONTRACT = Path(records.__file__).resolve()


def _record_classes() -> list[type]:
    found: list[type] = []

    def visit(cls: type) -> None:
        if cls in found:
            return
        found.append(cls)
        for hint in typing.get_type_hints(cls).values():
            for arg in (
                hint,
                *typing.get_args(hint),
                *(a for inner in typing.get_args(hint) for a in typing.get_args(inner)),
            ):
                if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                    visit(arg)

    for cls in (HeaderRecord, StepRecord, EndRecord):
        visit(cls)
    return found


def _sample(hint: Any, seed: int) -> Any:
    """A value of `hint` that is not its field's default (so the round trip can fail)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is float:
        return [1.5, math.inf, -0.25][seed % 3]
    if hint is int:
        return 7 + seed
    if hint is bool:
        return True
    if hint is str:
        return f"s{seed}"
    if hint is Any:
        return {"k": [1, "x", None]}
    if type(None) in args:
        return _sample(next(a for a in args if a is not type(None)), seed)
    if origin is tuple:
        return (_sample(args[0], seed), _sample(args[0], seed + 1))
    if origin in (dict, typing.Mapping) or hint is dict:
        return {"a": _sample(args[1], seed)}
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        values = {
            item.name: _sample(hints[item.name], seed + index)
            for index, item in enumerate(dataclasses.fields(hint))
        }
        if hint is EndRecord:
            values["status"] = "failed"
        if hint is records.RankEnd:
            values["status"] = "lost"
        if hint is records.Histogram:
            values["lo"] = -3
        if hint is HeaderRecord:
            values["schema"] = records.SCHEMA_VERSION
        return hint(**values)
    raise AssertionError(f"no sample for {hint!r}")


def test_every_field_of_every_record_round_trips() -> None:
    classes = _record_classes()
    assert {c.__name__ for c in classes} >= {"StepStats", "Histogram", "LayerStats", "Memory"}
    for cls in (HeaderRecord, StepRecord, EndRecord):
        record = _sample(cls, 0)
        line = encode_line(record)
        back = decode_record(json.loads(line))
        assert back == record, cls.__name__
        # Each field is on the line under its JSON key (none dropped, none invented).
        assert set(json.loads(line)) == {"type", *record_fields(cls)}


def test_direct_constructors_make_what_the_dataclass_makes() -> None:
    # records.direct_constructor (the monitor's step records): the same record as the
    # dataclass's own __init__, given every field or only the required ones, and the
    # class itself where __init__ does more (a __post_init__ check, a default_factory).
    for cls in _record_classes():
        make = records.direct_constructor(cls)
        sample = _sample(cls, 1)
        values = {item.name: getattr(sample, item.name) for item in dataclasses.fields(cls)}
        if hasattr(cls, "__post_init__") or any(
            item.default_factory is not dataclasses.MISSING for item in dataclasses.fields(cls)
        ):
            assert make is cls, cls.__name__
            continue
        assert make is not cls, cls.__name__
        made = make(**values)
        assert type(made) is cls and made == sample, cls.__name__
        assert all(getattr(made, name) is value for name, value in values.items())
        required = {
            item.name: values[item.name]
            for item in dataclasses.fields(cls)
            if item.default is dataclasses.MISSING
        }
        assert make(**required) == cls(**required), cls.__name__
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.__setattr__(next(iter(values)), None)
    assert records.direct_constructor(EndRecord) is EndRecord  # its status is checked
    with pytest.raises(TypeError):
        records.direct_constructor(StepRecord)(loss=1.0)  # step is required, as in __init__


def test_a_direct_constructor_takes_keyword_only_fields_as_the_dataclass_does() -> None:
    # A record with a keyword-only field (a required one after fields with defaults, as
    # `field(kw_only=True)` allows): generating `def make(a=..., b)` was a SyntaxError at
    # import for any record class that gained one.
    @dataclass(frozen=True, slots=True)
    class Later:
        first: int
        second: float = 0.5
        added: str = field(kw_only=True)
        optional: int | None = field(default=None, kw_only=True)

    make = records.direct_constructor(Later)
    assert make is not Later
    assert make(1, added="x") == Later(1, added="x")
    assert make(1, 2.0, added="y", optional=3) == Later(1, 2.0, added="y", optional=3)
    with pytest.raises(TypeError):
        make(1, 2.0, "z")  # keyword-only, as in __init__
    with pytest.raises(TypeError):
        make(1)  # `added` is required


def test_a_new_step_field_travels_with_no_change_outside_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hints = typing.get_type_hints(StepRecord)
    fields = [
        (item.name, hints[item.name], dataclasses.field(default=item.default))
        if item.default is not dataclasses.MISSING
        else (item.name, hints[item.name])
        for item in dataclasses.fields(StepRecord)
    ]
    extended = dataclasses.make_dataclass(
        "StepRecord",
        [
            *fields,
            ("fp8_overflow_share", float, dataclasses.field(default=math.nan)),
            ("kind", ClassVar[str], "step"),
        ],
        bases=(records._Codable,),
        frozen=True,
        slots=True,
    )
    monkeypatch.setitem(records.RECORD_TYPES, "step", extended)
    path = tmp_path / "run.jsonl"
    with RunWriter(path) as writer:
        writer.write(HeaderRecord(config={"task": "t"}))
        writer.write(extended(step=0, loss=1.0, fp8_overflow_share=0.125))
    stream = RecordStream()
    read = stream.feed(path.read_bytes()) + stream.finish()
    assert stream.problems == []
    assert read[1].fp8_overflow_share == 0.125  # type: ignore[union-attr]
    assert '"fp8_overflow_share":0.125' in path.read_text()
    # The GUI's per-step columns come from the record's scalar fields.
    assert "fp8_overflow_share" in run_model.scalar_fields(extended)
    assert run_model.scalar_fields(StepRecord) == run_model.SCALAR_FIELDS


def _distinctive_keys() -> set[str]:
    """JSON keys of the records that mean nothing else (with an underscore: grad_hist,
    growth_tracker, ...): seeing one as a dict key outside the contract is a hand-built
    record. A format's range (min_normal, ...) and a quantization's error statistics
    (sqnr_db, ...) are the formats' vocabulary, not the log's."""
    from fpexplorer.formats.block_quantize import ErrorStats

    classes = [cls for cls in _record_classes() if cls is not records.FormatRange]
    formats_vocabulary = {item.name for item in dataclasses.fields(ErrorStats)}
    return {
        key
        for cls in classes
        for key in record_fields(cls)
        if "_" in key and key not in formats_vocabulary
    }


def _hand_built_records(source: str) -> list[str]:
    keys = _distinctive_keys()
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            literal = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if literal & keys:
                found.append(f"line {node.lineno}: dict with {sorted(literal & keys)}")
            kinds = [
                v.value
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "type" and isinstance(v, ast.Constant)
            ]
            if set(kinds) & set(records.RECORD_TYPES):
                found.append(f"line {node.lineno}: a {kinds[0]!r} record as a dict")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in keys:
                found.append(f"line {node.lineno}: record[{key.value!r}] = ...")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in keys
        ):
            found.append(f"line {node.lineno}: .get({node.args[0].value!r})")
    return found


def test_no_module_outside_the_contract_spells_record_fields() -> None:
    offenders: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == CONTRACT:
            continue
        found = _hand_built_records(path.read_text(encoding="utf-8"))
        if found:
            offenders[path.relative_to(PACKAGE).as_posix()] = found
    assert not offenders, f"build records from fpexplorer.training.records: {offenders}"


def test_the_check_sees_a_hand_built_record() -> None:
    """The scan above is not vacuous: it finds each way of spelling a record by hand."""
    source = (
        "a = {'type': 'step', 'step': 0}\n"
        "b = {'grad_hist': None}\n"
        "c = {}\nc['growth_tracker'] = 1\n"
        "d = c.get('first_nonfinite')\n"
    )
    assert len(_hand_built_records(source)) == 4
