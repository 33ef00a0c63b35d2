"""Helpers of the GUI tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_python(
    *args: str, env: Mapping[str, str], timeout: float = 60, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` (`-c CODE`, `-m fpexplorer gui`...) in a child process with `env`,
    from the repository's root unless `cwd` says otherwise; its output captured as text,
    its exit status left to the test."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
