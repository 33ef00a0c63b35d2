"""Where the files of `resources/` are, from source, from a wheel and from a bundle."""

from __future__ import annotations

import sys
from pathlib import Path


def resource_dir() -> Path:
    """The folder holding icons, stylesheets and other shipped data."""
    bundle_root = getattr(sys, "_MEIPASS", None)
    candidates = []
    if bundle_root:
        candidates.append(Path(bundle_root) / "fpexplorer" / "resources")
    here = Path(__file__).resolve().parent
    candidates += [here / "resources", here.parent / "resources"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[-1]


def resource_path(name: str) -> Path:
    """Path of one shipped file, e.g. resource_path("icon.png")."""
    return resource_dir() / name
