"""Helpers of the training tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A hang guard, not a speed figure: a lost rank must end the run, never leave it waiting.
HANG_GUARD_S = 150


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m fpexplorer ARGS` in a child process (the real front door)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fpexplorer", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO,
    )  # fmt: skip


def torchrun(
    folder: Path, script: str, *args: str, ranks: int = 2
) -> subprocess.CompletedProcess[str]:
    """A user's `script` (Python source, dedented) written into `folder` and run with ARGS
    on `ranks` ranks of one node through `python -m torch.distributed.run --standalone`
    (what `torchrun` runs), from the repository's root with one thread per rank; its
    output captured, bounded by the hang guard."""
    path = folder / "loop.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", str(ranks), str(path), *args],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env=env, cwd=REPO,
    )  # fmt: skip
