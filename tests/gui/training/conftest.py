"""Fixtures for the training panel's tests: synthetic run files and a panel that is shut down."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.runlog import RunWriter


def write_synthetic_run(path: Path, steps: int = 300, **options: object) -> Path:
    with RunWriter(path) as writer:
        for record in synthetic_records(steps, **options):  # type: ignore[arg-type]
            writer.write(record)
    return path


@pytest.fixture
def make_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a synthetic run file: make_run("name.jsonl", steps=..., precision=...)."""

    def make(name: str, steps: int = 300, **options: object) -> Path:
        return write_synthetic_run(tmp_path / name, steps=steps, **options)

    return make


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "synthetic.jsonl", steps=300, overflow_every=97)


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "runs"
    monkeypatch.setenv("FPEXPLORER_RUN_DIR", str(folder))
    return folder


@pytest.fixture
def panel(qtbot, run_dir: Path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from fpexplorer.gui.training.panel import TrainingPanel

    widget = TrainingPanel()
    qtbot.addWidget(widget)
    widget.resize(1400, 900)
    widget.show()
    yield widget
    widget.shutdown()
