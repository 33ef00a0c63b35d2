"""The Arithmetic view's state, with no Qt in it (tested without a window).

Two operands (three for fma, one for sqrt) in the chosen format, the operation, and the
engine's `calculate`: the operands rounded into the format, the exact result, and the
result rounded under every rounding mode with its error and IEEE 754 flags. The readout is
built once per change; bad operand text leaves the last result on screen and sets `problem`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fpexplorer.formats import ROUNDING_MODES, FloatFormat, get_format
from fpexplorer.formats.arith import OPERATIONS, Calculation, ModeResult, calculate
from fpexplorer.formats.decimal import display_decimal, display_decimals
from fpexplorer.gui.formats.state import Signal, hex_code

# Stochastic rounding draws a random number; a fixed seed makes what is shown repeatable.
STOCHASTIC_SEED = 0
OPERAND_NAMES = ("a", "b", "c")
OPERATION_LABELS = {
    "add": "a + b",
    "sub": "a − b",
    "mul": "a × b",
    "div": "a ÷ b",
    "fma": "fma(a, b, c) = a × b + c, rounded once",
    "sqrt": "sqrt(a)",
}
DEFAULT_OPERANDS = ("0.1", "0.2", "1")


def operation_names() -> list[str]:
    """The operations the engine computes, in its order."""
    return list(OPERATIONS)


def operand_count(operation: str) -> int:
    return OPERATIONS[operation]


@dataclass(frozen=True, slots=True)
class OperandLine:
    """One operand: what was typed and the value of the format it became."""

    name: str
    input_text: str
    value_text: str
    code_hex: str
    rounded: bool  # the typed value is not a value of the format
    note: str  # "" or how it got into the format: "rounded from 0.1", "no code for -1: NaN"


@dataclass(frozen=True, slots=True)
class ModeLine:
    """The exact result rounded under one mode."""

    rounding: str
    code_hex: str
    value_text: str
    error_text: str  # |rounded − exact|; "≈ …" for an irrational square root
    ulps_text: str
    flags_text: str  # "inexact, overflow" or "—"
    result: ModeResult


@dataclass(frozen=True, slots=True)
class ArithmeticReadout:
    """Everything the Arithmetic view shows, computed once per change."""

    calculation: Calculation
    expression: str  # with the operands' values in the format
    operands: tuple[OperandLine, ...]
    exact_text: str
    exact_note: str  # "exact", "not a value of float16", "irrational: its leading digits"
    lines: tuple[ModeLine, ...]


def _mode_line(fmt: FloatFormat, result: ModeResult, value_text: str) -> ModeLine:
    approximate = "≈ " if result.error_is_approximate else ""
    error = "—" if result.error_abs is None else approximate + display_decimal(result.error_abs)
    ulps = "—" if result.error_ulps is None else approximate + display_decimal(result.error_ulps)
    label = result.rounding
    if label == "stochastic":
        label = f"stochastic (seed {STOCHASTIC_SEED})"
    return ModeLine(
        rounding=label,
        code_hex=hex_code(fmt, result.code),
        value_text=value_text,
        error_text=error,
        ulps_text=ulps,
        flags_text=", ".join(result.flags.raised()) or "—",
        result=result,
    )


def build_readout(calculation: Calculation) -> ArithmeticReadout:
    fmt = calculation.format
    operands = []
    for name, operand in zip(OPERAND_NAMES, calculation.operands, strict=False):
        typed = display_decimal(operand.input)
        note = ""
        if operand.value.is_nan and not operand.input.is_nan:
            note = f"{fmt.name} has no code for {typed}: NaN (invalid)"
        elif operand.inexact:
            note = f"rounded from {typed}"
        operands.append(
            OperandLine(
                name=name,
                input_text=typed,
                value_text=display_decimal(operand.value),
                code_hex=hex_code(fmt, operand.code),
                rounded=operand.inexact,
                note=note,
            )
        )
    values = [line.value_text for line in operands]
    operation = calculation.operation
    if operation == "fma":
        expression = f"{values[0]} × {values[1]} + {values[2]}"
    elif operation == "sqrt":
        expression = f"sqrt({values[0]})"
    else:
        symbol = OPERATION_LABELS[operation].split(" ")[1]
        expression = f"{values[0]} {symbol} {values[1]}"
    exact = calculation.exact
    if not exact.is_exact:
        exact_note = "irrational: its leading digits (the root lies in a bracket far finer)"
    elif not exact.value.is_finite:
        exact_note = "invalid operation" if exact.invalid else "exact"
    else:
        representable = fmt.round(exact.value, "nearest_even", "ieee")
        exact_note = (
            "exact, and a value of the format"
            if not representable.inexact
            else f"exact; not a value of {fmt.name}"
        )
    # The exact result and the rounded ones side by side, with as many digits as it takes
    # for different values to read differently: float64's two neighbours of sqrt(2) and the
    # root itself all read "1.41421356…".
    exact_text, *value_texts = display_decimals(
        [exact.value, *(result.value for result in calculation.results)]
    )
    return ArithmeticReadout(
        calculation=calculation,
        expression=expression,
        operands=tuple(operands),
        exact_text=exact_text or "",
        exact_note=exact_note,
        lines=tuple(
            _mode_line(fmt, result, text or "")
            for result, text in zip(calculation.results, value_texts, strict=True)
        ),
    )


class ArithmeticState:
    """The operation, its operands' texts, the format and the overflow policy."""

    def __init__(
        self,
        fmt: FloatFormat | str = "float16",
        operation: str = "add",
        operands: Sequence[str] = DEFAULT_OPERANDS,
        overflow: str | None = None,
    ) -> None:
        self.changed = Signal()
        self._format = get_format(fmt)
        self._operation = operation
        self._texts = list(operands) + list(DEFAULT_OPERANDS[len(operands) :])
        self._overflow = overflow
        self._problem: str | None = None
        self._readout = self._compute(self._format, self._operation, self._texts, overflow)

    # -- what the views read -------------------------------------------------------------
    @property
    def format(self) -> FloatFormat:
        return self._format

    @property
    def operation(self) -> str:
        return self._operation

    @property
    def operand_texts(self) -> tuple[str, ...]:
        return tuple(self._texts)

    @property
    def overflow(self) -> str | None:
        return self._overflow

    @property
    def problem(self) -> str | None:
        """Why the last change was not computed (the result shown is the one before it)."""
        return self._problem

    def readout(self) -> ArithmeticReadout:
        return self._readout

    # -- changes (each emits `changed` once) ---------------------------------------------------
    def set_format(self, fmt: FloatFormat) -> None:
        if fmt != self._format:
            self._apply(fmt, self._operation, self._texts, self._overflow)

    def set_overflow(self, policy: str | None) -> None:
        if policy != self._overflow:
            self._apply(self._format, self._operation, self._texts, policy)

    def set_operation(self, operation: str) -> None:
        if operation not in OPERATIONS:
            self._fail(f"unknown operation {operation!r}; one of {', '.join(OPERATIONS)}")
            return
        self._apply(self._format, operation, self._texts, self._overflow)

    def set_operand(self, index: int, text: str) -> None:
        texts = list(self._texts)
        texts[index] = text
        self._apply(self._format, self._operation, texts, self._overflow)

    def set_operands(self, texts: Sequence[str]) -> None:
        """Several operands at once (the view's fields when Enter is pressed)."""
        merged = list(texts) + self._texts[len(texts) :]
        self._apply(self._format, self._operation, merged, self._overflow)

    # -- internals ---------------------------------------------------------------------------
    def _apply(
        self, fmt: FloatFormat, operation: str, texts: list[str], overflow: str | None
    ) -> None:
        try:
            readout = self._compute(fmt, operation, texts, overflow)
        except ValueError as error:
            self._fail(str(error))
            return
        self._format, self._operation, self._texts, self._overflow = (
            fmt,
            operation,
            texts,
            overflow,
        )
        self._readout = readout
        self._problem = None
        self.changed.emit()

    @staticmethod
    def _compute(
        fmt: FloatFormat, operation: str, texts: Sequence[str], overflow: str | None
    ) -> ArithmeticReadout:
        count = OPERATIONS[operation]
        for name, text in zip(OPERAND_NAMES, texts[:count], strict=False):
            if not text.strip():
                raise ValueError(f"{name}: type a number (0.1, -2.5e-3, 1/3, 0x1.8p3, inf, max…)")
        from fpexplorer.formats import parse_value

        operands = []
        for name, text in zip(OPERAND_NAMES, texts[:count], strict=False):
            try:
                operands.append(parse_value(text, fmt))
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        calculation = calculate(
            operation,
            operands,
            fmt,
            modes=ROUNDING_MODES,
            overflow=overflow,
            seed=STOCHASTIC_SEED,
        )
        return build_readout(calculation)

    def _fail(self, problem: str) -> None:
        self._problem = problem
        self.changed.emit()
