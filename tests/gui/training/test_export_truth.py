"""What a user takes out of the training panel: the CSV against the run file, cell by cell,
and exports into a folder that already has them or that cannot take them."""

from __future__ import annotations

import csv
import json
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog, QMessageBox

from fpexplorer.gui.training.export import PlotCaption, export_plot, write_scalars_csv
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.training.records import HeaderRecord, StepRecord, decode_float
from fpexplorer.training.runlog import RunWriter


def _json_number(value: object) -> float:
    return decode_float(value) if isinstance(value, str) else float(value)  # type: ignore[arg-type]


def test_csv_has_every_step_scalar_of_the_run_file_bit_exactly(
    synthetic_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "steps.csv"
    count, problems = write_scalars_csv(RunModel(), out, synthetic_run)
    assert problems == []
    steps = [
        record
        for line in synthetic_run.read_text().splitlines()
        if (record := json.loads(line)).get("type") == "step"
    ]
    assert count == len(steps) == 300
    with open(out, newline="") as handle:
        header, *rows = list(csv.reader(handle))
    # Every scalar the run file carries per step has its column (grad_amax too); the
    # header names the unit where there is one.
    scalars = {key for record in steps for key, value in record.items() if key != "stats"}
    scalars -= {"type"}
    renamed = {"time": "time_s"}
    assert {renamed.get(key, key) for key in scalars} <= set(header), header
    assert "time" not in header
    for record, row in zip(steps, rows, strict=True):
        cells = dict(zip(header, row, strict=True))
        for key in scalars:
            want = _json_number(record[key])
            got = float(cells[renamed.get(key, key)])
            assert got == want or (math.isnan(got) and math.isnan(want)), (record["step"], key)
    table = np.genfromtxt(out, delimiter=",", names=True)  # numpy reads nan, inf, empty
    assert table.shape == (300,)
    assert np.array_equal(table["step"], np.arange(300))


def _choose_folder(monkeypatch: pytest.MonkeyPatch, folder: Path | str) -> None:
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *args: str(folder))


