"""`fpexplorer gui` (also `fpexplorer` with no arguments): open the desktop app."""

from __future__ import annotations

import argparse

HELP = "open the desktop app (also what `fpexplorer` with no arguments does)"


def add_start_state_arguments(parser: argparse.ArgumentParser) -> None:
    """--format and --value: what the bit editor starts with (`gui` and `screenshot`)."""
    from fpexplorer.commands.output import accept_negative_values

    accept_negative_values(parser)  # --value -1e-3, --value -inf
    parser.add_argument(
        "--format",
        dest="formats",
        metavar="NAME",
        action="extend",
        nargs="+",
        default=None,
        help="formats to stack in the bit editor (e.g. --format fp32 fp16 bf16 or e6m9; "
        "default: float32 float16 bfloat16)",
    )
    parser.add_argument(
        "--value",
        metavar="TEXT",
        default=None,
        help="value or code to load (1/3, 0x1.8p3, max, 0x3C00, ...)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_start_state_arguments(parser)
    parser.add_argument(
        "--theme",
        choices=("system", "light", "dark"),
        default="system",
        help="colour theme (default: follow the system palette)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore the state saved by the last run"
    )


def run(args: argparse.Namespace) -> int:
    from fpexplorer.cli import UsageError
    from fpexplorer.gui.app import (
        create_application,
        display_problem,
        install_termination_handler,
    )

    problem = display_problem()
    if problem:
        raise UsageError(problem)
    formats = _formats(args.formats)
    app = create_application(theme=args.theme)
    install_termination_handler()

    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    # The last session's window always comes back; its formats only where no --format
    # chooses others.
    window = MainWindow(SettingsStore(), restore=not args.fresh, restore_formats=not formats)
    apply_start_state(window, formats, args.value)
    window.show()
    return int(app.exec())


def _formats(names: list[str] | None) -> list[object]:
    """Look up --format names (UsageError with the engine's message for unknown ones)."""
    from fpexplorer.cli import UsageError
    from fpexplorer.formats import get_format

    found = []
    for name in names or []:
        try:
            found.append(get_format(name))
        except ValueError as error:
            raise UsageError(str(error)) from None
    return found


def apply_start_state(window: object, formats: list[object], value: str | None) -> None:
    """Stack the given formats and type the given value (UsageError if it is bad)."""
    from fpexplorer.cli import UsageError
    from fpexplorer.gui.formats.state import EditorState
    from fpexplorer.gui.main_window import MainWindow

    assert isinstance(window, MainWindow)
    session = window.session
    if formats or value is not None:
        window.tabs.setCurrentIndex(0)  # what they load is seen (a restored tab may hide it)
    if formats:
        session.editors = [EditorState(fmt) for fmt in formats]  # type: ignore[arg-type]
        session.editors_changed.emit()
        session.set_active(session.editors[0])
        session.changed.emit()
    if value is not None and not session.enter_text(value):
        error = session.entry_error or "not a value"
        if error.startswith("'" + value[:40]):  # the message quotes it (cut when long)
            raise UsageError(f"--value {error}")
        shown = value if len(value) <= 60 else value[:60] + "…"
        raise UsageError(f"--value {shown!r}: {error}")
