"""The run-log record contract: the one place that knows what a record holds. Torch-free.

A run log is JSON Lines: one `HeaderRecord`, one `StepRecord` per training step, one
`EndRecord`. Every writer (the monitor, the training job, the GUI's synthetic job) builds
these frozen dataclasses; every reader (file tail, replay, the panel's job reader, the
`fpexplorer runs` commands) gets them back from `RecordStream` (in `runlog`). Nobody else
spells a field name as a string.

Writing::

    record = StepRecord(step=3, loss=0.25, scale=65536.0, skipped=False, growth_tracker=3,
                        lr=1e-3, grad_norm=0.5, steps_per_s=12.0, time=0.3,
                        stats=StepStats(grad_hist=Histogram(lo=-30, counts=(1, 2), zero=0)))
    line = encode_line(record)          # one line of strict JSON, no newline
    writer.write(record)                # RunWriter: flushed, locked file (see runlog)

Reading::

    record = decode_record(json_object, schema=header_schema)   # or use RecordStream

How fields map to JSON: each dataclass field is a JSON key of the same name (unless its
metadata says `json="other"`), encoded and decoded from its type hint (`_codec_of`, built
once per class): floats that are not finite become the strings "NaN", "Infinity",
"-Infinity" (strict JSON parsers read the file; `decode_float` turns them back), tuples
become lists, nested records objects. A field whose value is None and whose default is None
is left out of the line. Keys a reader does not know are ignored.

Adding a field is therefore one line here, with a default (so that older logs, which lack
it, still read), plus the one consumer that shows it: the codec, the writers' plumbing and
the readers follow from the dataclass (tests/training/test_record_contract.py holds that).
An added optional field needs no new schema. A field that moves or changes meaning does:
bump `SCHEMA_VERSION` and add `UPGRADES[old]`, the step that rewrites an old record.

Schema versions: the header carries `schema`. Records of an older schema are upgraded on
reading, one `UPGRADES[n]` step per version (n -> n + 1), so a schema-1 log reads forever
(tests/training/data keeps real ones). A log of a newer schema than `SCHEMA_VERSION` is
refused (`NewerSchemaError`) rather than read as if it were old.

Hand-built dicts (tests; older callers) become records through `from_schema1_dict`, which
takes schema 1's layout or today's; `RunWriter.write` accepts them that way too.

- schema 1: statistics fields (`grad_hist`, `layers`, ...) flat on the step record.
- schema 2: statistics grouped in `stats` (absent on steps without statistics); the end
  record may carry the `traceback` of a failure; `lost_updates.intended` is read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

SCHEMA_VERSION = 2

_R = TypeVar("_R")

# Binade exponents of any float format lie well within this (FP64's reach is -1074..1023).
MAX_BINADE = 4096
END_STATUSES = ("completed", "stopped", "failed")

_TEXT_TO_FLOAT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class NewerSchemaError(ValueError):
    """A log written by a newer fpexplorer than this one: its fields may mean other things."""


# ---------------------------------------------------------------------------------------
# Scalars


def decode_float(value: Any) -> float:
    """A float from a JSON value: numbers, "NaN", "Infinity", "-Infinity". Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in _TEXT_TO_FLOAT:
        return _TEXT_TO_FLOAT[value]
    raise ValueError(f"expected a number, got {value!r}")


def encode_float(value: float) -> float | str:
    """A float as strict JSON allows it: non-finite values as their string spellings."""
    value = float(value)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _decode_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def _decode_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"expected true or false, got {value!r}")


