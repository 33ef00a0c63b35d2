"""The training panel's code view: the PyTorch code it shows must run, as shown, and train.

The snippet is Qt-free text (fpexplorer.gui.training.code_snippet); running it needs torch,
so the test lives with the training tests.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from fpexplorer.gui.training.code_snippet import pytorch_code
from fpexplorer.training.config import PRECISION_NAMES, TrainConfig


def _run_snippet(config: TrainConfig) -> dict[str, Any]:
    """exec the code with a small classifier, its batches and loss function defined."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 3))
    inputs = torch.randn(128, 8)
    labels = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0).long()
    batches = [(inputs[i : i + 32], labels[i : i + 32]) for i in range(0, 128, 32)] * 3
    namespace: dict[str, Any] = {
        "model": model,
        "batches": batches,
        "loss_fn": nn.functional.cross_entropy,
    }
    exec(pytorch_code(config), namespace)  # the code view's text, run as shown
    return namespace


@pytest.mark.parametrize("optimizer", [None, "adam"])
@pytest.mark.parametrize("precision", PRECISION_NAMES)
def test_code_view_runs_as_shown_with_the_default_device(
    precision: str, optimizer: str | None
) -> None:
    # device "auto" is the form's default: the code must run on a machine without CUDA.
    config = TrainConfig(precision=precision, device="auto", optimizer=optimizer, lr=1e-2)
    namespace = _run_snippet(config)
    loss = namespace["loss"]
    assert math.isfinite(float(loss.detach()))
    weight = namespace["model"][0].weight
    assert weight.dtype == (torch.float16 if precision == "pure-fp16" else torch.float32)
    assert weight.isfinite().all()


def test_code_view_fp16_and_bf16_train_on_cpu() -> None:
    first = _run_snippet(TrainConfig(precision="fp32", device="cpu", lr=0.2))
    for precision in ("fp16", "bf16"):
        namespace = _run_snippet(TrainConfig(precision=precision, device="cpu", lr=0.2))
        # The same model, data and optimizer: mixed precision lands near the FP32 loss.
        assert float(namespace["loss"].detach()) == pytest.approx(
            float(first["loss"].detach()), rel=0.05
        )
    fp16 = _run_snippet(TrainConfig(precision="fp16", device="cpu", init_scale=2.0**10))
    assert fp16["scaler"].get_scale() == 2.0**10  # the form's scaler settings are used


def test_code_view_pure_fp16_uses_the_jobs_loss_scale() -> None:
    code = pytorch_code(TrainConfig(precision="pure-fp16", loss_scale=512.0))
    assert "loss_scale = 512.0" in code


@pytest.mark.parametrize(
    ("precision", "options", "layer_class"),
    [
        ("fp8", {}, "Float8Linear"),
        ("fp8-rowwise", {}, "Float8Linear"),
        ("fp8", {"fp8_scaling": "delayed", "amax_history": 4}, "DelayedScalingLinear"),
        ("mxfp8", {}, "BlockScaledLinear"),
        ("nvfp4", {}, "BlockScaledLinear"),
        ("nvfp4", {"nvfp4_weight_blocks": "1d", "hadamard": False}, "BlockScaledLinear"),
    ],
)
@pytest.mark.parametrize("keep", [False, True])
def test_code_view_quantizes_the_linears_as_the_recipe_says(
    precision: str, options: dict[str, Any], layer_class: str, keep: bool
) -> None:
    torch.manual_seed(0)
    # Sizes FP8 kernels take (multiples of 16), but the first layer's input (8).
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(),
                          nn.Linear(32, 16), nn.GELU(), nn.Linear(16, 16))  # fmt: skip
    inputs = torch.randn(64, 8)
    labels = (inputs[:, 0] > 0).long()
    batches = [(inputs[i : i + 16], labels[i : i + 16]) for i in range(0, 64, 16)]
    config = TrainConfig(precision=precision, device="auto", optimizer="adam", lr=1e-2,
                         bf16_first_last=keep, **options)  # fmt: skip
    namespace: dict[str, Any] = {
        "model": model, "batches": batches, "loss_fn": nn.functional.cross_entropy,
    }  # fmt: skip
    exec(pytorch_code(config), namespace)
    kinds = [type(layer).__name__ for layer in namespace["model"][::2]]
    # FP8: the first layer (8 inputs) never fits the kernels (blocks take any size); the
    # last stays BF16 when kept, and so does the first.
    first = layer_class if precision in ("mxfp8", "nvfp4") and not keep else "Linear"
    assert kinds == [first, layer_class, layer_class, "Linear" if keep else layer_class]
    if precision == "nvfp4":  # NVIDIA's recipe as the options chose it
        recipe = {(layer.weight_blocks, layer.hadamard) for layer in namespace["model"][2:5:2]}
        assert recipe == {(config.nvfp4_weight_blocks, config.hadamard)}
    assert math.isfinite(float(namespace["loss"].detach()))


