"""Counting kernels: histogram codes and threshold counts read from bit patterns. Needs torch.

Every figure the monitor reports about a tensor's values (binade histograms, zeros, max |x|,
how many magnitudes lie at or below a bound) is read from counts of bit patterns: a bincount
of the 15 magnitude bits of a 16-bit value, of the exponent field of a float32 (or, for the
format shares, of its top half), and the largest magnitude's bits. That is exact and far
cheaper than logarithms. Where the bits alone cannot decide (float32 subnormals, a bound
that splits an occupied pattern, exponent field 255, which holds NaNs as well as
infinities), the values are looked at again, exactly, and only then.

Activation gradients are counted in their backward hook (`segment_of`: four to five tensor
operations, none of which reads a value back on the host), except small ones on a CPU, which
are counted together at the step's end in numpy (a call on a small array costs a fraction of
a torch call); `segment_rows` turns all of a step's counts into rows of histogram codes at
once.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch._C._nn import flatten_dense_tensors

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
_SUBNORMAL_BINADES = 23  # float32 subnormals lie in binades -149..-127


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
    nonzero = binades.nonzero()[0]
    first, last = (int(nonzero[0]), int(nonzero[-1]) + 1) if nonzero.size else (0, 0)
    zero, inf, nan = (int(count) for count in counts[ZERO_CODE : NAN_CODE + 1])
    return Histogram(
        lo=BINADE_LO + first if nonzero.size else 0,
        counts=tuple(binades[first:last].tolist()),
        zero=zero,
        inf=inf,
        nan=nan,
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
    and the deepest subnormals) go to the extra bin, to be placed from the values.
    """
    tables = _TABLES.get(device)
    if tables is None:
        patterns = torch.arange(PATTERNS, dtype=torch.int32).to(torch.int16)
        high = (patterns.to(torch.int32) << 16).view(torch.float32)
        fp32_high = binade_codes(high)
        fp32_high[0] = _DISCARD  # zero and |x| < 2**-133: placed from the values
        tables = {
            "float16": binade_codes(patterns.view(torch.float16).float()),
            "bfloat16": binade_codes(patterns.view(torch.bfloat16).float()),
            "float32_high": fp32_high,
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

    16-bit tensors: their 32768 magnitude patterns counted and mapped to codes. float32
    (wider dtypes converted): the exponent field of |x| (normal values), that of |x| * 2**24
    (subnormals, lifted exactly into the normal range, and zeros, which stay zero), and a
    count of the infinities, which field 255 shares with the NaNs (whatever their payload).
    Exact, and far cheaper than taking logarithms.
    """
    flat = tensor.detach().reshape(-1)
    tables = _code_tables(flat.device)
    if flat.dtype in (torch.float16, torch.bfloat16):
        counts = torch.bincount(flat.view(torch.int16) & 0x7FFF, minlength=PATTERNS)
        name = dtype_name(flat.dtype)
        return _map_patterns(counts, tables[name], name)[:CODES]
    return _magnitude_codes((flat if flat.dtype == torch.float32 else flat.float()).abs())[:CODES]


def _magnitude_codes(magnitudes: torch.Tensor) -> torch.Tensor:
    """CODES + 1 counts by code (the last one 0) of float32 magnitudes (|x|, flat), by
    device operations alone (no host sync: an accelerator's backward hook calls it)."""
    bits = magnitudes.view(torch.int32)
    codes = torch.zeros(CODES + 1, dtype=torch.int64, device=magnitudes.device)
    fields = _count_bins(bits >> 23, EXPONENT_FIELDS)
    codes.index_copy_(0, _columns("exponents", magnitudes.device)[0], fields)
    # |x| * 2**24 lifts every subnormal into the normal range, exactly, and leaves a zero
    # zero: its exponent field (2..24 for a subnormal, 0 for a zero) is 24 above the binade.
    lifted = _count_bins((magnitudes * 2.0**24).view(torch.int32) >> 23, 256)
    codes[:_SUBNORMAL_BINADES] += lifted[2 : 2 + _SUBNORMAL_BINADES]
    codes[ZERO_CODE] = lifted[0]
    # Exponent field 255 holds the infinities and the NaNs.
    infinities = torch.count_nonzero(bits == 0x7F800000)
    codes[NAN_CODE] = codes[INF_CODE] - infinities
    codes[INF_CODE] = infinities
    codes[CODES] = 0  # field 0 (zeros, subnormals): placed above
    return codes


def group_code_histogram(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """`code_histogram` of several tensors together (the exact fallback of a parameter
    group): up to 2**20 elements from one flattened copy (one call each step, where the
    per-tensor calls cost a few dozen operations per gradient), beyond that one tensor at a
    time (no parameter-sized copy)."""
    values = [t.detach() if t.dtype == torch.float32 else t.detach().float() for t in tensors]
    if len(values) > 1 and sum(t.numel() for t in values) <= _CHUNK:
        return code_histogram(flatten_dense_tensors(values))
    return torch.stack([code_histogram(t) for t in values]).sum(dim=0)


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
    float tensors, by their float32 values (one pass for |x|, then one comparison per
    bound)."""
    total = sum(t.numel() for t in tensors)
    device = tensors[0].device
    magnitudes = scratch.get("magnitudes", total, torch.float32, device)
    offset = 0
    for tensor in tensors:
        end = offset + tensor.numel()
        part = magnitudes[offset:end]
        if tensor.dtype == torch.float32:
            torch.abs(tensor.detach().reshape(-1), out=part)
        else:  # abs() writes its input's dtype: a float64 tensor's float32 values, then |x|
            part.copy_(tensor.detach().reshape(-1)).abs_()
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


# A float32's exponent field (8 bits) is floor(log2 |x|) + 127 for every normal value: field
# e in 1..254 is code e - 127 - BINADE_LO. Field 0 holds the zeros and the subnormals, field
# 255 inf and NaN: their counts go to column CODES and to INF_CODE, where the decoder finds
# whether they need the values looked at again (rarely: see `StatsPlan._histograms`).
EXPONENT_FIELDS = 256
_FLOAT32_BIAS = 127
_EXPONENT_COLUMNS = (
    CODES,
    *(field - _FLOAT32_BIAS - BINADE_LO for field in range(1, EXPONENT_FIELDS - 1)),
    INF_CODE,
)
_EXPONENT_COLUMN_ARRAY = np.array(_EXPONENT_COLUMNS)
_FIRST_FIELD_CODE = 1 - _FLOAT32_BIAS - BINADE_LO  # the code of exponent field 1 (2**-126)
_PATTERN_TABLES = ("float16", "bfloat16")  # 16-bit formats: a pattern is its value
_FIELD_SHIFT = 21  # bits >> 21: the exponent field and the top two mantissa bits
_FIELD_BINS = EXPONENT_FIELDS << (23 - _FIELD_SHIFT)


class Segment(NamedTuple):
    """Histogram counts of one tensor (or one group of parameter gradients), made as soon as
    the tensor exists so that large activation gradients need not be kept until `step()`;
    turned into rows of code counts, all segments at once, by `segment_rows`. (A named
    tuple, not a frozen dataclass: one is built in every backward hook, and it costs a
    third.)

    `layout` says what `codes` holds:
    - "codes": CODES + 1 counts by histogram code; for float32 the last one holds the
      elements the bits could not place (zeros included), and ZERO_CODE is empty until
      `zeros` is added;
    - "exponents": the counts of a float32's (or a bfloat16's: the same field) exponent
      field with its top two mantissa bits (_FIELD_BINS), summed per field by
      `segment_rows` (one sum for all segments);
    - "blocks": the counts of each exponent-field value of the 16-bit format `table`; its
      first and last values (zero and subnormals; inf and NaN) are placed from `edges`, the
      counts of their patterns;
    - "pending": nothing counted yet (`codes` empty): `tensor` (a small CPU tensor, 16-bit
      or float32) is counted with the others by `segment_rows`.
    `zeros`: exact zeros (float32 only; None where `segment_rows` counts them).
    `peak`: the largest magnitude as bits (an int32 tensor, or an int counted on the host):
    a float32's bits with the sign cleared, or the 15-bit pattern of a 16-bit `table`; it
    gives max |x| exactly, NaN when any element is NaN (NaN patterns lie above inf's).
    None: not measured (parameter groups, empty tensors, pending ones). `patterns`: the
    counts of the 32768 magnitude patterns (the 15 bits below the sign of a 16-bit value, or
    of a float32's top half), kept only where the format shares need them. `tensor`: the
    float32 values, kept for the exact fallback of `code_histogram` (subnormals, inf/NaN)
    and the deferred zero count (an accelerator's activation gradients, parameter groups);
    a pending segment's values (a copy); None for others.
    """

    layer: int
    dtype: str
    numel: int
    table: str
    codes: torch.Tensor
    zeros: torch.Tensor | int | None
    peak: torch.Tensor | int | None
    tensor: torch.Tensor | None
    patterns: torch.Tensor | None = None
    # float32 only: True when no element has low bits set (the patterns are the values),
    # False when some has, None when not looked at.
    top_exact: bool | None = None
    layout: str = "codes"
    edges: torch.Tensor | None = None

    @property
    def exact(self) -> bool:
        """Whether the counts place every element (16-bit patterns do, and a float32
        activation gradient's codes counted exactly in its hook, see `_fields_now`); other
        float32 rows may leave some for the values to place (see `StatsPlan._histograms`)."""
        return self.table in _PATTERN_TABLES or (
            self.layout == "codes" and self.table == "float32" and self.layer >= 0
        )


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
# and mapping 32768 pattern bins: for a parameter group (mapped to codes one by one), and
# for an activation gradient (whose pattern counts are summed per exponent field, and
# mapped with the others of the step).
_LOOKUP_BELOW = 16384
_ACT_LOOKUP_BELOW = 4096
# CPU activation gradients below this many elements are counted all at once in
# `segment_rows`, in numpy (they are kept until then: small ones only).
_HOST_BELOW = 16384
_SMALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_PENDING = torch.zeros(0, dtype=torch.int64)  # the codes of a segment not counted yet


def code_counts(
    patterns: torch.Tensor, table_name: str, *, keep_patterns: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(CODES + 1 counts by code, the 32768 pattern counts or None) of masked magnitude
    patterns (int16 or int32, flat)."""
    table = _code_tables(patterns.device)[table_name]
    if patterns.numel() < _LOOKUP_BELOW and not keep_patterns:
        index = patterns if patterns.dtype == torch.int32 else patterns.int()
        return _count_bins(table.index_select(0, index), CODES + 1), None
    counts = _count_bins(patterns, PATTERNS)
    return _map_patterns(counts, table, table_name), counts if keep_patterns else None


# Device types whose bincount counts without a host sync. CUDA's reads its input's maximum
# on the host (to size its output), which in a backward hook would stall the queue: there
# the counts are an index_add of ones, which sizes nothing.
_BINCOUNT_DEVICES = ("cpu", "mps")


def _count_bins(index: torch.Tensor, bins: int) -> torch.Tensor:
    """The count of each value of `index` (integers in [0, bins)), int64, without a sync."""
    if index.device.type in _BINCOUNT_DEVICES:
        return torch.bincount(index, minlength=bins)
    flat = index.reshape(-1)
    if flat.dtype not in (torch.int32, torch.int64):  # index_add takes these only
        flat = flat.int()
    ones = torch.ones((), dtype=torch.int64, device=index.device).expand(flat.numel())
    return torch.zeros(bins, dtype=torch.int64, device=index.device).index_add_(0, flat, ones)


_COLUMNS: dict[tuple[str, torch.device], tuple[torch.Tensor, ...]] = {}


def _columns(kind: str, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Where each count of a layout goes in a row of CODES + 1 (index tensors, made once per
    device): "exponents": the column of each exponent field; "<16-bit format>": the
    positions of the first and last exponent fields' patterns, the codes of those patterns,
    and the columns of the other fields' counts."""
    key = (kind, device)
    columns = _COLUMNS.get(key)
    if columns is None:
        if kind == "exponents":
            columns = (torch.tensor(_EXPONENT_COLUMNS, device=device),)
        else:
            cols = _LAYOUTS[kind]
            table = _code_tables(torch.device("cpu"))[kind]
            first = _first_code(kind, table)
            if first is None:
                raise ValueError(f"the {kind} table has no block structure")
            edge_positions = torch.cat(
                [torch.arange(cols), torch.arange(PATTERNS - cols, PATTERNS)]
            )
            columns = (
                edge_positions.to(device),
                table.index_select(0, edge_positions).to(device),
                torch.arange(first, first + PATTERNS // cols - 2, device=device),
            )
        _COLUMNS[key] = columns
    return columns


# Parameter gradients are counted a chunk at a time through one reused buffer: the monitor
# never holds a parameter-sized temporary.
_CHUNK = 1 << 20


def group_code_counts(
    tensors: Sequence[torch.Tensor],
    table_name: str,
    scratch: Scratch,
    *,
    keep_patterns: bool = False,
    field_counts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(CODES + 1 counts by code, the 32768 pattern counts or None, the count of non-zero
    elements) of several tensors counted together: float16/bfloat16 by their own bits
    (all of one dtype), anything else by its float32 value (table "float32_high"): the
    exponent field of |x|, or, where the pattern counts are kept, the 15 magnitude bits of
    its top half (column CODES then holds |x| < 2**-133, zeros included; with the exponent
    field, |x| < 2**-126). Consecutive tensors are copied into one reused buffer of at most
    2**20 elements (one `cat` each time it fills), which is then counted: a handful of
    operations per 2**20 elements however many tensors there are; up to 2**20 elements,
    one flattening copy of them all (a single call) is counted. `field_counts` (float32
    without the pattern counts only): the _FIELD_BINS counts of the exponent field and two
    mantissa bits in place of the codes, as an "exponents" `Segment` holds them."""
    float32 = table_name == "float32_high"
    dtype = torch.float32 if float32 else tensors[0].dtype
    total = sum(t.numel() for t in tensors)
    device = tensors[0].device
    lookup = not float32 and total < _LOOKUP_BELOW and not keep_patterns
    bins = _FIELD_BINS if float32 and not keep_patterns else PATTERNS
    found: list[torch.Tensor] = []  # code counts (lookup: one chunk) or bin counts, summed
    nonzero: list[torch.Tensor] = []

    def count(chunk: torch.Tensor) -> None:
        """Count a flat copy of some of the values (changed in place)."""
        if float32:  # |x|, then its exponent field (with two lane bits) or its top half
            bits = chunk.abs_().view(torch.int32)
            # Of |x|: -0.0 is a zero too. (numpy counts an int32 array in half torch's time
            # when timed alone, but in a training loop takes half as long again as torch.)
            nonzero.append(torch.count_nonzero(bits))
            binned = bits.bitwise_right_shift_(_FIELD_SHIFT if bins == _FIELD_BINS else 16)
        else:
            out = scratch.get("chunk_patterns", chunk.numel(), torch.int16, device)
            binned = torch.bitwise_and(chunk.view(torch.int16), 0x7FFF, out=out)
            nonzero.append(torch.count_nonzero(binned))
        if lookup:
            found.append(code_counts(binned, table_name)[0])
        elif found:  # summed as they come: one vector of bins, whatever the model size
            found[0].add_(_count_bins(binned, bins))
        else:
            found.append(_count_bins(binned, bins))

    # Detached only where a graph is attached: a detach per gradient costs its tensor.
    flats = [
        (t.detach() if t.requires_grad else t) if t.dtype == dtype else t.detach().to(dtype)
        for t in tensors
    ]
    if total <= _CHUNK:  # one copy of them all, made in one call
        count(flatten_dense_tensors(flats) if len(flats) > 1 else flats[0].reshape(-1).clone())
    else:
        _count_in_chunks(flats, scratch.get("chunk_values", _CHUNK, dtype, device), count)
    nonzero_count = nonzero[0] if len(nonzero) == 1 else torch.stack(nonzero).sum()
    if lookup:
        return found[0], None, nonzero_count
    counts = found[0]
    if bins == _FIELD_BINS and field_counts:
        return counts, None, nonzero_count
    if bins == _FIELD_BINS:
        codes = torch.zeros(CODES + 1, dtype=torch.int64, device=device)
        fields = counts.view(EXPONENT_FIELDS, -1).sum(dim=1)
        return codes.index_copy_(0, _columns("exponents", device)[0], fields), None, nonzero_count
    codes = _map_patterns(counts, _code_tables(device)[table_name], table_name)
    return codes, counts if keep_patterns else None, nonzero_count


def group_segment(
    members: Sequence[torch.Tensor],
    dtype: torch.dtype,
    scratch: Scratch,
    *,
    keep_patterns: bool = False,
    top_exact: bool | None = None,
) -> Segment:
    """The segment of a parameter group: gradients of one dtype class (`dtype`: float16,
    bfloat16, or float32 for any other). A small group on a CPU, without the format shares'
    pattern counts, is only flattened here (one call); its histogram is counted with the
    step's small activation gradients (a pending segment, see `segment_rows`, which counts
    its zeros too). Others: `group_code_counts`."""
    total = sum(g.numel() for g in members)
    float32 = dtype == torch.float32
    name = "float32" if float32 else dtype_name(dtype)
    if members[0].device.type == "cpu" and 0 < total < _HOST_BELOW and not keep_patterns:
        # Detached only where a graph is attached: a detach per gradient costs its tensor.
        values = [
            (g.detach() if g.requires_grad else g) if g.dtype == dtype else g.detach().to(dtype)
            for g in members
        ]
        flat = flatten_dense_tensors(values) if len(values) > 1 else values[0].reshape(-1)
        return Segment(-1, name, total, name, _PENDING, None, None, flat, None, top_exact,
                       layout="pending")  # fmt: skip
    table = "float32_high" if float32 else name
    on_host = members[0].device.type == "cpu"
    if float32 and on_host and not keep_patterns:
        # The exponent-field counts as they are (an "exponents" segment, placed with the
        # activation gradients' by `segment_rows`: no row of codes made here), the zeros
        # read now (a CPU has no queue to wait for).
        fields, _, nonzero = group_code_counts(members, table, scratch, field_counts=True)
        return Segment(-1, name, total, table, fields, total - int(nonzero), None, None, None,
                       top_exact, layout="exponents")  # fmt: skip
    codes, counts, nonzero = group_code_counts(members, table, scratch,
                                               keep_patterns=keep_patterns)  # fmt: skip
    if float32:
        return Segment(-1, name, total, table, codes, total - nonzero, None, None, counts,
                       top_exact)  # fmt: skip
    return Segment(-1, name, total, table, codes, None, None, None, counts, True)


def _count_in_chunks(
    flats: list[torch.Tensor], buffer: torch.Tensor, count: Callable[[torch.Tensor], None]
) -> None:
    """Hand `count` the tensors' elements through `buffer`: consecutive tensors are copied
    into it (one `cat` each time it fills), so that no parameter-sized copy is ever made."""
    size = buffer.numel()
    pending: list[torch.Tensor] = []
    filled = 0
    for tensor in flats:
        flat = tensor.reshape(-1)
        start = 0
        while start < flat.numel():
            take = min(flat.numel() - start, size - filled)
            pending.append(flat[start : start + take])
            filled += take
            start += take
            if filled == size:
                count(torch.cat(pending, out=buffer))
                pending.clear()
                filled = 0
    if filled:
        count(torch.cat(pending, out=buffer[:filled]))


def segment_of(layer: int, tensor: torch.Tensor, *, zeros_first: bool = False) -> Segment:
    """Counts of one activation gradient, made in backward with a handful of operations.

    On a CPU (`_fields_now`), float32 (wider dtypes converted) and bfloat16 alike: the
    magnitude bits (|x| of a float32, the 15 bits below a bfloat16's sign: one pass), their
    maximum (max |x| exactly), and the counts of their exponent field with the top two
    mantissa bits (a shift in place; 1024 bins, summed to 256, count faster than 256: fewer
    increments of one counter in a row); the zeros are counted only where exponent field 0
    is occupied, and a gradient the fields cannot place is counted exactly, both there
    (reading the counts costs nothing on a CPU). float16: the magnitude patterns, their
    maximum, then a table lookup per element and a count by code (small tensors) or a count
    of the 32768 patterns summed per exponent field. On an accelerator, where reading counts
    in a hook would be a host sync, 16-bit gradients take the float16 path and float32 ones
    are counted exactly by device operations (`_magnitude_codes`). Any strides: a view as
    integers of the same width needs none. `zeros_first`: a hint that the gradient likely has
    zeros (its layer's had at the last step), which a CPU then counts before the shift, from
    the magnitude bits, at no copy (see `_fields_now`); the counts are the same either way.
    """
    data = tensor.detach()
    name = dtype_name(data.dtype)
    numel = data.numel()
    device = data.device
    if device.type == "cpu" and numel < _HOST_BELOW:
        # Counted with the step's other small ones, in numpy (see `_count_on_host`).
        if not numel:
            codes = torch.zeros(CODES + 1, dtype=torch.int64)
            return Segment(layer, name, 0, name, codes, None, None, None)
        # A copy: the gradient itself may become a parameter's `.grad` (autograd hands it
        # on uncopied where it is the parameter's only gradient), which a second backward,
        # unscale_ or clipping then change in place before step().
        values = data.clone() if data.dtype in _SMALL_DTYPES else data.float()
        table = name if name in _PATTERN_TABLES else "float32"
        return Segment(layer, name, numel, table, _PENDING, None, None, values, layout="pending")
    if device.type in _READ_IN_HOOK_DEVICES and numel and data.dtype != torch.float16:
        return _fields_now(layer, name, numel, data, zeros_first)
    if data.dtype in (torch.float16, torch.bfloat16):
        bits = data.view(torch.int16)
        if numel < _ACT_LOOKUP_BELOW:  # int32 patterns: the lookup's index
            flat = torch.bitwise_and(bits, 0x7FFF, out=torch.empty(
                data.shape, dtype=torch.int32, device=device)).reshape(-1)  # fmt: skip
            codes = _count_bins(_code_tables(device)[name].index_select(0, flat), CODES + 1)
            return Segment(layer, name, numel, name, codes, None, flat.max() if numel else None,
                           None)  # fmt: skip
        flat = (bits & 0x7FFF).reshape(-1)
        counts = _count_bins(flat, PATTERNS)
        cols = _LAYOUTS[name]
        fields = counts.view(PATTERNS // cols, cols).sum(dim=1)
        edges = counts.index_select(0, _columns(name, device)[0])
        return Segment(layer, name, numel, name, fields, None, flat.max(), None,
                       layout="blocks", edges=edges)  # fmt: skip
    values = data if data.dtype == torch.float32 else data.float()
    magnitudes = torch.abs(values.reshape(-1))
    peak = magnitudes.view(torch.int32).max() if numel else None
    # Counted exactly here by device operations alone (a host read would be a sync): two
    # passes more than the fields, but nothing is kept until step(), neither the memory nor
    # values that unscale_ or clipping may change in place before it (see `_fields_now`).
    codes = _magnitude_codes(magnitudes)
    return Segment(layer, name, numel, "float32", codes, None, peak, None)


# Device types whose counts a backward hook reads at no cost (no queue to wait for).
_READ_IN_HOOK_DEVICES = ("cpu",)
# bfloat16 has float32's exponent field (and bias): the top 10 bits of either's magnitude
# are the same 1024 bins, placed by the same columns ("exponents").
_BFLOAT16_FIELD_SHIFT = _FIELD_SHIFT - 16


def _fields_now(
    layer: int, name: str, numel: int, data: torch.Tensor, zeros_first: bool
) -> Segment:  # fmt: skip
    """A CPU activation gradient's segment (bfloat16, or float32 after conversion; not
    empty), complete in its hook (a CPU reads its counts at no cost): the counts of the
    exponent field with two mantissa bits (`_FIELD_BINS`), the zeros where exponent field 0
    is occupied, and the exact histogram (`code_histogram`) where the fields cannot place
    every element (subnormals; field 255, which holds NaNs as well as infinities). The
    values are not kept: the gradient may become a parameter's `.grad`, changed in place
    before step() (a second backward, unscale_, clipping), and backward frees it as usual.
    (A work tensor reused from hook to hook was slower in a training step: a fresh one
    comes from memory just freed, still in cache; a kept one has been evicted by then.)
    The zeros: with `zeros_first`, the non-zero magnitude bits counted before the shift
    (numpy, no copy); otherwise, only where field 0 turns out occupied, compared with 0 in
    a copy (in a training step some 100 us for 10**5 elements: the copy's fresh memory)."""
    if data.dtype == torch.bfloat16:
        values, table, top_field = data, "bfloat16", 0x7F80
        work = torch.bitwise_and(data.view(torch.int16), 0x7FFF).reshape(-1)
        shift = _BFLOAT16_FIELD_SHIFT
    else:
        values = data if data.dtype == torch.float32 else data.float()
        table, top_field, shift = "float32", 0x7F800000, _FIELD_SHIFT
        work = torch.abs(values.reshape(-1)).view(torch.int32)
    zeros = numel - int(np.count_nonzero(work.numpy())) if zeros_first else None
    peak = work.max()
    binned = torch.bincount(work.bitwise_right_shift_(shift), minlength=_FIELD_BINS)
    # Field 0's four bins read one by one: a numpy reduction of a 4-element slice costs
    # several times as much in a backward hook. Field 255 is occupied when max |x| is in it.
    fields = binned.numpy()
    low = int(fields[0]) + int(fields[1]) + int(fields[2]) + int(fields[3])
    if zeros is None:
        zeros = _zeros(values) if low else 0
    if low > zeros or int(peak) >= top_field:
        codes = torch.zeros(CODES + 1, dtype=torch.int64)
        codes[:CODES] = code_histogram(values)
        return Segment(layer, name, numel, table, codes, None, peak, None)
    return Segment(layer, name, numel, table, binned, zeros, peak, None, layout="exponents")


def _zeros(values: torch.Tensor) -> int:
    """The count of zeros (-0.0 included) of a CPU float32 or bfloat16 tensor, in numpy
    (compared with 0: numpy counts non-zero floats far slower; bfloat16 by its bits)."""
    if values.dtype == torch.float32:
        return int(np.count_nonzero(values.numpy() == 0))
    return int(np.count_nonzero(np.bitwise_and(values.view(torch.int16).numpy(), 0x7FFF) == 0))


@functools.cache
def _host_tables() -> dict[str, torch.Tensor]:
    """The 16-bit code tables on the CPU, int32 (the index `_count_on_host` counts)."""
    tables = _code_tables(torch.device("cpu"))
    return {name: tables[name].int() for name in _PATTERN_TABLES}


_PATTERN_VALUES: dict[torch.device, dict[str, torch.Tensor]] = {}


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
    """([len(segments), CODES + 1] code counts, [len(segments)] max |x|) on the device: the
    segments of each layout are stacked and placed together (a few operations per step, not
    per tensor).

    Column CODES holds, for float32 segments, the elements the bits could not place
    *including* zeros (also counted in ZERO_CODE); INF_CODE holds their inf and NaN: when
    either is more than the zeros, `code_histogram` places them. On a CPU the float32 zeros
    of activation gradients are counted here, only where those elements exist, and the
    pending small tensors are counted (see `_host_rows`).
    """
    if segments[0].codes.device.type == "cpu":
        return _host_rows(segments)
    return _device_rows(segments)


def _device_rows(segments: Sequence[Segment]) -> tuple[torch.Tensor, torch.Tensor]:
    """`segment_rows` by torch operations only (on an accelerator a host read per segment
    would be a sync); zeros not yet counted are counted here."""
    rows, amax = _placed_rows(segments)
    known = [(i, s.zeros) for i, s in enumerate(segments) if s.zeros is not None]
    deferred = [i for i, s in enumerate(segments) if s.zeros is None and s.tensor is not None]
    for index in deferred:  # only on a CPU: an accelerator counts them in the hook
        tensor = segments[index].tensor
        if tensor is not None:
            known.append((index, (tensor == 0).sum()))
    if known:
        device = rows.device
        where = torch.tensor([i for i, _ in known], device=device)
        counts = torch.stack([torch.as_tensor(z, device=device) for _, z in known])
        rows[:, ZERO_CODE].index_add_(0, where, counts)
    return rows, amax


def _host_rows(segments: Sequence[Segment]) -> tuple[torch.Tensor, torch.Tensor]:
    """`segment_rows` on a CPU, in numpy on zero-copy views of the counts (a few numpy calls
    per layout, where torch's indexed copies cost several times as much): the counted
    segments placed, then the zeros (counted only where exponent field 0 is occupied) and
    the pending small tensors, each kind counted at once (`_count_on_host`)."""
    count = len(segments)
    rows = np.zeros((count, CODES + 1), dtype=np.int64)
    amax = np.zeros(count, dtype=np.float32)  # parameter rows: 0
    kinds: dict[tuple[str, str], list[int]] = {}
    peaks: dict[str, tuple[list[int], list[torch.Tensor | int]]] = {}
    pending: dict[str, list[int]] = {}
    zeros_at: list[int] = []
    zeros: list[int] = []
    deferred: list[int] = []  # zeros not counted yet
    for index, segment in enumerate(segments):
        layout = segment.layout
        if layout == "pending":
            # bfloat16 is counted by its exponent fields with the float32 ones (one count).
            table = "float32" if segment.table == "bfloat16" else segment.table
            pending.setdefault(table, []).append(index)
            continue
        if layout == "codes":
            rows[index] = segment.codes.numpy()
        else:  # float32 and bfloat16 exponent fields are placed alike: together
            table = segment.table if layout == "blocks" else ""
            kinds.setdefault((layout, table), []).append(index)
        if segment.peak is not None:
            where, found = peaks.setdefault(segment.table, ([], []))
            where.append(index)
            found.append(segment.peak)
        if segment.zeros is not None:
            zeros_at.append(index)
            zeros.append(int(segment.zeros))
        elif segment.tensor is not None:
            deferred.append(index)
    for (layout, table), where in kinds.items():
        stacked = torch.stack([segments[i].codes for i in where])
        at = np.array(where)[:, None]
        if layout == "exponents":
            # Summed by torch: numpy's sum over an axis of 4 costs several times as much.
            fields = stacked.view(len(where), EXPONENT_FIELDS, -1).sum(dim=2).numpy()
            if where[-1] - where[0] == len(where) - 1:  # consecutive rows: slices, no gather
                block = rows[where[0] : where[-1] + 1]
                block[:, _FIRST_FIELD_CODE : _FIRST_FIELD_CODE + EXPONENT_FIELDS - 2] = fields[
                    :, 1:-1
                ]
                block[:, CODES] = fields[:, 0]
                block[:, INF_CODE] = fields[:, -1]
            else:
                rows[at, _EXPONENT_COLUMN_ARRAY] = fields
        else:  # "blocks": the edge patterns' codes repeat, so torch adds them up, in `rows`
            _, edge_codes, field_columns = _columns(table, torch.device("cpu"))
            rows[at, field_columns.numpy()] = stacked.numpy()[:, 1:-1]
            edges = torch.stack([edge for i in where if (edge := segments[i].edges) is not None])
            at_tensor = torch.from_numpy(at)
            torch.from_numpy(rows).index_put_((at_tensor, edge_codes), edges, accumulate=True)
    for table, (where, found) in peaks.items():
        if all(isinstance(peak, torch.Tensor) for peak in found):
            bits = torch.stack(found).numpy()  # type: ignore[arg-type]  # int16 or int32
        else:
            bits = np.array([int(peak) for peak in found])
        if table in _PATTERN_TABLES:
            amax[where] = pattern_values(torch.device("cpu"))[table].numpy()[bits]
        else:
            amax[where] = bits.astype(np.int32).view(np.float32)
    if zeros_at:
        rows[zeros_at, ZERO_CODE] += zeros
    for index in deferred:
        tensor = segments[index].tensor
        if tensor is not None and rows[index, CODES]:
            # Field 0 occupied: the zeros, compared with 0 (-0.0 included): numpy counts
            # non-zero floats far slower.
            rows[index, ZERO_CODE] += int(np.count_nonzero(tensor.numpy() == 0))
    for table, where in pending.items():
        tensors = [tensor for i in where if (tensor := segments[i].tensor) is not None]
        rows[where], amax[where] = _count_on_host(table, tensors)
    return torch.from_numpy(rows), torch.from_numpy(amax)


def _placed_rows(segments: Sequence[Segment]) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, max |x|) of the counted segments, each layout stacked and placed at once by
    torch operations (on an accelerator; a CPU's are placed in numpy by `_host_rows`); zeros
    not added, pending segments left empty."""
    device = segments[0].codes.device
    count = len(segments)
    rows = torch.zeros(count, CODES + 1, dtype=torch.int64, device=device)
    amax = torch.zeros(count, dtype=torch.float32, device=device)  # parameter rows: 0
    kinds: dict[tuple[str, str], list[int]] = {}
    peaks: dict[str, tuple[list[int], list[torch.Tensor]]] = {}
    for index, segment in enumerate(segments):
        kinds.setdefault((segment.layout, segment.table), []).append(index)
        if segment.peak is not None:
            where, found = peaks.setdefault(segment.table, ([], []))
            where.append(index)
            found.append(torch.as_tensor(segment.peak, device=device))
    for (layout, table), where in kinds.items():
        if layout == "pending":
            continue
        counts = torch.stack([segments[i].codes for i in where])
        at = _index(where, device)
        if layout == "codes":
            rows.index_copy_(0, at, counts)
        elif layout == "exponents":
            fields = counts.view(len(where), EXPONENT_FIELDS, -1).sum(dim=2)
            rows.index_put_((at.unsqueeze(1), _columns("exponents", device)[0]), fields)
        else:
            _, edge_codes, field_columns = _columns(table, device)
            rows.index_put_((at.unsqueeze(1), field_columns), counts[:, 1:-1])
            edges = torch.stack([edge for i in where if (edge := segments[i].edges) is not None])
            rows.index_put_((at.unsqueeze(1), edge_codes), edges, accumulate=True)
    for table, (where, found) in peaks.items():
        bits = torch.stack(found)
        if table in _PATTERN_TABLES:  # int16 or int32 patterns: stack() promotes
            values = pattern_values(device)[table].index_select(0, bits.int())
        else:
            values = bits.view(torch.float32)
        amax.index_copy_(0, _index(where, device), values)
    return rows, amax


_INDEXES: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def _index(where: list[int], device: torch.device) -> torch.Tensor:
    """`where` as an index tensor on `device`, kept for the next steps (the same come back)."""
    key = (tuple(where), device)
    index = _INDEXES.get(key)
    if index is None:
        if len(_INDEXES) > 256:  # layouts that vary from step to step: keep a few
            _INDEXES.clear()
        index = _INDEXES[key] = torch.tensor(where, device=device)
    return index


def _count_on_host(table: str, tensors: list[torch.Tensor]) -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.float32]
]:  # fmt: skip
    """([len(tensors), CODES + 1] code counts, max |x| of each) of small non-empty CPU
    tensors of one kind (float16, or float32 and bfloat16 together), counted together: their
    bits read (numpy, on zero-copy views) into one reused buffer, one count of (lane,
    tensor, bin) triples (torch's bincount: faster than numpy's), one maximum per tensor
    (`reduceat`), whatever their number. float16 bins are codes (a table lookup). float32
    and bfloat16 bins are exponent fields (a bfloat16's bits shifted 16 up are its float32
    value's): their zeros are counted where field 0 is occupied; a float32 row leaves the
    rest to the decoder as any float32 row does, a bfloat16 row is made exact here (its
    subnormals, infinities and NaNs, when it has any, counted again from its patterns), as
    16-bit rows are. The lane, an element's position modulo _LANES, spreads the increments
    of one bin (a ReLU's zeros, one binade) over several counters: a run of increments of
    one counter waits on each. The lanes are the slowest index, so that summing them is a
    few additions of whole rows."""
    sizes = tuple(t.numel() for t in tensors)
    count = len(tensors)
    if table in _PATTERN_TABLES:
        layout = _host_layout(sizes, CODES + 1)
        patterns = layout.values
        for tensor, start, size in zip(tensors, layout.starts.tolist(), sizes, strict=True):
            bits = tensor.view(torch.int16).numpy().reshape(-1)
            np.bitwise_and(bits, 0x7FFF, out=patterns[start : start + size])
        # The lookup by torch: numpy's fancy indexing is 3-4x slower here.
        torch.index_select(_host_tables()[table], 0, layout.values_tensor, out=layout.bins_tensor)
        layout.bins_tensor.add_(layout.slots_tensor)  # bins: the lane's and tensor's offset + code
        rows = _lane_counts(layout, count, CODES + 1)
        peaks = pattern_values(torch.device("cpu"))[table].numpy()
        return rows, peaks[np.maximum.reduceat(patterns, layout.starts)]
    layout = _host_layout(sizes, EXPONENT_FIELDS)
    magnitudes = layout.values  # the bits of |x| (as a float32)
    narrow: list[int] = []  # the bfloat16 tensors
    # One numpy call per tensor (a torch.cat of them all, then one mask, is faster timed
    # alone but not in a training loop: ~168 against ~165 us for the mlp's six tensors).
    for position, (tensor, start, size) in enumerate(
        zip(tensors, layout.starts.tolist(), sizes, strict=True)
    ):
        part = magnitudes[start : start + size]
        if tensor.dtype == torch.bfloat16:
            narrow.append(position)
            np.bitwise_and(tensor.view(torch.int16).numpy().reshape(-1), 0x7FFF, out=part)
            np.left_shift(part, 16, out=part)
        else:
            np.bitwise_and(tensor.numpy().view(np.int32).reshape(-1), 0x7FFFFFFF, out=part)
    fields = np.right_shift(magnitudes, 23, out=layout.bins)  # the exponent field
    fields += layout.slots
    rows = np.zeros((count, CODES + 1), dtype=np.int64)
    rows[:, _EXPONENT_COLUMN_ARRAY] = _lane_counts(layout, count, EXPONENT_FIELDS)
    starts = layout.starts
    for index in np.flatnonzero(rows[:, CODES]):  # field 0 occupied: count the zeros
        start = starts[index]
        part = magnitudes[start : start + sizes[index]]
        rows[index, ZERO_CODE] = sizes[index] - np.count_nonzero(part)
    for position in narrow:
        row = rows[position]
        if row[CODES] > row[ZERO_CODE] or row[INF_CODE]:  # subnormals, inf or NaN: rare
            row[:CODES] = code_histogram(tensors[position]).numpy()
        row[CODES] = 0  # nothing left to place
    return rows, np.maximum.reduceat(magnitudes, starts).view(np.float32)


_LANE_BITS = 3
_LANES = 1 << _LANE_BITS


def _lane_counts(layout: _HostLayout, count: int, width: int) -> npt.NDArray[np.int64]:
    """[count, width] counts of the layout's (lane, tensor, bin) indices, the lanes summed."""
    counted = torch.bincount(layout.bins_tensor, minlength=_LANES * count * width).numpy()
    lanes: npt.NDArray[np.int64] = counted.reshape(_LANES, count, width).sum(axis=0)
    return lanes


class _HostLayout(NamedTuple):
    """The layout of one set of small tensors counted together on the host, and its work
    buffers, kept for the next steps (the same sizes come back: a fresh buffer would cost
    its page faults on every step)."""

    starts: npt.NDArray[np.int64]  # where each tensor starts in the buffers
    slots: npt.NDArray[np.int32]  # each element's bin offset: lane, then tensor
    slots_tensor: torch.Tensor  # the same, shared with torch
    values: npt.NDArray[np.int32]  # the elements' bits (read in)
    values_tensor: torch.Tensor
    bins: npt.NDArray[np.int32]  # the index counted
    bins_tensor: torch.Tensor


_LAYOUTS_HELD = threading.local()  # per thread: two monitors' steps never share a buffer


def _host_layout(sizes: tuple[int, ...], width: int) -> _HostLayout:
    """The `_HostLayout` of tensors of these sizes counted into `width` bins each: element
    i of tensor t goes to bin `(i % _LANES) * len(sizes) * width + t * width + b`."""
    held: dict[tuple[tuple[int, ...], int], _HostLayout] | None = getattr(
        _LAYOUTS_HELD, "layouts", None
    )
    if held is None:
        held = _LAYOUTS_HELD.layouts = {}
    key = (sizes, width)
    found = held.get(key)
    if found is None:
        if len(held) > 16:  # sizes that vary from step to step: keep a few
            held.clear()
        counts = np.array(sizes, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(np.int64)
        slots = np.repeat(np.arange(len(sizes)) * width, counts)
        slots += (np.arange(slots.size) % _LANES) * (len(sizes) * width)
        slots32 = slots.astype(np.int32)
        values = np.empty(slots.size, dtype=np.int32)
        bins = np.empty(slots.size, dtype=np.int32)
        found = held[key] = _HostLayout(
            starts, slots32, torch.from_numpy(slots32), values, torch.from_numpy(values),
            bins, torch.from_numpy(bins),
        )  # fmt: skip
    return found


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
