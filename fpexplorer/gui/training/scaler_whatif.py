"""The loss-scale what-if: the current run's scale replayed under another policy or other
settings, drawn dashed over the real trace on the loss-scale plot.

`WhatIfModel` (Qt-free) holds the choice (a policy, or "as logged", or off, and the
settings typed) and the replay (`training.replay_scaler`, torch-free) of the run model's
evidence, continued as the run grows and started again when the choice changes.
`ScalerWhatIf` is its form: a policy box, four fields, and what the replay says.
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from fpexplorer.formats.decimal import display_decimal
from fpexplorer.gui.theme import role_hex
from fpexplorer.gui.training.plots import file_text_label
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.view_model import elide
from fpexplorer.training.config import scaler_settings_problems, train_options
from fpexplorer.training.replay_scaler import EvidenceBuffer, ReplayTrace
from fpexplorer.training.scaler_rules import (
    SCALER_POLICIES,
    ScalerSettings,
    exact_number,
    resolve_settings,
    settings_from_config,
)

OFF = "off"
AS_LOGGED = "as logged"
CHOICES: tuple[tuple[str, str], ...] = (
    (OFF, "no what-if"),
    (AS_LOGGED, "the run's own policy and settings, the fields below changed"),
    *((policy.name, policy.description) for policy in SCALER_POLICIES),
)
# The settings a person may change, with the kind TrainConfig declares for them.
FIELDS: tuple[str, ...] = ("init_scale", "growth_interval", "hysteresis", "min_scale")
_SPECS = {name: spec for name, spec, _default in train_options() if name in FIELDS}
# A replay takes a few microseconds a step, seconds for a run of a million steps: the
# window replays this long per redraw and carries on at the next (see WhatIfModel.update).
REPLAY_BUDGET_S = 0.015
REPLAY_PIECE_STEPS = 2048  # steps replayed between two looks at the clock
MAX_DIGITS = 30  # a whole number typed longer than this is refused as too large


def _parse(name: str, text: str) -> int | float | None:
    """A field's text as its value (empty: None); ValueError naming the field."""
    text = text.strip()
    if not text:
        return None
    title = _SPECS[name].title.lower()
    digits = text.replace("_", "").lstrip("+-")
    if _SPECS[name].kind == "int" and digits.isdigit() and len(digits) > MAX_DIGITS:
        # int() refuses over 4300 digits ("not a whole number" would be untrue).
        raise ValueError(f"{title}: {len(digits):,} digits is too large")
    try:
        value = int(text.replace("_", "")) if _SPECS[name].kind == "int" else float(text)
    except ValueError:
        kind = "a whole number" if _SPECS[name].kind == "int" else "a number"
        # The text as typed, cut: thousands of characters pasted must not fill the tab.
        raise ValueError(f"{title}: {elide(text, 24)!r} is not {kind}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{title}: must be finite")
    return value


