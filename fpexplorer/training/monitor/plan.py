"""The statistics of one step: queued on the device under names, read back in one copy,
turned into the step record's statistics fields. Needs torch.

`HostPack` is the one host sync of a step: every device value the step record needs is
added under a name (`pack.add("norms", norms)`) and `fetch()` copies them all at once;
`HostValues["norms"]` reads a part back by its name, so no decoder counts offsets into a
packed vector. `StatsPlan` holds what a statistics step queued (the pattern-count segments
of the parameter and activation gradients, which layer each belongs to, the formats to
compare with) and decodes the host values into the record's fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from fpexplorer.training.monitor.kernels import (
    BINADE_LO,
    CODES,
    FLOAT32_MAX,
    INF_CODE,
    NAN_CODE,
    PATTERNS,
    ZERO_CODE,
    Scratch,
    Segment,
    code_histogram,
    count_abs_at_most,
    count_at_most,
    count_low_bits_set,
    group_code_histogram,
    histogram_record,
    magnitude_limits,
    pattern_values,
)
from fpexplorer.training.monitor.thresholds import (
    FormatRange,
    boundaries,
    floor_log2,
    format_range,
)
from fpexplorer.training.monitor.updates import hoeffding_bound
from fpexplorer.training.records import (
    FormatShares,
    LayerStats,
    LostUpdates,
    Memory,
    StepStats,
)

# Per-layer figures are about FP16, the format whose range a loss scale exists for.
_FP16 = format_range("float16")
_FP16_MAX = float(_FP16.max)  # 65504
_FP16_MIN_SUBNORMAL_LOG2 = floor_log2(_FP16.smallest_positive)  # -24


class HostPack:
    """Device values queued under names and brought to the host in one copy (one sync).

    On a CPU there is nothing to synchronise with: each value is read as it is added, a
    single value as a Python float (no array made for it)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._on_host = device.type == "cpu"
        self._parts: list[torch.Tensor] = []
        self._names: list[tuple[str, int]] = []
        self._host: dict[str, npt.NDArray[np.float64]] = {}
        self._scalars: dict[str, float] = {}
        self._added: set[str] = set()

    def _check_new(self, name: str) -> None:
        if name in self._added:
            raise ValueError(f"{name!r} is already in the pack")
        self._added.add(name)

    def add(self, name: str, values: torch.Tensor | float) -> None:
        self._check_new(name)
        if not isinstance(values, torch.Tensor):
            self._scalars[name] = float(values)
        elif self._on_host and values.is_cpu:
            if values.numel() == 1:  # the cheap signals: item() is the fastest read
                self._scalars[name] = float(values.item())
            else:  # a zero-copy view, converted by numpy (cheaper than a torch operation)
                data = values.detach() if values.requires_grad else values
                host = data.numpy().reshape(-1)
                self._host[name] = host.astype(np.float64, copy=host.dtype != np.float64)
        else:
            tensor = values.detach().to(device=self.device, dtype=torch.float64).reshape(-1)
            self._parts.append(tensor)
            self._names.append((name, tensor.numel()))

    def add_host(self, name: str, values: Sequence[float] | npt.NDArray[np.generic]) -> None:
        """Values already on the host (kept as float64)."""
        self._check_new(name)
        self._host[name] = np.asarray(values, dtype=np.float64)

    def fetch(self) -> HostValues:
        host = self._host
        if self._parts:
            host = dict(host)
            values = torch.cat(self._parts).cpu().numpy()
            offset = 0
            for name, size in self._names:
                host[name] = values[offset : offset + size]
                offset += size
        return HostValues(host, self._scalars)


@dataclass(frozen=True, slots=True)
class HostValues:
    """The host copy of a `HostPack`: parts by name (float64; counts are exact below 2**53),
    single values added on a CPU as floats (`scalars`; read as parts of one value too)."""

    parts: Mapping[str, npt.NDArray[np.float64]]
    scalars: Mapping[str, float] = field(default_factory=dict)

    def __getitem__(self, name: str) -> npt.NDArray[np.float64]:
        part = self.parts.get(name)
        if part is None:
            return np.array([self.scalars[name]], dtype=np.float64)
        return part

    def __contains__(self, name: object) -> bool:
        return name in self.parts or name in self.scalars

    def scalar(self, name: str) -> float:
        value = self.scalars.get(name)
        return float(self.parts[name][0]) if value is None else value


