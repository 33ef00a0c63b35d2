"""The AMP monitor: watches a training loop and writes the run log. Needs torch.

    with AmpMonitor(model, optimizer, scaler, out="run.jsonl") as monitor:
        for inputs, target in batches:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(inputs), target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)          # after the optimizer step, before the next zero_grad

What it hooks (all removed on close):
- a forward hook on every leaf module registers, on statistics steps, a tensor hook on the
  module's output: it receives the activation gradient during backward, in its actual
  dtype and still multiplied by the loss scale (the paper's figure). Each is counted there
  and then (a bincount of its bit patterns), so backward can free it as usual.
- forward pre/post hooks on the model enter saved-tensor hooks that count the bytes autograd
  saves for backward (activations, and autocast's low-precision copies of the weights).
- optimizer step pre/post hooks: a step that the scaler skipped never calls
  `optimizer.step()`, which is how a skipped step is recognised whatever the scaler; the
  pre-hook also keeps the old weights for the lost-update statistic.

Cost: a statistics step makes a fixed number of passes over the data, no logarithms: two
per 16-bit activation gradient (mask, bincount of the bit patterns), three or four per
float32 one, and about a dozen over the parameters, most of them the lost-update check.
Every histogram, zero count, max |x| and format-threshold count is read from those pattern
counts; a threshold that splits an occupied pattern costs one comparison pass. Work
buffers are reused (fresh large temporaries cost page faults on every step on a CPU).
`step()` copies one vector to the host (one sync); on a CPU a few more cheap reads decide
which of the rare extra passes are needed.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from fpexplorer import __version__
from fpexplorer.training.runlog import SCHEMA_VERSION, RunWriter

# Binade histogram layout: every finite non-zero float32 has floor(log2 |x|) in
# [-149, 127] (-149: the smallest subnormal 2**-149), so no value is ever clamped.
BINADE_LO = -149
BINADE_HI = 127
NUM_BINADES = BINADE_HI - BINADE_LO + 1  # 277
ZERO_CODE = NUM_BINADES
INF_CODE = NUM_BINADES + 1
NAN_CODE = NUM_BINADES + 2
CODES = NUM_BINADES + 3
FP16_MIN_SUBNORMAL_LOG2 = -24  # 2**-24 ≈ 5.96e-08; |x| <= 2**-25 rounds to zero
FP16_MAX = 65504.0
_FLOAT32_MAX = torch.finfo(torch.float32).max

FORMAT_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}


@dataclass(frozen=True, slots=True)
class FormatRange:
    """Where rounding to a format (round to nearest even) flushes, goes subnormal, overflows.

    All thresholds are exact float32 values: x flushes to zero iff 0 < |x| <= flush_max,
    is subnormal iff flush_max < |x| <= subnormal_max, overflows iff |x| > finite_max_input.
    """

    name: str
    max: float
    min_normal: float
    min_subnormal: float
    flush_max: float
    subnormal_max: float
    finite_max_input: float

    @classmethod
    def of(cls, name: str) -> FormatRange:
        info = torch.finfo(FORMAT_DTYPES[name])
        min_subnormal = info.tiny * info.eps  # e.g. FP16: 2**-14 * 2**-10 = 2**-24
        # A tie at min_subnormal / 2 rounds to even, i.e. to zero.
        flush_max = min_subnormal / 2
        # Values from min_normal - min_subnormal / 2 up round to min_normal (tie: even mantissa).
        subnormal_max = _float32_below(info.tiny - min_subnormal / 2)
        # Above max the next step would be max + ulp; the midpoint is the overflow threshold.
        ulp_at_max = 2.0 ** math.floor(math.log2(info.max)) * info.eps
        midpoint = info.max + ulp_at_max / 2
        # At the midpoint, round-half-even: max has an odd mantissa in FP16/BF16/E5M2 (the tie
        # goes up, to inf); in E4M3FN max = 1.75 * 2**8 has an even one (the tie stays at max).
        max_mantissa_odd = int(info.max / ulp_at_max) % 2 == 1
        finite_max_input = _float32_below(midpoint) if max_mantissa_odd else midpoint
        return cls(name, info.max, info.tiny, min_subnormal, flush_max, subnormal_max,
                   finite_max_input)  # fmt: skip

    def header_json(self) -> dict[str, float]:
        return {"max": self.max, "min_normal": self.min_normal, "min_subnormal": self.min_subnormal}


def _float32_below(value: float) -> float:
    """The largest float32 strictly below `value` (a float32 value)."""
    tensor = torch.tensor(value, dtype=torch.float32)
    return float(torch.nextafter(tensor, torch.tensor(0.0, dtype=torch.float32)))


FORMAT_RANGES: tuple[FormatRange, ...] = tuple(FormatRange.of(name) for name in FORMAT_DTYPES)
# Every magnitude the format shares compare |g * scale| with, and 0.0 (products that are zero).
FORMAT_BOUNDARIES: list[float] = sorted(
    {0.0} | {b for f in FORMAT_RANGES for b in (f.flush_max, f.subnormal_max, f.finite_max_input)}
)


def binade_codes(values: torch.Tensor) -> torch.Tensor:
    """Histogram code of each element: floor(log2 |x|) - BINADE_LO for finite non-zero x,
    ZERO_CODE, INF_CODE or NAN_CODE otherwise. `values` must be float32 (exact for
    float16/bfloat16 converted to float32); the result is int64."""
    _, exponent = torch.frexp(values)  # |x| = m * 2**e, m in [0.5, 1): floor(log2|x|) = e - 1
    codes = torch.where(values == 0, ZERO_CODE, exponent.to(torch.int64) - 1 - BINADE_LO)
    magnitude_ok = values.abs() <= _FLOAT32_MAX  # False for inf and NaN
    special = torch.where(values.isnan(), NAN_CODE, INF_CODE)
    return torch.where(magnitude_ok, codes, special)


def histogram_json(counts: Sequence[float], dtype: str | None = None) -> dict[str, Any]:
    """The run-log form of CODES counts: binade counts trimmed to the non-zero range."""
    binades = [int(c) for c in counts[:NUM_BINADES]]  # int(): counts may arrive as floats
    nonzero = [i for i, count in enumerate(binades) if count]
    first, last = (nonzero[0], nonzero[-1] + 1) if nonzero else (0, 0)
    result: dict[str, Any] = {
        "lo": BINADE_LO + first if nonzero else 0,
        "counts": binades[first:last],
        "zero": int(counts[ZERO_CODE]),
        "inf": int(counts[INF_CODE]),
        "nan": int(counts[NAN_CODE]),
    }
    if dtype is not None:
        result["dtype"] = dtype
    return result


def binade_histogram(tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Binade histogram (run-log form) of all elements of `tensors`, each counted once."""
    counts = torch.stack([code_histogram(t) for t in tensors]).sum(dim=0)
    return histogram_json(counts.tolist())


