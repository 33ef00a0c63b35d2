"""The block editor's state, with no Qt in it (tested without a window).

One `BlockEditorState` holds one block of a block-scaled format (MX, NVFP4): the exact
input values, the block format and its scale rule, the element rounding mode, and an
optional forced block scale and per-tensor scale (the scale bit editors). Every number
shown comes from the engine's exact one-block path (`quantize_block_exact`), computed once
per change into a `BlockReadout` that every widget renders from. A tensor loaded from a
`.npy` file is quantized whole by the vectorized path (`quantize`) for the per-block error
histogram and the worst blocks; its blocks load into the editor one at a time.

Bad input (text that is not numbers, a wrong length, a malformed file, a scale code that is
no scale) leaves everything as it was and sets `problem`, one sentence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from fpexplorer.formats import ExactValue, FloatFormat, get_format, parse_value, to_exact_value
from fpexplorer.formats.block import (
    INT_ROUNDING_MODES,
    NVFP4_GLOBAL_DIVISOR,
    POWER_OF_TWO_RULES,
    BlockFormat,
    IntElement,
    get_block_format,
    list_block_formats,
)
from fpexplorer.formats.block_quantize import (
    ExactBlock,
    QuantizedTensor,
    decibels,
    quantize,
    quantize_block_exact,
)
from fpexplorer.formats.decimal import approximate_decimal, display_decimal, share_percent
from fpexplorer.formats.format import ROUNDING_MODES
from fpexplorer.formats.quoting import quote_text
from fpexplorer.formats.vectorized import npy_load_reason
from fpexplorer.gui.formats.state import Signal
from fpexplorer.gui.formats.text import power_of_two

# Stochastic rounding draws random numbers; a fixed seed makes what is shown repeatable.
STOCHASTIC_SEED = 0
FLOAT32 = get_format("float32")
# A dragged bar's height is kept to this many significant digits, so that what the user
# set reads back as a short exact decimal (0.731, not 0.73098273...).
DRAG_DIGITS = 3
WORST_BLOCK_COUNT = 10
HISTOGRAM_BINS = 40
# Tokens of a typed or pasted block: numbers separated by commas, semicolons, spaces,
# tabs or new lines; brackets around the list (a pasted Python or numpy list) are dropped.
_SEPARATORS = re.compile(r"[\s,;]+")
_BRACKETS = str.maketrans("", "", "[]()")
# A comma between two digits ("1,5") separates values here, but in much of Europe it is a
# decimal comma: one and a half silently became two elements.
_DIGIT_COMMA_DIGIT = re.compile(r"([0-9]+),([0-9]+)")
# A printed array or scalar (array([...]), tensor([...]), np.float32(...)): numpy prints 8
# decimals and torch 4 by default, so its digits are not the values.
_PRINTED_ARRAY = re.compile(
    r"\b(?:(?:np|numpy|torch)\.)?(?:array|tensor|asarray|float\d+|bfloat16|half)\s*\(",
    re.IGNORECASE,
)
DEFAULT_VALUES = (
    "0.126", "-0.132", "0.64", "0.105", "-0.536", "0.361", "1.3", "0.947",
    "-0.703", "-1.27", "-0.623", "0.0413", "-2.33", "-0.219", "-1.25", "-0.0532",
    "0.879", "0.726", "0.00777", "-0.827", "0.0104", "-0.0418", "0.212", "-0.434",
    "-0.129", "0.0418", "-0.0316", "-0.371", "-0.128", "-0.406", "0.226", "0.575",
)  # fmt: skip


def block_format_names() -> list[str]:
    """The block formats the picker offers, from the engine's list."""
    return [fmt.name for fmt in list_block_formats()]


def scale_rules_for(fmt: BlockFormat) -> tuple[str, ...]:
    """The scale rules that fit a format's scale: floor/ceil/even/rceil for E8M0, nearest
    for any other scale format (NVFP4's E4M3)."""
    return POWER_OF_TWO_RULES if fmt.power_of_two_scale else ("nearest",)


