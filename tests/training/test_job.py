"""The training job end to end: precision modes, the GradScaler rule, failures, signals."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from training_helpers import REPO, run_cli

from fpexplorer.errors import UsageError
from fpexplorer.training.config import PRECISION_NAMES, TASK_NAMES, TrainConfig
from fpexplorer.training.job import RunState, run_job
from fpexplorer.training.runlog import Run, load_run, parse_record


def job(tmp_path: Path, **options: object) -> tuple[Run, object]:
    out = tmp_path / "run.jsonl"
    # A test's later job replaces its earlier one's log (read already).
    config = TrainConfig(device="cpu", out=str(out), overwrite=True, **options)  # type: ignore[arg-type]
    result = run_job(config, stderr=io.StringIO(), handle_signals=False)
    return load_run(out), result


def replay_grad_scaler(run: Run) -> tuple[list[float], list[int]]:
    """torch.amp.GradScaler's update rule, replayed from the recorded skips and settings."""
    assert run.header is not None
    config = run.header.config
    scale, tracker = float(config["init_scale"]), 0
    scales, trackers = [], []
    for step in run.steps:
        scales.append(scale)
        if step.skipped:
            scale *= config["backoff_factor"]
            tracker = 0
        else:
            tracker += 1
            if tracker == config["growth_interval"]:
                scale *= config["growth_factor"]
                tracker = 0
        trackers.append(tracker)
    return scales, trackers


def test_loss_scale_follows_the_grad_scaler_rule(tmp_path: Path) -> None:
    # The overflow task overflows FP16 on rare outlier tokens; a short growth interval makes
    # the scale grow too, so both branches of the rule are exercised.
    run, _ = job(
        tmp_path, task="overflow", precision="fp16", steps=70, growth_interval=5,
        growth_factor=4.0, backoff_factor=0.25, init_scale=2.0**12, stats_every=0,
    )  # fmt: skip
    scales, trackers = replay_grad_scaler(run)
    assert [s.scale for s in run.steps] == scales
    assert [s.growth_tracker for s in run.steps] == trackers
    skipped = [s for s in run.steps if s.skipped]
    assert skipped, "the overflow task must overflow FP16"
    assert all(not math.isfinite(s.loss) or not math.isfinite(s.grad_norm) for s in skipped)
    assert max(scales) > 2.0**12  # it grew
    assert run.steps[skipped[0].step + 1].scale == skipped[0].scale * 0.25  # it backed off


def test_forced_overflow_backs_off_and_names_the_module(tmp_path: Path) -> None:
    task = tmp_path / "spike.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def make():\n"
        "    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
        "    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))\n"
        "    step = {'n': 0}\n"
        "    def loss_fn(out, target):\n"
        "        step['n'] += 1\n"
        "        # step 3: a loss spike whose scaled gradients overflow FP16\n"
        "        return out.float().square().mean() * (1e9 if step['n'] == 3 else 1.0)\n"
        "    return model, [(x, x)], loss_fn\n"
    )
    run, result = job(tmp_path, task=f"{task}:make", precision="fp16", steps=5)
    assert result.state is RunState.COMPLETED  # type: ignore[attr-defined]
    assert [s.skipped for s in run.steps] == [False, False, True, False, False]
    assert [s.scale for s in run.steps] == [65536.0] * 3 + [32768.0] * 2
    spike = run.steps[2]
    assert spike.first_nonfinite == "2"  # the last Linear: first in backward order
    assert spike.first_nonfinite_forward is None  # the forward pass was finite
    assert any(layer.nonfinite for layer in spike.layers)