@pytest.mark.slow  # exports every plot: about a second
def test_export_asks_before_replacing_files(  # type: ignore[no-untyped-def]
    panel, synthetic_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel.load_run(synthetic_run)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "loss.png").write_bytes(b"the user's own figure")
    _choose_folder(monkeypatch, folder)
    questions: list[str] = []

    def answer(*args: object) -> QMessageBox.StandardButton:
        questions.append(str(args[2]))
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", answer)
    panel.export_action.trigger()
    assert len(questions) == 1 and "loss.png" in questions[0]
    assert (folder / "loss.png").read_bytes() == b"the user's own figure"
    assert sorted(path.name for path in folder.iterdir()) == ["loss.png"]
    assert "cancelled" in panel.status_label.text()
    monkeypatch.setattr(QMessageBox, "question", lambda *args: QMessageBox.StandardButton.Yes)
    panel.export_action.trigger()
    assert (folder / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert "Exported 9 files" in panel.status_label.text()


def test_a_failed_write_says_where_and_why_and_keeps_the_old_file(  # type: ignore[no-untyped-def]
    panel, synthetic_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel.load_run(synthetic_run)
    _choose_folder(monkeypatch, "/dev/full")  # a file, not a folder
    panel.export_action.trigger()
    assert panel.status_label.text() == "Export failed: /dev/full: File exists"
    # A full disk in the middle of the CSV: the file that was there is kept, no torn
    # copy nor temporary file is left.
    out = tmp_path / "steps.csv"
    out.write_text("kept\n")
    real_open = open

    def full_disk(file: object, mode: str = "r", *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if "w" in mode:
            return real_open("/dev/full", mode, *args, **kwargs)  # type: ignore[call-overload]
        return real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_scalars_csv(panel.current_run.model, out, synthetic_run)
    monkeypatch.undo()
    assert out.read_text() == "kept\n"
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_the_export_message_says_what_the_csv_left_out(  # type: ignore[no-untyped-def]
    panel, synthetic_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed = tmp_path / "killed.jsonl"
    lines = synthetic_run.read_text().splitlines(keepends=True)
    killed.write_text("".join(lines[:40]) + lines[40][:50])  # the run killed mid-line
    panel.load_run(killed)
    _choose_folder(monkeypatch, tmp_path / "out")
    panel.export_action.trigger()
    # Was: "Exported 9 files to ..." alone, the CSV's problem shown and replaced at once.
    text = panel.status_label.text()
    assert text.startswith(f"Exported 9 files to {tmp_path / 'out'}. The CSV has ")
    assert text.endswith("The CSV has 39 rows; line 41: torn last line ignored")


def test_csv_keeps_the_sign_of_zero_and_the_infinities(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    with RunWriter(run) as writer:
        writer.write(HeaderRecord())
        writer.write(StepRecord(step=0, loss=-0.0, grad_norm=math.inf, grad_amax=-math.inf))
        writer.write(StepRecord(step=1, loss=0.0, grad_norm=2.0**60, grad_amax=5e-324))
    write_scalars_csv(RunModel(), tmp_path / "steps.csv", run)
    with open(tmp_path / "steps.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    # Was "0" for -0.0: not the run file's value bit for bit.
    assert math.copysign(1.0, float(rows[0]["loss"])) == -1.0
    assert math.copysign(1.0, float(rows[1]["loss"])) == 1.0
    assert float(rows[0]["grad_norm"]) == math.inf and float(rows[0]["grad_amax"]) == -math.inf
    assert float(rows[1]["grad_norm"]) == 2.0**60 and float(rows[1]["grad_amax"]) == 5e-324
    table = np.genfromtxt(tmp_path / "steps.csv", delimiter=",", names=True)
    assert np.signbit(table["loss"]).tolist() == [True, False]


def test_a_refused_file_is_named_as_the_user_asked_for_it(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("")
    with pytest.raises(NotADirectoryError) as raised:
        export_plot(panel.loss_plot.plot, not_a_folder / "loss", PlotCaption("Loss", ()))
    # Was the temporary file's name (".loss.png.<pid>.<hex>.part").
    assert raised.value.filename == str(not_a_folder / "loss.png")
    with pytest.raises(NotADirectoryError) as raised:
        write_scalars_csv(RunModel(), not_a_folder / "steps.csv")
    assert raised.value.filename == str(not_a_folder / "steps.csv")


def _svg_texts(path: Path) -> tuple[list[str], str]:
    """The visible text elements of an SVG (whitespace folded), and its title."""
    root = ElementTree.parse(path).getroot()
    elements = [e for e in root.iter() if e.tag.endswith("}text")]
    texts = [" ".join("".join(e.itertext()).split()) for e in elements]
    titles = [e.text or "" for e in root.iter() if e.tag.endswith("}title")]
    return texts, titles[0] if titles else ""


@pytest.mark.slow  # renders and writes every plot of both pages: about two seconds
def test_every_exported_plot_says_what_it_shows_and_which_run(  # type: ignore[no-untyped-def]
    panel, make_run, tmp_path: Path
) -> None:
    fp8 = make_run("fp8.jsonl", steps=40, precision="fp8", quant="fp8-delayed", stats_every=5)
    panel.load_run(fp8)
    label = panel.current_run.model.label
    panel.plot_tabs.setCurrentWidget(panel.quant_page)
    panel.refresh()
    panel.quant_page.choose("blocks.0.mlp.w1", "weight")
    assert (panel.quant_page.layer, panel.quant_page.role) == ("blocks.0.mlp.w1", "weight")
    written = panel.export_to(tmp_path / "out")
    svgs = sorted(path for path in written if path.suffix == ".svg")
    # Was: the plot alone, its card's title, the tensor and the run left behind on screen.
    want = {
        "loss": "Loss",
        "loss_scale": "Loss scale",
        "gradient_histogram": "Gradient exponents: parameter gradients, step 35",
        "exponent_heatmap": "Exponents over time: parameter gradients",
        "quant_amax_scale": "amax and scale: blocks.0.mlp.w1, weight",
        "quant_flushed_heatmap": "Flushed to zero: weight tensors",
        "quant_saturated_heatmap": "Saturated: weight tensors",
        "quant_sqnr": "SQNR per layer: weight tensors",
        "quant_block_scales": "Block scales: blocks.0.mlp.w1, weight",
    }
    assert sorted(path.stem for path in svgs) == sorted(want)
    plots = {**panel._main_plots(), **panel.quant_page.export_plots()}
    for svg in svgs:
        texts, title = _svg_texts(svg)
        assert title == want[svg.stem]
        # Word-wrapped lines are text elements of their own: read as one text.
        shown = " ".join(texts)
        assert shown.startswith(f"{want[svg.stem]} run: {label} "), svg.stem
        # The axes keep their labels (with their unit where there is one: "SQNR (dB)").
        item = plots[svg.stem][0].getPlotItem()
        bottom = " ".join(item.getAxis("bottom").labelText.split())
        assert bottom and bottom in shown, (svg.stem, bottom)
        png = QImage(str(svg.with_suffix(".png")))
        assert png.text("Title") == want[svg.stem]
        assert png.text("Description").startswith(f"run: {label}")
    assert _svg_texts(tmp_path / "out" / "quant_sqnr.svg")[0].count("SQNR (dB)") == 1


def test_a_caption_wider_than_the_plot_is_wrapped_inside_it_not_cut_off(  # type: ignore[no-untyped-def]
    panel, synthetic_run: Path, tmp_path: Path
) -> None:
    """A run named by a long file name without a space (a user's script) is broken inside
    the name where it is wider than the plot: every caption line fits and the whole name
    is there (was: one line past the edge, cut off in the PNG and the SVG alike)."""
    from PySide6.QtGui import QFont, QFontMetrics

    panel.load_run(synthetic_run)
    plot = panel.loss_plot.plot
    name = "train_" + "wide" * 200 + ".py:main bf16 lr=0.01"
    caption = PlotCaption("Loss", (name,), "Loss per step, one curve per run.")
    export_plot(plot, tmp_path / "loss", caption)
    texts, title = _svg_texts(tmp_path / "loss.svg")
    assert title == "Loss"
    # The caption's lines come first, the plot's own text after them.
    wanted = "".join(f"Loss run: {name} {caption.explanation}".split())
    lines: list[str] = []
    while "".join("".join(lines).split()) != wanted:
        assert texts, ("the caption is not whole", lines)
        lines.append(texts.pop(0))
    metrics = QFontMetrics(QFont(plot.font()))
    for line in lines[1:]:  # the title is short; the rest in the plot's font
        assert metrics.horizontalAdvance(line) <= plot.width() - 2 * 8, line[:40]
    assert len(lines) > 3  # the name took lines of its own


def test_an_exported_smoothed_loss_says_it_is_smoothed(  # type: ignore[no-untyped-def]
    panel, synthetic_run: Path, tmp_path: Path
) -> None:
    """The loss card's smoothing is outside the exported plot: the caption states it (was:
    'Loss' and 'Loss per step' above curves averaged over many steps)."""
    panel.load_run(synthetic_run)
    panel.loss_plot.smooth_spin.setValue(0.9)
    panel.export_to(tmp_path / "smoothed")
    texts, title = _svg_texts(tmp_path / "smoothed" / "loss.svg")
    assert title == "Loss, smoothed (exponential moving average, weight 0.9)"
    assert " ".join(texts).startswith(title)
    panel.loss_plot.smooth_spin.setValue(0)
    panel.export_to(tmp_path / "raw")
    assert _svg_texts(tmp_path / "raw" / "loss.svg")[1] == "Loss"
