"""The bit editors' state model, without any widget (no Qt needed).

Expected codes come from numpy / ml_dtypes conversions (the oracles), not from the engine.
"""

from __future__ import annotations

import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpexplorer.formats import ExactValue, get_format, list_formats, make_format, parse_value
from fpexplorer.gui.formats.state import EditorState, FormatsSession, build_readout, parse_code
from fpexplorer.gui.formats.text import short, typed


def oracle_code(value: float, dtype: object) -> int:
    array = np.array(value, dtype=np.float64).astype(dtype)
    width = np.dtype(dtype).itemsize * 8
    return int(array.view(f"uint{width}"))


def session_of(*names: str, linked: bool = True) -> FormatsSession:
    return FormatsSession([get_format(name) for name in names], linked=linked)


def test_toggle_bit_changes_code_value_and_readout() -> None:
    editor = EditorState(get_format("fp16"), 0x3C00)  # 1.0
    seen: list[int] = []
    editor.changed.connect(lambda: seen.append(editor.code))
    editor.toggle_bit(9)  # top fraction bit: 1.0 -> 1.5
    assert editor.code == 0x3E00 == oracle_code(1.5, np.float16)
    readout = editor.readout()
    assert readout.exact == "1.5"
    assert readout.hex_code == "0x3E00"
    assert readout.binary_code == "0|01111|1000000000"
    assert readout.kind == "normal"
    assert "2^(15 − 15)" in readout.formula and "1.1000000000₂" in readout.formula
    assert seen == [0x3E00]  # exactly one change signal


def test_paint_bits_sets_each_bit_to_the_painted_value() -> None:
    editor = EditorState(get_format("fp16"), 0)
    editor.paint_bits([14, 13, 12, 11], True)
    assert editor.code == 0x7800
    editor.paint_bits([14, 13], False)
    assert editor.code == 0x1800


@pytest.mark.parametrize(
    ("text", "expected_code"),
    [
        ("0.1", oracle_code(0.1, np.float32)),
        ("1/3", oracle_code(1 / 3, np.float32)),
        ("0x1.8p3", oracle_code(12.0, np.float32)),
        ("-2.5e-3", oracle_code(-2.5e-3, np.float32)),
        ("inf", 0x7F800000),
        ("-inf", 0xFF800000),
        ("-0", 0x80000000),
        ("max", oracle_code(float(np.finfo(np.float32).max), np.float32)),
        ("eps", oracle_code(float(np.finfo(np.float32).eps), np.float32)),
        ("min_normal", oracle_code(float(np.finfo(np.float32).tiny), np.float32)),
        ("-min_subnormal", 0x80000001),
        ("0x3F800000", 0x3F800000),  # raw code
        ("0b0_01111111_00000000000000000000000", 0x3F800000),  # raw code in binary
    ],
)
def test_typed_values_of_each_kind(text: str, expected_code: int) -> None:
    session = session_of("fp32")
    assert session.enter_text(text), session.entry_error
    assert session.active.code == expected_code
    assert session.entry_error is None


def test_typed_nan_gives_a_nan_code() -> None:
    session = session_of("fp32")
    assert session.enter_text("nan")
    assert session.active.readout().kind == "nan"


def test_typed_value_reports_rounding_error_and_flags() -> None:
    session = session_of("fp16")
    session.enter_text("0.1")
    rounded = session.active.readout().rounded
    assert rounded is not None
    assert rounded.inexact and not rounded.overflow
    exact_fp16 = Fraction(float(np.float16(0.1)))
    assert rounded.error_abs == abs(exact_fp16 - Fraction(1, 10))
    session.enter_text("70000")
    rounded = session.active.readout().rounded
    assert rounded is not None and rounded.overflow
    assert session.active.readout().kind == "inf"


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "0x1G", "max!", "0x1FFFF", "1/0"])
def test_bad_text_gives_a_message_and_keeps_the_state(bad: str) -> None:
    session = session_of("fp16", "bf16")
    session.enter_text("0.1")
    before = [(editor.format, editor.code, editor.input) for editor in session.editors]
    changes: list[int] = []
    session.changed.connect(lambda: changes.append(1))
    assert not session.enter_text(bad)
    assert session.entry_error  # a message to show next to the field
    assert [(e.format, e.code, e.input) for e in session.editors] == before
    assert changes == []


