"""Counting kernels: histogram codes and threshold counts read from bit patterns. Needs torch.

Every figure the monitor reports about a tensor's values (binade histograms, zeros, max |x|,
how many magnitudes lie at or below a bound) is read from counts of bit patterns: a bincount
of the 15 magnitude bits of a 16-bit value, or of the top half of a float32. That is exact
and far cheaper than logarithms. Where a pattern alone cannot decide (float32 values below
2**-133, a bound that splits an occupied pattern, the inf pattern that may hide NaNs whose
payload lies in the low 16 bits), the values are looked at again, exactly, and only then.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fpexplorer.training.records import Histogram

# Binade histogram layout: every finite non-zero float32 has floor(log2 |x|) in
# [-149, 127] (-149: the smallest subnormal 2**-149), so no value is ever clamped.
BINADE_LO = -149
BINADE_HI = 127
NUM_BINADES = BINADE_HI - BINADE_LO + 1  # 277
ZERO_CODE = NUM_BINADES
INF_CODE = NUM_BINADES + 1
NAN_CODE = NUM_BINADES + 2
CODES = NUM_BINADES + 3
PATTERNS = 32768  # 15-bit magnitude patterns
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
_FLOAT32_INF_PATTERN = 0x7F80  # top half of a float32 inf (and of NaNs with a low payload)


def binade_codes(values: torch.Tensor) -> torch.Tensor:
    """Histogram code of each element: floor(log2 |x|) - BINADE_LO for finite non-zero x,
    ZERO_CODE, INF_CODE or NAN_CODE otherwise. `values` must be float32 (exact for
    float16/bfloat16 converted to float32); the result is int64."""
    _, exponent = torch.frexp(values)  # |x| = m * 2**e, m in [0.5, 1): floor(log2|x|) = e - 1
    codes = torch.where(values == 0, ZERO_CODE, exponent.to(torch.int64) - 1 - BINADE_LO)
    magnitude_ok = values.abs() <= FLOAT32_MAX  # False for inf and NaN
    special = torch.where(values.isnan(), NAN_CODE, INF_CODE)
    return torch.where(magnitude_ok, codes, special)


def histogram_record(counts: Sequence[float] | np.ndarray, dtype: str | None = None) -> Histogram:
    """The run-log histogram of CODES counts: binade counts trimmed to the non-zero range."""
    binades = np.asarray(counts[:NUM_BINADES], dtype=np.int64)  # counts may arrive as floats
    nonzero = np.flatnonzero(binades)
    first, last = (int(nonzero[0]), int(nonzero[-1]) + 1) if nonzero.size else (0, 0)
    return Histogram(
        lo=BINADE_LO + first if nonzero.size else 0,
        counts=tuple(binades[first:last].tolist()),
        zero=int(counts[ZERO_CODE]),
        inf=int(counts[INF_CODE]),
        nan=int(counts[NAN_CODE]),
        dtype=dtype,
    )


def binade_histogram(tensors: Sequence[torch.Tensor]) -> Histogram:
    """Binade histogram of all elements of `tensors`, each counted once."""
    counts = torch.stack([code_histogram(t) for t in tensors]).sum(dim=0)
    return histogram_record(counts.tolist())


HIGH_HALF = 1 if sys.byteorder == "little" else 0  # the int16 holding a float32's top bits
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
        patterns = torch.arange(PATTERNS, dtype=torch.int32).to(torch.int16)
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


# The tables' block structure: with `cols` patterns per exponent field value, every row of
# normal numbers maps wholly to one code, consecutive from `first` (FP16: 1024 patterns per
# binade; BF16 and a float32's top half: 128). Only the first row (zero, subnormals) and the
# last (inf, NaN) need the pattern-by-pattern table.
_LAYOUTS = {"float16": 1024, "bfloat16": 128, "float32_high": 128}
_FIRST_CODES: dict[tuple[str, torch.device], int | None] = {}


def _first_code(table_name: str, table: torch.Tensor) -> int | None:
    """The code of the first normal row, when every normal row maps wholly to one code,
    consecutive; None otherwise (the plain table is used)."""
    key = (table_name, table.device)
    if key not in _FIRST_CODES:
        cols = _LAYOUTS.get(table_name)
        first: int | None = None
        if cols is not None:
            rows = table.cpu().view(PATTERNS // cols, cols)[1:-1]
            expected = torch.arange(rows.shape[0]).unsqueeze(1) + int(rows[0, 0])
            first = int(rows[0, 0]) if bool((rows == expected).all()) else None
        _FIRST_CODES[key] = first
    return _FIRST_CODES[key]


def _map_patterns(
    counts: torch.Tensor, table: torch.Tensor, table_name: str | None = None
) -> torch.Tensor:
    """CODES + 1 counts by code from the 32768 pattern counts: the normal rows summed in
    place (a view and a sum), the first and last rows through the table."""
    out = torch.zeros(CODES + 1, dtype=torch.int64, device=counts.device)
    first = _first_code(table_name, table) if table_name is not None else None
    if first is None:
        return out.index_add_(0, table, counts)
    cols = _LAYOUTS[table_name or ""]
    rows = PATTERNS // cols
    out[first : first + rows - 2] = counts.view(rows, cols)[1:-1].sum(dim=1)
    out.index_add_(0, table[:cols], counts[:cols])
    return out.index_add_(0, table[-cols:], counts[-cols:])


def code_histogram(tensor: torch.Tensor) -> torch.Tensor:
    """Counts by histogram code (CODES int64 counts) of every element of `tensor`.

    Two passes over the data for 16-bit tensors, four for float32: the bits are binned as
    they are (a bincount of 32768 patterns), which is exact and far cheaper than taking
    logarithms. A float32 NaN whose payload lies only in the low 16 bits has the top half
    of an inf: one more pass tells the infinities apart.
    """
    flat = tensor.detach().reshape(-1).contiguous()  # viewing the bits needs stride 1
    tables = _code_tables(flat.device)
    if flat.dtype in (torch.float16, torch.bfloat16):
        counts = torch.bincount(flat.view(torch.int16) & 0x7FFF, minlength=PATTERNS)
        name = dtype_name(flat.dtype)
        return _map_patterns(counts, tables[name], name)[:CODES]
    values = flat if flat.dtype == torch.float32 else flat.float()
    high = torch.bincount(values.view(torch.int16)[HIGH_HALF::2] & 0x7FFF, minlength=PATTERNS)
    lifted = (values * 2.0**24).view(torch.int16)[HIGH_HALF::2] & 0x7FFF
    tiny = torch.bincount(lifted, minlength=PATTERNS)
    merged = _map_patterns(high, tables["float32_high"], "float32_high")
    merged += _map_patterns(tiny, tables["float32_tiny"])
    # The inf pattern holds the infinities and the NaNs with a payload in the low bits only.
    hidden_nans = high[_FLOAT32_INF_PATTERN] - torch.count_nonzero(values.isinf())
    merged[INF_CODE] -= hidden_nans
    merged[NAN_CODE] += hidden_nans
    return merged[:CODES]


def bits_view(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (detached) in a layout whose int16 view is allowed: last stride 1."""
    data = tensor.detach()
    if data.dim() == 0:
        return data.reshape(1)
    return data if data.stride(-1) == 1 else data.contiguous()


