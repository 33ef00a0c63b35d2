"""`fpexplorer quantize`: values into a block format (MX, NVFP4), block by block."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from fpexplorer.commands.output import json_number, seed_text, stochastic_seed

if TYPE_CHECKING:
    from fractions import Fraction

    from fpexplorer.formats import BlockFormat, ErrorStats, ExactValue

HELP = "quantize values into a block-scaled format (MXFP8/6/4, MXINT8, NVFP4), block by block"

# Repeated from the engine so that building the parser imports nothing; a test holds them equal.
BLOCK_FORMATS = (
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxfp4",
    "mxint8",
    "nvfp4",
)
SCALE_RULES = ("floor", "ceil", "even", "rceil", "nearest")
DEFAULT_MAX_BLOCKS = 16

EPILOG = """\
VALUES: decimals of any length (0.1, -1.5e-3), fractions (1/3), hex floats (0x1.8p3), inf,
nan, a code with its format (fp16:0x3C00; a bare 0x3C00 is a code, and a block format selects
no one format for it: 0x3C00p0 is the number 15360); they are quantized exactly. --npy /
--csv arrays are read as float64 (a .npy of float16, float32 or float64 exactly); blocks
run along the last axis (--axis to change it), and a tail shorter than the block size is a
block of its own.
Scale rules: floor (OCP MX v1.0, the MX default), ceil, even, rceil (Transformer Engine /
cuBLAS), nearest (NVFP4's E4M3 block scales; the nvfp4 default).

examples:
  fpexplorer quantize --format mxfp4 1 -0.75 0.3 5
  fpexplorer quantize --format nvfp4 --npy weights.npy --max-blocks 4
  fpexplorer quantize --format mxfp8_e4m3 --scale-rule rceil --csv x.csv --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    # argparse takes "-1e-3" or "-inf" for an option; only these look like options here.
    parser._negative_number_matcher = re.compile(r"^-(?:[0-9.]|inf|nan|0x|0b)", re.IGNORECASE)
    parser.add_argument("values", nargs="*", metavar="VALUE", help="values to quantize")
    parser.add_argument(
        "-f", "--format", required=True, choices=BLOCK_FORMATS, metavar="FORMAT",
        help=f"block format: {', '.join(BLOCK_FORMATS)}",
    )  # fmt: skip
    parser.add_argument(
        "--scale-rule", choices=SCALE_RULES, default=None,
        help="how block scales are chosen (default: the format's own)",
    )  # fmt: skip
    parser.add_argument(
        "--rounding", default="nearest_even",
        help="how elements round (default: %(default)s; any mode of `fpexplorer inspect`)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="seed for stochastic rounding")
    parser.add_argument("--npy", metavar="FILE", help="read the values from a .npy file")
    parser.add_argument("--csv", metavar="FILE", help="read the values from a CSV file")
    parser.add_argument(
        "--axis", type=int, default=None, help="axis the blocks run along (default: the last)"
    )
    parser.add_argument(
        "--scale-code", metavar="CODE",
        help="force every block's scale code (0x.., 0b.. or decimal), as the block editor does",
    )  # fmt: skip
    parser.add_argument(
        "--max-blocks", type=int, default=DEFAULT_MAX_BLOCKS, metavar="N",
        help="blocks listed element by element (default: %(default)s; the summary covers all)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from fpexplorer.commands.output import print_document

    return print_document(lambda: _build(args), _render_text, args.json)


# ---- building the document -----------------------------------------------------------


def _build(args: argparse.Namespace) -> dict[str, Any]:
    from fpexplorer.formats import get_block_format

    sources = [bool(args.values), args.npy is not None, args.csv is not None]
    if sum(sources) != 1:
        raise ValueError("give VALUES, --npy FILE or --csv FILE (exactly one of them)")
    if args.max_blocks < 0:
        raise ValueError("--max-blocks must not be negative")
    if args.values and args.axis is not None:
        raise ValueError("--axis goes with --npy or --csv (typed VALUES are one row)")
    if args.rounding != "stochastic" and args.seed is not None:
        raise ValueError("--seed goes with --rounding stochastic only")  # nothing draws
    args.seed = stochastic_seed(args.seed) if args.rounding == "stochastic" else None
    fmt = get_block_format(args.format, args.scale_rule)
    scale_code = None if args.scale_code is None else _parse_code(args.scale_code, fmt)
    head = {**_describe_format(fmt, args.rounding), "seed": args.seed}
    if args.values:
        return {**head, **_from_values(args, fmt, scale_code)}
    return {**head, **_from_array(args, fmt, scale_code)}


def _describe_format(fmt: BlockFormat, rounding: str) -> dict[str, Any]:
    return {
        "format": fmt.name,
        "element_format": fmt.element.name,
        "block_size": fmt.block_size,
        "scale_format": fmt.scale_format.name,
        "scale_rule": fmt.scale_rule,
        "rounding": rounding,
    }


def _parse_code(text: str, fmt: BlockFormat) -> int:
    """--scale-code CODE by the one reader of codes (`formats.parse_code`, as `inspect
    --bits` and the GUI): 0x.., 0b.., fields or an integer; 0o17 or -1 are refused."""
    from fpexplorer.formats import parse_code
    from fpexplorer.formats.quoting import quote_text

    try:
        code = parse_code(text, fmt.scale_format, decimal=True)
    except ValueError as error:
        raise ValueError(f"--scale-code: {error}") from None
    if code is None:
        raise ValueError(
            f"--scale-code {quote_text(text.strip())} is not a code (0x.., 0b.. or decimal)"
        )
    return code


def _from_values(
    args: argparse.Namespace, fmt: BlockFormat, scale_code: int | None
) -> dict[str, Any]:
    """Typed values go through the exact path: every number below is exact."""
    from fractions import Fraction

    from fpexplorer.formats import (
        exact_error_stats,
        parse_value,
        quantize_block_exact,
        tensor_scale_for,
    )

    inputs = [parse_value(text) for text in args.values]
    tensor_scale = None
    if fmt.tensor_scale:
        amax = max((x.magnitude for x in inputs if x.is_finite), default=Fraction(0))
        tensor_scale = tensor_scale_for(amax)
    blocks = [
        quantize_block_exact(
            inputs[start : start + fmt.block_size],
            fmt,
            args.rounding,
            scale_code=scale_code,
            tensor_scale=tensor_scale,
            seed=args.seed,
        )
        for start in range(0, len(inputs), fmt.block_size)
    ]
    shown = blocks[: args.max_blocks]
    described = []
    for index, block in enumerate(shown):
        elements = []
        for position, (x, code, value) in enumerate(
            zip(block.inputs, block.codes, block.values, strict=True)
        ):
            element = _describe_element(fmt, x, code, value)
            element["index"] = index * fmt.block_size + position
            element["input_text"] = args.values[element["index"]]
            elements.append(element)
        described.append(
            {
                "index": index,
                **_describe_scale(fmt, block.scale_code),
                "stats": _describe_stats(exact_error_stats([block])),
                "elements": elements,
            }
        )
    per_block = [exact_error_stats([block]) for block in blocks]
    return {
        "source": "values",
        "shape": [len(inputs)],
        "axis": 0,
        "tensor_scale": _describe_tensor_scale(tensor_scale),
        "blocks_total": len(blocks),
        "blocks_shown": len(shown),
        "blocks": described,
        "summary": {
            **_describe_stats(exact_error_stats(blocks)),
            "worst_block": _worst(per_block),
        },
    }


def _from_array(
    args: argparse.Namespace, fmt: BlockFormat, scale_code: int | None
) -> dict[str, Any]:
    from fractions import Fraction

    import numpy as np

    from fpexplorer.formats import ErrorStats, quantize

    data, source = _load(args)
    quantized = quantize(
        data,
        fmt,
        args.rounding,
        -1 if args.axis is None else args.axis,
        scale_codes=scale_code,
        seed=args.seed,
    )
    stats = quantized.block_stats()
    # Blocks are listed with the block axis last (the order they are cut in); every index
    # shown is an index of the input array or of the scale grid as they are.
    moved_codes = np.moveaxis(quantized.codes, quantized.axis, -1)
    moved_values = np.moveaxis(quantized.values, quantized.axis, -1)
    moved_input = np.moveaxis(quantized.input, quantized.axis, -1)
    moved_scales = np.moveaxis(quantized.scale_codes, quantized.axis, -1)
    grid_shape = moved_scales.shape
    total = int(moved_scales.size)
    shown = min(total, args.max_blocks)
    size = fmt.block_size
    described = []
    for flat in range(shown):
        *lead, block = np.unravel_index(flat, grid_shape)
        row = tuple(int(i) for i in lead)
        start = int(block) * size
        elements = []
        for position in range(start, min(start + size, moved_codes.shape[-1])):
            x = float(moved_input[(*row, position)])
            value = float(moved_values[(*row, position)])
            element = _describe_element(
                fmt,
                _exact_float(x),
                int(moved_codes[(*row, position)]),
                _exact_float(value),
            )
            element["index"] = _plain(_grid_position((*row, position), quantized.axis))
            elements.append(element)
        grid_index = tuple(int(i) for i in np.unravel_index(flat, grid_shape))
        original = _grid_position(grid_index, quantized.axis)
        block_stats = ErrorStats(
            count=int(stats.count[original]),
            max_abs_error=float(stats.max_abs_error[original]),
            rmse=float(stats.rmse[original]),
            sqnr_db=float(stats.sqnr_db[original]),
            share_saturated=float(stats.share_saturated[original]),
            share_flushed=float(stats.share_flushed[original]),
        )
        described.append(
            {
                "index": _plain(original),
                **_describe_scale(fmt, int(moved_scales[grid_index])),
                "stats": _describe_stats(block_stats),
                "elements": elements,
            }
        )
    tensor_scale = None if quantized.tensor_scale is None else Fraction(quantized.tensor_scale)
    worst = _plain(quantized.worst_blocks(1)[0])
    return {
        "source": source,
        "shape": list(data.shape),
        "axis": quantized.axis,
        "tensor_scale": _describe_tensor_scale(tensor_scale),
        "blocks_total": total,
        "blocks_shown": shown,
        "blocks": described,
        "summary": {**_describe_stats(quantized.tensor_stats()), "worst_block": worst},
    }


def _grid_position(moved_index: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """An index of the moved scale grid (axis last) as an index of the original grid."""
    *lead, block = moved_index
    return (*lead[:axis], block, *lead[axis:])


def _plain(index: tuple[int, ...]) -> int | list[int]:
    """An index for JSON: an int in one dimension, else a list."""
    return list(index) if len(index) > 1 else index[0]


def _worst(per_block: list[ErrorStats]) -> int | None:
    if not per_block:
        return None
    import math

    def key(item: tuple[int, ErrorStats]) -> tuple[float, float]:
        stats = item[1]
        sqnr = math.inf if math.isnan(stats.sqnr_db) else stats.sqnr_db
        error = -math.inf if math.isnan(stats.max_abs_error) else stats.max_abs_error
        return (sqnr, -error)

    return min(enumerate(per_block), key=key)[0]


def _load(args: argparse.Namespace) -> tuple[Any, str]:
    import numpy as np

    if args.npy is not None:
        try:
            data = np.load(args.npy, allow_pickle=False)
        except FileNotFoundError:
            raise ValueError(f"no such file: {args.npy}") from None
        except (OSError, ValueError, EOFError) as error:
            from fpexplorer.formats.vectorized import npy_load_reason

            reason = npy_load_reason(error)
            raise ValueError(f"{args.npy}: not a readable .npy file ({reason})") from None
        if not isinstance(data, np.ndarray):
            raise ValueError(f"{args.npy}: holds several arrays; give a .npy of one array")
        return data, "npy"
    import warnings

    try:
        with warnings.catch_warnings():
            # An empty file: numpy warns "input contained no data" on stderr, a second line
            # above our own one ("nothing to quantize: the array is empty").
            warnings.simplefilter("ignore", UserWarning)
            data = np.loadtxt(args.csv, delimiter=",", dtype=np.float64, ndmin=1)
    except FileNotFoundError:
        raise ValueError(f"no such file: {args.csv}") from None
    except (OSError, ValueError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        # numpy's advice is for its own API ("use `usecols` to select a subset…").
        first = first.partition("; use `usecols`")[0].rstrip(".")
        if _has_semicolons(args.csv):
            first += "; values are separated by commas and decimals use a point, not ';' and ','"
        raise ValueError(f"{args.csv}: not a CSV of numbers ({first})") from None
    return data, "csv"


def _has_semicolons(path: str) -> bool:
    """Whether a CSV file uses semicolons (as a European spreadsheet writes it)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return ";" in handle.read(65536)
    except OSError:
        return False


def _exact_float(x: float) -> ExactValue:
    from fpexplorer.formats import to_exact_value

    return to_exact_value(x)


def _describe_scale(fmt: BlockFormat, code: int) -> dict[str, Any]:
    from fpexplorer.formats import exact_decimal

    scale = fmt.scale_value(code)
    return {
        "scale_code_hex": fmt.scale_format.code_to_hex(code),
        "scale_bits": fmt.scale_format.code_to_bits(code),
        "scale": json_number(scale),
        "scale_exact": "nan" if scale is None else exact_decimal(scale),
        "scale_text": "nan" if scale is None else _power_text(scale),
    }


def _power_text(value: Fraction) -> str:
    """2^k for powers of two (MX scales), as `inspect` writes them ("2^996"), else the
    display decimal. (It wrote Python's 2**k, a third spelling beside the GUI's 2⁻¹⁰⁷.)"""
    from fpexplorer.formats.decimal import display_decimal

    numerator, denominator = value.numerator, value.denominator
    # Not 0, which the bit test passes (0 & -1 == 0): NVFP4's scale code 0x00 read "2^-1".
    if numerator > 0 and numerator & (numerator - 1) == 0 and denominator & (denominator - 1) == 0:
        exponent = numerator.bit_length() - denominator.bit_length()
        return f"2^{exponent}"
    return display_decimal(value)


def _describe_tensor_scale(value: Fraction | None) -> dict[str, Any] | None:
    if value is None:
        return None
    from fpexplorer.formats import exact_decimal, get_format
    from fpexplorer.formats.decimal import display_decimal

    float32 = get_format("float32")
    code = float32.from_value(value)
    return {
        "value": json_number(value),
        "value_exact": exact_decimal(value),
        "value_text": display_decimal(value),
        "code_hex": float32.code_to_hex(code),
    }


def _describe_element(
    fmt: BlockFormat, x: ExactValue, code: int, value: ExactValue
) -> dict[str, Any]:
    from fpexplorer.formats import exact_decimal
    from fpexplorer.formats.decimal import display_decimal

    error = value.fraction - x.fraction if value.is_finite and x.is_finite else None
    return {
        "input": _json_float(x),
        "input_exact": str(x) if not x.is_finite else exact_decimal(x.fraction),
        "input_text": display_decimal(x),
        "code_hex": fmt.element.code_to_hex(code),
        "code_bits": fmt.element.code_to_bits(code),
        "value": _json_float(value),
        "value_exact": str(value) if not value.is_finite else exact_decimal(value.fraction),
        "value_text": display_decimal(value),
        "error": json_number(error),
        "error_text": None if error is None else display_decimal(error),
    }


def _json_float(x: ExactValue) -> float | None:
    return json_number(x.fraction) if x.is_finite else None


def _describe_stats(stats: ErrorStats) -> dict[str, Any]:
    """Floats (null where not finite or past float64's range), the exact max |error| where
    the exact path knows it, and text forms that keep inf and nan."""
    import math

    from fpexplorer.formats import exact_decimal

    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None

    exact_max = stats.max_abs_error_exact
    return {
        "count": stats.count,
        "max_abs_error": number(stats.max_abs_error),
        "max_abs_error_exact": None if exact_max is None else exact_decimal(exact_max),
        "max_abs_error_text": _error_text(stats.max_abs_error, exact_max, stats.count),
        "rmse": number(stats.rmse),
        "rmse_text": _error_text(stats.rmse, _root(stats.mean_squared_error_exact), stats.count),
        "sqnr_db": number(stats.sqnr_db),
        "sqnr_db_text": _sqnr_text(stats.sqnr_db),
        "share_saturated": number(stats.share_saturated),
        "share_flushed": number(stats.share_flushed),
    }


def _root(square: Fraction | None) -> tuple[Fraction, bool] | None:
    """(√square, exact?): exact when square is the square of a fraction, else to about 70
    bits, from integers (float() overflows past 1e308, as the RMSE of an error of 1e400)."""
    import math
    from fractions import Fraction

    if square is None:
        return None
    numerator, denominator = square.numerator, square.denominator
    root_n, root_d = math.isqrt(numerator), math.isqrt(denominator)
    if root_n * root_n == numerator and root_d * root_d == denominator:
        return Fraction(root_n, root_d), True
    # square × 4**shift holds about 140 bits in its integer part; its root about 70.
    shift = max(0, (140 - (numerator.bit_length() - denominator.bit_length())) // 2)
    return Fraction(math.isqrt(numerator * 4**shift // denominator), 2**shift), False


def _error_text(value: float, exact: Fraction | tuple[Fraction, bool] | None, count: int) -> str:
    """An error for the summary: from the exact value where there is one (exact when it has
    at most 4 digits, else "≈" 4 digits; never "inf" for a finite error past float64's
    range), else the float64 figure marked "≈" (its sums and differences rounded)."""
    import math

    from fpexplorer.formats.decimal import approximate_decimal

    if math.isnan(value):
        return "n/a"
    if math.isinf(value) and exact is None:
        return "inf" if count else "n/a"  # a NaN block scale: no finite value to compare
    if exact is None:
        return approximate_decimal(value, keep=4, shown=4, inexact=value != 0)
    if isinstance(exact, tuple):
        root, is_exact = exact
        return approximate_decimal(root, keep=4, shown=4, inexact=not is_exact)
    return approximate_decimal(exact, keep=4, shown=4)


def _sqnr_text(value: float) -> str:
    import math

    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf (no error)" if value > 0 else "-inf"
    return f"≈{value:.2f}"


# ---- text ---------------------------------------------------------------------------------


def _render_text(document: dict[str, Any]) -> str:
    lines = [
        f"{document['format']}: {document['element_format']} elements in blocks of "
        f"{document['block_size']}, {document['scale_format']} scale, rule "
        f"{document['scale_rule']}; elements round {document['rounding']}"
        f"{seed_text(document['seed'])}",
    ]
    tensor_scale = document["tensor_scale"]
    if tensor_scale is not None:
        lines.append(
            f"per-tensor scale (FP32 {tensor_scale['code_hex']}): {tensor_scale['value_text']}"
        )
    for block in document["blocks"]:
        lines.append("")
        lines.append(
            f"block {block['index']}: scale {block['scale_code_hex']} "
            f"({block['scale_bits']}) = {block['scale_text']}"
        )
        rows = [("#", "input", "code", "bits", "value", "error")]
        for element in block["elements"]:
            rows.append(
                (
                    _index_text(element["index"]),
                    element["input_text"],
                    element["code_hex"],
                    element["code_bits"],
                    element["value_text"],
                    element["error_text"] if element["error_text"] is not None else "-",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append(
                "  "
                + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
        lines.append("  " + _stats_text(block["stats"]))
    hidden = document["blocks_total"] - document["blocks_shown"]
    lines.append("")
    if hidden:
        lines.append(
            f"({hidden} more block{'' if hidden == 1 else 's'} not listed; "
            "--max-blocks N to list them)"
        )
    summary = document["summary"]
    lines.append(
        f"summary of {summary['count']} finite value{'' if summary['count'] == 1 else 's'} "
        f"in {document['blocks_total']} "
        f"block{'' if document['blocks_total'] == 1 else 's'}: "
        + _stats_text(summary)
        + f"; worst block {summary['worst_block']}"
    )
    return "\n".join(lines)


def _index_text(index: Any) -> str:
    return ",".join(str(i) for i in index) if isinstance(index, list) else str(index)


def _stats_text(stats: dict[str, Any]) -> str:
    from fpexplorer.formats.decimal import share_percent

    def share(value: float | None) -> str:
        # 3 of 7 is ≈42.86%, not 42.86%.
        return "n/a" if value is None else share_percent(value, stats["count"])

    # "inf (no error)" reads "SQNR inf dB (no error)", the unit beside its number.
    sqnr, _, note = stats["sqnr_db_text"].partition(" (")
    if sqnr != "n/a":  # no finite value: no figure to carry a unit ("SQNR n/a dB")
        sqnr += f" dB ({note}" if note else " dB"
    return (
        f"max |error| {stats['max_abs_error_text']}, RMSE {stats['rmse_text']}, "
        f"SQNR {sqnr}, saturated {share(stats['share_saturated'])}, "
        f"flushed to zero {share(stats['share_flushed'])}"
    )
