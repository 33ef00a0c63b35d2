"""`parse_value`: text typed by a person into an exact value. Only ValueError escapes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from .exact import ExactValue, decimal_str_to_int
from .quoting import QUOTE_LIMIT, at_character, cut_text, quote_text

if TYPE_CHECKING:
    from .format import FloatFormat

# Exact values of 10**exponent are built as Python ints: beyond this the number would take
# megabytes and no format of 64 bits or fewer could tell it from infinity or zero anyway.
MAX_DECIMAL_EXPONENT = 100_000
MAX_BINARY_EXPONENT = 340_000
MAX_TEXT_LENGTH = 200_000

CONSTANTS = ("max", "min_normal", "min_subnormal", "eps")

_DECIMAL = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?")
_HEX = re.compile(
    r"0[xX](?P<int>[0-9a-fA-F]*)(?:\.(?P<frac>[0-9a-fA-F]*))?(?:[pP](?P<exp>[+-]?[0-9]+))?"
)
# How far typed text reads as the start of a value (a sign, a decimal or hex float with "_"
# grouping, "/" and another): the character after that is the one a message points at.
_NUMBER_START = (
    r"(?:0[xX][0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?(?:[pP][+-]?[0-9_]*)?"
    r"|[0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9_]*)?)"
)
_VALUE_START = re.compile(rf"[+\-\u2212]?\s*{_NUMBER_START}(?:\s*/\s*{_NUMBER_START})?")


@dataclass(frozen=True, slots=True)
class CodeEntry:
    """Text written as a code (a bit pattern): "0x3C00" in the selected format, or
    "fp16:0x3C00" in the one it names (`format_named`)."""

    format: FloatFormat
    code: int
    format_named: bool


# The one rule for a bare hex integer, in every place a value is typed (the app's entry and
# operand fields, `inspect VALUE`, `calc` operands, the library): as float.exposed and Float
# Toy read it, the bit pattern of the selected format. A hex float (0x1.8p3, 0x3C00p0) is a
# number. Said in each place's help by this text.
BARE_HEX_RULE = (
    "a bare 0x3C00 (or 0b…, 0|01111|…) is a code of the selected format; fp16:0x3C00 names "
    "the format; 0x3C00p0 is the number 15360"
)


def parse_entry(
    text: str, fmt: FloatFormat | None = None, known: Sequence[FloatFormat] = ()
) -> ExactValue | CodeEntry:
    """Text typed where a value is expected: a value (see `parse_value`) or a code.

    A code is written 0x3C00, 0b0011110000000000 or as the fields 0|01111|0000000000 and
    read in `fmt`, the selected format; or as FORMAT:CODE ("fp16:0x3C00", "e5m2:0b01111100";
    FORMAT is a name, a spec, or the name of one of `known`). Without `fmt` a bare code has
    no meaning: ValueError naming the two ways to write it. ValueError for anything wrong.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_LENGTH:
        raise ValueError(f"value text too long ({len(text)} characters, at most {MAX_TEXT_LENGTH})")
    # "−0x3C00" with the minus sign the app writes is refused as "-0x3C00" is (a code has
    # no sign), not read as the number -15360.
    entry = _code_entry(text.strip().replace("\u2212", "-"), fmt, known)
    return entry if entry is not None else _parse_number(text, fmt)


def parse_value(
    text: str, fmt: FloatFormat | None = None, known: Sequence[FloatFormat] = ()
) -> ExactValue:
    """Parse a number exactly.

    Accepts decimals of any length ("0.1", "-12.5e-3"), fractions ("1/3", "-2.5/7"), hex
    floats ("0x1.8p3"), "inf", "-inf", "+inf", "nan", "-0", and with `fmt` the named constants
    "max", "min_normal", "min_subnormal", "eps" (optionally signed). A code ("0x3C00" with
    `fmt`, "fp16:0x3C00" always; see `parse_entry`) stands for its value. Anything else
    raises ValueError saying what is wrong.
    """
    entry = parse_entry(text, fmt, known)
    if isinstance(entry, CodeEntry):
        return entry.format.to_exact(entry.code)
    return entry


