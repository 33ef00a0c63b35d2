"""The one way `inspect`, `calc` and `quantize` answer: a document, as JSON or as text."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

# What a negative VALUE can start with: argparse itself takes only -1 or -0.5 for a value
# and "-1e-3", "-inf", "-0x1p-3" or "-max" for an unknown option.
_NEGATIVE_VALUE = re.compile(r"^-(?:[0-9.]|inf|nan|max|min_|eps|0x|0b)", re.IGNORECASE)


def print_document(
    build: Callable[[], dict[str, Any]], render: Callable[[dict[str, Any]], str], as_json: bool
) -> int:
    """Build the document, print it, return exit status 0; a ValueError from `build` (bad
    input) becomes a UsageError: one line on stderr and exit status 2."""
    import json

    from fpexplorer.errors import UsageError

    try:
        document = build()
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(json.dumps(document, indent=2, allow_nan=False) if as_json else render(document))
    return 0


def json_number(value: Fraction | None) -> float | None:
    """A JSON number, or None when there is none or float64 cannot hold it (JSON has no
    inf: 1e400, or an error of 1e400, is null here and exact in its *_exact string; nor is
    an error of 1e-4950 the number 0)."""
    if value is None:
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    if result == 0 and value != 0:
        return None  # below float64's smallest subnormal: 0.0 would say "no error"
    return result if result not in (float("inf"), float("-inf")) else None


# The engine's limit (formats.format.MAX_RANDOM_BITS), repeated so that building the parser
# imports nothing; a test holds them equal.
MAX_RANDOM_BITS = 64


def add_stochastic_arguments(parser: argparse.ArgumentParser) -> None:
    """--seed and --random-bits, the draw of stochastic rounding: declared here once for
    every command that rounds one value at a time (`inspect`, `calc`)."""
    parser.add_argument("--seed", type=int, default=None, help="seed for stochastic rounding")
    parser.add_argument(
        "--random-bits", type=int, default=None, metavar="N",
        help=f"random bits of stochastic rounding (1..{MAX_RANDOM_BITS}; "
        f"default {MAX_RANDOM_BITS})",
    )  # fmt: skip


def stochastic_draw(
    rounding: str | None, seed: int | None, random_bits: int | None
) -> tuple[int | None, int | None]:
    """(seed, random bits) of a command's stochastic rounding, both None without it; a
    ValueError names the option that nothing would draw from, or a bit count out of range."""
    if rounding != "stochastic":
        for option, given in (("--seed", seed), ("--random-bits", random_bits)):
            if given is not None:  # nothing draws: must not pass silently
                raise ValueError(f"{option} goes with --rounding stochastic only")
        return None, None
    if random_bits is not None and not 1 <= random_bits <= MAX_RANDOM_BITS:
        raise ValueError(f"--random-bits must be 1..{MAX_RANDOM_BITS}, not {random_bits}")
    return stochastic_seed(seed), MAX_RANDOM_BITS if random_bits is None else random_bits


def stochastic_seed(seed: int | None) -> int:
    """The seed stochastic rounding draws from: the one given, else a fresh one, which the
    answer reports so that `--seed N` repeats the draw (an unreported one could not be)."""
    import secrets

    return seed if seed is not None else secrets.randbits(32)


def seed_text(seed: int | None, random_bits: int | None = None) -> str:
    """The header's note of the draw ("" without stochastic rounding): the seed, and the
    random bits when not the default, with the options that repeat it."""
    if seed is None:
        return ""
    if random_bits is None or random_bits == MAX_RANDOM_BITS:
        return f"  seed {seed} (--seed {seed} repeats the draw)"
    return (
        f"  seed {seed}, {random_bits} random bits "
        f"(--seed {seed} --random-bits {random_bits} repeats the draw)"
    )


def exact_or_rounded(exact: str | None, *, keep: int, shown: int) -> str:
    """An exact decimal (as `exact_decimal` writes it) for a terminal: every digit when it
    has at most `keep` significant digits, else rounded to `shown` and marked "≈", so that a
    rounded number never reads as an exact one; in the display rule's notation (1e-400,
    ≈1.487e284: `approximate_decimal`). "-" for None; a cut decimal ("0.333…") is "≈".
    """
    from decimal import Decimal

    from fpexplorer.formats.decimal import approximate_decimal

    if exact is None:
        return "-"
    if not exact or not (exact[-1].isdigit() or exact.endswith("…")) or "e" in exact:
        return exact  # inf, nan, or already scientific
    value = Fraction(Decimal(exact.rstrip("…")))
    return approximate_decimal(value, keep=keep, shown=shown, inexact=exact.endswith("…"))


def accept_negative_values(parser: argparse.ArgumentParser) -> None:
    """Let a negative value be an argument, not an option: `inspect -1e-3`,
    `gui --value -inf`. (The parser must have no options that look like one.)"""
    parser._negative_number_matcher = _NEGATIVE_VALUE
