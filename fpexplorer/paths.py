"""Where fpexplorer writes its files, and what to do when it cannot.

A bundle may be started with a home directory that does not exist or is read-only, or
with a run directory (FPEXPLORER_RUN_DIR) that is broken. The app must still open and
say so clearly, so these functions never raise: they return a usable folder together
with the reason the preferred one could not be used.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

RUN_DIR_VARIABLE = "FPEXPLORER_RUN_DIR"


@dataclass(frozen=True, slots=True)
class WritableDirectory:
    """A folder that was checked to be writable, and why it is not the preferred one."""

    path: Path
    problem: str | None = None  # None when the preferred folder is in use


def _writable_problem(folder: Path) -> str | None:
    """Why files cannot be written in `folder` (creating it if needed), or None."""
    if folder.exists() and not folder.is_dir():
        return f"{folder} is not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Permission bits lie for root and on some file systems: actually try to write.
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fpexplorer-probe-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        return f"{folder} is not writable ({reason})"
    return None


def file_writable_problem(file: Path) -> str | None:
    """Why `file` cannot be written or replaced (its folder is created if needed), or None.

    An existing file is opened for update and closed, so nothing in it changes. Its folder
    is probed too: QSettings replaces a file by writing a new one beside it."""
    problem = _writable_problem(file.parent)
    if problem is not None:
        return problem
    if file.exists() or file.is_symlink():
        try:
            with file.open("r+b"):
                pass
        except OSError as error:
            return f"{file} is not writable ({error.strerror or error})"
    return None


def data_home() -> Path:
    """The per-user data folder: $XDG_DATA_HOME/fpexplorer or ~/.local/share/fpexplorer."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "fpexplorer"


def _fallback(kind: str) -> Path:
    user = os.environ.get("USER") or str(os.getuid() if hasattr(os, "getuid") else "user")
    return Path(tempfile.gettempdir()) / f"fpexplorer-{kind}-{user}"


def run_directory() -> WritableDirectory:
    """The folder where training runs are saved (FPEXPLORER_RUN_DIR overrides it)."""
    configured = os.environ.get(RUN_DIR_VARIABLE)
    preferred = Path(configured).expanduser() if configured else data_home() / "runs"
    problem = _writable_problem(preferred)
    if problem is None:
        return WritableDirectory(preferred)
    fallback = _fallback("runs")
    fallback_problem = _writable_problem(fallback)
    if fallback_problem is None:
        return WritableDirectory(fallback, f"Run directory {problem}; runs are saved in {fallback}")
    return WritableDirectory(
        fallback, f"Run directory {problem}, and so is {fallback}: runs cannot be saved"
    )
