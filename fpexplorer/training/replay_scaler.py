"""A logged FP16 run's loss scale replayed under another policy or other settings.
Torch-free: `fpexplorer runs replay-scaler` and the panel's what-if use it.

What decides a step's overflow at another scale S, from what the run logged at its scale s:

- **The run's own scale** (S == s): the logged outcome, exactly.
- **Forward overflow** (the loss is inf/NaN): the forward pass does not see the loss
  scale, so the step overflows at every scale.
- **A clean step** (not skipped): the monitor logs `grad_amax`, the largest |parameter
  gradient| after unscaling, and on statistics steps the largest |activation gradient| of
  each layer (scaled; divided by s here). Multiplying by a power of two is exact in FP16
  except at overflow and underflow, so an FP16 value x computed in backward at scale s is
  x * S / s at scale S, and it overflows iff |x| * S / s > 65504 (FP16's largest finite: a
  value that rounds to it, below 65520, was stored as at most 65504). So the step overflows
  at S iff amax * S > 65504; at S < s it never does (values only shrink; underflow does
  not make an overflow).
- **A backward overflow** (skipped, finite loss): only a lower bound is known (amax * s >
  65504). At S >= s it overflows again; at S < s the outcome is *unknown*: the replay
  assumes the smallest amax the overflow allows (so no overflow at a lower scale) and
  marks the step, and the summary lists such steps.

Limits: between statistics steps only the parameter gradients are seen, so an overflow
only in an activation gradient of a step without statistics is missed (`--stats-every
1`, the default, sees them all); a parameter whose FP32 gradient sums several FP16
contributions may exceed 65504 without any FP16 overflow (a false alarm); scales that are
not a power of two apart round differently near the threshold. The replay starts from
the logged weights: after the first step whose predicted outcome differs from the log, a
real run of the other policy would train on other weights (the traces are comparable up
to there, and the summary says where that is).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from fpexplorer.formats import get_format
from fpexplorer.formats.decimal import display_decimal
from fpexplorer.training.records import StepRecord
from fpexplorer.training.scaler_rules import (
    MinimumScaleError,
    ScalerSettings,
    ScalerState,
    initial_state,
    next_state,
)


def fp16_max() -> float:
    """FP16's largest finite value, from the formats engine (65504): the overflow threshold
    of every FP16 value of backward."""
    return float(get_format("fp16").max)


@dataclass(frozen=True, slots=True)
class StepEvidence:
    """What a logged step tells about its overflow at another scale."""

    step: int
    scale: float  # the scale the run used
    skipped: bool
    forward_overflow: bool  # the loss is inf/NaN: overflow at every scale
    amax: float  # the largest unscaled |gradient| seen; NaN: not recorded or not finite

    @classmethod
    def of(cls, record: StepRecord) -> StepEvidence:
        amax = record.grad_amax if record.grad_amax is not None else math.nan
        if record.stats is not None and record.scale > 0:
            layer_amax = [layer.amax for layer in record.stats.layers if math.isfinite(layer.amax)]
            if layer_amax and math.isfinite(amax):
                amax = max(amax, max(layer_amax) / record.scale)
        return cls(
            record.step,
            record.scale,
            record.skipped,
            not math.isfinite(record.loss),
            amax if math.isfinite(amax) else math.nan,
        )


def overflows_at(evidence: StepEvidence, scale: float, threshold: float) -> bool | None:
    """Whether the step overflows at `scale`; None when the log cannot tell (see above)."""
    if scale == evidence.scale:
        return evidence.skipped
    if evidence.forward_overflow:
        return True
    if evidence.skipped:
        return True if scale > evidence.scale else None
    if scale < evidence.scale:
        return False
    if math.isnan(evidence.amax):
        return None  # a log without grad_amax (older fpexplorer, or a scaler-less run)
    return evidence.amax * scale > threshold


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One replayed step: the scale it would use and whether it would be skipped."""

    step: int
    scale: float
    skipped: bool
    unknown: bool  # the outcome is an assumption (see overflows_at)
    growth_tracker: int
    hysteresis: int


