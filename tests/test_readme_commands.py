"""Every shell command the README shows works when pasted in order into a fresh clone.

The commands are those of the README's ```bash and ```console blocks (in a console block,
the lines after `$ `), found anew on every run, so a command added to the README is tested
without touching this file. A block that cannot run here says so, with its reason, in an
HTML comment on the line just above it, which a reader of the rendered README never sees:

    <!-- readme-test: skip (opens a window and waits for the user) -->

The commands run one after another in one bash process (as pasted into a terminal: no
`set -e`, no pipefail), each checked for exit status 0, in a `git clone` of this repository
(its committed HEAD) with the environment of this test run: its Python and `fpexplorer` on
PATH, no new virtual environment, the clone's package first on PYTHONPATH. HOME is a
temporary folder, so the run directory (~/.local/share/fpexplorer/runs) is a fresh one and
the user's own stays untouched.
Afterwards the clone holds no untracked file that .gitignore does not cover.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP_MARKER = re.compile(r"<!-- readme-test: skip \((?P<reason>[^)]+)\) -->")
FENCE = re.compile(r"^```(?P<language>\S*)\s*$")


@dataclass(frozen=True, slots=True)
class ShellCommand:
    """One command of the README, as a user would paste it (continuation lines included)."""

    text: str
    line: int  # 1-based line in README.md where it starts


@dataclass(frozen=True, slots=True)
class ShellBlock:
    language: str
    line: int
    commands: tuple[ShellCommand, ...]
    skip_reason: str | None


def _commands_of(language: str, lines: list[str], first_line: int) -> tuple[ShellCommand, ...]:
    commands: list[ShellCommand] = []
    pending: list[str] = []
    start = 0
    for offset, line in enumerate(lines):
        if language == "console":
            if pending:  # continuation of a `$ ... \` line, shown with or without `> `
                line = line[2:] if line.startswith("> ") else line
            elif line.startswith("$ "):
                line = line[2:]
            else:
                continue  # output shown under the command
        elif not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = first_line + offset
        pending.append(line)
        if not line.rstrip().endswith("\\"):
            commands.append(ShellCommand("\n".join(pending), start))
            pending = []
    assert not pending, f"README.md:{start}: a command ends in a line continuation"
    return tuple(commands)


def readme_shell_blocks(text: str) -> list[ShellBlock]:
    """The ```bash / ```sh / ```console blocks of `text`, in order."""
    lines = text.splitlines()
    blocks: list[ShellBlock] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        language = fence.group("language")
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if language in {"bash", "sh", "shell", "console"}:
            previous = next((line for line in reversed(lines[:index]) if line.strip()), "")
            marker = SKIP_MARKER.fullmatch(previous.strip())
            body = lines[index + 1 : end]
            blocks.append(
                ShellBlock(
                    "console" if language == "console" else "bash",
                    index + 1,
                    _commands_of(language, body, index + 2),
                    marker.group("reason") if marker else None,
                )
            )
        index = end + 1
    return blocks


def test_readme_blocks_are_found_and_every_skip_says_why() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = readme_shell_blocks(text)
    run = [command for block in blocks if block.skip_reason is None for command in block.commands]
    assert len(run) >= 10, "the README shows fewer runnable commands than it used to"
    # A marker that is not right above a block (a typo, a blank block) would hide nothing
    # and mislead: each one must have been matched to a block.
    markers = SKIP_MARKER.findall(text)
    assert len(markers) == sum(block.skip_reason is not None for block in blocks)
    assert all(len(block.skip_reason or "reason given") > 10 for block in blocks)
    # The marker syntax is strict: a near miss must not silently run or skip anything.
    assert text.count("readme-test:") == len(markers)


def test_the_parser_reads_continuations_prompts_and_comments() -> None:
    text = "\n".join(
        [
            "<!-- readme-test: skip (opens a window and waits) -->",
            "```bash",
            "fpexplorer",
            "```",
            "```bash",
            "# a comment line",
            "fpexplorer inspect 1 \\",
            "    --format fp16   # trailing comment",
            "",
            "fpexplorer formats",
            "```",
            "```console",
            "$ fpexplorer inspect 2",
            "output line",
            "$ echo a \\",
            "> b",
            "```",
            "```python",
            "print('not shell')",
            "```",
        ]
    )
    blocks = readme_shell_blocks(text)
    assert [block.skip_reason for block in blocks] == ["opens a window and waits", None, None]
    assert [c.text for c in blocks[1].commands] == [
        "fpexplorer inspect 1 \\\n    --format fp16   # trailing comment",
        "fpexplorer formats",
    ]
    assert [c.line for c in blocks[1].commands] == [7, 10]
    assert [c.text for c in blocks[2].commands] == ["fpexplorer inspect 2", "echo a \\\nb"]