@pytest.mark.parametrize("policy", ["deepspeed", "megatron"])
def test_code_view_shows_and_runs_the_chosen_scaler(policy: str) -> None:
    from fpexplorer.training.scalers import PolicyGradScaler

    config = TrainConfig(precision="fp16", device="cpu", scaler=policy, init_scale=2.0**40)
    code = pytorch_code(config)
    assert "GradScaler(" in code and f"'{policy}'" in code
    namespace = _run_snippet(config)
    scaler = namespace["scaler"]
    assert isinstance(scaler, PolicyGradScaler) and scaler.settings == config.scaler_settings()
    # 12 steps from 2^40: FP16 gradients overflow at first and the scale backs off under
    # the policy's hysteresis (2 overflows for the first backoff).
    assert scaler.get_scale() < 2.0**40 and scaler.hysteresis_tracker < 2
    assert "skipped = scaler.last_step_skipped" in code
    assert namespace["skipped"] is scaler.last_step_skipped


def test_policy_scalers_say_which_step_they_skipped() -> None:
    from fpexplorer.training.scaler_rules import resolve_settings
    from fpexplorer.training.scalers import make_grad_scaler

    scaler = make_grad_scaler(resolve_settings("deepspeed", init_scale=8.0), "cpu")
    weight = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    seen = []
    for factor in (1.0, math.inf, 1.0):
        optimizer.zero_grad()
        scaler.scale(weight.sum() * factor).backward()
        scaler.step(optimizer)
        scaler.update()
        seen.append((scaler.last_step_skipped, scaler.get_scale()))
    # The overflow spent the hysteresis: skipped, yet the scale stayed at 8.
    assert seen == [(False, 8.0), (True, 8.0), (False, 8.0)]


# torch 2.13's own ShardedGradScaler.unscale_ warns from inside DTensor dispatch (its
# found-inf flag has shape (1,)); nothing the code view writes can avoid it.
@pytest.mark.filterwarnings("ignore:Found a non-scalar tensor with numel=1:UserWarning")
@pytest.mark.parametrize(
    ("parallel", "precision"), [("ddp", "fp16"), ("fsdp", "fp16"), ("fsdp", "bf16")]
)
def test_code_view_of_several_ranks_runs_as_one_rank_of_torchrun(
    parallel: str, precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    import torch.distributed as dist

    # What torchrun gives a rank, here a world of one (the code cannot tell the difference).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                            WORLD_SIZE="1", LOCAL_RANK="0").items():  # fmt: skip
        monkeypatch.setenv(name, value)
    config = TrainConfig(precision=precision, device="auto", lr=1e-2, nproc_per_node=2,
                         parallel=parallel)  # fmt: skip
    code = pytorch_code(config)
    assert code.startswith("# Several ranks: start this file with\n#   torchrun --nproc-per-node 2")
    try:
        namespace = _run_snippet(config)
        assert dist.is_initialized() and math.isfinite(float(namespace["loss"].detach()))
        model = namespace["model"]
        if parallel == "ddp":
            assert isinstance(model, nn.parallel.DistributedDataParallel)
        else:
            assert type(model[0].weight).__name__ == "DTensor"  # sharded by fully_shard
            if precision == "fp16":
                assert type(namespace["scaler"]).__name__ == "ShardedGradScaler"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("launch", [1, 2])
@pytest.mark.parametrize("precision", PRECISION_NAMES)
def test_the_code_says_what_the_user_fills_in_before_using_it(precision: str, launch: int) -> None:
    code = pytorch_code(TrainConfig(precision=precision, nproc_per_node=launch))
    lines = code.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("# Yours to define"))
    told = " ".join(lines[said : said + 2])
    for name in ("model", "loss_fn", "batches"):
        assert name in told
        uses = [i for i, line in enumerate(lines) if name in line and not line.startswith("#")]
        assert uses and min(uses) > said + 1, name
    if launch == 1:
        assert said == 0
        with pytest.raises(NameError, match="'model'"):  # pasted alone: the first it names
            exec(code, {})


@pytest.mark.parametrize("policy", ["deepspeed", "megatron"])
def test_the_scaler_comments_give_the_forms_figures_not_the_defaults(policy: str) -> None:
    config = TrainConfig(precision="fp16", scaler=policy, hysteresis=3, backoff_factor=0.25)
    code = pytorch_code(config)
    # Was: "# DeepSpeed's DynamicLossScaler: hysteresis 2, ..." above hysteresis=3, and
    # "halve the scale" above backoff_factor=0.25.
    assert "hysteresis=3," in code and "backoff_factor=0.25," in code
    (about,) = [line for line in code.splitlines() if "hysteresis 2" in line]
    assert "with this form's settings (its defaults: " in about
    assert "halve" not in code and "multiply the scale by 0.25 on inf/NaN" in code
    defaults = pytorch_code(TrainConfig(precision="fp16", scaler=policy))
    assert "its defaults" not in defaults and "halve the scale" in defaults
    namespace = _run_snippet(config)
    assert namespace["scaler"].get_scale() > 0
