"""Fixtures shared by the formats panel's tests."""

from __future__ import annotations

import pytest
from pytestqt.qtbot import QtBot

from fpexplorer.formats import get_format
from fpexplorer.gui.formats.panel import FormatsPanel
from fpexplorer.gui.formats.state import FormatsSession


@pytest.fixture
def panel(qtbot: QtBot) -> FormatsPanel:
    """A formats panel with FP32 and FP16 stacked, shown at 1280x760."""
    session = FormatsSession([get_format("fp32"), get_format("fp16")])
    widget = FormatsPanel(session)
    qtbot.addWidget(widget)
    widget.resize(1280, 760)
    widget.show()
    qtbot.waitExposed(widget)
    return widget
