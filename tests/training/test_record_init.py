"""The record classes' __init__ (`records._slot_init`, each slot set directly): the same
record as the dataclass's own __init__ makes (`records.DATACLASS_INITS`), from the same
arguments, with the same defaults, fresh default_factory values, `__post_init__` checks,
errors and signature."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math
import pickle
import typing
from typing import Any

import pytest
from test_record_contract import _record_classes, _sample

from fpexplorer.training import records
from fpexplorer.training.records import EndRecord, Histogram, StepStats


def _by_dataclass(cls: type, *args: Any, **kwargs: Any) -> Any:
    record = object.__new__(cls)
    records.DATACLASS_INITS[cls](record, *args, **kwargs)
    return record


def _outcome(make: Any, *args: Any, **kwargs: Any) -> Any:
    """The record `make` builds (its fields, by identity where they are the arguments),
    or the type of the error it raises."""
    try:
        record = make(*args, **kwargs)
    except Exception as error:
        return type(error)
    return type(record), tuple(getattr(record, item.name) for item in dataclasses.fields(record))


CLASSES = _record_classes()


def test_every_record_class_has_the_direct_init() -> None:
    assert set(CLASSES) <= set(records.DATACLASS_INITS)
    for cls in CLASSES:
        assert cls.__init__ is not records.DATACLASS_INITS[cls], cls.__name__  # type: ignore[misc]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_record_is_made_as_the_dataclass_makes_it(cls: type) -> None:
    fields = dataclasses.fields(cls)
    for seed in range(3):
        sample = _sample(cls, seed)
        values = {item.name: getattr(sample, item.name) for item in fields}
        made = cls(**values)
        expected = _by_dataclass(cls, **values)
        assert made == expected
        assert all(getattr(made, name) is value for name, value in values.items())
        # Positionally, as far as the fields allow.
        positional = [values[item.name] for item in fields if item.kw_only is not True]
        keywords = {item.name: values[item.name] for item in fields if item.kw_only is True}
        assert cls(*positional, **keywords) == expected
    required = {
        item.name: getattr(_sample(cls, 0), item.name)
        for item in fields
        if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
    }
    assert _outcome(cls, **required) == _outcome(_by_dataclass, cls, **required)
    first, second = cls(**required), cls(**required)
    for item in fields:  # each default_factory called for each record, as the dataclass does
        if item.default_factory is not dataclasses.MISSING:
            assert getattr(first, item.name) is not getattr(second, item.name)
            assert getattr(first, item.name) == item.default_factory()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(first, fields[0].name, None)
    # (Compared as JSON: a NaN default read back from a pickle is another NaN object.)
    for again in (pickle.loads(pickle.dumps(first)), copy.deepcopy(first)):
        assert type(again) is cls and json.dumps(again.to_json()) == json.dumps(first.to_json())
    assert dataclasses.replace(first) == first


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_signature_is_the_dataclasses(cls: type) -> None:
    # Names, kinds, defaults (<factory> for a default_factory), annotations.
    assert str(inspect.signature(cls.__init__)) == str(  # type: ignore[misc]
        inspect.signature(records.DATACLASS_INITS[cls])
    )
    # The annotations resolve as the dataclass's do, in the records module (they are
    # strings there): the generated __init__'s globals were its own, where a nested record
    # class (Histogram, StepStats, ...) or `Any` was a NameError (this failed before).
    original = records.DATACLASS_INITS[cls]
    assert typing.get_type_hints(cls.__init__) == typing.get_type_hints(original)  # type: ignore[misc]
    resolved = inspect.signature(cls.__init__, eval_str=True)  # type: ignore[misc]
    assert str(resolved) == str(inspect.signature(original, eval_str=True))


@pytest.mark.parametrize(
    ("cls", "args", "kwargs"),
    [
        (Histogram, (), {"lo": 5000, "counts": (1,)}),  # beyond any format: __post_init__
        (Histogram, (-3, (1, -1)), {}),  # a negative count
        (Histogram, (-3,), {}),  # counts missing
        (Histogram, (-3, (1,)), {"bins": 3}),  # no such field
        (Histogram, (-3, (1,), 0, 0, 0, None, "extra"), {}),  # too many
        (Histogram, (-3, (1,)), {"lo": 2}),  # lo twice
        (EndRecord, (), {"status": "crashed"}),  # not an end status
        (EndRecord, ("failed",), {"steps": 2, "elapsed": math.inf}),
        (records.RankEnd, (1, "lost"), {}),
        (records.RankEnd, (1, "gone"), {}),
        (StepStats, (None, None, 0.5), {"format_shares": {"x": None}}),
        (records.LayerStats, (), {}),
    ],
)
def test_checks_and_errors_are_the_dataclasses(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert _outcome(cls, *args, **kwargs) == _outcome(_by_dataclass, cls, *args, **kwargs)


def _made_by(init: Any, cls: type, *args: Any, **kwargs: Any) -> Any:
    record = object.__new__(cls)
    init(record, *args, **kwargs)
    return record


def test_a_record_class_with_keyword_only_fields_and_factories_gets_its_parameters() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Later:
        first: int
        second: float = 0.5
        added: str = dataclasses.field(kw_only=True)
        tags: dict[str, int] = dataclasses.field(default_factory=dict, kw_only=True)

        def __post_init__(self) -> None:
            if self.first < 0:
                raise ValueError("negative")

    init = records._slot_init(Later)
    assert init is not None
    original = Later.__init__
    for args, kwargs in [
        ((1,), {"added": "x"}),
        ((1, 2.0), {"added": "y", "tags": {"a": 1}}),
        ((1, 2.0, "z"), {}),  # keyword-only
        ((1,), {}),  # `added` is required
        ((-1,), {"added": "x"}),  # __post_init__
    ]:
        assert _outcome(_made_by, init, Later, *args, **kwargs) == _outcome(
            _made_by, original, Later, *args, **kwargs
        )
    made = object.__new__(Later)
    init(made, 1, added="x")
    assert made.tags == {} and made.tags is not Later(1, added="x").tags