@pytest.mark.parametrize("precision", PRECISION_NAMES)
def test_every_precision_mode_runs_and_records_everything(tmp_path: Path, precision: str) -> None:
    run, _ = job(tmp_path, task="mlp", precision=precision, steps=3)
    assert run.problems == () and run.status == "completed" and len(run.steps) == 3
    assert run.header is not None and run.header.precision == precision
    assert run.header.params == 4482 and run.header.device_type == "cpu"
    # The fp8 modes run BF16 autocast around their FP8 linears (the mlp's first and last
    # layers do not fit FP8 kernels: BF16); the emulated MX/NVFP4 linears, every layer of
    # the mlp, return their input's dtype (FP32 here).
    fp8 = dict.fromkeys(("fp8", "fp8-rowwise"), "bfloat16")
    blocks = dict.fromkeys(("mxfp8", "mxfp6", "mxfp4", "nvfp4"), "float32")
    expected_dtype = {"bf16": "bfloat16", "fp32": "float32", **fp8, **blocks}.get(
        precision, "float16"
    )
    for step in run.steps:
        assert step.act_hist is not None and step.act_hist.dtype == expected_dtype
        assert step.grad_hist is not None and step.grad_hist.total == 4482
        assert not step.format_shares  # shown nowhere, so the monitor does not compute it
        assert step.memory is not None and step.memory.activations
        assert [layer.name for layer in step.layers] == list(run.header.layers)
    kinds = {s.lost_updates.kind for s in run.steps if s.lost_updates}
    assert kinds == {"actual" if precision == "pure-fp16" else "fp16_would_lose"}
    memory = run.steps[-1].memory
    assert memory is not None
    assert set(memory.params) == {"float16" if precision == "pure-fp16" else "float32"}
    scale = {"fp16": 65536.0, "fp16-static": 1024.0, "pure-fp16": 1024.0}.get(precision, 1.0)
    assert run.steps[0].scale == scale


def test_stats_every(tmp_path: Path) -> None:
    run, _ = job(tmp_path, task="mlp", precision="bf16", steps=5, stats_every=2)
    assert [s.has_stats for s in run.steps] == [True, False, True, False, True]
    off, _ = job(tmp_path, task="mlp", precision="bf16", steps=2, stats_every=0)
    assert not any(s.has_stats for s in off.steps)


@pytest.mark.slow  # real training jobs: about half a second
def test_pure_fp16_loses_updates_that_fp32_master_weights_keep(tmp_path: Path) -> None:
    pure, _ = job(tmp_path, task="regression", precision="pure-fp16", steps=400, stats_every=5)
    master, _ = job(tmp_path, task="regression", precision="fp32", steps=400, stats_every=5)
    lost = [s.lost_updates.share for s in pure.steps if s.lost_updates]
    would = [s.lost_updates.share for s in master.steps if s.lost_updates]
    assert min(lost) > 0.5 and max(would) > 0.5  # FP16 weights lose most of these updates

    def final(run: Run) -> float:
        return sum(s.loss for s in run.steps[-30:]) / 30

    assert final(pure) > 4 * final(master)  # ... and it shows in the loss


@pytest.mark.slow
def test_underflow_task_reproduces_the_paper(tmp_path: Path) -> None:
    runs = {}
    for precision in ("fp32", "fp16-noscale", "fp16"):
        (tmp_path / precision).mkdir()
        runs[precision], _ = job(tmp_path / precision, task="underflow", precision=precision,
                                 steps=200, stats_every=10)  # fmt: skip

    def zero_share(run: Run) -> float:
        hists = [s.act_hist for s in run.steps if s.act_hist is not None]
        return sum(h.zero for h in hists) / sum(h.total for h in hists)

    def final(run: Run) -> float:
        return sum(s.loss for s in run.steps[-20:]) / 20

    assert zero_share(runs["fp32"]) == 0.0
    assert zero_share(runs["fp16-noscale"]) > 0.5  # FP16 flushes most activation gradients
    assert zero_share(runs["fp16"]) < 0.1  # loss scaling shifts them back into range
    assert final(runs["fp16-noscale"]) > 2 * final(runs["fp32"])
    assert final(runs["fp16"]) == pytest.approx(final(runs["fp32"]), rel=0.05)


def test_nan_loss_is_recorded_not_fatal(tmp_path: Path) -> None:
    task = tmp_path / "nan_task.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def make(seed, batch_size):\n"
        "    x = torch.ones(4, 2)\n"
        "    calls = []\n"
        "    def loss_fn(out, target):\n"
        "        calls.append(1)\n"
        "        return out.sum() * (float('nan') if len(calls) == 2 else 1.0)\n"
        "    return nn.Linear(2, 1), [(x, x)], loss_fn\n"
    )
    run, result = job(tmp_path, task=f"{task}:make", precision="fp32", steps=3)
    assert result.state is RunState.COMPLETED  # type: ignore[attr-defined]
    assert [math.isnan(s.loss) for s in run.steps] == [False, True, True]  # NaN weights stay
    text = (tmp_path / "run.jsonl").read_text()
    assert '"loss":"NaN"' in text and "NaN," not in text  # strict JSON