def rounding_modes_for(fmt: BlockFormat) -> tuple[str, ...]:
    return INT_ROUNDING_MODES if isinstance(fmt.element, IntElement) else ROUNDING_MODES


def parse_block_text(text: str, block_size: int) -> list[ExactValue]:
    """Numbers typed or pasted as a block: 1..block_size of them. ValueError says which token
    is wrong, or how many there are."""
    printed = _PRINTED_ARRAY.search(text)
    if printed:
        raise ValueError(
            f"{printed.group(0)}…) is printed NumPy or torch output, rounded for display: "
            "save the array with numpy.save and use Open .npy… (or paste its .tolist())"
        )
    tokens = [t for t in _SEPARATORS.split(text.translate(_BRACKETS)) if t]
    if not tokens:
        raise ValueError(f"no numbers: give 1 to {block_size} values separated by commas or spaces")
    if len(tokens) > block_size:
        raise ValueError(
            f"{len(tokens)} numbers, but a block holds at most {block_size}: load a longer "
            "list as a .npy file, or give fewer"
        )
    values = []
    for position, token in enumerate(tokens, start=1):
        try:
            values.append(parse_value(token))
        except ValueError as error:
            raise ValueError(
                f"number {position}, {quote_text(token, 30)}, is not a number: {error}"
            ) from None
    return values


def decimal_comma_warning(text: str) -> str | None:
    """What to tell a user whose text has a comma between two digits ("1,5"): it was read
    as two values, which is right for "1,2,3" and wrong for a decimal comma. None otherwise."""
    match = _DIGIT_COMMA_DIGIT.search(text)
    if match is None:
        return None
    left, right = match.groups()
    return (
        f"'{left},{right}' was read as two values, {left} and {right} (a comma separates "
        f"values); for a decimal comma write {left}.{right}"
    )


def drag_value(y: float, digits: int = DRAG_DIGITS) -> Fraction:
    """A dragged bar height kept to `digits` significant digits, exactly that decimal."""
    if not math.isfinite(y):
        raise ValueError("a bar cannot be dragged to infinity")
    if y == 0:
        return Fraction(0)
    return Fraction(Decimal(f"{y:.{digits}g}"))


def _text(value: ExactValue | Fraction | None) -> str:
    return "—" if value is None else display_decimal(value)


@dataclass(frozen=True, slots=True)
class ElementRow:
    """One element of the block as the table and the bars show it."""

    index: int
    input: ExactValue
    input_text: str
    code: int
    code_hex: str
    bits: str  # sign|exponent|fraction for float elements, plain bits for integers
    element_text: str  # the element's own value, before the scale
    value: ExactValue  # dequantized: element × scale (× tensor scale)
    value_text: str
    error: Fraction | None  # value − input, exactly; None where either is not finite
    error_text: str
    status: str  # "", "saturated", "flushed to zero", "NaN scale", "exact"


@dataclass(frozen=True, slots=True)
class BlockReadout:
    """Everything the block editor shows, computed once per change."""

    format: BlockFormat
    block: ExactBlock
    rows: tuple[ElementRow, ...]
    scale_format: FloatFormat
    scale_code: int
    scale_text: str  # "2⁻³ = 0.125" (E8M0) or "0.3125" (E4M3); "NaN" for a NaN scale
    scale_forced: bool
    rule_scale_code: int  # what the scale rule gives for these values
    rule_scale_text: str
    tensor_scale_code: int | None  # FP32 code of NVFP4's per-tensor scale
    tensor_scale_text: str
    tensor_scale_source: str  # "this block's amax", "forced", "the whole tensor"
    amax_text: str
    limit_text: str  # ±max_elem × scale: the largest magnitude the block can hold
    limit: Fraction | None
    max_abs_error_text: str
    sqnr_text: str  # "≈ 31.2 dB" (rounded, so marked), "∞ (no error)"
    saturated: int
    flushed: int


@dataclass(frozen=True, slots=True, eq=False)
class WorstBlock:
    index: int
    sqnr_db: float
    max_abs_error: float
    amax: float


