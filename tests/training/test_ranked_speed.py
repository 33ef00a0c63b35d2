"""`runs summarize` of a run of several ranks: the merged speed is the slowest rank's (the
job moves at its pace), as the rank table marks it. Before, it was rank 0's: the merged
log carries rank 0's times, so a folder whose rank 1 was slower read, say, "speed 107.74"
above a table marking rank 1 slowest at 104.78."""

from __future__ import annotations

from pathlib import Path

from fpexplorer.training.monitor.ranks import rank_log_path
from fpexplorer.training.ranked import find_run, format_ranked, summarize_ranked
from fpexplorer.training.records import EndRecord, HeaderRecord, ModelInfo, RankInfo, StepRecord
from fpexplorer.training.runlog import RunWriter
from fpexplorer.training.summary import format_summary


def _write(path: Path, rank: int, merged: bool, seconds_a_step: float) -> None:
    info = RankInfo(rank=rank, world_size=2, host="here", merged=merged)
    with RunWriter(path) as writer:
        config = {"task": "mlp", "precision": "bf16"}
        model = ModelInfo(params=1, layers=("0",))
        writer.write(HeaderRecord(config=config, model=model, ranks=info))
        for step in range(5):
            writer.write(StepRecord(step=step, loss=1.0, scale=1.0, skipped=False,
                                    time=seconds_a_step * (step + 1)))  # fmt: skip
        writer.write(EndRecord(status="completed", steps=5))


def test_the_merged_speed_is_the_slowest_ranks(tmp_path: Path) -> None:
    merged = tmp_path / "run.jsonl"
    _write(merged, 0, True, 0.01)  # rank 0's times: 100 steps/s
    _write(rank_log_path(merged, 0), 0, False, 0.01)
    _write(rank_log_path(merged, 1), 1, False, 0.0125)  # 80 steps/s
    summary = summarize_ranked(find_run(tmp_path))
    assert [rank.steps_per_s for rank in summary.ranks] == [100.0, 80.0]
    assert summary.merged.steps_per_s == 80.0
    text = format_ranked(summary, format_summary(summary.merged))
    assert "speed      80 steps/s" in text  # exact: no mark, no padded zeros
    assert text.endswith("     1  completed       5        80           1        0  "
                         "run.rank-1.jsonl  <- slowest")  # fmt: skip
