"""Redraws with many runs: curves join the legend with one layout, not one each, and only
the curves of runs that moved are given data again.

pyqtgraph lays its whole legend out again for every item added: with hundreds of runs
open, adding 30 more in one redraw took 1.2 s of it (measured: 2.1 s to 0.63 s for the
redraw with the legend laid out once).
"""

from __future__ import annotations

import pyqtgraph as pg
import pytest

from fpexplorer.gui.training.plots import RunCurves
from fpexplorer.gui.training.run_model import RunModel
from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.gui.training.view_model import OverlayRun


@pytest.fixture
def plot(qtbot):  # type: ignore[no-untyped-def]
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    widget.resize(900, 600)
    return widget


def _spy_on_set_data(curve: pg.PlotDataItem, name: str, given: list[str]) -> None:
    original = curve.setData

    def spy(*args: object, **kwargs: object) -> None:
        given.append(name)
        original(*args, **kwargs)

    curve.setData = spy


def _runs(count: int, start: int = 0) -> list[OverlayRun]:
    return [OverlayRun(key, f"run {key}", "#336699", RunModel()) for key in range(start, count)]


def test_new_curves_join_the_legend_with_one_layout(plot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    layouts: list[int] = []
    original = pg.LegendItem.updateSize

    def counted(self: pg.LegendItem) -> None:
        layouts.append(1)
        original(self)

    monkeypatch.setattr(pg.LegendItem, "updateSize", counted)
    curves = RunCurves(plot)
    layouts.clear()
    runs = _runs(20)
    for run in runs:
        curves.curve_for(run)
    curves.show_legend(True)
    assert curves.legend_names == [run.name for run in runs]
    assert len(layouts) <= 2  # the items' layout, and the columns' (was one per item: 21)


def test_a_curve_dropped_before_the_legend_is_laid_out_is_not_listed(plot) -> None:  # type: ignore[no-untyped-def]
    curves = RunCurves(plot)
    runs = _runs(3)
    for run in runs:
        curves.curve_for(run)
    curves.drop_missing({0, 2})
    curves.show_legend(True)
    assert curves.legend_names == ["run 0", "run 2"]
    curves.curve_for(_runs(4, start=3)[0])
    curves.drop_missing({0, 3})  # one already in the legend, one not yet
    curves.show_legend(True)
    assert curves.legend_names == ["run 0", "run 3"]


@pytest.mark.slow  # a panel
def test_a_redraw_gives_data_only_to_the_curves_of_runs_that_moved(panel, make_run) -> None:  # type: ignore[no-untyped-def]
    # With 200 runs open and a live job, every redraw re-set all 400 curves: 75 ms of
    # each 105 ms redraw.
    for index in range(3):
        panel.load_run(make_run(f"run{index}.jsonl", steps=30 + index))
    panel.refresh()
    given: list[str] = []
    for plot in (panel.loss_plot, panel.scale_plot):
        for key, curve in plot.curves.curves.items():
            _spy_on_set_data(curve, f"{type(plot).__name__} {key}", given)
    panel.refresh()
    assert given == []  # nothing moved
    moved = panel.runs[1]
    moved.model.add_records(list(synthetic_records(40))[-3:-1])  # two more steps
    panel.refresh()
    assert sorted(given) == [f"LossPlot {moved.key}", f"LossScalePlot {moved.key}"]
    panel.loss_plot.smooth_spin.setValue(0.5)  # a new smoothing: every loss curve again
    assert sum(name.startswith("LossPlot") for name in given) == 1 + 3