def _decode_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def encode_json_value(value: Any) -> Any:
    """Free-form JSON (a header's config): non-finite floats spelled out, numpy scalars
    as Python numbers. Raises TypeError for anything JSON cannot hold."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, Mapping):
        return {str(key): encode_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_json_value(item) for item in value]
    if hasattr(value, "item"):  # numpy scalars
        return encode_json_value(value.item())
    raise TypeError(f"cannot write {type(value).__name__} to a run log")


# ---------------------------------------------------------------------------------------
# The codec: JSON <-> dataclass, derived from the fields' type hints

_SCALARS = (float, int, bool, str)


class _AlwaysDecode:
    """The type of no JSON value: the `exact` type of a field whose value always goes
    through its decoder (a nested record, a mapping, free-form JSON)."""


_Encode = Callable[[Any], Any]
_Decode = Callable[[Any], Any]


def _codec_of(hint: Any) -> tuple[_Encode, _Decode]:
    """(encode, decode) for one type hint; the small set of shapes records use."""
    if hint is Any:
        return encode_json_value, lambda value: value
    if hint is float:
        return encode_float, decode_float
    if hint is int:
        return int, _decode_int
    if hint is bool:
        return bool, _decode_bool
    if hint is str:
        return str, _decode_str
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner_encode, inner_decode = _codec_of(next(a for a in args if a is not type(None)))
        return (
            lambda value: None if value is None else inner_encode(value),
            lambda value: None if value is None else inner_decode(value),
        )
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item_encode, item_decode = _codec_of(args[0])
        # A histogram's counts: a JSON list whose items all have the item type already is
        # what decoding each would give (a call per count was half a statistics step's cost).
        exact = args[0] if args[0] in _SCALARS else None

        def decode_tuple(value: Any) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise ValueError(f"expected a list, got {type(value).__name__}")
            if exact is not None and all(type(item) is exact for item in value):
                return tuple(value)
            return tuple(item_decode(item) for item in value)

        return lambda value: [item_encode(item) for item in value], decode_tuple
    if origin in (dict, Mapping) and args and args[0] is str:
        item_encode, item_decode = _codec_of(args[1])

        def decode_mapping(value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise ValueError(f"expected an object, got {type(value).__name__}")
            return {str(key): item_decode(item) for key, item in value.items()}

        return (
            lambda value: {str(key): item_encode(item) for key, item in value.items()},
            decode_mapping,
        )
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _encode_dataclass, lambda value: _decode_dataclass(hint, value)
    raise TypeError(f"no run-log codec for {hint!r}")


@dataclass(frozen=True, slots=True)
class _FieldCodec:
    name: str  # the attribute
    key: str  # the JSON key
    encode: _Encode
    decode: _Decode
    required: bool
    omit_none: bool  # None is the default: leave the key out
    # A JSON value of this type is the decoded value itself (a scalar field, or an optional
    # one): no call to `decode`. `_AlwaysDecode` for the other fields.
    exact: type


_PLANS: dict[type, tuple[_FieldCodec, ...]] = {}


def _plan(cls: type) -> tuple[_FieldCodec, ...]:
    """The codec of each field of a record class, built once per class."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        codecs = []
        for item in dataclasses.fields(cls):
            hint = hints[item.name]
            encode, decode = _codec_of(hint)
            args = typing.get_args(hint)
            if len(args) == 2 and type(None) in args:  # X | None: X
                hint = next(a for a in args if a is not type(None))
            no_default = (
                item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
            )
            codecs.append(
                _FieldCodec(
                    name=item.name,
                    key=item.metadata.get("json", item.name),
                    encode=encode,
                    decode=decode,
                    required=no_default,
                    omit_none=item.default is None,
                    exact=hint if hint in _SCALARS else _AlwaysDecode,
                )
            )
        plan = _PLANS[cls] = tuple(codecs)
    return plan


def record_fields(cls: type) -> tuple[str, ...]:
    """The JSON keys of a record class, in the order they are written."""
    return tuple(codec.key for codec in _plan(cls))


