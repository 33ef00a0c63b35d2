"""`fpexplorer inspect`: how a value rounds into formats, or what a code means, bit by bit."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from fpexplorer.commands.output import json_number, seed_text, stochastic_draw

if TYPE_CHECKING:
    from fractions import Fraction

    from fpexplorer.formats import ExactValue, FloatFormat, Rounded

HELP = "show how a value rounds into float formats (or decode a code with --bits)"

DEFAULT_FORMATS = ("float32", "tfloat32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
ROUNDING_MODES = (
    "nearest_even",
    "nearest_away",
    "toward_zero",
    "toward_positive",
    "toward_negative",
    "round_to_odd",
    "stochastic",
)
OVERFLOW_POLICIES = ("ieee", "saturate", "saturate_propagate", "nan")
# Text output cuts exact decimals that do not terminate (and errors) to this many digits;
# --json always carries every digit of terminating values.
TEXT_DIGITS = 80

EPILOG = """\
VALUE: a decimal of any length (0.1, -1.5e-3), a fraction (1/3), a hex float (0x1.8p3),
inf, -inf, nan, -0, or max / min_normal / min_subnormal / eps of each format. A bare hex
integer is a code (bit pattern), as in the app's entry field: 0x3C00 (or 0b..., the fields
0|01111|0000000000) of the one --format; fp16:0x3C00 names its format, and rounds its value
into the formats shown; 0x3C00p0 is the number 15360.
Negative values work as they are: fpexplorer inspect -1e-3 -f fp16.
FORMAT: a name (float16, fp16, bf16, e4m3, e8m0, ...: see `fpexplorer formats`), a P3109
name binary{K}p{P}{s|u}{e|f} (binary8p3se, binary8p4uf, ...) or a spec such as e6m9 or
e4m3:bias=11:encoding=fnuz:subnormals=off. P3109's saturation modes are overflow policies:
SatFinite = saturate, SatPropagate = saturate_propagate, OvfInf = ieee.

