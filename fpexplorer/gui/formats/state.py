"""The state of the bit editors, with no Qt in it (testable without a window).

One `EditorState` per stacked editor is the single source of truth for that editor: its
format, the current code (an int), the exact value the user last typed (an ExactValue, or
None when the code was set directly), the rounding mode and the overflow policy. It emits
one `changed` signal per change; every view re-renders from `readout()`, which is computed
once per change by the engine and shared by all views.

`FormatsSession` holds the stacked editors and which one is active. Every user action goes
through it (widget slots hand off in one line), so that when editors are linked a new value
typed or clicked in one editor is shown rounded in all the others, and views of the whole
session (number line, cross-format table, charts) hear one `changed` per action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from fpexplorer.formats import (
    OVERFLOW_POLICIES,
    ROUNDING_MODES,
    CodeEntry,
    ExactValue,
    Fields,
    FloatFormat,
    Rounded,
    exact_decimal,
    get_format,
    list_formats,
    make_format,
    parse_entry,
)
from fpexplorer.formats.decimal import display_decimal, shortest_display
from fpexplorer.formats.parse import parse_code
from fpexplorer.formats.quoting import quote_text
from fpexplorer.gui.formats.text import scientific

# Stochastic rounding draws a random number; a fixed seed makes what is shown repeatable.
STOCHASTIC_SEED = 0
# The overflow picker's first entry: what ml_dtypes does for this format.
DEFAULT_OVERFLOW_LABEL = "format default"


class Signal:
    """A minimal Qt-free signal: connect callables, emit calls them in order."""

    def __init__(self) -> None:
        self._slots: list[Callable[..., Any]] = []

    def connect(self, slot: Callable[..., Any]) -> None:
        self._slots.append(slot)

    def disconnect(self, slot: Callable[..., Any]) -> None:
        if slot in self._slots:
            self._slots.remove(slot)

    def emit(self, *args: Any) -> None:
        for slot in list(self._slots):
            slot(*args)


@dataclass(frozen=True, slots=True)
class CodeReadout:
    """Everything the views show about one code, computed once per change."""

    format: FloatFormat
    code: int
    kind: str  # "zero" | "subnormal" | "normal" | "inf" | "nan"
    value: ExactValue
    fields: Fields
    exact: str  # every digit
    shortest: str  # shortest decimal that reads back to this code (its own label)
    display: str  # the value by the display rule: exact, or cut and marked "…"
    scientific: str
    hex_code: str
    binary_code: str  # sign|exponent|fraction
    formula: str
    gap_down: Fraction | None
    gap_up: Fraction | None
    rounded: Rounded | None  # how the typed value rounded to this code, when it did


@lru_cache(maxsize=8192)
def shortest_text(fmt: FloatFormat, code: int) -> str:
    """The shortest round-trip decimal in the app's notation, remembered: views show the
    same codes again and again. Always shown under its own label, never as the value."""
    return shortest_display(fmt, code)


@lru_cache(maxsize=8192)
def display_text(fmt: FloatFormat, code: int) -> str:
    """A code's value by the display rule: every digit when there are few (65504,
    1.52587890625e-5), otherwise the first digits marked with "…" (0.100000001…).

    Never the shortest round-trip decimal: that reads E5M2's smallest subnormal
    1.52587890625e-5 as "2e-5", 31% off.
    """
    return display_decimal(fmt.to_exact(code))


def hex_code(fmt: FloatFormat, code: int) -> str:
    return f"0x{code:0{(fmt.width + 3) // 4}X}"


def entry_placeholder(active: FloatFormat) -> str:
    """The entry field's example text, true for the active format: its code of 1 (or of
    its smallest value) in hex, and a code read in another format."""
    try:
        one = active.from_value(1)
    except ValueError:
        one = 0
    return (
        f"value or code, e.g. 0.1, 1/3, max, {hex_code(active, one)} (a code of {active.name}), "
        "fp16:0x3C00"
    )


def _significand_text(fmt: FloatFormat, fields: Fields) -> str:
    lead = "0" if fields.is_subnormal else "1"
    if fmt.mantissa_bits == 0:
        return lead
    if fmt.mantissa_bits > 23:
        # Wide fractions: the bits as an integer over 2^m is exact and fits on a line.
        digits = exact_decimal(fields.significand)
        if len(digits) > 20:
            digits = digits[:20] + "…"  # the Exact read-out has every digit
        return f"({lead} + {fields.fraction}/2^{fmt.mantissa_bits}) (= {digits})"
    bits = f"{fields.fraction:0{fmt.mantissa_bits}b}"
    return f"{lead}.{bits}₂ (= {exact_decimal(fields.significand)})"


def formula_text(fmt: FloatFormat, code: int, kind: str, fields: Fields, value: str) -> str:
    """The value formula with this code's actual numbers."""
    sign = f"(−1)^{fields.sign} × " if fmt.signed else ""
    if kind == "nan":
        if fmt.encoding == "ieee" and fmt.mantissa_bits >= 1:
            # IEEE 754 §6.2.1: the fraction's top bit tells quiet (1) from signaling (0);
            # the bits below it are the payload, which arithmetic carries along.
            top = 1 << (fmt.mantissa_bits - 1)
            quiet = "quiet" if fields.fraction & top else "signaling"
            return (
                f"NaN, {quiet} (fraction's top bit {int(bool(fields.fraction & top))}), "
                f"payload {fields.fraction & (top - 1):#x}: “not a number” in {fmt.name}"
            )
        return f"NaN: this bit pattern is reserved for “not a number” in {fmt.name}"
    if kind == "inf":
        if fields.fraction == 0 and fields.biased_exponent == (1 << fmt.exponent_bits) - 1:
            return f"{sign}∞: exponent field all ones, fraction zero"
        # P3109's extended formats put ±inf at the top codes (0x7F: fraction all ones).
        return f"{sign}∞: this bit pattern is reserved for infinity in {fmt.name}"
    if kind == "zero":
        return f"{sign}0 = {value}"
    significand = _significand_text(fmt, fields)
    if fields.is_subnormal:
        exponent = f"2^(1 − {fmt.bias})"
    else:
        exponent = f"2^({fields.biased_exponent} − {fmt.bias})"
    if fmt.mantissa_bits == 0 and not fields.is_subnormal:
        return f"{sign}{exponent} = {value}"
    return f"{sign}{exponent} × {significand} = {value}"