def _encode_dataclass(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = record_kind(type(value))
    if kind is not None:
        out["type"] = kind  # first on the line: the stream resynchronises on it
    for codec in _plan(type(value)):
        item = getattr(value, codec.name)
        if item is None and codec.omit_none:
            continue
        out[codec.key] = codec.encode(item)
    return out


def _decode_dataclass(cls: type, value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object for {cls.__name__}, got {type(value).__name__}")
    arguments = {}
    for codec in _plan(cls):
        if codec.key in value:
            item = value[codec.key]
            # bool is a subclass of int, and a float's int: the exact type, not isinstance.
            arguments[codec.name] = item if type(item) is codec.exact else codec.decode(item)
        elif codec.required:
            raise ValueError(f"{cls.__name__} without {codec.key!r}")
    return cls(**arguments)


class _Codable:
    """`to_json()` / `from_json()` for the record dataclasses below."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """This record as a JSON-ready dict (strict JSON: non-finite floats spelled out)."""
        return _encode_dataclass(self)

    @classmethod
    def from_json(cls, value: Any) -> Any:
        """The record from a decoded JSON object; ValueError when it is malformed."""
        return _decode_dataclass(cls, value)


# ---------------------------------------------------------------------------------------
# Nested records


@dataclass(frozen=True, slots=True)
class Histogram(_Codable):
    """Counts of |x| by binade: `counts[i]` = number of finite non-zero x with
    floor(log2 |x|) == lo + i; plus exact zeros, infinities and NaNs."""

    lo: int
    counts: tuple[int, ...]
    zero: int = 0
    inf: int = 0
    nan: int = 0
    dtype: str | None = None  # the dtype the values had (activation gradients)

    def __post_init__(self) -> None:
        if abs(self.lo) > MAX_BINADE:  # no format has such exponents: damage
            raise ValueError(f"histogram starts at binade {self.lo}, beyond any format")
        if min((self.zero, self.inf, self.nan, *self.counts)) < 0:
            raise ValueError("a histogram count is negative")

    @property
    def total(self) -> int:
        return sum(self.counts) + self.zero + self.inf + self.nan

    @property
    def exponents(self) -> range:
        """floor(log2 |x|) of each bin."""
        return range(self.lo, self.lo + len(self.counts))


@dataclass(frozen=True, slots=True)
class LayerStats(_Codable):
    """Statistics of one module's gradients on a statistics step."""

    name: str
    # L2 norm of the module's parameter gradients; None for a module without parameters
    # (a ReLU has no gradient norm: 0 would read as "all its gradients are zero").
    grad_norm: float | None = None
    amax: float = math.nan  # max |scaled activation gradient|
    headroom_log2: float | None = None  # log2(65504 / amax); None when amax is 0 or not finite
    underflow_share: float = 0.0  # share below FP16's smallest subnormal (2**-24)
    nonfinite: bool = False


@dataclass(frozen=True, slots=True)
class FormatShares(_Codable):
    """Shares of the current gradients that a format would flush, make subnormal or overflow."""

    underflow: float
    subnormal: float
    overflow: float


@dataclass(frozen=True, slots=True)
class LostUpdates(_Codable):
    """Share of parameter updates lost to rounding: kind "actual" in pure-fp16, otherwise
    "fp16_would_lose" (what FP16 weights would have lost). A complex weight's real and
    imaginary parts are two weights here (as torch's optimizers update them)."""

    share: float
    kind: str
    intended: int | None = None  # updates that were not zero before rounding
    # On a large model the share is measured on a random sample of the weights: `sampled`
    # intended updates, and the whole model's share lies within +-`bound` of `share`
    # (99.9% confidence). Both None when every weight was checked (exact).
    sampled: int | None = None
    bound: float | None = None
    # Of the intended updates (of the sample, when sampled), those to weights whose FP16
    # value is inf or NaN (|w| > 65504, or w not finite): FP16 cannot hold the weight, so
    # `share` says nothing of rounding there (an inf weight reads as an update lost). None:
    # none, or a log from before this was counted.
    nonfinite_weights: int | None = None


@dataclass(frozen=True, slots=True)
class Memory(_Codable):
    """Bytes by dtype of parameters, gradients, optimizer state and saved activations."""

    params: dict[str, int] = field(default_factory=dict)
    grads: dict[str, int] = field(default_factory=dict)
    optimizer: dict[str, int] = field(default_factory=dict)
    activations: dict[str, int] = field(default_factory=dict)
    peak_device: int | None = None

    @property
    def total(self) -> int:
        return sum(
            sum(part.values())
            for part in (self.params, self.grads, self.optimizer, self.activations)
        )


@dataclass(frozen=True, slots=True)
class FormatRange(_Codable):
    """A format's range as the header states it: largest finite, smallest normal and
    smallest subnormal magnitudes."""

    max: float
    min_normal: float
    min_subnormal: float


@dataclass(frozen=True, slots=True)
class DeviceInfo(_Codable):
    type: str = ""  # "cpu", "cuda", ...
    name: str = ""  # the CPU model or the GPU's name


@dataclass(frozen=True, slots=True)
class ModelInfo(_Codable):
    params: int = 0
    layers: tuple[str, ...] = ()  # the monitored modules, in forward order
    class_name: str | None = field(default=None, metadata={"json": "class"})


# The tensors of a quantized linear layer whose low-precision cast the monitor measures.
QUANT_ROLES = ("input", "weight", "grad_output")


@dataclass(frozen=True, slots=True)
class QuantTensorStats(_Codable):
    """How one tensor of one quantized linear layer fared in its low-precision format
    (FP8, MX, NVFP4 recipes) on a statistics step.

    `scale` follows torchao's convention: the factor the tensor is multiplied by before
    the cast (E4M3's 448 / amax for current per-tensor scaling). Block-scaled recipes have
    one scale per block instead: `scale_hist` counts the blocks by the binade of their
    scale (floor(log2 scale)), the block format's own scale, which the block's elements
    are multiplied by to dequantize (E8M0's 2**e for MX, s_block for NVFP4; FP8 rowwise
    counts each row as a block, its scale 1 / torchao's row scale), and `scale` is the
    per-tensor scale NVFP4 adds on top, or None. Shares are of all the tensor's elements."""

    layer: str  # the module's name in the model
    role: str  # one of QUANT_ROLES
    format: str  # the element format the tensor is cast to, as the formats engine names it
    amax: float  # max |x| of the tensor before scaling (NaN/inf when the tensor holds them)
    scale: float | None = None  # per-tensor scale used (x * scale is cast); None: blocks only
    scale_hist: Histogram | None = None  # block scales by binade (block-scaled recipes)
    saturated: float = 0.0  # share clamped to the format's largest finite value
    flushed: float = 0.0  # share of non-zero values that became zero
    sqnr_db: float = math.nan  # 10*log10(sum x^2 / sum (x - q(x))^2); inf when exact


@dataclass(frozen=True, slots=True)
class StepStats(_Codable):
    """What a statistics step adds to a step (every `stats_every` steps)."""

    grad_hist: Histogram | None = None  # parameter gradients, unscaled (complex: both parts)
    act_hist: Histogram | None = None  # activation gradients, as scaled by the loss scale
    act_zero_share: float | None = None
    layers: tuple[LayerStats, ...] = ()
    first_nonfinite: str | None = None  # backward order: where the gradient overflow started
    first_nonfinite_forward: str | None = None  # forward order: first module with an inf output
    format_shares: dict[str, FormatShares] = field(default_factory=dict)
    lost_updates: LostUpdates | None = None
    memory: Memory | None = None
    # Quantized linear layers (fp8 / MX / NVFP4 modes): one entry per layer and role.
    quant: tuple[QuantTensorStats, ...] = ()
    # Why the activation-gradient statistics (act_hist, act_zero_share, the layers' amax and
    # underflow) were not measured on a step that should have them: "compiled model", or
    # "compiled model; forward outputs not checked" when first_nonfinite_forward was not
    # either. None when they were, or when the step took parameter gradients only (a skip
    # between statistics steps).
    activations_not_measured: str | None = None


@dataclass(frozen=True, slots=True)
class RankInfo(_Codable):
    """Which process of a torch.distributed job wrote a log (header `ranks`).

    Each rank's own log (`RUN.rank-K.jsonl`) names its rank and host; the merged log that
    rank 0 writes (`RUN.jsonl`) has `merged` true."""

    rank: int
    world_size: int
    host: str = ""
    local_rank: int = 0
    parallel: str | None = None  # "ddp", "fsdp", or None: the user's own wrapping
    merged: bool = False


@dataclass(frozen=True, slots=True)
class RankStep(_Codable):
    """What the merged log adds to a step on which the ranks exchanged their figures
    (statistics steps and skipped steps): each rank's view, index = rank.

    `nonfinite_ranks` are the ranks where the overflow started: those whose own loss,
    forward outputs or activation gradients (all computed before any gradient is
    communicated) were not finite. `first_nonfinite_rank` is the lowest of them (ranks run
    their backward at the same time: there is no earlier or later between them) and
    `first_nonfinite_layer` is where it started on that rank."""

    losses: tuple[float, ...] = ()
    scales: tuple[float, ...] = ()
    skipped: tuple[bool, ...] = ()
    steps_per_s: tuple[float, ...] = ()
    scale_mismatch: bool = False  # the ranks' loss scales differ: a bug in the job
    nonfinite_ranks: tuple[int, ...] = ()
    first_nonfinite_rank: int | None = None
    first_nonfinite_layer: str | None = None


# How a rank ended, as the merged end record lists it: an end status, or "lost" for a rank
# that wrote no end record in time (killed, its host gone).
RANK_END_STATUSES = (*END_STATUSES, "lost")


@dataclass(frozen=True, slots=True)
class RankEnd(_Codable):
    """How one rank ended (the merged log's end record)."""

    rank: int
    status: str  # one of RANK_END_STATUSES
    error: str | None = None
    steps: int | None = None
    ended_at: float | None = None  # when, in seconds since the epoch (the first failure)

    def __post_init__(self) -> None:
        if self.status not in RANK_END_STATUSES:
            raise ValueError(f"unknown rank end status {self.status!r}")


# ---------------------------------------------------------------------------------------
# The three record types


@dataclass(frozen=True, slots=True)
class HeaderRecord(_Codable):
    """The first record of a run: settings, device, model and the formats' ranges."""

    kind: ClassVar[str] = "header"
    schema: int = SCHEMA_VERSION
    config: dict[str, Any] = field(default_factory=dict)  # the job's TrainConfig, or the loop's
    fpexplorer_version: str | None = field(default=None, metadata={"json": "fpexplorer"})
    torch_version: str | None = field(default=None, metadata={"json": "torch"})
    started: str | None = None  # ISO 8601, UTC
    device: DeviceInfo = field(default_factory=DeviceInfo)
    model: ModelInfo = field(default_factory=ModelInfo)
    formats: dict[str, FormatRange] = field(default_factory=dict)
    ranks: RankInfo | None = None  # a torch.distributed job: who wrote this log

    @property
    def precision(self) -> str:
        return str(self.config.get("precision", ""))

    @property
    def task(self) -> str:
        return str(self.config.get("task", ""))

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def device_name(self) -> str:
        return self.device.name

    @property
    def params(self) -> int:
        return self.model.params

    @property
    def layers(self) -> tuple[str, ...]:
        return self.model.layers


@dataclass(frozen=True, slots=True)
class StepRecord(_Codable):
    """One training step: the cheap signals always, `stats` on statistics steps."""

    kind: ClassVar[str] = "step"
    step: int
    loss: float
    scale: float = 1.0  # the loss scale this step used
    skipped: bool = False  # the optimizer step was skipped (inf/NaN gradients)
    growth_tracker: int = 0
    lr: float = math.nan
    grad_norm: float = math.nan
    steps_per_s: float = math.nan
    time: float = math.nan  # seconds since the monitor started
    stats: StepStats | None = None
    # Loss-scaled runs: max |parameter gradient| after unscaling (inf/NaN when they
    # overflowed), every step: what `training.replay_scaler` decides overflow from.
    grad_amax: float | None = None
    # The scaler's hysteresis tracker after this step's update: overflows left before the
    # scale backs off (DeepSpeed's and Megatron's policies; None for torch's GradScaler).
    hysteresis: int | None = None
    ranks: RankStep | None = None  # merged log: the ranks' figures (exchange steps only)
    # AmpMonitor watching several optimizers (a GAN's two, one per parameter group): what
    # each did, in the order given: "stepped", "skipped" (the scaler found inf/NaN in its
    # gradients), "idle" (not stepped). None with one optimizer (`skipped` says it all).
    # A merged log of several ranks carries rank 0's (`skipped` there is any rank's).
    optimizer_outcomes: tuple[str, ...] | None = None

    @property
    def has_stats(self) -> bool:
        return self.stats is not None

    # Read-side shortcuts into `stats` (None on steps without statistics).
    @property
    def grad_hist(self) -> Histogram | None:
        return self.stats.grad_hist if self.stats else None

    @property
    def act_hist(self) -> Histogram | None:
        return self.stats.act_hist if self.stats else None

    @property
    def act_zero_share(self) -> float | None:
        return self.stats.act_zero_share if self.stats else None

    @property
    def layers(self) -> tuple[LayerStats, ...]:
        return self.stats.layers if self.stats else ()

    @property
    def format_shares(self) -> dict[str, FormatShares]:
        return self.stats.format_shares if self.stats else {}

    @property
    def first_nonfinite(self) -> str | None:
        return self.stats.first_nonfinite if self.stats else None

    @property
    def first_nonfinite_forward(self) -> str | None:
        return self.stats.first_nonfinite_forward if self.stats else None

    @property
    def lost_updates(self) -> LostUpdates | None:
        return self.stats.lost_updates if self.stats else None

    @property
    def memory(self) -> Memory | None:
        return self.stats.memory if self.stats else None


@dataclass(frozen=True, slots=True)
class EndRecord(_Codable):
    """The last record: how the run ended."""

    kind: ClassVar[str] = "end"
    status: str  # one of END_STATUSES
    error: str | None = None  # one line
    steps: int = 0
    elapsed: float = math.nan
    traceback: str | None = None  # the failure's Python traceback, when there was one
    ranks: tuple[RankEnd, ...] = ()  # merged log: how each rank ended

    def __post_init__(self) -> None:
        if self.status not in END_STATUSES:
            raise ValueError(f"unknown end status {self.status!r}")


Record = Union[HeaderRecord, StepRecord, EndRecord]  # noqa: UP007 (runtime alias on 3.10)
RECORD_TYPES: dict[str, type[HeaderRecord] | type[StepRecord] | type[EndRecord]] = {
    "header": HeaderRecord,
    "step": StepRecord,
    "end": EndRecord,
}
# The "type" each record class is written with, found once per class (see record_kind).
_KINDS: dict[type, str | None] = {}


def record_kind(cls: type) -> str | None:
    """The "type" a record of class `cls` is written with: the `kind` its class, or the
    nearest base that does, declares as a class variable of its own (the top-level records
    above); None for a nested record (LostUpdates' `kind` is a data field, no string).

    A subclass of a record type (a user's, a test's) is written as that record type, and
    read back as one. TypeError for one that adds fields or declares another `kind`: its
    line could not carry them (readers drop keys they do not know, and skip unknown types,
    so its records would be lost on reading)."""
    try:
        return _KINDS[cls]
    except KeyError:
        pass
    declared = [c for c in cls.__mro__ if isinstance(c.__dict__.get("kind"), str)]
    kind: str | None = declared[0].__dict__["kind"] if declared else None
    if declared and declared[-1] is not cls:  # derived from a record type
        base = declared[-1]
        added = [item.name for item in dataclasses.fields(cls)][len(dataclasses.fields(base)) :]
        if added or kind != base.__dict__["kind"]:
            what = f"the fields {', '.join(added)}" if added else f"the kind {kind!r}"
            raise TypeError(
                f"{cls.__name__} is written as a {base.__name__} "
                f"(type {base.__dict__['kind']!r}), which has no place for {what}: add "
                f"fields to {base.__name__} in fpexplorer/training/records.py, or write a "
                f"{base.__name__}"
            )
    _KINDS[cls] = kind
    return kind


# ---------------------------------------------------------------------------------------
# Making records: an __init__ that sets the slots directly

# A record's parameter left to its default_factory (dataclasses' own sentinel is private).
_FACTORY_DEFAULT: Any = type("_FactoryDefault", (), {"__repr__": lambda self: "<factory>"})()


def _slot_init(cls: type) -> Callable[..., None] | None:
    """An `__init__` for a frozen slots dataclass that does what the dataclass's own does
    (the same parameters, defaults, keyword-only fields, default_factory calls and
    `__post_init__`) but sets each field through its slot's member descriptor: a frozen
    dataclass's `__init__` goes through object.__setattr__ for each field, 40% of making a
    LayerStats, and a statistics step makes a dozen records (the transformer's, over twenty). None
    where a field is not a plain init slot (the dataclass's own stays)."""
    namespace: dict[str, Any] = {"_FACTORY_DEFAULT": _FACTORY_DEFAULT}
    parameters = ["self"]
    keyword_only: list[str] = []  # after a `*`, as __init__ takes them
    body: list[str] = []
    for item in dataclasses.fields(cls):
        slot: Any = cls.__dict__.get(item.name)
        name = item.name
        if not item.init or not hasattr(slot, "__set__") or name == "self":
            return None
        namespace[f"_set_{name}"] = slot.__set__
        taken = keyword_only if item.kw_only is True else parameters
        value = name
        if item.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = item.default_factory
            taken.append(f"{name}=_FACTORY_DEFAULT")
            value = f"_factory_{name}() if {name} is _FACTORY_DEFAULT else {name}"
        elif item.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = item.default
            taken.append(f"{name}=_default_{name}")
        else:
            taken.append(name)
        body.append(f"    _set_{name}(self, {value})")
    if keyword_only:
        parameters += ["*", *keyword_only]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    # Made inside a function of the names above (as dataclasses makes __init__), run in the
    # class's module: its __globals__ are the module's, where its string annotations resolve
    # (typing.get_type_hints(cls.__init__), inspect.signature(cls, eval_str=True)).
    source = "\n".join(
        [
            f"def _make_init({', '.join(namespace)}):",
            f"    def __init__({', '.join(parameters)}):",
            *[f"    {line}" for line in body or ["    pass"]],
            "    return __init__",
        ]
    )
    module = sys.modules.get(cls.__module__)
    made: dict[str, Any] = {}
    # Field names only: identifiers, from the dataclass.
    exec(source, vars(module) if module is not None else {}, made)
    init: Callable[..., None] = made["_make_init"](**namespace)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(getattr(cls.__init__, "__annotations__", {}))  # type: ignore[misc]
    return init


# The dataclasses' own __init__ of the record classes, replaced below (the tests compare).
DATACLASS_INITS: dict[type, Callable[..., None]] = {}
for _record_class in [
    value
    for value in list(globals().values())
    if isinstance(value, type) and issubclass(value, _Codable) and value is not _Codable
]:
    _init = _slot_init(_record_class)
    if _init is not None:
        DATACLASS_INITS[_record_class] = _record_class.__init__
        setattr(_record_class, "__init__", _init)  # noqa: B010 (mypy: no method assignment)
del _record_class, _init


# ---------------------------------------------------------------------------------------
# Schema upgrades: UPGRADES[n] turns a record of schema n into one of schema n + 1

_SCHEMA1_STATS_KEYS = tuple(item.name for item in dataclasses.fields(StepStats))


def _upgrade_1_to_2(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 wrote the statistics flat on the step record: group them in `stats`."""
    kind = raw.get("type")
    if kind == "header":
        return {**raw, "schema": 2}
    if kind != "step":
        return raw
    flat = {key: raw[key] for key in _SCHEMA1_STATS_KEYS if key in raw}
    if not flat:
        return raw
    upgraded = {key: value for key, value in raw.items() if key not in flat}
    upgraded["stats"] = flat
    return upgraded


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _upgrade_1_to_2}


def upgrade(raw: dict[str, Any], schema: int) -> dict[str, Any]:
    """A decoded record of `schema` brought to SCHEMA_VERSION, one step per version."""
    if schema > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"schema {schema} is newer than this fpexplorer reads ({SCHEMA_VERSION}): "
            "update fpexplorer to read this run"
        )
    if schema < 1:
        raise ValueError(f"no run-log schema {schema}")
    for version in range(schema, SCHEMA_VERSION):
        raw = UPGRADES[version](raw)
    return raw


class _FlatDecoder:
    """`from_json` for a record whose line holds scalars only (a step record without
    statistics: nearly every line of a log), in one loop with no call per field where the
    JSON value already has the field's type: about a third of the generic codec's cost.
    Derived from the dataclass like the codec (an added field needs nothing here), and
    equal to it: a value of another type goes through the field's own decoder (the same
    errors), a missing required field is the same error, unknown keys are ignored, and
    a line holding a nested field (`stats`, `ranks`) returns None: the codec reads it.
    A tuple of scalars is decoded by its field's decoder: a line of it stays flat.
    `tests/training/test_runlog_decode_fast.py` holds it equal to the codec."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        self.cls = cls
        # (JSON key, attribute, the type a JSON value passes as is, its decoder, required)
        self.fields: list[tuple[str, str, type, _Decode, bool]] = []
        self.nested_keys: list[str] = []  # present on a line: the generic codec reads it
        for codec in _plan(cls):
            hint = hints[codec.name]
            args = typing.get_args(hint)
            optional = len(args) == 2 and type(None) in args
            inner = next(a for a in args if a is not type(None)) if optional else hint
            if inner in _SCALARS:
                self.fields.append((codec.key, codec.name, inner, codec.decode, codec.required))
            elif typing.get_origin(inner) is tuple and set(typing.get_args(inner)) <= {
                *_SCALARS,
                Ellipsis,
            }:
                # A tuple of scalars (StepRecord.optimizer_outcomes): read by its own decoder
                # every time (no JSON value is an `_AlwaysDecode`), a line of it stays here.
                self.fields.append(
                    (codec.key, codec.name, _AlwaysDecode, codec.decode, codec.required)
                )
            else:
                self.nested_keys.append(codec.key)
        # The record is made as its dataclass __init__ makes it (each field set, a missing
        # one to its default) without calling that __init__: a frozen dataclass's __init__
        # sets each field through object.__setattr__, 2 of the 3 microseconds a plain step
        # took here. Only where __init__ does nothing more: no __post_init__ (validation),
        # no default_factory; otherwise cls(**arguments). `direct`: each field read, as
        # (key, its slot's setter, exact type, decoder, required, default); `nested_defaults`:
        # (slot setter, default) of the nested fields, which a flat line does not hold.
        self.direct: list[tuple[str, Callable[[Any, Any], None], type, _Decode, bool, Any]] = []
        self.nested_defaults: list[tuple[Callable[[Any, Any], None], Any]] = []
        read = {
            name: (key, exact, decode, required)
            for key, name, exact, decode, required in self.fields
        }
        for item in dataclasses.fields(cls):
            setter = _direct_setter(cls, item)
            if setter is None:
                self.direct, self.nested_defaults = [], []
                self.usable_directly = False
                break
            if item.name in read:
                key, exact, decode, required = read[item.name]
                self.direct.append((key, setter, exact, decode, required, item.default))
            else:
                self.nested_defaults.append((setter, item.default))
        else:
            self.usable_directly = True

    def decode(self, raw: dict[str, Any]) -> Any:
        """The record, or None when the line holds a nested field. Raises ValueError as
        the codec does (TypeError, AttributeError from a record's own checks)."""
        if not raw.keys().isdisjoint(self.nested_keys):
            return None
        get = raw.get
        if not self.usable_directly:
            arguments = {}
            for key, name, exact, decode, required in self.fields:
                value = get(key, _ABSENT)
                if value is _ABSENT:
                    if required:
                        raise ValueError(f"{self.cls.__name__} without {key!r}")
                    continue
                arguments[name] = value if type(value) is exact else decode(value)
            return self.cls(**arguments)
        record: Any = object.__new__(self.cls)
        for key, set_field, exact, decode, required, default in self.direct:
            value = get(key, _ABSENT)
            if value is _ABSENT:
                if required:
                    raise ValueError(f"{self.cls.__name__} without {key!r}")
                value = default
            elif type(value) is not exact:
                # bool is a subclass of int, and a float's int: the exact type, not isinstance.
                value = decode(value)
            set_field(record, value)
        for set_field, default in self.nested_defaults:  # absent (checked above): defaults
            set_field(record, default)
        return record


_ABSENT = object()  # a key not on the line (None is a value: JSON null)


def _direct_setter(cls: type, item: dataclasses.Field[Any]) -> Callable[[Any, Any], None] | None:
    """The setter of a record's field (its slot's member descriptor) where the field can be
    set on a bare instance with what __init__ would store: no `__post_init__` check, an
    init field without a default_factory, a slot. None otherwise."""
    slot: Any = cls.__dict__.get(item.name)
    if (
        hasattr(cls, "__post_init__")
        or not item.init
        or item.default_factory is not dataclasses.MISSING
        or not hasattr(slot, "__set__")
    ):
        return None
    setter: Callable[[Any, Any], None] = slot.__set__
    return setter


def direct_constructor(cls: type[_R]) -> Callable[..., _R]:
    """A function taking what the dataclass __init__ takes (the same parameters and
    defaults) and making the record as it would, without calling it (the flat decoder's
    rule, for writers): a frozen dataclass's __init__ sets each field through
    object.__setattr__, and AmpMonitor makes a step record on every training step (0.8 us
    instead of 1.8 here). Where __init__ does more (a __post_init__ check, a
    default_factory), it is `cls` itself."""
    namespace: dict[str, Any] = {"_record_new": object.__new__, "_record_cls": cls}
    parameters: list[str] = []
    body = ["    _record = _record_new(_record_cls)"]
    # After a `*`, as __init__ takes them (a required one may follow defaults).
    keyword_only: list[str] = []
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        setter = _direct_setter(cls, item)
        if setter is None:
            return cls
        name = item.name
        namespace[f"_set_{name}"] = setter
        taken = keyword_only if item.kw_only is True else parameters
        if item.default is dataclasses.MISSING:
            taken.append(name)
        else:
            namespace[f"_default_{name}"] = item.default
            taken.append(f"{name}=_default_{name}")
        body.append(f"    _set_{name}(_record, {name})")
    if keyword_only:
        parameters += ["*", *keyword_only]
    # Generated, as dataclasses generates __init__: one call per field, no loop.
    source = "\n".join([f"def make({', '.join(parameters)}):", *body, "    return _record"])
    exec(source, namespace)  # field names only: identifiers, from the dataclass
    make: Callable[..., _R] = namespace["make"]
    return make


_FLAT_DECODERS: dict[type, _FlatDecoder] = {}


def _flat_decoder(cls: type) -> _FlatDecoder:
    decoder = _FLAT_DECODERS.get(cls)
    if decoder is None:
        decoder = _FLAT_DECODERS[cls] = _FlatDecoder(cls)
    return decoder


def decode_record(raw: Any, schema: int = SCHEMA_VERSION) -> Record | None:
    """A typed record from one decoded JSON object written under `schema` (a header
    states its own). None for a record type this version does not know. Raises
    ValueError (NewerSchemaError for a newer schema) when it cannot be read."""
    if not isinstance(raw, dict):
        raise ValueError(f"a record is a JSON object, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind is None:
        raise ValueError('a record without a "type"')
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None  # newer writers may add record types; skipping them is allowed
    if cls is HeaderRecord:
        if "schema" not in raw:
            raise ValueError("malformed header record: no schema")
        schema = _decode_int(raw["schema"])
    upgraded = raw if schema == SCHEMA_VERSION else upgrade(raw, schema)
    try:
        record = _flat_decoder(cls).decode(upgraded)  # nearly every line: a plain step
        if record is None:
            record = cls.from_json(upgraded)
        return typing.cast(Record, record)
    except (TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"malformed {kind} record: {error}") from None


def encode_line(record: Record) -> str:
    """One record as one line of strict JSON (no newline), `"type"` first."""
    return json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False)


def from_schema1_dict(raw: Mapping[str, Any]) -> Record | None:
    """A record from a hand-built dict (the monitor's, until it builds records itself;
    tests): laid out as schema 1, or as schema 2 (a `stats` object), with floats or their
    JSON spellings. None for an unknown record type; ValueError when it is not a record."""
    decoded = json.loads(json.dumps(encode_json_value(dict(raw))))
    if decoded.get("type") == "header":
        decoded["schema"] = 1  # the upgrade groups flat statistics; `stats` passes as is
    return decode_record(decoded, schema=1)
