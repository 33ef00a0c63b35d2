"""How to start this program again as a child process, from source or frozen.

The training panel runs `fpexplorer train --stream ...` in a separate process. From
source that is `python -m fpexplorer train ...`; in a PyInstaller bundle sys.executable
is the bundled program itself, which takes the same arguments.
"""

from __future__ import annotations

import sys


def is_frozen() -> bool:
    """True inside a PyInstaller bundle."""
    return bool(getattr(sys, "frozen", False))


def self_command() -> list[str]:
    """The argv prefix that runs the `fpexplorer` command line in a new process."""
    if is_frozen():
        return [sys.executable]
    return [sys.executable, "-m", "fpexplorer"]
