"""Failed and degenerate runs in the panel: the window says what happened, no plot is a
blank frame without a reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.runlog import RunWriter


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    with RunWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


def _header() -> dict[str, Any]:
    return next(synthetic_records(1))


def test_a_run_that_failed_before_its_first_step_shows_its_error(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    error = "RuntimeError: grad can be implicitly created only for scalar outputs"
    path = _write(
        tmp_path / "failed.jsonl",
        [_header(), {"type": "end", "status": "failed", "error": error, "steps": 0}],
    )
    panel.load_run(path)
    assert "failed" in panel.status_label.text()
    assert error in panel.status_label.text()  # the reason, not only the word "failed"
    reason = "no steps: the run failed before its first step"
    assert panel.loss_plot.empty_note.text == reason
    assert panel.scale_plot.empty_note.text == reason
    assert panel.hist_plot.empty_note.text == reason
    assert panel.heatmap.empty_note.text == reason


def test_a_nan_storm_says_why_loss_and_histograms_are_empty(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    header = _header()
    nan_hist = {"lo": 0, "counts": [], "zero": 0, "inf": 0, "nan": 12}
    steps = [
        {
            "type": "step",
            "step": i,
            "loss": float("nan"),
            "scale": 65536.0 / 2**i,
            "skipped": True,
            "growth_tracker": 0,
            "lr": 1e-3,
            "grad_norm": float("nan"),
            "steps_per_s": 100.0,
            "time": 0.01 * i,
            "grad_hist": nan_hist,
            "act_hist": {**nan_hist, "dtype": "float16"},
            "first_nonfinite": "head",
            "layers": [
                {
                    "name": "head",
                    "grad_norm": float("nan"),
                    "amax": float("nan"),
                    "headroom_log2": None,
                    "underflow_share": 0.0,
                    "nonfinite": True,
                }
            ],
        }
        for i in range(20)
    ]
    end = {"type": "end", "status": "completed", "error": None, "steps": 20}
    panel.load_run(_write(tmp_path / "nan.jsonl", [header, *steps, end]))
    assert panel.loss_plot.empty_note.text == "no finite loss: all 20 losses are inf or NaN"
    assert panel.scale_plot.empty_note.text is None  # the scale curve is there
    expected = "no finite non-zero gradient: 0 zero, 0 inf, 12 NaN"
    assert panel.hist_plot.empty_note.text == expected
    # The counts are still read out: they are the whole story of this step.
    assert "step 19" in panel.hist_plot.counts_label.text()
    assert "NaN 12" in panel.hist_plot.counts_label.text()
    assert panel.heatmap.empty_note.text == expected
    x_range, _ = panel.heatmap.plot.getPlotItem().getViewBox().viewRange()
    assert x_range[0] >= -1 and 19 <= x_range[1] <= 40  # steps, not pyqtgraph's default
    assert "First non-finite layer: head" in panel.layer_table.first_label.text()


def test_plots_with_data_show_no_note(panel, synthetic_run: Path) -> None:  # type: ignore[no-untyped-def]
    panel.load_run(synthetic_run)
    for view in (panel.loss_plot, panel.scale_plot, panel.hist_plot, panel.heatmap):
        assert view.empty_note.text is None
