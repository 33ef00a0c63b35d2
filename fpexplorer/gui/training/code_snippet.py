"""The PyTorch training-loop code that does what a TrainConfig's precision mode does. Qt-free.

The text is meant to be copied into one's own loop: it names torch's real APIs
(torch.autocast, torch.amp.GradScaler) with the scaler settings from the form.
"""

from __future__ import annotations

from fpexplorer.training.config import TrainConfig


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


def _optimizer(config: TrainConfig) -> str:
    if config.optimizer == "adam":
        if config.precision == "pure-fp16":
            # Adam's default eps=1e-8 rounds to 0 in FP16 and 0/0 is NaN (the job uses 1e-4).
            return "torch.optim.Adam(model.parameters(), lr=lr, eps=1e-4)"
        return "torch.optim.Adam(model.parameters(), lr=lr)"
    if config.optimizer is None:
        # "task default": the job's task chooses (most built-in tasks use Adam); the code
        # must not pretend to know which.
        return "torch.optim.SGD(model.parameters(), lr=lr)  # or the optimizer you use"
    return "torch.optim.SGD(model.parameters(), lr=lr)"


# Each loop moves its batch to the model's device first (batches usually come from the CPU).
_TO_DEVICE = "    inputs, targets = inputs.to(device), targets.to(device)\n"


def pytorch_code(config: TrainConfig) -> str:
    """A complete, runnable-shaped training loop for `config.precision`."""
    head = f"import torch\n\n{_device_line(config)}\nlr = {_lr(config)}\nmodel = model.to(device)\n"
    mode = config.precision
    if mode == "fp32":
        return head + (
            f"optimizer = {_optimizer(config)}\n\n"
            "# FP32 everywhere: the reference run, no autocast, no scaler.\n"
            "for inputs, targets in batches:\n"
            + _TO_DEVICE
            + "    optimizer.zero_grad(set_to_none=True)\n"
            "    loss = loss_fn(model(inputs), targets)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
        )
    if mode == "bf16":
        return head + (
            f"optimizer = {_optimizer(config)}\n\n"
            "# BF16 has FP32's exponent range: no loss scaling is needed.\n"
            "# Weights and optimizer state stay FP32 (master weights).\n"
            "for inputs, targets in batches:\n"
            + _TO_DEVICE
            + "    optimizer.zero_grad(set_to_none=True)\n"
            "    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n"
            "        loss = loss_fn(model(inputs), targets)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
        )
    if mode == "fp16":
        return head + (
            f"optimizer = {_optimizer(config)}\n"
            "# Dynamic loss scaling: skip a step and halve the scale on inf/NaN gradients,\n"
            "# grow it after growth_interval clean steps.\n"
            "scaler = torch.amp.GradScaler(\n"
            "    device.type,\n"
            f"    init_scale={config.init_scale!r},\n"
            f"    growth_factor={config.growth_factor!r},\n"
            f"    backoff_factor={config.backoff_factor!r},\n"
            f"    growth_interval={config.growth_interval!r},\n"
            ")\n\n"
            "for inputs, targets in batches:\n"
            + _TO_DEVICE
            + "    optimizer.zero_grad(set_to_none=True)\n"
            "    with torch.autocast(device_type=device.type, dtype=torch.float16):\n"
            "        loss = loss_fn(model(inputs), targets)\n"
            "    scaler.scale(loss).backward()   # gradients of loss * scale\n"
            "    scaler.unscale_(optimizer)       # optional: before clipping or inspecting\n"
            "    scaler.step(optimizer)           # skipped when a gradient is inf/NaN\n"
            "    scale_before = scaler.get_scale()\n"
            "    scaler.update()\n"
            "    skipped = scaler.get_scale() < scale_before  # GradScaler does not say so itself\n"
        )
    if mode == "fp16-static":
        return head + (
            f"optimizer = {_optimizer(config)}\n"
            f"loss_scale = {config.loss_scale!r}  # fixed: never grows, never backs off\n\n"
            "for inputs, targets in batches:\n"
            + _TO_DEVICE
            + "    optimizer.zero_grad(set_to_none=True)\n"
            "    with torch.autocast(device_type=device.type, dtype=torch.float16):\n"
            "        loss = loss_fn(model(inputs), targets)\n"
            "    (loss * loss_scale).backward()\n"
            "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
            "    finite = all(torch.isfinite(g).all() for g in grads)\n"
            "    if finite:                        # skip the step on inf/NaN\n"
            "        for g in grads:\n"
            "            g.div_(loss_scale)\n"
            "        optimizer.step()\n"
        )
    if mode == "fp16-noscale":
        return head + (
            f"optimizer = {_optimizer(config)}\n\n"
            "# FP16 autocast without loss scaling: gradients below 2**-24 (5.96e-08)\n"
            "# underflow to zero in the FP16 backward pass.\n"
            "for inputs, targets in batches:\n"
            + _TO_DEVICE
            + "    optimizer.zero_grad(set_to_none=True)\n"
            "    with torch.autocast(device_type=device.type, dtype=torch.float16):\n"
            "        loss = loss_fn(model(inputs), targets)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
        )
    if mode == "pure-fp16":
        return head + (
            "model = model.half()  # weights, gradients and optimizer state all FP16\n"
            f"optimizer = {_optimizer(config)}\n"
            f"loss_scale = {config.loss_scale!r}  # fixed, as in fpexplorer's job\n\n"
            "# Floating-point data in FP16; integer data (labels, tokens) as they are.\n"
            "def to_model(t):\n"
            "    if t.is_floating_point():\n"
            "        return t.to(device, torch.float16)\n"
            "    return t.to(device)\n\n"
            "# No FP32 master weights: an update smaller than half an FP16 ulp of its weight\n"
            "# (|w| * 2**-11) rounds away and is lost.\n"
            "for inputs, targets in batches:\n"
            "    inputs, targets = to_model(inputs), to_model(targets)\n"
            "    optimizer.zero_grad(set_to_none=True)\n"
            "    loss = loss_fn(model(inputs), targets)\n"
            "    # The scaled loss in FP32: it must not overflow itself.\n"
            "    (loss.float() * loss_scale).backward()\n"
            "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
            "    # Skip the step on inf/NaN gradients.\n"
            "    if all(torch.isfinite(g).all() for g in grads):\n"
            "        for g in grads:\n"
            "            g.div_(loss_scale)\n"
            "        optimizer.step()\n"
        )
    return head + f"# precision mode {mode!r} is not known to this version of fpexplorer\n"