def test_the_binary_readout_pasted_back_reads_as_its_code() -> None:
    # Failed before: "0|01111|0000000000", as the Binary read-out shows it, was "not a
    # number"; only the 0b form was a code.
    for name in ("fp16", "e5m2", "bf16", "e2m0", "binary8p3se"):
        fmt = get_format(name)
        for code in (1, (1 << fmt.width) - 2):
            readout = build_readout(fmt, code, None)
            assert parse_code(readout.binary_code, fmt) == code
    session = FormatsSession([get_format("fp16")])
    assert session.enter_text("fp16:0|11111|0000000000")
    assert session.active.code == 0x7C00
    assert not session.enter_text("1|2")  # not bits: still an error, not a code


def test_raw_code_too_wide_for_the_format_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bits"):
        parse_code("0x12345", get_format("fp16"))
    assert parse_code("0x1.8p3", get_format("fp16")) is None  # a hex float, not a code


@pytest.mark.parametrize("text", ["-0x3C00", "+0x3c00", "-0b0011110000000000", " - 0x1"])
def test_a_signed_code_is_refused_not_read_as_a_hex_number(text: str) -> None:
    # "0x3C00" is FP16's 1.0, but "-0x3C00" was read as the hex number -15360: a sign
    # silently switched the entry from code to value.
    session = session_of("fp16")
    before = session.active.code
    assert not session.enter_text(text)
    assert session.entry_error is not None and "code has no sign" in session.entry_error
    assert session.active.code == before
    assert session.enter_text("-0x3C00p0") and session.active.value().fraction == -15360
    assert session.enter_text("0x3C00") and session.active.value().fraction == 1


@pytest.mark.parametrize("text", ["0x_", "0b_", "0b|", "0x", "0b"])
def test_a_code_prefix_without_digits_gets_a_message_about_the_text(text: str) -> None:
    session = session_of("fp16")
    assert not session.enter_text(text)
    assert session.entry_error is not None and "invalid literal" not in session.entry_error
    assert repr(text) in session.entry_error


def test_stepping_up_down_exponent_fraction() -> None:
    session = session_of("fp16")
    editor = session.active
    session.set_code(editor, 0x3C00)  # 1.0
    session.step(editor, "up")
    assert editor.code == 0x3C01
    session.step(editor, "down")
    session.step(editor, "down")
    assert editor.code == 0x3BFF
    session.set_code(editor, 0x3C00)
    session.step(editor, "exponent+")
    assert editor.readout().exact == "2"
    session.step(editor, "exponent-")
    session.step(editor, "exponent-")
    assert editor.readout().exact == "0.5"
    session.step(editor, "fraction+")
    assert editor.code == 0x3801
    session.step(editor, "fraction-")
    session.step(editor, "fraction-")  # fraction already all zeros: refused, said so
    assert editor.code == 0x3800
    assert editor.problem and "zeros" in editor.problem


def test_stepping_past_the_top_is_refused_with_a_reason() -> None:
    session = session_of("fp16")
    editor = session.active
    session.set_code(editor, 0x7C00)  # +inf
    session.step(editor, "up")
    assert editor.code == 0x7C00
    assert editor.problem


def test_gaps_are_the_distances_to_both_neighbours() -> None:
    editor = EditorState(get_format("fp16"), 0x3C00)
    readout = editor.readout()
    assert readout.gap_up == Fraction(1, 1024)
    assert readout.gap_down == Fraction(1, 2048)


def test_linked_editors_show_the_typed_value_rounded_into_each_format() -> None:
    session = session_of("fp32", "fp16", "bf16")
    session.enter_text("0.1")
    codes = [editor.code for editor in session.editors]
    assert codes == [
        oracle_code(0.1, np.float32),
        oracle_code(0.1, np.float16),
        oracle_code(0.1, ml_dtypes.bfloat16),
    ]
    # A bit clicked in FP16 carries FP16's exact value over to the others.
    session.toggle_bit(session.editors[1], 15)
    assert session.active is session.editors[1]
    assert session.editors[0].code == oracle_code(-float(np.float16(0.1)), np.float32)


