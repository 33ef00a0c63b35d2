"""The command line repeats a few engine constants so that building the parser stays cheap
(no import of the engine for `--help`); they must never drift from the engine's."""

from __future__ import annotations

from fpexplorer import formats
from fpexplorer.commands import calc as calc_command
from fpexplorer.commands import inspect as inspect_command


def test_inspect_choices_are_the_engines() -> None:
    assert inspect_command.ROUNDING_MODES == formats.ROUNDING_MODES
    assert inspect_command.OVERFLOW_POLICIES == formats.OVERFLOW_POLICIES


def test_calc_choices_are_the_engines() -> None:
    assert calc_command.ROUNDING_MODES == formats.ROUNDING_MODES
    assert calc_command.OVERFLOW_POLICIES == formats.OVERFLOW_POLICIES
