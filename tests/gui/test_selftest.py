"""`fpexplorer selftest` from source: every check passes and nothing else is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a real training job in a child process: ~10 s
def test_selftest_prints_only_its_checks(tmp_path: Path) -> None:
    env = {**os.environ, "FPEXPLORER_SETTINGS_SCOPE": f"tests-{tmp_path.name}"}
    result = subprocess.run(
        [sys.executable, "-m", "fpexplorer", "selftest", "--steps", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("selftest: ") and lines[-1].endswith(" 0 failed")
    # Was: Qt's "This plugin does not support propagateSizeHints()" between the PASS lines.
    assert all(line.startswith("PASS ") for line in lines[:-1]), lines
    assert "propagateSizeHints" not in result.stderr
