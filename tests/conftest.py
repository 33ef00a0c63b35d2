"""Shared test set-up: Qt runs offscreen (with no display a Qt test would abort the process)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Keep QSettings of tests away from the user's real settings.
os.environ.setdefault("FPEXPLORER_SETTINGS_SCOPE", "tests")
