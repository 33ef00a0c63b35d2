"""How an error message echoes what a person typed: cut when long, and marked as cut.

A message that quotes only the first characters of a long input, unmarked, passes for the
whole of it and hides the character that is wrong (3000 nines and an "x" were quoted as 60
nines, "not a number"). So a cut quote ends in "…", and the parsers name the offending
character and where it is (`at_character`).
"""

from __future__ import annotations

QUOTE_LIMIT = 60  # characters of the input a message quotes before it cuts
ELLIPSIS = "…"


def cut_text(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` as it is, or its first `limit` characters and "…" when it is longer."""
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def quote_text(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` quoted as repr() quotes it, cut to `limit` characters and marked "…" when
    longer: '0.1', '99999…'."""
    return repr(cut_text(text, limit))


def at_character(text: str, index: int) -> str:
    """Where the character `text[index]` is, counted from 1 as a person counts:
    "'x' at character 3001 of 3001"."""
    return f"{text[index]!r} at character {index + 1} of {len(text)}"
