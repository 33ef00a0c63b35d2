"""`fpexplorer calc`: one operation in a format, exactly, rounded under each mode."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

# The same choices as `inspect` (kept equal to the engine's by tests/test_cli_contract.py).
from fpexplorer.commands.inspect import OVERFLOW_POLICIES, ROUNDING_MODES
from fpexplorer.commands.output import (
    add_stochastic_arguments,
    json_number,
    seed_text,
    stochastic_draw,
)

if TYPE_CHECKING:
    from fractions import Fraction

    from fpexplorer.formats import Calculation, ExactValue, FloatFormat
    from fpexplorer.formats.arith import ModeResult

HELP = "compute a + b, a - b, a * b, a / b, fma(a, b, c) or sqrt(a) in a float format"

# An irrational square root is shown to this many significant digits (all of them correct:
# the engine brackets it to 2**-128 of its value).
ROOT_DIGITS = 36
TEXT_DIGITS = 60
VALUE_DIGITS = 28  # a result value with more significant digits is shown rounded, "≈"

EPILOG = """\
EXPRESSION: a + b, a - b, a * b, a / b (also × ÷ −), fma(a, b, c) or sqrt(a). Each operand is
a value as `fpexplorer inspect` takes it (0.1, -1.5e-3, 1/3, 0x1.8p3, inf, nan, max, ...) and
is first rounded into the format (nearest even); a bare hex integer is a code of --format
(0x3C00 is 1 in fp16; bf16:0x3F80 names another format; 0x3C00p0 is the number 15360). The
operation is then exact, and its result
is rounded under every rounding mode (or the one --rounding names), with the error and the
IEEE 754 flags.

examples:
  fpexplorer calc "0.1 + 0.2" --format fp16
  fpexplorer calc "fma(1.5, 2, -3)" --format bf16 --rounding toward_zero
  fpexplorer calc "sqrt(2)" --format binary8p3se --json
  fpexplorer calc "0x3C00 + 0x1400" --format fp16
