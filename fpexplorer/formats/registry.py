"""The named formats (spelled as ml_dtypes spells them), their aliases, and spec strings."""

from __future__ import annotations

import difflib
import re

from .format import ENCODINGS, FloatFormat, make_format
from .p3109 import named_p3109_formats, p3109_parameters, parse_p3109_name
from .quoting import quote_text

# name: (exponent bits, mantissa bits, bias, encoding, subnormals, signed, aliases, note)
_TABLE: tuple[tuple[str, int, int, int, str, bool, bool, tuple[str, ...], str], ...] = (
    (
        "float64",
        11,
        52,
        1023,
        "ieee",
        True,
        True,
        ("fp64", "double", "binary64"),
        "IEEE 754 binary64",
    ),
    (
        "float32",
        8,
        23,
        127,
        "ieee",
        True,
        True,
        ("fp32", "single", "binary32"),
        "IEEE 754 binary32",
    ),
    (
        "tfloat32",
        8,
        10,
        127,
        "ieee",
        True,
        True,
        ("tf32",),
        "NVIDIA TensorFloat-32 (tensor-core input; NVIDIA converts with nearest_away)",
    ),
    ("float16", 5, 10, 15, "ieee", True, True, ("fp16", "half", "binary16"), "IEEE 754 binary16"),
    ("bfloat16", 8, 7, 127, "ieee", True, True, ("bf16",), "Google brain float"),
    (
        "float8_e4m3fn",
        4,
        3,
        7,
        "fn",
        True,
        True,
        ("e4m3", "e4m3fn", "fp8_e4m3fn", "fp8"),
        "OCP FP8 E4M3",
    ),
    (
        "float8_e4m3fnuz",
        4,
        3,
        8,
        "fnuz",
        True,
        True,
        ("e4m3fnuz", "fp8_e4m3fnuz"),
        "FP8 E4M3 (AMD MI300 / Graphcore)",
    ),
    (
        "float8_e4m3b11fnuz",
        4,
        3,
        11,
        "fnuz",
        True,
        True,
        ("e4m3b11fnuz", "fp8_e4m3b11fnuz"),
        "FP8 E4M3 with bias 11 (TPU)",
    ),
    ("float8_e4m3", 4, 3, 7, "ieee", True, True, ("fp8_e4m3", "e4m3ieee"), "IEEE-style FP8 E4M3"),
    ("float8_e3m4", 3, 4, 3, "ieee", True, True, ("e3m4", "fp8_e3m4"), "IEEE-style FP8 E3M4"),
    ("float8_e5m2", 5, 2, 15, "ieee", True, True, ("e5m2", "fp8_e5m2"), "OCP FP8 E5M2"),
    (
        "float8_e5m2fnuz",
        5,
        2,
        16,
        "fnuz",
        True,
        True,
        ("e5m2fnuz", "fp8_e5m2fnuz"),
        "FP8 E5M2 (AMD MI300 / Graphcore)",
    ),
    (
        "float8_e8m0fnu",
        8,
        0,
        127,
        "fnu",
        False,
        False,
        ("e8m0", "e8m0fnu", "fp8_e8m0fnu"),
        "OCP MX scale E8M0",
    ),
    (
        "float6_e2m3fn",
        2,
        3,
        1,
        "finite",
        True,
        True,
        ("fp6_e2m3", "e2m3", "e2m3fn"),
        "OCP MX FP6 E2M3",
    ),
    (
        "float6_e3m2fn",
        3,
        2,
        3,
        "finite",
        True,
        True,
        ("fp6_e3m2", "e3m2", "e3m2fn"),
        "OCP MX FP6 E3M2",
    ),
    (
        "float4_e2m1fn",
        2,
        1,
        1,
        "finite",
        True,
        True,
        ("fp4", "fp4_e2m1", "e2m1", "e2m1fn"),
        "OCP MX FP4 E2M1",
    ),
)

_FORMATS: dict[str, FloatFormat] = {}
_ALIASES: dict[str, tuple[str, ...]] = {}
_NOTES: dict[str, str] = {}
_LOOKUP: dict[str, FloatFormat] = {}

for _name, _e, _m, _bias, _enc, _sub, _signed, _aliases, _note in _TABLE:
    _format = FloatFormat(_name, _e, _m, _bias, _enc, _sub, _signed)
    _FORMATS[_name] = _format
    _ALIASES[_name] = _aliases
    _NOTES[_name] = _note
    _LOOKUP[_name] = _format
    for _alias in _aliases:
        _LOOKUP[_alias] = _format

