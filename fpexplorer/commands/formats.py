"""`fpexplorer formats`: the property table of every named format."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "list the named float formats and their properties"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    import json

    rows = [_describe(fmt) for fmt in _formats()]
    if args.json:
        print(json.dumps({"formats": rows}, indent=2, allow_nan=False))
    else:
        print(_render_text(rows))
    return 0


def _formats() -> list[Any]:
    from fpexplorer.formats import list_formats

    return list_formats()


def _describe(fmt: Any) -> dict[str, Any]:
    from fpexplorer.formats import exact_decimal

    def both(value: Any) -> tuple[float | None, str | None]:
        if value is None:
            return None, None
        return float(value), exact_decimal(value)

    max_float, max_exact = both(fmt.max)
    normal_float, normal_exact = both(fmt.min_normal)
    subnormal_float, subnormal_exact = both(fmt.min_subnormal)
    eps_float, eps_exact = both(fmt.eps)
    return {
        "format": fmt.name,
        "aliases": list(fmt.aliases),
        "spec": fmt.spec,
        "description": fmt.description,
        "width": fmt.width,
        "exponent_bits": fmt.exponent_bits,
        "mantissa_bits": fmt.mantissa_bits,
        "bias": fmt.bias,
        "encoding": fmt.encoding,
        "signed": fmt.signed,
        "subnormals": fmt.subnormals,
        "has_inf": fmt.has_inf,
        "has_nan": fmt.has_nan,
        "has_negative_zero": fmt.has_negative_zero,
        "max": max_float,
        "max_exact": max_exact,
        "min_normal": normal_float,
        "min_normal_exact": normal_exact,
        "min_subnormal": subnormal_float,
        "min_subnormal_exact": subnormal_exact,
        "eps": eps_float,
        "eps_exact": eps_exact,
        "decimal_digits": fmt.decimal_digits,
        "finite_count": fmt.finite_count,
        "default_overflow": fmt.default_overflow,
    }


def _render_text(rows: list[dict[str, Any]]) -> str:
    from decimal import Decimal
    from fractions import Fraction

    from fpexplorer.formats.decimal import approximate_decimal

    def number(row: dict[str, Any], key: str, width: int) -> str:
        # Exact when it fits (FP16's max is 65504, not 6.55e4), else 4 digits marked "≈"
        # (FP16's eps 0.0009765625 is not 0.0009766), in the app's notation: ≈1.798e308.
        value, exact = row[key], row[f"{key}_exact"]
        if value is None:
            return "-"
        if len(exact) <= width:
            return exact
        return approximate_decimal(Fraction(Decimal(exact)), keep=4, shown=4)

    header = (
        f"{'format':<19}{'bits':>4} {'E':>2} {'M':>2} {'bias':>5}  {'max':>11} "
        f"{'min normal':>11} {'min subn.':>11} {'eps':>10} {'digits':>6}  {'specials':<22} "
        "aliases"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        specials = []
        if row["has_inf"]:
            specials.append("inf")
        if row["has_nan"]:
            specials.append("nan")
        if not row["has_negative_zero"] and row["signed"]:  # unsigned says it already
            specials.append("no -0")
        if not row["signed"]:
            specials.append("unsigned")
        lines.append(
            f"{row['format']:<19}{row['width']:>4} {row['exponent_bits']:>2} "
            f"{row['mantissa_bits']:>2} {row['bias']:>5}  {number(row, 'max', 11):>11} "
            f"{number(row, 'min_normal', 11):>11} {number(row, 'min_subnormal', 11):>11} "
            # (m + 1) log10 2 is irrational: rounded once, from the full value (15.95 for
            # float64, where rounding 15.9546 to 15.955 first gave 15.96).
            f"{number(row, 'eps', 10):>10} {'≈' + format(row['decimal_digits'], '.2f'):>6}  "
            f"{', '.join(specials) or 'none':<22} {', '.join(row['aliases'])}"
        )
    lines.append("")
    lines.append(
        "Exact values: fpexplorer formats --json. Custom formats: specs such as e6m9 or "
        "e4m3:bias=11:encoding=fnuz (see fpexplorer inspect --help)."
    )
    return "\n".join(lines)