def _code_entry(
    compact: str, fmt: FloatFormat | None, known: Sequence[FloatFormat]
) -> CodeEntry | None:
    head, colon, tail = compact.rpartition(":")
    if not colon:
        if fmt is None:
            unsigned = "".join(compact.split()).lstrip("+-")
            # A code written wrongly ("0x3G00") gets parse_code's message, pointing at the digit.
            if written_as_code(unsigned) and _code_digits(unsigned) is not None:
                # A hex float is the number only for a code in hex: "0b0011p0" is none.
                number = (
                    f"; for the number write a hex float, {cut_text(compact)}p0"
                    if unsigned[:2].lower() == "0x"
                    else ""
                )
                raise ValueError(
                    f"{quote_text(compact)} is written as a code (a bit pattern), but no "
                    f"format is selected: name it, as fp16:{cut_text(unsigned)}{number}"
                )
            return None
        code = parse_code(compact, fmt)
        return None if code is None else CodeEntry(fmt, code, format_named=False)
    head = head.strip()
    if not head or not written_as_code(tail):
        return None  # not a code entry: "1:2" is a typo, read (and refused) as a number
    from .registry import get_format  # the registry imports this module

    by_name = {known_format.name: known_format for known_format in known}
    try:
        named = by_name.get(head) or get_format(head)
    except ValueError as error:
        raise ValueError(f"{quote_text(head)} before ':' is not a format: {error}") from None
    try:
        code = parse_code(tail, named)
    except ValueError as error:
        raise ValueError(f"after '{head}:' comes a raw code: {error}") from None
    if code is None:
        raise ValueError(
            f"after '{head}:' comes a raw code such as 0x3C00 or 0b0011110000000000, not "
            f"{quote_text(tail.strip(), 40)}"
        )
    return CodeEntry(named, code, format_named=True)


def _parse_number(text: str, fmt: FloatFormat | None) -> ExactValue:
    # The minus sign and infinity as the app itself writes them ("−∞" in the block editor,
    # "−" in formulas), so that what it shows can be typed back.
    stripped = text.strip().replace("\u2212", "-").replace("∞", "inf")
    if not stripped:
        raise ValueError("empty value")
    negative = False
    body = stripped
    if body[0] in "+-":
        negative = body[0] == "-"
        body = body[1:].lstrip()
    if not body:
        raise ValueError(f"{quote_text(text.strip())}: a sign with no number")
    lowered = body.lower()
    if lowered in ("inf", "infinity"):
        return ExactValue.infinity(negative)
    if lowered == "nan":
        return ExactValue.nan(negative)
    if lowered in CONSTANTS:
        return _constant(lowered, negative, fmt)
    if body[0] in "+-":
        raise ValueError(f"{quote_text(text.strip())}: more than one sign")
    if "_" in body:
        # Digit grouping, as in Python literals: 1_000, 0x1_0p3; "_1" or "1__0" is a typo.
        digit = "[0-9a-fA-F]" if body[:2].lower() == "0x" else "[0-9]"
        misplaced = re.search(f"(?<!{digit})_|_(?!{digit})", text.strip())
        if misplaced is not None:
            raise ValueError(
                f"{quote_text(text.strip())}: {at_character(text.strip(), misplaced.start())} is "
                "misplaced: '_' may only group digits, as in 1_000"
            )
        body = body.replace("_", "")
    if "/" in body:
        numerator_text, _, denominator_text = body.partition("/")
        numerator = _unsigned_number(numerator_text.strip(), text)
        denominator = _unsigned_number(denominator_text.strip(), text)
        if denominator == 0:
            raise ValueError(f"{quote_text(text.strip())}: division by zero")
        magnitude = numerator / denominator
    else:
        magnitude = _unsigned_number(body, text)
    return ExactValue("finite", negative, magnitude)


def _constant(name: str, negative: bool, fmt: FloatFormat | None) -> ExactValue:
    if fmt is None:
        raise ValueError(f"{name!r} needs a format (it is a property of one)")
    value = getattr(fmt, name)
    if value is None:
        raise ValueError(f"{fmt.name} has no {name.replace('_', ' ')}")
    if negative and not fmt.signed:
        raise ValueError(f"{fmt.name} is unsigned: -{name} does not exist")
    return ExactValue("finite", negative, value)


