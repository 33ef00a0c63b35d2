"""Short explanations shown beside the read-outs, chosen for the format and class on screen.

The numbers in them come from the format itself (max, min normal, …), never typed in.
"""

from __future__ import annotations

from fractions import Fraction

from fpexplorer.formats import FloatFormat
from fpexplorer.gui.formats.text import short


def _bias_note(fmt: FloatFormat) -> str:
    top = (1 << fmt.exponent_bits) - 1
    return (
        f"<b>Exponent bias.</b> The {fmt.exponent_bits} exponent bits store E = 0…{top} "
        f"as an unsigned number; the power of two is E − {fmt.bias}. The bias lets one "
        "unsigned field cover tiny and huge magnitudes, and makes codes of positive values "
        "sort like integers."
    )


def _subnormal_note(fmt: FloatFormat) -> str:
    return (
        "<b>Why subnormals exist.</b> With E = 0 the significand is 0.f instead of 1.f, so "
        f"values step evenly by {short(fmt.min_subnormal)} from 0 up to the smallest normal "
        f"{short(fmt.min_normal)}. Without them there would be a hole around zero and "
        "x − y could be 0 for x ≠ y. They have fewer significant bits: relative precision "
        "fades as they shrink."
    )


def _fp16_note(fmt: FloatFormat) -> str:
    return (
        f"<b>FP16 range.</b> 5 exponent bits give powers up to 2^15; with 10 fraction bits "
        f"the largest value is (2 − 2^−10) × 2^15 = {short(fmt.max)}. Anything from 65520 "
        "up rounds to infinity. The smallest subnormal is 2^−24 = "
        f"{short(fmt.min_subnormal)}: smaller gradients underflow to 0, which is why "
        "FP16 training needs loss scaling."
    )


def _bf16_note(fmt: FloatFormat) -> str:
    return (
        "<b>BF16 vs FP32.</b> BF16 keeps FP32's 8 exponent bits, so it has FP32's range "
        f"(max {short(fmt.max)}) and rarely overflows or underflows; it pays with only "
        "7 fraction bits (about 2–3 decimal digits, eps = 2^−7). FP32 master weights keep "
        "small updates from being rounded away."
    )


def _fp8_note(fmt: FloatFormat) -> str:
    return (
        f"<b>{fmt.name}.</b> {fmt.exponent_bits} exponent and {fmt.mantissa_bits} fraction "
        f"bits: max {short(fmt.max)}, eps {short(fmt.eps)}. Tiny formats need a per-tensor "
        "or per-block scale so that values land inside this narrow range."
    )


def side_note(fmt: FloatFormat, kind: str) -> str:
    """HTML: what matters for this format and this class of value."""
    parts: list[str] = []
    names = {fmt.name, *fmt.aliases}
    if kind == "subnormal" and fmt.subnormals:
        parts.append(_subnormal_note(fmt))
    if names & {"float16", "fp16", "half"}:
        parts.append(_fp16_note(fmt))
    elif names & {"bfloat16", "bf16"}:
        parts.append(_bf16_note(fmt))
    elif fmt.width <= 8 and fmt.mantissa_bits > 0:
        parts.append(_fp8_note(fmt))
    if kind == "nan":
        parts.append(
            "<b>NaN.</b> Not a number: the result of 0/0 or ∞ − ∞. It compares unequal to "
            "everything, itself included, and spreads through arithmetic."
        )
    elif kind == "inf":
        # Not "above max": FP16's 65510 rounds to 65504; only max + half a gap goes to inf,
        # and that tie itself only where the engine rounds it up (not P3109's 0x7F, an odd
        # code; formats without fraction bits take the larger magnitude, inf).
        top = fmt.from_value(fmt.max)
        threshold = fmt.max + (fmt.ulp(top) or Fraction(0)) / 2
        tie_goes_up = fmt.classify(fmt.from_value(threshold)) == "inf"
        where = "from" if tie_goes_up else "above"
        parts.append(
            f"<b>Infinity.</b> Rounding to nearest even, results {where} {short(threshold)} "
            f"(max {short(fmt.max)} plus half a gap) round here under the IEEE overflow "
            "policy; rounding toward zero stops at max, and “saturate” clamps to max."
        )
    if len(parts) < 2:
        parts.append(_bias_note(fmt))
    return "<br><br>".join(parts[:2])