def test_unlinked_editors_stay_put() -> None:
    session = session_of("fp32", "fp16", linked=False)
    session.enter_text("0.1")
    assert session.editors[1].code == 0


def test_format_switch_keeps_the_value() -> None:
    session = session_of("fp32")
    session.enter_text("3.25")
    session.set_format(session.active, get_format("float8_e4m3fn"))
    assert session.active.readout().exact == "3.25"
    assert session.active.code == oracle_code(3.25, ml_dtypes.float8_e4m3fn)


def test_rounding_mode_change_rerounds_the_typed_value() -> None:
    session = session_of("fp16")
    session.enter_text("0.1")
    nearest = session.active.code
    assert Fraction(float(np.float16(0.1))) < Fraction(1, 10)  # nearest is the one below
    session.set_rounding("toward_positive")
    assert session.active.code == nearest + 1
    session.set_overflow("saturate")
    session.enter_text("1e6")
    assert session.active.readout().exact == "65504"


def test_custom_format_is_offered_and_usable() -> None:
    session = session_of("fp32")
    custom = get_format("e6m9")
    session.add_custom_format(custom)
    assert custom in session.known_formats()
    session.set_format(session.active, custom)
    session.enter_text("1")
    assert session.active.code == 31 << 9  # bias 31: exponent field 31, fraction 0


def test_snapshot_restore_round_trip() -> None:
    session = session_of("fp32", "fp16")
    session.add_custom_format(get_format("e6m9"))
    session.set_rounding("toward_positive")
    session.enter_text("0.1")
    saved = session.snapshot()
    restored = FormatsSession()
    assert restored.restore(saved) == []
    assert [e.format for e in restored.editors] == [e.format for e in session.editors]
    assert [e.code for e in restored.editors] == [e.code for e in session.editors]
    assert restored.rounding == "toward_positive"
    assert restored.active.input == session.active.input
    assert get_format("e6m9") in restored.custom_formats


def test_a_named_custom_format_is_restored_with_its_name() -> None:
    session = session_of("fp32", "fp16")
    mine = make_format(5, 6, bias=9, name="my_e5m6")
    session.add_custom_format(mine)
    session.set_format(session.editors[1], mine)
    session.enter_text("3")
    restored = FormatsSession()
    assert restored.restore(session.snapshot()) == []
    assert restored.custom_formats == [mine]
    assert restored.editors[1].format == mine
    assert restored.editors[1].code == session.editors[1].code
    # Settings written before names were kept: the spec alone still restores.
    old = session.snapshot()
    del old["custom_names"]
    old["formats"] = ["fp32", mine.spec]
    again = FormatsSession()
    assert again.restore(old) == []
    assert again.editors[1].format.spec == mine.spec


def test_restore_skips_what_it_cannot_use() -> None:
    restored = FormatsSession()
    problems = restored.restore({"formats": ["fp16", "nonsense_format"], "codes": ["0xZZ"]})
    assert [e.format for e in restored.editors] == [get_format("fp16")]
    assert any("nonsense_format" in p for p in problems)


@pytest.mark.slow  # a property test over many texts: about half a second
@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=40)
    | st.from_regex(r"[-+]?0[xXbB][0-9a-fA-F_.p+-]{0,20}")
    | st.from_regex(r"[-+]?[0-9.]{0,30}([eE][-+]?[0-9]{1,12})?")
)
def test_any_text_gives_a_result_or_a_message_never_an_exception(text: str) -> None:
    session = session_of("fp16", "float8_e4m3fn", "float4_e2m1fn")
    before = [editor.code for editor in session.editors]
    if session.enter_text(text):
        assert session.entry_error is None
    else:
        assert session.entry_error
        assert [editor.code for editor in session.editors] == before