@dataclass(frozen=True, slots=True)
class ParamGroup:
    """The parameter gradients of one dtype class, counted together as one segment."""

    segment: Segment
    members: tuple[torch.Tensor, ...]


@dataclass(frozen=True, slots=True)
class StatsPlan:
    """What a statistics step queued in its `HostPack`, and how to read it back.

    Histogram rows: one per parameter group (first), then one per activation gradient in
    the order backward produced them.
    """

    layer_names: tuple[str, ...]
    param_groups: tuple[ParamGroup, ...]
    act_segments: tuple[Segment, ...]
    param_layers: tuple[int, ...]  # the layer of each parameter gradient (for the norms)
    forward_layers: tuple[int, ...]  # the layer of each forward finiteness flag
    scale: float  # the loss scale the gradients were made with
    memory: Memory
    formats: tuple[FormatRange, ...]  # the format shares to compute (empty: none)
    lost_update_kind: str | None  # None: no lost-update figure queued
    lost_update_sampled: bool  # measured on an `UpdateSample` smaller than the model
    scratch: Scratch = field(repr=False)
    # False for the statistics taken after an alarm step: its activation gradients are gone.
    activations: bool = True

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(group.segment for group in self.param_groups) + self.act_segments

    @property
    def n_param(self) -> int:
        return sum(group.segment.numel for group in self.param_groups)

    def decode(self, host: HostValues, *, skipped: bool) -> StepStats:
        """The statistics of the step record.

        The histogram rows are reduced by one product to what the per-layer figures use
        (per activation gradient: elements, elements below FP16's range, non-finite ones);
        the per-layer sums are then made in Python, in the order `np.add.at` made them:
        a few dozen additions cost less than the numpy calls that would gather them."""
        layer_count = len(self.layer_names)
        layer_sumsq = [0.0] * layer_count
        layer_nonfinite = [False] * layer_count
        if self.param_layers:
            norms = host["norms"].tolist()
            for layer, norm in zip(self.param_layers, norms, strict=True):
                layer_sumsq[layer] += norm * norm
            if not math.isfinite(sum(norms)):  # an inf or NaN norm (or a sum that overflows)
                for layer, norm in zip(self.param_layers, norms, strict=True):
                    if not math.isfinite(norm):
                        layer_nonfinite[layer] = True
        first_forward: str | None = None
        if self.forward_layers:
            flags = host["forward_finite"].tolist()  # 1.0: finite; a few dozen at most
            if 0.0 in flags:
                first_forward = self.layer_names[self.forward_layers[flags.index(0.0)]]
        groups = self.param_groups
        act_segments = self.act_segments
        segments = tuple([group.segment for group in groups]) + act_segments
        histograms = self._histograms(host, segments)
        n_groups = len(groups)
        grad_counts = histograms[0] if n_groups == 1 else histograms[:n_groups].sum(axis=0)
        act_histograms = histograms[n_groups:]
        act_counts = act_histograms.sum(axis=0)
        act_layers = [segment.layer for segment in act_segments]
        layer_total = [0.0] * layer_count
        layer_underflow = [0.0] * layer_count
        layer_amax = [0.0] * layer_count
        act_nonfinite = [False] * len(act_segments)
        if act_segments:
            # Sums of integer counts by 0/1 weights: exact in float64 in any order.
            features = (act_histograms @ _SEGMENT_FEATURES).tolist()
            peaks = host["act_amax"].tolist()
            for index, layer in enumerate(act_layers):
                total, underflow, nonfinite = features[index]
                layer_total[layer] += total
                layer_underflow[layer] += underflow
                layer_amax[layer] = _maximum(layer_amax[layer], peaks[index])
                if nonfinite:
                    act_nonfinite[index] = layer_nonfinite[layer] = True
        format_shares: dict[str, FormatShares] = {}
        if self.formats and groups:
            group_zeros = [int(histograms[i, ZERO_CODE]) for i in range(n_groups)]
            bounds = boundaries(self.formats)
            at_most = self._scaled_at_most(host, group_zeros, bounds)
            format_shares = self._format_shares(dict(zip(bounds, at_most, strict=True)))
        lost_updates = None
        if self.lost_update_kind is not None and not skipped:
            # The parameter gradients that are not zero: the updates intended, all of them.
            intended = self.n_param - int(grad_counts[ZERO_CODE])
            if "lost_intended" in host:  # several optimizers: those of the ones that stepped
                intended = int(host.scalar("lost_intended"))
            in_sample, applied, nonfinite = (int(v) for v in host["lost_updates"])
            share = (in_sample - applied) / in_sample if in_sample else 0.0
            if self.lost_update_sampled:
                lost_updates = LostUpdates(share, self.lost_update_kind, intended,
                                           sampled=in_sample, bound=hoeffding_bound(in_sample),
                                           nonfinite_weights=nonfinite or None)  # fmt: skip
            else:
                lost_updates = LostUpdates(share, self.lost_update_kind, intended,
                                           nonfinite_weights=nonfinite or None)  # fmt: skip
        return StepStats(
            grad_hist=histogram_record(grad_counts),
            act_hist=(
                histogram_record(act_counts, self._act_dtype()) if self.activations else None
            ),
            act_zero_share=(
                _share(act_counts[ZERO_CODE], act_counts.sum()) if self.activations else None
            ),
            layers=self._layer_records(
                layer_underflow, layer_total, layer_amax, layer_sumsq, layer_nonfinite
            ),
            first_nonfinite=self._first_nonfinite(act_layers, act_nonfinite, layer_nonfinite),
            first_nonfinite_forward=first_forward,
            format_shares=format_shares,
            lost_updates=lost_updates,
            memory=self.memory,
        )

    # -- pieces of the record ------------------------------------------------------------

    def _histograms(self, host: HostValues, segments: Sequence[Segment]) -> npt.NDArray[np.float64]:
        """[segments, CODES] code counts. Float32 rows whose bits cannot decide (subnormals:
        exponent field 0 holding more than the zeros, or below 2**-133 for the top-half
        patterns of the format shares; exponent field 255 or the inf pattern, which hold
        NaNs too) are counted again exactly: rare, and only those rows."""
        rows = host["rows"].reshape(len(segments), CODES + 1)
        unresolved = rows[:, CODES] > rows[:, ZERO_CODE]
        unresolved |= rows[:, INF_CODE] > 0
        copied = False  # the host values stay as they are: rows are changed in a copy
        for index in np.flatnonzero(unresolved):
            if segments[int(index)].exact:  # 16-bit patterns place every element
                continue
            if not copied:
                rows, copied = rows.copy(), True
            if index < len(self.param_groups):
                exact = group_code_histogram(self.param_groups[int(index)].members)
            else:
                exact = code_histogram(self._segment_tensor(int(index)))
            rows[index, :CODES] = exact.cpu().numpy()
        histograms: npt.NDArray[np.float64] = rows[:, :CODES]
        return histograms

    def _segment_tensor(self, index: int) -> torch.Tensor:
        """The values behind a float32 segment, for the exact (slow) histogram."""
        tensor = self.act_segments[index - len(self.param_groups)].tensor
        assert tensor is not None, "a float32 segment not counted exactly keeps its values"
        return tensor

    def _act_dtype(self) -> str:
        """The dtype most activation-gradient elements had."""
        by_dtype: dict[str, int] = {}
        for segment in self.act_segments:
            by_dtype[segment.dtype] = by_dtype.get(segment.dtype, 0) + segment.numel
        return max(by_dtype.items(), key=lambda item: item[1])[0] if by_dtype else "float32"

    def _first_nonfinite(
        self, act_layers: list[int], act_nonfinite: list[bool], layer_nonfinite: list[bool]
    ) -> str | None:
        # Activation gradients arrive in backward order: the first non-finite one is where
        # the overflow started.
        if True in act_nonfinite:
            return self.layer_names[act_layers[act_nonfinite.index(True)]]
        # No activation gradient went non-finite: the last layer (in forward order) whose
        # parameter gradient did is the first one backward reached.
        for index in reversed(range(len(self.layer_names))):
            if layer_nonfinite[index]:
                return self.layer_names[index]
        return None

    def _layer_records(
        self,
        layer_underflow: list[float],
        layer_total: list[float],
        layer_amax: list[float],
        layer_sumsq: list[float],
        layer_nonfinite: list[bool],
    ) -> tuple[LayerStats, ...]:
        """One record per layer, from the per-layer sums."""
        # A layer whose parameters got no gradient (frozen, or unused this step) has no
        # norm: 0 would read as a vanishing gradient.
        graded = set(self.param_layers)
        return tuple(
            LayerStats(
                name=name,
                grad_norm=math.sqrt(sumsq) if index in graded else None,
                amax=peak,
                headroom_log2=(
                    math.log2(_FP16_MAX / peak) if peak > 0 and math.isfinite(peak) else None
                ),
                underflow_share=underflow / total if total else 0.0,
                nonfinite=nonfinite,
            )
            for index, (name, sumsq, peak, underflow, total, nonfinite) in enumerate(
                zip(
                    self.layer_names,
                    layer_sumsq,
                    layer_amax,
                    layer_underflow,
                    layer_total,
                    layer_nonfinite,
                    strict=True,
                )
            )
        )

    def _scaled_at_most(
        self, host: HostValues, group_zeros: list[int], bounds: list[float]
    ) -> list[int]:
        """For each boundary b: the count of parameter gradients g with |g * scale| <= b
        (products in float32, as `g * scale` would be computed), exact.

        Each b becomes a limit on |g| itself (`magnitude_limits`), read from the pattern
        counts: a 16-bit pattern is its value; a float32 pattern (top 16 bits) decides
        unless the limit falls inside a pattern that holds gradients, and only then are
        those gradients looked at again: when none has low bits (gradients that were BF16
        values, as under BF16 autocast) the whole pattern is below the limit; otherwise one
        |g| pass and one comparison per such limit."""
        scale = self.scale
        groups = self.param_groups
        if not 0 < scale <= FLOAT32_MAX:  # also a scale whose float32 would be inf
            values = torch.cat([g.reshape(-1).float() for group in groups for g in group.members])
            return [int(c) for c in count_at_most(values * scale, bounds).tolist()[:-1]]
        raw = host["pattern_counts"].reshape(len(groups), PATTERNS).astype(np.int64)
        limits = magnitude_limits(tuple(bounds), scale)
        totals = [0] * len(limits)
        for group, counts, zeros in zip(groups, raw, group_zeros, strict=True):
            segment = group.segment
            pending: list[tuple[int, int, int]] = []  # (bound index, limit, count below)
            if segment.table != "float32_high":
                values_of = pattern_values(torch.device("cpu"))[segment.table].numpy()
                for index, limit in enumerate(limits):
                    bound = np.int32(limit).view(np.float32)
                    totals[index] += int(counts[values_of <= bound].sum())
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
            if segment.top_exact is None and int(count_low_bits_set(group.members)) == 0:
                for index, limit, below_pattern in pending:
                    totals[index] += below_pattern + int(counts[limit >> 16])
                continue
            limit_values = [float(np.int32(limit).view(np.float32)) for _, limit, _ in pending]
            counted = count_abs_at_most(group.members, limit_values, self.scratch).tolist()
            for (index, _, _), count in zip(pending, counted, strict=True):
                totals[index] += int(count)
        return totals

    def _format_shares(self, count: dict[float, int]) -> dict[str, FormatShares]:
        """Shares per format from the counts of |g * scale| <= each boundary (NaN counts as
        overflow: it is never <= anything; 0.0 gives the products that are zero)."""
        n_param = float(self.n_param)
        zeros = count[0.0]
        return {
            fmt.name: FormatShares(
                underflow=(count[fmt.flush_max] - zeros) / n_param,
                subnormal=(count[fmt.subnormal_max] - count[fmt.flush_max]) / n_param,
                overflow=(n_param - count[fmt.finite_max_input]) / n_param,
            )
            for fmt in self.formats
        }


def _maximum(current: float, value: float) -> float:
    """np.maximum of two floats: NaN if either is NaN; of equal values (0.0 and -0.0), the
    second, as numpy gives it."""
    return current if current > value or current != current else value


def _segment_features() -> npt.NDArray[np.float64]:
    """[CODES, 3] weights: a histogram row times this is (elements, elements below FP16's
    smallest subnormal 2**-24 or zero, infinities and NaNs)."""
    weights = np.zeros((CODES, 3))
    weights[:, 0] = 1.0
    weights[: _FP16_MIN_SUBNORMAL_LOG2 - BINADE_LO, 1] = 1.0  # codes below: |x| < 2**-24
    weights[ZERO_CODE, 1] = 1.0
    weights[[INF_CODE, NAN_CODE], 2] = 1.0
    return weights


_SEGMENT_FEATURES = _segment_features()


def _share(part: float, total: float) -> float:
    return float(part) / float(total) if total else 0.0
