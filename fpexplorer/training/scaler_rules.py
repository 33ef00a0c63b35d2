"""Dynamic loss-scaling policies as pure rules: state in, overflow flag in, state out.
Torch-free: the GUI's what-if, the replay and the torch scalers share these functions.

Three policies, each one row of `SCALER_POLICIES` (name, the line that explains it, its
documented defaults, its rule):

- ``torch``: `torch.amp.GradScaler` (`torch/amp/grad_scaler.py`, `GradScaler.update`, whose
  arithmetic is `_amp_update_scale_`): on inf/NaN multiply the scale by `backoff_factor`
  and reset the growth tracker; after `growth_interval` clean steps in a row multiply it by
  `growth_factor` (only if the result is finite) and reset the tracker. The scale is a
  float32 tensor.
- ``deepspeed``: DeepSpeed's `DynamicLossScaler.update_scale`
  (`deepspeed/runtime/fp16/loss_scaler.py`), with the defaults of its fp16 config
  (`deepspeed/runtime/constants.py`: initial_scale_power 16, loss_scale_window 1000,
  hysteresis 2, consecutive_hysteresis False, min_loss_scale 1; `raise_error_at_min_scale`
  is always True from the config).
- ``megatron``: Megatron-LM's `DynamicGradScaler.update`
  (`megatron/core/optimizer/grad_scaler.py`) with the defaults of
  `megatron/training/arguments.py` (--initial-loss-scale 2**32, --min-loss-scale 1,
  --loss-scale-window 1000, --hysteresis 2; factors 2 and 0.5 as its optimizer builds it).

Every policy skips the optimizer step on inf/NaN gradients, whatever its hysteresis says:
hysteresis only delays the *backoff* of the scale, never the skip.

`next_state(settings, state, found_inf)` is the rule; `initial_state(settings)` the start.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from fpexplorer.training.precision import find_precision_mode


class MinimumScaleError(RuntimeError):
    """DeepSpeed ends the run when the scale must back off below its minimum
    (`raise_error_at_min_scale`, always on from DeepSpeed's config)."""


@dataclass(frozen=True, slots=True)
class ScalerSettings:
    """The settings of one policy, all resolved (no "default" placeholders).

    `growth_factor` and `backoff_factor`: DeepSpeed has one `scale_factor` (2) that it
    multiplies by to grow and divides by to back off; here the two factors, whose defaults
    (2 and 0.5) give the same numbers, so a what-if may also set them apart.
    """

    policy: str  # a name in SCALER_POLICIES
    init_scale: float
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    hysteresis: int = 1  # overflows before the scale backs off (1: at once, torch's rule)
    min_scale: float | None = None  # the scale never backs off below it; None: no floor
    consecutive_hysteresis: bool = False  # DeepSpeed: refill the hysteresis on a clean step

    def to_config(self) -> dict[str, Any]:
        """The settings under a run header config's keys (TrainConfig's option names)."""
        values = {item.name: getattr(self, item.name) for item in dataclasses.fields(self)}
        return {"scaler": values.pop("policy"), **values}

    def describe(self) -> str:
        """One line: the policy and the settings that make it, e.g. for a legend."""
        parts = [
            f"init {exact_number(self.init_scale)}",
            f"x{exact_number(self.growth_factor)} after {self.growth_interval}",
            f"x{exact_number(self.backoff_factor)} on overflow",
        ]
        if self.hysteresis != 1:
            parts.append(f"hysteresis {self.hysteresis}")
        if self.min_scale is not None:
            parts.append(f"min {exact_number(self.min_scale)}")
        if self.consecutive_hysteresis:
            parts.append("consecutive hysteresis")
        return f"{self.policy}: " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ScalerState:
    """A policy's state between two steps.

    `scale`: the scale the next step uses. `growth_tracker`: torch's and Megatron's clean
    steps since the last growth or overflow; DeepSpeed's `cur_iter - last_overflow_iter - 1`
    (clean steps since the last overflow, not reset when the scale grows). `hysteresis`:
    overflows left before the scale backs off (DeepSpeed's `cur_hysteresis`, Megatron's
    `_hysteresis_tracker`; always 1 for torch).
    """

    scale: float
    growth_tracker: int = 0
    hysteresis: int = 1


def exact_number(value: float) -> str:
    """A setting as typed back exactly: whole numbers without a point, others as Python's
    shortest round-tripping repr (never rounded for show), in the app's notation: "1e39",
    not Python's "1e+39"."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(value).replace("e+", "e")


def float32(value: float) -> float:
    """`value` rounded to float32 (to nearest, ties to even), as a scale tensor holds it;
    inf beyond float32's range."""
    try:
        rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return rounded


def initial_state(settings: ScalerSettings) -> ScalerState:
    return ScalerState(float32(settings.init_scale), 0, settings.hysteresis)


def torch_rule(settings: ScalerSettings, state: ScalerState, found_inf: bool) -> ScalerState:
    """`torch.amp.GradScaler.update` (`_amp_update_scale_`): back off at once on inf/NaN;
    grow after `growth_interval` clean steps, unless the grown scale is not finite."""
    if found_inf:
        return ScalerState(float32(state.scale * settings.backoff_factor), 0, 1)
    successful = state.growth_tracker + 1
    if successful == settings.growth_interval:
        grown = float32(state.scale * settings.growth_factor)
        if math.isfinite(grown):
            return ScalerState(grown, 0, 1)
        return ScalerState(state.scale, 0, 1)
    return ScalerState(state.scale, successful, 1)


def deepspeed_rule(settings: ScalerSettings, state: ScalerState, found_inf: bool) -> ScalerState:
    """DeepSpeed's `DynamicLossScaler.update_scale`.

    On an overflow: with `delayed_shift == 1` or `cur_hysteresis == 1` the scale backs off
    (to at least `min_scale`; at `min_scale` already, DeepSpeed raises: MinimumScaleError);
    otherwise `cur_hysteresis` drops by one and the scale stays. Either way the overflow
    restarts the growth window (`last_overflow_iter = cur_iter`). On a clean step:
    `consecutive_hysteresis` refills the hysteresis; the scale grows when
    `stable_interval = cur_iter - last_overflow_iter - 1` is positive and a multiple of
    `scale_window`, refilling the hysteresis (without consecutive hysteresis). So the first
    growth after an overflow comes on the window's + 1st clean step, later ones every window.
    """
    min_scale = settings.min_scale if settings.min_scale is not None else 0.0
    if found_inf:
        hysteresis = state.hysteresis
        scale = state.scale
        if settings.hysteresis == 1 or state.hysteresis == 1:
            if scale == min_scale:
                raise MinimumScaleError(
                    f"DeepSpeed's loss scaler: the scale is already at its minimum "
                    f"{exact_number(min_scale)} and must back off again (DeepSpeed ends the "
                    "run here)"
                )
            scale = max(float32(scale * settings.backoff_factor), min_scale)
        else:
            hysteresis -= 1
        return ScalerState(scale, 0, hysteresis)
    hysteresis = settings.hysteresis if settings.consecutive_hysteresis else state.hysteresis
    stable_interval = state.growth_tracker
    scale = state.scale
    if stable_interval > 0 and stable_interval % settings.growth_interval == 0:
        if not settings.consecutive_hysteresis:
            hysteresis = settings.hysteresis
        scale = float32(scale * settings.growth_factor)
    return ScalerState(scale, stable_interval + 1, hysteresis)


def megatron_rule(settings: ScalerSettings, state: ScalerState, found_inf: bool) -> ScalerState:
    """Megatron-LM's `DynamicGradScaler.update`.

    On inf/NaN: the growth tracker resets and the hysteresis tracker drops by one; once it
    is at or below 0 the scale backs off (never below `min_scale`), and keeps backing off on
    every later overflow. Clean steps do not refill the hysteresis (despite the docstring's
    "in a row"): only a growth does, after `growth_interval` clean steps in a row.
    """
    min_scale = settings.min_scale if settings.min_scale is not None else 0.0
    if found_inf:
        hysteresis = state.hysteresis - 1
        scale = state.scale
        if hysteresis <= 0:
            scale = max(float32(scale * settings.backoff_factor), float32(min_scale))
        return ScalerState(scale, 0, hysteresis)
    tracker = state.growth_tracker + 1
    if tracker == settings.growth_interval:
        return ScalerState(float32(state.scale * settings.growth_factor), 0, settings.hysteresis)
    return ScalerState(state.scale, tracker, state.hysteresis)


Rule = Callable[[ScalerSettings, ScalerState, bool], ScalerState]


class ScalerPolicy(NamedTuple):
    """One loss-scaling policy: its name, the line that explains it, its defaults, its rule."""

    name: str
    description: str
    defaults: ScalerSettings
    rule: Rule
    class_name: str  # the torch.amp.GradScaler subclass in training.scalers (code view)


SCALER_POLICIES: tuple[ScalerPolicy, ...] = (
    ScalerPolicy(
        "torch",
        "torch.amp.GradScaler: back off at once, grow after 2000 clean steps",
        ScalerSettings("torch", init_scale=2.0**16, growth_interval=2000),
        torch_rule,
        "GradScaler",
    ),
    ScalerPolicy(
        "deepspeed",
        "DeepSpeed's DynamicLossScaler: hysteresis 2, min scale 1, window 1000",
        ScalerSettings(
            "deepspeed", init_scale=2.0**16, growth_interval=1000, hysteresis=2, min_scale=1.0
        ),
        deepspeed_rule,
        "DeepSpeedGradScaler",
    ),
    ScalerPolicy(
        "megatron",
        "Megatron-LM's DynamicGradScaler: init 2^32, hysteresis 2, min scale 1, window 1000",
        ScalerSettings(
            "megatron", init_scale=2.0**32, growth_interval=1000, hysteresis=2, min_scale=1.0
        ),
        megatron_rule,
        "MegatronGradScaler",
    ),
)
SCALER_NAMES: tuple[str, ...] = tuple(policy.name for policy in SCALER_POLICIES)
_BY_NAME = {policy.name: policy for policy in SCALER_POLICIES}


def scaler_policy(name: str) -> ScalerPolicy:
    """The policy called `name`; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown scaler {name!r}: use one of {', '.join(SCALER_NAMES)}") from None


def next_state(settings: ScalerSettings, state: ScalerState, found_inf: bool) -> ScalerState:
    """The state after one step of `settings.policy`'s rule (MinimumScaleError where
    DeepSpeed would end the run)."""
    return scaler_policy(settings.policy).rule(settings, state, found_inf)


def steps_toward_growth(policy: str, growth_tracker: int, growth_interval: int) -> int:
    """Clean steps counted toward the next growth, from a step record's growth tracker.
    DeepSpeed's tracker counts clean steps since the last overflow, not reset by a growth,
    and the first clean step after an overflow does not count (see deepspeed_rule)."""
    if policy == "deepspeed":
        return (growth_tracker - 1) % growth_interval if growth_tracker > 0 else 0
    return growth_tracker


def settings_problems(settings: ScalerSettings) -> dict[str, str]:
    """Setting name -> what is wrong with it for its policy; empty when all is well."""
    problems: dict[str, str] = {}
    if settings.policy not in _BY_NAME:
        problems["policy"] = (
            f"unknown scaler {settings.policy!r}: use one of {', '.join(SCALER_NAMES)}"
        )
        return problems
    if not (math.isfinite(settings.init_scale) and settings.init_scale > 0):
        problems["init_scale"] = "the initial scale must be a positive finite number"
    if not (math.isfinite(settings.growth_factor) and settings.growth_factor > 1):
        problems["growth_factor"] = "the growth factor must be greater than 1"
    if not (math.isfinite(settings.backoff_factor) and 0 < settings.backoff_factor < 1):
        problems["backoff_factor"] = "the backoff factor must lie between 0 and 1"
    if settings.growth_interval < 1:
        problems["growth_interval"] = "the growth interval must be a whole number of at least 1"
    if settings.hysteresis < 1:
        problems["hysteresis"] = "the hysteresis must be a whole number of at least 1"
    if settings.policy == "torch":
        if settings.hysteresis != 1:
            problems["hysteresis"] = (
                "torch's GradScaler has no hysteresis: use --scaler deepspeed or megatron"
            )
        if settings.min_scale is not None:
            problems["min_scale"] = (
                "torch's GradScaler has no minimum scale: use --scaler deepspeed or megatron"
            )
    if settings.min_scale is not None:
        if not (math.isfinite(settings.min_scale) and settings.min_scale > 0):
            problems["min_scale"] = "the minimum scale must be a positive finite number"
        elif settings.min_scale > settings.init_scale:
            # Megatron asserts it; DeepSpeed would only ever back off to it.
            problems["min_scale"] = "the minimum scale must not exceed the initial scale"
    if settings.consecutive_hysteresis and settings.policy != "deepspeed":
        problems["consecutive_hysteresis"] = "consecutive hysteresis is DeepSpeed's option"
    return problems


def resolve_settings(policy: str, **given: Any) -> ScalerSettings:
    """The policy's defaults with the settings given (None: the policy's default)."""
    defaults = scaler_policy(policy).defaults
    chosen = {name: value for name, value in given.items() if value is not None}
    return dataclasses.replace(defaults, **chosen)


def settings_from_config(config: dict[str, Any]) -> ScalerSettings | None:
    """The settings a run header's config records (the job writes them resolved; a user
    loop's monitor writes GradScaler's); None when the run had no dynamic scaler."""
    mode = find_precision_mode(str(config.get("precision", "")))
    if mode is not None and mode.scaler != "dynamic":
        return None
    if config.get("init_scale") is None or config.get("growth_interval") is None:
        return None
    policy = str(config.get("scaler") or "torch")
    if policy not in _BY_NAME:
        return None
    fields = {item.name for item in dataclasses.fields(ScalerSettings)} - {"policy"}
    given = {name: config.get(name) for name in fields}
    try:
        return resolve_settings(policy, **given)
    except (TypeError, ValueError):
        return None
