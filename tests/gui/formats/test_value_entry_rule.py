"""One rule for a bare hex integer wherever a value is typed: the app's entry field, its
Arithmetic operands, its block editor, `inspect VALUE`, `calc` operands, `quantize` values
and the library. As float.exposed and Float Toy read it, 0x3C00 is a code (bit pattern) of
the selected format; fp16:0x3C00 names the format; a hex float (0x3C00p0, 0x1.8p3) is a
number. Before, 0x3C00 was FP16's 1.0 in the entry field but the number 15360 for `inspect`
and as a `calc` operand.

The expected values come from numpy's float16 / ml_dtypes' bfloat16 (the oracles).
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpexplorer.cli import main
from fpexplorer.formats import CodeEntry, get_format, parse_entry, parse_value


def _fp16_value(code: int) -> Fraction:
    return Fraction(float(np.array(code, dtype=np.uint16).view(np.float16)))


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object] | str:
    if main(["inspect", *argv, "--json"]) == 2:
        return capsys.readouterr().err.strip()
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def _calc_operands(capsys: pytest.CaptureFixture[str], expression: str, fmt: str) -> list[str]:
    assert main(["calc", expression, "--format", fmt, "--json"]) == 0
    return [operand["value_exact"] for operand in json.loads(capsys.readouterr().out)["operands"]]


@pytest.mark.parametrize("code", [0x3C00, 0x0001, 0x7BFF, 0x8000, 0xC000])
def test_a_bare_hex_integer_is_a_code_of_the_selected_format_everywhere(
    capsys: pytest.CaptureFixture[str], code: int
) -> None:
    from fpexplorer.gui.formats.arith_state import ArithmeticState
    from fpexplorer.gui.formats.state import FormatsSession

    fp16 = get_format("fp16")
    text = f"0x{code:04X}"
    expected = _fp16_value(code)
    assert parse_value(text, fp16).fraction == expected
    assert parse_entry(text, fp16) == CodeEntry(fp16, code, format_named=False)

    session = FormatsSession([fp16])
    assert session.enter_text(text) and session.active.code == code

    document = _inspect(capsys, text, "--format", "fp16")
    assert isinstance(document, dict)
    (result,) = document["results"]  # type: ignore[misc]
    assert int(result["code"]) == code  # type: ignore[index]
    assert Fraction(str(document["input_exact"])) == expected

    assert Fraction(_calc_operands(capsys, f"{text} * 1", "fp16")[0]) == expected

    arithmetic = ArithmeticState(fp16, "add", [text, "0"])
    assert arithmetic.problem is None
    assert arithmetic.readout().operands[0].code_hex.lower() == f"0x{code:04x}"


def test_a_named_format_reads_the_code_in_it_and_rounds_its_value() -> None:
    bf16, e4m3 = get_format("bf16"), get_format("e4m3")
    expected = Fraction(float(np.array(0x3F80, dtype=np.uint16).view(ml_dtypes.bfloat16)))
    for selected in (None, e4m3, bf16):
        assert parse_value("bf16:0x3F80", selected).fraction == expected == 1
        assert parse_value("bfloat16 : 0x3FC0", selected).fraction == Fraction(3, 2)
    assert parse_entry("bf16:0x3F80", e4m3) == CodeEntry(bf16, 0x3F80, format_named=True)


def test_inspect_and_calc_read_a_named_code(capsys: pytest.CaptureFixture[str]) -> None:
    document = _inspect(capsys, "fp16:0x3C01", "-f", "bf16", "e4m3")
    assert isinstance(document, dict)
    assert Fraction(str(document["input_exact"])) == _fp16_value(0x3C01) == 1 + Fraction(1, 1024)
    codes = [int(result["code"]) for result in document["results"]]  # type: ignore[attr-defined]
    assert codes == [
        int(np.array(float(_fp16_value(0x3C01)), dtype=ml_dtypes.bfloat16).view(np.uint16)),
        int(np.array(float(_fp16_value(0x3C01)), dtype=ml_dtypes.float8_e4m3fn).view(np.uint8)),
    ]
    assert _calc_operands(capsys, "fp16:0x3C00 + 0x3F80", "bf16") == ["1", "1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0x3C00p0", Fraction(15360)), ("0x1.8p3", Fraction(12)), ("-0x.8", Fraction(-1, 2))],
)
def test_a_hex_float_is_a_number_everywhere(
    capsys: pytest.CaptureFixture[str], text: str, expected: Fraction
) -> None:
    fp16 = get_format("fp16")
    assert parse_value(text).fraction == expected == parse_value(text, fp16).fraction
    document = _inspect(capsys, text, "--format", "fp16")
    assert isinstance(document, dict) and Fraction(str(document["input_exact"])) == expected


def test_without_one_selected_format_a_bare_code_is_refused_saying_how_to_write_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fpexplorer.gui.formats.block_state import parse_block_text

    with pytest.raises(ValueError, match=r"name it, as fp16:0x3C00; .* 0x3C00p0"):
        parse_value("0x3C00")
    with pytest.raises(ValueError, match="fp16:0x3C00"):
        parse_block_text("1, 0x3C00", 32)
    assert parse_block_text("1, fp16:0x3C00", 32)[1].fraction == 1
    # inspect's default: six formats, in each of which 0x3C00 is another value.
    message = _inspect(capsys, "0x3C00")
    assert isinstance(message, str)
    assert "6 are selected: give one --format" in message and "0x3C00p0" in message
    assert main(["quantize", "-f", "mxfp4", "0x3C00"]) == 2
    assert "fp16:0x3C00" in capsys.readouterr().err
    # A hex float is the number only for a code written in hex: "0b0011p0" is no number.
    for binary in ("0b0011", "0|01111|0000000000"):
        with pytest.raises(ValueError, match=f"name it, as fp16:{re.escape(binary)}$"):
            parse_value(binary)


@pytest.mark.parametrize("text", ["-0x3C00", "\u22120x3C00", "+0b1"])
def test_a_signed_code_is_refused_in_every_place(
    capsys: pytest.CaptureFixture[str], text: str
) -> None:
    fp16 = get_format("fp16")
    with pytest.raises(ValueError, match="a code has no sign"):
        parse_value(text, fp16)
    message = _inspect(capsys, text, "-f", "fp16")
    assert isinstance(message, str) and "a code has no sign" in message