def build_readout(fmt: FloatFormat, code: int, rounded: Rounded | None) -> CodeReadout:
    kind = fmt.classify(code)
    value = fmt.to_exact(code)
    fields = fmt.fields(code)
    exact = exact_decimal(value) if kind in ("zero", "subnormal", "normal") else str(value)
    shortest = shortest_text(fmt, code)
    finite = kind in ("zero", "subnormal", "normal")
    return CodeReadout(
        format=fmt,
        code=code,
        kind=kind,
        value=value,
        fields=fields,
        exact=exact,
        shortest=shortest,
        display=display_text(fmt, code),
        scientific=scientific(exact, 21) if finite else str(value),
        hex_code=hex_code(fmt, code),
        binary_code=fmt.code_to_bits(code),
        formula=formula_text(fmt, code, kind, fields, display_text(fmt, code)),
        gap_down=fmt.gap_down(code) if finite else None,
        gap_up=fmt.gap_up(code) if finite else None,
        rounded=rounded,
    )


class EditorState:
    """One bit editor: format, code, last typed value, rounding mode, overflow policy."""

    def __init__(
        self,
        fmt: FloatFormat,
        code: int = 0,
        *,
        rounding: str = "nearest_even",
        overflow: str | None = None,
    ) -> None:
        self.changed = Signal()
        self._format = fmt
        self._code = code
        self._input: ExactValue | None = None
        self._rounded: Rounded | None = None
        self._rounding = rounding
        self._overflow = overflow
        self._problem: str | None = None
        self._readout: CodeReadout | None = None

    # -- what the views read -------------------------------------------------------------
    @property
    def format(self) -> FloatFormat:
        return self._format

    @property
    def code(self) -> int:
        return self._code

    @property
    def input(self) -> ExactValue | None:
        """The exact value last typed (or carried over), None when the code was set directly."""
        return self._input

    @property
    def rounded(self) -> Rounded | None:
        return self._rounded

    @property
    def rounding(self) -> str:
        return self._rounding

    @property
    def overflow(self) -> str | None:
        return self._overflow

    @property
    def problem(self) -> str | None:
        """Why the last action did nothing (e.g. "already the largest finite value")."""
        return self._problem

    def readout(self) -> CodeReadout:
        if self._readout is None:
            self._readout = build_readout(self._format, self._code, self._rounded)
        return self._readout

    def value(self) -> ExactValue:
        return self.readout().value

    # -- changes (each emits `changed` once) -----------------------------------------------
    def set_code(self, code: int) -> None:
        if not 0 <= code < 1 << self._format.width:
            self._fail(f"code {code:#x} does not fit in {self._format.width} bits")
            return
        self._code = code
        self._input = None
        self._rounded = None
        self._commit()

    def toggle_bit(self, bit: int) -> None:
        self.set_code(self._code ^ (1 << bit))

    def paint_bits(self, bits: Iterable[int], value: bool) -> None:
        code = self._code
        for bit in bits:
            code = code | (1 << bit) if value else code & ~(1 << bit)
        self.set_code(code)

    def step_up(self) -> None:
        self._step(self._format.next_up, "no next value up")

    def step_down(self) -> None:
        self._step(self._format.next_down, "no next value down")

    def step_exponent(self, delta: int) -> None:
        self._step_field(self._format.mantissa_bits, self._format.exponent_bits, delta, "exponent")

    def step_fraction(self, delta: int) -> None:
        self._step_field(0, self._format.mantissa_bits, delta, "fraction")

    def set_input(self, value: ExactValue) -> str | None:
        """Round an exact value into this format; returns a problem sentence or None."""
        try:
            rounded = self._format.round(
                value, self._rounding, self._overflow, seed=STOCHASTIC_SEED
            )
        except ValueError as error:
            self._fail(str(error))
            return str(error)
        self._input = value
        self._rounded = rounded
        self._code = rounded.code
        self._commit()
        return None

    def set_format(self, fmt: FloatFormat) -> None:
        """Switch format, keeping the value: the typed value (or the current one) is rounded."""
        carried = self._input if self._input is not None else self.value()
        self._format = fmt
        self._code = 0
        self._input = None
        self._rounded = None
        if self.set_input(carried) is not None:
            self._commit()  # the value did not fit (e.g. NaN into FP4): show +0, say why

    def set_rounding(self, mode: str) -> None:
        if mode not in ROUNDING_MODES:
            raise ValueError(f"unknown rounding mode {mode!r}")
        self._rounding = mode
        self._rerun()

    def set_overflow(self, policy: str | None) -> None:
        if policy is not None and policy not in OVERFLOW_POLICIES:
            raise ValueError(f"unknown overflow policy {policy!r}")
        self._overflow = policy
        self._rerun()

    # -- internals -------------------------------------------------------------------------
    def _rerun(self) -> None:
        if self._input is not None:
            self.set_input(self._input)
        else:
            self._commit()

    def _step(self, move: Callable[[int], int], at_end: str) -> None:
        try:
            code = move(self._code)
        except ValueError as error:
            self._fail(str(error))
            return
        if code == self._code:
            self._fail(at_end)
            return
        self.set_code(code)

    def _step_field(self, shift: int, bits: int, delta: int, name: str) -> None:
        if bits == 0:
            self._fail(f"{self._format.name} has no {name} bits")
            return
        mask = (1 << bits) - 1
        field = (self._code >> shift) & mask
        new_field = field + delta
        if not 0 <= new_field <= mask:
            self._fail(f"the {name} field is already all {'ones' if delta > 0 else 'zeros'}")
            return
        self.set_code((self._code & ~(mask << shift)) | (new_field << shift))

    def _fail(self, problem: str) -> None:
        self._problem = problem
        self.changed.emit()

    def _commit(self) -> None:
        self._problem = None
        self._readout = None
        self.changed.emit()