_HIGH_HALF = 1 if sys.byteorder == "little" else 0  # the int16 holding a float32's top bits
_DISCARD = CODES  # an extra bin for patterns counted elsewhere
_TABLES: dict[torch.device, dict[str, torch.Tensor]] = {}


def _code_tables(device: torch.device) -> dict[str, torch.Tensor]:
    """Maps from 15-bit magnitude patterns to histogram codes, built once per device.

    A float16/bfloat16 magnitude has 15 bits, so its pattern is its value. For float32 the
    top 15 magnitude bits fix floor(log2|x|) whenever |x| >= 2**-133; smaller values (zero
    and the deepest subnormals) are read a second time from x * 2**24, which is exact for
    them and lifts them into the normal range.
    """
    tables = _TABLES.get(device)
    if tables is None:
        patterns = torch.arange(32768, dtype=torch.int32).to(torch.int16)
        high = (patterns.to(torch.int32) << 16).view(torch.float32)
        fp32_high = binade_codes(high)
        fp32_high[0] = _DISCARD  # zero and |x| < 2**-133: counted from the scaled copy
        # x * 2**24 of a float32 below 2**-133 lies in [2**-125, 2**-109).
        lifted_range = (high >= 2.0**-125) & (high < 2.0**-109)
        tiny = torch.where(lifted_range, binade_codes(high) - 24, _DISCARD)
        tiny[0] = ZERO_CODE
        tables = {
            "float16": binade_codes(patterns.view(torch.float16).float()),
            "bfloat16": binade_codes(patterns.view(torch.bfloat16).float()),
            "float32_high": fp32_high,
            "float32_tiny": tiny,
        }
        tables = {name: table.to(device) for name, table in tables.items()}
        _TABLES[device] = tables
    return tables