for _format in named_p3109_formats():
    _p3109 = p3109_parameters(_format)
    assert _p3109 is not None
    _FORMATS[_format.name] = _format
    # gfloat's spelling of the same name.
    _ALIASES[_format.name] = (_format.name.replace("binary", "p3109_k"),)
    _NOTES[_format.name] = (
        f"IEEE P3109 {'signed' if _p3109.signed else 'unsigned'} "
        f"{'extended' if _p3109.extended else 'finite'}, precision {_p3109.precision}"
    )
    _LOOKUP[_format.name] = _format
    _LOOKUP[_ALIASES[_format.name][0]] = _format

_SPEC = re.compile(r"e(?P<e>[0-9]{1,3})m(?P<m>[0-9]{1,3})(?P<options>(?::[^:]*)*)")


def list_formats() -> list[FloatFormat]:
    """The named formats, widest first (in table order within a width, P3109 last)."""
    return sorted(_FORMATS.values(), key=lambda fmt: -fmt.width)


def parameters_named(name: str) -> tuple[int, int, int, str, bool, bool] | None:
    """The parameters of the named format `name`, or None when no format has that name."""
    fmt = _LOOKUP.get(name)
    return None if fmt is None else fmt._parameters()


def aliases_of(name: str) -> tuple[str, ...]:
    return _ALIASES.get(name, ())


def note_of(name: str) -> str:
    return _NOTES.get(name, "")


def get_format(name_or_spec: str | FloatFormat) -> FloatFormat:
    """A named format ("float16", "fp16", "e4m3", ...) or a custom one from a spec string.

    P3109 formats by name: binary{K}p{P}{s|u}{e|f} for K = 3..16, e.g. "binary8p3se" (see
    `fpexplorer.formats.p3109`). Specs: "eXmY" plus ":"-separated options bias=N,
    encoding=ieee|fn|fnuz|finite|fnu|p3109_extended|p3109_finite, subnormals=on|off,
    unsigned; e.g. "e6m9" or "e4m3:bias=11:encoding=fnuz". A name wins
    over a spec of the same spelling ("e4m3" is float8_e4m3fn, as the OCP FP8 spec says).
    """
    if isinstance(name_or_spec, FloatFormat):
        return name_or_spec
    if not isinstance(name_or_spec, str):
        raise ValueError(f"a format name must be text, not {type(name_or_spec).__name__}")
    key = name_or_spec.strip().lower()
    if key in _LOOKUP:
        return _LOOKUP[key]
    p3109 = parse_p3109_name(key)
    if p3109 is not None:
        return p3109
    match = _SPEC.fullmatch(key)
    if match is None:
        close = difflib.get_close_matches(key, list(_LOOKUP), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown format {quote_text(name_or_spec.strip(), 40)}{hint} "
            "(see `fpexplorer formats`, or give a spec such as e6m9, e4m3:encoding=fnuz "
            "or binary8p3se)"
        )
    return _from_spec(match, name_or_spec.strip())


def _from_spec(match: re.Match[str], text: str) -> FloatFormat:
    options: dict[str, str] = {}
    for option in match["options"].split(":")[1:]:
        key, sep, value = option.partition("=")
        key = key.strip()
        if key in options:
            raise ValueError(f"{quote_text(text)}: option {key!r} given twice")
        if key == "unsigned" and not sep:
            value = "yes"
        elif not sep or not value.strip():
            raise ValueError(f"{quote_text(text)}: option {key!r} needs a value ({key}=...)")
        options[key] = value.strip()
    known = {"bias", "encoding", "subnormals", "unsigned"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(
            f"{quote_text(text)}: unknown option(s) {sorted(unknown)}; known: {sorted(known)}"
        )
    bias: int | None = None
    if "bias" in options:
        try:
            bias = int(options["bias"])
        except ValueError:
            raise ValueError(f"{quote_text(text)}: bias must be an integer") from None
    encoding = options.get("encoding", "ieee")
    if encoding not in ENCODINGS:
        raise ValueError(f"{quote_text(text)}: encoding must be one of {', '.join(ENCODINGS)}")
    subnormals = _flag(options, "subnormals", text)
    unsigned = _flag(options, "unsigned", text)
    return make_format(
        int(match["e"]),
        int(match["m"]),
        bias=bias,
        encoding=encoding,
        subnormals=subnormals,
        signed=None if unsigned is None else not unsigned,
    )


def _flag(options: dict[str, str], key: str, text: str) -> bool | None:
    if key not in options:
        return None
    value = options[key].lower()
    if value in ("on", "yes", "true", "1"):
        return True
    if value in ("off", "no", "false", "0"):
        return False
    raise ValueError(f"{quote_text(text)}: {key} must be on or off, not {quote_text(options[key])}")