"""

_OPERATORS = {"+": "add", "-": "sub", "−": "sub", "*": "mul", "×": "mul", "/": "div", "÷": "div"}
_CALL = re.compile(r"\s*(?P<name>fma|sqrt)\s*\((?P<arguments>.*)\)\s*", re.IGNORECASE | re.DOTALL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    # argparse takes "-1+2" or "-inf*2" for an option; only these look like options here.
    parser._negative_number_matcher = re.compile(
        r"^-(?:[0-9.]|inf|nan|max|min_|eps|0x)", re.IGNORECASE
    )
    parser.add_argument("expression", metavar="EXPRESSION", help="the operation, quoted")
    parser.add_argument(
        "-f", "--format", default="float32", metavar="NAME",
        help="the format to compute in (a name, a spec or a P3109 name; default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--rounding", choices=ROUNDING_MODES, default=None,
        help="one rounding mode (default: every mode but stochastic)",
    )  # fmt: skip
    parser.add_argument(
        "--overflow", choices=OVERFLOW_POLICIES, default=None,
        help="overflow policy (default: what ml_dtypes does for the format)",
    )  # fmt: skip
    add_stochastic_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from fpexplorer.commands.output import print_document

    return print_document(
        lambda: build(
            args.expression,
            args.format,
            args.rounding,
            args.overflow,
            args.seed,
            args.random_bits,
        ),
        render_text,
        args.json,
    )


def parse_expression(text: str, fmt: FloatFormat | None = None) -> tuple[str, list[str]]:
    """(operation, operand texts) of an expression; ValueError saying what is wrong. With
    `fmt`, operands may be its named constants (max, min_normal, ...)."""
    from fpexplorer.formats import OPERATIONS, parse_value
    from fpexplorer.formats.quoting import quote_text

    shown = quote_text(text.strip())
    call = _CALL.fullmatch(text)
    if call is not None:
        operation = call["name"].lower()
        arguments = [part.strip() for part in call["arguments"].split(",")]
        if len(arguments) != OPERATIONS[operation] or not all(arguments):
            raise ValueError(f"{shown}: {operation} takes {OPERATIONS[operation]} operand(s)")
        return operation, arguments
    splits: list[tuple[bool, str, str, str]] = []
    # Why an operand of a split where the other one reads failed ("-0x3C00 + 1": a code has
    # no sign), spaced operators first: said instead of "not an operation" when none reads.
    operand_problems: list[tuple[bool, str]] = []
    for position, character in enumerate(text):
        if character not in _OPERATORS or position == 0:
            continue
        left, right = text[:position].strip(), text[position + 1 :].strip()
        if not left or not right:
            continue
        spaced = (
            text[position - 1].isspace()
            and position + 1 < len(text)
            and (text[position + 1].isspace())
        )
        problems: list[str] = []
        for operand in (left, right):
            try:
                parse_value(operand.replace("−", "-"), fmt)
            except ValueError as error:
                problems.append(str(error))
        if len(problems) == 1:
            operand_problems.append((spaced, problems[0]))
        if problems:
            continue
        splits.append((spaced, _OPERATORS[character], left, right))
    if len(splits) > 1:
        spaced = [split for split in splits if split[0]]
        splits = spaced if len(spaced) == 1 else splits
    if len(splits) > 1:
        raise ValueError(f"{shown} is ambiguous: put spaces around the operator (1/2 / 3)")
    if not splits and operand_problems and not _is_one_value(text, fmt):
        spaced_first = sorted(operand_problems, key=lambda problem: not problem[0])
        raise ValueError(f"{shown}: {spaced_first[0][1]}")
    if not splits:
        raise ValueError(
            f"{shown}: not an operation (expected a + b, a - b, a * b, a / b, fma(a, b, c) "
            "or sqrt(a), with operands such as 0.1, -2.5e-3, 1/3, 0x1.8p3, inf)"
        )
    _, operation, left, right = splits[0]
    return operation, [left.replace("−", "-"), right.replace("−", "-")]


def _is_one_value(text: str, fmt: FloatFormat | None) -> bool:
    """Whether `text` is one operand alone ("2e-5" is no split of "2e" and "5")."""
    from fpexplorer.formats import parse_value

    try:
        parse_value(text.replace("−", "-"), fmt)
    except ValueError:
        return False
    return True


def build(
    expression: str,
    format_name: str,
    rounding: str | None = None,
    overflow: str | None = None,
    seed: int | None = None,
    random_bits: int | None = None,
) -> dict[str, Any]:
    """The JSON document of `fpexplorer calc` (ValueError for bad input)."""
    from fpexplorer.formats import calculate, get_format, parse_value
    from fpexplorer.formats.arith import DETERMINISTIC_MODES

    seed, random_bits = stochastic_draw(rounding, seed, random_bits)
    fmt = get_format(format_name)
    operation, texts = parse_expression(expression, fmt)
    operands = [parse_value(text, fmt) for text in texts]
    modes = (rounding,) if rounding else DETERMINISTIC_MODES
    calculation = calculate(
        operation,
        operands,
        fmt,
        modes=modes,
        overflow=overflow,
        seed=seed,
        random_bits=random_bits,
    )
    return {**_document(expression, texts, calculation), "seed": seed, "random_bits": random_bits}


def _document(expression: str, texts: list[str], calculation: Calculation) -> dict[str, Any]:
    fmt = calculation.format
    exact = calculation.exact
    return {
        "expression": expression,
        "operation": calculation.operation,
        "format": fmt.name,
        "spec": fmt.spec,
        "overflow_policy": calculation.overflow_policy,
        "operands": [
            {
                "input": text,
                "input_exact": _exact(operand.input),
                "code": operand.code,
                "code_hex": fmt.code_to_hex(operand.code),
                "value_exact": _exact(operand.value),
                "inexact": operand.inexact,
            }
            for text, operand in zip(texts, calculation.operands, strict=True)
        ],
        "exact": {
            "is_exact": exact.is_exact,
            "value_exact": _exact(exact.value) if exact.is_exact else None,
            "value_approx": None if exact.is_exact else _root_digits(exact.value),
            "lower": None if exact.lower is None else _exact_fraction(exact.lower),
            "upper": None if exact.upper is None else _exact_fraction(exact.upper),
            "invalid": exact.invalid,
            "divide_by_zero": exact.divide_by_zero,
        },
        "results": [
            {
                "rounding": result.rounding,
                "code": result.code,
                "code_hex": fmt.code_to_hex(result.code),
                "code_bits": fmt.code_to_bits(result.code),
                "class": fmt.classify(result.code),
                "value_exact": _exact(result.value),
                "value": _number(result.value),
                "error_abs_exact": (
                    None
                    if result.error_abs is None or result.error_is_approximate
                    else _exact_fraction(result.error_abs)
                ),
                "error_abs": json_number(result.error_abs),
                "error_ulps": json_number(result.error_ulps),
                "error_ulps_exact": (
                    None
                    if result.error_ulps is None or result.error_is_approximate
                    else _exact_fraction(result.error_ulps)
                ),
                "error_is_approximate": result.error_is_approximate,
                **_error_texts(result),
                "flags": list(result.flags.raised()),
            }
            for result in calculation.results
        ],
    }


def _error_texts(result: ModeResult) -> dict[str, str | None]:
    """The errors as the text output shows them, from the engine's Fractions: a float64
    error_abs is null past 1e308 and 0.0 below 1e-324 (an e16m47 max × max rounded toward
    zero showed no error at all, its sqrt(min_subnormal) an error of "0"). Exact when short,
    else rounded and marked "≈"; always "≈" for an irrational root's (approximate) error."""
    from fpexplorer.formats.decimal import approximate_decimal

    approximate = result.error_is_approximate
    texts: dict[str, str | None] = {"error_abs_text": None, "error_ulps_text": None}
    for key, value, keep in (
        ("error_abs_text", result.error_abs, 3 if approximate else 12),
        ("error_ulps_text", result.error_ulps, 3 if approximate else 6),
    ):
        if value is not None:
            texts[key] = approximate_decimal(value, keep=keep, shown=3, inexact=approximate)
    return texts