@dataclass
class ScalerReplay:
    """Replays steps one at a time in constant memory; `summary` says how it compares.

    `add(record)` returns the replayed step, or None once the policy has ended the run
    (DeepSpeed at its minimum scale)."""

    settings: ScalerSettings
    threshold: float = field(default_factory=fp16_max)
    state: ScalerState = field(init=False)
    steps: int = 0
    logged_skips: int = 0
    predicted_skips: int = 0
    unknown_steps: list[int] = field(default_factory=list)  # the first MAX_LISTED
    unknown_count: int = 0
    first_scale_difference: int | None = None
    first_skip_difference: int | None = None
    ended_at: int | None = None  # the step where DeepSpeed's rule would end the run
    ended_reason: str | None = None
    logged_scale_range: tuple[float, float] = (math.inf, -math.inf)
    predicted_scale_range: tuple[float, float] = (math.inf, -math.inf)
    logged_final_scale: float = math.nan
    predicted_final_scale: float = math.nan

    MAX_LISTED = 20

    def __post_init__(self) -> None:
        self.state = initial_state(self.settings)

    def add(self, record: StepRecord) -> ReplayStep | None:
        return self.add_evidence(StepEvidence.of(record))

    def add_evidence(self, evidence: StepEvidence) -> ReplayStep | None:
        self.steps += 1
        self.logged_skips += evidence.skipped
        self.logged_final_scale = evidence.scale
        self.logged_scale_range = _widen(self.logged_scale_range, evidence.scale)
        if self.ended_at is not None:
            return None
        scale = self.state.scale
        outcome = overflows_at(evidence, scale, self.threshold)
        unknown = outcome is None
        skipped = bool(outcome)  # unknown: the smallest amax the overflow allows -> clean
        if unknown:
            self.unknown_count += 1
            if len(self.unknown_steps) < self.MAX_LISTED:
                self.unknown_steps.append(evidence.step)
        if scale != evidence.scale and self.first_scale_difference is None:
            self.first_scale_difference = evidence.step
        if skipped != evidence.skipped and self.first_skip_difference is None:
            self.first_skip_difference = evidence.step
        try:
            self.state = next_state(self.settings, self.state, skipped)
        except MinimumScaleError as error:
            self.ended_at = evidence.step
            self.ended_reason = str(error)
        self.predicted_skips += skipped
        self.predicted_final_scale = scale
        self.predicted_scale_range = _widen(self.predicted_scale_range, scale)
        return ReplayStep(
            evidence.step, scale, skipped, unknown, self.state.growth_tracker,
            self.state.hysteresis,
        )  # fmt: skip


def _widen(bounds: tuple[float, float], value: float) -> tuple[float, float]:
    return (min(bounds[0], value), max(bounds[1], value))


class EvidenceBuffer:
    """Every step's evidence of a run, in growing numpy arrays (the panel's what-if
    replays the whole run again when its settings change): 26 bytes a step."""

    def __init__(self, capacity: int = 1024) -> None:
        self.size = 0
        self.with_amax = 0  # steps that carry a gradient amax
        self.steps: npt.NDArray[np.int64] = np.zeros(capacity, dtype=np.int64)
        self.scales: npt.NDArray[np.float64] = np.zeros(capacity)
        self.amax: npt.NDArray[np.float64] = np.zeros(capacity)
        self.flags: npt.NDArray[np.uint8] = np.zeros(capacity, dtype=np.uint8)

    _SKIPPED = 1
    _FORWARD = 2

    def __len__(self) -> int:
        return self.size

    def add(self, record: StepRecord) -> None:
        evidence = StepEvidence.of(record)
        if self.size == len(self.steps):
            grown = 2 * len(self.steps)
            self.steps = np.resize(self.steps, grown)
            self.scales = np.resize(self.scales, grown)
            self.amax = np.resize(self.amax, grown)
            self.flags = np.resize(self.flags, grown)
        index = self.size
        self.with_amax += record.grad_amax is not None
        self.steps[index] = evidence.step
        self.scales[index] = evidence.scale
        self.amax[index] = evidence.amax
        self.flags[index] = (self._SKIPPED if evidence.skipped else 0) | (
            self._FORWARD if evidence.forward_overflow else 0
        )
        self.size += 1

    def evidence(self, index: int) -> StepEvidence:
        flags = int(self.flags[index])
        return StepEvidence(
            int(self.steps[index]),
            float(self.scales[index]),
            bool(flags & self._SKIPPED),
            bool(flags & self._FORWARD),
            float(self.amax[index]),
        )


