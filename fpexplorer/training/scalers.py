"""DeepSpeed's and Megatron-LM's dynamic loss scaling as `torch.amp.GradScaler`s. Needs torch.

    scaler = make_grad_scaler(resolve_settings("deepspeed"), device.type)
    scaler.scale(loss).backward()
    scaler.step(optimizer)      # GradScaler's: unscale, skip the step on inf/NaN
    scaler.update()             # the policy's rule (training.scaler_rules)

Each class is a GradScaler whose `update()` applies its policy's rule, the same pure
function the replay uses (`training.scaler_rules.next_state`); scaling, unscaling and
skipping a step with inf/NaN gradients stay GradScaler's. So AmpMonitor, `unscale_()`
before clipping, and a user's loop see the same object they know. `hysteresis_tracker`
is the policy's hysteresis state after the last update (the monitor logs it).

Cost: `update()` reads the step's found-inf flag on the host (one sync per step, as
DeepSpeed's and Megatron's own scalers do; GradScaler.step already synced on it).
"""

from __future__ import annotations

from typing import Any

import torch

from fpexplorer.training.scaler_rules import (
    ScalerSettings,
    ScalerState,
    initial_state,
    next_state,
    settings_problems,
)


class PolicyGradScaler(torch.amp.GradScaler):
    """A GradScaler whose scale follows `settings.policy`'s rule (see scaler_rules)."""

    policy = "torch"

    def __init__(self, settings: ScalerSettings, device: str = "cuda") -> None:
        if settings.policy != self.policy:
            raise ValueError(
                f"{type(self).__name__} runs the {self.policy} policy, not {settings.policy}"
            )
        problems = settings_problems(settings)
        if problems:
            raise ValueError("; ".join(problems.values()))
        super().__init__(
            device,
            init_scale=settings.init_scale,
            growth_factor=settings.growth_factor,
            backoff_factor=settings.backoff_factor,
            growth_interval=settings.growth_interval,
        )
        self.settings = settings
        self.state: ScalerState = initial_state(settings)
        # Whether the last update saw inf/NaN gradients (the step was skipped): with
        # hysteresis the scale alone cannot tell.
        self.last_step_skipped = False

    @property
    def hysteresis_tracker(self) -> int:
        """Overflows left before the scale backs off (after the last update)."""
        return self.state.hysteresis

    def header_settings(self) -> dict[str, Any]:
        """What a run header records of this scaler, beyond GradScaler's own settings."""
        return self.settings.to_config()

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Apply the policy's rule to this step's inf/NaN flag (or set `new_scale`, which
        also becomes the policy's scale). DeepSpeed's rule may raise MinimumScaleError."""
        if not self._enabled:
            return
        if new_scale is not None:
            super().update(new_scale)
            self.state = ScalerState(
                float(self.get_scale()), self.state.growth_tracker, self.state.hysteresis
            )
            return
        found_infs = [
            found_inf
            for per_optimizer in self._per_optimizer_states.values()
            for found_inf in per_optimizer["found_inf_per_device"].values()
        ]
        if not found_infs:
            raise AssertionError("No inf checks were recorded prior to update.")
        found = bool(sum(float(flag.item()) for flag in found_infs) > 0)
        self.last_step_skipped = found
        self.state = next_state(self.settings, self.state, found)
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(self.state.growth_tracker)
        # GradScaler's own update with a new scale: fills the scale tensor and clears the
        # per-optimizer inf/NaN records for the next step.
        super().update(float(self.state.scale))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if state:
            state["hysteresis_tracker"] = self.state.hysteresis
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.state = ScalerState(
            float(state_dict["scale"]),
            int(state_dict["_growth_tracker"]),
            int(state_dict.get("hysteresis_tracker", self.settings.hysteresis)),
        )


class DeepSpeedGradScaler(PolicyGradScaler):
    """DeepSpeed's `DynamicLossScaler` (deepspeed/runtime/fp16/loss_scaler.py): hysteresis
    (`delayed_shift`), optional consecutive hysteresis, a minimum scale at which a further
    backoff ends the run (MinimumScaleError)."""

    policy = "deepspeed"


class MegatronGradScaler(PolicyGradScaler):
    """Megatron-LM's `DynamicGradScaler` (megatron/core/optimizer/grad_scaler.py):
    hysteresis refilled only by a growth, a minimum scale."""

    policy = "megatron"


_CLASSES: dict[str, type[PolicyGradScaler]] = {
    cls.policy: cls for cls in (DeepSpeedGradScaler, MegatronGradScaler)
}


def make_grad_scaler(settings: ScalerSettings, device: str) -> torch.amp.GradScaler:
    """The GradScaler of `settings.policy`: torch's own for "torch", else its subclass."""
    if settings.policy == "torch":
        problems = settings_problems(settings)
        if problems:
            raise ValueError("; ".join(problems.values()))
        return torch.amp.GradScaler(
            device,
            init_scale=settings.init_scale,
            growth_factor=settings.growth_factor,
            backoff_factor=settings.backoff_factor,
            growth_interval=settings.growth_interval,
        )
    return _CLASSES[settings.policy](settings, device)
