"""The PyTorch training-loop code that does what a TrainConfig's precision mode does. Qt-free.

The text is meant to be copied into one's own loop: it names torch's real APIs
(torch.autocast, torch.amp.GradScaler) with the scaler settings from the form. It is built
from the precision mode's row in `training.precision.PRECISION_MODES` (autocast dtype,
parameter dtype, scaler kind, the comment that explains the mode), not from its name: a new
mode in the table gets its code here with no change. A low-precision mode's recipe adds the
lines that quantize the linear layers: torchao's `convert_to_float8_training` with the
recipe's config and filter (fp8, fp8-rowwise), or fpexplorer's delayed-scaling and
block-scaled (MX, NVFP4) linears.
"""

from __future__ import annotations

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.precision import PrecisionMode, find_precision_mode
from fpexplorer.training.scaler_rules import ScalerSettings, scaler_policy

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


def _grad_scaler_call(class_name: str, settings: ScalerSettings) -> str:
    """`scaler = <class>(device.type, ...)` with GradScaler's four settings (torch's
    GradScaler and FSDP2's ShardedGradScaler take the same)."""
    return (
        f"scaler = {class_name}(\n"
        "    device.type,\n"
        f"    init_scale={settings.init_scale!r},\n"
        f"    growth_factor={settings.growth_factor!r},\n"
        f"    backoff_factor={settings.backoff_factor!r},\n"
        f"    growth_interval={settings.growth_interval!r},\n"
        ")\n"
    )


def _scaler_setup(config: TrainConfig, mode: PrecisionMode) -> str:
    if mode.scaler == "dynamic":
        settings = config.scaler_settings()
        if settings.policy == "torch":
            return _grad_scaler_call("torch.amp.GradScaler", settings)
        # DeepSpeed's and Megatron's policies as torch.amp.GradScaler subclasses (the same
        # scale/step/update calls); the settings below are the policy's, resolved.
        policy = scaler_policy(settings.policy)
        fields = settings.to_config()
        del fields["scaler"]
        arguments = "".join(f"        {name}={value!r},\n" for name, value in fields.items())
        # The description gives the policy's default figures: shown as such where the
        # form's differ (it said "hysteresis 2" above hysteresis=3).
        name, defaults = policy.description.split(": ", 1)
        about = (
            policy.description
            if settings == policy.defaults
            else f"{name} with this form's settings (its defaults: {defaults})"
        )
        return (
            "from fpexplorer.training.scaler_rules import ScalerSettings\n"
            f"from fpexplorer.training.scalers import {policy.class_name}\n\n"
            f"# {about}\n"
            f"scaler = {policy.class_name}(\n"
            f"    ScalerSettings(\n        {settings.policy!r},\n{arguments}    ),\n"
            "    device.type,\n"
            ")\n"
        )
    if mode.scaler == "static":
        return f"loss_scale = {config.loss_scale!r}  # fixed: never grows, never backs off\n"
    return ""


def _keep_first_last(config: TrainConfig) -> str:
    if not config.bf16_first_last:
        return "keep = set()  # every linear the kernels can take runs in low precision\n"
    return (
        "# The first and the last linear layer stay in BF16, as practitioners keep them.\n"
        "linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]\n"
        "keep = {linears[0], linears[-1]}\n"
    )


def _torchao_setup(config: TrainConfig, recipe: str) -> str:
    capability = "(9, 0)" if recipe == "rowwise" else "(8, 9)"
    return (
        "\nimport dataclasses\n"
        "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n\n"
        f"# FP8 matmul units from compute capability {capability}; torchao emulates them"
        " elsewhere\n"
        "# (the casts are real FP8, the products FP32).\n"
        'emulate = device.type != "cuda" or torch.cuda.get_device_capability(device) < '
        f"{capability}\n"
        f'config = Float8LinearConfig.from_recipe_name("{recipe}")\n'
        "config = dataclasses.replace(config, emulate=emulate)\n" + _keep_first_last(config) + "\n"
        "def module_filter_fn(module, name):\n"
        "    # FP8 kernels need both sizes of a weight divisible by 16.\n"
        "    fits = module.in_features % 16 == 0 and module.out_features % 16 == 0\n"
        "    return fits and name not in keep\n\n"
        "convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)\n"
    )


