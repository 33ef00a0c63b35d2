"""Run-directory selection when the preferred folder is broken or read-only."""

from __future__ import annotations

import os
from pathlib import Path

from fpexplorer.paths import RUN_DIR_VARIABLE, run_directory


def test_configured_run_directory_is_used_and_created(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a" / "runs"
    monkeypatch.setenv(RUN_DIR_VARIABLE, str(target))
    chosen = run_directory()
    assert chosen.path == target and chosen.problem is None and target.is_dir()


def test_run_directory_that_is_a_file_falls_back_with_a_reason(tmp_path: Path, monkeypatch) -> None:
    broken = tmp_path / "not-a-folder"
    broken.write_text("x")
    monkeypatch.setenv(RUN_DIR_VARIABLE, str(broken))
    chosen = run_directory()
    assert chosen.path != broken
    assert chosen.problem is not None and str(broken) in chosen.problem
    assert os.access(chosen.path, os.W_OK)


def test_unwritable_run_directory_falls_back(monkeypatch) -> None:
    # /proc refuses new folders even to root, unlike a chmod-ed folder.
    unwritable = Path("/proc/fpexplorer-runs")
    monkeypatch.setenv(RUN_DIR_VARIABLE, str(unwritable))
    chosen = run_directory()
    assert chosen.problem is not None and str(unwritable) in chosen.problem
    assert chosen.path != unwritable and os.access(chosen.path, os.W_OK)


def test_no_home_falls_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(RUN_DIR_VARIABLE, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    missing_parent = tmp_path / "file-as-home"
    missing_parent.write_text("")
    monkeypatch.setenv("HOME", str(missing_parent))
    chosen = run_directory()
    assert chosen.problem is not None and "not writable" in chosen.problem
    assert chosen.path.is_dir()
