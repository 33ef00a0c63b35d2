"""`fpexplorer inspect` and `fpexplorer formats`: output, JSON schema, errors, imports."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import pytest

from fpexplorer.cli import main
from fpexplorer.formats import exact_decimal, get_format, list_formats, parse_value

REQUIRED_KEYS = {"format", "code_hex", "class", "value_exact", "value", "error_abs", "error_rel"}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return json.loads(captured.out)  # type: ignore[no-any-return]


def test_inspect_json_for_one_value(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["inspect", "0.1", "--format", "fp16", "bf16", "--json"])
    assert document["input"] == "0.1" and document["rounding"] == "nearest_even"
    fp16, bf16 = document["results"]
    assert REQUIRED_KEYS <= set(fp16)
    assert fp16["format"] == "float16" and fp16["code_hex"] == "0x2e66"
    assert fp16["code_bits"] == "0|01011|1001100110"
    assert fp16["class"] == "normal"
    assert fp16["value_exact"] == "0.0999755859375" and fp16["value"] == 0.0999755859375
    assert fp16["shortest"] == "0.1"
    assert Fraction(fp16["error_abs_exact"]) == Fraction(1, 40960)
    assert fp16["error_abs"] == pytest.approx(1 / 40960)
    assert fp16["error_rel"] == pytest.approx(1 / 4096)
    assert fp16["error_ulps"] == pytest.approx(0.4)
    assert fp16["inexact"] and not fp16["overflow"] and not fp16["underflow"]
    assert fp16["next_up"]["code_hex"] == "0x2e67" and fp16["next_down"]["code_hex"] == "0x2e65"
    assert Fraction(fp16["next_up"]["gap"]) == Fraction(1, 16384)
    assert fp16["fields"] == {
        "sign": 0, "biased_exponent": 11, "unbiased_exponent": -4, "fraction": 0x266,
        "significand": "1.599609375", "is_subnormal": False,
    }  # fmt: skip
    assert bf16["code_hex"] == "0x3dcd"


def test_inspect_all_formats_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["inspect", "1e6", "--all", "--json", "--overflow", "saturate"])
    results = {r["format"]: r for r in document["results"]}
    assert list(results) == [f.name for f in list_formats()]
    assert results["float16"]["code_hex"] == "0x7bff" and results["float16"]["overflow"]
    assert results["float8_e4m3fn"]["code_hex"] == "0x7e"
    default = _json(capsys, ["inspect", "1e6", "-f", "fp16", "e4m3", "--json"])["results"]
    assert default[0]["class"] == "inf" and default[0]["value"] is None
    assert default[0]["value_exact"] == "inf" and default[0]["error_abs"] is None
    assert default[1]["class"] == "nan"  # float8_e4m3fn overflows to NaN, as ml_dtypes
    down = _json(capsys, ["inspect", "0.1", "-f", "fp16", "--rounding", "toward_zero", "--json"])
    assert down["results"][0]["code_hex"] == "0x2e66"
    up = _json(capsys, ["inspect", "0.1", "-f", "fp16", "--rounding", "toward_positive", "--json"])
    assert up["results"][0]["code_hex"] == "0x2e67"
    stochastic = ["inspect", "0.1", "-f", "bf16", "--rounding", "stochastic", "--seed", "3"]
    assert _json(capsys, [*stochastic, "--json"]) == _json(capsys, [*stochastic, "--json"])


@pytest.mark.parametrize(
    ("value", "fmt", "code"),
    [("-1e-3", "e4m3", "0x81"), ("-inf", "fp16", "0xfc00"), ("-max", "bf16", "0xff7f"),
     ("-0", "fp32", "0x80000000"), ("1/3", "fp16", "0x3555"), ("0x1.8p3", "fp16", "0x4a00"),
     ("min_subnormal", "fp16", "0x0001")],
)  # fmt: skip
def test_inspect_values_of_every_kind(
    capsys: pytest.CaptureFixture[str], value: str, fmt: str, code: str
) -> None:
    document = _json(capsys, ["inspect", value, "-f", fmt, "--json"])
    assert document["results"][0]["code_hex"] == code
    if value.lstrip("-") in ("max", "min_subnormal"):
        assert document["input_exact"] is None  # differs per format: in each result
    else:
        assert document["input_exact"] == document["results"][0]["input_exact"]
    expected = get_format(fmt).from_value(parse_value(value, get_format(fmt)))
    assert int(code, 16) == expected


def test_inspect_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "0.1", "-f", "fp16"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "float16 (fp16, half, binary16), 16 bits",
        "0x2e66  0|01011|1001100110   (sign|exponent|fraction)",
        "class      normal",
        "value      0.0999755859375",
        "shortest   0.1",
        # The display rule's notation, as the GUI's read-outs: 6.103515625e-5, not 0.0000610…
        "next up    0x2e67  0.10003662109375  gap +6.103515625e-5",
        "next down  0x2e65  0.09991455078125  gap -6.103515625e-5",
        "error      abs 2.44140625e-5, rel 0.000244140625, 0.4 ulp",
        "flags      inexact",
    ):
        assert expected in out
    assert main(["inspect", "0.1"]) == 0  # the default set of formats
    assert "float8_e5m2" in capsys.readouterr().out


def test_inspect_bits(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["inspect", "--bits", "0x3c00", "--format", "fp16", "--json"])
    (result,) = document["results"]
    assert result["value_exact"] == "1" and result["class"] == "normal"
    assert "error_abs" not in result
    assert (
        _json(capsys, ["inspect", "--bits", "0b0|11111|0000000000", "-f", "fp16", "--json"])[
            "results"
        ][0]["class"]
        == "inf"
    )
    # Failed before: the bits as `inspect` prints them were read as the decimal 111110...
    # ("out of range"), so the code_bits of one answer could not be pasted into the next.
    for name in ("fp16", "e4m3", "binary8p3se", "e2m0"):
        fmt = get_format(name)
        for code in (1, (1 << fmt.width) - 2):
            bits = fmt.code_to_bits(code)
            document = _json(capsys, ["inspect", "--bits", bits, "-f", name, "--json"])
            assert document["results"][0]["code"] == code
    assert main(["inspect", "--bits", "0x7e", "-f", "e4m3"]) == 0
    assert "448" in capsys.readouterr().out
    assert main(["inspect", "--bits", "255", "-f", "e8m0"]) == 0
    assert "nan" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "0.1", "-f", "fp17"], "unknown format"),
        (["inspect", "abc"], "not a number"),
        (["inspect", "1/0"], "division by zero"),
        (["inspect"], "give a VALUE"),
        (["inspect", "--bits", "0x1"], "exactly one --format"),
        (["inspect", "--bits", "0x1", "-f", "fp16", "bf16"], "exactly one --format"),
        (["inspect", "1", "--bits", "0x1", "-f", "fp16"], "not both"),
        (["inspect", "--bits", "0x10000", "-f", "fp16"], "more than 16 bits"),
        (["inspect", "--bits", "0xzz", "-f", "fp16"], "not a hex code"),
        (["inspect", "1", "--all", "-f", "fp16"], "not both"),
        (["inspect", "min_subnormal", "-f", "e8m0"], "no min subnormal"),
        (["inspect", "1", "-f", "e4m3:encoding=fnuz:unsigned"], "sign bit"),
        # An empty name (a shell variable left unset) was an IndexError traceback.
        (["inspect", "1", "-f", ""], "unknown format ''"),
        (["inspect", "1", "-f", " , "], "unknown format"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert lines[0].startswith("fpexplorer inspect: error:")


def test_a_long_bad_value_is_quoted_cut_and_its_wrong_character_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: 60 nines and "not a number", no "…", and the "x" nowhere.
    assert main(["inspect", "9" * 3000 + "x"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "fpexplorer inspect: error: '" + "9" * 60 + "…': not a number: 'x' at character "
        "3001 of 3001 (expected"
    )


def test_value_after_format_list_is_still_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["inspect", "--format", "fp16", "bf16", "0.5", "--json"])
    assert [r["code_hex"] for r in document["results"]] == ["0x3800", "0x3f00"]


def test_formats_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for fmt in list_formats():
        assert fmt.name in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["float16"][5:9] == ["65504", "≈6.104e-5", "≈5.96e-8", "≈0.0009766"]
    assert lines["float8_e5m2"][5] == "57344" and lines["float8_e4m3fn"][5:7] == ["448", "0.015625"]
    # A number not marked "≈" is the exact value (0.0009766 beside 0.0078125 read as exact).
    for fmt in list_formats():
        values = (fmt.max, fmt.min_normal, fmt.min_subnormal, fmt.eps)
        for shown, value in zip(lines[fmt.name][5:9], values, strict=True):
            if shown == "-":
                assert value is None
            elif shown.startswith("≈"):
                assert value is not None and abs(Fraction(Decimal(shown[1:])) / value - 1) < 1e-3
            else:
                assert Fraction(Decimal(shown)) == value, (fmt.name, shown)
        # Rounded once from (m + 1) log10 2: float64 has 15.95 digits (15.9546), not 15.96.
        digits = (fmt.mantissa_bits + 1) * math.log10(2)
        assert lines[fmt.name][9] == f"≈{digits:.2f}", fmt.name
    assert lines["float64"][9] == "≈15.95" and lines["float8_e3m4"][9] == "≈1.51"
    document = _json(capsys, ["formats", "--json"])
    rows = {row["format"]: row for row in document["formats"]}
    assert len(rows) == len(list_formats())
    assert rows["float16"]["max"] == 65504 and rows["float16"]["max_exact"] == "65504"
    assert rows["float16"]["min_subnormal_exact"] == "0.000000059604644775390625"
    assert rows["float8_e8m0fnu"]["min_subnormal"] is None
    assert rows["tfloat32"]["width"] == 19 and "tf32" in rows["tfloat32"]["aliases"]
    assert rows["float8_e4m3fn"]["default_overflow"] == "nan"


def _run(argv: list[str], code: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fpexplorer", *argv] if code is None else [
        sys.executable, "-c", code
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )  # fmt: skip


def test_commands_import_neither_torch_nor_qt() -> None:
    code = (
        "import sys\n"
        "from fpexplorer.cli import main\n"
        "assert main(['inspect', '0.1', '--all', '--json']) == 0\n"
        "assert main(['inspect', '--bits', '0x3c00', '-f', 'fp16']) == 0\n"
        "assert main(['formats', '--json']) == 0\n"
        "assert main(['calc', 'sqrt(2)', '-f', 'binary8p3se', '--json']) == 0\n"
        "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    result = _run([], code)
    assert result.returncode == 0, result.stderr
    modules = set(result.stdout.rsplit("MODULES", 1)[1].split())
    assert not modules & {"torch", "PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6"}
    # The README promises these commands answer without numpy's import (the block formats,
    # which need it, load on first use).
    assert "numpy" not in modules


def test_real_process_exit_status_and_one_line_error() -> None:
    ok = _run(["inspect", "-1e-3", "-f", "e4m3", "--json"])
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["results"][0]["code_hex"] == "0x81"
    bad = _run(["inspect", "0.1", "--format", "nope"])
    assert bad.returncode == 2
    assert bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr


ERROR_LINE = re.compile(r"error +abs (?P<abs>\S+), rel (?P<rel>\S+), (?P<ulps>\S+) ulp")


@pytest.mark.parametrize("value", ["1/3", "0.1", "3e-8", "65519", "1e-400", "1e400", "-2.5"])
def test_inspect_error_numbers_are_exact_or_marked(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # "rel 2.98e-08, 0.3333 ulp" read as exact numbers; 1e-400 printed 400 zeros.
    formats = ["fp32", "fp16", "e4m3", "e8m0", "bf16", "fp4"]
    assert main(["inspect", value, "-f", *formats]) == 0
    blocks = capsys.readouterr().out.split("\n\n")[1:]
    assert len(blocks) == len(formats)
    for block, name in zip(blocks, formats, strict=True):
        (line,) = [line for line in block.splitlines() if line.startswith("  error ")]
        assert len(line) < 80, line
        rounded = get_format(name).round(value)
        found = ERROR_LINE.search(line)
        if rounded.error_abs is None:
            assert found is None, line
            continue
        assert found is not None, line
        for key, exact in (
            ("abs", rounded.error_abs),
            ("rel", rounded.error_rel),
            ("ulps", rounded.error_ulps),
        ):
            shown = found.group(key)
            if shown.startswith("≈"):
                assert Fraction(Decimal(shown[1:])) != exact, (name, key, shown)
            else:
                assert Fraction(Decimal(shown)) == exact, (name, key, shown)


@pytest.mark.parametrize(
    ("value", "name"), [("max", "fp64"), ("min_subnormal", "fp64"), ("min_subnormal", "fp32")]
)
def test_inspect_long_values_show_their_own_first_digits(
    capsys: pytest.CaptureFixture[str], value: str, name: str
) -> None:
    # float64's max printed "...6078002854e+308" (rounded) where its digits run 60780028538.
    assert main(["inspect", value, "-f", name]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "  value " in line]
    shown, _, note = line.split()[1].partition("…")
    assert note.startswith("e") and "digits, all in --json" in line
    fmt = get_format(name)
    exact = exact_decimal(fmt.to_fraction(fmt.from_value(parse_value(value, fmt))))
    digits = exact.replace(".", "").lstrip("0")
    assert digits.startswith(shown.replace(".", "")), (shown, digits[:90])


@pytest.mark.parametrize(
    ("bits", "name"),
    [("0x7c00", "fp16"), ("0x7e00", "fp16"), ("0x7f", "e4m3"), ("0x80", "binary8p3se")],
)
def test_inspect_fields_of_a_special_code_claim_no_power_of_two(
    capsys: pytest.CaptureFixture[str], bits: str, name: str
) -> None:
    # FP16's inf printed "exponent 31 (2^16), ..., significand 1": it read as 65536.
    assert main(["inspect", "--bits", bits, "-f", name]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "  fields " in line]
    assert "2^" not in line and "special code, no power of two or significand" in line


@pytest.mark.parametrize("command", ["gui", "screenshot"])
@pytest.mark.parametrize("value", ["-1e-3", "-inf", "-max", "-0x1p-3", "-1/3", "-nan"])
def test_gui_and_screenshot_take_negative_values(command: str, value: str) -> None:
    # `fpexplorer gui --value -1e-3` stopped at "argument --value: expected one argument"
    # (argparse takes only -1 or -0.5 as values); inspect took them all.
    from fpexplorer.cli import build_parser

    extra = ["--out", "x.png"] if command == "screenshot" else []
    parsed = build_parser(command).parse_args([command, *extra, "--value", value])
    assert parsed.value == value
    inspected = build_parser("inspect").parse_args(["inspect", value])
    assert inspected.value == value


@pytest.mark.parametrize(
    "argv",
    [["inspect", "0.1", "-f", "fp16", "--seed", "3"], ["calc", "0.1 + 0.2", "--seed", "3"]],
)
def test_a_seed_without_stochastic_rounding_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # --random-bits without stochastic rounding was refused, --seed silently ignored.
    assert main(argv) == 2
    assert "--seed goes with --rounding stochastic only" in capsys.readouterr().err
    assert main([*argv, "--rounding", "stochastic"]) == 0


def test_stochastic_rounding_reports_its_seed_and_the_seed_repeats_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: without --seed the draw was random and nothing said which it was, so an
    # answer could not be repeated; and --random-bits alone blamed "rounding='stochastic'".
    argv = ["inspect", "1/3", "-f", "fp16", "bf16", "e4m3", "--rounding", "stochastic"]
    first = _json(capsys, [*argv, "--random-bits", "8", "--json"])
    seed = first["seed"]
    assert isinstance(seed, int)
    again = _json(capsys, [*argv, "--random-bits", "8", "--seed", str(seed), "--json"])
    assert again["seed"] == seed
    assert [r["code"] for r in again["results"]] == [r["code"] for r in first["results"]]
    for fmt, result in zip(("fp16", "bf16", "e4m3"), first["results"], strict=True):
        expected = get_format(fmt).from_value("1/3", "stochastic", seed=seed, random_bits=8)
        assert result["code"] == expected
    assert main([*argv, "--seed", "5"]) == 0
    assert "seed 5 (--seed 5 repeats the draw)" in capsys.readouterr().out.splitlines()[0]
    assert _json(capsys, ["inspect", "1/3", "-f", "fp16", "--json"])["seed"] is None
    assert main(["inspect", "1/3", "--random-bits", "3"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--random-bits goes with --rounding stochastic only")
    )


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["formats", "extra"], "fpexplorer formats: error: unrecognized arguments: extra"),
        (
            ["inspect", "--", "0.1", "-f", "fp16"],
            "fpexplorer inspect: error: unrecognized arguments: -f fp16",
        ),
        (["calc", "1 + 1", "2"], "fpexplorer calc: error: unrecognized arguments: 2"),
    ],
)
def test_an_extra_argument_is_named_by_its_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], prefix: str
) -> None:
    # Failed before: "fpexplorer: error: unrecognized arguments", not naming the command
    # whose other errors say "fpexplorer formats: error".
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == prefix


def test_json_fields_of_inf_and_nan_have_no_power_of_two_or_significand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: FP16's inf had "unbiased_exponent": 16 and "significand": "1" (65536),
    # its NaN "1.5", while the text output says a special code has neither.
    for value, name in (("inf", "fp16"), ("nan", "fp16"), ("nan", "e4m3"), ("nan", "e8m0")):
        (result,) = _json(capsys, ["inspect", value, "-f", name, "--json"])["results"]
        fields = result["fields"]
        assert fields["unbiased_exponent"] is None and fields["significand"] is None
        assert fields["biased_exponent"] == get_format(name).fields(result["code"]).biased_exponent
    (one,) = _json(capsys, ["inspect", "--bits", "0x3c00", "-f", "fp16", "--json"])["results"]
    assert one["fields"]["unbiased_exponent"] == 0 and one["fields"]["significand"] == "1"


def test_json_values_past_float64_are_null_not_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # e16m47's smallest subnormal, 2.0079…e-9878, had "value": 0.0 (and its max was null):
    # a JSON number says what float64 holds, null when it holds nothing near.
    for code, exact_start in (("0x1", "0.0000"), ("0x7fff7fffffffffff", "14154610310449")):
        argv = ["inspect", "--bits", code, "-f", "e16m47", "--json"]
        result = _json(capsys, argv)["results"][0]
        assert result["value"] is None and result["value_exact"].startswith(exact_start)
    for code, value in (("0x8000", -0.0), ("0x0000", 0.0), ("0x0001", 2.0**-24)):
        result = _json(capsys, ["inspect", "--bits", code, "-f", "fp16", "--json"])["results"][0]
        assert result["value"] == value and str(result["value"]) == str(value)


def test_a_bias_out_of_range_says_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "1", "-f", "e4m3:bias=1000000"]) == 2
    assert "bias 1000000 is out of range (-65536..65536)" in capsys.readouterr().err


def test_an_unsigned_format_has_no_sign_field(capsys: pytest.CaptureFixture[str]) -> None:
    # E8M0's fields read "sign 0, exponent 128" beside a layout of "(exponent)" alone.
    assert main(["inspect", "2", "-f", "e8m0"]) == 0
    fields = next(line for line in capsys.readouterr().out.splitlines() if "fields" in line)
    assert fields.split(None, 1)[1].startswith("exponent 128 (2^1)"), fields
    result = _json(capsys, ["inspect", "2", "-f", "e8m0", "binary8p4ue", "fp16", "--json"])
    assert [r["fields"]["sign"] for r in result["results"]] == [None, None, 0]


@pytest.mark.parametrize("value", ["0|01111|0000000000", "0b0011110000000000", "0x3C00"])
def test_a_code_given_as_the_value_is_a_code_of_the_one_format(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # Pasted from inspect's own code row, it said "not a number (expected a decimal …)"; then
    # "decode it with --bits". A code is read as the app's entry field reads it: in the one
    # selected format (and refused when several are, each reading it differently).
    (result,) = _json(capsys, ["inspect", value, "-f", "fp16", "--json"])["results"]
    assert result["code"] == 0x3C00 and result["value_exact"] == "1"
    assert main(["inspect", value, "-f", "fp16", "bf16"]) == 2
    message = capsys.readouterr().err
    assert "2 are selected: give one --format, or name its format (float16:" in message
    # A hex float is the number only where the code is written in hex.
    assert ("hex float" in message) == value.startswith("0x")
    assert (
        _json(capsys, ["inspect", "--bits", value, "-f", "fp16", "--json"])["results"][0]["code"]
        == 0x3C00
    )


@pytest.mark.parametrize(
    ("formats", "example"), [(["fp16", "fp32"], "float32"), (["fp32", "fp16"], "float32")]
)
def test_a_code_with_several_formats_gets_one_message_whatever_their_order(
    capsys: pytest.CaptureFixture[str], formats: list[str], example: str
) -> None:
    # 0x1FFFF with fp16 first said "more than 16 bits" (read in fp16 alone), with fp32 first
    # "2 are selected ... (fp16:0x1FFFF)", an example that is itself refused.
    assert main(["inspect", "0x1FFFF", "-f", *formats]) == 2
    message = capsys.readouterr().err
    assert "2 are selected: give one --format" in message
    assert f"({example}:0x1FFFF)" in message and "more than 16 bits" not in message


def test_a_code_among_the_default_formats_names_the_narrowest_that_holds_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was 'name its format (float32:0x3C00)': the first of the defaults that holds it, for a
    # code written with FP16's four hex digits.
    assert main(["inspect", "0x3C00"]) == 2
    assert "name its format (float16:0x3C00)" in capsys.readouterr().err
    assert main(["inspect", "0x1FFFF", "-f", "fp16", "fp32"]) == 2
    assert "name its format (float32:0x1FFFF)" in capsys.readouterr().err
