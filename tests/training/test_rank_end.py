"""How a rank that did not complete is listed in the merged end when another rank is lost.

Found under load (`test_distributed.py::test_a_killed_rank_ends_the_run_and_is_named`,
one run in several): torchrun's agent stopped rank 0 (SIGTERM) after rank 1 was killed,
before rank 0 saw the loss itself. Rank 0's own log ended "failed: rank 1 lost", the
merged log's list of ranks said rank 0 "stopped": two answers to one question.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fpexplorer.training.monitor import ranks
from fpexplorer.training.monitor.ranks import RankContext, RankLogs
from fpexplorer.training.records import EndRecord
from fpexplorer.training.runlog import load_run


class _Store:
    """The part of a torch.distributed Store the monitor uses; rank 1 made its monitor
    (every join key reads as posted, with stats_every 0) but never posts its end."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def check(self, keys: list[str]) -> bool:
        return all(key in self.values or "/join/" in key for key in keys)

    def get(self, key: str) -> bytes:
        return self.values.get(key, "0").encode()


@pytest.mark.parametrize("status", ["stopped", "failed"])
def test_rank_0_is_listed_as_its_own_log_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    store = _Store()
    monkeypatch.setattr(ranks, "rendezvous_store", lambda: store)
    monkeypatch.setattr(ranks, "ROLL_CALL_SECONDS", 0.1)
    out = tmp_path / "run.jsonl"
    logs = RankLogs(out, RankContext(rank=0, world_size=2, local_rank=0, host="here"),
                    stats_every=0, replicas=2)  # fmt: skip
    error = None if status == "stopped" else "RuntimeError: connection closed by peer"
    logs.write(EndRecord(status=status, error=error, steps=3))
    logs.close()
    own = load_run(ranks.rank_log_path(out, 0)).end
    merged = load_run(out).end
    assert own is not None and merged is not None
    assert own.status == "failed" and own.error is not None
    assert own.error.startswith("rank 1 lost (no end record within 0.1 s)")
    assert [(r.rank, r.status) for r in merged.ranks] == [(0, "failed"), (1, "lost")]
    assert merged.ranks[0].error == own.error
    assert merged.status == "failed" and merged.error == "lost rank 1"
    # What rank 0 posted for the others is how it ended before it knew (its own view).
    posted = json.loads(next(v for key, v in store.values.items() if "/end/" in key))
    assert posted["status"] == status