@pytest.mark.slow  # a real training job in a child process: seconds
def test_failing_user_task(tmp_path: Path) -> None:
    task = tmp_path / "broken.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def make():\n"
        "    def batches():\n"
        "        yield torch.ones(2, 2), torch.ones(2, 1)\n"
        "        raise RuntimeError('the data loader\\nbroke')\n"
        "    return nn.Linear(2, 1), batches(), nn.functional.mse_loss\n"
        "def not_a_task():\n"
        "    return 42\n"
    )
    result = run_cli("train", "--task", f"{task}:make", "--steps", "5", "--device", "cpu",
                     "--out", str(tmp_path / "fail.jsonl"))  # fmt: skip
    assert result.returncode == 1
    # The one line last; above it the traceback, which says where in the task it broke.
    *trace, last = result.stderr.strip().splitlines()
    assert last == "fpexplorer train: error: the task failed: RuntimeError: the data loader broke"
    assert trace[0] == "Traceback (most recent call last):"
    assert any("broken.py" in line and "line 6" in line for line in trace)
    assert trace[-2:] == ["RuntimeError: the data loader", "broke"]
    run = load_run(tmp_path / "fail.jsonl")
    assert run.status == "failed" and len(run.steps) == 1 and run.problems == ()
    assert run.end is not None and run.end.error == "RuntimeError: the data loader broke"
    # The end record keeps the traceback too (the window shows what the terminal did).
    assert run.end.traceback is not None and "\n".join(trace) in run.end.traceback
    # A factory that returns the wrong thing fails the same way, with a header still first.
    bad = run_cli("train", "--task", f"{task}:not_a_task", "--device", "cpu",
                  "--out", str(tmp_path / "bad.jsonl"))  # fmt: skip
    assert bad.returncode == 1 and "must return (model, batches, loss_fn)" in bad.stderr
    bad_run = load_run(tmp_path / "bad.jsonl")
    assert bad_run.header is not None and bad_run.status == "failed"
    # fpexplorer's own check of the task, in one line: no traceback of fpexplorer's frames.
    assert bad.stderr.strip().splitlines() == [
        f"fpexplorer train: error: the task failed: TaskError: {task}:not_a_task must return "
        "(model, batches, loss_fn)"
    ]
    assert bad_run.end is not None and bad_run.end.traceback is None


