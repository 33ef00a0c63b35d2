"""The numbers behind the training panel's Low precision page. Qt-free (tested without a GUI).

The quantized linear layers of the FP8 / MX / NVFP4 recipes report, on each statistics
step, one `QuantTensorStats` per layer and role (input, weight, grad_output): amax, the
per-tensor scale, the block scales by binade, the saturated and flushed shares and the
quantization SQNR. `QuantHistory` keeps them for one run:

- per (layer, role) and per statistics step, the five numbers in one preallocated numpy
  block (steps x tensors x fields), bounded like `run_model.DecimatingSeries`: when the
  rows are full every other one is dropped and only every 2nd, 4th, ... statistics step
  is kept from then on (the run file keeps all). Unlike DecimatingSeries its columns are
  not known up front: a layer may first appear late, so the tensor axis doubles when a
  new (layer, role) arrives, and earlier steps read NaN for it (not measured);
- the latest statistics of each tensor in full (block-scale histogram included);
- over every statistics step offered (decimated or not): each tensor's lowest SQNR and
  largest saturated and flushed shares, with the step where they happened.

From those: histories over steps (`series`, `log2_series`), layer x step matrices of a
share for one role (`share_matrix`), SQNR per layer (`sqnr_by_layer`) and the tensor that
hurts most by a stated criterion (`hurts_most`).

This module imports only numpy and the record contract: `run_model.RunModel` holds a
`QuantHistory` and feeds it, so nothing here may import the run model (or the view model,
which imports it); the texts the page shows are made in `quant_views`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from fpexplorer.gui.training.growing import INITIAL_ROWS, grown_rows
from fpexplorer.training.records import QUANT_ROLES, QuantTensorStats

FloatArray = npt.NDArray[np.float64]

# The numbers kept per tensor and statistics step; a missing scale (block-only recipes)
# and a tensor not measured on a step read NaN.
QUANT_FIELDS = ("amax", "scale", "saturated", "flushed", "sqnr_db")
QuantField = Literal["amax", "scale", "saturated", "flushed", "sqnr_db"]
_FIELD_INDEX = {name: index for index, name in enumerate(QUANT_FIELDS)}

# How "the tensor that hurts most" is chosen, and how the page names the choice.
Criterion = Literal["sqnr", "saturated", "flushed"]
CRITERIA: dict[Criterion, str] = {
    "sqnr": "lowest SQNR",
    "saturated": "largest saturated share",
    "flushed": "largest flushed share",
}


@dataclass(frozen=True, slots=True)
class TensorLatest:
    """A tensor's statistics on the latest statistics step that measured it."""

    step: int
    stats: QuantTensorStats


@dataclass(frozen=True, slots=True)
class Extreme:
    """The worst value of one number over the run (every statistics step), and its step."""

    step: int
    value: float


@dataclass(frozen=True, slots=True)
class LayerSqnr:
    """One layer's SQNR for a role: on its latest statistics step, and the run's minimum."""

    layer: str
    latest: float  # dB; inf: quantized exactly; NaN: not measured
    latest_step: int | None
    minimum: float  # dB, lowest over every statistics step; NaN when never measured
    minimum_step: int | None


@dataclass(frozen=True, slots=True)
class Worst:
    """The tensor that hurts most by `criterion`, on its latest statistics step or over
    the whole run (`over_run`)."""

    criterion: Criterion
    over_run: bool
    layer: str
    role: str
    step: int  # the statistics step of `value`
    value: float  # the SQNR in dB, or the share


def _role_order(role: str) -> tuple[int, str]:
    # The contract's roles in their order (input, weight, grad_output); anything else a
    # newer writer sends after them, by name.
    return (QUANT_ROLES.index(role), "") if role in QUANT_ROLES else (len(QUANT_ROLES), role)