def format_key(fmt: FloatFormat) -> str:
    """What to save to find this format again: its name when named, else its spec."""
    return fmt.name if fmt in list_formats() else fmt.spec


class FormatsSession:
    """The stacked editors of the Formats panel, which one is active, and the entry line."""

    def __init__(self, formats: Sequence[FloatFormat] | None = None, *, linked: bool = True):
        self.changed = Signal()  # once per user action, after linked editors followed
        self.editors_changed = Signal()  # editors added, removed or re-ordered
        self.entry_changed = Signal()  # entry text or its error message changed
        self.custom_formats_changed = Signal()
        self.linked = linked
        self.rounding = "nearest_even"
        self.overflow: str | None = None
        self.entry_text = ""
        self.entry_error: str | None = None
        self.entry_note: str | None = None  # e.g. which format a raw code was read in
        self.custom_formats: list[FloatFormat] = []
        chosen = list(formats) if formats else [get_format("fp32")]
        self.editors: list[EditorState] = [EditorState(fmt) for fmt in chosen]
        self._active = 0

    # -- reading -------------------------------------------------------------------------
    @property
    def active(self) -> EditorState:
        return self.editors[self._active]

    @property
    def active_index(self) -> int:
        return self._active

    def known_formats(self) -> list[FloatFormat]:
        """Every named format, then the custom ones of this session, then any other format
        stacked in an editor (a spec given on the command line, e6m9)."""
        known = list_formats()
        for fmt in [*self.custom_formats, *(editor.format for editor in self.editors)]:
            if fmt not in known:
                known.append(fmt)
        return known

    def comparison_input(self) -> ExactValue:
        """The value the cross-format table rounds: the typed one, else the active value."""
        active = self.active
        return active.input if active.input is not None else active.value()

    # -- actions (each ends with one `changed`) ----------------------------------------------
    def set_active(self, editor: EditorState) -> None:
        index = self.editors.index(editor)
        if index != self._active:
            self._active = index
            self.changed.emit()

    def toggle_bit(self, editor: EditorState, bit: int) -> None:
        self._user_edit(editor, lambda: editor.toggle_bit(bit))

    def paint_bits(self, editor: EditorState, bits: Iterable[int], value: bool) -> None:
        chosen = list(bits)
        self._user_edit(editor, lambda: editor.paint_bits(chosen, value))

    def set_code(self, editor: EditorState, code: int) -> None:
        self._user_edit(editor, lambda: editor.set_code(code))

    def step(self, editor: EditorState, how: str) -> None:
        """how: "up", "down", "exponent+", "exponent-", "fraction+", "fraction-"."""
        moves: dict[str, Callable[[], None]] = {
            "up": editor.step_up,
            "down": editor.step_down,
            "exponent+": lambda: editor.step_exponent(1),
            "exponent-": lambda: editor.step_exponent(-1),
            "fraction+": lambda: editor.step_fraction(1),
            "fraction-": lambda: editor.step_fraction(-1),
        }
        self._user_edit(editor, moves[how])

    def set_format(self, editor: EditorState, fmt: FloatFormat) -> None:
        self._active = self.editors.index(editor)
        editor.set_format(fmt)
        self.changed.emit()

    def load(self, fmt: FloatFormat, code: int) -> None:
        """Load a code of a format into the active editor (table rows, all-codes map)."""
        editor = self.active
        if editor.format != fmt:
            editor.set_format(fmt)
        self._user_edit(editor, lambda: editor.set_code(code))

    def enter_text(self, text: str) -> bool:
        """Apply typed text to the active editor (and the linked ones). False on bad text.

        A raw code is read in the active editor's format ("0x3C00") or in the one it names
        ("fp16:0x3C00"); `entry_note` then says which format it was read in."""
        self.entry_text = text
        editor = self.active
        stripped = text.strip()
        try:
            if not stripped:
                raise ValueError(
                    "type a number (1.5, 1/3, 0x1.8p3, inf, nan, max …) or a code (0x3C00, "
                    "fp16:0x3C00)"
                )
            parsed = parse_entry(stripped, editor.format, self.known_formats())
        except ValueError as error:
            self.entry_error = str(error)
            self.entry_note = None
            self.entry_changed.emit()
            return False
        if isinstance(parsed, CodeEntry):
            fmt, code = parsed.format, parsed.code
            note = f"code {hex_code(fmt, code)} read in {fmt.name} = {display_text(fmt, code)}"
            if fmt == editor.format:
                editor.set_code(code)
                self._follow(editor, editor.value())
                if not parsed.format_named:
                    note += " (the active editor's format; write e.g. fp16:0x3C00 for another)"
            else:
                code_value = fmt.to_exact(code)
                problem = editor.set_input(code_value)
                if problem is not None:
                    self.entry_error = f"{note}; {editor.format.name}: {problem}"
                    self.entry_note = None
                    self.entry_changed.emit()
                    return False
                self._follow(editor, code_value)
                note += f", rounded into {editor.format.name}"
            self.entry_note = note
        else:
            problem = editor.set_input(parsed)
            if problem is not None:
                self.entry_error = problem
                self.entry_note = None
                self.entry_changed.emit()
                return False
            self._follow(editor, parsed)
            self.entry_note = None
        self.entry_error = None
        self.entry_changed.emit()
        self.changed.emit()
        return True

    def set_rounding(self, mode: str) -> None:
        self.rounding = mode
        for editor in self.editors:
            editor.set_rounding(mode)
        self.changed.emit()

    def set_overflow(self, policy: str | None) -> None:
        self.overflow = policy
        for editor in self.editors:
            editor.set_overflow(policy)
        self.changed.emit()

    def set_linked(self, linked: bool) -> None:
        self.linked = linked
        if linked:
            self._follow(self.active, self.comparison_input())
        self.changed.emit()

    def add_editor(self, fmt: FloatFormat) -> EditorState:
        editor = EditorState(fmt, rounding=self.rounding, overflow=self.overflow)
        self.editors.append(editor)
        if self.linked:
            editor.set_input(self.comparison_input())
        self._active = len(self.editors) - 1
        self.editors_changed.emit()
        self.changed.emit()
        return editor

    def remove_editor(self, editor: EditorState) -> None:
        if len(self.editors) == 1:
            return  # the panel always keeps one editor
        index = self.editors.index(editor)
        del self.editors[index]
        self._active = min(self._active, len(self.editors) - 1)
        self.editors_changed.emit()
        self.changed.emit()

    def add_custom_format(self, fmt: FloatFormat) -> None:
        if fmt not in self.custom_formats and fmt not in list_formats():
            self.custom_formats.append(fmt)
            self.custom_formats_changed.emit()

    # -- persistence ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, object]:
        """Plain values for QSettings: formats (specs), codes, active editor, entry, modes."""
        return {
            "formats": [self._key_of(editor.format) for editor in self.editors],
            "codes": [hex_code(editor.format, editor.code) for editor in self.editors],
            "active": self._active,
            "entry": self.entry_text,
            "typed": "1" if self.active.input is not None else "",
            "rounding": self.rounding,
            "overflow": self.overflow or "",
            "linked": "1" if self.linked else "",
            "custom": [fmt.spec for fmt in self.custom_formats],
            # Parallel to "custom": the names given in the builder (a spec has no name).
            "custom_names": [fmt.name for fmt in self.custom_formats],
        }

    def restore(self, saved: dict[str, object]) -> list[str]:
        """Restore what `snapshot` gave; anything unusable is skipped and reported."""
        problems: list[str] = []

        def texts(key: str) -> list[str]:
            value = saved.get(key)
            if isinstance(value, str):
                return [value] if value else []
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        specs, names = texts("custom"), texts("custom_names")
        if len(names) != len(specs):
            names = specs
        for spec, name in zip(specs, names, strict=True):
            try:
                fmt = get_format(spec)
                if name != spec:
                    fmt = make_format(
                        fmt.exponent_bits,
                        fmt.mantissa_bits,
                        bias=fmt.bias,
                        encoding=fmt.encoding,
                        subnormals=fmt.subnormals,
                        signed=fmt.signed,
                        name=name,
                    )
                self.add_custom_format(fmt)
            except ValueError as error:
                problems.append(f"custom format {spec!r}: {error}")
        custom_by_name = {fmt.name: fmt for fmt in self.custom_formats}
        formats: list[FloatFormat] = []
        for spec in texts("formats"):
            try:
                formats.append(custom_by_name.get(spec) or get_format(spec))
            except ValueError as error:
                problems.append(f"format {spec!r}: {error}")
        if formats:
            self.editors = [EditorState(fmt) for fmt in formats]
            self._active = 0
        rounding = saved.get("rounding")
        if isinstance(rounding, str) and rounding in ROUNDING_MODES:
            self.rounding = rounding
        overflow = saved.get("overflow")
        if isinstance(overflow, str) and overflow in OVERFLOW_POLICIES:
            self.overflow = overflow
        self.linked = saved.get("linked", "1") not in ("", "false", False)
        for editor in self.editors:
            editor.set_rounding(self.rounding)
            editor.set_overflow(self.overflow)
        for editor, code_text in zip(self.editors, texts("codes"), strict=False):
            try:
                code = parse_code(code_text, editor.format)
            except ValueError as error:
                problems.append(str(error))
                continue
            if code is not None:
                editor.set_code(code)
        active = saved.get("active")
        try:
            self._active = max(0, min(int(str(active)), len(self.editors) - 1))
        except ValueError:
            self._active = 0
        entry = saved.get("entry")
        if isinstance(entry, str) and entry and saved.get("typed"):
            # Re-typing the text brings back the rounding error read-outs.
            linked, self.linked = self.linked, False
            if not self.enter_text(entry):
                problems.append(f"last typed value {quote_text(entry)}: {self.entry_error}")
                self.entry_error = None
            self.linked = linked
        elif isinstance(entry, str):
            self.entry_text = entry
        self.editors_changed.emit()
        self.entry_changed.emit()
        self.changed.emit()
        return problems

    # -- internals -----------------------------------------------------------------------
    def _key_of(self, fmt: FloatFormat) -> str:
        """format_key, except that a custom format is saved under its name (restore finds
        it among the custom formats, which keep their names)."""
        return fmt.name if fmt in self.custom_formats else format_key(fmt)

    def _user_edit(self, editor: EditorState, action: Callable[[], None]) -> None:
        self._active = self.editors.index(editor)
        before = (editor.format, editor.code)
        action()
        if (editor.format, editor.code) != before:
            self._follow(editor, editor.value())
        self.changed.emit()

    def _follow(self, source: EditorState, value: ExactValue) -> None:
        if not self.linked:
            return
        for editor in self.editors:
            if editor is not source:
                editor.set_input(value)