def _unsigned_number(body: str, original: str) -> Fraction:
    shown = original.strip()
    where = quote_text(shown)
    if not body:
        raise ValueError(f"{where}: a number is missing")
    if body[:2] in ("0x", "0X"):
        match = _HEX.fullmatch(body)
        if match is None or not (match["int"] or match["frac"]):
            raise ValueError(f"{where}: not a hex float{_offending(shown)} (expected e.g. 0x1.8p3)")
        whole = match["int"] or ""
        fraction_digits = match["frac"] or ""
        exponent = _exponent(match["exp"], MAX_BINARY_EXPONENT, where)
        mantissa = int(whole + fraction_digits, 16) if whole + fraction_digits else 0
        return Fraction(mantissa) * Fraction(2) ** (exponent - 4 * len(fraction_digits))
    match = _DECIMAL.fullmatch(body)
    if match is None and body.count(",") == 1 and _DECIMAL.fullmatch(body.replace(",", ".")):
        # "1,5": a decimal comma, in much of Europe.
        raise ValueError(
            f"{where}: a comma is not a decimal point here: write "
            f"{cut_text(shown.replace(',', '.'))}"
        )
    if match is None or not (match["int"] or match["frac"]):
        raise ValueError(
            f"{where}: not a number{_offending(shown)} (expected a decimal such as 1.5e-3, a "
            "fraction such as 1/3, a hex float such as 0x1.8p3, inf, nan, or "
            "max/min_normal/min_subnormal/eps)"
        )
    whole = match["int"] or ""
    fraction_digits = match["frac"] or ""
    exponent = _exponent(match["exp"], MAX_DECIMAL_EXPONENT, where)
    all_digits = (whole + fraction_digits).lstrip("0") or "0"
    mantissa = decimal_str_to_int(all_digits)
    power = exponent - len(fraction_digits)
    if mantissa and abs(power) > MAX_DECIMAL_EXPONENT + len(all_digits):
        raise ValueError(
            f"{where}: decimal exponent out of range (at most ±{MAX_DECIMAL_EXPONENT})"
        )
    return Fraction(mantissa) * Fraction(10) ** power


def _offending(shown: str) -> str:
    """ ": 'x' at character 3001 of 3001", the first character of `shown` that cannot
    continue a value; "" when every character could (the text ends too early: "1e")."""
    end = _VALUE_START.match(shown)
    index = end.end() if end is not None else 0
    return f": {at_character(shown, index)}" if index < len(shown) else ""


def _exponent(text: str | None, limit: int, where: str) -> int:
    if text is None:
        return 0
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > len(str(limit)) or int(digits) > limit:
        raise ValueError(f"{where}: exponent out of range (at most ±{limit})")
    return -int(digits) if text.startswith("-") else int(digits)


# ---- codes ---------------------------------------------------------------------------------

# A code is written in hex or binary with its prefix, or as the fields that the read-outs
# and `inspect` print (0|01111|0000000000). "_" and spaces group digits anywhere; "|" parts
# fields, in binary only. At least one digit: "0x_" is not a code.
_HEX_CODE = re.compile(r"0x[0-9a-f_]*[0-9a-f][0-9a-f_]*", re.IGNORECASE)
_BIN_CODE = re.compile(r"0b[01_|]*[01][01_|]*", re.IGNORECASE)
_FIELD_CODE = re.compile(r"[01]+(?:\|[01]+)+")
_DECIMAL_CODE = re.compile(r"[0-9_]*[0-9][0-9_]*")
# Written with a code's prefix, rightly or not ("0x3G00" is a typo), unlike a hex float,
# which is a value: "0x1.8p3", "0x1p-2" (a point or an exponent "p").
_PREFIXED = re.compile(r"0x[0-9a-oq-z_|]*|0b[0-9a-z_|]*", re.IGNORECASE)
_CODE_FORMS = "0x3C00, 0b0011110000000000 or the fields 0|01111|0000000000"


def written_as_code(text: str) -> bool:
    """Whether `text` is written as a code (0x…, 0b…, fields 0|01111|…), right or wrong,
    rather than as a value: a hex float (0x1.8p3) is a value."""
    compact = "".join(text.split()).lstrip("+-")
    return bool(_PREFIXED.fullmatch(compact) or _FIELD_CODE.fullmatch(compact))


