"""The IEEE P3109 family of small binary formats, as `FloatFormat` data.

Draft followed: IEEE Working Group P3109, "Interim Report on Arithmetic Formats for Machine
Learning", v3 (the public draft "IEEE WG P3109 Interim Report v3" of github.com/P3109/Public:
the parametrised family binaryKpP with signedness s/u and domain e/f, and its saturation
modes), as gfloat 0.5.2 implements it (``format_info_p3109``); the tests check every code of
every format against gfloat. The report is an unapproved draft and later revisions exist;
they have not been checked here.

``binary{K}p{P}{s|u}{e|f}``: K bits, precision P (P - 1 fraction bits), signed or unsigned,
extended (with infinities) or finite.

- signed: K - P exponent bits, bias 2**(K-P-1), P = 1 .. K-1; unsigned: K - P + 1 exponent
  bits, bias 2**(K-P), P = 1 .. K;
- one zero (no -0) and one NaN: the negative-zero code when signed (0x80 for K = 8), the
  all-ones code when unsigned;
- extended: ±inf at the top magnitude codes (0x7F / 0xFF signed, 0xFE unsigned);
- subnormals, except at P = 1, where there are no fraction bits to hold them.

Saturation modes map onto the engine's overflow policies (`SATURATION_MODES`): SatFinite is
``saturate`` (every overflow, infinite inputs included, to ±max), SatPropagate is
``saturate_propagate`` (finite overflow to ±max, ±inf kept), OvfInf is ``ieee`` (overflow to
±inf in extended formats, NaN in finite ones). With every mode, directed roundings toward
the finite side (toward_zero, toward_negative of a positive overflow, toward_positive of a
negative one) give ±max for a finite input, as IEEE 754 §7.4 does.

Still open in the draft, and what this engine does meanwhile:

- negative inputs into an unsigned format: NaN (the invalid flag is raised), as for any
  unsigned format here; -0 becomes the one zero;
- the number of random bits of stochastic rounding and how the fraction is cut to them: here
  it is a parameter (`random_bits`) and the fraction is rounded to N bits ties to even, as
  gfloat's ``RoundMode.Stochastic`` does;
- widths: the report tabulates K = 3 .. 8; the same rules are applied here up to K = 16;
- NaN's sign and payload: there is one NaN, and a NaN input of either sign becomes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .format import P3109_ENCODINGS, FloatFormat, default_bias

MIN_WIDTH = 3
MAX_WIDTH = 16

# P3109 saturation mode -> this engine's overflow policy.
SATURATION_MODES: dict[str, str] = {
    "SatFinite": "saturate",
    "SatPropagate": "saturate_propagate",
    "OvfInf": "ieee",
}

_NAME = re.compile(r"(?:binary|p3109_k)(?P<k>[0-9]{1,2})p(?P<p>[0-9]{1,2})(?P<s>[su])(?P<d>[ef])")

# The formats listed by name (`fpexplorer formats`); every other one is reachable by its name
# as a spec. The same set as gfloat's ``p3109_binary8_formats``.
NAMED = (
    (8, 1, True, True),
    (8, 1, False, True),
    (8, 3, True, True),
    (8, 3, True, False),
    (8, 3, False, True),
    (8, 3, False, False),
    (8, 4, True, True),
    (8, 4, True, False),
    (8, 4, False, True),
    (8, 4, False, False),
    (8, 5, True, True),
    (8, 7, True, False),
    (8, 8, False, False),
)


@dataclass(frozen=True, slots=True)
class P3109Parameters:
    """The four parameters that name a P3109 format."""

    width: int  # K
    precision: int  # P
    signed: bool
    extended: bool

    @property
    def name(self) -> str:
        """binary{K}p{P}{s|u}{e|f}"""
        signedness = "s" if self.signed else "u"
        domain = "e" if self.extended else "f"
        return f"binary{self.width}p{self.precision}{signedness}{domain}"


def p3109_format(
    width: int, precision: int, *, signed: bool = True, extended: bool = True
) -> FloatFormat:
    """The P3109 format binary{width}p{precision}{s|u}{e|f}; ValueError outside the family."""
    for label, value in (("K", width), ("P", precision)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"P3109 {label} must be an int")
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ValueError(f"P3109 K must be {MIN_WIDTH}..{MAX_WIDTH}, not {width}")
    top = width - 1 if signed else width
    if not 1 <= precision <= top:
        kind = "a signed" if signed else "an unsigned"
        raise ValueError(f"P3109 P must be 1..{top} for {kind} {width}-bit format, not {precision}")
    exponent_bits = width - precision + (0 if signed else 1)
    encoding = "p3109_extended" if extended else "p3109_finite"
    name = P3109Parameters(width, precision, signed, extended).name
    return FloatFormat(
        name,
        exponent_bits,
        precision - 1,
        default_bias(exponent_bits, encoding),
        encoding,
        subnormals=precision > 1,
        signed=signed,
    )


def p3109_parameters(fmt: FloatFormat) -> P3109Parameters | None:
    """K, P, signedness and domain of a format that follows P3109's rules exactly, else None
    (a P3109 encoding with another bias, say)."""
    if not isinstance(fmt, FloatFormat):
        raise ValueError(f"p3109_parameters takes a FloatFormat, not {type(fmt).__name__}")
    if fmt.encoding not in P3109_ENCODINGS:
        return None
    parameters = P3109Parameters(
        fmt.width, fmt.mantissa_bits + 1, fmt.signed, fmt.encoding == "p3109_extended"
    )
    try:
        canonical = p3109_format(
            parameters.width,
            parameters.precision,
            signed=parameters.signed,
            extended=parameters.extended,
        )
    except ValueError:
        return None
    if canonical._parameters() != fmt._parameters():
        return None
    return parameters


def p3109_name(fmt: FloatFormat) -> str | None:
    """binary{K}p{P}{s|u}{e|f} for a format that follows P3109's rules exactly, else None."""
    parameters = p3109_parameters(fmt)
    return None if parameters is None else parameters.name


def parse_p3109_name(text: str) -> FloatFormat | None:
    """The format named binary{K}p{P}{s|u}{e|f} (or gfloat's p3109_k{K}p{P}{s|u}{e|f});
    None when `text` is not spelled that way, ValueError when K or P is out of range."""
    match = _NAME.fullmatch(text.strip().lower())
    if match is None:
        return None
    return p3109_format(
        int(match["k"]), int(match["p"]), signed=match["s"] == "s", extended=match["d"] == "e"
    )


def named_p3109_formats() -> list[FloatFormat]:
    """The P3109 formats listed by name, in the order of `NAMED`."""
    return [p3109_format(k, p, signed=s, extended=e) for k, p, s, e in NAMED]