@dataclass(frozen=True, slots=True, eq=False)
class TensorAnalysis:
    """A tensor from a .npy file quantized whole: per-block errors and the worst blocks.

    Blocks run along the last axis; block b is row b // blocks_per_row of the array seen as
    (rows, length), elements (b % blocks_per_row) × block_size onwards.
    """

    source: str  # the file name
    data: np.ndarray[Any, Any]  # (rows, length)
    shape: tuple[int, ...]
    dtype: str
    quantized: QuantizedTensor
    blocks_per_row: int
    block_sqnr_db: np.ndarray[Any, np.dtype[np.float64]]  # one per block, C order
    histogram_counts: np.ndarray[Any, np.dtype[np.int64]]
    histogram_edges: np.ndarray[Any, np.dtype[np.float64]]
    exact_blocks: int  # blocks with no error at all (SQNR ∞), left out of the histogram
    nan_blocks: int  # blocks whose scale is NaN (a NaN or inf among their inputs)
    worst: tuple[WorstBlock, ...]
    summary: str

    @property
    def block_count(self) -> int:
        return int(self.block_sqnr_db.size)

    def block_values(self, index: int) -> np.ndarray[Any, Any]:
        size = self.quantized.format.block_size
        row, column = divmod(index, self.blocks_per_row)
        return self.data[row, column * size : (column + 1) * size]


