"""The custom-format builder: exponent bits, mantissa bits, bias, encoding, subnormals.

Every change is checked by the engine's `make_format` at once; an impossible
combination shows the engine's message and disables OK, so nothing bad gets through.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats import ENCODINGS as ENGINE_ENCODINGS
from fpexplorer.formats import FloatFormat, get_format, make_format
from fpexplorer.formats.format import MAX_EXPONENT_BITS, MAX_WIDTH, default_bias
from fpexplorer.gui.formats.text import short
from fpexplorer.gui.theme import role_hex

# What each of the engine's encodings means; one the engine adds later is listed by name.
ENCODING_HELP = {
    "ieee": "IEEE 754: all-ones exponent holds ±inf and NaNs",
    "fn": "finite + NaN (like FP8 E4M3FN): no inf, NaN only at all ones",
    "fnuz": "finite + NaN, unsigned zero (like FP8 …FNUZ): NaN at −0's code",
    "finite": "finite only (like FP6 / FP4): no inf, no NaN",
    "fnu": "unsigned, NaN at all ones, no zero (like E8M0 scales)",
    "p3109_extended": "IEEE P3109: one NaN, ±inf at the top codes",
    "p3109_finite": "IEEE P3109: one NaN, no inf",
}
ENCODINGS = {key: ENCODING_HELP.get(key, key) for key in ENGINE_ENCODINGS}
MAX_BIAS = 1 << MAX_EXPONENT_BITS  # the engine refuses a bias of larger magnitude


def mantissa_limit(exponent_bits: int) -> int:
    """The most fraction bits the engine takes beside `exponent_bits`: codes of at most
    MAX_WIDTH bits, and exponent + fraction below that (signed or not) so that a code and
    its successor fit numpy's uint64."""
    return MAX_WIDTH - 1 - exponent_bits


_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,40}")


def _check_name(fmt: FloatFormat) -> None:
    """A name is shown in menus, tables and rich-text read-outs and saved in the settings:
    plain characters only, and not one that already means another format ("fp16")."""
    if fmt.name == fmt.spec:
        return
    if not _NAME.fullmatch(fmt.name):
        raise ValueError("a name is up to 40 letters, digits and _ . + - (no spaces)")
    try:
        taken = get_format(fmt.name)
    except ValueError:
        return
    if taken != fmt:
        raise ValueError(f"the name {fmt.name!r} already means {taken.name} ({taken.spec})")


