"""The job form: every option of `fpexplorer train`, checked at the field as it is typed.

The form holds no numbers of its own beyond the widgets' text: `config()` parses the
fields into a TrainConfig and `problems()` says, per field, what is wrong (a parse error
or TrainConfig.validate()'s message). Each field shows its own message under it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QProcess, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.gui.theme import role_hex
from fpexplorer.training.config import (
    OPTIMIZER_CHOICES,
    PARALLEL_CHOICES,
    PARALLEL_NAMES,
    PRECISIONS,
    TASKS,
    OptionSpec,
    TrainConfig,
    task_file_names,
    train_options,
)

_DEFAULTS = TrainConfig()
# The factory the File… button proposes, and a dropped task file's when it has several.
DEFAULT_FACTORY = "make_task"


def dropped_task(path: str) -> str:
    """The task for a dropped .py file: `path:make_task` when it has a make_task, else its
    only function, else `path:make_task` (and the field says what the file lacks)."""
    names = task_file_names(path)
    functions = names[0] if names is not None else []
    if DEFAULT_FACTORY not in functions and len(functions) == 1:
        return f"{path}:{functions[0]}"
    return f"{path}:{DEFAULT_FACTORY}"


class _TaskBox(QWidget):
    """The Task field with its File… button: a task file dropped on it becomes the task."""

    def __init__(self, combo: QComboBox) -> None:
        super().__init__()
        self._combo = combo

    def take_dropped_files(self, paths: list[str]) -> bool:
        if len(paths) != 1 or Path(paths[0]).suffix.lower() != ".py":
            return False
        self._combo.setCurrentText(dropped_task(paths[0]))
        return True


def _parse_float(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _parse_int(text: str) -> int:
    return int(text.strip().replace("_", "").replace(",", ""))


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_or_none(text: str) -> Any:
        return None if not text.strip() else parse(text)

    return parse_or_none


_OPTION_KINDS = {name: spec.kind for name, spec, _default in train_options()}
_TITLES = {name: spec.title for name, spec, _default in train_options()}
_SPECS = {name: spec for name, spec, _default in train_options()}
_NONE_MEANS = {name: spec.none_means for name, spec, _default in train_options()}


def _parser(spec: OptionSpec, default: Any) -> Callable[[str], Any]:
    parse = _parse_int if spec.kind == "int" else _parse_float
    return _optional(parse) if default is None else parse


def _tooltip(spec: OptionSpec) -> str:
    return f"{spec.help}; empty: {spec.none_means}" if spec.none_means else spec.help


# Choice options the form builds by hand (their own notes, device discovery).
_HAND_BUILT_CHOICES = ("precision", "optimizer", "parallel")


def _number_text(value: Any) -> str:
    """A number as the form shows it: exactly (2^32 is 4294967296, not 4.29497e+09; a
    rounded text would start a job with another value)."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
            return str(int(value))
        return repr(value)
    return str(value)


def _narrow_combo() -> QComboBox:
    """A combo box that may be narrower than its longest item (the form column is narrow)."""
    combo = QComboBox()
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(6)
    return combo


class FieldRow(QWidget):
    """A line edit with its error message under it."""

    def __init__(self, text: str, placeholder: str = "", tooltip: str = "") -> None:
        super().__init__()
        self.edit = QLineEdit(text)
        self.edit.setPlaceholderText(placeholder)
        self.edit.setToolTip(tooltip)
        self.error = QLabel("")
        self.error.setStyleSheet(f"color: {role_hex('error')};")
        self.error.setWordWrap(True)
        self.error.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.edit)
        layout.addWidget(self.error)

    def show_error(self, message: str | None) -> None:
        self.error.setText(message or "")
        self.error.setVisible(bool(message))
        self.edit.setStyleSheet(f"border: 1px solid {role_hex('error')};" if message else "")


class DeviceFinder(QProcess):
    """Asks `nvidia-smi` (a short child process, never torch) which CUDA devices exist."""

    found = Signal(list, str)  # [(device string, name)], a one-line note

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.finished.connect(self._on_finished)
        self.errorOccurred.connect(self._on_error)
        self._reported = False

    def look(self) -> None:
        self.start("nvidia-smi", ["--query-gpu=index,name", "--format=csv,noheader"])

    def stop(self) -> None:
        """End a search still running (nvidia-smi can hang on a broken driver) when the
        window closes: Qt warns about, and leaves behind, a child destroyed while running."""
        if self.state() != QProcess.ProcessState.NotRunning:
            self.kill()
            self.waitForFinished(1000)

    def _report(self, devices: list[tuple[str, str]], note: str) -> None:
        if not self._reported:
            self._reported = True
            self.found.emit(devices, note)

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._report([], "no NVIDIA driver found (nvidia-smi not available): CPU only")

    def _on_finished(self, exit_code: int, _status: QProcess.ExitStatus) -> None:
        text = bytes(self.readAllStandardOutput().data()).decode("utf-8", "replace")
        devices = []
        for line in text.splitlines():
            index, _, name = line.partition(",")
            if index.strip().isdigit():
                devices.append((f"cuda:{index.strip()}", name.strip()))
        if exit_code != 0 or not devices:
            self._report([], "nvidia-smi found no usable GPU: CPU only")
        else:
            self._report(devices, f"found {len(devices)} CUDA device(s)")