def test_display_text_is_exact_when_short_and_marked_when_cut() -> None:
    from fpexplorer.formats import get_format
    from fpexplorer.gui.formats.state import build_readout, display_text

    # The shortest round-trip decimal of both is 65500: a glance must not show that.
    assert display_text(get_format("fp16"), 0x7BFF) == "65504"
    assert display_text(get_format("bf16"), 0x4780) == "65536"
    assert display_text(get_format("fp6_e2m3"), 0x13) == "2.75"
    # Was "2e-05", "9e-41", "6e-08": the shortest round-trip strings, up to 31% off.
    assert display_text(get_format("float8_e5m2"), 0x01) == "1.52587890625e-5"
    assert display_text(get_format("bf16"), 0x0001) == "9.18354961…e-41"
    assert display_text(get_format("fp16"), 0x0001) == "5.9604644775390625e-8"
    # float32 0.1 has 27 significant digits: cut and marked, never shown as "0.1".
    assert display_text(get_format("fp32"), 0x3DCCCCCD) == "0.100000001…"
    assert display_text(get_format("fp16"), 0x7E00) == "nan"
    # The shortest round-trip decimal is its own field, in the same notation.
    readout = build_readout(get_format("float8_e5m2"), 0x01, None)
    assert (readout.display, readout.shortest) == ("1.52587890625e-5", "2e-5")
    assert readout.formula.endswith("= 1.52587890625e-5")


@pytest.mark.timeout(10)  # a hang guard: a fraction of a second now, 10 s before
def test_a_value_of_a_hundred_thousand_digits_is_shown_short() -> None:
    session = session_of("fp32", "fp16", "bf16")
    assert session.enter_text("1e99999")
    assert typed(session.active.input) == "1e99999"
    assert short(parse_value("-1e99999").fraction + 1) == "-9.99999999…e99998"
    assert short(Fraction(1, 3 * 10**5000)) == "3.33333333…e-5001"
    assert session.enter_text("-1" + "0" * 30000 + ".5")
    assert typed(session.active.input) == "-1.00000000…e30000"
    # Ordinary values by the same rule.
    assert [short(x) for x in (65504, Fraction(1, 2**24), Fraction(-1, 3), 10**8)] == [
        "65504",
        "5.9604644775390625e-8",
        "-0.333333333…",
        "100000000",
    ]


def test_a_raw_code_is_read_in_the_format_it_names() -> None:
    session = session_of("fp32", "fp16")
    # Was: "0x3C00" read as a float32 subnormal and FP16 showed "0, underflow".
    assert session.enter_text("fp16:0x3C00")
    assert [editor.code for editor in session.editors] == [0x3F800000, 0x3C00]
    assert session.entry_note == "code 0x3C00 read in float16 = 1, rounded into float32"
    # Without a format the active editor's is used, and the note says so.
    assert session.enter_text("0x3C00")
    assert session.active.code == 0x3C00
    assert session.entry_note is not None
    assert "read in float32 = 2.15239444…e-41" in session.entry_note
    assert "fp16:0x3C00" in session.entry_note
    # Specs hold colons of their own; the code is what follows the last one.
    assert session.enter_text("e4m3:encoding=fn:0x7e")
    assert session.active.value().fraction == 448
    # A value clears the note.
    assert session.enter_text("0.5")
    assert session.entry_note is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("fp17:0x7C", "'fp17' before ':' is not a format"),
        ("fp16:0x17C00", "more than 16 bits"),
        ("fp16:0xZZ", "after 'fp16:' comes a raw code: '0xZZ': not a hex code"),
        ("e5m2:fn", "not a number"),
    ],
)
def test_bad_code_entries_say_what_is_wrong(text: str, words: str) -> None:
    session = session_of("fp32", "fp16")
    before = [editor.code for editor in session.editors]
    assert not session.enter_text(text)
    assert session.entry_error is not None and words in session.entry_error
    assert session.entry_note is None
    assert [editor.code for editor in session.editors] == before


def test_the_entry_says_what_the_command_line_says_of_a_long_bad_value() -> None:
    # One message source: parse_value's, cut and marked, the wrong character named.
    session = session_of("fp32", "fp16")
    text = "9" * 3000 + "x"
    assert not session.enter_text(text)
    with pytest.raises(ValueError) as caught:
        parse_value(text, get_format("fp32"))
    assert session.entry_error == str(caught.value)
    assert "'x' at character 3001 of 3001" in session.entry_error
    assert not session.enter_text("fp16:0x" + "3" * 100 + "G")
    assert session.entry_error is not None
    assert "'G' at character 103 of 103" in session.entry_error
    assert "3…" in session.entry_error and "3" * 61 not in session.entry_error


