"""Run names in the panel's run list and the plots' legends, at 1024x640 with six runs of
long names overlaid: elided a word at a time, never inside a number, the whole name in a
tooltip. Qt's middle elision showed "synthetic fp16 lr=0.0002 seed=1" as "… lr=0.…2 …"
(a number cut in its middle reads as another number)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import HeaderRecord
from fpexplorer.training.runlog import RunWriter

pytestmark = pytest.mark.slow  # a panel

SETTINGS = [("fp16", 0.0002, 1), ("fp16", 0.0002, 2), ("bf16", 0.00025, 1),
            ("fp16", 0.002, 1), ("fp16", 3e-05, 11), ("fp32", 0.0002, 1)]  # fmt: skip


def _runs(folder: Path) -> list[Path]:
    paths = []
    for index, (precision, lr, seed) in enumerate(SETTINGS):
        path = folder / f"run{index}.jsonl"
        with RunWriter(path) as writer:
            for record in synthetic_records(40, precision=precision, seed=seed):
                if isinstance(record, HeaderRecord):
                    config = {**record.config, "lr": lr, "seed": seed}
                    if index == 0:  # a name longer than the legend's 48 characters
                        config["task"] = "experiments/cifar10_resnet50_baseline_sweep.py:make"
                    record = dataclasses.replace(record, config=config)
                writer.write(record)
        paths.append(path)
    return paths


def _whole_words(shown: str, full: str) -> bool:
    """Each word shown is one of `full`'s, '…', or the first word's head cut before any
    digit (the task's name); the number words ("lr=0.0002") only ever whole."""
    words = full.split()
    for word in shown.split():
        if word == "…" or word in words:
            continue
        head = word.removesuffix("…")
        if word.endswith("…") and words[0].startswith(head) and not head[-1:].isdigit():
            continue
        return False
    return True


def test_names_are_cut_between_words_with_the_whole_name_in_a_tooltip(  # type: ignore[no-untyped-def]
    panel, qtbot, tmp_path: Path
) -> None:
    from PySide6.QtWidgets import QApplication

    panel.resize(1024, 640)
    for path in _runs(tmp_path):
        panel.load_run(path)
    panel.refresh()
    QApplication.processEvents()
    lists = panel.run_list
    delegate = lists.itemDelegate()
    shown = [delegate.shown_text(lists, row) for row in range(lists.count())]
    titles = [lists.item(row).text() for row in range(lists.count())]
    # The whole name on hover (the title elides a long one to 60 characters).
    wholes = [f"{entry.model.label} — completed" for entry in panel.runs]
    assert len(wholes[0]) > 60 + len(" — completed")
    assert [lists.item(row).toolTip() for row in range(lists.count())] == wholes
    assert any(text != title for text, title in zip(shown, titles, strict=True))  # cut here
    for text, title in zip(shown, titles, strict=True):
        assert _whole_words(text, title), (text, title)
    # Narrower still (a splitter dragged): words go, numbers stay whole.
    lists.setFixedWidth(170)
    QApplication.processEvents()
    narrow = [delegate.shown_text(lists, row) for row in range(lists.count())]
    assert all(_whole_words(text, title) for text, title in zip(narrow, titles, strict=True))
    assert all(len(a) < len(b) for a, b in zip(narrow, shown, strict=True)), (narrow, shown)
    # The legends (shown from 1280x800 on): labels cut the same way where two columns
    # share the loss-scale plot's width, the whole name as their tooltip.
    panel.resize(1280, 800)
    QApplication.processEvents()
    panel.refresh()
    QApplication.processEvents()
    curves = panel.scale_plot.curves
    assert curves.legend is not None and curves.legend.isVisible()
    labels = [entry.model.label for entry in panel.runs]
    assert len(labels[0]) > 48
    for (_sample, label), whole in zip(curves.legend.items, labels, strict=True):
        assert label.toolTip() == whole  # the whole name, not the legend's 48 characters
        assert _whole_words(label.text, whole), (label.text, whole)
    assert any(label.text != sample.item.name() for sample, label in curves.legend.items)