def _map_patterns(counts: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return torch.zeros(CODES + 1, dtype=torch.int64, device=counts.device).index_add_(
        0, table, counts
    )


def code_histogram(tensor: torch.Tensor) -> torch.Tensor:
    """Counts by histogram code (CODES int64 counts) of every element of `tensor`.

    Two passes over the data for 16-bit tensors, four for float32: the bits are binned as
    they are (a bincount of 32768 patterns), which is exact and far cheaper than taking
    logarithms. (A float32 NaN whose payload lies only in the low 16 bits would count as
    inf; arithmetic never produces one.)
    """
    flat = tensor.detach().reshape(-1).contiguous()  # viewing the bits needs stride 1
    tables = _code_tables(flat.device)
    if flat.dtype in (torch.float16, torch.bfloat16):
        counts = torch.bincount(flat.view(torch.int16) & 0x7FFF, minlength=32768)
        return _map_patterns(counts, tables[dtype_name(flat.dtype)])[:CODES]
    values = flat if flat.dtype == torch.float32 else flat.float()
    high = torch.bincount(values.view(torch.int16)[_HIGH_HALF::2] & 0x7FFF, minlength=32768)
    lifted = (values * 2.0**24).view(torch.int16)[_HIGH_HALF::2] & 0x7FFF
    tiny = torch.bincount(lifted, minlength=32768)
    merged = _map_patterns(high, tables["float32_high"])
    merged += _map_patterns(tiny, tables["float32_tiny"])
    return merged[:CODES]


def _bits_view(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (detached) in a layout whose int16 view is allowed: last stride 1."""
    data = tensor.detach()
    if data.dim() == 0:
        return data.reshape(1)
    return data if data.stride(-1) == 1 else data.contiguous()


def _count_at_most(values: torch.Tensor, bounds: Sequence[float]) -> torch.Tensor:
    """[count of |v| <= b for each b in bounds (ascending float32 values), count of v == 0].

    Counts the top 16 bits of every |v| (one bincount); only the elements whose top bits
    equal a bound's are compared with it exactly. Far cheaper than a comparison per bound
    (or a binary-search bucketize) over all elements. NaN is never <= a bound.
    """
    device = values.device
    if int(np.float32(bounds[0]).view(np.int32)) >> 16 != 0:
        raise ValueError("the smallest bound must lie in pattern 0 (below 2**-133)")
    bound_tensor = torch.tensor(bounds, dtype=torch.float32, device=device)
    bound_patterns = (bound_tensor.view(torch.int32) >> 16).to(torch.int16)
    patterns = values.view(torch.int16)[_HIGH_HALF::2] & 0x7FFF
    below = torch.cumsum(torch.bincount(patterns, minlength=32768), 0)
    # Elements strictly below each bound's pattern, then the exact check inside it.
    index = bound_patterns.long()
    strictly_below = torch.where(index > 0, below[(index - 1).clamp(min=0)], 0)
    # A 32768-entry table lookup: torch.isin is ~5x slower here.
    is_bound = torch.zeros(32768, dtype=torch.bool, device=device)
    is_bound[bound_patterns.long()] = True
    on_boundary = is_bound.index_select(0, patterns.int())
    where = on_boundary.nonzero().squeeze(1)  # one nonzero() for both selections
    magnitudes = values.index_select(0, where).abs()
    boundary_patterns = patterns.index_select(0, where)
    inside = torch.stack(
        [
            torch.count_nonzero((boundary_patterns == pattern) & (magnitudes <= bound))
            for pattern, bound in zip(bound_patterns, bound_tensor, strict=True)
        ]
    )
    # Zero is in pattern 0, which is always a boundary (BF16's flush bound 2**-134 is in it).
    zeros = torch.count_nonzero(magnitudes == 0)
    return torch.cat([strictly_below + inside, zeros.reshape(1)])


def _count_abs_at_most(
    tensors: Sequence[torch.Tensor], bounds: Sequence[float], scratch: _Scratch
) -> torch.Tensor:
    """For each bound (a float32 value): the count of elements with |x| <= bound over the
    float tensors (one pass for |x|, then one comparison per bound)."""
    total = sum(t.numel() for t in tensors)
    device = tensors[0].device
    magnitudes = scratch.get("magnitudes", total, torch.float32, device)
    offset = 0
    for tensor in tensors:
        end = offset + tensor.numel()
        torch.abs(tensor.detach().reshape(-1), out=magnitudes[offset:end])
        offset = end
    flags = scratch.get("flags", total, torch.bool, device)
    return torch.stack(
        [torch.count_nonzero(torch.le(magnitudes, bound, out=flags)) for bound in bounds]
    )


def _count_low_bits_set(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Count of float32 elements whose low 16 bits are not all zero (0 for float32 copies of
    BF16 values, such as autocast's BF16 gradients: their top 16 bits say everything)."""
    counts = [
        torch.count_nonzero(_bits_view(t.float()).view(torch.int16)[..., 1 - _HIGH_HALF :: 2])
        for t in tensors
    ]
    return torch.stack(counts).sum()


def _abs_max(tensor: torch.Tensor) -> torch.Tensor:
    """max |x| in one pass (NaN when any element is NaN)."""
    low, high = torch.aminmax(tensor.detach().reshape(-1))
    return torch.maximum(-low, high).float()


@dataclass(frozen=True, slots=True)
class _Segment:
    """Pattern counts of one tensor (or one group of parameter gradients), made as soon as
    the tensor exists so that activation gradients need not be kept until `step()`.

    `counts`: the counts of the 32768 magnitude patterns (the 15 bits below the sign of a
    16-bit value, or of a float32's top half); `zeros`: exact zeros (float32 only, where
    pattern 0 also holds |x| < 2**-133); `amax`: max |x| of a float32 tensor (16-bit ones
    read theirs from the counts); `tensor`: a float32 tensor kept for the exact fallback of
    `code_histogram` (deep subnormals) and deferred zero counts, None for 16-bit ones.
    """

    layer: int
    dtype: str
    numel: int
    table: str
    counts: torch.Tensor
    zeros: torch.Tensor | None
    amax: torch.Tensor | None
    tensor: torch.Tensor | None
    # float32 only: True when no element has low bits set (the patterns are the values),
    # False when some has, None when not looked at.
    top_exact: bool | None = None


class _Scratch:
    """Reusable work buffers, grown on demand: a fresh multi-megabyte temporary costs its
    page faults on every step on a CPU, often more than the arithmetic done in it."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}

    def get(self, name: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (name, dtype, device)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(numel, dtype=dtype, device=device)
            self._buffers[key] = buffer
        return buffer[:numel]


def _segment_of(layer: int, tensor: torch.Tensor, scratch: _Scratch | None) -> _Segment:
    """Pattern counts of `tensor`: two passes for 16-bit tensors (mask, bincount), three or
    four for float32 ones (mask, bincount, max; zeros where pattern 0 is occupied)."""
    data = _bits_view(tensor)
    if data.dtype in (torch.float16, torch.bfloat16):
        bits = data.view(torch.int16)
        table = dtype_name(data.dtype)
        keep = None
        zeros = amax = None
    else:
        data = data if data.dtype == torch.float32 else data.float()
        bits = data.view(torch.int16)[..., _HIGH_HALF::2]
        table = "float32_high"
        keep = data
        # On a CPU the zeros are counted later, only where pattern 0 is occupied (reading
        # one count there costs nothing); on an accelerator that would be a host sync.
        zeros = None if data.device.type == "cpu" else data.numel() - torch.count_nonzero(data)
        amax = _abs_max(data)
    if scratch is not None:
        out = scratch.get("patterns", bits.numel(), torch.int16, bits.device).view(bits.shape)
        patterns = torch.bitwise_and(bits, 0x7FFF, out=out)
    else:
        patterns = bits & 0x7FFF
    counts = torch.bincount(patterns.reshape(-1), minlength=32768)
    return _Segment(layer, dtype_name(tensor.dtype), tensor.numel(), table, counts, zeros, amax,
                    keep)  # fmt: skip


_PATTERN_VALUES: dict[torch.device, dict[str, torch.Tensor]] = {}


def _count_deferred_zeros(segments: list[_Segment]) -> list[_Segment]:
    """Float32 segments with their zeros counted: 0 where pattern 0 (zero and |x| < 2**-133)
    is empty, one counting pass otherwise."""
    deferred = [i for i, s in enumerate(segments) if s.zeros is None and s.tensor is not None]
    if not deferred:
        return segments
    occupied = torch.stack([segments[i].counts[0] for i in deferred]).tolist()
    result = list(segments)
    for index, pattern_zero in zip(deferred, occupied, strict=True):
        segment = segments[index]
        tensor = segment.tensor
        assert tensor is not None
        zeros = (
            tensor.numel() - torch.count_nonzero(tensor)
            if pattern_zero
            else torch.zeros((), dtype=torch.int64, device=tensor.device)
        )
        result[index] = dataclasses.replace(segment, zeros=zeros)
    return result


def _pattern_values(device: torch.device) -> dict[str, torch.Tensor]:
    """The float32 value of each 15-bit magnitude pattern of float16 and bfloat16."""
    values = _PATTERN_VALUES.get(device)
    if values is None:
        patterns = torch.arange(32768, dtype=torch.int32).to(torch.int16)
        values = {
            "float16": patterns.view(torch.float16).float().to(device),
            "bfloat16": patterns.view(torch.bfloat16).float().to(device),
        }
        _PATTERN_VALUES[device] = values
    return values


def _segment_rows(segments: Sequence[_Segment]) -> tuple[torch.Tensor, torch.Tensor]:
    """([len(segments), CODES + 1] code counts, [len(segments)] max |x|) on the device.

    Column CODES holds, for float32 segments, the elements below 2**-133 *including* zeros
    (also counted in ZERO_CODE): when it exceeds the zeros, `code_histogram` places them.
    A 16-bit segment's max |x| is the value of its highest pattern present (NaN above inf).
    """
    device = segments[0].counts.device
    values = _pattern_values(device)
    rows = torch.empty(len(segments), CODES + 1, dtype=torch.int64, device=device)
    amax = torch.empty(len(segments), dtype=torch.float32, device=device)
    by_table: dict[str, list[int]] = {}
    for index, segment in enumerate(segments):
        by_table.setdefault(segment.table, []).append(index)
    positions = torch.arange(32768, device=device)
    for table, indices in by_table.items():
        stacked = torch.stack([segments[i].counts for i in indices])
        mapped = torch.zeros(len(indices), CODES + 1, dtype=torch.int64, device=device)
        mapped.index_add_(1, _code_tables(device)[table], stacked)
        where = torch.tensor(indices, device=device)
        if table == "float32_high":
            zeros = [segments[i].zeros for i in indices]
            mapped[:, ZERO_CODE] += torch.stack([torch.as_tensor(z, device=device) for z in zeros])
            none = torch.zeros((), dtype=torch.float32, device=device)  # parameter rows
            peaks = torch.stack([_or(segments[i].amax, none) for i in indices])
        else:
            highest = torch.where(stacked > 0, positions, 0).amax(dim=1)
            peaks = values[table][highest]
            peaks = torch.where(mapped[:, NAN_CODE] > 0, torch.nan, peaks)
        rows.index_copy_(0, where, mapped)
        amax.index_copy_(0, where, peaks.float())
    return rows, amax


def _or(value: torch.Tensor | None, default: torch.Tensor) -> torch.Tensor:
    return default if value is None else value


@functools.lru_cache(maxsize=256)
def _magnitude_limits(bounds: tuple[float, ...], scale: float) -> tuple[int, ...]:
    """For each bound b >= 0: the bit pattern of the largest float32 x >= 0 whose float32
    product with float32(scale) (a finite scale > 0) is <= b. Rounding is monotone, so
    |g * scale| <= b exactly when |g| <= x: the counts need no multiplied copy of the
    gradients. Found by bisection over float32 patterns, in float32 arithmetic."""
    scale32 = np.float32(scale)
    limit = np.asarray(bounds, dtype=np.float32)
    low = np.zeros(len(bounds), dtype=np.int64)  # 0 * scale = 0 <= b
    high = np.full(len(bounds), 0x7F800000, dtype=np.int64)  # inf * scale = inf > b
    with np.errstate(over="ignore", under="ignore"):
        while np.any(high - low > 1):
            middle = (low + high) // 2
            ok = middle.astype(np.int32).view(np.float32) * scale32 <= limit
            low = np.where(ok, middle, low)
            high = np.where(ok, high, middle)
    return tuple(int(x) for x in low)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _bytes_by_dtype(tensors: Iterator[torch.Tensor]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for tensor in tensors:
        name = dtype_name(tensor.dtype)
        totals[name] = totals.get(name, 0) + tensor.numel() * tensor.element_size()
    return totals


@functools.cache
def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's model name ("AMD EPYC 7B13"), else its architecture ("x86_64")."""
    try:
        # Linux says it in /proc/cpuinfo; platform.processor() would fork `uname -p` there
        # and usually answers only the architecture anyway.
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    if sys.platform != "linux" and platform.processor():
        return platform.processor()
    return platform.machine() or "cpu"


def device_description(device: torch.device) -> dict[str, str]:
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device)}
    return {"type": device.type, "name": cpu_name()}


