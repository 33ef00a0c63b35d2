"""What the run log's readers say about a damaged log is true, and the same in
`runs check`, `runs summarize` and the Training panel (found by a new user's pass)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fpexplorer.cli import main
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import encode_line
from fpexplorer.training.runlog import RecordStream, load_run, parse_record


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