@dataclass(frozen=True, slots=True, eq=False)
class LoadedTensor:
    """A tensor read from a file, seen as (rows, length): blocks run along its last axis."""

    source: str  # the file name
    rows: np.ndarray[Any, Any]
    shape: tuple[int, ...]

    @property
    def length(self) -> int:
        return int(self.rows.shape[1])

    def blocks_per_row(self, block_size: int) -> int:
        return -(-self.length // block_size)

    def block_count(self, block_size: int) -> int:
        return int(self.rows.shape[0]) * self.blocks_per_row(block_size)

    def block_values(self, block: int, block_size: int) -> np.ndarray[Any, Any]:
        row, column = divmod(block, self.blocks_per_row(block_size))
        return self.rows[row, column * block_size : (column + 1) * block_size]

    def block_of_element(self, element: int, block_size: int) -> int:
        """The block (under `block_size`) holding flat element `element` of the rows."""
        row, column = divmod(element, self.length)
        return row * self.blocks_per_row(block_size) + column // block_size


# Runs work(), then done(outcome) on the caller's thread, where outcome is work's result or
# the ValueError it raised. None runs it at once (tests, scripts); the view hands the work
# to a worker thread so that quantizing a large tensor never freezes the window.
Runner = Callable[[Callable[[], Any], Callable[[Any], None]], None]


def run_now(work: Callable[[], Any], done: Callable[[Any], None]) -> None:
    try:
        outcome = work()
    except ValueError as error:
        outcome = error
    done(outcome)


def analyse_tensor(
    data: np.ndarray[Any, Any], fmt: BlockFormat, rounding: str, source: str
) -> TensorAnalysis:
    """Quantize a whole tensor (blocks along its last axis) and rank its blocks by error."""
    quantized = quantize(data, fmt, rounding, axis=-1, seed=STOCHASTIC_SEED)
    array = quantized.input
    length = array.shape[-1]
    rows = array.reshape(-1, length)
    stats = quantized.block_stats()
    sqnr = np.asarray(stats.sqnr_db, dtype=np.float64).reshape(-1)
    max_abs = np.asarray(stats.max_abs_error, dtype=np.float64).reshape(-1)
    nan_scale = np.isnan(np.asarray(quantized.scales, dtype=np.float64)).reshape(-1)
    finite = np.isfinite(sqnr) & ~nan_scale
    exact_blocks = int(np.count_nonzero(sqnr == np.inf))
    if finite.any():
        counts, edges = np.histogram(sqnr[finite], bins=HISTOGRAM_BINS)
    else:
        counts, edges = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        padded = np.zeros((rows.shape[0], -(-length // fmt.block_size) * fmt.block_size))
        padded[:, :length] = np.abs(rows.astype(np.float64))
        amax = padded.reshape(-1, fmt.block_size).max(axis=1)
    # The engine's ranking (lowest SQNR first: NaN-scale blocks, whose error is infinite,
    # lead), as flat block numbers; blocks with no finite input are not worth showing.
    grid_shape = quantized.scale_codes.shape
    order = [
        int(np.ravel_multi_index(index, grid_shape))
        for index in quantized.worst_blocks(WORST_BLOCK_COUNT)
    ]
    worst = tuple(
        WorstBlock(i, float(sqnr[i]), float(max_abs[i]), float(amax[i]))
        for i in order
        if not np.isnan(sqnr[i])
    )
    tensor = quantized.tensor_stats()
    summary = (
        f"{source}: {'×'.join(str(n) for n in array.shape)} {array.dtype}, "
        f"{sqnr.size} blocks of {fmt.block_size}; tensor SQNR ≈ {_db(tensor.sqnr_db)}, "
        f"max |error| {approximate_decimal(tensor.max_abs_error, keep=4, shown=4, inexact=True)}, "
        f"{share_percent(tensor.share_saturated, tensor.count)} saturated, "
        f"{share_percent(tensor.share_flushed, tensor.count)} flushed to zero"
    )
    return TensorAnalysis(
        source=source,
        data=rows,
        shape=tuple(array.shape),
        dtype=str(array.dtype),
        quantized=quantized,
        blocks_per_row=-(-length // fmt.block_size),
        block_sqnr_db=sqnr,
        histogram_counts=counts.astype(np.int64),
        histogram_edges=edges.astype(np.float64),
        exact_blocks=exact_blocks,
        nan_blocks=int(np.count_nonzero(nan_scale)),
        worst=worst,
        summary=summary,
    )


def _db(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == math.inf:
        return "∞ (no error)"
    if value == -math.inf:
        return "−∞"
    return f"{value:.1f} dB"


def read_npy(path: str | Path) -> np.ndarray[Any, Any]:
    """A .npy file's array, or ValueError with one sentence (never a traceback)."""
    name = Path(path).name
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"{name}: no such file") from None
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{name} is not a readable .npy file ({npy_load_reason(error)})") from None
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name} holds several arrays (.npz); save one array with np.save")
    if array.dtype.kind not in "fiuV" or (array.dtype.kind == "V" and array.dtype.names):
        raise ValueError(f"{name} holds {array.dtype} values, not numbers")
    if array.size == 0:
        raise ValueError(f"{name} holds an empty array")
    return array if array.ndim else array.reshape(1)


class BlockEditorState:
    """One block of a block format, its scale, and what the user did to it."""

    def __init__(self, fmt: BlockFormat | str = "mxfp8_e4m3", values: Sequence[Any] | None = None):
        self.changed = Signal()
        self._format = get_block_format(fmt)
        chosen = DEFAULT_VALUES if values is None else values
        self._inputs: list[ExactValue] = [to_exact_value(v) for v in chosen][
            : self._format.block_size
        ]
        self._rounding = "nearest_even"
        self._forced_scale: int | None = None
        self._forced_tensor_scale: Fraction | None = None
        self._loaded: LoadedTensor | None = None
        self._tensor: TensorAnalysis | None = None  # of _loaded, for the current format
        self._tensor_block: int | None = None
        self._busy: str | None = None
        self._generation = 0  # of tensor analyses: a newer request makes older ones moot
        self.runner: Runner = run_now
        self._source = "sample values"
        self._problem: str | None = None
        self._note: str | None = None
        self._readout: BlockReadout | None = None

    # -- what the views read ---------------------------------------------------------------
    @property
    def format(self) -> BlockFormat:
        return self._format

    @property
    def inputs(self) -> tuple[ExactValue, ...]:
        return tuple(self._inputs)

    @property
    def rounding(self) -> str:
        return self._rounding

    @property
    def problem(self) -> str | None:
        """Why the last action did nothing (bad text, bad file, a code that is no scale)."""
        return self._problem

    @property
    def note(self) -> str | None:
        """Something the last action did that the user should know (values dropped)."""
        return self._note

    @property
    def source(self) -> str:
        """Where the values came from: "typed", "clipboard", "w.npy, block 12 of 300"."""
        return self._source

    @property
    def tensor(self) -> TensorAnalysis | None:
        return self._tensor

    @property
    def loaded(self) -> LoadedTensor | None:
        """The tensor read from a file (its analysis may still be running: `busy`)."""
        return self._loaded

    @property
    def busy(self) -> str | None:
        """What is being computed in the background ("quantizing w.npy …"), else None."""
        return self._busy

    @property
    def tensor_block(self) -> int | None:
        """The tensor's block now in the editor (None once a value was edited)."""
        return self._tensor_block

    @property
    def scale_forced(self) -> bool:
        return self._forced_scale is not None

    def readout(self) -> BlockReadout:
        if self._readout is None:
            self._readout = self._build_readout()
        return self._readout

    # -- changes (each emits `changed` once) -------------------------------------------------
    def set_format(self, fmt: BlockFormat | str) -> None:
        try:
            chosen = get_block_format(fmt)
        except ValueError as error:
            self._fail(str(error))
            return
        self._apply_format(chosen)

    def set_scale_rule(self, rule: str) -> None:
        try:
            chosen = self._format.with_rule(rule)
        except ValueError as error:
            self._fail(str(error))
            return
        self._apply_format(chosen)

    def set_rounding(self, mode: str) -> None:
        if mode not in rounding_modes_for(self._format):
            self._fail(f"{self._format.name} elements do not round {mode!r}")
            return
        self._rounding = mode
        self._commit()
        self._analyse_loaded()

    def set_element(self, index: int, value: Any) -> None:
        """Set one element's input value (a drag, or a value typed into the table)."""
        if not 0 <= index < len(self._inputs):
            self._fail(f"there is no element {index} in a block of {len(self._inputs)}")
            return
        try:
            exact = to_exact_value(value)
        except ValueError as error:
            self._fail(f"element {index}: {error}")
            return
        self._inputs[index] = exact
        self._edited()
        self._commit()

    def drag_element(self, index: int, y: float) -> None:
        """A bar dragged to height `y`: the element becomes y to DRAG_DIGITS digits."""
        try:
            value = drag_value(y)
        except ValueError as error:
            self._fail(str(error))
            return
        self.set_element(index, value)

    def set_scale_code(self, code: int) -> None:
        """Force the block scale to a code (kept until `use_rule_scale`)."""
        try:
            self._quantize(self._inputs, scale_code=code)
        except ValueError as error:
            self._fail(str(error))
            return
        self._forced_scale = code
        self._commit()

    def toggle_scale_bit(self, bit: int) -> None:
        self.set_scale_code(self.readout().scale_code ^ (1 << bit))

    def paint_scale_bit(self, bit: int, value: bool) -> None:
        code = self.readout().scale_code
        self.set_scale_code(code | (1 << bit) if value else code & ~(1 << bit))

    def step_scale(self, how: str) -> None:
        """The scale code's next value "up" or "down" (the bit editors' Up/Down keys): for
        E8M0 the scale doubles or halves."""
        scale_format = self._format.scale_format
        code = self.readout().scale_code
        try:
            moved = scale_format.next_up(code) if how == "up" else scale_format.next_down(code)
        except ValueError as error:
            self._fail(str(error))
            return
        if moved == code:
            self._fail(f"the scale has no next value {how}")
            return
        self.set_scale_code(moved)

    def use_rule_scale(self) -> None:
        self._forced_scale = None
        self._commit()

    def set_tensor_scale_code(self, code: int) -> None:
        """Force NVFP4's per-tensor scale to an FP32 code (a positive finite number)."""
        if not self._format.tensor_scale:
            self._fail(f"{self._format.name} has no per-tensor scale")
            return
        value = FLOAT32.to_exact(code)
        if not value.is_finite or value.negative or value.is_zero:
            self._fail(
                f"FP32 {FLOAT32.code_to_hex(code)} is {display_decimal(value)}: a per-tensor "
                "scale is a positive finite number"
            )
            return
        self._forced_tensor_scale = value.magnitude
        self._commit()

    def toggle_tensor_scale_bit(self, bit: int) -> None:
        code = self.readout().tensor_scale_code
        if code is not None:
            self.set_tensor_scale_code(code ^ (1 << bit))

    def paint_tensor_scale_bit(self, bit: int, value: bool) -> None:
        code = self.readout().tensor_scale_code
        if code is not None:
            self.set_tensor_scale_code(code | (1 << bit) if value else code & ~(1 << bit))

    def use_block_tensor_scale(self) -> None:
        """The per-tensor scale back to its default: the loaded tensor's, else this block's."""
        self._forced_tensor_scale = self._tensor_scale_of_tensor()
        self._commit()

    def load_text(self, text: str, source: str = "typed") -> bool:
        """Load a block from typed or pasted numbers; False (and `problem`) on bad text."""
        try:
            values = parse_block_text(text, self._format.block_size)
        except ValueError as error:
            self._fail(f"{source} values not loaded: {error}")
            return False
        self._inputs = values
        self._source = source
        self._loaded = None
        self._tensor = None
        self._tensor_block = None
        self._busy = None
        self._generation += 1
        self._forced_tensor_scale = None
        self._note = decimal_comma_warning(text)
        self._commit()
        return True

    def load_npy(self, path: str | Path, block: int = 0) -> bool:
        """Read a .npy tensor, put one of its blocks in the editor, and quantize it whole
        (through `runner`: in the background in the app). False, with `problem`, when the
        file is not a tensor of numbers or has no such block; nothing is lost then."""
        name = Path(path).name
        try:
            array = read_npy(path)
            rows = np.asarray(array).reshape(-1, array.shape[-1])
            loaded = LoadedTensor(name, rows, tuple(array.shape))
            # The vectorized path reads the tensor's dtype; check it once here, where a
            # problem can still be refused, not later in the background.
            quantize(rows[:1, : min(rows.shape[1], 1)], self._format)
        except ValueError as error:
            self._fail(str(error))
            return False
        count = loaded.block_count(self._format.block_size)
        if not 0 <= block < count:
            self._fail(f"{name} has blocks 0..{count - 1}, not {block}")
            return False
        self._loaded = loaded
        self._tensor = None
        self._note = None
        self._show_tensor_block(block)
        self._commit()
        self._analyse_loaded()
        return True

    def load_tensor_block(self, block: int) -> None:
        """Put block `block` of the loaded tensor in the editor."""
        loaded = self._loaded
        if loaded is None:
            self._fail("load a .npy file first")
            return
        count = loaded.block_count(self._format.block_size)
        if not 0 <= block < count:
            self._fail(f"{loaded.source} has blocks 0..{count - 1}, not {block}")
            return
        self._show_tensor_block(block)
        self._commit()

    # -- internals ------------------------------------------------------------------------------
    def _apply_format(self, fmt: BlockFormat) -> None:
        loaded = self._loaded
        first_element = None
        if loaded is not None and self._tensor_block is not None:
            # Keep the same elements in view: the block that holds this block's first one.
            row, column = divmod(self._tensor_block, loaded.blocks_per_row(self._format.block_size))
            first_element = row * loaded.length + column * self._format.block_size
        self._format = fmt
        self._forced_scale = None
        if not fmt.tensor_scale:
            # An MX format has no per-tensor scale: the quantizer refuses one.
            self._forced_tensor_scale = None
        if self._rounding not in rounding_modes_for(fmt):
            self._rounding = "nearest_even"
        self._note = None
        if loaded is not None:
            self._tensor = None
            if first_element is not None:
                self._show_tensor_block(loaded.block_of_element(first_element, fmt.block_size))
            elif len(self._inputs) > fmt.block_size:
                self._inputs = self._inputs[: fmt.block_size]
        else:
            self._forced_tensor_scale = None
            if len(self._inputs) > fmt.block_size:
                dropped = len(self._inputs) - fmt.block_size
                self._inputs = self._inputs[: fmt.block_size]
                self._note = (
                    f"{fmt.name} blocks hold {fmt.block_size} values: the last {dropped} "
                    "were dropped"
                )
        self._commit()
        self._analyse_loaded()

    def _analyse_loaded(self) -> None:
        """Quantize the loaded tensor whole for the current format, rule and rounding."""
        loaded = self._loaded
        if loaded is None:
            return
        self._generation += 1
        generation = self._generation
        fmt, rounding = self._format, self._rounding
        self._tensor = None
        self._busy = f"quantizing {loaded.source} ({loaded.rows.size:,} values) into {fmt.name}…"
        self.changed.emit()

        def work() -> TensorAnalysis:
            return analyse_tensor(loaded.rows.reshape(loaded.shape), fmt, rounding, loaded.source)

        def done(outcome: TensorAnalysis | ValueError) -> None:
            if generation != self._generation:
                return  # the format, rounding or tensor changed meanwhile: a newer run follows
            self._busy = None
            if isinstance(outcome, ValueError):
                self._note = f"{loaded.source} not quantized whole: {outcome}"
                self._commit()
                return
            self._tensor = outcome
            if self._tensor_block is not None:
                self._forced_tensor_scale = self._tensor_scale_of_tensor()
            self._commit()

        self.runner(work, done)

    def _tensor_scale_of_tensor(self) -> Fraction | None:
        tensor = self._tensor
        if tensor is None or tensor.quantized.tensor_scale is None:
            return None
        return Fraction(tensor.quantized.tensor_scale)

    def _show_tensor_block(self, block: int) -> None:
        loaded = self._loaded
        assert loaded is not None
        size = self._format.block_size
        values = loaded.block_values(block, size).astype(np.float64)
        self._inputs = [to_exact_value(float(v)) for v in values]
        self._tensor_block = block
        self._forced_scale = None
        # NVFP4's per-tensor scale is the whole tensor's; until its analysis is in, this
        # block's own stands in (said on screen).
        self._forced_tensor_scale = self._tensor_scale_of_tensor()
        self._source = f"{loaded.source}, block {block} of {loaded.block_count(size)}"

    def _edited(self) -> None:
        if self._tensor_block is not None and self._loaded is not None:
            self._source = f"edited (from {self._loaded.source}, block {self._tensor_block})"
            self._tensor_block = None
        elif not self._source.startswith("edited"):
            self._source = f"edited ({self._source})"
        self._note = None

    def _quantize(self, inputs: Sequence[ExactValue], scale_code: int | None = None) -> ExactBlock:
        return quantize_block_exact(
            inputs,
            self._format,
            self._rounding,
            scale_code=scale_code,
            tensor_scale=self._forced_tensor_scale,
            seed=STOCHASTIC_SEED,
        )

    def _fail(self, problem: str) -> None:
        self._problem = problem
        self.changed.emit()

    def _commit(self) -> None:
        self._problem = None
        self._readout = None
        self.changed.emit()

    def _build_readout(self) -> BlockReadout:
        fmt = self._format
        rule_block = self._quantize(self._inputs)
        block = (
            rule_block
            if self._forced_scale is None
            else self._quantize(self._inputs, scale_code=self._forced_scale)
        )
        multiplier = block.multiplier
        limit = None if multiplier is None else fmt.element.max * multiplier
        rows = []
        for index, (x, code, value, error, clipped, lost) in enumerate(
            zip(
                block.inputs,
                block.codes,
                block.values,
                block.errors,
                block.saturated,
                block.flushed,
                strict=True,
            )
        ):
            status = ""
            if multiplier is None:
                status = "NaN scale"
            elif clipped:
                status = "saturated"
            elif lost:
                status = "flushed to zero"
            elif error == 0:
                status = "exact"
            element = fmt.element
            rows.append(
                ElementRow(
                    index=index,
                    input=x,
                    input_text=_text(x),
                    code=code,
                    code_hex=element.code_to_hex(code),
                    bits=element.code_to_bits(code),
                    element_text=_text(element.to_exact(code)),
                    value=value,
                    value_text=_text(value),
                    error=error,
                    error_text=_text(error),
                    status=status,
                )
            )
        errors = [e for e in block.errors if e is not None]
        finite_inputs = [x for x in block.inputs if x.is_finite]
        if multiplier is None:
            max_error_text, sqnr_text = "∞ (NaN scale)", "−∞ (NaN scale)"
        elif not finite_inputs:
            # ±inf alone (NVFP4 saturates them under a finite scale): nothing to measure;
            # it read "max |error| 0 · SQNR ∞ (no error)" for -inf stored as -2688.
            max_error_text = sqnr_text = "— (no finite input)"
        else:
            max_error_text = _text(max((abs(e) for e in errors), default=Fraction(0)))
            signal = sum((x.magnitude**2 for x in finite_inputs), Fraction(0))
            noise = sum((e * e for e in errors), Fraction(0))
            if noise == 0:
                sqnr_text = "∞ (no error)"
            elif signal == 0:
                sqnr_text = "−∞"
            else:
                # Exactly as a Fraction: a 1e-400 input's error made signal / noise overflow
                # float (or underflow to 0, a math domain error) and the readout raise.
                sqnr_text = f"≈ {decibels(signal / noise):.1f} dB"
        amax = max((x.magnitude for x in finite_inputs), default=Fraction(0))
        tensor_code = None
        tensor_text = "—"
        tensor_source = ""
        if block.tensor_scale is not None:
            tensor_code = FLOAT32.from_value(block.tensor_scale)
            tensor_text = display_decimal(block.tensor_scale)
            if self._forced_tensor_scale is None:
                tensor_source = "from this block's amax / (448·6)"
                if amax == 0:
                    # Zeros and ±inf alone: the rule's 1, not amax / (448·6).
                    tensor_source = "the rule's default: this block has no finite non-zero input"
                elif amax / NVFP4_GLOBAL_DIVISOR > FLOAT32.max:
                    # 1e400 typed: the quotient is past FP32, the scale its max, not it.
                    tensor_source = "FP32's max: this block's amax / (448·6) is past it"
            elif (
                self._tensor is not None
                and self._forced_tensor_scale == self._tensor_scale_of_tensor()
            ):
                tensor_source = f"from the whole tensor's amax ({self._tensor.source})"
            else:
                tensor_source = "forced (bits edited)"
        return BlockReadout(
            format=fmt,
            block=block,
            rows=tuple(rows),
            scale_format=fmt.scale_format,
            scale_code=block.scale_code,
            scale_text=self._scale_text(block.scale_code),
            scale_forced=self._forced_scale is not None,
            rule_scale_code=rule_block.scale_code,
            rule_scale_text=self._scale_text(rule_block.scale_code),
            tensor_scale_code=tensor_code,
            tensor_scale_text=tensor_text,
            tensor_scale_source=tensor_source,
            amax_text=_amax_text(block.inputs, amax),
            limit_text="—" if limit is None else f"±{display_decimal(limit)}",
            limit=limit,
            max_abs_error_text=max_error_text,
            sqnr_text=sqnr_text,
            saturated=sum(block.saturated),
            flushed=sum(block.flushed),
        )

    def _scale_text(self, code: int) -> str:
        fmt = self._format
        value = fmt.scale_value(code)
        if value is None:
            return "NaN"
        if fmt.power_of_two_scale:
            exponent = value.numerator.bit_length() - value.denominator.bit_length()
            return f"{power_of_two(exponent)} = {display_decimal(value)}"
        return display_decimal(value)


def _amax_text(inputs: Sequence[ExactValue], finite_amax: Fraction) -> str:
    """The block's largest magnitude as its scale rule sees it: NaN with a NaN in the block,
    inf with an infinity (the cause of a NaN MX scale, or of NVFP4's clamped one), not the
    largest finite input."""
    if any(x.is_nan for x in inputs):
        return "NaN"
    if any(x.is_inf for x in inputs):
        return "inf"
    return display_decimal(finite_amax)
