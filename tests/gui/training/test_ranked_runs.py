"""The training panel and runs of several ranks: a run folder opens as its merged view,
ranks overlaid on request, "first overflow: rank R, layer L" where it started, and a job
of two ranks started from the form shows live."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from fpexplorer.gui.training.job_state import JobState
from fpexplorer.gui.training.view_model import first_nonfinite_view, run_markers
from fpexplorer.training.monitor.ranks import rank_log_path
from fpexplorer.training.records import (
    EndRecord,
    HeaderRecord,
    LayerStats,
    ModelInfo,
    RankEnd,
    RankInfo,
    RankStep,
    StepRecord,
    StepStats,
)
from fpexplorer.training.runlog import RunWriter

WORLD = 4
LAYERS = ("4.wi", "5.wo", "head")


def _write_ranked_run(folder: Path, *, lost_rank: int | None = None) -> Path:
    """A merged log and four rank logs, as `fpexplorer train --nproc-per-node 4` writes
    them; on step 3 the overflow started on rank 3 in layer 5.wo. With `lost_rank`, that
    rank was killed after step 5: the others' logs and the merged one end failed."""
    merged = folder / "run.jsonl"
    config = {"task": "transformer", "precision": "fp16", "init_scale": 65536.0}
    model = ModelInfo(params=10, layers=LAYERS)
    for rank in (None, *range(WORLD)):
        path = merged if rank is None else rank_log_path(merged, rank)
        info = RankInfo(rank=rank or 0, world_size=WORLD, host="node-a", merged=rank is None)
        with RunWriter(path) as writer:
            writer.write(HeaderRecord(config=config, model=model, ranks=info))
            for step in range(6):
                overflow = step == 3
                stats = StepStats(
                    layers=tuple(LayerStats(name=name, nonfinite=overflow) for name in LAYERS),
                    first_nonfinite="head" if overflow else None,  # where it *arrived*
                )
                ranks = None
                if rank is None:
                    ranks = RankStep(
                        losses=(1.0,) * WORLD, scales=(65536.0,) * WORLD,
                        skipped=(overflow,) * WORLD,
                        nonfinite_ranks=(3,) if overflow else (),
                        first_nonfinite_rank=3 if overflow else None,
                        first_nonfinite_layer="5.wo" if overflow else None,
                    )  # fmt: skip
                loss = 2.0 - 0.1 * step + (0.01 * rank if rank is not None else 0.0)
                writer.write(StepRecord(step=step, loss=loss, scale=65536.0, skipped=overflow,
                                        time=0.1 * step, stats=stats, ranks=ranks))  # fmt: skip
            if lost_rank is None:
                ends = tuple(RankEnd(rank=k, status="completed", steps=6) for k in range(WORLD))
                writer.write(EndRecord(status="completed", steps=6, elapsed=0.6,
                                       ranks=ends if rank is None else ()))  # fmt: skip
            elif rank != lost_rank:  # a killed rank writes no end
                ends = tuple(RankEnd(rank=k, status="lost" if k == lost_rank else "failed",
                                     steps=6) for k in range(WORLD))  # fmt: skip
                writer.write(EndRecord(status="failed", steps=6, elapsed=0.6,
                                       error=f"lost rank {lost_rank}",
                                       ranks=ends if rank is None else ()))  # fmt: skip
    return merged


