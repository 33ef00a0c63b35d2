"""`fpexplorer calc`: text, JSON, every operation, P3109 formats, one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fpexplorer.cli import main
from fpexplorer.commands.calc import parse_expression


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(["calc", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_calc_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calc", "0.1 + 0.2", "--format", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "0.1 -> 0x2e66 0.0999755859375  (rounded into the format)" in out
    assert "exact     0.2999267578125" in out
    lines = {line.split()[0]: line for line in out.splitlines()[7:]}
    assert lines["nearest_even"].split()[1:3] == ["0x34cc", "0.2998046875"]
    assert lines["round_to_odd"].split()[1:3] == ["0x34cd", "0.300048828125"]
    assert lines["nearest_even"].endswith("inexact")


def test_calc_json(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["0.1 + 0.2", "-f", "fp16", "--rounding", "toward_zero"])
    assert document["operation"] == "add" and document["format"] == "float16"
    assert [o["code_hex"] for o in document["operands"]] == ["0x2e66", "0x3266"]
    assert document["exact"] == {
        "is_exact": True,
        "value_exact": "0.2999267578125",
        "value_approx": None,
        "lower": None,
        "upper": None,
        "invalid": False,
        "divide_by_zero": False,
    }
    (result,) = document["results"]
    assert result["rounding"] == "toward_zero" and result["code_hex"] == "0x34cc"
    assert result["error_abs_exact"] == "0.0001220703125" and result["error_ulps"] == 0.5
    assert result["flags"] == ["inexact"]


def test_calc_fma_sqrt_and_p3109(capsys: pytest.CaptureFixture[str]) -> None:
    fma = _json(capsys, ["fma(1.5, 2, -3)", "-f", "bf16", "--rounding", "toward_negative"])
    assert fma["results"][0]["value_exact"] == "-0"  # an exact zero sum rounding down
    root = _json(capsys, ["sqrt(2)", "-f", "binary8p3se"])
    assert root["format"] == "binary8p3se" and not root["exact"]["is_exact"]
    assert root["exact"]["value_approx"].startswith("1.41421356237309504880168872420969807")
    nearest = root["results"][0]
    assert nearest["value_exact"] == "1.5" and nearest["error_is_approximate"]
    assert nearest["error_abs_exact"] is None and nearest["flags"] == ["inexact"]
    big = _json(capsys, ["40000 * 2", "-f", "binary8p3se", "--overflow", "saturate_propagate"])
    assert {r["value_exact"] for r in big["results"]} == {"49152"}
    invalid = _json(capsys, ["inf - inf", "-f", "fp16"])
    assert invalid["results"][0]["flags"] == ["invalid"] and invalid["results"][0]["value"] is None
    assert _json(capsys, ["-1+2", "-f", "fp16"])["results"][0]["value_exact"] == "1"
    # The format's constants as operands; a huge irrational root in scientific notation.
    top = _json(capsys, ["max * 2", "-f", "e4m3", "--overflow", "saturate"])
    assert top["operands"][0]["value_exact"] == "448" and top["results"][0]["code_hex"] == "0x7e"
    huge = _json(capsys, ["sqrt(max)", "-f", "fp64", "--rounding", "toward_zero"])
    assert huge["exact"]["value_approx"] == "1.34078079299425963552911713195043695…e154"
    # inf into FP4 (no inf) saturates: the operand changed, and says so.
    saturated = _json(capsys, ["inf - 1", "-f", "fp4"])
    assert saturated["operands"][0]["value_exact"] == "6" and saturated["operands"][0]["inexact"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.1 + 0.2", ("add", ["0.1", "0.2"])),
        ("1e-3-2", ("sub", ["1e-3", "2"])),
        ("-1 - -2", ("sub", ["-1", "-2"])),
        ("1/3 + 1/3", ("add", ["1/3", "1/3"])),
        ("1/2 / 3", ("div", ["1/2", "3"])),
        ("2 × 3", ("mul", ["2", "3"])),
        ("0x1.8p3*inf", ("mul", ["0x1.8p3", "inf"])),
        ("FMA(1, 2, 3)", ("fma", ["1", "2", "3"])),
        ("sqrt( 2 )", ("sqrt", ["2"])),
    ],
)
def test_expressions(text: str, expected: tuple[str, list[str]]) -> None:
    assert parse_expression(text) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["1/2/3"], "ambiguous"),
        (["hello"], "not an operation"),
        (["2"], "not an operation"),
        (["2e-5"], "not an operation"),  # one number, not "2e" minus 5
        # An operand that is not read says why, not "not an operation": a bare hex code with
        # a sign or more bits than the format (numbers before the one rule for bare codes).
        (["-0x3C00 + 1", "-f", "fp16"], "'-0x3C00 + 1': -0x3C00: a code has no sign"),
        (["0x3C00*-0x3C00", "-f", "fp16"], "a code has no sign"),
        (["0x1FFFF + 1", "-f", "fp16"], "code 0x1FFFF has more than 16 bits"),
        (["1 + 1.2.3"], "'1.2.3': not a number"),
        (["fma(1, 2)"], "fma takes 3"),
        (["sqrt()"], "sqrt takes 1"),
        (["1 + 2", "-f", "binary8p9se"], "P must be"),
        (["1 + 2", "-f", "fp17"], "unknown format"),
        (["1 + 2", "--rounding", "up"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        status = main(["calc", *argv])
    except SystemExit as error:  # argparse's own errors (one line too)
        status = error.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_calc_text_errors_exact_or_marked_and_columns_aligned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # fp32 0.1 + 0.2 printed "7.45e-09 (0.25 ulp)" for an error of exactly 2**-27, and the
    # fp32/fp64 codes pushed the value column out of line with its header.
    from decimal import Decimal
    from fractions import Fraction

    from fpexplorer.formats import calculate

    for expression, operation, operands, name in (
        ("0.1 + 0.2", "add", ["0.1", "0.2"], "fp32"),
        ("1 / 3", "div", ["1", "3"], "fp64"),
        ("0.1 + 0.2", "add", ["0.1", "0.2"], "fp16"),
    ):
        assert main(["calc", expression, "-f", name]) == 0
        lines = capsys.readouterr().out.splitlines()
        header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rounding"))
        rows = lines[header + 1 :]
        expected = calculate(operation, operands, name).results
        assert len(rows) == len(expected)
        for line, result in zip(rows, expected, strict=True):
            # Each column starts under its header.
            for column in ("code", "value", "error", "flags"):
                start = lines[header].index(column)
                assert line[start - 1] == " " and line[start] != " ", (column, line)
            error = line[lines[header].index("error") :].split()
            shown_abs, shown_ulps = error[0], error[1].lstrip("(")
            for shown, exact in ((shown_abs, result.error_abs), (shown_ulps, result.error_ulps)):
                if shown.startswith("≈"):
                    assert Fraction(Decimal(shown[1:])) != exact, (line, shown)
                else:
                    assert Fraction(Decimal(shown)) == exact, (line, shown)


def test_stochastic_calc_reports_the_seed_that_repeats_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: an unseeded stochastic result could not be repeated (no seed shown).
    argv = ["1 / 3", "-f", "e4m3", "--rounding", "stochastic"]
    first = _json(capsys, argv)
    seed = first["seed"]
    assert isinstance(seed, int)
    assert _json(capsys, [*argv, "--seed", str(seed)])["results"] == first["results"]
    assert main(["calc", *argv, "--seed", "11"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("seed 11 (--seed 11 repeats the draw)")
    assert _json(capsys, ["1 / 3", "-f", "e4m3"])["seed"] is None


def test_calc_draws_random_bits_as_inspect_does(capsys: pytest.CaptureFixture[str]) -> None:
    # calc had --seed but no --random-bits, which inspect has: the same two options now, from
    # one declaration (output.add_stochastic_arguments), with the same checks.
    from fpexplorer.commands import output
    from fpexplorer.formats.format import MAX_RANDOM_BITS

    assert output.MAX_RANDOM_BITS == MAX_RANDOM_BITS
    argv = ["calc", "1 + 0x1p-12", "-f", "fp16", "--rounding", "stochastic", "--json"]
    # 1 + 2**-12 lies a quarter of the way from 1 to 1 + 2**-10: with one random bit that
    # quarter rounds (ties to even) to 0 and the sum never rounds up; with 64 it sometimes does.
    one_bit, full = set(), set()
    for seed in range(40):
        document = _json(capsys, [*argv[1:], "--seed", str(seed), "--random-bits", "1"])
        assert (document["seed"], document["random_bits"]) == (seed, 1)
        one_bit.add(document["results"][0]["code"])
        full.add(_json(capsys, [*argv[1:], "--seed", str(seed)])["results"][0]["code"])
    assert one_bit == {0x3C00} and full == {0x3C00, 0x3C01}
    assert main([*argv[:-1], "--seed", "7", "--random-bits", "2"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith("seed 7, 2 random bits (--seed 7 --random-bits 2 repeats the draw)")
    for extra, message in (
        (["--random-bits", "0"], "--random-bits must be 1..64, not 0"),
        (["--random-bits", "65"], "--random-bits must be 1..64, not 65"),
    ):
        assert main([*argv, *extra]) == 2
        assert capsys.readouterr().err.strip().endswith(message)
    assert main(["calc", "1 + 1", "--random-bits", "3"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--random-bits goes with --rounding stochastic only")
    )


def test_errors_past_float64_are_shown_not_dropped_or_zeroed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from decimal import Decimal
    from fractions import Fraction

    from fpexplorer.formats import get_format

    # e16m47's max × max rounded toward zero is max, off by ≈2e19728: the error column said
    # "-" (no error), because the float64 error was null.
    document = _json(capsys, ["max * max", "-f", "e16m47", "--rounding", "toward_zero"])
    result = document["results"][0]
    fmt = get_format("e16m47")
    assert fmt.max is not None
    error = fmt.max * fmt.max - fmt.max
    # 19729 digits: past int(str)'s default limit, not Decimal's.
    assert Fraction(Decimal(result["error_abs_exact"])) == error and result["error_abs"] is None
    assert result["error_abs_text"] == "≈2e19728"
    assert main(["calc", "max * max", "-f", "e16m47", "--rounding", "toward_zero"]) == 0
    assert "≈2e19728 (≈3.98e9878 ulp)" in capsys.readouterr().out
    # Its sqrt(min_subnormal) is irrational, its error about 2.8e-4954: it read "0", and the
    # JSON number 0.0, below float64's smallest subnormal.
    document = _json(capsys, ["sqrt(min_subnormal)", "-f", "e16m47", "--rounding", "toward_zero"])
    result = document["results"][0]
    assert result["error_abs"] is None and result["error_is_approximate"]
    assert result["error_abs_text"] == "≈2.8e-4954"
    assert result["error_ulps_text"] == "≈0.393"