@dataclass
class ReplayTrace:
    """A replay of an EvidenceBuffer kept as arrays (for a plot), continued as it grows.

    Compact arrays (`array.array`, 18 bytes a step): lists of Python numbers took some
    120 bytes a step, 100 MB for an 850,000-step run, and a copy per redraw to plot them.
    """

    settings: ScalerSettings
    threshold: float = field(default_factory=fp16_max)
    replay: ScalerReplay = field(init=False)
    steps: array[int] = field(default_factory=lambda: array("q"))
    scales: array[float] = field(default_factory=lambda: array("d"))
    skipped: array[int] = field(default_factory=lambda: array("b"))  # 0 or 1
    unknown: array[int] = field(default_factory=lambda: array("b"))  # 0 or 1

    def __post_init__(self) -> None:
        self.replay = ScalerReplay(self.settings, self.threshold)

    def pending(self, buffer: EvidenceBuffer) -> int:
        """Steps of `buffer` not replayed yet."""
        return len(buffer) - self.replay.steps

    def extend(self, buffer: EvidenceBuffer, limit: int | None = None) -> None:
        """Replay the steps of `buffer` not replayed yet (at most `limit` of them: a few
        microseconds a step, seconds for a long run, which a window must take in pieces)."""
        end = len(buffer) if limit is None else min(len(buffer), self.replay.steps + limit)
        for index in range(self.replay.steps, end):
            replayed = self.replay.add_evidence(buffer.evidence(index))
            if replayed is not None:
                self.steps.append(replayed.step)
                self.scales.append(replayed.scale)
                self.skipped.append(replayed.skipped)
                self.unknown.append(replayed.unknown)


def format_replay(replay: ScalerReplay, logged: ScalerSettings | None) -> str:
    """The comparison `fpexplorer runs replay-scaler` prints."""
    lines = []
    lines.append(f"logged:    {logged.describe() if logged else 'no dynamic scaler settings'}")
    lines.append(f"replayed:  {replay.settings.describe()}")
    lines.append(
        f"overflow rule: unscaled |gradient| amax x scale > {replay.threshold:g} "
        "(FP16's largest finite); inf/NaN loss: every scale"
    )
    rows = [
        ("steps skipped", f"{replay.logged_skips}", f"{replay.predicted_skips}"),
        ("final scale", _scale(replay.logged_final_scale), _scale(replay.predicted_final_scale)),
        ("lowest scale", _scale(replay.logged_scale_range[0]),
         _scale(replay.predicted_scale_range[0])),
        ("highest scale", _scale(replay.logged_scale_range[1]),
         _scale(replay.predicted_scale_range[1])),
    ]  # fmt: skip
    width = max(len(name) for name, _, _ in rows)
    lines.append(f"{'':{width}}  {'logged':>12}  {'predicted':>12}")
    lines += [f"{name:{width}}  {a:>12}  {b:>12}" for name, a, b in rows]
    lines.append(f"steps replayed: {replay.steps}")
    if replay.first_scale_difference is None and replay.first_skip_difference is None:
        lines.append("the traces agree at every step")
    else:
        if replay.first_scale_difference is not None:
            lines.append(f"scales first differ at step {replay.first_scale_difference}")
        if replay.first_skip_difference is not None:
            lines.append(
                f"skips first differ at step {replay.first_skip_difference}: a real run of "
                "this policy trains on other weights from there on"
            )
    if replay.unknown_count:
        listed = ", ".join(str(step) for step in replay.unknown_steps)
        more = f" and {replay.unknown_count - len(replay.unknown_steps)} more" * (
            replay.unknown_count > len(replay.unknown_steps)
        )
        lines.append(
            f"unknown outcomes: {replay.unknown_count} step(s) ({listed}{more}) overflowed in "
            "backward at the logged scale and are replayed at a lower one: assumed clean"
        )
    else:
        lines.append("unknown outcomes: none")
    if replay.ended_at is not None:
        lines.append(f"the policy ends the run at step {replay.ended_at}: {replay.ended_reason}")
    return "\n".join(lines)


def _scale(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    exponent = math.log2(value) if value > 0 else math.nan
    if math.isfinite(exponent) and exponent.is_integer():
        return f"2^{int(exponent)}"
    return display_decimal(Fraction(value))  # exact, or cut and marked "…"
