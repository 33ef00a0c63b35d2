"""Fixtures shared by the GUI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from fpexplorer.gui.main_window import MainWindow
from fpexplorer.gui.settings import SettingsStore


@pytest.fixture
def window(qtbot: QtBot) -> Iterator[MainWindow]:
    """The main window as a user first sees it (nothing restored, nothing saved), shown;
    closed after the test."""
    main = MainWindow(SettingsStore(persistent=False), restore=False)
    qtbot.addWidget(main)
    main.show()
    qtbot.waitExposed(main)
    yield main
    main.close()
