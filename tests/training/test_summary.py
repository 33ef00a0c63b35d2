"""`fpexplorer runs summarize` text for runs without steps or without a finite loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fpexplorer.training.runlog import RunWriter, load_run
from fpexplorer.training.summary import format_summary, format_table, summarize

HEADER = {
    "type": "header", "schema": 1, "config": {"task": "mlp", "precision": "fp16"},
    "device": {"type": "cpu", "name": "x"}, "model": {"params": 2, "layers": []},
}  # fmt: skip


def _summary_text(path: Path, records: list[dict[str, object]]) -> str:
    with RunWriter(path) as writer:
        for record in records:
            writer.write(record)
    return format_summary(summarize(load_run(path)))


def test_a_run_without_steps_says_so_instead_of_nan(tmp_path: Path) -> None:
    end = {"type": "end", "status": "failed", "error": "ValueError: bad", "steps": 0}
    text = _summary_text(tmp_path / "failed.jsonl", [HEADER, end])
    assert "status     failed after 0 steps: ValueError: bad" in text
    assert "loss       no steps recorded" in text
    assert "nan" not in text.lower()


def test_one_step_is_one_step_not_1_steps(tmp_path: Path) -> None:
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "skipped": False}
    end = {"type": "end", "status": "stopped", "steps": 1}
    text = _summary_text(tmp_path / "one.jsonl", [HEADER, step, end])
    assert "status     stopped after 1 step\n" in text  # said "after 1 steps"


def test_a_run_whose_losses_are_all_nan_says_none_finite(tmp_path: Path) -> None:
    steps = [
        {"type": "step", "step": i, "loss": float("nan"), "scale": 2.0**16 / 2**i,
         "skipped": True, "steps_per_s": 10.0}
        for i in range(3)
    ]  # fmt: skip
    text = _summary_text(tmp_path / "nan.jsonl", [HEADER, *steps])
    assert "loss       first nan   final none finite   min none finite   non-finite 3" in text
    assert "skipped steps 3" in text


def test_the_empty_file_gets_a_summary_with_its_problem(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    text = format_summary(summarize(load_run(path)))
    assert "loss       no steps recorded" in text and "problem    the file holds no records" in text
    assert "nan" not in text.lower()


def test_compare_row_of_a_run_without_steps_has_no_nan_scale(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    row = format_table([summarize(load_run(path))]).splitlines()[2]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[-2:] == ["-", "-"]  # loss scale and steps/s
    assert cells[4] == "-"  # final loss: none, not "nan" (which reads as a diverged run)


def test_a_damaged_histogram_dtype_is_reported_not_raised(tmp_path: Path) -> None:
    """A dtype that is not a name is damage: the step is reported and skipped, the summary
    of the rest is made (it used to reach a dtype counter and raise there)."""
    hist = {"lo": -3, "counts": [1, 1], "zero": 0, "inf": 0, "nan": 0}
    good = {"type": "step", "step": 0, "loss": 1.0, "stats": {"act_hist": {**hist,
            "dtype": "float16"}}}  # fmt: skip
    bad = {"type": "step", "step": 1, "loss": 1.0, "stats": {"act_hist": {**hist,
           "dtype": ["float16"]}}}  # fmt: skip
    path = tmp_path / "damaged.jsonl"
    header = {**HEADER, "schema": 2}
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, good, bad)))
    run = load_run(path)
    assert len(run.steps) == 1 and "expected a string" in run.problems[0]
    text = format_summary(summarize(run))
    assert "act grads  zero 0% (float16)" in text and "problem    line 3" in text


# ----- streaming: `fpexplorer runs` in constant memory ------------------------------------


def _synthetic_log(path: Path, steps: int, **options: object) -> Path:
    from fpexplorer.gui.training.synthetic import synthetic_records

    with RunWriter(path) as writer:
        for record in synthetic_records(steps, **options):  # type: ignore[arg-type]
            writer.write(record)
    return path


def _as_json(summary: object) -> str:
    import dataclasses

    from fpexplorer.training.runlog import encode_json_line

    return encode_json_line(dataclasses.asdict(summary))  # type: ignore[call-overload]


@pytest.mark.slow  # a 5000-step log read twice: about a second
def test_streamed_summary_equals_the_in_memory_one(tmp_path: Path) -> None:
    """Checkpoints halve many times over 5000 steps; the final loss (last 10%) read again
    from the last checkpoint before the tail is the same number, bit for bit."""
    from fpexplorer.training.summary import CHECKPOINTS, RunSummarizer, summarize_file

    path = _synthetic_log(tmp_path / "run.jsonl", 5000, stats_every=7, overflow_every=13)
    streamed = summarize_file(path)
    assert _as_json(streamed) == _as_json(summarize(load_run(path)))
    assert streamed.steps == 5000 and math.isfinite(streamed.final_loss)
    assert streamed.skipped_steps == 5000 // 13
    # The checkpoint list stayed bounded while covering the run.
    summarizer = RunSummarizer(path)
    from fpexplorer.training.runlog import RecordStream

    stream = RecordStream()
    for record, offset in zip(stream.feed(path.read_bytes()), stream.offsets, strict=True):
        summarizer.add(record, offset)
    assert len(summarizer.checkpoints) <= CHECKPOINTS and summarizer.stride >= 64
    start = summarizer.tail_start()
    assert start is not None and 4500 - summarizer.stride < start[0] <= 4500


@pytest.mark.slow  # child processes: a third of a second
def test_runs_check_exit_statuses_for_ok_damaged_and_killed_runs(tmp_path: Path) -> None:
    from training_helpers import run_cli

    ok = _synthetic_log(tmp_path / "ok.jsonl", 20)
    lines = ok.read_bytes().splitlines(keepends=True)
    killed = tmp_path / "killed.jsonl"
    killed.write_bytes(b"".join(lines[:-1]))  # no end record, no torn line: killed between
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join(lines[:5]) + b"garbage\n" + b"".join(lines[5:]))
    result = run_cli("runs", "check", str(ok))
    assert result.returncode == 0 and "20 steps, completed, ok" in result.stdout
    result = run_cli("runs", "check", str(ok), str(killed))
    assert result.returncode == 3, result.stdout
    assert "20 steps, incomplete, not ok: no end record" in result.stdout
    result = run_cli("runs", "check", str(killed), str(damaged))
    assert result.returncode == 1 and "1 problem(s)" in result.stdout
    summary = run_cli("runs", "summarize", str(killed))
    assert "status     incomplete after 20 steps (no end record" in summary.stdout


def test_runs_compare_names_each_runs_file_and_task(tmp_path: Path) -> None:
    from training_helpers import run_cli

    first = _synthetic_log(tmp_path / "first.jsonl", 10)
    second = _synthetic_log(tmp_path / "second.jsonl", 10, precision="bf16")
    result = run_cli("runs", "compare", str(first), str(second))
    assert result.returncode == 0
    header, _rule, *rows = result.stdout.splitlines()
    assert header.split("|")[1:4] == [" run          ", " task      ", " precision "]
    assert rows[0].startswith("| first.jsonl  | synthetic | fp16 ")
    assert rows[1].startswith("| second.jsonl | synthetic | bf16 ")


@pytest.mark.slow
def test_runs_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """Peak RSS of `runs summarize|check|compare` on a 40 MB log against a 4 MB one, each
    in a fresh process (a ratio measured in one run, not a timed figure). Reading whole
    logs cost ~9x the file size: 17 MiB -> ~370 MiB here."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_runs_memory import measure

    for verb, (small, large) in measure(tmp_path, 4.0, 10.0).items():
        assert large < 1.15 * small, (verb, small, large)