class QuantHistory:
    """One run's quantized-layer statistics, bounded. See the module docstring."""

    def __init__(self, capacity: int = 1024, tensor_capacity: int = 8) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError("capacity must be an even number >= 4")
        if tensor_capacity < 1:
            raise ValueError("tensor_capacity must be >= 1")
        self.capacity = capacity
        rows = min(capacity, INITIAL_ROWS)  # grown as steps come (run_model.grown_rows)
        self._steps = np.full(rows, np.nan, dtype=np.float64)
        self._data = np.full((rows, tensor_capacity, len(QUANT_FIELDS)), np.nan)
        self._size = 0
        self._stride = 1
        self._offered = 0
        self.layers: list[str] = []  # in order of first appearance (forward order)
        self.roles: list[str] = []  # the contract's order, then others by name
        self._columns: dict[tuple[str, str], int] = {}  # (layer, role) -> tensor axis
        self._latest: dict[tuple[str, str], TensorLatest] = {}
        self._worst: dict[tuple[str, str, str], Extreme] = {}  # (layer, role, field)
        self.last_step: int | None = None  # the latest statistics step with quantized layers
        # The first cast whose tensor held inf/NaN (its amax non-finite): (step, layer, role).
        # Its SQNR is NaN, so no criterion of `hurts_most` can name it; the page says it.
        self.first_nonfinite: tuple[int, str, str] | None = None
        self.statistics_steps = 0  # every one offered, kept or not

    # ----- input ----------------------------------------------------------------------

    def add(self, step: int, entries: Iterable[QuantTensorStats]) -> None:
        """One statistics step's entries (a (layer, role) given twice: the last counts)."""
        by_tensor = {(entry.layer, entry.role): entry for entry in entries}
        if not by_tensor:
            return
        self.statistics_steps += 1
        self.last_step = step
        for key, entry in by_tensor.items():
            self._column(key)
            self._latest[key] = TensorLatest(step, entry)
            self._note_extremes(step, key, entry)
            if self.first_nonfinite is None and not math.isfinite(entry.amax):
                self.first_nonfinite = (step, *key)
        offered = self._offered
        self._offered += 1
        if offered % self._stride:
            return
        if self._size == len(self._steps) < self.capacity:
            self._steps = grown_rows(self._steps, self.capacity, np.nan)
            self._data = grown_rows(self._data, self.capacity, np.nan)
        if self._size == self.capacity:
            # Full: keep every other row (as DecimatingSeries does), so the kept steps stay
            # evenly spread over the whole run.
            kept = self._size // 2
            self._steps[:kept] = self._steps[0 : self._size : 2]
            self._data[:kept] = self._data[0 : self._size : 2]
            self._steps[kept:] = np.nan
            self._data[kept:] = np.nan
            self._size = kept
            self._stride *= 2
            if offered % self._stride:
                return
        row = self._data[self._size]
        for key, entry in by_tensor.items():
            row[self._columns[key]] = (
                entry.amax,
                math.nan if entry.scale is None else entry.scale,
                entry.saturated,
                entry.flushed,
                entry.sqnr_db,
            )
        self._steps[self._size] = step
        self._size += 1

    def _column(self, key: tuple[str, str]) -> int:
        column = self._columns.get(key)
        if column is not None:
            return column
        column = len(self._columns)
        if column == self._data.shape[1]:  # the tensor axis doubles; old steps read NaN
            rows = len(self._data)
            grown = np.full((rows, 2 * self._data.shape[1], len(QUANT_FIELDS)), np.nan)
            grown[:, :column] = self._data
            self._data = grown
        self._columns[key] = column
        layer, role = key
        if layer not in self.layers:
            self.layers.append(layer)
        if role not in self.roles:
            self.roles.append(role)
            self.roles.sort(key=_role_order)
        return column

    def _note_extremes(self, step: int, key: tuple[str, str], entry: QuantTensorStats) -> None:
        layer, role = key
        # SQNR: the lowest is the worst (NaN: not measured, skipped; inf: exact). Shares:
        # the largest is the worst. `sign` turns both into "larger is worse".
        for name, value, sign in (
            ("sqnr_db", entry.sqnr_db, -1.0),
            ("saturated", entry.saturated, 1.0),
            ("flushed", entry.flushed, 1.0),
        ):
            if math.isnan(value):
                continue
            known = self._worst.get((layer, role, name))
            if known is None or sign * value > sign * known.value:
                self._worst[(layer, role, name)] = Extreme(step, value)

    # ----- read-outs ------------------------------------------------------------------

    def __len__(self) -> int:
        """Statistics steps kept (after decimation)."""
        return self._size

    def __bool__(self) -> bool:
        # A run without quantized layers is falsy even though the object exists.
        return bool(self._columns)

    @property
    def stride(self) -> int:
        return self._stride

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes + self._steps.nbytes)

    @property
    def steps(self) -> FloatArray:
        """The statistics steps kept, in order."""
        return self._steps[: self._size]

    @property
    def tensors(self) -> list[tuple[str, str]]:
        """(layer, role) of every tensor seen, layers in order of appearance, then roles."""
        return sorted(
            self._columns, key=lambda key: (self.layers.index(key[0]), _role_order(key[1]))
        )

    def has(self, layer: str, role: str) -> bool:
        return (layer, role) in self._columns

    def series(self, layer: str, role: str, field: QuantField) -> FloatArray:
        """`field` of one tensor over the kept steps (NaN where it was not measured)."""
        column = self._columns.get((layer, role))
        if column is None:
            return np.full(self._size, np.nan)
        values: FloatArray = self._data[: self._size, column, _FIELD_INDEX[field]]
        return values

    def log2_series(
        self, layer: str, role: str, field: Literal["amax", "scale"]
    ) -> tuple[FloatArray, FloatArray]:
        """(steps, log2 value) where the value is finite and positive: a log axis has no
        place for 0, inf or NaN (the hover read-out and the page's notes name those)."""
        values = self.series(layer, role, field)
        keep = np.isfinite(values) & (values > 0)
        return self.steps[keep], np.log2(values[keep])

    def share_matrix(
        self, role: str, field: Literal["saturated", "flushed"]
    ) -> tuple[list[str], FloatArray]:
        """(layer names, shares as a (layers x kept steps) matrix) for one role; NaN where a
        layer's tensor was not measured on a step (a layer that appeared late, a role a
        layer does not have)."""
        matrix = np.full((len(self.layers), self._size), np.nan)
        index = _FIELD_INDEX[field]
        for row, layer in enumerate(self.layers):
            column = self._columns.get((layer, role))
            if column is not None:
                matrix[row] = self._data[: self._size, column, index]
        return list(self.layers), matrix

    def latest(self, layer: str, role: str) -> TensorLatest | None:
        return self._latest.get((layer, role))

    def extreme(self, layer: str, role: str, field: Criterion | str) -> Extreme | None:
        """The worst `field` ("sqnr_db", "saturated", "flushed") of a tensor over the run."""
        return self._worst.get((layer, role, field))

    def sqnr_by_layer(self, role: str) -> list[LayerSqnr]:
        """Each layer's SQNR for `role`: latest and the run's minimum (layers in order)."""
        out = []
        for layer in self.layers:
            latest = self._latest.get((layer, role))
            minimum = self._worst.get((layer, role, "sqnr_db"))
            out.append(
                LayerSqnr(
                    layer=layer,
                    latest=latest.stats.sqnr_db if latest is not None else math.nan,
                    latest_step=latest.step if latest is not None else None,
                    minimum=minimum.value if minimum is not None else math.nan,
                    minimum_step=minimum.step if minimum is not None else None,
                )
            )
        return out

    def hurts_most(self, criterion: Criterion, over_run: bool = False) -> Worst | None:
        """The tensor (any layer, any role) worst by `criterion`: on each tensor's latest
        statistics step, or (`over_run`) on any statistics step of the run, decimated or
        not. Ties go to the earlier layer, then role, then step. None when nothing
        qualifies: no finite SQNR measured (inf means quantized exactly, which hurts
        nothing), or no tensor saturated (flushed) at all."""
        field = "sqnr_db" if criterion == "sqnr" else criterion
        best: Worst | None = None
        for layer, role in self.tensors:
            if over_run:
                extreme = self._worst.get((layer, role, field))
                if extreme is None:
                    continue
                step, value = extreme.step, extreme.value
            else:
                latest = self._latest[(layer, role)]
                step = latest.step
                value = getattr(latest.stats, field)
            if criterion == "sqnr":
                if not math.isfinite(value) or (best is not None and not value < best.value):
                    continue
            elif not value > 0 or (best is not None and not value > best.value):
                continue
            best = Worst(criterion, over_run, layer, role, step, value)
        return best


def layer_choices(histories: Sequence[QuantHistory]) -> list[str]:
    """Every layer of the given runs, in order of first appearance across them."""
    layers: list[str] = []
    for history in histories:
        layers.extend(layer for layer in history.layers if layer not in layers)
    return layers


def role_choices(histories: Sequence[QuantHistory]) -> list[str]:
    """Every role of the given runs, the contract's first (input, weight, grad_output)."""
    roles = {role for history in histories for role in history.roles}
    return sorted(roles, key=_role_order)