class WhatIfModel:
    """The what-if's choice and its replay of one run model. Qt-free."""

    def __init__(self) -> None:
        self.choice = OFF
        self.texts: dict[str, str] = dict.fromkeys(FIELDS, "")
        self.settings: ScalerSettings | None = None
        self.problem: str | None = None  # why there is no prediction
        self.trace: ReplayTrace | None = None
        self._source: tuple[int, ScalerSettings] | None = None  # (id of run's buffer, settings)
        self.pending = 0  # steps of the run not replayed yet (update() carries on)
        self._curve: (
            tuple[ReplayTrace, int, npt.NDArray[np.float64], npt.NDArray[np.float64]] | None
        ) = None

    def set_choice(self, choice: str, texts: dict[str, str]) -> None:
        self.choice = choice
        self.texts = {name: texts.get(name, "") for name in FIELDS}

    def logged_settings(self, run: RunModel | None) -> ScalerSettings | None:
        if run is None or run.header is None:
            return None
        return settings_from_config(run.header.config)

    def _wanted(self, run: RunModel) -> ScalerSettings:
        """The settings chosen for `run`; ValueError with the one line that says why not."""
        given: dict[str, Any] = {name: _parse(name, text) for name, text in self.texts.items()}
        if self.choice == AS_LOGGED:
            logged = self.logged_settings(run)
            if logged is None:
                raise ValueError("this run has no dynamic loss scaler: choose a policy")
            chosen = {name: value for name, value in given.items() if value is not None}
            settings = dataclasses.replace(logged, **chosen)
        else:
            settings = resolve_settings(self.choice, **given)
        problems = scaler_settings_problems(settings)
        if problems:
            raise ValueError("; ".join(problems.values()))
        return settings

    def update(self, run: RunModel | None, budget_s: float | None = None) -> None:
        """Bring the prediction up to date with the choice and `run`'s steps so far, or
        replay for about `budget_s` and leave the rest (`pending`) to the next call."""
        self.problem = None
        self.pending = 0
        if self.choice == OFF or run is None:
            self.trace, self.settings, self._source = None, None, None
            return
        evidence: EvidenceBuffer = run.scaler_evidence
        try:
            settings = self._wanted(run)
        except ValueError as error:
            self.trace, self.settings, self._source = None, None, None
            self.problem = str(error)
            return
        if len(evidence) and not evidence.with_amax:
            self.trace, self.settings, self._source = None, None, None
            self.problem = (
                "this run's steps carry no gradient amax (no loss scale, or an older "
                "fpexplorer): there is nothing to replay from"
            )
            return
        source = (id(evidence), settings)
        if self._source != source or self.trace is None or self.trace.replay.steps > len(evidence):
            self.trace = ReplayTrace(settings)
            self._source = source
        self.settings = settings
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        trace = self.trace
        while trace.pending(evidence):
            trace.extend(evidence, None if deadline is None else REPLAY_PIECE_STEPS)
            if deadline is not None and time.perf_counter() > deadline:
                break
        self.pending = trace.pending(evidence)

    def curve(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(steps, predicted scales): what the dashed curve draws; empty when off."""
        if self.trace is None or self.pending:
            # Drawn once replayed: redrawing a growing copy of a long replay on every piece
            # cost more than the piece (the summary says how far it has got meanwhile).
            return np.zeros(0), np.zeros(0)
        # Copied (the arrays keep growing) once per trace and length, not once per redraw.
        trace, size = self.trace, len(self.trace.steps)
        if self._curve is None or self._curve[0] is not trace or self._curve[1] != size:
            steps = np.array(trace.steps, dtype=np.float64)
            self._curve = (trace, size, steps, np.array(trace.scales, dtype=np.float64))
        return self._curve[2], self._curve[3]

    def summary(self, run: RunModel | None) -> str:
        """What the prediction says, in a few lines (or why there is none)."""
        if self.choice == OFF:
            return "Choose a policy to see its loss scale over this run's, dashed."
        if self.problem is not None:
            return self.problem
        if self.trace is None or self.settings is None or run is None:
            return "No run to replay."
        replay = self.trace.replay
        if not replay.steps:
            return f"{self.settings.describe()}\nno steps yet"
        if self.pending:
            done = replay.steps
            return (
                f"{self.settings.describe()}\nreplaying: {done} of {done + self.pending} "
                "steps so far"
            )
        lines = [
            self.settings.describe(),
            f"skipped steps: {replay.predicted_skips} predicted, {replay.logged_skips} logged",
            f"final scale: {_scale_text(replay.predicted_final_scale)} predicted, "
            f"{_scale_text(replay.logged_final_scale)} logged",
        ]
        if replay.first_scale_difference is None and replay.first_skip_difference is None:
            lines.append(f"the same trace as logged, all {replay.steps} steps")
        else:
            if replay.first_scale_difference is not None:
                lines.append(f"scales differ from step {replay.first_scale_difference}")
            if replay.first_skip_difference is not None:
                lines.append(
                    f"skips differ from step {replay.first_skip_difference}: a real run would "
                    "train on other weights after it"
                )
        if replay.unknown_count:
            lines.append(
                f"{replay.unknown_count} step(s) unknown (a backward overflow at the logged "
                "scale, replayed lower): assumed clean"
            )
        if replay.ended_at is not None:
            lines.append(f"the policy ends the run at step {replay.ended_at}")
        return "\n".join(lines)


def _scale_text(value: float) -> str:
    """A scale exactly ("2^11"), or cut and marked "…" (a float32 0.1 grown: never the
    unmarked "0.000390625" that %g rounded it to)."""
    if not (math.isfinite(value) and value > 0):
        return "-"
    mantissa, exponent = math.frexp(value)
    return f"2^{exponent - 1}" if mantissa == 0.5 else display_decimal(Fraction(value))


class ScalerWhatIf(QWidget):
    """The what-if's form: its slots hand the choice to the model; `changed` asks the
    panel to replay and redraw."""

    changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.model = WhatIfModel()
        self.policy = QComboBox()
        for name, description in CHOICES:
            self.policy.addItem(name)
            self.policy.setItemData(self.policy.count() - 1, description, 3)  # ToolTipRole
        self.fields: dict[str, QLineEdit] = {}
        form = QFormLayout()
        form.addRow("Policy", self.policy)
        for name in FIELDS:
            edit = QLineEdit()
            edit.setToolTip(f"{_SPECS[name].help}; empty: the policy's (or the run's) own")
            edit.editingFinished.connect(self._on_field_edited)
            self.fields[name] = edit
            form.addRow(_SPECS[name].title, edit)
        # Its texts hold numbers typed or read from the run's header: a 400-digit hysteresis
        # asked for 3734 px and widened the window; it wraps in the tab's width instead.
        self.summary = file_text_label("")
        intro = QLabel(
            "The loss scale this run would have had under another policy or settings, "
            "replayed from its logged overflows and gradient amax: the dashed line on the "
            "loss-scale plot."
        )
        intro.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addStretch(1)
        self.policy.currentTextChanged.connect(self._on_policy_changed)
        self._run: RunModel | None = None
        self._show_placeholders()

    def _texts(self) -> dict[str, str]:
        return {name: edit.text() for name, edit in self.fields.items()}

    def _on_policy_changed(self, _text: str) -> None:
        self.model.set_choice(self.policy.currentText(), self._texts())
        self._show_placeholders()
        self.changed.emit()

    def _on_field_edited(self) -> None:
        self.model.set_choice(self.policy.currentText(), self._texts())
        self.changed.emit()

    def _show_placeholders(self) -> None:
        """Each empty field shows the value it stands for."""
        choice = self.policy.currentText()
        base: ScalerSettings | None = None
        if choice == AS_LOGGED:
            base = self.model.logged_settings(self._run)
        elif choice != OFF:
            base = resolve_settings(choice)
        for name, edit in self.fields.items():
            value = getattr(base, name) if base is not None else None
            edit.setPlaceholderText("" if value is None else exact_number(value))
            edit.setEnabled(choice != OFF)

    def refresh(self, run: RunModel | None, budget_s: float | None = None) -> None:
        """Replay `run` (the panel's current run) as far as it goes (or for about
        `budget_s`, the rest left to the next call: `model.pending`), and say so."""
        if run is not self._run:
            self._run = run
            self._show_placeholders()
        self.model.update(run, budget_s)
        problem = self.model.problem is not None
        self.summary.setStyleSheet(f"color: {role_hex('error')};" if problem else "")
        text = self.model.summary(run)
        if self.summary.text() != text:
            self.summary.setText(text)