def test_the_entry_placeholder_is_true_for_the_active_format() -> None:
    from fpexplorer.formats import get_format
    from fpexplorer.gui.formats.state import entry_placeholder

    for name in ("fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e8m0fnu", "fp4"):
        fmt = get_format(name)
        placeholder = entry_placeholder(fmt)
        shown = placeholder.split("max, ")[1].split(" ")[0]
        session = session_of(name)
        assert session.enter_text(shown)
        assert session.active.value().fraction == 1, (name, shown)
        assert session.enter_text("fp16:0x3C00")
        assert session.active.value().fraction == 1


def test_the_formula_of_an_infinity_describes_its_own_bits() -> None:
    # binary8p3se's +inf 0x7F (fraction 11) was described as "exponent field all ones,
    # fraction zero", the IEEE layout, which is another code (0x7C, 57344... a number).
    for fmt in [*list_formats(), get_format("binary6p3ue"), get_format("e5m2")]:
        if not fmt.has_inf:
            continue
        for negative in (False, True) if fmt.signed else (False,):
            code = fmt.from_value(ExactValue.infinity(negative))
            readout = build_readout(fmt, code, None)
            assert readout.kind == "inf"
            fields = fmt.fields(code)
            claims_ieee = "fraction zero" in readout.formula
            is_ieee = (
                fields.fraction == 0 and fields.biased_exponent == (1 << fmt.exponent_bits) - 1
            )
            assert claims_ieee == is_ieee, (fmt.name, hex(code), readout.formula)
            assert "∞" in readout.formula


def test_the_infinity_note_gives_the_true_overflow_threshold() -> None:
    # It said "Results above 65504 round here" beside the FP16 note's "from 65520 up":
    # 65510 rounds to 65504. The threshold it names is checked against the engine, and for
    # FP16 against numpy.
    from fpexplorer.gui.formats.notes import side_note

    assert "results from 65520 " in side_note(get_format("fp16"), "inf")
    with np.errstate(over="ignore"):
        assert float(np.float16(65519.99)) == 65504 and np.isinf(np.float16(65520))
    for fmt in list_formats():
        if not fmt.has_inf:
            continue
        note = side_note(fmt, "inf")
        found = re.search(r"results (from|above) (\S+) \(max", note)
        assert found is not None, (fmt.name, note)
        if "…" in found.group(2):
            continue  # cut by the display rule: checked exactly on the short ones
        threshold = parse_value(found.group(2))
        tie = fmt.classify(fmt.from_value(threshold))
        below = fmt.classify(fmt.from_value(threshold.fraction - Fraction(1, 10**6)))
        assert below != "inf", fmt.name
        assert (tie == "inf") == (found.group(1) == "from"), fmt.name


# Codes typed on the command line (`inspect --bits`, `quantize --scale-code`) and in the GUI's
# entry field are read by one parser. Before, `inspect` took "0x3|C00", refused "0x3C 00" that
# the GUI took, and `quantize --scale-code` took Python literals (0o17 octal, -1).
CODE_TABLE: list[tuple[str, int | str]] = [
    ("0x3C00", 0x3C00),
    ("0x3c00", 0x3C00),
    ("0X3C00", 0x3C00),
    ("  0x3c00 ", 0x3C00),
    ("0x3C_00", 0x3C00),
    ("0x3C 00", 0x3C00),
    ("0x00003c00", 0x3C00),
    ("0b0011110000000000", 0x3C00),
    ("0B0011_1100_0000_0000", 0x3C00),
    ("0b0|01111|0000000000", 0x3C00),
    ("0|01111|0000000000", 0x3C00),
    ("1|11111|1111111111", 0xFFFF),
    ("-0x3C00", "a code has no sign"),
    ("+0b1", "a code has no sign"),
    ("0x3|C00", "not a hex code"),
    ("0x3G00", "not a hex code"),
    ("0x", "not a hex code"),
    ("0x_", "not a hex code"),
    ("0b102", "not a binary code"),
    ("0b", "not a binary code"),
    ("0x12345", "more than 16 bits"),
    ("0b" + "1" * 17, "more than 16 bits"),
    ("1|01111|00000000000", "more than 16 bits"),
    # A binary code of more digits than the format's bits, though its value fits: FP16's
    # 1.0 and a stray digit read as 0x7801, an FP32 word's low half as that FP16 code.
    ("0b00111100000000001", "has 17 binary digits, but float16 codes have 16"),
    ("0b" + "0" * 16 + "0011110000000000", "has 32 binary digits, but float16 codes have 16"),
    ("0b0000_0000_0000_0001", 0x0001),  # the format's own width, zero padded: its code
    ("0b1", 0x0001),  # fewer digits: an integer, as 0x1 is
    # The fields of another format (E4M3's bits, as Copy Bits gives them) are not a code of
    # this one: before, read as the 8-bit number 0b00111000 (an FP16 subnormal), silently.
    ("0|0111|000", "fields of 1|4|3 bits, but float16's are 1|5|10: name the format"),
    ("0b0|0111|000", "fields of 1|4|3 bits, but float16's are 1|5|10"),
    ("01111|0000000000", "fields of 5|10 bits, but float16's are 1|5|10"),
]


