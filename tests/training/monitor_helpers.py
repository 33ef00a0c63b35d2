"""Helpers of the monitor tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

from typing import Any

from fpexplorer.training.records import StepRecord


def flat(record: StepRecord) -> dict[str, Any]:
    """A step record as the JSON it is written as, its statistics beside the cheap signals
    (the tests compare them with oracles field by field)."""
    raw = record.to_json()
    stats = raw.pop("stats", None) or {}
    return {**raw, **stats}