class CustomFormatDialog(QDialog):
    """Build a format from its parameters; `chosen_format()` after exec() returns it."""

    def __init__(self, parent: QWidget | None = None, start: FloatFormat | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Custom format")
        self.exponent_bits = QSpinBox()
        # The engine's own limits, so that no value the spin boxes offer is refused later.
        self.exponent_bits.setRange(1, MAX_EXPONENT_BITS)
        self.exponent_bits.setValue(start.exponent_bits if start else 4)
        self.mantissa_bits = QSpinBox()
        self.mantissa_bits.setRange(0, mantissa_limit(1))
        self.mantissa_bits.setValue(start.mantissa_bits if start else 3)
        self.auto_bias = QCheckBox("standard bias 2^(e−1) − 1")
        self.auto_bias.setChecked(True)
        self.bias = QSpinBox()
        self.bias.setRange(-MAX_BIAS, MAX_BIAS)
        self.bias.setEnabled(False)
        self.bias.setToolTip("The stored exponent E stands for the power E − bias.")
        self.encoding = QComboBox()
        for key, text in ENCODINGS.items():
            self.encoding.addItem(f"{key} — {text}", key)
        self.signed = QCheckBox("sign bit")
        self.signed.setChecked(start.signed if start else True)
        self.signed.setToolTip(
            "Without a sign bit the format holds only values ≥ 0 (as E8M0 or P3109's "
            "unsigned binaryKpPu formats); negative inputs become NaN."
        )
        self.subnormals = QCheckBox("subnormals (gradual underflow)")
        self.subnormals.setChecked(True)
        self.subnormals.setToolTip(
            "With subnormals, exponent field 0 means 0.f × 2^(1 − bias): values step evenly "
            "down to zero. Without, exponent 0 is zero only and tiny values flush to 0."
        )
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional name, e.g. my_e5m6")
        self.preview = QLabel()
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.preview.setMinimumWidth(380)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        form = QFormLayout()
        form.addRow("Exponent bits", self.exponent_bits)
        form.addRow("Mantissa (fraction) bits", self.mantissa_bits)
        form.addRow("", self.auto_bias)
        form.addRow("Bias", self.bias)
        form.addRow("Special values", self.encoding)
        form.addRow("", self.signed)
        form.addRow("", self.subnormals)
        form.addRow("Name", self.name)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.preview)
        layout.addWidget(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        for spin in (self.exponent_bits, self.mantissa_bits, self.bias):
            spin.valueChanged.connect(self._on_parameters_changed)
        self.auto_bias.toggled.connect(self._on_parameters_changed)
        self.encoding.currentIndexChanged.connect(self._on_parameters_changed)
        self.subnormals.toggled.connect(self._on_parameters_changed)
        self.signed.toggled.connect(self._on_parameters_changed)
        self.name.textChanged.connect(self._on_parameters_changed)
        if start is not None:
            index = self.encoding.findData(start.encoding)
            self.encoding.setCurrentIndex(max(index, 0))
            self.subnormals.setChecked(start.subnormals)
        self._format: FloatFormat | None = None
        self._on_parameters_changed()

    def chosen_format(self) -> FloatFormat | None:
        return self._format

    def _on_parameters_changed(self) -> None:
        self.bias.setEnabled(not self.auto_bias.isChecked())
        encoding = self.encoding.currentData()
        # fnu (E8M0) has no sign bit and fnuz keeps NaN in the negative-zero code: the
        # box shows what the encoding imposes. P3109's standard bias is 2^(e−1) (the
        # label said 2^(e−1) − 1 while the box filled in 8 for e4m3).
        imposed = {"fnu": False, "fnuz": True}.get(encoding)
        self.signed.setEnabled(imposed is None)
        if imposed is not None and self.signed.isChecked() != imposed:
            self.signed.blockSignals(True)
            self.signed.setChecked(imposed)
            self.signed.blockSignals(False)
        standard = default_bias(self.exponent_bits.value(), encoding)
        power = 1 << (self.exponent_bits.value() - 1)
        self.auto_bias.setText(
            "standard bias 2^(e−1)" if standard == power else "standard bias 2^(e−1) − 1"
        )
        limit = mantissa_limit(self.exponent_bits.value())
        if self.mantissa_bits.maximum() != limit:
            self.mantissa_bits.blockSignals(True)
            self.mantissa_bits.setMaximum(limit)  # also clamps the value to it
            self.mantissa_bits.blockSignals(False)
        try:
            fmt = make_format(
                self.exponent_bits.value(),
                self.mantissa_bits.value(),
                bias=None if self.auto_bias.isChecked() else self.bias.value(),
                encoding=encoding,
                subnormals=self.subnormals.isChecked(),
                signed=self.signed.isChecked(),
                name=self.name.text().strip() or None,
            )
            _check_name(fmt)
        except ValueError as error:
            self._format = None
            self.preview.setText(
                f"<span style='color:{role_hex('error')}'>{html.escape(str(error))}</span>"
            )
            self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
            return
        self._format = fmt
        if self.auto_bias.isChecked():
            self.bias.blockSignals(True)
            self.bias.setValue(fmt.bias)
            self.bias.blockSignals(False)
        subnormal = short(fmt.min_subnormal) if fmt.min_subnormal is not None else "none"
        self.preview.setText(
            f"<b>{fmt.name}</b> ({fmt.width} bits, spec <code>{fmt.spec}</code>)<br>"
            f"{fmt.description}<br>max {short(fmt.max)}, min normal {short(fmt.min_normal)}, "
            f"min subnormal {subnormal}, eps {short(fmt.eps)}, "
            f"≈{fmt.decimal_digits:.2f} decimal digits, {fmt.finite_count:,} finite values"
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)
