"""Helpers of the training tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m fpexplorer ARGS` in a child process (the real front door)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fpexplorer", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO,
    )  # fmt: skip
