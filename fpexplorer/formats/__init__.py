"""The number science: float formats as data, exact decoding and rounding. No Qt, no torch.

>>> from fpexplorer.formats import get_format
>>> fp16 = get_format("fp16")
>>> fp16.max
Fraction(65504, 1)
>>> hex(fp16.from_value("0.1"))
'0x2e66'
"""

from .exact import ExactValue, exact_decimal, leading_digits
from .format import (
    CLASSES,
    ENCODINGS,
    OVERFLOW_POLICIES,
    P3109_ENCODINGS,
    ROUNDING_MODES,
    Fields,
    FloatFormat,
    Rounded,
    make_format,
    to_exact_value,
)
from .p3109 import SATURATION_MODES, P3109Parameters, p3109_format, p3109_parameters
from .parse import parse_value
from .registry import get_format, list_formats

__all__ = [
    "CLASSES",
    "ENCODINGS",
    "OVERFLOW_POLICIES",
    "P3109_ENCODINGS",
    "ROUNDING_MODES",
    "SATURATION_MODES",
    "ExactValue",
    "Fields",
    "FloatFormat",
    "P3109Parameters",
    "Rounded",
    "exact_decimal",
    "get_format",
    "leading_digits",
    "list_formats",
    "make_format",
    "p3109_format",
    "p3109_parameters",
    "parse_value",
    "to_exact_value",
]
