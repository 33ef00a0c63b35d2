"""A run file that changes while the panel reads it in pieces (`RunFileReplay`): one still
being written grows, one rewritten or truncated shrinks. Qt-free."""

from __future__ import annotations

from pathlib import Path

from fpexplorer.gui.training.replay import CHUNK_BYTES, RunFileReplay
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import encode_line


def _lines(steps: int) -> list[str]:
    return [encode_line(r) + "\n" for r in synthetic_records(steps, stats_every=1)]


def test_a_file_growing_while_read_is_read_to_its_end_and_never_past_100_percent(
    tmp_path: Path,
) -> None:
    # Was: "Loading grow.jsonl… 159%" (the share of the size the file had when opened).
    lines = _lines(400)
    path = tmp_path / "grow.jsonl"
    path.write_text("".join(lines[:100]))
    model = RunModel()
    replay = RunFileReplay(path, model)
    written, fractions = 100, []
    with open(path, "a") as handle:
        while not replay.advance(0.0):  # a piece at a time, the file growing between
            fractions.append(replay.fraction)
            # Every record but the end one (the job still runs), 20 at a time.
            more = lines[written : min(written + 20, len(lines) - 1)]
            handle.write("".join(more))
            handle.flush()
            written += len(more)
    assert len(fractions) > 5 and max(fractions) <= 1.0
    assert model.steps_seen == 400 and model.end is None and not replay.shrank
    assert model.problems == []


def test_a_file_cut_short_while_read_says_so_not_that_a_job_was_killed(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(_lines(400)))
    size = path.stat().st_size
    model = RunModel()
    replay = RunFileReplay(path, model)
    assert not replay.advance(0.0)  # one piece read
    read = replay.bytes_read
    assert read == CHUNK_BYTES < size
    with open(path, "r+b") as handle:
        handle.truncate(read + 100)  # rewritten under the reader: a torn line at its end
    while not replay.advance(0.0):
        pass
    assert replay.shrank
    assert model.problems[0] == (
        f"the file shrank while it was read (to {read + 100:,} bytes, from {size:,}): what "
        "was read is shown"
    )