def test_runs_check_refuses_a_newer_schema_instead_of_reading_it_as_old(tmp_path: Path) -> None:
    from training_helpers import run_cli

    from fpexplorer.training.records import SCHEMA_VERSION

    path = tmp_path / "future.jsonl"
    header = {**HEADER, "schema": SCHEMA_VERSION + 1}
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0}
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, step)))
    result = run_cli("runs", "check", str(path))
    assert result.returncode == 1
    assert f"schema {SCHEMA_VERSION + 1} is newer than this fpexplorer reads" in result.stdout
    # Its steps are not summarized as if they were old: the file is named as unread.
    assert result.stdout.splitlines()[0].startswith(
        f"{path}: schema {SCHEMA_VERSION + 1} is newer than this fpexplorer reads "
        f"({SCHEMA_VERSION}): update fpexplorer to read this run, "
    )
    assert "1 step" not in result.stdout


def test_the_summary_names_the_most_saturated_and_flushed_quantized_tensor(
    tmp_path: Path,
) -> None:
    from fpexplorer.training.records import QuantTensorStats, StepRecord, StepStats
    from fpexplorer.training.summary import summarize_file

    def quant(layer: str, role: str, saturated: float, flushed: float) -> QuantTensorStats:
        fmt = "float8_e5m2" if role == "grad_output" else "float8_e4m3fn"
        return QuantTensorStats(layer=layer, role=role, format=fmt, amax=1.0, scale=448.0,
                                saturated=saturated, flushed=flushed)  # fmt: skip

    steps = [
        StepRecord(step=0, loss=1.0, scale=1.0, stats=StepStats(quant=(
            quant("up", "input", 0.0, 0.0), quant("down", "grad_output", 0.0, 0.0004),
        ))),
        StepRecord(step=1, loss=1.0, scale=1.0),
        StepRecord(step=2, loss=1.0, scale=1.0, stats=StepStats(quant=(
            quant("up", "input", 0.125, 0.0), quant("down", "grad_output", 0.0, 0.0004),
        ))),
    ]  # fmt: skip
    path = tmp_path / "fp8.jsonl"
    with RunWriter(path) as writer:
        writer.write({**HEADER, "config": {"task": "mlp", "precision": "fp8"}})
        for step in steps:
            writer.write(step)
    summary = summarize_file(path)
    assert summary == summarize(load_run(path))
    assert summary.worst_saturated is not None and summary.worst_flushed is not None
    assert (summary.worst_saturated.layer, summary.worst_saturated.step) == ("up", 2)
    assert (summary.worst_flushed.layer, summary.worst_flushed.step) == ("down", 0)
    text = format_summary(summary)
    assert "saturated  at most 12.5% of up input (float8_e4m3fn) at step 2" in text
    # A small share keeps its digits: 0.04%, not 0.0%.
    assert "flushed    at most ≈0.04% of down grad_output (float8_e5m2) at step 0" in text
    # A run without quantized layers has no such lines.
    assert "saturated" not in _summary_text(tmp_path / "fp16.jsonl", [HEADER])


