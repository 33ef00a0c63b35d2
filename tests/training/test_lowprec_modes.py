"""The low-precision modes end to end: each runs a few steps through the job on a CPU, says
which layers it quantized, and writes QuantTensorStats that read back; bad combinations of
options are one-line usage errors."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
import torchao.float8  # noqa: F401  (its ~3 s import paid at collection, not by one test)
from training_helpers import run_cli

from fpexplorer.training.config import TrainConfig
from fpexplorer.training.job import JobSetupError, RunState, run_job
from fpexplorer.training.precision import PRECISION_MODES
from fpexplorer.training.records import QUANT_ROLES
from fpexplorer.training.runlog import Run, load_run

QUANTIZED_MODES = [mode.name for mode in PRECISION_MODES if mode.quantized]
# The transformer task's linear layers, in model order (the head's width is padded to a
# multiple of 16, so that every one of them fits FP8 kernels).
TRANSFORMER_LINEARS = [
    f"blocks.{block}.{name}"
    for block in (0, 1)
    for name in ("attention.qkv", "attention.proj", "up", "down")
] + ["head"]


def _job(tmp_path: Path, **options: Any) -> tuple[Run, str]:
    out = tmp_path / "run.jsonl"
    stderr = io.StringIO()
    # A test's later job replaces its earlier one's log (read already).
    config = TrainConfig(device="cpu", out=str(out), overwrite=True, **options)
    result = run_job(config, stderr=stderr, handle_signals=False)
    assert result.state is RunState.COMPLETED, result.error
    return load_run(out), stderr.getvalue()


def test_the_new_modes_are_quantized_ones() -> None:
    assert set(QUANTIZED_MODES) == {"fp8", "fp8-rowwise", "mxfp8", "mxfp6", "mxfp4", "nvfp4"}
    for name in QUANTIZED_MODES:
        mode = next(m for m in PRECISION_MODES if m.name == name)
        # The recipes: BF16 autocast around the quantized linears, FP32 master weights,
        # no loss scaler.
        assert (mode.autocast_dtype, mode.params_dtype, mode.scaler) == (
            "bfloat16", "float32", "none",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("precision", "options"),
    [(name, {}) for name in QUANTIZED_MODES]
    + [
        ("fp8", {"fp8_scaling": "delayed", "amax_history": 4}),
        ("fp8", {"bf16_first_last": True}),
        ("mxfp4", {"bf16_first_last": True}),
        ("nvfp4", {"nvfp4_weight_blocks": "1d", "hadamard": False}),
    ],
)
def test_each_mode_trains_and_records_its_casts(
    tmp_path: Path, precision: str, options: dict[str, Any]
) -> None:
    run, stderr = _job(tmp_path, task="transformer", precision=precision, steps=3,
                       batch_size=4, stats_every=2, **options)  # fmt: skip
    assert run.problems == () and len(run.steps) == 3
    assert all(math.isfinite(step.loss) for step in run.steps)
    assert run.header is not None
    config = run.header.config
    keep = options.get("bf16_first_last", False)
    expected = TRANSFORMER_LINEARS[1:-1] if keep else TRANSFORMER_LINEARS
    assert config["quantized_layers"] == expected
    assert list(config["high_precision_layers"]) == (
        [TRANSFORMER_LINEARS[0], "head"] if keep else []
    )
    assert f"{len(expected)} linear layers in" in stderr
    if precision == "nvfp4":  # the header records NVIDIA's recipe as it ran
        recipe = (options.get("nvfp4_weight_blocks", "2d"), options.get("hadamard", True))
        assert (config["nvfp4_weight_blocks"], config["hadamard"]) == recipe
        assert ("16x16 weight tiles" in stderr) == (recipe[0] == "2d")
    statistics = [step for step in run.steps if step.stats is not None]
    assert [step.step for step in statistics] == [0, 2]
    for step in run.steps:
        quant = step.stats.quant if step.stats is not None else ()
        if step.stats is None:
            continue
        # Every quantized layer, every role, once; nothing for the layers kept in BF16.
        assert sorted((q.layer, q.role) for q in quant) == sorted(
            (layer, role) for layer in expected for role in QUANT_ROLES
        )
        for q in quant:
            assert q.amax > 0 and math.isfinite(q.amax)
            assert 0.0 <= q.saturated <= 1.0 and 0.0 <= q.flushed <= 1.0
            assert q.sqnr_db > (3.0 if "fp4" in precision else 10.0)
            mode = next(m for m in PRECISION_MODES if m.name == precision)
            if mode.recipe == "block":
                # Block scales, and NVFP4's per-tensor scale on top.
                assert q.format == mode.block_format and q.scale_hist is not None
                assert (q.scale is not None) == (precision == "nvfp4")
            elif precision == "fp8-rowwise":
                assert q.scale is None and q.scale_hist is not None
            else:
                assert q.scale is not None and q.scale > 0
                fmt = "float8_e5m2" if q.role == "grad_output" else "float8_e4m3fn"
                assert q.format == fmt
    if options.get("fp8_scaling") == "delayed":
        first = {(q.layer, q.role): q for q in statistics[0].stats.quant}  # type: ignore[union-attr]
        # Delayed scaling's first cast has no history: scale 1, as in Transformer Engine.
        assert {q.scale for q in first.values()} == {1.0}
        later = statistics[1].stats.quant  # type: ignore[union-attr]
        assert all(q.scale != 1.0 for q in later)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precision", "fp16", "--bf16-first-last"], "--bf16-first-last applies to"),
        (["--precision", "fp8-rowwise", "--fp8-scaling", "delayed"], "use it with --precision fp8"),
        (["--precision", "fp8", "--amax-history", "16"], "applies to --fp8-scaling delayed"),
        (["--precision", "fp8", "--fp8-scaling", "delayed", "--margin", "-1"], "margin must be"),
        (["--precision", "mxfp4", "--no-hadamard"], "--no-hadamard is not used with these"),
        (["--precision", "bf16", "--nvfp4-weight-blocks", "1d"], "an option of the nvfp4 mode"),
    ],
)
def test_bad_combinations_are_one_line_usage_errors(args: list[str], message: str) -> None:
    result = run_cli("train", "--steps", "1", "--device", "cpu", *args, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_without_torchao_the_fp8_modes_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from fpexplorer.training.lowprec.recipes import recipe_problem
    from fpexplorer.training.precision import precision_mode

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name)
    )
    fp8 = recipe_problem(precision_mode("fp8"), TrainConfig(precision="fp8"))
    assert fp8 == "--precision fp8 trains with torchao's float8 linears: pip install torchao"
    assert recipe_problem(precision_mode("fp8-rowwise"), TrainConfig(precision="fp8-rowwise"))
    # Delayed scaling and the block formats are fpexplorer's own: no torchao needed.
    delayed = TrainConfig(precision="fp8", fp8_scaling="delayed")
    assert recipe_problem(precision_mode("fp8"), delayed) is None
    assert recipe_problem(precision_mode("mxfp4"), TrainConfig(precision="mxfp4")) is None
    with pytest.raises(JobSetupError, match="pip install torchao"):
        run_job(TrainConfig(precision="fp8", device="cpu", steps=1), stderr=io.StringIO())


@pytest.mark.parametrize("precision", ["fp8", "mxfp8"])
def test_a_model_that_is_one_linear_layer_fails_in_one_line(tmp_path: Path, precision: str) -> None:
    task = tmp_path / "one_linear.py"
    task.write_text(
        "import torch\n"
        "def make():\n"
        "    x = torch.randn(8, 16)\n"
        "    return torch.nn.Linear(16, 16), [(x, x)], torch.nn.functional.mse_loss\n"
    )
    out = tmp_path / "run.jsonl"
    config = TrainConfig(task=f"{task}:make", precision=precision, device="cpu", steps=1,
                         out=str(out))  # fmt: skip
    result = run_job(config, stderr=io.StringIO(), handle_signals=False)
    assert result.state is RunState.FAILED and result.traceback is None
    assert result.error is not None and "wrap it in a module" in result.error
    assert load_run(out).status == "failed"


@pytest.mark.parametrize("precision", ["fp8", "mxfp8", "nvfp4"])
def test_the_regression_task_runs_the_quantized_modes(tmp_path: Path, precision: str) -> None:
    # Was: its model was one bare nn.Linear, so a built-in task failed every quantized mode
    # ("wrap it in a module"). Its 64->1 linear: no FP8 kernel takes it, the block formats do.
    run, stderr = _job(tmp_path, task="regression", precision=precision, steps=2, stats_every=1)
    assert run.header is not None and run.status == "completed"
    assert run.header.config["quantized_layers"] == ([] if precision == "fp8" else ["0"])
    quantized = "no linear layer in FP8" if precision == "fp8" else "1 linear layer in"
    assert quantized in stderr


@pytest.mark.slow  # a real training job in a child process: seconds
def test_an_fp8_run_says_nothing_about_torchao_start_up(tmp_path: Path) -> None:
    """torchao warns "Failed to load ..._C_mxfp8...so" for each CUDA-only extension a CPU
    cannot load, and torch's pytree logs a deprecation about torchao's registrations: noise
    a new user reads as errors. A fresh process (the import happens once per process)
    shows only the job's own lines."""
    import subprocess
    import sys

    out = tmp_path / "fp8.jsonl"
    finished = subprocess.run(
        [sys.executable, "-m", "fpexplorer", "train", "--task", "mlp", "--precision", "fp8",
         "--steps", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    lines = finished.stderr.splitlines()
    assert lines, "the job says which layers it quantized"
    assert all(line.startswith("fpexplorer train:") for line in lines), lines
