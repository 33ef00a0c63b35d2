"""`fpexplorer selftest` from source: every check passes and nothing else is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gui_helpers import run_python

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a real training job in a child process: ~10 s
def test_selftest_prints_only_its_checks(tmp_path: Path) -> None:
    env = {**os.environ, "FPEXPLORER_SETTINGS_SCOPE": f"tests-{tmp_path.name}"}
    result = run_python(
        "-m", "fpexplorer", "selftest", "--steps", "2", env=env, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("selftest: ") and lines[-1].endswith(" 0 failed")
    # Was: Qt's "This plugin does not support propagateSizeHints()" between the PASS lines.
    assert all(line.startswith("PASS ") for line in lines[:-1]), lines
    assert "propagateSizeHints" not in result.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        # Failed before: a timeout of 0 or less ran every check and failed the job's two.
        (["--timeout", "0"], "--timeout must be more than 0 seconds, not 0"),
        (["--timeout", "-5"], "--timeout must be more than 0 seconds, not -5"),
        (["--steps", "0"], "--steps must be at least 1"),
        # Was: "--keep '...': File exists".
        (["--keep", "FILE"], "--keep 'FILE': a file, not a folder"),
    ],
)  # fmt: skip
def test_bad_selftest_options_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], said: str
) -> None:
    from fpexplorer.cli import main

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    options = [str(a_file) if option == "FILE" else option for option in options]
    assert main(["selftest", *options]) == 2
    said = "fpexplorer selftest: error: " + said.replace("FILE", str(a_file))
    assert capsys.readouterr().err.strip() == said


@pytest.mark.slow  # a self-test and its training job in child processes: a few seconds
def test_ctrl_c_during_the_training_check_stops_the_job_and_says_interrupted(
    tmp_path: Path,
) -> None:
    """Ctrl+C in the terminal (SIGINT to the whole process group, the job included).
    Failed before: the self-test went on, reported the job as "no end within 180 s" after
    5 s, exited 1, and Qt said "QProcess: Destroyed while process ... is still running"."""
    import signal
    import time

    env = {**os.environ, "FPEXPLORER_SETTINGS_SCOPE": f"tests-{tmp_path.name}"}
    keep = tmp_path / "keep"
    process = subprocess.Popen(
        [sys.executable, "-m", "fpexplorer", "selftest", "--steps", "1000000", "--keep", str(keep)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )
    run_log = keep / "selftest-run.jsonl"
    deadline = time.monotonic() + 240
    try:
        while not (run_log.is_file() and run_log.read_text(encoding="utf-8").count("\n") >= 3):
            assert process.poll() is None and time.monotonic() < deadline, "no job started"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert err.splitlines()[-1] == "fpexplorer selftest: interrupted"
    assert "QProcess" not in err and "Traceback" not in err
    assert '"status":"stopped"' in run_log.read_text(encoding="utf-8").splitlines()[-1]
    with pytest.raises(ProcessLookupError):  # nothing of the group is left running
        os.killpg(process.pid, 0)
