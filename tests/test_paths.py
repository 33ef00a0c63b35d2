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


def _train_with_default_out(capsys) -> Path:  # type: ignore[no-untyped-def]
    from fpexplorer.cli import main

    status = main(["train", "--task", "regression", "--device", "cpu", "--steps", "1",
                   "--stats-every", "0"])  # fmt: skip
    assert status == 0
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    return Path(last_line.split("run log: ")[1])


def test_train_without_out_writes_to_the_apps_run_directory(
    tmp_path: Path,
    monkeypatch,  # type: ignore[no-untyped-def]
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    """`fpexplorer train` and the app save runs in one folder; the current folder (a
    repository, say) stays clean. Before, the CLI wrote run-*.jsonl into the current folder."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(RUN_DIR_VARIABLE, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    written = _train_with_default_out(capsys)
    expected_folder = tmp_path / "home" / ".local" / "share" / "fpexplorer" / "runs"
    assert written.parent == expected_folder == run_directory().path
    assert written.name.startswith("run-regression-") and written.is_file()
    assert list(work.iterdir()) == []


def test_train_without_out_follows_the_configured_run_directory(
    tmp_path: Path,
    monkeypatch,  # type: ignore[no-untyped-def]
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RUN_DIR_VARIABLE, str(tmp_path / "my-runs"))
    written = _train_with_default_out(capsys)
    assert written.parent == tmp_path / "my-runs" and written.is_file()


def test_file_writable_problem_names_what_blocks_the_file(tmp_path: Path) -> None:
    from fpexplorer.paths import file_writable_problem

    assert file_writable_problem(tmp_path / "new" / "settings.ini") is None
    assert (tmp_path / "new").is_dir()
    existing = tmp_path / "existing.ini"
    existing.write_bytes(b"[a]\nb=1\n")
    assert file_writable_problem(existing) is None
    assert existing.read_bytes() == b"[a]\nb=1\n"  # probed, not changed
    folder = tmp_path / "folder.ini"
    folder.mkdir()
    assert file_writable_problem(folder) == f"{folder} is not writable (Is a directory)"
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert file_writable_problem(blocker / "settings.ini") == f"{blocker} is not a folder"
    below = blocker / "sub"
    assert file_writable_problem(below / "x.ini") == f"{below} is not writable (Not a directory)"
