"""Where the app keeps window geometry and last state (QSettings), and what goes wrong there.

By default the user's native settings location is used. When the environment variable
FPEXPLORER_SETTINGS_SCOPE is set to anything but "user" (tests set it to "tests"), an ini
file in a private temporary folder is used instead, so that tests never read or write the
user's real settings. FPEXPLORER_SETTINGS_DIR names that folder explicitly.

A settings location that cannot be written (read-only home, full disk) never crashes the
app: `SettingsStore.problem()` says what went wrong and the window shows it in the status bar.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from PySide6.QtCore import QSettings

from fpexplorer.paths import file_writable_problem

ORGANIZATION = "fpexplorer"
APPLICATION = "fpexplorer"
SCOPE_VARIABLE = "FPEXPLORER_SETTINGS_SCOPE"
DIR_VARIABLE = "FPEXPLORER_SETTINGS_DIR"

_private_dir: Path | None = None


def _private_settings_dir(scope: str) -> Path:
    """A temporary folder for this process only, removed when the process ends."""
    global _private_dir
    if _private_dir is None:
        _private_dir = Path(tempfile.mkdtemp(prefix=f"fpexplorer-settings-{scope}-"))
        atexit.register(shutil.rmtree, _private_dir, True)
    return _private_dir


def settings_file_for_scope() -> Path | None:
    """The ini file to use, or None for the user's native settings."""
    explicit = os.environ.get(DIR_VARIABLE)
    if explicit:
        return Path(explicit) / f"{APPLICATION}.ini"
    scope = os.environ.get(SCOPE_VARIABLE, "").strip()
    if scope and scope != "user":
        return _private_settings_dir(scope) / f"{APPLICATION}.ini"
    return None


class SettingsStore:
    """A thin wrapper over QSettings that reports problems instead of raising.

    `persistent=False` keeps values in memory only (used by `fpexplorer screenshot`, whose
    pictures must not depend on what the user did last).
    """

    def __init__(self, *, persistent: bool = True) -> None:
        self._memory: dict[str, object] = {}
        self._settings: QSettings | None = None
        self._problem: str | None = None
        if not persistent:
            return
        settings: QSettings | None = self._open()
        if settings is not None and settings.status() == QSettings.Status.FormatError:
            settings = self._set_unreadable_file_aside(settings)
        self._settings = settings
        if settings is None or self._problem is not None:
            return
        # QSettings finds out that it cannot write only when it writes, at the window's
        # close, when the status bar that would say so is gone: say it at the start.
        cannot_write = file_writable_problem(Path(settings.fileName()))
        if cannot_write:
            self._problem = f"Settings will not be saved: {cannot_write}"
        else:
            self._check("reading")

    @staticmethod
    def _open() -> QSettings:
        path = settings_file_for_scope()
        if path is None:
            settings = QSettings(ORGANIZATION, APPLICATION)
        else:
            settings = QSettings(str(path), QSettings.Format.IniFormat)
        # QSettings reads its file on the first access: read it now, so that status() says
        # whether the file could be parsed before any value is used.
        settings.allKeys()
        return settings

    def _set_unreadable_file_aside(self, settings: QSettings) -> QSettings | None:
        """A settings file QSettings cannot parse: keep it under another name and start with
        defaults (its half-parsed values would be restored as garbage, and its sticky
        FormatError reported at the close as a failure to save). None (memory only) when it
        cannot be moved: what could not be read is never overwritten."""
        path = Path(settings.fileName())
        kept = path.with_name(path.name + ".unreadable")
        try:
            path.replace(kept)
        except OSError as error:
            self._problem = (
                f"Settings file {path} could not be read; started with defaults, and settings "
                f"will not be saved (it could not be renamed: {error.strerror or error})"
            )
            return None
        self._problem = (
            f"Settings file {path} could not be read; started with defaults "
            f"(the file is kept as {kept.name})"
        )
        return self._open()

    @property
    def location(self) -> str:
        if self._settings is None:
            return "(not saved)"
        return self._settings.fileName()

    def problem(self) -> str | None:
        """A sentence about the last failure to read or write settings, else None."""
        return self._problem

    def value(self, key: str, default: object = None) -> object:
        if self._settings is None:
            return self._memory.get(key, default)
        return self._settings.value(key, default)

    def text(self, key: str, default: str = "") -> str:
        value = self.value(key, default)
        return value if isinstance(value, str) else default

    def text_list(self, key: str) -> list[str]:
        value = self.value(key, [])
        if isinstance(value, str):  # QSettings stores a one-element list as a plain string
            return [value] if value else []
        if isinstance(value, list):
            return [item for item in value if isinstance(item, str)]
        return []

    def set_value(self, key: str, value: object) -> None:
        if self._settings is None:
            self._memory[key] = value
        else:
            self._settings.setValue(key, value)

    def sync(self) -> str | None:
        """Write to disk now; returns the problem (also kept for `problem()`), or None."""
        if self._settings is not None:
            self._settings.sync()
            self._problem = None  # what reading found is said; this says how saving went
            self._check("saving")
        return self._problem

    def _check(self, doing: str) -> None:
        assert self._settings is not None
        status = self._settings.status()
        if status == QSettings.Status.NoError:
            # QSettings reports an unwritable location only after a write attempt; a folder
            # that cannot be created is worth saying before the user loses anything.
            path = Path(self._settings.fileName())
            if doing == "saving" and not path.exists():
                self._problem = f"Settings not saved: cannot write {path}"
            return
        reason = {
            QSettings.Status.AccessError: "cannot write",
            QSettings.Status.FormatError: "unreadable file",
        }.get(status, "error")
        self._problem = f"Settings problem while {doing} ({reason}): {self._settings.fileName()}"
