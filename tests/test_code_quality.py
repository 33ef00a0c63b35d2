"""The linters of pyproject.toml, run as tests so that CI enforces them.

ruff (E W F I UP B RUF) on the whole tree; mypy --strict on the layers that must stay
typed (formats/, training/ and gui/, as configured in pyproject.toml).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_ruff_format_is_applied() -> None:
    result = _run("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


@pytest.mark.slow  # mypy over the typed packages: about 10 s
def test_mypy_is_clean_on_formats_training_and_gui() -> None:
    result = _run("mypy", "--no-incremental")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_nothing_cites_documents_outside_the_repository() -> None:
    """The design lives in docs/ARCHITECTURE.md; code, tests and docs never point at notes
    that a clone of this repository does not have."""
    # Spelled in pieces so that this file does not match itself.
    pieces = [r"\bDESIGN" + r"\.md", r"\bSTYLE" + r"\.md", r"\.\./" + "shared", "/work" + "/"]
    outside = re.compile("|".join(pieces))
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    offenders = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".svg", ".jsonl", ".npy", ".ico"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}: {match.group(0)}" for match in outside.finditer(text)]
    assert offenders == [], offenders