def test_a_run_without_loss_scaling_says_so_and_scales_read_exactly(tmp_path: Path) -> None:
    """bf16 has no scaler: "scale 1 .. 1 (final 1)" read as a scale that never moved.
    Megatron starts at 2^32: "4.29497e+09" is not that number."""
    step = {"type": "step", "step": 0, "loss": 1.0, "scale": 1.0, "steps_per_s": 1.0}
    bf16 = {**HEADER, "config": {"task": "mlp", "precision": "bf16"}}
    text = _summary_text(tmp_path / "bf16.jsonl", [bf16, step])
    assert "scale      none (no loss scaling)   skipped steps 0" in text
    row = format_table([summarize(load_run(tmp_path / "bf16.jsonl"))]).splitlines()[2]
    assert [cell.strip() for cell in row.strip("|").split("|")][-2] == "none"

    scaled = [{**step, "scale": 2.0**32}, {**step, "step": 1, "scale": 2.0**31}]
    text = _summary_text(tmp_path / "fp16.jsonl", [HEADER, *scaled])
    assert "scale      2147483648 (2^31) .. 4294967296 (2^32) (final 2147483648 (2^31))" in text
    # A loop of the user's own: loss-scaled as soon as its scale is not 1.
    own = {**HEADER, "config": {"precision": "custom"}}
    assert "none (no loss scaling)" in _summary_text(tmp_path / "own1.jsonl", [own, step])
    text = _summary_text(tmp_path / "own2.jsonl", [own, {**step, "scale": 1024.0}])
    assert "scale      1024 .. 1024 (final 1024)" in text


