"""The one way `inspect`, `calc` and `quantize` answer: a document, as JSON or as text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
