"""The PyTorch training-loop code that does what a TrainConfig's precision mode does. Qt-free.

The text is meant to be copied into one's own loop: it names torch's real APIs
(torch.autocast, torch.amp.GradScaler) with the scaler settings from the form. It is built
from the precision mode's row in `training.precision.PRECISION_MODES` (autocast dtype,
parameter dtype, scaler kind, the comment that explains the mode), not from its name: a new
mode in the table gets its code here with no change.
"""

from __future__ import annotations

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.precision import PrecisionMode, find_precision_mode
from fpexplorer.training.scaler_rules import scaler_policy

_LABELS = {"float16": "FP16", "bfloat16": "BF16", "float32": "FP32"}


def _device_line(config: TrainConfig) -> str:
    # "auto" is what the job does: CUDA when there is one, else the CPU. The code must run
    # on the machine it is pasted into, so it decides at run time too.
    if config.device == "auto":
        return 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
    return f"device = torch.device({config.device!r})"


def _lr(config: TrainConfig) -> str:
    if config.lr is None:
        return "1e-3  # yours to choose (the fpexplorer task uses its own default)"
    return f"{config.lr!r}"


def _optimizer(config: TrainConfig, mode: PrecisionMode) -> str:
    if config.optimizer == "adam":
        if mode.params_dtype == "float16":
            # Adam's default eps=1e-8 rounds to 0 in FP16 and 0/0 is NaN (the job uses 1e-4).
            return "torch.optim.Adam(model.parameters(), lr=lr, eps=1e-4)"
        return "torch.optim.Adam(model.parameters(), lr=lr)"
    if config.optimizer is None:
        # "task default": the job's task chooses (most built-in tasks use Adam); the code
        # must not pretend to know which.
        return "torch.optim.SGD(model.parameters(), lr=lr)  # or the optimizer you use"
    return "torch.optim.SGD(model.parameters(), lr=lr)"


def _comment(text: str, indent: str = "") -> str:
    return "".join(f"{indent}# {line}\n" for line in text.splitlines())


def _scaler_setup(config: TrainConfig, mode: PrecisionMode) -> str:
    if mode.scaler == "dynamic":
        settings = config.scaler_settings()
        if settings.policy == "torch":
            return (
                "scaler = torch.amp.GradScaler(\n"
                "    device.type,\n"
                f"    init_scale={settings.init_scale!r},\n"
                f"    growth_factor={settings.growth_factor!r},\n"
                f"    backoff_factor={settings.backoff_factor!r},\n"
                f"    growth_interval={settings.growth_interval!r},\n"
                ")\n"
            )
        # DeepSpeed's and Megatron's policies as torch.amp.GradScaler subclasses (the same
        # scale/step/update calls); the settings below are the policy's, resolved.
        policy = scaler_policy(settings.policy)
        fields = settings.to_config()
        del fields["scaler"]
        arguments = "".join(f"        {name}={value!r},\n" for name, value in fields.items())
        return (
            "from fpexplorer.training.scaler_rules import ScalerSettings\n"
            f"from fpexplorer.training.scalers import {policy.class_name}\n\n"
            f"# {policy.description}\n"
            f"scaler = {policy.class_name}(\n"
            f"    ScalerSettings(\n        {settings.policy!r},\n{arguments}    ),\n"
            "    device.type,\n"
            ")\n"
        )
    if mode.scaler == "static":
        return f"loss_scale = {config.loss_scale!r}  # fixed: never grows, never backs off\n"
    return ""


def _inputs(mode: PrecisionMode) -> tuple[str, str]:
    """(helper defined before the loop, the loop's first line) moving a batch to the model."""
    if mode.params_dtype == "float32":
        return "", "    inputs, targets = inputs.to(device), targets.to(device)\n"
    dtype = mode.params_dtype
    helper = (
        f"# Floating-point data in {_LABELS.get(dtype, dtype)}; integer data (labels, tokens) "
        "as they are.\n"
        "def to_model(t):\n"
        "    if t.is_floating_point():\n"
        f"        return t.to(device, torch.{dtype})\n"
        "    return t.to(device)\n\n"
    )
    return helper, "    inputs, targets = to_model(inputs), to_model(targets)\n"


def _forward(mode: PrecisionMode) -> str:
    if mode.autocast_dtype is None:
        return "    loss = loss_fn(model(inputs), targets)\n"
    return (
        f"    with torch.autocast(device_type=device.type, dtype=torch.{mode.autocast_dtype}):\n"
        "        loss = loss_fn(model(inputs), targets)\n"
    )


def _backward_and_step(mode: PrecisionMode) -> str:
    if mode.scaler == "dynamic":
        return (
            "    scaler.scale(loss).backward()   # gradients of loss * scale\n"
            "    scaler.unscale_(optimizer)       # optional: before clipping or inspecting\n"
            "    scaler.step(optimizer)           # skipped when a gradient is inf/NaN\n"
            "    scale_before = scaler.get_scale()\n"
            "    scaler.update()\n"
            "    skipped = scaler.get_scale() < scale_before  # GradScaler does not say so itself\n"
        )
    if mode.scaler == "static":
        scaled = (
            "    # The scaled loss in FP32: it must not overflow itself.\n"
            "    (loss.float() * loss_scale).backward()\n"
            if mode.params_dtype != "float32"
            else "    (loss * loss_scale).backward()\n"
        )
        return scaled + (
            "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
            "    if all(torch.isfinite(g).all() for g in grads):  # skip the step on inf/NaN\n"
            "        for g in grads:\n"
            "            g.div_(loss_scale)\n"
            "        optimizer.step()\n"
        )
    return "    loss.backward()\n    optimizer.step()\n"


def pytorch_code(config: TrainConfig) -> str:
    """A complete, runnable-shaped training loop for `config.precision`."""
    head = f"import torch\n\n{_device_line(config)}\nlr = {_lr(config)}\nmodel = model.to(device)\n"
    mode = find_precision_mode(config.precision)
    if mode is None:
        return head + f"# precision mode {config.precision!r} is not known to this version\n"
    if mode.params_dtype == "float16":
        cast = "model = model.half()"
    elif mode.params_dtype != "float32":
        cast = f"model = model.to(torch.{mode.params_dtype})"
    else:
        cast = ""
    label = _LABELS.get(mode.params_dtype, mode.params_dtype)
    setup = f"{cast}  # weights, gradients and optimizer state all {label}\n" if cast else ""
    helper, to_device = _inputs(mode)
    return (
        head
        + setup
        + f"optimizer = {_optimizer(config, mode)}\n"
        + _scaler_setup(config, mode)
        + "\n"
        + helper
        + _comment(mode.code_note)
        + "for inputs, targets in batches:\n"
        + to_device
        + "    optimizer.zero_grad(set_to_none=True)\n"
        + _forward(mode)
        + _backward_and_step(mode)
    )
