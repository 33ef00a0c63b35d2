"""How a tensor fared in its low-precision cast: the monitor's `QuantTensorStats`, measured
in one place for every recipe (torchao's FP8 linears, delayed scaling, MX and NVFP4).

- `measure_quantized(layer, role, x, q, format_name)` measures one cast on x's device (no
  synchronisation): `q` is a `BlockQuantized` from `block_torch.quantize_blocks`, a
  `TileQuantized` from `block_torch.quantize_tiles` (one scale per tile) or a
  `TensorwiseQuantized` from `tensorwise.quantize_tensorwise` (one scale for the tensor,
  or one per row as torchao's rowwise recipe casts).
- `read_pending_stats(pending)` turns many measurements into records with one host copy
  per device, so that a statistics step reads all its quantized layers at once.
- `quant_stats(...)`: both, for one tensor.
- `SelfMeasuringLayer`: what a layer that measures its own casts adds (the monitor's
  protocol: `collect_stats`, `take_pending_stats()`).

The definitions are the exact numpy quantizer's `ErrorStats` (the tests hold them equal),
except that shares are of all the tensor's elements, as the record says: inputs that are
NaN or ±inf count in the denominator and never as saturated or flushed.

Cost: about fifteen elementwise passes over x, most in x's own dtype (the sums of squares
in float64), and a scatter of the scales, all on x's device; reading is one host transfer
of ~10-300 numbers per tensor (a synchronisation), once per device for all the tensors
pending.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from fpexplorer.formats.block import floor_log2
from fpexplorer.formats.format import FloatFormat
from fpexplorer.formats.registry import get_format
from fpexplorer.training.records import QUANT_ROLES, Histogram, QuantTensorStats

from .block_torch import BlockQuantized, BlockScaled, TileQuantized
from .tensorwise import TensorwiseQuantized


class _Summary(NamedTuple):
    """The tensor-wide numbers of a measurement, in the order they travel to the host (as
    0-dim float64 tensors on the device; floats once read)."""

    amax: float  # max |x|: NaN if x holds NaN, inf if it holds ±inf
    scale: float  # the per-tensor multiplier; NaN when there is none
    saturated: float  # how many finite inputs were clipped
    flushed: float  # how many finite non-zero inputs became zero
    signal: float  # Σx² over finite inputs
    noise: float  # Σ(q - x)² over finite inputs: inf or NaN when one became non-finite
    finite: float  # how many inputs are finite


_SUMMARY_LENGTH = len(_Summary._fields)
# Scales counted by binade beyond the format's binades: zero, inf and NaN.
_SPECIAL_SCALES = 3


@dataclass(frozen=True, slots=True, eq=False)
class PendingQuantStats:
    """One tensor's statistics, measured on its device and not yet read to the host.

    `values`: float64 on the device, the `_Summary` numbers followed, when the tensor has
    block (or row) scales, by their counts per binade from `histogram_lo`, then the
    zero, inf and NaN scales."""

    layer: str
    role: str
    format: str
    elements: int
    histogram_lo: int | None  # None: no block scales (a per-tensor cast)
    values: torch.Tensor


def quant_stats(
    layer: str,
    role: str,
    x: torch.Tensor,
    q: BlockScaled | TensorwiseQuantized,
    format_name: str,
) -> QuantTensorStats:
    """Statistics of `x` (the tensor before the cast) quantized as `q`, read at once (one
    host transfer): `read_pending_stats([measure_quantized(...)])`.

    - amax: max |x| (NaN if x holds NaN, inf if it holds ±inf);
    - scale: the per-tensor factor x is multiplied by before the cast (torchao's
      convention): the tensorwise scale, or 1 / s_global for NVFP4 (the float64 reciprocal
      of the FP32 s_global, so rounded), None for MX and for one scale per row;
    - scale_hist: the block scales by floor(log2(block scale)), each the factor its block's
      elements are multiplied by to give the dequantized values (E8M0's 2**e for MX, the
      E4M3 s_block for NVFP4; one per tile for 2-D blocks); for one scale per row, the
      same factor, 1 / the row's multiplier (exact for torchao's power-of-two row scales).
      NaN scales in `nan`;
    - saturated: finite inputs beyond ±max_elem × the scale they were divided by (clipped);
    - flushed: finite non-zero inputs that became zero;
    - sqnr_db: 10·log10(Σx² / Σ(x - q)²) over finite inputs: +inf when exact, -inf when an
      input became NaN, NaN when there is no finite input.
    """
    return read_pending_stats([measure_quantized(layer, role, x, q, format_name)])[0]


def measure_quantized(
    layer: str,
    role: str,
    x: torch.Tensor,
    q: BlockScaled | TensorwiseQuantized,
    format_name: str,
) -> PendingQuantStats:
    """`quant_stats`' measurement, on the device only (no synchronisation): read it, with
    others, by `read_pending_stats`."""
    if role not in QUANT_ROLES:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(QUANT_ROLES)}")
    if tuple(x.shape) != tuple(q.values.shape):
        raise ValueError(
            f"x has shape {tuple(x.shape)} but its quantized values {tuple(q.values.shape)}"
        )
    if x.numel() == 0:
        raise ValueError("nothing to measure: the tensor is empty")
    with torch.no_grad():
        source = x.detach()
        magnitude = source.abs()
        finite = magnitude < math.inf  # one pass fewer than isfinite
        # The sums of squares in float64 (an accurate cast's noise is 2**-20 of the signal
        # and below), over finite inputs only: the others count as 0 in both. A finite
        # input that became ±inf or NaN makes the noise inf or NaN: SQNR -inf.
        original = torch.where(finite, source, 0.0).double().reshape(-1)
        dequantized = q.values.detach().double().reshape(-1)
        error = torch.where(finite.reshape(-1), dequantized - original, 0.0)
        # The comparisons in the tensors' own dtypes: exact, and narrower than float64.
        flushed = finite & (source != 0) & (q.values.detach() == 0)
        no_scale = torch.full((), math.nan, dtype=torch.float64, device=x.device)
        histogram_lo: int | None = None
        counts: torch.Tensor | None = None
        if isinstance(q, (BlockQuantized, TileQuantized)):
            saturated = finite & (magnitude > q.saturation_limit())
            tensor_scale = q.per_tensor_scale
            scale = no_scale if tensor_scale is None else 1.0 / tensor_scale.double()
            histogram_lo, counts = _binade_counts(q.block_scales, q.format.scale_format)
        else:
            saturated = finite & (q.scaled_input().abs() > float(q.element.max))
            if q.per_tensor:
                scale = q.scale.double()
            else:
                # Row scales counted as block scales are: the factor that dequantizes.
                scale = no_scale
                histogram_lo, counts = _binade_counts(1.0 / q.scale, _float32())
        parts = dict(
            amax=magnitude.amax().double(),
            scale=scale.reshape(()),
            saturated=saturated.sum().double(),
            flushed=flushed.sum().double(),
            signal=torch.dot(original, original),
            noise=torch.dot(error, error),
            finite=finite.sum().double(),
        )
        summary = torch.stack([parts[name] for name in _Summary._fields])
        values = summary if counts is None else torch.cat([summary, counts.double()])
    return PendingQuantStats(layer, role, format_name, x.numel(), histogram_lo, values)


def read_pending_stats(pending: Sequence[PendingQuantStats]) -> tuple[QuantTensorStats, ...]:
    """The records of measured tensors, in order, read to the host in one copy per device."""
    by_device: dict[torch.device, list[PendingQuantStats]] = {}
    for item in pending:
        by_device.setdefault(item.values.device, []).append(item)
    numbers_of: dict[int, list[float]] = {}
    for items in by_device.values():
        numbers = torch.cat([item.values for item in items]).cpu().tolist()
        offset = 0
        for item in items:
            size = item.values.numel()
            numbers_of[id(item)] = numbers[offset : offset + size]
            offset += size
    return tuple(_record(item, numbers_of[id(item)]) for item in pending)


def sqnr_db(signal: float, noise: float) -> float:
    """10·log10(signal / noise): +inf without noise, -inf for no signal or a noise that is
    not finite (a finite value that became ±inf or NaN)."""
    if noise == 0:
        return math.inf
    if not math.isfinite(noise) or signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


class SelfMeasuringLayer:
    """What a layer that measures its own casts adds: the monitor's protocol.

    The monitor sets `collect_stats` for a statistics step; each cast the layer makes then
    is measured on the device (`measure`), and `take_pending_stats()` hands the
    measurements over unread, so that the monitor reads every layer's in one host copy.
    `take_quant_stats()` reads a layer's own (one transfer). The layer calls
    `start_measuring(name)` in its `__init__`."""

    layer_name: str
    collect_stats: bool
    _pending_stats: list[PendingQuantStats]

    def start_measuring(self, layer_name: str) -> None:
        self.layer_name = layer_name
        self.collect_stats = False
        self._pending_stats = []

    def measure(
        self,
        role: str,
        x: torch.Tensor,
        q: BlockScaled | TensorwiseQuantized,
        format_name: str,
    ) -> None:
        """Measure the cast of `x` into `q` when statistics are collected."""
        if self.collect_stats:
            self._pending_stats.append(measure_quantized(self.layer_name, role, x, q, format_name))

    def take_pending_stats(self) -> list[PendingQuantStats]:
        """The measurements since the last call, unread (and forget them)."""
        pending, self._pending_stats = self._pending_stats, []
        return pending

    def take_quant_stats(self) -> tuple[QuantTensorStats, ...]:
        """The statistics collected since the last call, read in one transfer (and forget
        them)."""
        return read_pending_stats(self.take_pending_stats())


def _record(item: PendingQuantStats, numbers: list[float]) -> QuantTensorStats:
    summary = _Summary(*numbers[:_SUMMARY_LENGTH])
    return QuantTensorStats(
        layer=item.layer,
        role=item.role,
        format=item.format,
        amax=summary.amax,
        scale=None if math.isnan(summary.scale) else summary.scale,
        scale_hist=(
            None
            if item.histogram_lo is None
            else _histogram(item.histogram_lo, numbers[_SUMMARY_LENGTH:])
        ),
        saturated=summary.saturated / item.elements,
        flushed=summary.flushed / item.elements,
        sqnr_db=sqnr_db(summary.signal, summary.noise) if summary.finite else math.nan,
    )


@functools.cache
def _float32() -> FloatFormat:
    return get_format("float32")


def _binade_counts(scales: torch.Tensor, scale_format: FloatFormat) -> tuple[int, torch.Tensor]:
    """Scales counted by floor(log2 scale) over every binade the scale format has, then
    zero, inf and NaN scales in three more bins: (the first binade, counts)."""
    lowest = floor_log2(scale_format.min_subnormal or scale_format.min_normal)
    bins = floor_log2(scale_format.max) - lowest + 1
    flat = scales.detach().reshape(-1).float()
    binade = torch.frexp(flat).exponent.long() - 1 - lowest
    index = torch.where(flat > 0, binade.clamp(0, bins - 1), bins)  # zero (or negative)
    index = torch.where(torch.isinf(flat), bins + 1, index)
    index = torch.where(torch.isnan(flat), bins + 2, index)
    counts = torch.zeros(bins + _SPECIAL_SCALES, dtype=torch.int64, device=flat.device)
    counts.index_add_(0, index, torch.ones_like(index))
    return lowest, counts


def _histogram(lowest: int, counts: list[float]) -> Histogram:
    binades = [int(c) for c in counts[:-_SPECIAL_SCALES]]
    zero, inf, nan = (int(c) for c in counts[-_SPECIAL_SCALES:])
    used = [i for i, c in enumerate(binades) if c]
    if not used:
        return Histogram(lo=0, counts=(), zero=zero, inf=inf, nan=nan)
    first, last = used[0], used[-1]
    return Histogram(
        lo=lowest + first, counts=tuple(binades[first : last + 1]), zero=zero, inf=inf, nan=nan
    )