def _delayed_setup(config: TrainConfig) -> str:
    return (
        "\n# Delayed scaling in the style of Transformer Engine: each tensor's scale comes from\n"
        "# the amaxes of past steps (fpexplorer's emulated FP8 linear; TE's own needs an FP8\n"
        "# GPU: te.fp8_autocast(fp8_recipe=DelayedScaling(...)) around the forward pass).\n"
        "from fpexplorer.training.lowprec.fp8 import DelayedScaling, convert_delayed_fp8\n\n"
        "convert_delayed_fp8(\n"
        "    model,\n"
        f"    DelayedScaling(amax_history={config.amax_history!r}, "
        f"amax_compute={config.amax_compute!r}, margin={config.margin!r}),\n"
        f"    keep_first_last={config.bf16_first_last!r},  # the first and last linear in BF16\n"
        ")\n"
    )


def _block_setup(config: TrainConfig, mode: PrecisionMode, block_format: str) -> str:
    recipe = ""
    if mode.name == "nvfp4":
        recipe = (
            '\n    # NVIDIA\'s NVFP4 recipe: "2d" gives one scale per 16x16 weight tile (forward\n'
            "    # and backward multiply the same weight); hadamard rotates both operands of\n"
            "    # the weight-gradient matmul before they are quantized.\n"
            f"    weight_blocks={config.nvfp4_weight_blocks!r}, hadamard={config.hadamard!r},\n"
        )
    call = (
        f"swap_linears(model, {block_format!r}, keep_first_last={config.bf16_first_last!r})\n"
        if not recipe
        else f"swap_linears(\n    model, {block_format!r}, keep_first_last="
        f"{config.bf16_first_last!r},{recipe})\n"
    )
    return (
        "\n# fpexplorer's emulated block-scaled linears (no PyTorch kernel trains in this\n"
        "# format on every device): input, weight and output gradient quantized per block.\n"
        "from fpexplorer.training.lowprec.block_linear import swap_linears\n\n" + call
    )


_DELAYED_NOTE = (
    "FP8 with delayed scaling: each tensor is cast with the scale its amax history gave\n"
    "(fp8_max / amax / 2**margin), then its amax joins the history. A tensor that jumps\n"
    "is cast with the old, too large scale and saturates at the format's largest value."
)


def _recipe_setup(config: TrainConfig, mode: PrecisionMode) -> str:
    """The lines that quantize the model's linear layers, after it is on its device."""
    if mode.recipe == "fp8-tensorwise" and config.fp8_scaling == "delayed":
        return _delayed_setup(config)
    if mode.recipe == "fp8-tensorwise":
        return _torchao_setup(config, "tensorwise")
    if mode.recipe == "fp8-rowwise":
        return _torchao_setup(config, "rowwise")
    if mode.recipe == "block" and mode.block_format is not None:
        return _block_setup(config, mode, mode.block_format)
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


def _backward_and_step(mode: PrecisionMode, policy_scaler: bool = False) -> str:
    if mode.scaler == "dynamic" and policy_scaler:
        # DeepSpeed's and Megatron's hysteresis keeps the scale of a skipped step: the
        # scale cannot tell a skip, the scaler records it.
        return (
            "    scaler.scale(loss).backward()   # gradients of loss * scale\n"
            "    scaler.unscale_(optimizer)       # optional: before clipping or inspecting\n"
            "    scaler.step(optimizer)           # skipped when a gradient is inf/NaN\n"
            "    scaler.update()                  # the policy's rule (hysteresis, minimum)\n"
            "    skipped = scaler.last_step_skipped\n"
        )
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


