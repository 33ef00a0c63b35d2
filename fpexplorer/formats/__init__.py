"""The number science: float formats as data, exact decoding and rounding. No Qt, no torch.

>>> from fpexplorer.formats import get_format
>>> fp16 = get_format("fp16")
>>> fp16.max
Fraction(65504, 1)
>>> hex(fp16.from_value("0.1"))
'0x2e66'
"""

from typing import TYPE_CHECKING, Any

from .arith import (
    OPERATIONS,
    Calculation,
    DoubleRounding,
    ExactResult,
    Flags,
    ModeResult,
    Operand,
    calculate,
    double_round,
    double_rounding_cases,
)

if TYPE_CHECKING:
    from .block import (
        SCALE_RULES,
        BlockFormat,
        IntElement,
        get_block_format,
        list_block_formats,
    )
    from .block_quantize import (
        BlockErrorStats,
        ErrorStats,
        ExactBlock,
        QuantizedTensor,
        dequantize,
        exact_error_stats,
        quantize,
        quantize_block_exact,
        tensor_scale_for,
    )

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
from .parse import BARE_HEX_RULE, CodeEntry, parse_code, parse_entry, parse_value
from .registry import get_format, list_formats

# The block formats load numpy at import; `fpexplorer inspect` and `formats` should not pay
# for it (they answer in well under 0.1 s), so these names are imported on first use.
_LAZY = {
    "block": ("SCALE_RULES", "BlockFormat", "IntElement", "get_block_format", "list_block_formats"),
    "block_quantize": (
        "BlockErrorStats",
        "ErrorStats",
        "ExactBlock",
        "QuantizedTensor",
        "dequantize",
        "exact_error_stats",
        "quantize",
        "quantize_block_exact",
        "tensor_scale_for",
    ),
}


def __getattr__(name: str) -> Any:
    for module, names in _LAZY.items():
        if name in names:
            import importlib

            value = getattr(importlib.import_module(f".{module}", __name__), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BARE_HEX_RULE",
    "CLASSES",
    "ENCODINGS",
    "OPERATIONS",
    "OVERFLOW_POLICIES",
    "P3109_ENCODINGS",
    "ROUNDING_MODES",
    "SATURATION_MODES",
    "SCALE_RULES",
    "BlockErrorStats",
    "BlockFormat",
    "Calculation",
    "CodeEntry",
    "DoubleRounding",
    "ErrorStats",
    "ExactBlock",
    "ExactResult",
    "ExactValue",
    "Fields",
    "Flags",
    "FloatFormat",
    "IntElement",
    "ModeResult",
    "Operand",
    "P3109Parameters",
    "QuantizedTensor",
    "Rounded",
    "calculate",
    "dequantize",
    "double_round",
    "double_rounding_cases",
    "exact_decimal",
    "exact_error_stats",
    "get_block_format",
    "get_format",
    "leading_digits",
    "list_block_formats",
    "list_formats",
    "make_format",
    "p3109_format",
    "p3109_parameters",
    "parse_code",
    "parse_entry",
    "parse_value",
    "quantize",
    "quantize_block_exact",
    "tensor_scale_for",
    "to_exact_value",
]
