"""What the run log's readers say about a damaged log is true, and the same in
`runs check`, `runs summarize` and the Training panel (found by a new user's pass)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fpexplorer.cli import main
from fpexplorer.gui.training.replay import RunFileReplay
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import EndRecord, HeaderRecord, Record, StepRecord, encode_line
from fpexplorer.training.runlog import RecordStream, load_run, parse_record
from fpexplorer.training.summary import summarize_file


def _write(path: Path, records: list[Record]) -> Path:
    path.write_text("".join(encode_line(r) + "\n" for r in records))
    return path


def _panel(path: Path) -> RunModel:
    """The run as the Training panel reads the file (File > Open)."""
    model = RunModel()
    replay = RunFileReplay(path, model)
    while not replay.advance():
        pass
    return model


def _readings(path: Path) -> list[tuple[str, int, bool, str, tuple[str, ...]]]:
    """(reader, steps counted, header used, status, problems) as `runs check`/`runs
    summarize` (summarize_file), `load_run` and the Training panel each read the file."""
    summary = summarize_file(path)
    run = load_run(path)
    panel = _panel(path)
    panel.closed = True
    return [
        ("summarize", summary.steps, summary.task != "?", summary.status, summary.problems),
        ("load_run", len(run.steps), run.header is not None, run.status, run.problems),
        (
            "panel",
            panel.steps_seen,
            panel.header is not None,
            panel.status,
            tuple(panel.problems),
        ),
    ]


def test_a_line_that_is_not_utf8_says_so_without_a_codec_guessed_from_its_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`json.loads` of bytes guesses the encoding from NUL bytes: a binary line was "not a
    record ('utf-32-be' codec can't decode bytes...)", an encoding the file never claimed."""
    binary = [
        b"\x00\x00 '\x00\x01\x02\xff\x00\x12",  # json.loads guessed UTF-32-BE
        b"\x005B\xc3\x00B@\x01\xff",  # ... UTF-16-BE
        b"(\x00\x10\x08\x00\x04\xfe",  # ... UTF-16-LE
        b"\x7fELF\x02\x01\x01\xb0",  # ... UTF-8
    ]
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b"\n".join(binary) + b"\n")
    stream = RecordStream()
    assert stream.feed(path.read_bytes()) + stream.finish() == []
    assert [p.split("): ")[0] + ")" for p in stream.problems] == [
        f"line {n}: not a record (not UTF-8 text)" for n in range(1, len(binary) + 1)
    ]
    assert not any("codec" in p for p in stream.problems)
    assert main(["runs", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.count("(not UTF-8 text)") == len(binary) and "codec" not in out
    with pytest.raises(ValueError, match="not UTF-8 text"):
        parse_record(binary[0])
    # Nor at the end of the input, where a last line without its newline is read.
    stream = RecordStream()
    assert stream.feed(binary[0]) + stream.finish() == []
    assert stream.problems[0].startswith("line 1: not a record (not UTF-8 text)")
    # A run log written with a UTF-8 byte order mark first is read, as before.
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(
        b"\xef\xbb\xbf" + "".join(encode_line(r) + "\n" for r in synthetic_records(5)).encode()
    )
    run = load_run(bom)
    assert run.header is not None and len(run.steps) == 5 and run.problems == ()


def test_step_numbers_that_start_again_are_a_second_run_reported_once_and_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two logs concatenated (`head -10 run.jsonl > t; cat t t`): the second header was
    reported, but its steps 0, 1, ... were counted after the first's: "18 steps"."""
    run = list(synthetic_records(9))
    head = run[:10]  # the header and steps 0 .. 8, no end (`head -10`)
    path = _write(tmp_path / "two.jsonl", head + head)
    problems = (
        "line 12: step 0 after step 8: the step numbers do not increase from here on (a "
        "second run in the same log?); its records are not counted",
        "a second header record ignored",
    )
    for reader, steps, header, status, found in _readings(path):
        assert (steps, header, status) == (9, True, "incomplete"), reader
        assert sorted(found) == sorted(problems), reader
    assert main(["runs", "check", str(path)]) == 1
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.endswith("two.jsonl: 9 steps, incomplete, 2 problem(s)")
    # The second run's end is not this run's; a repeated step is one too (once, at its
    # first line, however many follow).
    path = _write(tmp_path / "ended.jsonl", head + run)
    for reader, steps, _, status, found in _readings(path):
        assert (steps, status) == (9, "incomplete"), reader
        assert any(problem.startswith("line 12: step 0 after step 8") for problem in found)
    steps = [r for r in run if isinstance(r, StepRecord)]
    repeated = [run[0], *steps[:4], steps[3], steps[4], steps[3], run[-1]]
    path = _write(tmp_path / "repeated.jsonl", repeated)
    for reader, counted, header, status, found in _readings(path):
        assert (counted, header, status) == (4, True, "incomplete"), reader
        assert found == (
            "line 6: step 3 after step 3: the step numbers do not increase from here on (a "
            "second run in the same log?); its records are not counted",
        ), reader
    # Two whole runs, one after the other, are as before: the records after the end.
    path = _write(tmp_path / "whole.jsonl", run + run)
    for reader, counted, _, status, found in _readings(path):
        assert (counted, status) == (9, "completed"), reader
        assert not any("do not increase" in problem for problem in found), reader


def test_a_header_after_the_steps_is_one_problem_that_says_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log whose only header came after its steps was "a second header record ignored"
    and "no header record": two problems, each saying the other is false."""
    run = list(synthetic_records(5))
    header, end = run[0], run[-1]
    assert isinstance(header, HeaderRecord) and isinstance(end, EndRecord)
    path = _write(tmp_path / "late.jsonl", [*run[1:-1], header])
    problem = (
        "line 6: the header comes after 5 step records: not used (the run's settings are unknown)"
    )
    for reader, steps, used, status, found in _readings(path):
        assert (steps, used, status, found) == (5, False, "incomplete", (problem,)), reader
    assert main(["runs", "check", str(path)]) == 1
    assert capsys.readouterr().out.splitlines()[1] == "  " + problem
    # A second header after it is a second header; a log without one still says so.
    path = _write(tmp_path / "late_twice.jsonl", [*run[1:-1], header, header, end])
    for reader, steps, used, status, found in _readings(path):
        assert (steps, used, status) == (5, False, "completed"), reader
        assert sorted(found) == sorted([problem, "a second header record ignored"]), reader
    path = _write(tmp_path / "headless.jsonl", run[1:])
    for reader, _, used, _, found in _readings(path):
        # The panel said nothing of it (no settings shown, no problem listed).
        assert not used and found == ("no header record: the run's settings are unknown",), reader


def test_a_live_jobs_steps_out_of_order_are_not_called_output_that_is_not_a_record(
    qapp: object,
) -> None:
    """The panel's job reader put "job output that is not a record:" before every problem
    of its stream, a step out of order (every record whole) included."""
    from fpexplorer.gui.training.job import TrainingJob

    run = list(synthetic_records(3))
    job = TrainingJob()
    said: list[str] = []
    job.problem.connect(said.append)
    data = "".join(encode_line(r) + "\n" for r in [*run[:3], run[1]]).encode()
    job._backlog.append(data)
    job._backlog_bytes += len(data)
    job._drain(None)
    assert said == [
        "job output: line 4: step 0 after step 1: the step numbers do not increase from "
        "here on (a second run in the same log?); its records are not counted"
    ]


def test_the_panels_csv_export_holds_the_steps_the_panel_counts(tmp_path: Path) -> None:
    """File > Export scalars (CSV) from a run file wrote every step record in it: a second
    run's steps after the first's, and steps after the end record."""
    from fpexplorer.gui.training.export import write_scalars_csv

    run = list(synthetic_records(9))
    head = run[:10]  # the header and steps 0 .. 8, no end
    for name, records in (("two.jsonl", head + head), ("ended.jsonl", run + run)):
        path = _write(tmp_path / name, records)
        count, _ = write_scalars_csv(RunModel(), tmp_path / "steps.csv", path)
        rows = (tmp_path / "steps.csv").read_text().splitlines()[1:]
        assert count == len(rows) == _panel(path).steps_seen == 9, name
        assert [row.split(",")[0] for row in rows] == [str(step) for step in range(9)]