def test_a_user_task_that_calls_sys_exit_fails_with_an_end_record(tmp_path: Path) -> None:
    task = tmp_path / "exits.py"
    task.write_text("import sys\ndef make():\n    sys.exit(3)\n")
    run, result = job(tmp_path, task=f"{task}:make", steps=2)
    assert result.state is RunState.FAILED  # type: ignore[attr-defined]
    assert run.status == "failed" and run.problems == ()
    assert run.end is not None and run.end.error == "SystemExit: 3"
    # The header of a run whose task never got built still has every schema field.
    assert run.header is not None
    header_line = json.loads(run.path.read_text().splitlines()[0])
    for key in ("schema", "fpexplorer", "torch", "started", "config", "device", "model"):
        assert key in header_line, key


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "steps must be"),
        (["--precision", "fp9"], "invalid choice"),  # fp8 is a mode now
        (["--task", "nope"], "unknown task 'nope'"),
        (["--task", "missing.py:make"], "task file not found"),
        # Was a failed run, fpexplorer's traceback and exit 1.
        (["--task", "examples/user_task.py:nope"], "user_task.py has no nope (it defines"),
        # Named at its default for a mode that does not use it: ran without a word.
        (["--precision", "mxfp4", "--hadamard"], "--hadamard is not used with these settings"),
        (["--backoff-factor", "2"], "backoff factor"),
        (["--lr", "abc"], "invalid float value"),
        # These two reach torch in the child (a second each): slow.
        pytest.param(["--device", "cuda:7"], "cuda", marks=pytest.mark.slow),
        pytest.param(
            ["--out", "/nonexistent-folder/run.jsonl"], "cannot write", marks=pytest.mark.slow
        ),
        (["--seed", str(2**64)], "the seed must be"),
        (["--precision", "fp16-static", "--loss-scale", "1e39"], "is inf in float32"),
        (["--init-scale", "1e39"], "is inf in float32"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], message: str) -> None:
    if args[:2] == ["--device", "cuda:7"]:
        import torch

        assert torch.cuda.device_count() < 8  # there is no 8th GPU on any machine we test on
    result = run_cli("train", "--steps", "1", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message.lower() in lines[0].lower()
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # a real training job in a child process: seconds
def test_stream_writes_the_same_records_to_stdout(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    result = run_cli("train", "--task", "mlp", "--precision", "bf16", "--steps", "3",
                     "--device", "cpu", "--stream", "--out", str(out))  # fmt: skip
    assert result.returncode == 0
    assert result.stdout == out.read_text()
    kinds = [type(parse_record(line)).__name__ for line in result.stdout.splitlines()]
    assert kinds == ["HeaderRecord", "StepRecord", "StepRecord", "StepRecord", "EndRecord"]
    assert "run log:" in result.stderr and "\r" not in result.stderr  # no bar when not a tty


def _start_long_job(out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "train", "--task", "mlp", "--precision", "fp32",
         "--steps", "100000", "--device", "cpu", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def _wait_for_steps(out: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_text().count('"type":"step"') >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"the job did not write {count} steps")


def test_keyboard_interrupt_in_a_step_ends_the_log_as_stopped(tmp_path: Path) -> None:
    task = tmp_path / "interrupted.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "calls = 0\n"
        "def make():\n"
        "    def loss_fn(output, target):\n"
        "        global calls\n"
        "        calls += 1\n"
        "        if calls == 3:\n"
        "            raise KeyboardInterrupt\n"
        "        return nn.functional.mse_loss(output, target)\n"
        "    return nn.Linear(3, 3), [(torch.ones(4, 3), torch.zeros(4, 3))], loss_fn\n"
    )
    run, result = job(tmp_path, task=f"{task}:make", steps=10)
    assert result.state is RunState.STOPPED  # type: ignore[attr-defined]
    assert run.status == "stopped" and len(run.steps) == 2 and run.problems == ()


def test_default_run_file_names_never_overwrite(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("fpexplorer.training.job.default_out_path",
                        lambda config: Path("run-same-second.jsonl"))  # fmt: skip
    config = TrainConfig(task="regression", device="cpu", steps=1, stats_every=0)
    first = run_job(config, stderr=io.StringIO(), handle_signals=False)
    second = run_job(config.replace(seed=1), stderr=io.StringIO(), handle_signals=False)
    assert first.path == Path("run-same-second.jsonl")
    assert second.path == Path("run-same-second-2.jsonl")
    assert load_run(first.path).header.config["seed"] == 0  # type: ignore[union-attr]
    assert load_run(second.path).header.config["seed"] == 1  # type: ignore[union-attr]


def test_prints_of_a_user_task_stay_out_of_the_record_stream(tmp_path: Path) -> None:
    task = tmp_path / "chatty.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def make():\n"
        "    print('loading', end='')\n"
        "    def loss_fn(output, target):\n"
        "        print('step!', end='')\n"
        "        return nn.functional.mse_loss(output, target)\n"
        "    return nn.Linear(3, 3), [(torch.ones(4, 3), torch.zeros(4, 3))], loss_fn\n"
    )
    stdout, stderr = io.StringIO(), io.StringIO()
    config = TrainConfig(task=f"{task}:make", device="cpu", steps=2, stream=True,
                         out=str(tmp_path / "chatty.jsonl"))  # fmt: skip
    result = run_job(config, stdout=stdout, stderr=stderr, handle_signals=False)
    assert result.state is RunState.COMPLETED
    kinds = [type(parse_record(line)).kind for line in stdout.getvalue().splitlines()]
    assert kinds == ["header", "step", "step", "end"]
    assert "loading" in stderr.getvalue() and "step!" in stderr.getvalue()


@pytest.mark.slow  # a real training job in a child process: seconds
def test_sigkill_leaves_a_readable_log(tmp_path: Path) -> None:
    out = tmp_path / "killed.jsonl"
    process = _start_long_job(out)
    try:
        _wait_for_steps(out, 5, process)
    finally:
        process.kill()
        process.communicate(timeout=30)
    run = load_run(out)
    assert run.header is not None and run.end is None and run.status == "incomplete"
    assert len(run.steps) >= 5
    assert [s.step for s in run.steps] == list(range(len(run.steps)))
    # At most the line being written when the job died is lost.
    assert run.problems in ((), (f"line {len(run.steps) + 2}: torn last line ignored",))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # a real training job in a child process: seconds
def test_signal_stops_after_the_current_step(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "stopped.jsonl"
    process = _start_long_job(out)
    try:
        _wait_for_steps(out, 3, process)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    run = load_run(out)
    assert run.problems == () and run.status == "stopped"
    assert run.end is not None and run.end.steps == len(run.steps) >= 3
    assert "stopped after" in stderr and "Traceback" not in stderr


@pytest.mark.slow  # a real training job in a child process: seconds
def test_examples_run(tmp_path: Path) -> None:
    loop = subprocess.run(
        [sys.executable, str(REPO / "examples" / "monitor_loop.py"), "--steps", "5",
         "--out", str(tmp_path / "loop.jsonl")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr
    loop_run = load_run(tmp_path / "loop.jsonl")
    assert loop_run.problems == () and loop_run.status == "completed" and len(loop_run.steps) == 5
    assert loop_run.header is not None and loop_run.header.precision == "fp16"
    task = run_cli("train", "--task", "examples/user_task.py:make_task", "--steps", "5",
                   "--device", "cpu", "--out", str(tmp_path / "task.jsonl"))  # fmt: skip
    assert task.returncode == 0, task.stderr
    assert load_run(tmp_path / "task.jsonl").status == "completed"


@pytest.mark.slow  # a training job and child processes: about half a second
def test_runs_command(tmp_path: Path) -> None:
    job(tmp_path, task="mlp", precision="fp16", steps=3)
    path = str(tmp_path / "run.jsonl")
    summary = run_cli("runs", "summarize", path)
    assert summary.returncode == 0 and "precision fp16" in summary.stdout
    as_json = run_cli("runs", "summarize", "--json", path)
    assert json.loads(as_json.stdout)["steps"] == 3
    table = run_cli("runs", "compare", path, path)
    assert table.returncode == 0 and table.stdout.count("| fp16") == 2
    assert run_cli("runs", "check", path).returncode == 0
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(Path(path).read_text().replace('"type":"step"', '"type":"step",}', 1))
    check = run_cli("runs", "check", str(damaged))
    assert check.returncode == 1 and "line 2" in check.stdout
    missing = run_cli("runs", "summarize", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


# ----- the job's robustness -------------------------------------------------------------


CHATTY_TASK = """
import os, subprocess, sys
import torch
from torch import nn

def make():
    def loss_fn(output, target):
        # Everything a user's code may do with "standard output":
        print("print without a newline", end="")
        os.write(1, b"os.write(1) bytes")
        sys.__stdout__.write("sys.__stdout__ text")
        sys.__stdout__.flush()
        subprocess.run([sys.executable, "-c", "print('a subprocess', end='')"], check=True)
        return nn.functional.mse_loss(output, target)
    batch = (torch.ones(4, 3), torch.zeros(4, 3))
    return nn.Linear(3, 3), iter([batch] * 100), loss_fn
"""


@pytest.mark.slow  # a child process that starts further children: seconds
def test_stream_is_a_channel_the_tasks_output_cannot_reach(tmp_path: Path) -> None:
    """--stream: the job's stdout carries records only, whatever the task writes to fd 1."""
    from fpexplorer.training.runlog import RecordStream

    task = tmp_path / "chatty.py"
    task.write_text(CHATTY_TASK)
    out = tmp_path / "chatty.jsonl"
    result = run_cli("train", "--task", f"{task}:make", "--steps", "9", "--device", "cpu",
                     "--stream", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == out.read_text()  # nothing but the records
    stream = RecordStream()
    records = stream.feed(result.stdout.encode()) + stream.finish()
    assert stream.problems == []
    assert [type(r).kind for r in records] == ["header", *["step"] * 9, "end"]
    for text in ("print without a newline", "os.write(1) bytes", "sys.__stdout__ text",
                 "a subprocess"):  # fmt: skip
        assert result.stderr.count(text) == 9, text


@pytest.mark.slow  # a child process: a second
def test_a_batch_size_above_the_dataset_is_a_usage_error(tmp_path: Path) -> None:
    """A setting the task cannot take is the user's to change: exit 2 and one line, as for
    any other usage error, before any data is made (it exited 1, "the task failed:
    TaskSettingsError: ...", once the task had built its dataset)."""
    out = tmp_path / "big.jsonl"
    result = run_cli("train", "--task", "mlp", "--batch-size", "100000", "--steps", "3",
                     "--device", "cpu", "--out", str(out), timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "fpexplorer train: error: the batch size 100000 is larger than the mlp task's dataset"
        " (2048 samples)"
    ]  # one line: a setting, not a bug, so no traceback
    assert not out.exists()


def test_every_task_with_a_dataset_refuses_a_larger_batch_and_takes_its_size() -> None:
    """TASK_SAMPLES (what the form and the CLI check) is each built-in task's dataset: a
    batch of its size is drawn, one more is refused by the task itself as well. The
    transformer samples windows of its text with replacement: any batch size runs."""
    import torch

    from fpexplorer.training.config import TASK_SAMPLES
    from fpexplorer.training.tasks import TaskSettingsError, make_task

    assert set(TASK_SAMPLES) == set(TASK_NAMES) - {"transformer"}
    for task, samples in TASK_SAMPLES.items():
        problems = TrainConfig(task=task, batch_size=samples + 1).validate()
        assert problems == {
            "batch_size": f"the batch size {samples + 1} is larger than the {task} task's "
            f"dataset ({samples} samples)"
        }
        assert TrainConfig(task=task, batch_size=samples).validate() == {}
        inputs, _target = next(make_task(task, 0, samples, torch.device("cpu"), None).batches)
        assert inputs.shape[0] == samples
        with pytest.raises(TaskSettingsError):
            make_task(task, 0, samples + 1, torch.device("cpu"), None)
    assert TrainConfig(task="transformer", batch_size=10**6).validate() == {}


BARE_LINEAR_TASK = """
import torch
from torch import nn

def make():
    batch = (torch.ones(4, 32), torch.zeros(4, 32))
    return nn.Linear(32, 32), iter([batch] * 10), nn.functional.mse_loss
"""


def test_a_setting_the_task_refuses_once_built_is_a_usage_error_too(tmp_path: Path) -> None:
    """What only the built task can tell (a recipe that cannot quantize a bare nn.Linear):
    `fpexplorer train` exits 2 with the task's one line; the run log says why."""
    from fpexplorer.training.job import run_job_cli

    task = tmp_path / "bare.py"
    task.write_text(BARE_LINEAR_TASK)
    out = tmp_path / "bare.jsonl"
    config = TrainConfig(task=f"{task}:make", precision="mxfp8", steps=2, device="cpu",
                         out=str(out))  # fmt: skip
    with pytest.raises(UsageError) as raised:
        run_job_cli(config)
    said = "--precision mxfp8: the model is itself one nn.Linear: wrap it in a module to swap it"
    assert str(raised.value) == said
    run = load_run(out)
    assert run.status == "failed" and run.end is not None
    assert run.end.error == f"TaskSettingsError: {said}" and run.steps == ()


def test_an_empty_batch_source_is_a_failure_not_a_completed_run(tmp_path: Path) -> None:
    task = tmp_path / "empty.py"
    task.write_text(
        "from torch import nn\n"
        "def make():\n"
        "    return nn.Linear(3, 3), iter([]), nn.functional.mse_loss\n"
    )
    run, result = job(tmp_path, task=f"{task}:make", steps=5)
    assert result.state is RunState.FAILED  # type: ignore[attr-defined]
    assert run.status == "failed" and run.end is not None
    assert (
        run.end.error
        == "EmptyBatchesError: the task's batches gave nothing: no step could be taken"
    )
    assert run.end.traceback is None  # our own message: no traceback to show


@pytest.mark.slow  # child processes that import torch: seconds
def test_an_unwritable_run_log_is_one_line_not_a_traceback() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full exists on Linux only")
    result = run_cli("train", "--task", "regression", "--steps", "3", "--device", "cpu",
                     "--out", "/dev/full")  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "fpexplorer train: error: cannot write the run log /dev/full: No space left on device"
        " (training went on: 3 steps, log incomplete)"
    ]


STUCK_TASK = """
import torch
from torch import nn
calls = 0

def make():
    def loss_fn(output, target):
        global calls
        calls += 1
        if calls == 3:
            print("stuck", flush=True)
            while True:  # a step stuck in Python
                try:
                    while True:
                        pass
                except KeyboardInterrupt:
                    if {swallow}:
                        continue
                    raise
        return nn.functional.mse_loss(output, target)
    batch = (torch.ones(4, 3), torch.zeros(4, 3))
    return nn.Linear(3, 3), iter([batch] * 100), loss_fn
"""


def _start_stuck_job(tmp_path: Path, swallow: bool) -> tuple[subprocess.Popen[str], Path]:
    task = tmp_path / "stuck.py"
    task.write_text(STUCK_TASK.format(swallow=swallow))
    out = tmp_path / "stuck.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "train", "--task", f"{task}:make",
         "--steps", "50", "--device", "cpu", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "stuck"
    return process, out


@pytest.mark.slow  # child processes: seconds
def test_a_second_signal_ends_a_step_stuck_in_python(tmp_path: Path) -> None:
    process, out = _start_stuck_job(tmp_path, swallow=False)
    try:
        process.send_signal(signal.SIGTERM)  # the first asks to stop after the step...
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)  # ...which never ends
        process.send_signal(signal.SIGTERM)  # the second ends it now
        process.wait(timeout=30)
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert process.returncode == 0
    run = load_run(out)
    assert run.status == "stopped" and len(run.steps) == 2 and run.problems == ()


@pytest.mark.slow  # child processes: seconds
def test_a_third_signal_kills_a_job_that_swallows_the_second(tmp_path: Path) -> None:
    process, out = _start_stuck_job(tmp_path, swallow=True)
    try:
        for _ in range(2):
            process.send_signal(signal.SIGINT)
            time.sleep(0.5)
        assert process.poll() is None  # the task swallowed the KeyboardInterrupt
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT
    assert load_run(out).status == "incomplete"


def test_a_second_job_on_the_same_run_file_is_refused(tmp_path: Path) -> None:
    """Two writers on one file would interleave their lines: the second is refused."""
    from fpexplorer.training.job import JobSetupError
    from fpexplorer.training.runlog import RunWriter

    out = tmp_path / "shared.jsonl"
    # --overwrite: the file the other writer holds exists, and the lock must refuse anyway.
    config = TrainConfig(task="regression", device="cpu", steps=1, out=str(out), overwrite=True)
    with RunWriter(out):
        with pytest.raises(JobSetupError, match="being written by another job"):
            run_job(config, stderr=io.StringIO(), handle_signals=False)
    assert run_job(config, stderr=io.StringIO(), handle_signals=False).state is RunState.COMPLETED


@pytest.mark.slow  # a real training job in a child process: seconds
def test_the_tasks_own_warnings_still_reach_stderr(tmp_path: Path) -> None:
    """Only the monitor's run-log warning is the job's to report; a task's pass through."""
    task = tmp_path / "warns.py"
    task.write_text(
        "import warnings\n"
        "import torch\n"
        "from torch import nn\n"
        "def make():\n"
        "    def loss_fn(output, target):\n"
        "        warnings.warn('the task says so', RuntimeWarning)\n"
        "        return nn.functional.mse_loss(output, target)\n"
        "    return nn.Linear(3, 3), iter([(torch.ones(4, 3), torch.zeros(4, 3))] * 3), loss_fn\n"
    )
    result = run_cli("train", "--task", f"{task}:make", "--steps", "3", "--device", "cpu",
                     "--out", str(tmp_path / "warns.jsonl"))  # fmt: skip
    assert result.returncode == 0
    assert "RuntimeWarning: the task says so" in result.stderr


class _Writes(io.StringIO):
    """A stderr that keeps each write() call apart."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_the_jobs_lines_are_each_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks of a launch share one stderr: a line written as text and then its newline
    was glued to another rank's ("…(emulated)fpexplorer train: …", seen with 2 ranks)."""
    from fpexplorer.training.job import run_job_cli

    stderr = _Writes()
    monkeypatch.setattr(sys, "stderr", stderr)
    config = TrainConfig(task="mlp", precision="nvfp4", device="cpu", steps=1, stats_every=0,
                         out=str(tmp_path / "run.jsonl"))  # fmt: skip
    assert run_job_cli(config) == 0
    lines = [call for call in stderr.calls if call.startswith("fpexplorer train:")]
    assert any("linear layers in nvfp4" in line for line in lines)
    assert any("completed after 1 step;" in line for line in lines)  # was "1 steps"
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines), lines


def test_a_user_factorys_own_batch_size_default_applies_without_batch_size(
    tmp_path: Path,
) -> None:
    """`def make(batch_size=8)` was called with batch_size=None when --batch-size was left
    out (the job's "task default"), and failed inside the user's code."""
    import torch

    from fpexplorer.training.tasks import make_user_task

    task = tmp_path / "task.py"
    task.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def task(size):\n"
        "    batches = [(torch.ones(size, 4), torch.ones(size, 1))]\n"
        "    return nn.Linear(4, 1), batches, nn.functional.mse_loss\n"
        "def with_default(seed=0, batch_size=8):\n"
        "    return task(batch_size)\n"
        "def required(batch_size):\n"
        "    return task(2)\n"
        "def seen(**options):\n"
        "    return task(options['batch_size'] or 3)\n"
    )
    cpu = torch.device("cpu")
    default = make_user_task(f"{task}:with_default", 0, None, cpu, None)
    assert next(iter(default.batches))[0].shape == (8, 4)
    given = make_user_task(f"{task}:with_default", 0, 2, cpu, None)
    assert next(iter(given.batches))[0].shape == (2, 4)
    make_user_task(f"{task}:required", 0, None, cpu, None)  # None: the factory's to choose
    assert next(iter(make_user_task(f"{task}:seen", 0, None, cpu, None).batches))[0].shape == (3, 4)


@pytest.mark.slow  # a job, then `fpexplorer train` in a child process: seconds
def test_an_existing_run_log_is_refused_not_overwritten(tmp_path: Path) -> None:
    """Re-running a command with the same --out lost the finished run without a word."""
    out = tmp_path / "finished.jsonl"
    config = TrainConfig(task="regression", device="cpu", steps=2, stats_every=0, out=str(out))
    run_job(config, stderr=io.StringIO(), handle_signals=False)
    finished = out.read_bytes()
    result = run_cli("train", "--task", "regression", "--device", "cpu", "--steps", "1",
                     "--out", str(out))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"fpexplorer train: error: {out} exists (a run log of 2 steps, completed); "
        "give another --out, or --overwrite to replace it"
    ]
    assert out.read_bytes() == finished
    replaced = run_job(config.replace(steps=1, overwrite=True), stderr=io.StringIO(),
                       handle_signals=False)  # fmt: skip
    assert replaced.state is RunState.COMPLETED and len(load_run(out).steps) == 1


def test_an_existing_file_that_is_no_run_log_is_refused_too(tmp_path: Path) -> None:
    from fpexplorer.training.job import JobSetupError

    out = tmp_path / "notes.txt"
    out.write_text("my notes\n")
    config = TrainConfig(task="regression", device="cpu", steps=1, out=str(out))
    with pytest.raises(JobSetupError, match=r"notes.txt exists \(not a run log"):
        run_job(config, stderr=io.StringIO(), handle_signals=False)
    assert out.read_text() == "my notes\n"


def test_a_launch_refuses_an_existing_rank_log_beside_its_out(tmp_path: Path) -> None:
    from fpexplorer.training.job import existing_out_problem

    out = tmp_path / "run.jsonl"
    config = TrainConfig(task="regression", device="cpu", out=str(out), nproc_per_node=2)
    assert existing_out_problem(config) is None
    (tmp_path / "run.rank-1.jsonl").write_text("")
    problem = existing_out_problem(config)
    assert problem is not None and problem.startswith(f"{tmp_path / 'run.rank-1.jsonl'} exists")
    assert existing_out_problem(config.replace(overwrite=True)) is None
    with pytest.raises(UsageError, match=r"run\.rank-1\.jsonl exists"):
        from fpexplorer.training.job import run_job_cli

        run_job_cli(config)


def test_a_run_directory_that_cannot_be_used_is_said_not_left_to_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """FPEXPLORER_RUN_DIR naming a file: the run went to a temporary folder, and the only
    sign of it was the path printed at the end."""
    from fpexplorer.paths import run_directory
    from fpexplorer.training.job import run_job_cli

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("FPEXPLORER_RUN_DIR", str(blocked))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the fallback folder, tempfile's
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = run_directory()
    assert folder.problem is not None and str(blocked) in folder.problem
    assert run_job_cli(TrainConfig(steps=1, precision="fp32")) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"fpexplorer train: {folder.problem}"
    assert lines[-1].startswith("fpexplorer train: completed after 1 step; run log: ")
    assert str(folder.path) in lines[-1]
