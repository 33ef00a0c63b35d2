"""Finding a run's logs in a folder that cannot be listed, or holds hundreds of logs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fpexplorer.training.ranked import NoRunError, find_run


def test_a_log_in_a_folder_that_cannot_be_listed_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A folder with execute but no read permission: its files open, listing it fails
    # (simulated: the tests may run as root, whom permissions do not stop). Before, the
    # PermissionError of looking for rank logs escaped as a traceback.
    log = tmp_path / "run.jsonl"
    log.write_text("")

    def refuse(*_args: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(os, "scandir", refuse)
    monkeypatch.setattr(os, "listdir", refuse)
    files = find_run(log)
    assert files.merged == log and files.ranks == ()


def test_rank_logs_are_found_among_many_other_logs(tmp_path: Path) -> None:
    for index in range(300):
        (tmp_path / f"other-{index}.jsonl").write_text("")
    (tmp_path / "run.jsonl").write_text("")
    for rank in (1, 0, 10):
        (tmp_path / f"run.rank-{rank}.jsonl").write_text("")
    (tmp_path / "run.rank-2.jsonl").mkdir()  # a folder is not a log
    (tmp_path / "runx.rank-3.jsonl").write_text("")  # another run's
    files = find_run(tmp_path / "run.jsonl")
    assert [path.name for path in files.ranks] == [
        "run.rank-0.jsonl", "run.rank-1.jsonl", "run.rank-10.jsonl"
    ]  # fmt: skip


def test_links_to_nothing_and_special_files_are_named_for_what_they_are(tmp_path: Path) -> None:
    from fpexplorer.training.ranked import NoRunError

    (tmp_path / "loop-a.jsonl").symlink_to("loop-b.jsonl")
    (tmp_path / "loop-b.jsonl").symlink_to("loop-a.jsonl")
    (tmp_path / "dangling.jsonl").symlink_to("nowhere.jsonl")
    for name in ("loop-a.jsonl", "dangling.jsonl"):
        with pytest.raises(NoRunError, match="symbolic link to no file"):
            find_run(tmp_path / name)
    os.mkfifo(tmp_path / "pipe.jsonl")  # reading it would wait for a writer forever
    with pytest.raises(NoRunError, match="not a regular file"):
        find_run(tmp_path / "pipe.jsonl")
    with pytest.raises(NoRunError, match="no such run log"):
        find_run(tmp_path / "missing.jsonl")


def test_a_path_that_cannot_be_looked_at_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that cannot be listed (iterdir) or a path under a folder that cannot be
    passed (is_dir() raises PermissionError: pathlib hides only "no such file" errors) gave
    `runs` a traceback. Permissions do not bind root (the CI's user): refused here by hand."""
    from fpexplorer.cli import main

    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "run.jsonl").write_text("")
    inside = folder / "run.jsonl"
    real_iterdir, real_stat = Path.iterdir, Path.stat

    def iterdir(self: Path) -> object:
        if self == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    def stat(self: Path, **kwargs: object) -> object:
        if self == inside:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.setattr(Path, "stat", stat)
    for verb in ("check", "summarize", "compare"):
        for path in (folder, inside):
            assert main(["runs", verb, str(path)]) == 2
            err = capsys.readouterr().err
            assert err == f"fpexplorer runs: error: cannot read {path}: Permission denied\n"


def test_a_folder_of_run_folders_names_them(tmp_path: Path) -> None:
    # The run directory, where each run of several ranks gets a folder of its own. Before,
    # only "holds no run log (no .jsonl file)", as for an empty folder.
    for name in ("run-mlp-bf16-1", "run-mlp-fp16-2", "run-tf-bf16-3", "run-tf-fp16-4"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.jsonl").write_text("")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoRunError) as raised:
        find_run(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path} holds no run log (no .jsonl file); its folders hold runs "
        "(run-mlp-bf16-1, run-mlp-fp16-2, run-tf-bf16-3, ...): name one"
    )
    with pytest.raises(NoRunError) as raised:
        find_run(tmp_path / "empty")
    assert str(raised.value) == f"{tmp_path / 'empty'} holds no run log (no .jsonl file)"