def test_ci_runs_the_readmes_whole_suite_command() -> None:
    """CI runs the README's command for the whole suite verbatim."""
    tests_block = next(
        block
        for block in readme_shell_blocks(README.read_text(encoding="utf-8"))
        if any(c.text.startswith("python -m pytest") for c in block.commands)
    )
    whole = [c for c in tests_block.commands if c.text.split("#")[0].strip() == "python -m pytest"]
    assert whole, "the README no longer shows `python -m pytest` for the whole suite"
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "python -m pytest" in ci_lines


def _script(commands: list[ShellCommand]) -> str:
    """A bash script that runs each command as pasted and stops at the first failure."""
    parts = []
    for number, command in enumerate(commands, start=1):
        where = f"README.md:{command.line}"
        parts.append(
            f"printf '%s\\n' {_quote(f'>>> [{number}] {where}')} >&2\n"
            f"{command.text}\n"
            f"status=$?\n"
            f"if [ $status -ne 0 ]; then\n"
            f"  printf '%s\\n' {_quote(f'README command failed ({where}), exit status')} "
            f'"$status" >&2\n'
            f"  exit 1\n"
            f"fi\n"
        )
    return "".join(parts)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.slow
def test_readme_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git, "git is needed to clone the repository"
    clone = tmp_path / "clone"
    # safe.directory: CI may check the repository out as another user than the one testing.
    clone_command = [git, "-c", "safe.directory=*", "clone", "--quiet", str(ROOT), str(clone)]
    subprocess.run(clone_command, check=True, timeout=300)
    commands = [
        command
        for block in readme_shell_blocks(README.read_text(encoding="utf-8"))
        if block.skip_reason is None
        for command in block.commands
    ]
    home = tmp_path / "home"
    home.mkdir()
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FPEXPLORER_RUN_DIR", "XDG_DATA_HOME", "PYTEST_"))
    }
    environment.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}",
        # The clone's own code, not the checkout this environment was installed from
        # (whose uncommitted edits a fresh clone does not have); the dependencies are the
        # environment's.
        PYTHONPATH=os.pathsep.join(filter(None, [str(clone), environment.get("PYTHONPATH")])),
        QT_QPA_PLATFORM="offscreen",
    )
    imported = subprocess.run(
        ["fpexplorer", "--version"],
        cwd=clone,
        env={**environment, "PYTHONVERBOSE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"{clone}/fpexplorer/cli.py" in imported.stderr, imported.stderr[-3000:]
    script = tmp_path / "readme-commands.sh"
    script.write_text(_script(commands), encoding="utf-8")
    result = subprocess.run(
        ["bash", str(script)],
        stdin=subprocess.DEVNULL,
        cwd=clone,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-6000:] + result.stdout[-3000:]
    started = [line for line in result.stderr.splitlines() if line.startswith(">>> [")]
    assert len(started) == len(commands), result.stderr[-3000:]

    status = subprocess.run(
        [git, "status", "--porcelain", "--untracked-files=all"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
    )
    untracked = [line[3:] for line in status.stdout.splitlines() if line.startswith("??")]
    assert untracked == [], f"README commands left files that git would offer to add: {untracked}"
    # The training examples saved their runs in the documented run directory.
    runs = home / ".local" / "share" / "fpexplorer" / "runs"
    assert sorted(runs.glob("run-*.jsonl")), "no run saved in ~/.local/share/fpexplorer/runs"