def count_at_most(values: torch.Tensor, bounds: Sequence[float]) -> torch.Tensor:
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
    patterns = values.view(torch.int16)[HIGH_HALF::2] & 0x7FFF
    below = torch.cumsum(torch.bincount(patterns, minlength=PATTERNS), 0)
    # Elements strictly below each bound's pattern, then the exact check inside it.
    index = bound_patterns.long()
    strictly_below = torch.where(index > 0, below[(index - 1).clamp(min=0)], 0)
    # A 32768-entry table lookup: torch.isin is ~5x slower here.
    is_bound = torch.zeros(PATTERNS, dtype=torch.bool, device=device)
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


def count_abs_at_most(
    tensors: Sequence[torch.Tensor], bounds: Sequence[float], scratch: Scratch
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


def count_low_bits_set(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Count of float32 elements whose low 16 bits are not all zero (0 for float32 copies of
    BF16 values, such as autocast's BF16 gradients: their top 16 bits say everything)."""
    counts = [
        torch.count_nonzero(bits_view(t.float()).view(torch.int16)[..., 1 - HIGH_HALF :: 2])
        for t in tensors
    ]
    return torch.stack(counts).sum()


@dataclass(frozen=True, slots=True)
class Segment:
    """Histogram-code counts of one tensor (or one group of parameter gradients), made as
    soon as the tensor exists so that activation gradients need not be kept until `step()`.

    `codes`: CODES + 1 counts by histogram code; for float32 the last one holds the
    elements of magnitude pattern 0 (zeros and |x| < 2**-133, placed later) and ZERO_CODE
    is empty until `zeros` is added. `zeros`: exact zeros (float32 only). `extremes`: (min,
    max) of the values (NaN when any element is NaN), from which `segment_rows` takes max |x|
    of all segments at once (a few operations per step, not per tensor). `patterns`: the
    counts of the 32768 magnitude patterns (the 15 bits below the sign of a 16-bit value,
    or of a float32's top half), kept only where the format shares need them. `tensor`: a
    float32 tensor kept for the exact fallback of `code_histogram` (deep subnormals, the
    inf pattern) and deferred zero counts; None for 16-bit ones.
    """

    layer: int
    dtype: str
    numel: int
    table: str
    codes: torch.Tensor
    zeros: torch.Tensor | None
    extremes: tuple[torch.Tensor, torch.Tensor] | None
    tensor: torch.Tensor | None
    patterns: torch.Tensor | None = None
    # float32 only: True when no element has low bits set (the patterns are the values),
    # False when some has, None when not looked at.
    top_exact: bool | None = None


class Scratch:
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


# Below this many elements a table lookup per element is cheaper than clearing, filling
# and mapping 32768 pattern bins.
_LOOKUP_BELOW = 16384


def code_counts(
    patterns: torch.Tensor, table_name: str, *, keep_patterns: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(CODES + 1 counts by code, the 32768 pattern counts or None) of masked magnitude
    patterns (int16, flat)."""
    table = _code_tables(patterns.device)[table_name]
    if patterns.numel() < _LOOKUP_BELOW and not keep_patterns:
        codes = table.index_select(0, patterns.int())
        return torch.bincount(codes, minlength=CODES + 1), None
    counts = torch.bincount(patterns, minlength=PATTERNS)
    return _map_patterns(counts, table, table_name), counts if keep_patterns else None


# Parameter gradients are counted a chunk at a time through one reused buffer: the monitor
# never holds a parameter-sized temporary.
_CHUNK = 1 << 20


def group_code_counts(
    tensors: Sequence[torch.Tensor],
    table_name: str,
    scratch: Scratch,
    *,
    keep_patterns: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(CODES + 1 counts by code, the 32768 pattern counts or None, the count of non-zero
    elements) of several tensors counted together: float16/bfloat16 by their own bits
    (all of one dtype), anything else by the top half of its float32 value (table
    "float32_high"). Consecutive tensors are copied into one reused buffer of at most 2**20
    elements (one `cat` each time it fills), which is then masked and counted: a handful
    of operations per 2**20 elements however many tensors there are."""
    float32 = table_name == "float32_high"
    dtype = torch.float32 if float32 else tensors[0].dtype
    total = sum(t.numel() for t in tensors)
    device = tensors[0].device
    size = min(max(total, 1), _CHUNK)
    values = scratch.get("chunk_values", size, dtype, device)
    patterns = scratch.get("chunk_patterns", size, torch.int16, device)
    lookup = total < _LOOKUP_BELOW and not keep_patterns
    pending: list[torch.Tensor] = []
    found: list[torch.Tensor] = []  # code counts (lookup: one chunk) or pattern counts, summed
    nonzero: list[torch.Tensor] = []
    filled = 0

    def count_chunk() -> None:
        nonlocal filled
        if not filled:
            return
        chunk = values[:filled]
        torch.cat(pending, out=chunk)
        pending.clear()
        bits = chunk.view(torch.int16)[HIGH_HALF::2] if float32 else chunk.view(torch.int16)
        masked = torch.bitwise_and(bits, 0x7FFF, out=patterns[:filled])
        nonzero.append(torch.count_nonzero(chunk))
        if lookup:
            found.append(code_counts(masked, table_name)[0])
        elif found:  # summed as they come: one 32768-bin vector, whatever the model size
            found[0].add_(torch.bincount(masked, minlength=PATTERNS))
        else:
            found.append(torch.bincount(masked, minlength=PATTERNS))
        filled = 0

    for tensor in tensors:
        flat = tensor.detach().reshape(-1)
        if flat.dtype != dtype:
            flat = flat.to(dtype)
        start = 0
        while start < flat.numel():
            take = min(flat.numel() - start, size - filled)
            pending.append(flat[start : start + take])
            filled += take
            start += take
            if filled == size:
                count_chunk()
    count_chunk()
    nonzero_count = torch.stack(nonzero).sum() if nonzero else torch.zeros((), dtype=torch.int64)
    if lookup:
        codes = found[0] if found else torch.zeros(CODES + 1, dtype=torch.int64, device=device)
        return codes, None, nonzero_count
    counts = found[0]
    codes = _map_patterns(counts, _code_tables(device)[table_name], table_name)
    return codes, counts if keep_patterns else None, nonzero_count


def segment_of(layer: int, tensor: torch.Tensor, scratch: Scratch | None) -> Segment:
    """Code counts of `tensor`: mask, count (a bincount or a table lookup), max |x|; for
    float32 the zeros too where pattern 0 is occupied (on a CPU, counted later)."""
    data = bits_view(tensor)
    if data.dtype in (torch.float16, torch.bfloat16):
        bits = data.view(torch.int16)
        table = dtype_name(data.dtype)
        keep = None
        zeros = None
    else:
        data = data if data.dtype == torch.float32 else data.float()
        bits = data.view(torch.int16)[..., HIGH_HALF::2]
        table = "float32_high"
        keep = data
        # On a CPU the zeros are counted later, only where pattern 0 is occupied (reading
        # one count there costs nothing); on an accelerator that would be a host sync.
        zeros = None if data.device.type == "cpu" else data.numel() - torch.count_nonzero(data)
    low, high = torch.aminmax(data.reshape(-1))
    if scratch is not None:
        out = scratch.get("patterns", bits.numel(), torch.int16, bits.device).view(bits.shape)
        patterns = torch.bitwise_and(bits, 0x7FFF, out=out)
    else:
        patterns = bits & 0x7FFF
    codes, _ = code_counts(patterns.reshape(-1), table)
    return Segment(layer, dtype_name(tensor.dtype), tensor.numel(), table, codes, zeros,
                   (low, high), keep)  # fmt: skip


_PATTERN_VALUES: dict[torch.device, dict[str, torch.Tensor]] = {}


def count_deferred_zeros(segments: list[Segment]) -> list[Segment]:
    """Float32 segments with their zeros counted: 0 where pattern 0 (zero and |x| < 2**-133)
    is empty, one counting pass otherwise."""
    deferred = [i for i, s in enumerate(segments) if s.zeros is None and s.tensor is not None]
    if not deferred:
        return segments
    occupied = torch.stack([segments[i].codes[CODES] for i in deferred]).tolist()
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


def pattern_values(device: torch.device) -> dict[str, torch.Tensor]:
    """The float32 value of each 15-bit magnitude pattern of float16 and bfloat16."""
    values = _PATTERN_VALUES.get(device)
    if values is None:
        patterns = torch.arange(PATTERNS, dtype=torch.int32).to(torch.int16)
        values = {
            "float16": patterns.view(torch.float16).float().to(device),
            "bfloat16": patterns.view(torch.bfloat16).float().to(device),
        }
        _PATTERN_VALUES[device] = values
    return values


def segment_rows(segments: Sequence[Segment]) -> tuple[torch.Tensor, torch.Tensor]:
    """([len(segments), CODES + 1] code counts, [len(segments)] max |x|) on the device.

    Column CODES holds, for float32 segments, the elements below 2**-133 *including* zeros
    (also counted in ZERO_CODE): when it exceeds the zeros, `code_histogram` places them.
    """
    device = segments[0].codes.device
    rows = torch.stack([segment.codes for segment in segments])
    zeros = [(i, s.zeros) for i, s in enumerate(segments) if s.zeros is not None]
    if zeros:
        where = torch.tensor([i for i, _ in zeros], device=device)
        counts = torch.stack([torch.as_tensor(z, device=device) for _, z in zeros])
        rows[:, ZERO_CODE].index_add_(0, where, counts)
    amax = torch.zeros(len(segments), dtype=torch.float32, device=device)  # parameter rows: 0
    measured = [(i, s.extremes) for i, s in enumerate(segments) if s.extremes is not None]
    if measured:
        # stack() promotes 16-bit extremes to float32 exactly; NaN stays NaN.
        lows = torch.stack([low for _, (low, _) in measured])
        highs = torch.stack([high for _, (_, high) in measured])
        peaks = torch.maximum(-lows, highs).float()
        if len(measured) == len(segments):
            amax = peaks
        else:
            where = torch.tensor([i for i, _ in measured], device=device)
            amax.index_copy_(0, where, peaks)
    return rows, amax


@functools.lru_cache(maxsize=256)
def magnitude_limits(bounds: tuple[float, ...], scale: float) -> tuple[int, ...]:
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


@functools.cache
def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