examples:
  fpexplorer inspect 0.1 --format fp16 bf16
  fpexplorer inspect 65520 -f fp16 --rounding toward_zero
  fpexplorer inspect 300 -f binary8p4se --overflow saturate_propagate
  fpexplorer inspect 1/3 --all --json
  fpexplorer inspect fp16:0x3C00 -f bf16 e4m3
  fpexplorer inspect --bits 0x3c00 --format fp16
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fpexplorer.commands.output import accept_negative_values, add_stochastic_arguments

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    accept_negative_values(parser)
    parser.add_argument(
        "value", nargs="?", metavar="VALUE",
        help="the value to round (a bare 0x3C00 is a code of the one --format: see below)",
    )  # fmt: skip
    parser.add_argument(
        "-f", "--format", dest="formats", action="extend", nargs="+", metavar="NAME",
        help=f"formats to show (repeatable; default: {', '.join(DEFAULT_FORMATS)})",
    )  # fmt: skip
    parser.add_argument("--all", action="store_true", help="every named format")
    parser.add_argument(
        "--rounding", choices=ROUNDING_MODES, default="nearest_even",
        help="rounding mode (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--overflow", choices=OVERFLOW_POLICIES, default=None,
        help="overflow policy (default: what ml_dtypes does for each format)",
    )  # fmt: skip
    add_stochastic_arguments(parser)
    parser.add_argument(
        "--bits", metavar="CODE",
        help="decode CODE (0x.., 0b.., 0|01111|0000000000 or decimal) of the one --format "
        "instead of rounding",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from fpexplorer.commands.output import print_document

    return print_document(lambda: _build(args), _render_text, args.json)


# ---- building the document -----------------------------------------------------------


def _resolve_formats(args: argparse.Namespace) -> list[FloatFormat]:
    from fpexplorer.formats import get_format, list_formats

    if args.all and args.formats:
        raise ValueError("give --format or --all, not both")
    if args.all:
        return list_formats()
    names: list[str] = []
    for item in args.formats or DEFAULT_FORMATS:
        parts = [part for part in item.split(",") if part.strip()]
        # `-f ""` (an unset shell variable) names no format: get_format says so.
        names.extend(parts or [item])
    formats: list[FloatFormat] = []
    for name in names:
        fmt = get_format(name)
        if fmt not in formats:
            formats.append(fmt)
    return formats


def _reads_code(text: str, fmt: FloatFormat) -> bool:
    from fpexplorer.formats import parse_code

    try:
        return parse_code(text, fmt) is not None
    except ValueError:
        return False


def _build(args: argparse.Namespace) -> dict[str, Any]:
    from fpexplorer.formats import get_format

    if args.bits is not None:
        if args.value is not None:
            raise ValueError("give a VALUE or --bits CODE, not both")
        if args.all or not args.formats:
            raise ValueError("--bits needs exactly one --format NAME")
        formats = _resolve_formats(args)
        if len(formats) != 1:
            raise ValueError("--bits needs exactly one --format NAME")
        fmt = formats[0]
        code = _parse_code(args.bits, fmt)
        return {"bits": args.bits, "results": [_describe_code(fmt, code)]}
    if args.value is None:
        # `inspect --format fp16 0.1`: the value was taken as a format name.
        if args.formats and len(args.formats) > 1:
            try:
                get_format(args.formats[-1])
            except ValueError:
                args.value = args.formats.pop()
        if args.value is None:
            raise ValueError("give a VALUE to round (or --bits CODE --format NAME)")
    seed, random_bits = stochastic_draw(args.rounding, args.seed, args.random_bits)
    formats = _resolve_formats(args)
    from fpexplorer.formats import CodeEntry, parse_entry, parse_value
    from fpexplorer.formats.parse import written_as_code
    from fpexplorer.formats.quoting import cut_text, quote_text

    # A bare code (0x3C00, 0b…, 0|01111|…) is a code of the selected format, as in the app's
    # entry field; with several formats selected it would be a different value in each. Said
    # before reading it in the first one: "0x1FFFF -f fp16 fp32" is not about fp16's width.
    value = args.value.strip()
    if len(formats) > 1 and ":" not in value and value[:1] not in "+-−" and written_as_code(value):
        code = cut_text("".join(args.value.split()), 40)
        # The example names a selected format the code is one of (0x1FFFF is none of fp16's),
        # the narrowest: 0x3C00 with the default formats is an FP16 code more likely than
        # FP32's (the first of them that holds it).
        readers = [fmt for fmt in formats if _reads_code(value, fmt)] or formats
        readers = sorted(readers, key=lambda fmt: fmt.width)
        in_hex = code[:2].lower() == "0x"
        number = f"; for the number write a hex float ({code}p0)" if in_hex else ""
        raise ValueError(
            f"{quote_text(value)} is a code of the selected format, and {len(formats)} are "
            f"selected: give one --format, or name its format ({readers[0].name}:{code}){number}"
        )
    first = parse_entry(args.value, formats[0])

    results = []
    for fmt in formats:
        exact = parse_value(args.value, fmt)
        rounded = fmt.round(exact, args.rounding, args.overflow, seed=seed, random_bits=random_bits)
        results.append(_describe_rounding(rounded))
    common_input: ExactValue | None
    if isinstance(first, CodeEntry):
        common_input = first.format.to_exact(first.code)
    else:
        try:
            common_input = parse_value(args.value)
        except ValueError:  # a named constant (max, eps, ...): its value differs per format
            common_input = None
    return {
        "input": args.value,
        "input_exact": _exact_text(common_input),
        "rounding": args.rounding,
        "overflow": args.overflow or "default",
        "seed": seed,
        "random_bits": random_bits,
        "results": results,
    }


def _parse_code(text: str, fmt: FloatFormat) -> int:
    """--bits CODE, read by the GUI's rules (`formats.parse_code`), where a plain integer
    is a code too: nothing else can be meant here."""
    from fpexplorer.formats import parse_code
    from fpexplorer.formats.quoting import quote_text

    try:
        code = parse_code(text, fmt, decimal=True)
    except ValueError as error:
        raise ValueError(f"--bits: {error}") from None
    if code is None:
        raise ValueError(
            f"--bits {quote_text(text.strip())}: not a code (expected 0x.., 0b.., the fields "
            "0|01111|0000000000 or an integer)"
        )
    return code


def _exact_text(value: ExactValue | None, max_digits: int | None = None) -> str | None:
    from fpexplorer.formats import exact_decimal

    if value is None:
        return None
    return exact_decimal(value, max_digits)


def _fraction_text(value: Fraction | None, max_digits: int | None = None) -> str | None:
    from fpexplorer.formats import exact_decimal

    return None if value is None else exact_decimal(value, max_digits)


def _describe_code(fmt: FloatFormat, code: int) -> dict[str, Any]:
    from fpexplorer.formats.decimal import shortest_display

    exact = fmt.to_exact(code)
    fields = fmt.fields(code)
    special = not exact.is_finite
    # A JSON number where float64 holds the value: e16m47's smallest subnormal (2e-9878)
    # read 0.0 and its max inf; null then, exact in value_exact. -0 keeps its sign.
    value: float | None = None
    if exact.is_finite:
        value = -0.0 if exact.is_zero and exact.negative else json_number(exact.fraction)
    neighbours = {}
    for key, step, gap in (
        ("next_up", fmt.next_up, fmt.gap_up),
        ("next_down", fmt.next_down, fmt.gap_down),
    ):
        other = step(code)
        neighbours[key] = {
            "code_hex": fmt.code_to_hex(other),
            "value_exact": _exact_text(fmt.to_exact(other)),
            "gap": _fraction_text(gap(code)),
        }
    return {
        "format": fmt.name,
        "aliases": list(fmt.aliases),
        "spec": fmt.spec,
        "width": fmt.width,
        "code": code,
        "code_hex": fmt.code_to_hex(code),
        "code_bits": fmt.code_to_bits(code),
        "layout": [
            part
            for part, present in (
                ("sign", fmt.signed),
                ("exponent", True),
                ("fraction", fmt.mantissa_bits > 0),
            )
            if present
        ],
        "class": fmt.classify(code),
        "value_exact": _exact_text(exact),
        "value": value,
        "shortest": fmt.shortest_decimal(code),  # repr style: float64's is repr(float)
        "shortest_text": shortest_display(fmt, code),  # the same digits, the app's notation
        # inf and NaN are special codes: no power of two, no significand (FP16's inf read as
        # 2^16 x 1 was 65536), null as the text output says.
        "fields": {
            "sign": fields.sign if fmt.signed else None,  # an unsigned format has no sign bit
            "biased_exponent": fields.biased_exponent,
            "unbiased_exponent": None if special else fields.unbiased_exponent,
            "fraction": fields.fraction,
            "significand": None if special else _fraction_text(fields.significand),
            "is_subnormal": fields.is_subnormal,
        },
        **neighbours,
        "ulp": _fraction_text(fmt.ulp(code)),
    }


def _describe_rounding(rounded: Rounded) -> dict[str, Any]:
    description = _describe_code(rounded.format, rounded.code)
    description.update(
        {
            "input_exact": _exact_text(rounded.input),
            "rounding": rounded.rounding,
            "overflow_policy": rounded.overflow_policy,
            "error_abs": json_number(rounded.error_abs),
            "error_rel": json_number(rounded.error_rel),
            "error_ulps": json_number(rounded.error_ulps),
            "error_abs_exact": _fraction_text(rounded.error_abs),
            "error_rel_exact": _fraction_text(rounded.error_rel),
            "error_ulps_exact": _fraction_text(rounded.error_ulps),
            "overflow": rounded.overflow,
            "underflow": rounded.underflow,
            "inexact": rounded.inexact,
            "invalid": rounded.invalid,
        }
    )
    return description


# ---- text ----------------------------------------------------------------------------


def _cut(text: str | None, digits: int = TEXT_DIGITS, note: bool = True) -> str:
    """Shorten a long exact decimal for the terminal (saying how many digits it has)."""
    if text is None:
        return "-"
    significant = sum(ch.isdigit() for ch in text.lstrip("-0."))
    if significant <= digits:
        return text
    from decimal import Decimal
    from fractions import Fraction

    from fpexplorer.formats.decimal import approximate_decimal, display_decimal

    number = Fraction(Decimal(text.rstrip("…")))
    if not note:
        return approximate_decimal(number, keep=digits, shown=digits, inexact=True)
    # The value's own first digits, cut and marked "…" as the app shows them: rounded, the
    # last one shown of float64's max read 2854 where its digits run 28538…
    cut = display_decimal(number, exact_digits=digits, cut_digits=digits)
    return f"{cut} ({significant} digits, all in --json)"


def _render_text(document: dict[str, Any]) -> str:
    from fpexplorer.commands.output import exact_or_rounded

    lines: list[str] = []
    if "input" in document:
        lines.append(
            f"input {document['input']}  rounding {document['rounding']}  "
            f"overflow {document['overflow']}"
            f"{seed_text(document['seed'], document['random_bits'])}"
        )
    for result in document["results"]:
        lines.append("")
        aliases = f" ({', '.join(result['aliases'])})" if result["aliases"] else ""
        lines.append(f"{result['format']}{aliases}, {result['width']} bits")
        layout = "|".join(result["layout"])
        rows = [
            ("code", f"{result['code_hex']}  {result['code_bits']}   ({layout})"),
            ("class", result["class"]),
            ("value", _cut(result["value_exact"])),
            ("shortest", result["shortest_text"]),
        ]
        fields = result["fields"]
        # E8M0 and other unsigned formats have no sign bit: "sign 0" named one.
        sign = "" if fields["sign"] is None else f"sign {fields['sign']}, "
        rows.append(
            (
                "fields",
                f"{sign}exponent {fields['biased_exponent']} "
                f"(2^{fields['unbiased_exponent']}), fraction {fields['fraction']:#x}, "
                f"significand {fields['significand']}"
                if result["class"] not in ("inf", "nan")
                # A special code: "(2^16) ... significand 1" read as 65536 for FP16's inf.
                else f"{sign}exponent {fields['biased_exponent']}, fraction "
                f"{fields['fraction']:#x} ({result['class']}: a special code, no power of two "
                "or significand)",
            )
        )
        for key, label, sign in (("next_up", "next up", "+"), ("next_down", "next down", "-")):
            neighbour = result[key]
            gap = neighbour["gap"]
            gap_text = "no gap"
            if gap is not None:
                shown = exact_or_rounded(gap, keep=12, shown=12)
                gap_text = (
                    f"gap ≈{sign}{shown[1:]}" if shown.startswith("≈") else f"gap {sign}{shown}"
                )
            rows.append(
                (
                    label,
                    f"{neighbour['code_hex']}  {_cut(neighbour['value_exact'], 24, note=False)}"
                    f"  {gap_text}",
                )
            )
        if "error_abs_exact" in result:
            if result["error_abs_exact"] is None:
                error = "- (not finite)"
            else:
                # Exact when short, else rounded and marked "≈" (1/3 ulp is not 0.3333 ulp).
                error = f"abs {exact_or_rounded(result['error_abs_exact'], keep=12, shown=12)}"
                relative, ulps = result["error_rel_exact"], result["error_ulps_exact"]
                if relative is not None:
                    error += f", rel {exact_or_rounded(relative, keep=12, shown=3)}"
                if ulps is not None:
                    error += f", {exact_or_rounded(ulps, keep=12, shown=4)} ulp"
            rows.append(("error", error))
            flags = [
                name for name in ("overflow", "underflow", "inexact", "invalid") if result[name]
            ]
            rows.append(("flags", ", ".join(flags) or "exact"))
        lines.extend(f"  {label:<10} {text}" for label, text in rows)
    return "\n".join(lines)