def test_summarize_and_compare_name_the_nvfp4_recipe_a_run_used(tmp_path: Path) -> None:
    # Was "precision nvfp4" for every nvfp4 run, whichever parts of the recipe it ran.
    runs = {
        "recipe.jsonl": {"nvfp4_weight_blocks": "2d", "hadamard": True},
        "parts-off.jsonl": {"nvfp4_weight_blocks": "1d", "hadamard": False},
        "old.jsonl": {},  # logged before the options: 1-D blocks, no Hadamard
        "kept.jsonl": {"nvfp4_weight_blocks": "2d", "hadamard": False, "bf16_first_last": True},
    }
    summaries = []
    for name, options in runs.items():
        config = {"task": "mlp", "precision": "nvfp4", **options}
        _summary_text(tmp_path / name, [{**HEADER, "config": config}])
        summaries.append(summarize(load_run(tmp_path / name)))
    labels = [summary.precision_label for summary in summaries]
    assert labels == [
        "nvfp4",
        "nvfp4 (1-D weight blocks, no Hadamard)",
        "nvfp4 (1-D weight blocks, no Hadamard)",
        "nvfp4 (no Hadamard, BF16 first/last)",
    ]
    assert "precision nvfp4 (1-D weight blocks, no Hadamard)   device" in format_summary(
        summaries[1]
    )
    rows = format_table(summaries).splitlines()[2:]
    assert [row.split("|")[3].strip() for row in rows] == labels


def test_activations_not_measured_are_not_summarized_as_zero(tmp_path: Path) -> None:
    """With statistics off, a skipped step still records its parameter gradients (and their
    memory), but no activation gradient or saved activation was measured: the summary said
    "act grads  zero - (-)" and "activations 0 B"."""
    import torch
    from torch import nn

    from fpexplorer.training.monitor import AmpMonitor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    path = tmp_path / "run.jsonl"
    with AmpMonitor(model, optimizer, scaler, out=path, stats_every=0) as monitor:
        for index in range(3):
            loss = model(torch.randn(2, 4)).square().mean()
            optimizer.zero_grad()
            scaler.scale(loss * (math.inf if index == 1 else 1.0)).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)
    run = load_run(path)
    assert [step.stats is not None for step in run.steps] == [False, True, False]
    text = format_summary(summarize(run))
    assert "act grads  not recorded   param grads zero" in text
    memory = next(line for line in text.splitlines() if line.startswith("memory"))
    assert "params 196 B" in memory and "activations" not in memory


def test_a_bf16_loop_under_a_grad_scaler_is_summarized_as_loss_scaled(tmp_path: Path) -> None:
    """The monitor labels a user's loop by its autocast dtype ("bf16") even when an enabled
    GradScaler scales its loss: the summary said "scale none (no loss scaling)" at 65536."""
    bf16 = {**HEADER, "config": {"task": "user loop", "precision": "bf16"}}
    steps = [
        {"type": "step", "step": i, "loss": 1.0, "scale": 65536.0, "steps_per_s": 1.0}
        for i in range(2)
    ]
    text = _summary_text(tmp_path / "run.jsonl", [bf16, *steps])
    assert "scale      65536 (2^16) .. 65536 (2^16) (final 65536 (2^16))" in text
    row = format_table([summarize(load_run(tmp_path / "run.jsonl"))]).splitlines()[2]
    assert [cell.strip() for cell in row.strip("|").split("|")][-2] == "65536 (2^16)"


