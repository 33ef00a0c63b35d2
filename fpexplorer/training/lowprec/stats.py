"""How a tensor fared in its low-precision cast: the monitor's `QuantTensorStats`.

`quant_stats(layer, role, x, q, format_name)` measures one quantized tensor (a
`BlockQuantized` from `block_torch.quantize_blocks` or a `TensorwiseQuantized` from
`tensorwise.quantize_tensorwise`) against the tensor it came from: amax, the per-tensor
scale, the block scales by binade, the shares saturated and flushed to zero, and the SQNR.
The same definitions as the exact numpy quantizer's `ErrorStats` (the tests hold them
equal), except that shares are of all the tensor's elements, as the record says: inputs
that are NaN or ±inf count in the denominator and never as saturated or flushed.

Cost: about a dozen elementwise float64 passes over x and a scatter of the block scales,
all on x's device; then ONE host transfer of ~260 numbers, a synchronisation. So that
forward and backward never wait for it, `measure_quantized` does the device work alone and
`read_pending_stats` reads many measurements in one transfer (the linear layers read theirs
in `take_quant_stats`, after the step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fpexplorer.formats.block import floor_log2
from fpexplorer.formats.format import FloatFormat
from fpexplorer.training.records import QUANT_ROLES, Histogram, QuantTensorStats

from .block_torch import BlockQuantized
from .tensorwise import TensorwiseQuantized

# Positions of the tensor-wide numbers in the one vector sent to the host.
_AMAX, _SCALE, _SATURATED, _FLUSHED, _SIGNAL, _NOISE, _FINITE = range(7)
_SUMMARY_LENGTH = 7


@dataclass(frozen=True, slots=True, eq=False)
class PendingQuantStats:
    """One tensor's statistics, measured on its device and not yet read to the host.

    `values`: float64 on the device, the seven tensor-wide numbers (positions `_AMAX` ...)
    followed, for block-scaled formats, by the block-scale counts per binade from
    `histogram_lo` and three more for zero, inf and NaN scales."""

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
    q: BlockQuantized | TensorwiseQuantized,
    format_name: str,
) -> QuantTensorStats:
    """Statistics of `x` (the tensor before the cast) quantized as `q`, read at once (one
    host transfer): `read_pending_stats([measure_quantized(...)])`.

    - amax: max |x| (NaN if x holds NaN, inf if it holds ±inf);
    - scale: the per-tensor factor x is multiplied by before the cast (torchao's
      convention): the tensorwise scale, or 1 / s_global for NVFP4 (the float64 reciprocal
      of the FP32 s_global, so rounded), None for MX;
    - scale_hist: block-scaled formats: the blocks by floor(log2(block scale)) (NaN scales
      in `nan`);
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
    q: BlockQuantized | TensorwiseQuantized,
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
    with torch.no_grad():
        original = x.detach().double()
        dequantized = q.values.detach().double()
        finite = torch.isfinite(original)
        magnitude = original.abs()
        histogram_lo: int | None = None
        counts: torch.Tensor | None = None
        if isinstance(q, BlockQuantized):
            saturated = finite & (magnitude > q.saturation_limit())
            scale = (
                1.0 / q.per_tensor_scale.double()
                if q.per_tensor_scale is not None
                else torch.full((), math.nan, dtype=torch.float64, device=x.device)
            )
            histogram_lo, counts = _binade_counts(q.block_scales, q.format.scale_format)
        else:
            element_max = float(q.element.max)
            saturated = finite & (q.scaled_input().double().abs() > element_max)
            scale = q.scale.double()
        flushed = finite & (original != 0) & (dequantized == 0)
        error = torch.where(torch.isfinite(dequantized), dequantized - original, math.inf)
        noise = torch.where(finite, error * error, 0.0)
        signal = torch.where(finite, original * original, 0.0)
        summary = torch.stack(
            [
                magnitude.amax(),
                scale.reshape(()),
                saturated.sum().double(),
                flushed.sum().double(),
                signal.sum(),
                noise.sum(),
                finite.sum().double(),
            ]
        )
        values = summary if counts is None else torch.cat([summary, counts.double()])
    return PendingQuantStats(layer, role, format_name, x.numel(), histogram_lo, values)


def read_pending_stats(pending: Sequence[PendingQuantStats]) -> tuple[QuantTensorStats, ...]:
    """The records of measured tensors, in order, read to the host in one transfer."""
    if not pending:
        return ()
    device = pending[0].values.device
    numbers = torch.cat([item.values.to(device) for item in pending]).tolist()
    records = []
    offset = 0
    for item in pending:
        own = numbers[offset : offset + item.values.numel()]
        offset += item.values.numel()
        records.append(_record(item, own))
    return tuple(records)


def _record(item: PendingQuantStats, numbers: list[float]) -> QuantTensorStats:
    scale = numbers[_SCALE]
    return QuantTensorStats(
        layer=item.layer,
        role=item.role,
        format=item.format,
        amax=numbers[_AMAX],
        scale=None if math.isnan(scale) else scale,
        scale_hist=(
            None
            if item.histogram_lo is None
            else _histogram(item.histogram_lo, numbers[_SUMMARY_LENGTH:])
        ),
        saturated=numbers[_SATURATED] / item.elements,
        flushed=numbers[_FLUSHED] / item.elements,
        sqnr_db=_sqnr_db(numbers[_SIGNAL], numbers[_NOISE]) if numbers[_FINITE] else math.nan,
    )


def _binade_counts(scales: torch.Tensor, scale_format: FloatFormat) -> tuple[int, torch.Tensor]:
    """Block scales counted by floor(log2 scale) over every binade the scale format has,
    then zero, inf and NaN scales in three more bins: (the first binade, counts)."""
    lowest = floor_log2(scale_format.min_subnormal or scale_format.min_normal)
    bins = floor_log2(scale_format.max) - lowest + 1
    flat = scales.detach().reshape(-1).float()
    binade = torch.frexp(flat).exponent.long() - 1 - lowest
    index = torch.where(flat > 0, binade.clamp(0, bins - 1), bins)  # zero (or negative)
    index = torch.where(torch.isinf(flat), bins + 1, index)
    index = torch.where(torch.isnan(flat), bins + 2, index)
    counts = torch.zeros(bins + 3, dtype=torch.int64, device=flat.device)
    counts.index_add_(0, index, torch.ones_like(index))
    return lowest, counts


def _histogram(lowest: int, counts: list[float]) -> Histogram:
    binades = [int(c) for c in counts[:-3]]
    zero, inf, nan = (int(c) for c in counts[-3:])
    used = [i for i, c in enumerate(binades) if c]
    if not used:
        return Histogram(lo=0, counts=(), zero=zero, inf=inf, nan=nan)
    first, last = used[0], used[-1]
    return Histogram(
        lo=lowest + first, counts=tuple(binades[first : last + 1]), zero=zero, inf=inf, nan=nan
    )


def _sqnr_db(signal: float, noise: float) -> float:
    """10·log10(signal / noise): +inf without noise, -inf for infinite noise or no signal."""
    if noise == 0:
        return math.inf
    if math.isinf(noise) or signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)