def parse_code(text: str, fmt: FloatFormat, *, decimal: bool = False) -> int | None:
    """A code of `fmt` typed by a person: 0x3C00, 0b0011_1100_0000_0000, 0|01111|0000000000
    (what the read-outs print); with `decimal`, also a plain integer (15360), for a place
    where only a code can be meant (`inspect --bits`, `quantize --scale-code`).

    The one reader of codes, for the command line and the GUI. None when `text` is not
    written as a code (so it may be a value: 0.5, 0x1.8p3); ValueError when it is, but is
    wrong: a sign (a code's sign is its top bit), a digit not of its base, more bits than
    the format has, or fields ("|") of other widths than its own.
    """
    read = _code_digits(text, decimal)
    if read is None:
        return None
    compact, code = read
    if code >= 1 << fmt.width:
        raise ValueError(
            f"code {cut_text(compact)} has more than {fmt.width} bits: {fmt.name} codes go up to "
            f"{fmt.code_to_hex((1 << fmt.width) - 1)}"
        )
    digits = compact[2:].replace("_", "").replace("|", "")
    if compact[:2].lower() == "0b" and len(digits) > fmt.width:
        # Binary is written bit for bit (Copy Bits gives exactly the width): more digits than
        # the format has bits are a code of a wider format or a typo, not zero padding.
        # 0b00111100000000001 (FP16's 1.0 and a stray digit) read as 0x7801, silently.
        # Hex stays free to pad (0x00003C00, a 32-bit word).
        raise ValueError(
            f"{cut_text(compact)} has {len(digits)} binary digits, but {fmt.name} codes have "
            f"{fmt.width}: name the format it is a code of, as FORMAT:{cut_text(compact)}"
        )
    if "|" in compact:
        # The fields of another format (E4M3's 0|0111|000, copied from its bits) are not a
        # code of this one, though they fit in its width.
        fields = compact[2:] if compact[:2].lower() == "0b" else compact
        written = "|".join(str(len(part.replace("_", ""))) for part in fields.split("|"))
        own = "|".join(str(len(part)) for part in fmt.code_to_bits(0).split("|"))
        if written != own:
            raise ValueError(
                f"{cut_text(compact)} has fields of {written} bits, but {fmt.name}'s are "
                f"{own}: name the format they are fields of, as FORMAT:{cut_text(compact)}"
            )
    return code


def _code_digits(text: str, decimal: bool = False) -> tuple[str, int] | None:
    """(the text without spaces, the code it writes) by `parse_code`'s rules, with no width
    check; None when `text` is not written as a code."""
    if not isinstance(text, str):
        raise ValueError(f"a code to read must be text, not {type(text).__name__}")
    compact = "".join(text.split())
    unsigned = compact.lstrip("+-")
    if unsigned != compact and (
        written_as_code(unsigned) or (decimal and _DECIMAL_CODE.fullmatch(unsigned))
    ):
        # "0x3C00" is a code (1.0 in FP16), so "-0x3C00" read as -15360 would mislead.
        hint = f"; for a number write a hex float, as {compact}p0" if "x" in compact else ""
        if len(compact) > QUOTE_LIMIT:
            hint = "; for a number write a hex float, ending in p0" if "x" in compact else ""
        raise ValueError(f"{cut_text(compact)}: a code has no sign (the sign is its top bit){hint}")
    if _HEX_CODE.fullmatch(compact):
        code = int(compact[2:].replace("_", ""), 16)
    elif _BIN_CODE.fullmatch(compact):
        code = int(compact[2:].replace("_", "").replace("|", ""), 2)
    elif _FIELD_CODE.fullmatch(compact):
        code = int(compact.replace("|", ""), 2)
    elif decimal and _DECIMAL_CODE.fullmatch(compact):
        code = decimal_str_to_int(compact.replace("_", ""))  # int() refuses 4,300+ digits
    elif _PREFIXED.fullmatch(compact):
        base = "hex" if compact[1] in "xX" else "binary"
        digits = "0123456789abcdefABCDEF_" if base == "hex" else "01_|"
        wrong = next((i for i in range(2, len(compact)) if compact[i] not in digits), None)
        where = "" if wrong is None else f": {at_character(compact, wrong)}"
        raise ValueError(
            f"{quote_text(compact)}: not a {base} code{where} (codes are written as {_CODE_FORMS})"
        )
    else:
        return None
    return compact, code