def test_the_lost_update_share_says_how_many_steps_it_is_the_mean_of(tmp_path: Path) -> None:
    """Skipped steps make no update and record no share: a run that skipped 2 of 3 steps
    read "FP16 weights would lose: 0.0% (mean per step)"."""
    lost = {"share": 0.0, "kind": "fp16_would_lose", "intended": 10}
    steps = [
        {"type": "step", "step": i, "loss": 1.0 if i == 0 else math.nan, "scale": 2.0**16,
         "skipped": i > 0, "steps_per_s": 1.0, **({"lost_updates": lost} if i == 0 else {})}
        for i in range(3)
    ]  # fmt: skip
    text = _summary_text(tmp_path / "run.jsonl", [HEADER, *steps])
    assert (
        "updates    FP16 weights would lose: 0% (mean of 1 statistics step with finite updates)"
        in text
    )


def test_the_lost_update_mean_leaves_out_steps_whose_gradients_were_not_finite(
    tmp_path: Path,
) -> None:
    """fp16-noscale on the overflow task: 286 of 300 steps had NaN gradients (not skipped:
    no scaler), and their shares went into the run's mean ("0.7% (mean of 300 ...)") while
    the panel says n/a on each of them: a share over inf/NaN updates means nothing."""

    def step(index: int, share: float, nan: int) -> dict[str, object]:
        hist = {"lo": -10, "counts": [10 - nan], "zero": 0, "inf": 0, "nan": nan}
        lost = {"share": share, "kind": "fp16_would_lose", "intended": 10}
        loss = 1.0 if not nan else math.nan
        return {"type": "step", "step": index, "loss": loss, "scale": 1.0, "skipped": False,
                "grad_hist": hist, "lost_updates": lost}  # fmt: skip

    records = [HEADER, step(0, 0.2, 0), step(1, 0.4, 0), step(2, 0.0, 3), step(3, 0.0, 10)]
    text = _summary_text(tmp_path / "run.jsonl", records)
    assert "FP16 weights would lose: ≈30% (mean of 2 statistics steps with finite updates)" in text


