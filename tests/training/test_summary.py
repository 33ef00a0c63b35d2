"""`fpexplorer runs summarize` text for runs without steps or without a finite loss."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert cells[4:] == ["-", "-"]  # loss scale and steps/s


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
    assert "act grads  zero 0.0% (float16)" in text and "problem    line 3" in text
