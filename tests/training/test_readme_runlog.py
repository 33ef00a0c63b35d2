"""Reading run logs as a library: the README's example runs and prints what it says, on a
log made as it says (`fpexplorer train --steps 5 --out x.jsonl`); a wrong kind of argument
to the run-log API is a TypeError that says what it takes."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from fpexplorer.cli import main
from fpexplorer.training.runlog import RecordStream, Run, RunWriter, load_run
from fpexplorer.training.summary import summarize

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readmes_run_log_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [
        block
        for block in re.findall(
            r"```pycon\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL
        )
        if "load_run(" in block
    ]
    assert len(blocks) == 1, "the README reads a run log in one pycon example"
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--steps", "5", "--out", "x.jsonl"]) == 0
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(parser.get_doctest(blocks[0], {}, "README run log", str(README), 0))
    assert runner.tries >= 6
    assert runner.failures == 0, f"{runner.failures} README line(s) print something else"


def test_summarize_given_a_path_says_which_function_takes_one(tmp_path: Path) -> None:
    # It was AttributeError: 'str' object has no attribute 'path'.
    with pytest.raises(TypeError, match=r"summarize takes a Run \(load_run\(path\)\), not a str; "
                       r"for a file, summarize_file\(path\)"):  # fmt: skip
        summarize(str(tmp_path / "x.jsonl"))  # type: ignore[arg-type]
    assert summarize(load_run(tmp_path / "x.jsonl")).status == "incomplete"


def test_the_run_log_classes_refuse_a_wrong_kind_of_argument_saying_what_they_take(
    tmp_path: Path,
) -> None:
    # RunWriter.write(3) was dataclasses' "must be called with a dataclass type or
    # instance"; RecordStream.feed("...") was "must be str or None, not bytes".
    with RunWriter(tmp_path / "run.jsonl") as writer:
        for wrong in (3, None, Run(tmp_path, None, (), None, ())):
            with pytest.raises(TypeError, match="RunWriter writes a HeaderRecord, StepRecord"):
                writer.write(wrong)  # type: ignore[arg-type]
    assert load_run(tmp_path / "run.jsonl").problems == ("the file holds no records",)
    with pytest.raises(TypeError, match=r"feed takes bytes \(a file opened 'rb'"):
        RecordStream().feed('{"type":"end","status":"completed","steps":0}\n')  # type: ignore[arg-type]