def _exact(value: ExactValue) -> str:
    from fpexplorer.formats import exact_decimal

    return exact_decimal(value)


def _exact_fraction(value: Fraction) -> str:
    from fpexplorer.formats import exact_decimal

    return exact_decimal(value)


def _root_digits(value: ExactValue) -> str:
    """The first ROOT_DIGITS digits of an irrational root (correct: see ROOT_DIGITS), in
    scientific notation when the point is far from them."""
    from fpexplorer.formats import exact_decimal, leading_digits

    digits, exponent, _ = leading_digits(value, ROOT_DIGITS)
    if -6 <= exponent <= ROOT_DIGITS:
        return exact_decimal(value, ROOT_DIGITS)
    return f"{digits[0]}.{digits[1:]}…e{exponent}"  # the display rule's notation: e40, e-40


def _number(value: ExactValue) -> float | None:
    if not value.is_finite:
        return None
    return json_number(value.fraction)


def _cut(text: str | None, digits: int = TEXT_DIGITS) -> str:
    if text is None:
        return "-"
    significant = sum(ch.isdigit() for ch in text.lstrip("-0."))
    if significant <= digits:
        return text
    from decimal import Decimal
    from fractions import Fraction

    from fpexplorer.formats.decimal import approximate_decimal

    value = Fraction(Decimal(text.rstrip("…")))
    return approximate_decimal(value, keep=digits, shown=digits, inexact=True)


def render_text(document: dict[str, Any]) -> str:
    """The document as lines for a terminal."""

    lines = [
        f"{document['expression'].strip()}  in {document['format']}  "
        f"(overflow {document['overflow_policy']})"
        f"{seed_text(document['seed'], document['random_bits'])}",
        "",
    ]
    for index, operand in enumerate(document["operands"]):
        label = "operands" if index == 0 else ""
        note = "  (rounded into the format)" if operand["inexact"] else ""
        lines.append(
            f"  {label:<9} {operand['input']} -> {operand['code_hex']} "
            f"{_cut(operand['value_exact'])}{note}"
        )
    exact = document["exact"]
    if exact["is_exact"]:
        lines.append(f"  {'exact':<9} {_cut(exact['value_exact'])}")
    else:
        lines.append(f"  {'exact':<9} {exact['value_approx']} (irrational)")
    lines.append("")
    # Errors are exact when short, else rounded and marked "≈" (2**-27 is not 7.45e-09).
    rows = []
    for result in document["results"]:
        error = result["error_abs_text"] or "-"
        if result["error_ulps_text"] is not None:
            error += f" ({result['error_ulps_text']} ulp)"
        value = _cut(result["value_exact"], VALUE_DIGITS)
        rows.append((result["rounding"], result["code_hex"], value, error, result["flags"]))
    # Columns as wide as their widest cell (an FP64 code is 18 characters, not 8).
    code_width = max(8, *(len(row[1]) for row in rows))
    value_width = max(len("value"), *(len(row[2]) for row in rows))
    error_width = max(22, *(len(row[3]) for row in rows))
    lines.append(
        f"  {'rounding':<16} {'code':<{code_width}} {'value':<{value_width}}  "
        f"{'error':<{error_width}} flags"
    )
    for rounding, code, value, error, flags in rows:
        lines.append(
            f"  {rounding:<16} {code:<{code_width}} {value:<{value_width}}  "
            f"{error:<{error_width}} {', '.join(flags) or '-'}"
        )
    return "\n".join(lines)
