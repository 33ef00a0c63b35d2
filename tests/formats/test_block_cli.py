"""`fpexplorer quantize`: JSON and text output, files, forced scales, errors, imports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fpexplorer.cli import main
from fpexplorer.commands import quantize as quantize_command
from fpexplorer.formats import SCALE_RULES, list_block_formats, quantize


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(["quantize", *argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return json.loads(captured.out)  # type: ignore[no-any-return]


def test_the_command_line_lists_the_engines_formats_and_rules() -> None:
    assert quantize_command.BLOCK_FORMATS == tuple(f.name for f in list_block_formats())
    assert quantize_command.SCALE_RULES == SCALE_RULES


def test_typed_values_block_by_block(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["--format", "mxfp4", "1", "-0.75", "0.3", "5"])
    assert document["format"] == "mxfp4" and document["scale_rule"] == "floor"
    assert document["element_format"] == "float4_e2m1fn" and document["block_size"] == 32
    assert document["blocks_total"] == 1 and document["tensor_scale"] is None
    (block,) = document["blocks"]
    assert block["scale_code_hex"] == "0x7f" and block["scale_bits"] == "01111111"
    assert block["scale"] == 1.0 and block["scale_text"] == "2^0"
    elements = block["elements"]
    # -0.75 is a tie between 0.5 (odd code) and 1 (even): 1; 5 ties 4 and 6: 4.
    assert [e["code_hex"] for e in elements] == ["0x2", "0xa", "0x1", "0x6"]
    assert [e["code_bits"] for e in elements] == ["0|01|0", "1|01|0", "0|00|1", "0|11|0"]
    assert [e["value"] for e in elements] == [1.0, -1.0, 0.5, 4.0]
    assert [e["value_exact"] for e in elements] == ["1", "-1", "0.5", "4"]
    # Errors are exact: 0.3 typed is 3/10, not the float64 near it.
    assert [e["error_text"] for e in elements] == ["0", "-0.25", "0.2", "-1"]
    assert [e["input_text"] for e in elements] == ["1", "-0.75", "0.3", "5"]
    summary = document["summary"]
    assert summary["count"] == 4 and summary["max_abs_error"] == 1.0
    assert summary["worst_block"] == 0
    assert summary["rmse"] == pytest.approx((0.25**2 + 0.2**2 + 1) ** 0.5 / 2)
    text = _text(capsys, ["-f", "mxfp4", "1", "-0.75", "0.3", "5"])
    assert "block 0: scale 0x7f (01111111) = 2^0" in text  # inspect's 2^996, not 2**0
    assert "summary of 4 finite values in 1 block: " in text


def _text(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["quantize", *argv]) == 0
    return capsys.readouterr().out


def test_nvfp4_shows_the_per_tensor_scale(capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, ["-f", "nvfp4", "2688", "1/3", "-6"])
    scale = document["tensor_scale"]
    assert scale["value"] == 1.0 and scale["code_hex"] == "0x3f800000"
    block = document["blocks"][0]
    assert block["scale_code_hex"] == "0x7e" and block["scale_exact"] == "448"
    assert block["elements"][1]["error_text"] == "-0.333333333…"  # marked: not exact digits
    assert block["elements"][1]["input_text"] == "1/3"


def test_long_inputs_are_listed_in_blocks_and_summarised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = [str(v) for v in np.linspace(-3, 3, 70)]
    document = _json(capsys, ["-f", "mxint8", "--max-blocks", "2", *values])
    assert document["blocks_total"] == 3 and document["blocks_shown"] == 2
    assert [len(b["elements"]) for b in document["blocks"]] == [32, 32]
    assert document["blocks"][1]["elements"][0]["index"] == 32
    assert document["summary"]["count"] == 70
    text = _text(capsys, ["-f", "mxint8", "--max-blocks", "1", *values])
    assert "(2 more blocks not listed; --max-blocks N to list them)" in text


def test_npy_and_csv_go_through_the_array_quantizer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((3, 40)).astype(np.float32)
    np.save(tmp_path / "x.npy", data)
    document = _json(
        capsys, ["-f", "mxfp6_e2m3", "--npy", str(tmp_path / "x.npy"), "--max-blocks", "99"]
    )
    expected = quantize(data, "mxfp6_e2m3")
    assert document["shape"] == [3, 40] and document["blocks_total"] == 6
    for block in document["blocks"]:
        assert int(block["scale_code_hex"], 16) == expected.scale_codes[tuple(block["index"])]
        for element in block["elements"]:
            index = tuple(element["index"])
            assert int(element["code_hex"], 16) == expected.codes[index]
            assert element["value"] == expected.values[index]
            assert Fraction(element["input_exact"]) == Fraction(float(data[index]))
    stats = expected.tensor_stats()
    assert document["summary"]["sqnr_db"] == pytest.approx(stats.sqnr_db)
    assert document["summary"]["share_saturated"] == stats.share_saturated
    # Blocks along the first axis: indices stay those of the array and the scale grid.
    along = _json(capsys, ["-f", "mxfp4", "--npy", str(tmp_path / "x.npy"), "--axis", "0"])
    by_axis = quantize(data, "mxfp4", axis=0)
    first = along["blocks"][1]
    assert first["index"] == [0, 1]
    assert int(first["scale_code_hex"], 16) == by_axis.scale_codes[0, 1]
    assert [e["index"] for e in first["elements"]] == [[0, 1], [1, 1], [2, 1]]
    worst = np.unravel_index(np.argmin(by_axis.block_stats().sqnr_db), by_axis.scale_codes.shape)
    assert along["summary"]["worst_block"] == [int(i) for i in worst]
    np.savetxt(tmp_path / "x.csv", data[:2, :5], delimiter=",")
    csv = _json(capsys, ["-f", "nvfp4", "--csv", str(tmp_path / "x.csv")])
    assert csv["source"] == "csv" and csv["shape"] == [2, 5] and csv["blocks_total"] == 2
    assert csv["tensor_scale"]["value"] == quantize(data[:2, :5], "nvfp4").tensor_scale


def test_forced_scale_code_and_rule(capsys: pytest.CaptureFixture[str]) -> None:
    forced = _json(capsys, ["-f", "mxfp4", "--scale-code", "0x80", "1", "-0.75", "0.3", "5"])
    assert [e["value"] for e in forced["blocks"][0]["elements"]] == [1.0, -1.0, 0.0, 4.0]
    ceil = _json(capsys, ["-f", "mxfp4", "--scale-rule", "ceil", "5"])
    assert ceil["scale_rule"] == "ceil" and ceil["blocks"][0]["scale_code_hex"] == "0x80"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-f", "mxfp4"], "give VALUES, --npy FILE or --csv FILE"),
        (["-f", "mxfp4", "1", "--npy", "x.npy"], "exactly one of them"),
        (["-f", "mxfp4", "--npy", "/nonexistent.npy"], "no such file"),
        (["-f", "mxfp4", "abc"], "'abc': not a number"),
        (["-f", "mxfp4", "--rounding", "up", "1"], "unknown rounding mode 'up'"),
        (["-f", "mxfp4", "--scale-code", "0x1ff", "1"], "more than 8 bits"),
        (["-f", "mxfp4", "--scale-code", "zz", "1"], "is not a code"),
        (["-f", "nvfp4", "--scale-code", "0x80", "1"], "non-negative"),
        (["-f", "mxfp4", "--scale-rule", "nearest", "1"], "does not fit"),
        (["-f", "mxfp5", "1"], "invalid choice: 'mxfp5'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        status = main(["quantize", *argv])
    except SystemExit as exit_:  # argparse's own errors (a bad choice) exit from the parser
        status = exit_.code  # type: ignore[assignment]
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_files_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("1,2\n3\n")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    (tmp_path / "empty.csv").write_text("\n")  # numpy warned on stderr above our line
    for argv in (
        ["--csv", str(tmp_path / "bad.csv")],
        ["--npy", str(tmp_path / "bad.npy")],
        ["--csv", str(tmp_path / "empty.csv")],
    ):
        assert main(["quantize", "-f", "mxfp4", *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        # numpy's own advice for a file without the .npy header: load it "unsafely".
        assert "unsafely" not in err and "pickle" not in err
    assert main(["quantize", "-f", "mxfp4", "--npy", str(tmp_path / "bad.npy")]) == 2
    reason = "bad.npy: not a readable .npy file (no .npy header: not a file numpy.save wrote)"
    assert capsys.readouterr().err.strip().endswith(reason)
    np.save(tmp_path / "x.npy", np.ones((2, 3)))
    assert main(["quantize", "-f", "mxfp4", "--npy", str(tmp_path / "x.npy"), "--axis", "5"]) == 2
    assert "axis 5 is out of range" in capsys.readouterr().err


def test_a_bfloat16_npy_file_gets_a_message_that_says_what_to_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # np.load reads an ml_dtypes bfloat16 .npy as raw |V2 words: the message was "quantize
    # takes an array of numbers, not |V2".
    import ml_dtypes

    np.save(tmp_path / "bf16.npy", np.array([1.0, -2.5], dtype=ml_dtypes.bfloat16))
    assert main(["quantize", "-f", "mxfp4", "--npy", str(tmp_path / "bf16.npy")]) == 2
    err = capsys.readouterr().err
    assert "bfloat16 or float8" in err and "x.astype(np.float32)" in err
    # An array of ml_dtypes values handed to the library still works.
    values = quantize(np.array([1.0, -2.5], dtype=ml_dtypes.bfloat16), "mxfp4").values
    assert list(values) == [1.0, -2.0]


def test_quantize_imports_neither_torch_nor_qt() -> None:
    code = (
        "import sys\n"
        "from fpexplorer.cli import main\n"
        "assert main(['quantize', '-f', 'nvfp4', '1', '2', '3']) == 0\n"
        "bad = [m for m in ('torch', 'PySide6', 'pyqtgraph') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_readme_quantize_example_is_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```console\n\$ fpexplorer (quantize .*?)\n(.*?)```", readme, re.DOTALL)
    assert block is not None
    assert main(block.group(1).split()) == 0
    assert capsys.readouterr().out == block.group(2)


def test_shares_are_exact_or_marked_and_sqnr_keeps_its_unit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 3 of 7 flushed printed "42.86%" as if exact; an exact block "SQNR inf (no error) dB".
    assert main(["quantize", "-f", "mxint8", "0.1", "-2.5", "1e-3", "1/3", "-127", "5", "2"]) == 0
    out = capsys.readouterr().out
    assert "flushed to zero ≈42.86%" in out and "saturated 0.00%" in out
    assert main(["quantize", "-f", "mxfp4", "0", "1", "-0.5"]) == 0
    out = capsys.readouterr().out
    assert "SQNR inf dB (no error)" in out and "flushed to zero 0.00%" in out
    assert main(["quantize", "-f", "mxfp4", "2"]) == 0
    assert "summary of 1 finite value in 1 block:" in capsys.readouterr().out  # not "values"
    assert main(["quantize", "-f", "mxfp4", "--max-blocks", "0", "2"]) == 0
    assert "(1 more block not listed;" in capsys.readouterr().out


def test_values_beyond_float64_are_null_in_json_and_exact_in_their_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: 1e400 typed into nvfp4 raised OverflowError (float() of its exact
    # error), and into mxfp4 with --json raised ValueError (json cannot write inf).
    document = _json(capsys, ["-f", "mxfp4", "1e400", "1"])
    first, second = document["blocks"][0]["elements"]
    assert first["input"] is None and first["input_exact"] == "1" + "0" * 400
    assert second["input"] == 1.0
    assert document["blocks"][0]["scale_exact"] == "nan"  # 1e400 is past E8M0's scales
    document = _json(capsys, ["-f", "nvfp4", "1e400", "1"])
    assert document["tensor_scale"]["code_hex"] == "0x7f7fffff"  # FP32's max, clamped
    first = document["blocks"][0]["elements"][0]
    # 6 x 448 x FP32 max, and the error to 1e400 is past float64: null, exact in text.
    value = 6 * 448 * Fraction((2 - Fraction(1, 2**23)) * 2**127)
    assert first["value_exact"] == str(int(value))
    assert first["error"] is None and first["error_text"].startswith("-9.99999999…e399")
    assert document["summary"]["max_abs_error"] is None
    assert "block 0: scale 0x7e" in _text(capsys, ["-f", "nvfp4", "1e400", "1"])


def test_exact_error_stats_keep_an_rmse_whose_square_is_past_float64() -> None:
    # Failed before: float(squared / count) raised OverflowError for errors of 1e200.
    from fpexplorer.formats import exact_error_stats, quantize_block_exact

    block = quantize_block_exact(["1e200", "3e199"], "mxfp8_e4m3", scale_code=254)
    errors = [abs(v.fraction - x.fraction) for x, v in zip(block.inputs, block.values, strict=True)]
    stats = exact_error_stats([block])
    expected = math.sqrt(float(sum(e * e for e in errors) / 2 / Fraction(10) ** 400)) * 1e200
    assert stats.rmse == pytest.approx(expected, rel=1e-15)
    assert stats.max_abs_error == float(max(errors))


def test_options_that_nothing_uses_are_refused_and_a_stochastic_seed_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Failed before: --axis 5 with typed values and --seed without stochastic rounding were
    # ignored in silence, and an unseeded stochastic run could not be repeated.
    for extra, words in ((["--axis", "5"], "--axis goes with"), (["--seed", "1"], "--seed goes")):
        assert main(["quantize", "-f", "mxfp4", *extra, "1", "0.3"]) == 2
        assert words in capsys.readouterr().err
    argv = ["-f", "mxfp4", "--rounding", "stochastic", "1", "0.3", "1/3", "-0.7"]
    first = _json(capsys, argv)
    seed = first["seed"]
    assert isinstance(seed, int)
    again = _json(capsys, [*argv, "--seed", str(seed)])
    assert again["blocks"] == first["blocks"]
    assert _json(capsys, ["-f", "mxfp4", "1"])["seed"] is None
    assert "seed 3 (--seed 3 repeats the draw)" in _text(capsys, [*argv, "--seed", "3"])


def test_summary_errors_use_the_rows_exponent_notation(capsys: pytest.CaptureFixture[str]) -> None:
    # Failed before: the rows said -2.69008283…e31, the summary ≈2.69e+31 (and ≈1.863e-08).
    text = _text(capsys, ["-f", "nvfp4", "1e39", "1"])
    assert "-2.69008283…e31" in text and "max |error| ≈2.69e31, RMSE ≈1.902e31" in text
    assert "max |error| ≈1.863e-8" in _text(capsys, ["-f", "nvfp4", "inf", "1"])


def test_a_finite_error_past_float64_is_never_called_inf(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 1e400 saturates to 6 under a forced scale of 1: an error of 1e400 - 6, finite. The
    # summary said "max |error| inf, RMSE inf" and --json had nothing but null.
    argv = ["-f", "mxfp4", "1e400", "1", "--scale-code", "0x7f"]
    assert main(["quantize", *argv]) == 0
    out = capsys.readouterr().out
    summary = out.strip().splitlines()[-1]
    assert "max |error| ≈1e400, RMSE ≈7.071e399," in summary, summary
    assert "inf" not in summary
    document = _json(capsys, argv)
    stats = document["summary"]
    error = Fraction(10**400 - 6)
    assert stats["max_abs_error"] is None  # JSON numbers stop at float64's range
    assert Fraction(stats["max_abs_error_exact"]) == error
    assert stats["max_abs_error_text"] == "≈1e400"
    assert stats["rmse_text"] == "≈7.071e399"  # √((error² + 0) / 2) = error / √2
    assert document["blocks"][0]["stats"]["max_abs_error_exact"] == stats["max_abs_error_exact"]
    # A NaN block scale still reads inf: there the finite inputs did become NaN.
    nan_scale = _json(capsys, ["-f", "mxfp4", "1e400", "1"])["summary"]
    assert nan_scale["max_abs_error_text"] == "inf" and nan_scale["max_abs_error_exact"] is None


def test_summary_errors_are_exact_when_short_and_rounded_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stats = _json(capsys, ["-f", "mxfp4", "1", "-0.75", "0.3", "5"])["summary"]
    # Errors 0, 0.25, 0.2, 1: max 1 exactly (it read "≈1"), RMSE √0.275625 = 0.525 exactly.
    assert (stats["max_abs_error_text"], stats["rmse_text"]) == ("1", "0.525")
    stats = _json(capsys, ["-f", "mxfp4", "1", "0.3"])["summary"]
    assert stats["rmse_text"] == "≈0.03536"  # 0.3 -> 0.25 under scale 2^-2: √(0.05² / 2)


def test_a_semicolon_csv_is_named_and_numpys_own_advice_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A European spreadsheet's "1,5;2,5" said only "could not convert string '5;2'"; a ragged
    # file told the user to "use `usecols`", numpy's keyword, not an option of this command.
    european = tmp_path / "eu.csv"
    european.write_text("1,5;2,5\n3,5;4\n", encoding="utf-8")
    assert main(["quantize", "-f", "mxfp4", "--csv", str(european)]) == 2
    err = capsys.readouterr().err
    assert "not ';' and ','" in err and len(err.strip().splitlines()) == 1
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("1.5, 2.5\n3\n", encoding="utf-8")
    assert main(["quantize", "-f", "mxfp4", "--csv", str(ragged)]) == 2
    err = capsys.readouterr().err
    assert "the number of columns changed from 2 to 1 at row 2" in err and "usecols" not in err


def test_a_block_of_no_finite_value_has_no_figures_and_no_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """NVFP4 saturates -inf under a finite scale: no finite input, no error to measure. The
    line read "SQNR n/a dB"."""
    assert main(["quantize", "-f", "nvfp4", "--", "-inf", "-inf"]) == 0
    out = capsys.readouterr().out
    expected = "max |error| n/a, RMSE n/a, SQNR n/a, saturated n/a, flushed to zero n/a"
    assert out.count(expected) == 2 and "n/a dB" not in out


def test_a_zero_block_scale_reads_zero_not_a_power_of_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """NVFP4's E4M3 scale forced to 0x00 is 0: the block line read "= 2^-1" (the power-of-two
    test passed 0), while every element came out 0."""
    assert main(["quantize", "-f", "nvfp4", "--scale-code", "0x00", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "block 0: scale 0x00 (0|0000|000) = 0\n" in out and "2^-1" not in out
    assert main(["quantize", "-f", "mxfp4", "--scale-code", "0x00", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks"][0]["scale_text"] == "2^-127"