def _cli_code(capsys: pytest.CaptureFixture[str], text: str) -> int | str:
    import json

    from fpexplorer.cli import main

    if main(["inspect", "--bits", text, "--format", "fp16", "--json"]) == 2:
        return capsys.readouterr().err.strip()
    return int(json.loads(capsys.readouterr().out)["results"][0]["code"])


def _gui_code(text: str) -> int | str:
    session = session_of("fp16")
    if not session.enter_text(text):
        assert session.entry_error is not None
        return session.entry_error
    return session.active.code


@pytest.mark.parametrize(("text", "expected"), CODE_TABLE)
def test_a_code_reads_the_same_on_the_command_line_and_in_the_gui(
    capsys: pytest.CaptureFixture[str], text: str, expected: int | str
) -> None:
    cli, gui = _cli_code(capsys, text), _gui_code(text)
    if isinstance(expected, int):
        assert (cli, gui) == (expected, expected)
        return
    assert isinstance(cli, str) and isinstance(gui, str)
    assert expected in gui and cli.endswith(f"error: --bits: {gui}"), (cli, gui)


def test_what_is_not_written_as_a_code_is_a_value_in_the_gui_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Where only a code can be meant (--bits), a plain integer is one: 15360 = 0x3C00; in the
    # GUI's field it is the value 15360. A hex float is a value, never a code.
    assert (_cli_code(capsys, "15360"), _gui_code("15360")) == (
        0x3C00,
        oracle_code(15360, np.float16),
    )
    assert "not a code" in str(_cli_code(capsys, "0x1p3"))
    assert _gui_code("0x1p3") == 0x4800  # 8.0
    assert "not a code" in str(_cli_code(capsys, "-15360")) or "no sign" in str(
        _cli_code(capsys, "-15360")
    )


def test_quantize_scale_codes_use_the_same_reader(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fpexplorer.cli import main

    for text, expected in (("0x7f", 0x7F), ("0b0111_1111", 0x7F), ("127", 0x7F), ("0 x 7f", 0x7F)):
        assert main(["quantize", "-f", "mxfp4", "1", "--scale-code", text, "--json"]) == 0
        block = json.loads(capsys.readouterr().out)["blocks"][0]
        assert int(block["scale_code_hex"], 16) == expected, text
    for text, message in (("0o17", "not a code"), ("-1", "no sign"), ("0x1ff", "more than 8 bits")):
        assert main(["quantize", "-f", "mxfp4", "1", "--scale-code", text]) == 2
        assert message in capsys.readouterr().err, text


def test_a_nan_readout_says_quiet_or_signaling_and_its_payload() -> None:
    # Every NaN code of FP16 read "NaN: this bit pattern is reserved…", payload or not; the
    # quiet bit is IEEE 754's top fraction bit (numpy keeps it: 0x7D01 is a signaling NaN).
    fp16 = get_format("fp16")
    signaling = build_readout(fp16, 0x7D01, None)
    assert "NaN, signaling (fraction's top bit 0), payload 0x101" in signaling.formula
    assert (
        "NaN, quiet (fraction's top bit 1), payload 0x0"
        in build_readout(fp16, 0xFE00, None).formula
    )
    assert np.isnan(np.array(0x7D01, dtype=np.uint16).view(np.float16))
    # A format with one NaN pattern per sign has no quiet bit to speak of.
    assert build_readout(get_format("e4m3"), 0x7F, None).formula.startswith("NaN: this bit")
