"""The block editor's Qt-free state against the engine's quantizer."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fpexplorer.formats import get_format
from fpexplorer.formats.block import get_block_format
from fpexplorer.formats.block_quantize import quantize, tensor_scale_for
from fpexplorer.gui.formats.block_state import (
    DEFAULT_VALUES,
    BlockEditorState,
    block_format_names,
    drag_value,
    parse_block_text,
    scale_rules_for,
)


def vectorized(values: list[float], fmt: str, **kwargs: object) -> tuple[int, list[int]]:
    """(scale code, element codes) of one block by the vectorized quantizer."""
    quantized = quantize(np.array(values, dtype=np.float64), fmt, **kwargs)  # type: ignore[arg-type]
    return int(quantized.scale_codes.reshape(-1)[0]), [int(c) for c in quantized.codes]


def floats(state: BlockEditorState) -> list[float]:
    return [x.to_float() for x in state.inputs]


@pytest.mark.parametrize("name", block_format_names())
def test_readout_is_the_quantizer_s_result(name: str) -> None:
    state = BlockEditorState(name)
    readout = state.readout()
    scale, codes = vectorized(floats(state), name)
    assert readout.scale_code == scale
    assert [row.code for row in readout.rows] == codes
    assert len(readout.rows) == min(len(DEFAULT_VALUES), get_block_format(name).block_size)
    for row in readout.rows:
        assert row.error == row.value.fraction - row.input.fraction


def test_an_outlier_moves_the_scale_and_every_other_code_as_quantize_says() -> None:
    state = BlockEditorState("mxfp4")
    before = state.readout()
    assert before.scale_code == 127 + 0 - 2 + 1  # amax 2.33: floor(log2) = 1, emax 2
    state.set_element(4, 1000)
    after = state.readout()
    values = floats(state)
    assert values[4] == 1000
    scale, codes = vectorized(values, "mxfp4")
    assert after.scale_code == scale == 127 + 9 - 2
    assert [row.code for row in after.rows] == codes
    changed = [i for i in range(32) if before.rows[i].code != after.rows[i].code and i != 4]
    assert len(changed) > 20  # the small elements lost their precision to the outlier
    assert after.rows[4].value_text == "768"  # 6 × 2**7: the largest the block holds
    assert after.rows[4].status == "saturated"
    assert after.scale_text == "2⁷ = 128"


def test_dragging_keeps_three_significant_digits_exactly() -> None:
    assert drag_value(12.345678) == Fraction(123, 10)
    assert drag_value(-0.000123456) == Fraction(-123, 1000000)
    assert drag_value(0.0) == 0
    state = BlockEditorState()
    state.drag_element(0, 731.2345)
    assert state.inputs[0].fraction == 731
    assert state.readout().rows[0].input_text == "731"
    state.drag_element(0, float("inf"))
    assert state.problem is not None and state.inputs[0].fraction == 731


def test_toggling_a_scale_bit_moves_every_element() -> None:
    state = BlockEditorState("mxfp8_e4m3")
    before = state.readout()
    state.toggle_scale_bit(0)
    after = state.readout()
    assert after.scale_forced and after.scale_code == before.scale_code ^ 1
    assert after.rule_scale_code == before.scale_code
    _, codes = vectorized(floats(state), "mxfp8_e4m3", scale_codes=after.scale_code)
    assert [row.code for row in after.rows] == codes
    moved = [b.code != a.code for b, a in zip(before.rows, after.rows, strict=True)]
    assert all(moved)
    assert "forced" not in after.scale_text
    state.use_rule_scale()
    assert state.readout().scale_code == before.scale_code
    assert not state.readout().scale_forced


def test_scale_code_nan_and_negative() -> None:
    state = BlockEditorState("mxfp6_e2m3")
    state.set_scale_code(0xFF)
    readout = state.readout()
    assert readout.scale_text == "NaN"
    assert all(row.status == "NaN scale" and row.value.is_nan for row in readout.rows)
    nvfp4 = BlockEditorState("nvfp4")
    code = nvfp4.readout().scale_code
    nvfp4.toggle_scale_bit(7)  # E4M3's sign: a block scale is never negative
    assert nvfp4.problem is not None and "non-negative" in nvfp4.problem
    assert nvfp4.readout().scale_code == code


def test_a_tensor_scale_clamped_at_fp32_max_says_so() -> None:
    # Failed before: 1e400 typed read "3.40282346…e38 from this block's amax / (448·6)",
    # which that quotient (3.7e396) is not.
    state = BlockEditorState("nvfp4")
    assert state.load_text("1e400, 1")
    readout = state.readout()
    assert readout.tensor_scale_code == 0x7F7FFFFF
    assert readout.tensor_scale_source == "FP32's max: this block's amax / (448·6) is past it"
    assert state.load_text("1e39, 1")  # 3.7e35: FP32 holds it
    assert state.readout().tensor_scale_source == "from this block's amax / (448·6)"


def test_nvfp4_tensor_scale_bits() -> None:
    state = BlockEditorState("nvfp4")
    readout = state.readout()
    fp32 = get_format("float32")
    assert readout.tensor_scale_code == fp32.from_value(
        Fraction(quantize(np.array(floats(state)), "nvfp4").tensor_scale or 0)
    )
    state.toggle_tensor_scale_bit(23)  # the exponent's lowest bit: doubles or halves it
    forced = state.readout()
    assert forced.tensor_scale_code == readout.tensor_scale_code ^ (1 << 23)  # type: ignore[operator]
    assert forced.tensor_scale_source == "forced (bits edited)"
    scale = fp32.to_fraction(forced.tensor_scale_code)  # type: ignore[arg-type]
    expected = quantize(np.array(floats(state)), "nvfp4", tensor_scale=float(scale))
    assert [row.code for row in forced.rows] == [int(c) for c in expected.codes]
    assert forced.scale_code == int(expected.scale_codes.reshape(-1)[0])
    state.toggle_tensor_scale_bit(31)
    assert state.problem is not None and "positive" in state.problem
    assert state.readout().tensor_scale_code == forced.tensor_scale_code


def test_text_loading_and_bad_text_keeps_the_block() -> None:
    state = BlockEditorState("mxfp8_e5m2")
    assert state.load_text("[1.5, -2; 3e-3\t1/3  inf]", "clipboard")
    assert [str(x) for x in state.inputs][-1] == "inf"
    assert state.source == "clipboard" and state.problem is None
    assert state.readout().scale_text == "NaN"  # an inf in an MX block: the spec's NaN scale
    kept = state.inputs
    for text, words in (
        ("1, 2, three", "number 3, 'three'"),
        ("", "no numbers"),
        (", ".join(["1"] * 33), "33 numbers"),
    ):
        assert not state.load_text(text)
        assert state.problem is not None and words in state.problem
        assert state.inputs == kept


def test_parse_block_text_reads_every_spelling() -> None:
    values = parse_block_text("0.1 -0x1.8p1 1/4\n-0 nan", 32)
    assert [v.fraction for v in values[:4]] == [Fraction(1, 10), -3, Fraction(1, 4), 0]
    assert values[3].negative and values[4].is_nan


def test_a_long_bad_block_value_is_quoted_cut_and_its_wrong_character_named() -> None:
    # Failed before: the token was cut to 30 characters with no "…", the "x" nowhere.
    with pytest.raises(ValueError) as caught:
        parse_block_text("1, " + "9" * 100 + "x, 2", 32)
    message = str(caught.value)
    assert message.startswith("number 2, '" + "9" * 30 + "…', is not a number")
    assert "'x' at character 101 of 101" in message
    assert "9" * 61 not in message


@pytest.mark.parametrize(
    "text",
    [
        "array([0.33333333, 0.1], dtype=float32)",
        "tensor([0.1000, 0.3333])",
        "[np.float32(3.0), np.float32(0.1)]",
    ],
)
def test_printed_numpy_or_torch_output_is_refused_by_name(text: str) -> None:
    # Brackets were deleted inside tokens: "array([0.1])" failed on 'array0.1', a token the
    # user never typed, and its digits (8 decimals for numpy, 4 for torch) are not the values.
    state = BlockEditorState("mxfp8_e4m3")
    kept = state.inputs
    assert not state.load_text(text)
    assert state.problem is not None and "printed NumPy or torch output" in state.problem
    assert "Open .npy" in state.problem and state.inputs == kept
    assert state.load_text("[[0.5, -1], (2, 3)]")  # a pasted Python list still loads
    assert [v.fraction for v in state.inputs] == [Fraction(1, 2), -1, 2, 3]


def test_switching_to_a_smaller_block_says_what_was_dropped() -> None:
    state = BlockEditorState("mxfp8_e4m3")
    state.set_format("nvfp4")
    assert len(state.inputs) == 16
    assert state.note is not None and "16 were dropped" in state.note
    assert scale_rules_for(state.format) == ("nearest",)
    state.set_scale_rule("floor")
    assert state.problem is not None and state.format.scale_rule == "nearest"
    state.set_format("mxfp4")
    state.set_scale_rule("rceil")
    assert state.format.scale_rule == "rceil"
    assert state.readout().scale_code == vectorized(floats(state), state.format)[0]


def test_npy_blocks_match_the_whole_tensor(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tensor = rng.standard_normal((3, 40)).astype(np.float32)
    tensor[1, 5] = 500.0
    tensor[2, 3] = np.nan
    path = tmp_path / "w.npy"
    np.save(path, tensor)
    for name in ("mxfp8_e4m3", "nvfp4"):
        state = BlockEditorState(name)
        assert state.load_npy(path)
        analysis = state.tensor
        assert analysis is not None
        whole = quantize(tensor, name)
        per_row = -(-40 // state.format.block_size)
        assert analysis.block_count == 3 * per_row
        histogram_total = int(analysis.histogram_counts.sum())
        assert histogram_total + analysis.exact_blocks + analysis.nan_blocks == 3 * per_row
        assert analysis.nan_blocks == 1  # the block holding the NaN
        assert analysis.worst[0].index == 2 * per_row  # ranked first
        for block in range(analysis.block_count):
            state.load_tensor_block(block)
            row, column = divmod(block, per_row)
            size = state.format.block_size
            start = column * size
            readout = state.readout()
            assert readout.scale_code == int(whole.scale_codes[row, column])
            assert [r.code for r in readout.rows] == [
                int(c) for c in whole.codes[row, start : start + size]
            ]
        assert state.source == f"w.npy, block {analysis.block_count - 1} of {analysis.block_count}"
        if name == "nvfp4":
            assert readout.tensor_scale_source.startswith("from the whole tensor")


def test_an_edited_nvfp4_tensor_block_switched_to_mx_drops_the_tensor_scale(
    tmp_path: Path,
) -> None:
    """An edited block keeps the tensor's NVFP4 per-tensor scale; MX has none, and the
    quantizer refuses one, so switching to MX must drop it rather than fail."""
    path = tmp_path / "w.npy"
    np.save(path, np.linspace(-3, 5, 64, dtype=np.float32))
    state = BlockEditorState("nvfp4")
    assert state.load_npy(path)
    state.load_tensor_block(1)
    state.set_element(0, 2.5)  # edited: no longer the tensor's block, its scale stays
    assert state.readout().tensor_scale_code is not None
    state.set_format("mxfp4")
    readout = state.readout()
    assert state.problem is None and readout.tensor_scale_code is None
    scale, codes = vectorized(floats(state), "mxfp4")
    assert readout.scale_code == scale
    assert [row.code for row in readout.rows] == codes


def test_bad_npy_files_get_a_sentence_and_lose_nothing(tmp_path: Path) -> None:
    state = BlockEditorState()
    kept = state.inputs
    truncated = tmp_path / "cut.npy"
    np.save(truncated, np.arange(100, dtype=np.float32))
    truncated.write_bytes(truncated.read_bytes()[:-50])
    text = tmp_path / "text.npy"
    text.write_text("1, 2, 3")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    strings = tmp_path / "strings.npy"
    np.save(strings, np.array(["1.5", "2"]))
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros(0, dtype=np.float32))
    for path, words in (
        (truncated, "not a readable .npy file"),
        (text, "not a readable .npy file"),
        (objects, "not a readable .npy file"),
        (strings, "not numbers"),
        (empty, "empty"),
        (tmp_path / "missing.npy", "no such file"),
    ):
        assert not state.load_npy(path)
        assert state.problem is not None and path.name in state.problem and words in state.problem
        assert "\n" not in state.problem
        # numpy's advice for a file without the .npy header was to load it "unsafely"
        # (allow_pickle): the text file is simply not a .npy, the objects not numbers.
        assert "pickle" not in state.problem
        assert state.inputs == kept and state.tensor is None
    assert not state.load_npy(text)
    assert state.problem == (
        "text.npy is not a readable .npy file (no .npy header: not a file numpy.save wrote)"
    )
    assert not state.load_npy(objects)
    assert state.problem == (
        "objects.npy is not a readable .npy file (an array of Python objects, not numbers)"
    )
    np.save(tmp_path / "ok.npy", np.ones(10))
    assert not state.load_npy(tmp_path / "ok.npy", block=5)
    assert state.problem == "ok.npy has blocks 0..0, not 5"


def test_an_infinite_nvfp4_element_saturates_and_the_rest_keep_a_finite_scale() -> None:
    state = BlockEditorState("nvfp4", ["1000", "-0.5", "0.01", "0"])
    state.set_element(1, "-inf")
    readout = state.readout()
    assert readout.rows[1].status == "saturated" and readout.saturated == 1
    assert readout.scale_text == "448"  # the clamp: (inf / 6) / s_global
    assert readout.rows[1].value.is_finite and readout.rows[1].value.negative
    assert readout.rows[1].element_text == "-6"
    # 0.01 / (448 × 1000/2688) is far below E2M1's smallest step: flushed, said so.
    assert readout.rows[2].status == "flushed to zero" and readout.flushed == 1
    assert readout.rows[3].status == "exact"


def test_sqnr_of_blocks_with_errors_beyond_float_range() -> None:
    # signal / noise went through float(): 2.5 beside a 1e-400 that rounds to 0 overflowed
    # (OverflowError), a 1e-400 block under a huge forced scale underflowed to 0 (math
    # domain error), and the readout raised. Both are far outside float64 yet exact here.
    import math

    state = BlockEditorState("mxfp8_e4m3")
    assert state.load_text("2.5 1e-400")
    state.set_rounding("stochastic")
    high = state.readout().sqnr_text
    signal = Fraction(25, 4) + Fraction(1, 10**800)
    noise = sum((row.error or 0) ** 2 for row in state.readout().rows)
    expected = 10 * (
        math.log10(signal.numerator * noise.denominator)
        - math.log10(signal.denominator * noise.numerator)
    )
    assert high == f"≈ {expected:.1f} dB"
    assert state.load_text("1e-400")
    state.set_rounding("toward_positive")
    state.set_scale_code(252)
    low = state.readout().sqnr_text
    assert low.startswith("≈ -") and low.endswith(" dB")


@pytest.mark.parametrize("text", ["-inf -inf", "inf", "inf -inf nan"])
def test_a_block_with_no_finite_input_claims_no_error(text: str) -> None:
    """NVFP4 saturates ±inf to ±max (its scale stays finite): with no finite input there is
    no error to measure (the engine's errors are None, `quantize` says n/a). It read "max
    |error| 0 · SQNR ∞ (no error)" for a block of -inf turned into -2688. MX makes such a
    block's scale NaN, which says so."""
    state = BlockEditorState("nvfp4")
    assert state.load_text(text)
    readout = state.readout()
    assert all(row.error is None for row in readout.rows)
    if readout.block.multiplier is None:  # NaN among the inputs: a NaN scale
        assert readout.sqnr_text == "−∞ (NaN scale)"
        return
    assert readout.max_abs_error_text == "— (no finite input)"
    assert readout.sqnr_text == "— (no finite input)"
    # The per-tensor scale is the rule's 1 (tensor_scale_for(0)), not amax / (448·6).
    assert readout.block.tensor_scale == tensor_scale_for(0) == 1
    assert readout.tensor_scale_source == (
        "the rule's default: this block has no finite non-zero input"
    )
    mx = BlockEditorState("mxfp8_e4m3")
    assert mx.load_text(text)
    assert mx.readout().sqnr_text == "−∞ (NaN scale)"


@pytest.mark.parametrize(
    ("text", "warned"),
    [("1,5", "'1,5'"), ("0,126; -0,132", "'0,126'"), ("1,2,3", "'1,2'"), ("[1.5, 2, 3]", None),
     ("1 5", None), ("1, 5", None), ("1e3,2", "'3,2'")],
)  # fmt: skip
def test_a_comma_between_digits_is_read_as_a_separator_and_said(
    text: str, warned: str | None
) -> None:
    state = BlockEditorState("mxfp4")
    assert state.load_text(text)
    if warned is None:
        assert state.note is None
    else:
        assert state.note is not None and warned in state.note and "decimal comma" in state.note
    state.set_element(0, "2")  # an edit clears the note
    assert state.note is None


def test_the_tensor_summary_writes_its_error_in_the_display_notation() -> None:
    # It read "max |error| ≈ 1.863e-08" (Python's .4g) beside "1.86264514…e-8" elsewhere.
    from fpexplorer.gui.formats.block_state import analyse_tensor

    rng = np.random.default_rng(0)
    array = (rng.standard_normal((4, 64)) * 1e-6).astype(np.float32)
    summary = analyse_tensor(array, get_block_format("mxfp4"), "nearest_even", "x.npy").summary
    error = summary.split("max |error| ")[1].split(",")[0]
    assert error.startswith("≈") and re.fullmatch(r"≈[0-9]\.[0-9]{1,3}e-[1-9][0-9]*", error), error