def _ranks_head(config: TrainConfig) -> str:
    """Several ranks: how to start the file, the process group, this rank's device."""
    # The endpoint the run was given where its header states one. The c10d rendezvous, as
    # fpexplorer's launcher: torchrun's default (static) makes every node node-rank 0.
    endpoint = config.rdzv_endpoint or "HOST:PORT"
    nodes = (
        f" --nnodes {config.nnodes} --rdzv-backend c10d --rdzv-endpoint {endpoint}"
        if config.nnodes > 1
        else ""
    )
    cuda = 'torch.device("cuda", int(os.environ["LOCAL_RANK"]))'
    if config.device == "auto":
        device = (
            f'device = (\n    {cuda}\n    if torch.cuda.is_available() else torch.device("cpu")\n)'
        )
    elif config.device.startswith("cuda"):
        device = f"device = {cuda}  # one GPU per rank"
    else:
        device = f"device = torch.device({config.device!r})"
    return (
        f"# Several ranks: start this file with\n"
        f"#   torchrun --nproc-per-node {config.nproc_per_node}{nodes} train.py\n"
        "import itertools\nimport os\n\nimport torch\nimport torch.distributed as dist\n\n"
        "if not dist.is_initialized():  # gloo on CPU, nccl on CUDA\n"
        '    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
        f"{device}\n"
    )


def _ranks_wrap(config: TrainConfig) -> str:
    """Several ranks: how they share the model, and each rank's share of the batches."""
    share = (
        "# Each rank its own batches: every world-size-th one, from its rank on.\n"
        "batches = itertools.islice(batches, dist.get_rank(), None, dist.get_world_size())\n"
    )
    if config.parallel == "fsdp":
        return (
            "\nfrom torch.distributed.fsdp import fully_shard\n\n"
            "# FSDP2: every module that owns parameters, then the whole model, sharded.\n"
            "for module in list(model.modules())[1:]:\n"
            "    if next(module.parameters(recurse=False), None) is not None:\n"
            "        fully_shard(module)\n"
            "fully_shard(model)\n" + share
        )
    return (
        "\n# DDP: every rank holds the whole model; gradients are averaged in backward.\n"
        "model = torch.nn.parallel.DistributedDataParallel(\n"
        '    model, device_ids=[device.index] if device.type == "cuda" else None\n'
        ")\n" + share
    )


def _sharded_scaler(config: TrainConfig) -> str:
    settings = config.scaler_settings()
    return (
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
        "# Each rank holds a shard of the gradients: ShardedGradScaler all-reduces its\n"
        "# found-inf flag, so every rank skips the same steps.\n"
        + _grad_scaler_call("ShardedGradScaler", settings)
    )


# What the code uses and does not define: said first, so that pasted into an empty file
# it tells what to fill in (it stopped at "NameError: name 'model' is not defined").
YOURS = (
    "# Yours to define before this code: model (a torch.nn.Module), loss_fn(outputs,\n"
    "# targets) returning the loss, batches (an iterable of (inputs, targets) pairs).\n"
)


def pytorch_code(config: TrainConfig) -> str:
    """A complete, runnable-shaped training loop for `config.precision` (with
    `config.nproc_per_node` > 1: one rank's loop, to start with torchrun)."""
    launches = config.launches
    # Several ranks: how to start the file goes first, what to fill in next.
    head = (
        _ranks_head(config) + YOURS
        if launches
        else f"{YOURS}import torch\n\n{_device_line(config)}\n"
    ) + f"lr = {_lr(config)}\nmodel = model.to(device)\n"
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
    delayed = mode.recipe == "fp8-tensorwise" and config.fp8_scaling == "delayed"
    note = _DELAYED_NOTE if delayed else mode.code_note
    backoff = config.scaler_settings().backoff_factor
    if mode.scaler == "dynamic" and backoff != 0.5:
        # The mode's note says what the default does; the form's factor is what runs.
        note = note.replace("halve the scale", f"multiply the scale by {backoff!r}")
    return (
        head
        + setup
        + _recipe_setup(config, mode)
        + (_ranks_wrap(config) if launches else "")
        + f"optimizer = {_optimizer(config, mode)}\n"
        + (
            _sharded_scaler(config)
            if launches and config.parallel == "fsdp" and mode.scaler == "dynamic"
            else _scaler_setup(config, mode)
        )
        + "\n"
        + helper
        + _comment(note)
        + "for inputs, targets in batches:\n"
        + to_device
        + "    optimizer.zero_grad(set_to_none=True)\n"
        + _forward(mode)
        + _backward_and_step(mode, policy_scaler=config.scaler != "torch")
    )