class TrainForm(QWidget):
    """Edits a TrainConfig; `changed` fires on every edit, `valid` says whether Start may go."""

    changed = Signal()

    # The number fields: every int/float option the form shows, in declaration order, with
    # its title, help and "empty means" from its declaration (`train_options()`): a new
    # option in TrainConfig appears here with no change.
    TEXT_FIELDS: tuple[tuple[str, str, Callable[[str], Any], str], ...] = tuple(
        (name, spec.title, _parser(spec, default), _tooltip(spec))
        for name, spec, default in train_options()
        if spec.in_form and spec.kind in ("int", "float")
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QFormLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

        self.task_combo = _narrow_combo()
        self.task_combo.setEditable(True)
        for name, description in TASKS:
            self.task_combo.addItem(name)
            self.task_combo.setItemData(self.task_combo.count() - 1, description, 3)
        self.task_combo.setToolTip("a built-in task, or path/to/file.py:factory")
        self.task_browse = QPushButton("File…")
        self.task_browse.setToolTip("use your own model: a .py file with a factory function")
        self.task_browse.clicked.connect(self._on_task_browse_clicked)
        self.task_error = QLabel("")
        self.task_error.setStyleSheet(f"color: {role_hex('error')};")
        self.task_error.setWordWrap(True)
        self.task_error.hide()
        task_box = _TaskBox(self.task_combo)
        task_layout = QVBoxLayout(task_box)
        task_layout.setContentsMargins(0, 0, 0, 0)
        task_layout.setSpacing(0)
        task_row = QHBoxLayout()
        task_row.addWidget(self.task_combo, 1)
        task_row.addWidget(self.task_browse)
        task_layout.addLayout(task_row)
        task_layout.addWidget(self.task_error)
        layout.addRow(_TITLES["task"], task_box)

        self.precision_combo = _narrow_combo()
        for index, (name, description) in enumerate(PRECISIONS):
            self.precision_combo.addItem(name)
            self.precision_combo.setItemData(index, description, 3)  # 3: tooltip role
        self.precision_combo.setCurrentText(_DEFAULTS.precision)
        self.precision_note = QLabel("")
        self.precision_note.setWordWrap(True)
        layout.addRow(_TITLES["precision"], self.precision_combo)
        layout.addRow("", self.precision_note)

        self.device_combo = _narrow_combo()
        # Short: the form column is narrow and a clipped "auto (CUDA when availab" reads
        # badly; what "auto" means is in the tooltip, what was found in the note below.
        self.device_combo.addItem("auto", "auto")
        self.device_combo.setItemData(
            0, "CUDA when available, else the CPU", Qt.ItemDataRole.ToolTipRole
        )
        self.device_combo.setToolTip("auto: CUDA when available, else the CPU")
        self.device_combo.addItem("cpu", "cpu")
        self.device_note = QLabel("looking for CUDA devices…")
        self.device_note.setWordWrap(True)
        layout.addRow(_TITLES["device"], self.device_combo)
        layout.addRow("", self.device_note)

        self.optimizer_combo = _narrow_combo()
        self.optimizer_combo.addItem("task default", None)
        for choice in OPTIMIZER_CHOICES:
            self.optimizer_combo.addItem(choice.name, choice.name)
            self.optimizer_combo.setItemData(
                self.optimizer_combo.count() - 1, choice.description, Qt.ItemDataRole.ToolTipRole
            )
        layout.addRow(_TITLES["optimizer"], self.optimizer_combo)

        # How several ranks share the model (the "Ranks" field below starts them).
        self.parallel_combo = _narrow_combo()
        self.parallel_combo.addItem("ddp (default)", None)
        self.parallel_combo.setItemData(0, _NONE_MEANS["parallel"], Qt.ItemDataRole.ToolTipRole)
        for choice in PARALLEL_CHOICES:
            if choice.name != "ddp":
                self.parallel_combo.addItem(choice.name, choice.name)
                self.parallel_combo.setItemData(
                    self.parallel_combo.count() - 1, choice.description,
                    Qt.ItemDataRole.ToolTipRole,
                )  # fmt: skip
        self.parallel_combo.setToolTip(_tooltip(_SPECS["parallel"]))

        self.fields: dict[str, FieldRow] = {}
        self._parsers: dict[str, Callable[[str], Any]] = {}
        # Field name -> its title in the form (for the summary beside Start).
        self.titles: dict[str, str] = dict(_TITLES)
        # The other choice options (a loss scaler, ...): a box each, in declaration order
        # among the number fields, with the choices and their descriptions as declared.
        self.choice_boxes: dict[str, QComboBox] = {}
        self.flags: dict[str, QCheckBox] = {}
        text_fields = {name: (title, parse, tip) for name, title, parse, tip in self.TEXT_FIELDS}
        for name, spec, default in train_options():
            if name in text_fields:
                title, parse, tooltip = text_fields[name]
                value = getattr(_DEFAULTS, name)
                text = "" if value is None else _number_text(value)
                row = FieldRow(text, placeholder=_NONE_MEANS.get(name) or "", tooltip=tooltip)
                row.edit.textChanged.connect(self._on_field_edited)
                self.fields[name] = row
                self._parsers[name] = parse
                layout.addRow(title, row)
                if name == "nproc_per_node":
                    layout.addRow(_TITLES["parallel"], self.parallel_combo)
            elif spec.in_form and spec.kind == "choice" and name not in _HAND_BUILT_CHOICES:
                box = _narrow_combo()
                if default is None:
                    box.addItem(spec.none_means or "none", None)
                for choice in spec.choices:
                    box.addItem(choice.name, choice.name)
                    box.setItemData(box.count() - 1, choice.description, 3)  # tooltip role
                box.setCurrentIndex(max(box.findData(default), 0))
                box.setToolTip(spec.help)
                box.currentIndexChanged.connect(self._on_field_edited)
                self.choice_boxes[name] = box
                layout.addRow(spec.title, box)
            elif spec.in_form and spec.kind == "flag":
                # A flag option (--bf16-first-last, ...): a check box.
                check = QCheckBox()
                check.setChecked(bool(default))
                check.setToolTip(spec.help)
                check.toggled.connect(self._on_field_edited)
                self.flags[name] = check
                layout.addRow(spec.title, check)

        self.task_combo.currentTextChanged.connect(self._on_field_edited)
        self.precision_combo.currentTextChanged.connect(self._on_field_edited)
        self.device_combo.currentIndexChanged.connect(self._on_field_edited)
        self.optimizer_combo.currentIndexChanged.connect(self._on_field_edited)
        self.parallel_combo.currentIndexChanged.connect(self._on_field_edited)

        self.device_finder = DeviceFinder(self)
        self.device_finder.found.connect(self._on_devices_found)
        self.device_finder.look()
        self._show()

    # ----- slots hand off -------------------------------------------------------------

    def _on_field_edited(self, *_args: object) -> None:
        self._show()
        self.changed.emit()

    def _on_devices_found(self, devices: list[tuple[str, str]], note: str) -> None:
        for device, name in devices:
            self.device_combo.addItem(f"{device} — {name}", device)
        self.device_note.setText(note)
        # The note wraps to more lines than "looking for CUDA devices…": the form's height
        # for its width changes, which its scroll area reads on `changed`.
        layout = self.layout()
        if layout is not None:
            layout.invalidate()
        self.changed.emit()

    def _on_task_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Task file", "", "Python files (*.py)")
        if not path:
            return
        factory, ok = QInputDialog.getText(
            self, "Task factory", "Function in the file that returns (model, batches, loss_fn):",
            text=DEFAULT_FACTORY,
        )  # fmt: skip
        if ok and factory.strip():
            self.task_combo.setCurrentText(f"{path}:{factory.strip()}")

    # ----- the configuration ----------------------------------------------------------

    def held(self) -> tuple[dict[str, Any], dict[str, str]]:
        """What the fields hold now: the values read and the fields that cannot be read
        (equal for equal forms, wherever what changed the form came from)."""
        return self._parse()

    def _parse(self) -> tuple[dict[str, Any], dict[str, str]]:
        values: dict[str, Any] = {
            "task": self.task_combo.currentText().strip(),
            "precision": self.precision_combo.currentText(),
            "device": self.device_combo.currentData() or "auto",
            "optimizer": self.optimizer_combo.currentData(),
            "parallel": self.parallel_combo.currentData(),
        }
        values.update({name: box.currentData() for name, box in self.choice_boxes.items()})
        values.update({name: check.isChecked() for name, check in self.flags.items()})
        errors: dict[str, str] = {}
        for name, row in self.fields.items():
            try:
                values[name] = self._parsers[name](row.edit.text())
            except ValueError:
                whole = _OPTION_KINDS.get(name) == "int"
                kind = "a whole number" if whole else "a number"
                text = row.edit.text()
                shown = text if len(text) <= 24 else text[:23] + "…"
                errors[name] = f"“{shown}” is not {kind}"
                continue
        # An option that does nothing with the other settings (an fp16 scaler setting
        # under bf16, the FP8 options under fp16, ...) starts the job at its default: what
        # a greyed-out field holds must neither travel nor keep Start off.
        for name in self._inapplicable(values, errors):
            values[name] = getattr(_DEFAULTS, name)
            errors.pop(name, None)
        return values, errors

    @staticmethod
    def _inapplicable(values: dict[str, Any], errors: dict[str, str]) -> dict[str, str]:
        valid = {k: v for k, v in values.items() if k not in errors}
        return TrainConfig(**valid).inapplicable()

    def problems(self) -> dict[str, str]:
        """Field name -> message, for every field that is wrong now."""
        values, errors = self._parse()
        defaults = {k: v for k, v in values.items() if k not in errors}
        config = TrainConfig(**defaults)
        for name, message in config.validate().items():
            errors.setdefault(name, message)
        return errors

    def config(self) -> TrainConfig:
        """The configuration in the form. Raises ValueError when a field is wrong."""
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(f"{k}: {v}" for k, v in problems.items()))
        values, _ = self._parse()
        return TrainConfig(**values)

    def set_config(self, config: TrainConfig) -> None:
        """Fill the form from a configuration (e.g. a replayed run's header)."""
        # A replayed header is data from a file: only strings go near Qt's item lookups
        # (a huge number there raises inside Qt, where nothing can catch it).
        self.task_combo.setCurrentText(str(config.task))
        self.precision_combo.setCurrentText(str(config.precision))
        if isinstance(config.device, str):
            index = self.device_combo.findData(config.device)
            if index >= 0:
                self.device_combo.setCurrentIndex(index)
        optimizer = config.optimizer if isinstance(config.optimizer, str) else None
        index = self.optimizer_combo.findData(optimizer)
        self.optimizer_combo.setCurrentIndex(max(index, 0))
        for name, box in self.choice_boxes.items():
            value = getattr(config, name)
            index = box.findData(value if isinstance(value, str) else None)
            box.setCurrentIndex(max(index, 0))
        for name, check in self.flags.items():
            check.setChecked(getattr(config, name) is True)
        # A rank's header says "ddp" where the form's default (None) means ddp too.
        parallel = config.parallel if config.parallel in PARALLEL_NAMES else None
        self.parallel_combo.setCurrentIndex(max(self.parallel_combo.findData(parallel), 0))
        for name, row in self.fields.items():
            value = getattr(config, name)
            row.edit.setText("" if value is None else _number_text(value))

    @property
    def valid(self) -> bool:
        return not self.problems()

    def _option_widgets(self) -> dict[str, QWidget]:
        widgets: dict[str, QWidget] = {name: row.edit for name, row in self.fields.items()}
        widgets.update(self.choice_boxes)
        widgets.update(self.flags)
        widgets["parallel"] = self.parallel_combo
        return widgets

    def _grey_out_inapplicable(self) -> None:
        """Grey out each option that does nothing with the other settings; its tooltip and
        its label's say why (the other options keep their declared help)."""
        unused = self._inapplicable(*self._parse())
        layout = self.layout()
        assert isinstance(layout, QFormLayout)
        for name, widget in self._option_widgets().items():
            why = unused.get(name)
            widget.setEnabled(why is None)
            tip = _tooltip(_SPECS[name]) + ("" if why is None else f"\nNot used now: {why}")
            widget.setToolTip(tip)
            row = self.fields.get(name)
            holder = row if row is not None else widget
            label = layout.labelForField(holder)
            if label is not None:
                label.setEnabled(why is None)
                label.setToolTip("" if why is None else tip)

    def _show(self) -> None:
        self._grey_out_inapplicable()
        problems = self.problems()
        for name, row in self.fields.items():
            row.show_error(problems.get(name))
        task_problem = problems.get("task")
        self.task_error.setText(task_problem or "")
        self.task_error.setVisible(bool(task_problem))
        descriptions = dict(PRECISIONS)
        self.precision_note.setText(descriptions.get(self.precision_combo.currentText(), ""))