@dataclass(frozen=True, slots=True)
class _Layer:
    name: str
    params: tuple[nn.Parameter, ...]


class AmpMonitor(AbstractContextManager["AmpMonitor"]):
    """Records loss, loss scale, skipped steps and gradient numerics of a training loop.

    Args:
        model: the module being trained (its leaf modules become the "layers").
        optimizer: the optimizer whose steps are watched.
        scaler: a `torch.amp.GradScaler`, any object with `get_scale()`, or None (scale 1).
        out: the run-log path (or pass `writer=`).
        stats_every: gradient statistics every N steps; 0 turns them off.
        precision: the precision mode name for the header (guessed when None).
        config: extra header config (the job passes its whole TrainConfig).
        echo: a text stream that also receives every record (e.g. sys.stdout).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Any = None,
        *,
        out: str | os.PathLike[str] | None = None,
        writer: RunWriter | None = None,
        stats_every: int = 1,
        precision: str | None = None,
        config: Mapping[str, Any] | None = None,
        echo: IO[str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        if writer is None:
            if out is None:
                raise ValueError("AmpMonitor needs out= (a run-log path) or writer=")
            writer = RunWriter(out, echo=echo)
        if stats_every < 0:
            raise ValueError("stats_every must be >= 0")
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.writer = writer
        self.stats_every = stats_every
        self.step_index = 0
        self.closed = False
        self._started = time.perf_counter()
        self._last_step_time = self._started
        self._recent_durations: list[float] = []
        first_param = next(model.parameters(), None)
        self.device = device or (
            first_param.device if first_param is not None else torch.device("cpu")
        )
        self._layers = self._find_layers(model)
        self._param_layer: list[tuple[int, nn.Parameter]] = [
            (index, param) for index, layer in enumerate(self._layers) for param in layer.params
        ]
        self._scale_used = self._current_scale_host()
        # Per statistics step:
        self._collecting = False
        self._act_segments: list[_Segment] = []
        self._scratch = _Scratch()
        self._forward_finite: list[tuple[int, torch.Tensor]] = []
        self._saved_bytes: dict[str, int] = {}
        self._saved_seen: set[tuple[int, torch.dtype]] = set()
        self._param_ptrs: set[int] = set()
        self._saved_hooks: AbstractContextManager[None] | None = None
        self._old_params: torch.Tensor | None = None
        self._optimizer_stepped = False
        self._handles: list[RemovableHandle] = []
        self._install_hooks()
        self._set_collecting()
        self.writer.write(self._header(precision, config))

    # -- set-up --------------------------------------------------------------------------

    @staticmethod
    def _find_layers(model: nn.Module) -> list[_Layer]:
        """Leaf modules, plus any module that owns parameters directly (e.g. an embedding
        table declared on a parent); shared parameters are counted once."""
        seen: set[int] = set()
        layers: list[_Layer] = []
        for name, module in model.named_modules():
            own = [p for p in module.parameters(recurse=False) if id(p) not in seen]
            seen.update(id(p) for p in own)
            is_leaf = next(module.children(), None) is None
            if is_leaf or own:
                layers.append(_Layer(name or type(module).__name__, tuple(own)))
        return layers

    def _install_hooks(self) -> None:
        layer_index = {layer.name: index for index, layer in enumerate(self._layers)}
        for name, module in self.model.named_modules():
            index = layer_index.get(name or type(module).__name__)
            if index is not None and next(module.children(), None) is None:
                hook = self._activation_hook(index)
                self._handles.append(module.register_forward_hook(hook))
        self._handles.append(self.model.register_forward_pre_hook(self._on_model_forward_start))
        self._handles.append(
            self.model.register_forward_hook(self._on_model_forward_end, always_call=True)
        )
        self._handles.append(self.optimizer.register_step_pre_hook(self._on_optimizer_step_start))
        self._handles.append(self.optimizer.register_step_post_hook(self._on_optimizer_step_end))

    def _header(self, precision: str | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
        merged: dict[str, Any] = {
            "task": "user loop",
            "precision": precision or self._guess_precision(),
            "stats_every": self.stats_every,
            "device": self.device.type,
        }
        scaler = self.scaler
        if isinstance(scaler, torch.amp.GradScaler):
            merged.update(
                init_scale=float(getattr(scaler, "_init_scale", scaler.get_scale())),
                growth_factor=scaler.get_growth_factor(),
                backoff_factor=scaler.get_backoff_factor(),
                growth_interval=scaler.get_growth_interval(),
            )
        merged.update(config or {})
        return {
            "type": "header",
            "schema": SCHEMA_VERSION,
            "fpexplorer": __version__,
            "torch": torch.__version__,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "config": merged,
            "device": device_description(self.device),
            "model": {
                "params": sum(p.numel() for p in self.model.parameters()),
                "layers": [layer.name for layer in self._layers],
                "class": type(self.model).__name__,
            },
            "formats": {fmt.name: fmt.header_json() for fmt in FORMAT_RANGES},
        }

    def _guess_precision(self) -> str:
        param = next(self.model.parameters(), None)
        if param is not None and param.dtype == torch.float16:
            return "pure-fp16"
        if isinstance(self.scaler, torch.amp.GradScaler) and self.scaler.is_enabled():
            return "fp16"
        return "unknown"

    # -- hooks ---------------------------------------------------------------------------

    def _activation_hook(self, layer_index: int) -> Any:
        def on_forward(module: nn.Module, inputs: Any, output: Any) -> None:
            if not self._collecting or not torch.is_grad_enabled():
                return
            tensor = output if isinstance(output, torch.Tensor) else None
            if tensor is None and isinstance(output, (tuple, list)):
                tensor = next((t for t in output if isinstance(t, torch.Tensor)), None)
            if tensor is None or not tensor.requires_grad or not tensor.is_floating_point():
                return
            # Where a forward overflow starts (FP16 activations above 65504 become inf).
            self._forward_finite.append((layer_index, _abs_max(tensor).isfinite()))

            def on_backward(grad: torch.Tensor) -> None:
                # Counted now, so the gradient can be freed as backward goes on.
                self._act_segments.append(_segment_of(layer_index, grad, self._scratch))

            tensor.register_hook(on_backward)  # type: ignore[no-untyped-call]

        return on_forward

    def _on_model_forward_start(self, module: nn.Module, inputs: Any) -> None:
        if not self._collecting or not torch.is_grad_enabled() or self._saved_hooks is not None:
            return
        self._param_ptrs = {p.data_ptr() for p in self.model.parameters()}
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._on_pack, self._on_unpack)
        self._saved_hooks.__enter__()

    def _on_model_forward_end(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._saved_hooks is not None:
            hooks, self._saved_hooks = self._saved_hooks, None
            hooks.__exit__(None, None, None)

    def _on_pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # Parameters saved for backward cost nothing extra; a tensor saved twice counts once.
        pointer = tensor.data_ptr()
        key = (pointer, tensor.dtype)
        if pointer not in self._param_ptrs and key not in self._saved_seen:
            self._saved_seen.add(key)
            name = dtype_name(tensor.dtype)
            self._saved_bytes[name] = (
                self._saved_bytes.get(name, 0) + tensor.numel() * tensor.element_size()
            )
        return tensor

    @staticmethod
    def _on_unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def _on_optimizer_step_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_stepped = True
        with_grads = [p.detach().reshape(-1) for _, p in self._param_layer if p.grad is not None]
        if self._collecting and with_grads:
            dtype = with_grads[0].dtype
            if all(p.dtype == dtype for p in with_grads):
                total = sum(p.numel() for p in with_grads)
                buffer = self._scratch.get("old_params", total, dtype, with_grads[0].device)
                self._old_params = torch.cat(with_grads, out=buffer)
            else:
                self._old_params = torch.cat(with_grads)

    def _on_optimizer_step_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_stepped = True

    # -- per step ------------------------------------------------------------------------

    def _set_collecting(self) -> None:
        self._collecting = self.stats_every > 0 and self.step_index % self.stats_every == 0

    def _current_scale_host(self) -> float:
        if self.scaler is None:
            return 1.0
        if isinstance(self.scaler, torch.amp.GradScaler) and not self.scaler.is_enabled():
            return 1.0
        return float(self.scaler.get_scale())

    def _scale_after_tensor(self) -> torch.Tensor | float:
        """The scaler's scale after update(), without a host sync where torch allows it."""
        scaler = self.scaler
        if isinstance(scaler, torch.amp.GradScaler):
            scale = getattr(scaler, "_scale", None)
            if isinstance(scale, torch.Tensor):
                return scale.reshape(())
        return self._current_scale_host()

    def _growth_tracker_tensor(self) -> torch.Tensor | float:
        tracker = getattr(self.scaler, "_growth_tracker", None)
        if isinstance(tracker, torch.Tensor):
            return tracker.reshape(())
        return 0.0

    def step(self, loss: torch.Tensor | float) -> dict[str, Any]:
        """Record the step just taken. Call after the optimizer step (and scaler.update()),
        before gradients are zeroed. Returns the record written."""
        if self.closed:
            raise RuntimeError("AmpMonitor.step() after close()")
        grads = [p.grad for _, p in self._param_layer if p.grad is not None]
        norms: torch.Tensor | None = None
        grad_norm: torch.Tensor | float = 0.0
        if grads and self._collecting:
            # Per-tensor norms serve the per-layer norms too; FP16 gradients are summed in FP32.
            norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads])
            grad_norm = torch.linalg.vector_norm(norms)
        elif grads:
            grad_norm = torch.nn.utils.get_total_norm(grads, error_if_nonfinite=False)
        scalars = [
            loss.detach().reshape(()) if isinstance(loss, torch.Tensor) else float(loss),
            grad_norm,
            self._scale_after_tensor(),
            self._growth_tracker_tensor(),
        ]
        parts = [
            torch.as_tensor(v, dtype=torch.float64).to(self.device).reshape(1) for v in scalars
        ]
        stats_layout: _StatsLayout | None = None
        if self._collecting:
            stats_layout = self._device_statistics(parts, norms)
        # The one host sync of the step:
        values = torch.cat(parts).cpu().numpy()
        now = time.perf_counter()
        duration = now - self._last_step_time
        self._last_step_time = now
        self._recent_durations = [*self._recent_durations[-9:], duration]
        record: dict[str, Any] = {
            "type": "step",
            "step": self.step_index,
            "loss": float(values[0]),
            "scale": self._scale_used,
            "skipped": not self._optimizer_stepped,
            "growth_tracker": int(values[3]),
            "lr": float(self.optimizer.param_groups[0]["lr"]),
            "grad_norm": float(values[1]),
            "steps_per_s": len(self._recent_durations) / max(sum(self._recent_durations), 1e-9),
            "time": now - self._started,
        }
        if stats_layout is not None:
            record.update(stats_layout.decode(values, self))
        self.writer.write(record)
        # The scale after update() is the scale the next step uses.
        self._scale_used = float(values[2])
        self._act_segments = []
        self._forward_finite = []
        self._saved_bytes = {}
        self._saved_seen = set()
        self._old_params = None
        self._optimizer_stepped = False
        self.step_index += 1
        self._set_collecting()
        return record

    def _device_statistics(
        self, parts: list[torch.Tensor], norms: torch.Tensor | None
    ) -> _StatsLayout:
        """Queue every statistic as device tensors appended to `parts`; returns how to read
        them back from the host vector."""
        param_grads = [(layer, p.grad) for layer, p in self._param_layer if p.grad is not None]
        act_segments = _count_deferred_zeros(self._act_segments)
        n_param = sum(g.numel() for _, g in param_grads)
        nonzero = self._nonzero_grads([g for _, g in param_grads])
        groups = self._param_groups([g for _, g in param_grads], nonzero)
        # Histogram rows: the parameter gradients (one row per dtype group, when there are
        # any), then one row per activation gradient, in the order backward produced them.
        segments = [segment for segment, _ in groups] + act_segments
        layout = _StatsLayout(
            layer_of_segment=[segment.layer for segment in segments],
            is_activation=[False] * len(groups) + [True] * len(act_segments),
            act_numel_by_dtype={},
            scale=self._scale_used,
            memory=self._memory(),
        )
        layout.param_layers = [layer for layer, _ in param_grads]
        layout.param_groups = groups
        if norms is not None:
            parts.append(norms.to(torch.float64))
        if self._forward_finite:
            layout.forward_layers = [layer for layer, _ in self._forward_finite]
            flags = torch.stack([finite for _, finite in self._forward_finite])
            parts.append(flags.to(device=self.device, dtype=torch.float64))
        for segment in act_segments:
            name = segment.dtype
            layout.act_numel_by_dtype[name] = layout.act_numel_by_dtype.get(name, 0) + segment.numel
        layout.segments = len(segments)
        layout.n_param = n_param
        if not segments:
            return layout
        rows, amax = _segment_rows(segments)
        parts.append(rows.reshape(-1).to(torch.float64))
        layout.segment_list = segments
        if act_segments:
            parts.append(amax[len(groups) :].to(torch.float64))
        if groups:
            # The raw pattern counts of the parameter gradients: the format shares are read
            # from them on the host.
            parts.append(torch.cat([segment.counts for segment, _ in groups]).to(torch.float64))
            lost_updates = self._lost_updates([g for _, g in param_grads], nonzero)
            if lost_updates is not None:
                parts.append(lost_updates.to(torch.float64))
                layout.has_lost_updates = True
        return layout

    def _nonzero_grads(self, grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(g != 0 for every gradient element, in order; the count per gradient tensor):
        the zeros of the histogram and the intended updates of the lost-update share."""
        if not grads:
            return torch.zeros(0, dtype=torch.bool), []
        total = sum(g.numel() for g in grads)
        mask = self._scratch.get("nonzero", total, torch.bool, grads[0].device)
        counts: list[torch.Tensor] = []
        offset = 0
        for grad in grads:
            end = offset + grad.numel()
            torch.ne(grad.detach().reshape(-1), 0, out=mask[offset:end])
            counts.append(torch.count_nonzero(mask[offset:end]))  # cheap: bytes, not floats
            offset = end
        return mask, counts

    def _param_groups(
        self, grads: list[torch.Tensor], nonzero: tuple[torch.Tensor, list[torch.Tensor]]
    ) -> list[tuple[_Segment, list[torch.Tensor]]]:
        """One pattern-count segment per gradient dtype (float16, bfloat16, else float32):
        the masked bit patterns of all the group's gradients go into one buffer (one pass
        each, no concatenated copy of the gradients), then one bincount."""
        by_dtype: dict[torch.dtype, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for grad, nonzero_count in zip(grads, nonzero[1], strict=True):
            dtype = grad.dtype if grad.dtype in (torch.float16, torch.bfloat16) else torch.float32
            by_dtype.setdefault(dtype, []).append((grad.detach(), nonzero_count))
        groups: list[tuple[_Segment, list[torch.Tensor]]] = []
        for dtype, all_pairs in by_dtype.items():
            subgroups: list[tuple[list[tuple[torch.Tensor, torch.Tensor]], bool | None]]
            if dtype == torch.float32 and all_pairs[0][0].device.type == "cpu":
                # float32 gradients holding BF16 values (BF16 matmuls under autocast) have
                # nothing in their low 16 bits: their patterns answer every threshold. One
                # cheap pass per tensor sorts them out (a host sync: only on a CPU).
                low = torch.stack([_count_low_bits_set([g]) for g, _ in all_pairs]).tolist()
                subgroups = [
                    ([pair for pair, bits in zip(all_pairs, low, strict=True) if not bits], True),
                    ([pair for pair, bits in zip(all_pairs, low, strict=True) if bits], False),
                ]
            else:
                subgroups = [(all_pairs, None if dtype == torch.float32 else True)]
            for pairs, top_exact in subgroups:
                if pairs:
                    groups.append(self._param_group(dtype, pairs, top_exact))
        return groups

    def _param_group(
        self,
        dtype: torch.dtype,
        pairs: list[tuple[torch.Tensor, torch.Tensor]],
        top_exact: bool | None,
    ) -> tuple[_Segment, list[torch.Tensor]]:
        members = [grad for grad, _ in pairs]
        total = sum(g.numel() for g in members)
        patterns = self._scratch.get("patterns", total, torch.int16, members[0].device)
        offset = 0
        for grad in members:
            data = _bits_view(grad)
            if dtype == torch.float32:
                data = data if data.dtype == torch.float32 else data.float()
                bits = data.view(torch.int16)[..., _HIGH_HALF::2]
            else:
                bits = data.view(torch.int16)
            target = patterns[offset : offset + data.numel()].view(bits.shape)
            torch.bitwise_and(bits, 0x7FFF, out=target)
            offset += data.numel()
        counts = torch.bincount(patterns, minlength=32768)
        if dtype == torch.float32:
            zeros = torch.stack([grad.numel() - count for grad, count in pairs]).sum()
            segment = _Segment(-1, "float32", total, "float32_high", counts, zeros, None, None,
                               top_exact)  # fmt: skip
        else:
            name = dtype_name(dtype)
            segment = _Segment(-1, name, total, name, counts, None, None, None, True)
        return segment, members

    def _lost_updates(
        self, grads: list[torch.Tensor], nonzero_grads: tuple[torch.Tensor, list[torch.Tensor]]
    ) -> torch.Tensor | None:
        """[updates lost, updates intended]: among weights with a non-zero gradient, those
        whose FP16 weight would not change (FP32 master weights) or did not (FP16 weights).
        None when the optimizer did not step (a skipped step) or the gradients changed since.

        FP32 masters: FP16(FP16(w_old) + (w_new - w_old)) == FP16(w_old), the sum in FP32,
        as an FP16 weight would be updated. Computed in reused buffers, FP32 arithmetic
        and conversions only (FP16 arithmetic and comparisons are slow on CPUs)."""
        old = self._old_params
        params = [p.detach().reshape(-1) for _, p in self._param_layer if p.grad is not None]
        total = sum(p.numel() for p in params)
        if old is None or old.numel() != total or total != sum(g.numel() for g in grads):
            return None
        device = old.device
        unchanged = self._scratch.get("unchanged", total, torch.bool, device)
        nonzero = nonzero_grads[0]
        uniform = all(p.dtype == old.dtype for p in params)
        if old.dtype == torch.float16 and uniform:
            offset = 0
            for param in params:
                end = offset + param.numel()
                torch.eq(param, old[offset:end], out=unchanged[offset:end])
                offset = end
        elif old.dtype == torch.float32 and uniform:
            update = self._scratch.get("update", total, torch.float32, device)
            old16f = self._scratch.get("old16f", total, torch.float32, device)
            half = self._scratch.get("half", total, torch.float16, device)
            offset = 0
            for param in params:
                end = offset + param.numel()
                torch.sub(param, old[offset:end], out=update[offset:end])
                offset = end
            half.copy_(old)
            old16f.copy_(half)  # FP16(w_old), in FP32 (exact)
            update.add_(old16f)
            half.copy_(update)
            update.copy_(half)  # FP16(FP16(w_old) + update), in FP32 (exact)
            torch.eq(update, old16f, out=unchanged)
        else:  # mixed or other dtypes: the plain formulation
            new = torch.cat(params)
            old16 = old.to(torch.float16)
            unchanged = torch.add(old16, new - old).to(torch.float16) == old16
        intended = torch.stack(nonzero_grads[1]).sum()
        lost = torch.count_nonzero(unchanged.logical_and_(nonzero))
        return torch.stack([lost, intended])

    def _memory(self) -> dict[str, Any]:
        optimizer_tensors = (
            value
            for state in self.optimizer.state.values()
            for value in state.values()
            if isinstance(value, torch.Tensor)
        )
        peak = (
            int(torch.cuda.max_memory_allocated(self.device))
            if self.device.type == "cuda"
            else None
        )
        return {
            "params": _bytes_by_dtype(p for p in self.model.parameters()),
            "grads": _bytes_by_dtype(p.grad for p in self.model.parameters() if p.grad is not None),
            "optimizer": _bytes_by_dtype(optimizer_tensors),
            "activations": dict(self._saved_bytes),
            "peak_device": peak,
        }

    # -- end -----------------------------------------------------------------------------

    def close(self, status: str = "completed", error: str | None = None) -> None:
        """Write the end record and remove every hook. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for handle in self._handles:
            handle.remove()
        if self._saved_hooks is not None:
            self._saved_hooks.__exit__(None, None, None)
            self._saved_hooks = None
        self.writer.write(
            {
                "type": "end",
                "status": status,
                "error": error,
                "steps": self.step_index,
                "elapsed": time.perf_counter() - self._started,
            }
        )
        self.writer.close()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close("completed")
        elif isinstance(exc, KeyboardInterrupt):
            self.close("stopped")
        else:
            self.close("failed", one_line_error(exc))


