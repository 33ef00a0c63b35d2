"""Damage in a run log is counted truly and reported in bounded memory.

Found with large hostile logs: `runs check` said "200 problem(s)" for a binary file of
765 damaged lines (the reader keeps 200 lines, the last one saying how many more, and
that line said one fewer than it stood for); and a file holding several runs (appended
with `>>`) got one problem line per step after the first end record: 380,038 lines
printed and 63 MB of memory for a 95 MB file, growing with the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fpexplorer.cli import main
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import encode_line
from fpexplorer.training.runlog import MAX_PROBLEMS, RecordStream
from fpexplorer.training.summary import summarize_file


def _run_text(steps: int, seed: int = 0) -> str:
    return "".join(encode_line(r) + "\n" for r in synthetic_records(steps, seed=seed))


def test_the_stream_counts_every_problem_and_says_how_many_it_left_out() -> None:
    stream = RecordStream()
    stream.feed(b"not a record\n" * (MAX_PROBLEMS + 50))
    assert stream.problem_count == MAX_PROBLEMS + 50
    assert len(stream.problems) == MAX_PROBLEMS
    shown = MAX_PROBLEMS - 1  # the last line stands for the rest
    assert stream.problems[-1] == f"... and {MAX_PROBLEMS + 50 - shown} more problems"


def test_runs_check_prints_the_true_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(b"\xff\xfe garbage\n" * 765)
    assert main(["runs", "check", str(path)]) == 1
    assert capsys.readouterr().out.splitlines()[0].endswith("765 problem(s)")


def test_records_after_the_end_are_one_problem_line_however_many(tmp_path: Path) -> None:
    once = tmp_path / "twice.jsonl"
    once.write_text(_run_text(30) + _run_text(30, seed=1))
    many = tmp_path / "many.jsonl"
    many.write_text(_run_text(30) + _run_text(30, seed=1) * 20)
    for path, copies in ((once, 1), (many, 20)):
        summary = summarize_file(path)
        assert summary.steps == 30 and summary.status == "completed"
        assert summary.problems == (
            "a second header record ignored" if copies == 1
            else f"{copies} more header records ignored",
            f"{30 * copies} step records after the end record ignored (steps 0 .. 29)",
            "a second end record ignored" if copies == 1 else f"{copies} more end records ignored",
        )  # fmt: skip
        assert summary.problem_count == 3


def test_a_long_line_in_small_pieces_is_held_in_one_growing_buffer() -> None:
    # The panel reads a file 16 KiB at a time: a line held as immutable bytes was copied
    # whole for every piece (quadratic: a 60 MB line took over a minute of CPU).
    stream = RecordStream()
    stream.feed(b"not a record: ")
    held = stream._pending
    for _ in range(100):
        stream.feed(b"garbage " * 2048)
    assert stream._pending is held and len(held) > 100 * 2048 * 8
    assert stream.feed(b"\n") == []
    assert len(stream.problems) == 1 and stream.problems[0].startswith("line 1: not a record")
