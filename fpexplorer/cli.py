"""The `fpexplorer` command line: an argparse front door that imports lazily.

Each sub-command lives in its own module under `fpexplorer.commands` and exposes

    HELP: str                                  one line for `fpexplorer --help`
    def add_arguments(parser) -> None          declares its options (cheap: no heavy imports)
    def run(args) -> int                       does the work; imports numpy/torch/Qt here

Building the parser therefore never imports torch or Qt, so `fpexplorer inspect` and
`fpexplorer formats` answer quickly. With no sub-command the desktop app starts.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from fpexplorer.errors import UsageError

__all__ = ["COMMANDS", "UsageError", "build_parser", "gui_main", "main"]

# Order is the order shown by --help.
COMMANDS: dict[str, str] = {
    "gui": "fpexplorer.commands.gui",
    "inspect": "fpexplorer.commands.inspect",
    "formats": "fpexplorer.commands.formats",
    "quantize": "fpexplorer.commands.quantize",
    "calc": "fpexplorer.commands.calc",
    "train": "fpexplorer.commands.train",
    "runs": "fpexplorer.commands.runs",
    "screenshot": "fpexplorer.commands.screenshot",
    "selftest": "fpexplorer.commands.selftest",
}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `only` just that sub-command's (so that `fpexplorer`
    starting the app does not import every other command module first)."""
    from fpexplorer import __version__

    parser = _Parser(
        prog="fpexplorer",
        description="Explore floating-point formats and mixed-precision training numerics.",
    )
    parser.add_argument("--version", action="version", version=f"fpexplorer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module, _parser=command_parser)
    return parser


def _never_fail_on_output_encoding() -> None:
    """A terminal whose encoding lacks "≈" or "…" (LANG=en_US.ISO-8859-1, PYTHONIOENCODING=
    ascii), or a file name that is not valid UTF-8, made `fpexplorer formats` end in a
    UnicodeEncodeError traceback. Such characters are written as backslash escapes instead
    (stderr does this already)."""
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    _never_fail_on_output_encoding()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or (
        arguments[0].startswith("-") and arguments[0] not in ("-h", "--help", "--version")
    ):
        # `fpexplorer` is `fpexplorer gui`, with its options too: `fpexplorer --theme dark`
        # was refused as "argument COMMAND: invalid choice: 'dark'".
        arguments = ["gui", *arguments]
    parser = build_parser(arguments[0] if arguments[0] in COMMANDS else None)
    args, extra = parser.parse_known_args(arguments)
    if extra:
        # The sub-command's parser names itself ("fpexplorer formats: error: ..."), as its
        # other errors do; the top-level one said "fpexplorer: error".
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "_module", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._module.run(args) or 0)
    except UsageError as error:
        print(f"fpexplorer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fpexplorer {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `fpexplorer formats | head`: the reader left; not an error worth a traceback.
        _drop_stdout()
        return 0
    except OSError as error:
        # What the system refused and no command handles: `fpexplorer formats > /dev/full`
        # ended in a traceback ("No space left on device"). One line, status 1.
        where = f" ({error.filename})" if error.filename else ""
        said = f"{error.strerror or error}{where}"
        print(f"fpexplorer {args.command}: error: {said}", file=sys.stderr)
        _drop_stdout()
        return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush of what could not be written
    would otherwise print "Exception ignored ..." on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # no real stdout (a test's capture): nothing will be flushed to a file


def gui_main() -> int:
    """Entry point of the `fpexplorer-gui` launcher (no console window on Windows)."""
    return main(["gui", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
