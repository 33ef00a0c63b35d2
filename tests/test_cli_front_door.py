"""The `fpexplorer` front door: what a first command line meets before any sub-command."""

from __future__ import annotations

import pytest

from fpexplorer import __version__
from fpexplorer.cli import main


def _exit_and_stderr(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    code = exit_info.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().err


def test_version_and_help_are_the_front_doors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"fpexplorer {__version__}\n"
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: fpexplorer [-h] [--version] COMMAND")


def test_an_unknown_command_is_one_line_naming_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _exit_and_stderr(["nosuch"], capsys)
    assert code == 2
    assert err.startswith("fpexplorer: error: argument COMMAND: invalid choice: 'nosuch'")
    assert "'selftest'" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # Failed before: "fpexplorer: error: argument COMMAND: invalid choice: 'dark'" and
        # "fpexplorer: error: unrecognized arguments: --fresh --nosuch".
        (
            ["--theme", "neon"],
            "fpexplorer gui: error: argument --theme: invalid choice: 'neon' "
            "(choose from 'system', 'light', 'dark')",
        ),
        (["--fresh", "--nosuch"], "fpexplorer gui: error: unrecognized arguments: --nosuch"),
    ],
)
def test_options_without_a_command_are_the_apps(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    code, err = _exit_and_stderr(argv, capsys)
    assert code == 2
    assert err.strip() == said


@pytest.mark.parametrize(
    ("value", "said"),
    [
        # Failed before: the value was said twice ("--value 'zzz': 'zzz': not a number"),
        # and a long one echoed whole (3,000 digits) before the engine's cut copy of it.
        ("zzz", "--value 'zzz': not a number"),
        ("9" * 3000 + "x", "--value '" + "9" * 60),
        ("fp16:0x1FFFF", "--value 'fp16:0x1FFFF': after 'fp16:' comes a raw code"),
    ],
)
def test_a_bad_start_value_is_said_once(
    capsys: pytest.CaptureFixture[str], value: str, said: str
) -> None:
    assert main(["screenshot", "--out", "x.png", "--value", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpexplorer screenshot: error: " + said), err
    assert len(err) < 400


@pytest.mark.slow  # a command in a child process: about half a second
def test_a_terminal_without_unicode_gets_escapes_not_a_traceback() -> None:
    # Failed before: UnicodeEncodeError: 'ascii' codec can't encode character '\u2248'.
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "fpexplorer", "formats"],
        capture_output=True,
        text=True,
        encoding="ascii",
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    float16 = next(line for line in result.stdout.splitlines() if line.startswith("float16 "))
    assert " 65504 " in float16 and "\\u22486.104e-5" in float16  # "≈6.104e-5", escaped


@pytest.mark.slow  # a command in a child process: about half a second
def test_a_full_disk_is_one_line_not_a_traceback() -> None:
    # Failed before: `fpexplorer formats > /dev/full` ended in "OSError: [Errno 28] No space
    # left on device" and its traceback.
    import subprocess
    import sys

    with open("/dev/full", "w") as full:  # Linux: every write fails with ENOSPC
        result = subprocess.run(
            [sys.executable, "-m", "fpexplorer", "formats"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr == "fpexplorer formats: error: No space left on device\n"