def one_line_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _StatsLayout:
    """Where each statistic sits in the host list of a step, and how to turn it into JSON."""

    def __init__(
        self,
        layer_of_segment: list[int],
        is_activation: list[bool],
        act_numel_by_dtype: dict[str, int],
        scale: float,
        memory: dict[str, Any],
    ) -> None:
        self.layer_of_segment = layer_of_segment
        self.is_activation = is_activation
        self.act_numel_by_dtype = act_numel_by_dtype
        self.scale = scale
        self.memory = memory
        self.offset_histograms = 4
        self.segments = 0
        self.param_layers: list[int] = []
        self.segment_list: list[_Segment] = []
        self.param_groups: list[tuple[_Segment, list[torch.Tensor]]] = []
        self.n_param = 0
        self.boundaries: list[float] = FORMAT_BOUNDARIES
        self.has_lost_updates = False
        self.forward_layers: list[int] = []

    def decode(self, values: npt.NDArray[np.float64], monitor: AmpMonitor) -> dict[str, Any]:
        layers = monitor._layers
        act_dtype = (
            max(self.act_numel_by_dtype.items(), key=lambda item: item[1])[0]
            if self.act_numel_by_dtype
            else None
        )
        first_nonfinite: str | None = None
        position = self.offset_histograms
        layer_sumsq = np.zeros(len(layers))
        layer_nonfinite = np.zeros(len(layers), dtype=bool)
        if self.param_layers:
            norms = values[position : position + len(self.param_layers)]
            position += len(self.param_layers)
            param_layers = np.asarray(self.param_layers, dtype=np.int64)
            np.add.at(layer_sumsq, param_layers, norms**2)
            np.logical_or.at(layer_nonfinite, param_layers, ~np.isfinite(norms))
        first_forward: str | None = None
        if self.forward_layers:
            flags = values[position : position + len(self.forward_layers)]
            position += len(self.forward_layers)
            for layer_at, finite in zip(self.forward_layers, flags, strict=True):
                if not finite:
                    first_forward = layers[layer_at].name
                    break
        count = self.segments
        rows = values[position : position + count * (CODES + 1)].reshape(count, CODES + 1)
        position += count * (CODES + 1)
        histograms = rows
        unresolved = histograms[:, CODES] - histograms[:, ZERO_CODE]
        for segment in np.flatnonzero(unresolved > 0):  # float32 values below 2**-133
            exact = code_histogram(self._segment_tensor(int(segment))).cpu().numpy()
            histograms[segment, :CODES] = exact
        histograms = histograms[:, :CODES]
        segment_layer = np.asarray(self.layer_of_segment, dtype=np.int64)
        is_act = np.asarray(self.is_activation, dtype=bool)
        n_act = int(is_act.sum())
        amax = values[position : position + n_act]
        position += n_act
        grad_counts = histograms[~is_act].sum(axis=0)
        act_counts = histograms[is_act].sum(axis=0)
        act_layers = segment_layer[is_act]
        layer_act = np.zeros((len(layers), CODES))
        np.add.at(layer_act, act_layers, histograms[is_act])
        layer_amax = np.zeros(len(layers))
        with np.errstate(invalid="ignore"):  # a NaN amax stays NaN: that layer is non-finite
            np.maximum.at(layer_amax, act_layers, amax)
        segment_nonfinite = (histograms[:, INF_CODE] + histograms[:, NAN_CODE]) > 0
        np.logical_or.at(layer_nonfinite, act_layers, segment_nonfinite[is_act])
        # Activation gradients arrive in backward order: the first non-finite one is where
        # the overflow started.
        for layer_at in act_layers[segment_nonfinite[is_act]][:1]:
            first_nonfinite = layers[layer_at].name
        if first_nonfinite is None:
            # No activation gradient went non-finite: the last layer (in forward order) whose
            # parameter gradient did is the first one backward reached.
            for index in reversed(range(len(layers))):
                if layer_nonfinite[index]:
                    first_nonfinite = layers[index].name
                    break
        below_fp16 = FP16_MIN_SUBNORMAL_LOG2 - BINADE_LO  # codes < this: |x| < 2**-24
        layer_records = []
        for index, layer in enumerate(layers):
            row = layer_act[index]
            total = float(row.sum())
            peak = float(layer_amax[index])
            underflow = float(row[:below_fp16].sum() + row[ZERO_CODE])
            layer_records.append(
                {
                    "name": layer.name,
                    "grad_norm": math.sqrt(float(layer_sumsq[index])),
                    "amax": peak,
                    "headroom_log2": (
                        math.log2(FP16_MAX / peak) if peak > 0 and math.isfinite(peak) else None
                    ),
                    "underflow_share": underflow / total if total else 0.0,
                    "nonfinite": bool(layer_nonfinite[index]),
                }
            )
        act_total = float(act_counts.sum())
        record: dict[str, Any] = {
            "grad_hist": histogram_json(grad_counts.tolist()),
            "act_hist": histogram_json(act_counts.tolist(), act_dtype or "float32"),
            "act_zero_share": float(act_counts[ZERO_CODE]) / act_total if act_total else 0.0,
            "layers": layer_records,
            "first_nonfinite": first_nonfinite,
            "first_nonfinite_forward": first_forward,
            "memory": self.memory,
        }
        if self.n_param:
            raw_counts = []
            for _ in self.param_groups:
                raw_counts.append(values[position : position + 32768].astype(np.int64))
                position += 32768
            group_zeros = [int(histograms[i, ZERO_CODE]) for i in range(len(raw_counts))]
            at_most = self._scaled_at_most(raw_counts, group_zeros, monitor._scratch)
            at_most_of = dict(zip(self.boundaries, at_most, strict=True))
            record["format_shares"] = self._format_shares(at_most_of, float(self.n_param))
            if self.has_lost_updates:
                lost, intended = float(values[position]), float(values[position + 1])
                kind = "actual" if _params_dtype(monitor) == torch.float16 else "fp16_would_lose"
                record["lost_updates"] = {
                    "share": lost / intended if intended else 0.0,
                    "kind": kind,
                    "intended": int(intended),
                }
        return record

    def _segment_tensor(self, index: int) -> torch.Tensor:
        """The values behind a float32 segment, for the exact (slow) histogram."""
        if index < len(self.param_groups):
            return torch.cat([g.reshape(-1).float() for g in self.param_groups[index][1]])
        tensor = self.segment_list[index].tensor
        assert tensor is not None, "float32 activation segments keep their tensor"
        return tensor

    def _scaled_at_most(
        self, raw_counts: list[npt.NDArray[np.int64]], group_zeros: list[int], scratch: _Scratch
    ) -> list[int]:
        """For each boundary b: the count of parameter gradients g with |g * scale| <= b
        (products in float32, as `g * scale` would be computed), exact.

        Each b becomes a limit on |g| itself (`_magnitude_limits`), read from the pattern
        counts: a 16-bit pattern is its value; a float32 pattern (top 16 bits) decides
        unless the limit falls inside a pattern that holds gradients, and only then are
        those gradients looked at again: when none has low bits (gradients that were BF16
        values, as under BF16 autocast) the whole pattern is below the limit; otherwise one
        |g| pass and one comparison per such limit."""
        scale = self.scale
        groups = self.param_groups
        if not 0 < scale <= _FLOAT32_MAX:  # also a scale whose float32 would be inf
            values = torch.cat([g.reshape(-1).float() for _, members in groups for g in members])
            return [int(c) for c in _count_at_most(values * scale, self.boundaries).tolist()[:-1]]
        limits = _magnitude_limits(tuple(self.boundaries), scale)
        totals = [0] * len(limits)
        for (segment, members), counts, zeros in zip(groups, raw_counts, group_zeros, strict=True):
            pending: list[tuple[int, int, int]] = []  # (bound index, limit, count below)
            if segment.table != "float32_high":
                pattern_values = _pattern_values(torch.device("cpu"))[segment.table].numpy()
                for index, limit in enumerate(limits):
                    bound = np.int32(limit).view(np.float32)
                    totals[index] += int(counts[pattern_values <= bound].sum())
                continue
            below = np.concatenate([[0], np.cumsum(counts)])  # below[p]: patterns < p
            for index, limit in enumerate(limits):
                pattern, low = limit >> 16, limit & 0xFFFF
                inside = int(counts[pattern])
                if low == 0xFFFF or segment.top_exact:
                    totals[index] += int(below[pattern]) + inside
                elif inside == 0:
                    totals[index] += int(below[pattern])
                elif pattern == 0 and inside == zeros:  # only zeros there, all <= the limit
                    totals[index] += int(below[pattern]) + inside
                else:
                    pending.append((index, limit, int(below[pattern])))
            if not pending:
                continue
            # Further host syncs, only when a limit splits an occupied pattern.
            if segment.top_exact is None and int(_count_low_bits_set(members)) == 0:
                for index, limit, below_pattern in pending:
                    totals[index] += below_pattern + int(counts[limit >> 16])
                continue
            bounds = [float(np.int32(limit).view(np.float32)) for _, limit, _ in pending]
            counted = _count_abs_at_most(members, bounds, scratch).tolist()
            for (index, _, _), count in zip(pending, counted, strict=True):
                totals[index] += int(count)
        return totals

    def _format_shares(self, count: dict[float, int], n_param: float) -> dict[str, Any]:
        """Shares per format from the counts of |g * scale| <= each boundary (NaN counts as
        overflow: it is never <= anything; 0.0 gives the products that are zero)."""
        zeros = count[0.0]
        shares: dict[str, Any] = {}
        for fmt in FORMAT_RANGES:
            flushed = count[fmt.flush_max] - zeros
            shares[fmt.name] = {
                "underflow": flushed / n_param,
                "subnormal": (count[fmt.subnormal_max] - count[fmt.flush_max]) / n_param,
                "overflow": (n_param - count[fmt.finite_max_input]) / n_param,
            }
        return shares


def _params_dtype(monitor: AmpMonitor) -> torch.dtype:
    param = next(monitor.model.parameters(), None)
    return param.dtype if param is not None else torch.float32