def test_a_run_folder_opens_as_its_merged_view(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _write_ranked_run(tmp_path)
    panel.load_run(tmp_path)
    assert len(panel.runs) == 1
    model = panel.runs[0].model
    assert model.rank_text == "merged, 4 ranks" and model.label.startswith("[ranks 0-3] ")
    view = first_nonfinite_view(model)
    assert view.alarm
    assert view.text.startswith("First overflow: rank 3, layer 5.wo (step 3")
    panel.refresh()
    assert panel.layer_table.first_label.text() == view.text  # what the Layers card says
    markers = run_markers(panel.run_list_state.overlay())
    assert [m.text for m in markers] == ["first inf/NaN: rank 3, layer 5.wo"]


def test_a_user_fsdp_loop_s_run_fills_the_form_with_its_ranks(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A user's loop under torchrun: AmpMonitor's merged header states the launch (config
    and `ranks`, as `tests/training/test_distributed_user_loop.py` checks from a real
    2-rank run); the form shows 2 ranks and FSDP, not Ranks 1 and the default."""
    merged = tmp_path / "loop.jsonl"
    config = {"task": "user loop", "precision": "fp32", "stats_every": 1, "device": "cpu",
              "nproc_per_node": 2, "nnodes": 1, "parallel": "fsdp"}  # fmt: skip
    info = RankInfo(rank=0, world_size=2, parallel="fsdp", merged=True)
    with RunWriter(merged) as writer:
        writer.write(HeaderRecord(config=config, model=ModelInfo(params=10, layers=LAYERS),
                                  ranks=info))  # fmt: skip
        writer.write(StepRecord(step=0, loss=1.0))
        writer.write(EndRecord(status="completed", steps=1, elapsed=0.1))
    panel.load_run(merged)
    assert panel.runs[-1].model.rank_text == "merged, 2 ranks"
    assert panel.form.fields["nproc_per_node"].edit.text() == "2"
    assert panel.form.parallel_combo.currentData() == "fsdp"
    assert panel.form.parallel_combo.isEnabled()


@pytest.mark.slow  # a panel and several rank logs drawn: about half a second
def test_overlay_each_rank_adds_the_rank_logs(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    merged = _write_ranked_run(tmp_path)
    panel.overlay_ranks_action.setChecked(True)
    panel.load_run(rank_log_path(merged, 2))  # any of the run's logs stands for the run
    labels = [entry.model.rank_text for entry in panel.runs]
    assert labels == ["merged, 4 ranks", "rank 0", "rank 1", "rank 2", "rank 3"]
    # A rank's own log names no rank: its first non-finite layer is where it arrived.
    assert first_nonfinite_view(panel.runs[1].model).text.startswith(
        "First non-finite layer: head (step 3"
    )
    assert len(panel.run_list_state.overlay()) == 5
    assert panel.current_run is panel.runs[0]  # the merged view is the one shown
    assert panel.runs[2].model.label.startswith("[rank 1] ")


def test_overlay_on_a_failed_run_says_why_as_the_merged_view_does(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Before, the overlay's status line said only "failed", not in the alarm colour,
    where the merged view alone said "Error: lost rank 2." in it."""
    _write_ranked_run(tmp_path, lost_rank=2)
    panel.load_run(tmp_path)
    alone = panel.status_label.text()
    assert alone == "Opened run.jsonl: 6 steps, failed. Error: lost rank 2."
    panel.overlay_ranks_action.setChecked(True)
    panel.load_run(tmp_path)
    overlaid = "Opened run.jsonl (merged) and 4 rank logs beside it: 6 steps, failed."
    assert panel.status_label.text() == overlaid + " Error: lost rank 2."
    assert panel.status_label.styleSheet() != ""  # the alarm colour, as alone
    # The merged view opened alone, then again (read again, listed once) with ranks 0-3
    # beside it.
    assert len(panel.runs) == 5 and panel.current_run is panel.runs[0]
    statuses = [entry.model.status for entry in panel.runs[1:]]
    assert statuses == ["failed", "failed", "incomplete", "failed"]


def test_a_folder_without_a_run_is_a_status_line(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.rank-0.jsonl").write_text("")
    (tmp_path / "b.rank-0.jsonl").write_text("")
    panel.load_run(tmp_path)
    assert panel.runs == []
    assert "holds several runs" in panel.status_label.text()


@pytest.mark.slow  # two ranks through torchrun from the panel: seconds
def test_a_job_of_two_ranks_from_the_form_shows_the_merged_stream_live(panel, qtbot) -> None:  # type: ignore[no-untyped-def]
    form = panel.form
    form.precision_combo.setCurrentText("bf16")
    form.device_combo.setCurrentIndex(form.device_combo.findData("cpu"))
    form.fields["steps"].edit.setText("4")
    form.fields["stats_every"].edit.setText("1")
    form.fields["nproc_per_node"].edit.setText("2")
    assert form.problems() == {}
    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.job.active, timeout=150_000)
    assert panel.job.state is JobState.DONE, panel.status_label.text()
    model = panel.current_run.model
    assert model.header is not None and model.header.ranks is not None
    assert model.header.ranks.merged and model.header.ranks.world_size == 2
    assert model.steps_seen == 4
    assert model.end is not None and [r.status for r in model.end.ranks] == ["completed"] * 2
    assert model.latest_step is not None and model.latest_step.ranks is not None
    assert all(math.isfinite(loss) for loss in model.latest_step.ranks.losses)
    # The header states the launch: the form can start the same job again from it.
    assert model.config["nproc_per_node"] == 2


def test_a_marker_label_near_the_plot_end_is_not_cut_off(panel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At 1024x640 "first inf/NaN: rank 3, layer 5.wo" on a line past the middle ran out
    of the loss plot (always drawn right of its line); now it ends at the plot's edge."""
    _write_ranked_run(tmp_path)  # the overflow at step 3 of steps 0-5
    panel.resize(1024, 640)
    panel.load_run(tmp_path)
    panel.refresh()
    panel.grab()  # laid out and drawn, as on screen
    markers = panel.loss_plot.markers
    view = markers.view.sceneBoundingRect()
    [line] = markers.labelled
    assert line.label.toPlainText() == "first inf/NaN: rank 3, layer 5.wo"
    label = line.label.sceneBoundingRect()
    assert view.left() <= label.left() and label.right() <= view.right() + 0.5