def test_a_killed_runs_torn_last_line_is_incomplete_not_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RunWriter writes each batch at once, so a job killed mid-write leaves whole records
    and one torn last line: `runs check` calls that incomplete (exit 3, as a log killed
    between writes), not damaged (exit 1, as it did), and says the line is ignored."""
    from fpexplorer.cli import main
    from fpexplorer.training.summary import summarize_file

    lines = _synthetic_log(tmp_path / "ok.jsonl", 20).read_bytes().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    summary = summarize_file(torn)
    assert summary.torn_last_line and not summary.complete
    assert summary.problems == () and summary.problem_count == 0
    assert summary.steps == 19  # the torn step is not read
    assert main(["runs", "check", str(torn)]) == 3
    out = capsys.readouterr().out
    assert "19 steps, incomplete, not ok: no end record: the job was killed while writing" in out
    assert "killed while writing its last line, which is ignored" in format_summary(summary)
    # Damage beside it is still damage (exit 1), and the count leaves the torn line out.
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(
        b"".join(lines[:3]) + b"garbage\n" + torn.read_bytes()[len(b"".join(lines[:3])) :]
    )
    assert main(["runs", "check", str(damaged)]) == 1
    out = capsys.readouterr().out
    assert "1 problem(s); no end record: the job was killed while writing" in out
    # After an end record, a torn line is not a kill: it stays a problem.
    appended = tmp_path / "appended.jsonl"
    appended.write_bytes(b"".join(lines) + lines[3][:20])
    summary = summarize_file(appended)
    assert summary.complete and not summary.torn_last_line
    assert summary.problems == (f"line {len(lines) + 1}: torn last line ignored",)


def test_a_torn_last_line_past_the_problem_limit_is_counted_exactly(tmp_path: Path) -> None:
    from fpexplorer.training.runlog import MAX_PROBLEMS
    from fpexplorer.training.summary import summarize_file

    lines = _synthetic_log(tmp_path / "ok.jsonl", 5).read_bytes().splitlines(keepends=True)
    garbage = b"garbage\n" * (MAX_PROBLEMS + 10)
    path = tmp_path / "many.jsonl"
    path.write_bytes(b"".join(lines[:3]) + garbage + lines[3][:15])
    summary = summarize_file(path)
    assert summary.torn_last_line and summary.problem_count == MAX_PROBLEMS + 10
    assert summary.problems[-1] == "... and 11 more problems"


def test_runs_of_the_same_file_name_are_told_apart_in_the_table(tmp_path: Path) -> None:
    """Two multi-rank runs both have a merged `run.jsonl`: their rows read the same name
    (and so did their ranks' logs); each is named by as many folders as tell it apart."""
    summaries = []
    for folder, loss in (("ddp-a", 1.0), ("ddp-b", 2.0), ("single", 3.0)):
        name = "other.jsonl" if folder == "single" else "run.jsonl"
        path = tmp_path / folder / name
        path.parent.mkdir()
        step = {"type": "step", "step": 0, "loss": loss, "scale": 1.0, "skipped": False}
        _summary_text(path, [HEADER, step])
        summaries.append(summarize(load_run(path)))
    rows = format_table(summaries).splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == [
        "ddp-a/run.jsonl", "ddp-b/run.jsonl", "other.jsonl",
    ]  # fmt: skip


def _hostile_files(folder: Path) -> dict[str, Path]:
    """Files that hold no run this fpexplorer can read, by what they are."""
    lines = _synthetic_log(folder / "ok.jsonl", 5).read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["schema"] = 99
    files = {
        "binary": bytes(range(256)).replace(b"\n", b"") * 8,  # no newline: one line
        "empty": b"",
        "other tool": b'{"event": "loss", "value": 1.5}\n{"event": "loss", "value": 1.2}\n',
        "newer schema": json.dumps(header).encode() + b"\n" + b"".join(lines[1:]),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = folder / f"{name.replace(' ', '_')}.jsonl"
        paths[name].write_bytes(data)
    return paths


NOT_READ = {
    "binary": "not a run log (no header, step or end record in it)",
    "empty": "empty file (a job that has not written its header yet?)",
    "other tool": "not a run log (no header, step or end record in it)",
    "newer schema": "schema 99 is newer than this fpexplorer reads (2): update fpexplorer to "
    "read this run",
}


def test_files_without_a_run_are_named_in_one_line_not_summarized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A binary file read as a job "killed while writing its last line"; a binary file, an
    empty one, another tool's JSON Lines and a log of a newer schema were summarized as
    "incomplete after 0 steps" and compared as rows, exit 0. Each is one line on stderr
    now (exit 1), `check` says what it is (exit 1), and the run beside them is still read."""
    from fpexplorer.cli import main

    files = _hostile_files(tmp_path)
    good = str(tmp_path / "ok.jsonl")
    for name, path in files.items():
        line = f"fpexplorer runs: error: {path}: {NOT_READ[name]}"
        assert main(["runs", "summarize", str(path), good]) == 1, name
        out, err = capsys.readouterr()
        assert err.splitlines() == [line]
        assert out.startswith(f"run        {good}\n") and "incomplete" not in out
        assert main(["runs", "compare", good, str(path)]) == 1, name
        out, err = capsys.readouterr()
        assert err.splitlines() == [line]
        assert [row.split("|")[1].strip() for row in out.splitlines()[2:]] == ["ok.jsonl"]
        assert main(["runs", "check", str(path)]) == 1, name
        out, err = capsys.readouterr()
        assert out.splitlines()[0].startswith(f"{path}: {NOT_READ[name]}, ") and err == ""
        assert "killed" not in out
    assert main(["runs", "summarize", "--json", str(files["binary"])]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1


def test_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Permissions do not hold for root (the CI's user): the refusal is made by open().
    import builtins

    from fpexplorer.cli import main

    path = _synthetic_log(tmp_path / "locked.jsonl", 5)
    real_open = builtins.open

    def refusing(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", refusing)
    assert main(["runs", "summarize", str(path)]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"fpexplorer runs: error: {path}: cannot read it: Permission denied\n",
    )
    assert main(["runs", "check", str(path)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{path}: cannot read it: Permission denied, ")


def test_a_rank_log_without_a_run_is_not_read_not_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of several ranks whose rank-1 log is garbage: its row said "incomplete, 0
    steps" and the exit status was 0."""
    from fpexplorer.cli import main

    folder = tmp_path / "ranked"
    folder.mkdir()
    _synthetic_log(folder / "run.jsonl", 5)
    _synthetic_log(folder / "run.rank-0.jsonl", 5)
    (folder / "run.rank-1.jsonl").write_bytes(b"\x00\x01 garbage\n")
    assert main(["runs", "summarize", str(folder)]) == 1
    out, err = capsys.readouterr()
    reason = "not a run log (no header, step or end record in it)"
    assert err == f"fpexplorer runs: error: {folder / 'run.rank-1.jsonl'}: {reason}\n"
    row = out.splitlines()[-1].split()
    assert row[:3] == ["1", "not", "read"] and out.splitlines()[-1].endswith(f": {reason}")


def test_a_log_cut_short_in_its_header_is_not_called_foreign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job killed while writing its header leaves one line, a record cut short: it read
    as "not a run log", as a binary file does."""
    from fpexplorer.cli import main

    path = tmp_path / "cut.jsonl"
    path.write_text('{"type":"header","schema":2,"conf')
    assert main(["runs", "summarize", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"fpexplorer runs: error: {path}: its only line is a record cut short (a job killed "
        "while writing its header?)\n"
    )


def test_a_ranked_run_without_its_merged_log_prints_its_ranks_not_an_empty_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder whose merged log is gone: its summary read "task ?", "incomplete after
    0 steps (no end record: the job was killed or still runs)" above the ranks, for a file
    that is not there. It is named as not read, once; the ranks follow; exit 1."""
    from fpexplorer.cli import main

    folder = tmp_path / "ranked"
    folder.mkdir()
    _synthetic_log(folder / "run.rank-0.jsonl", 5)
    _synthetic_log(folder / "run.rank-1.jsonl", 5)
    assert main(["runs", "summarize", str(folder)]) == 1
    out, err = capsys.readouterr()
    merged = folder / "run.jsonl"
    reason = "cannot read it: No such file or directory"
    assert err == f"fpexplorer runs: error: {merged}: {reason}\n"
    lines = out.splitlines()
    assert lines[0] == f"run        {merged}: not read ({reason})"
    assert "incomplete" not in out and "task       ?" not in out
    assert [line.split()[:2] for line in lines[-2:]] == [["0", "completed"], ["1", "completed"]]


def test_check_names_a_rank_log_missing_from_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of two ranks whose rank-1 log is gone: `runs check` said every log was ok."""
    from fpexplorer.cli import main
    from fpexplorer.training.records import EndRecord, HeaderRecord, ModelInfo, RankInfo, StepRecord

    folder = tmp_path / "ranked"
    folder.mkdir()
    for name, rank, merged in (("run.jsonl", 0, True), ("run.rank-0.jsonl", 0, False)):
        info = RankInfo(rank=rank, world_size=2, host="node-a", merged=merged)
        with RunWriter(folder / name) as writer:
            writer.write(HeaderRecord(config={"task": "mlp"}, model=ModelInfo(), ranks=info))
            writer.write(StepRecord(step=0, loss=1.0, time=0.1))
            writer.write(EndRecord(status="completed", steps=1))
    assert main(["runs", "check", str(folder)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"{folder / 'run.rank-1.jsonl'}: missing (the merged log's run had 2 ranks)"
    (folder / "run.rank-1.jsonl").write_bytes((folder / "run.rank-0.jsonl").read_bytes())
    assert main(["runs", "check", str(folder)]) == 0
    assert "missing" not in capsys.readouterr().out
