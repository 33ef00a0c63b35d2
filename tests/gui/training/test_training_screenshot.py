"""The README's training screenshot, checked by what its widgets say (not by its pixels).

The window is built and painted the way `fpexplorer screenshot --panel training --run ...`
does it; then the texts, ranges and items a reader of the picture sees are compared with
the recorded run (a real `fpexplorer train --task overflow --precision fp16` log).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

RECORDED_RUN = Path(__file__).parent / "data" / "overflow-fp16.jsonl"


@pytest.fixture(scope="module")
def shot(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The window, built and painted once for the module: the tests that take it only read
    what it shows (building and rendering it is most of their time)."""
    from fpexplorer.commands.screenshot import render
    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FPEXPLORER_RUN_DIR", str(tmp_path_factory.mktemp("runs")))
        window = MainWindow(SettingsStore(persistent=False), restore=False)
        try:
            window.tabs.setCurrentIndex(1)
            window.training_panel.load_run(RECORDED_RUN)
            window.training_panel.finish_loading()
            image = render(window, 1280, 800)
            assert (image.width(), image.height()) == (1280, 800)
            yield window
        finally:
            window.training_panel.shutdown()
            window.close()
            window.deleteLater()


def test_the_screenshot_shows_the_recorded_run(shot) -> None:  # type: ignore[no-untyped-def]
    panel = shot.training_panel
    model = panel.current_run.model
    assert model.steps_seen == 240 and model.status == "completed"
    assert panel.run_list.count() == 1
    assert panel.run_list.item(0).text() == "overflow fp16 lr=0.001 seed=0 — completed"
    assert panel.status_label.text() == "Opened overflow-fp16.jsonl: 240 steps, completed."
    # The loss against an axis that holds it and not much more.
    key = panel.current_run.key
    steps, loss = panel.loss_plot.curves.curves[key].getData()
    # The 13 NaN losses (the overflowed steps) are left out of the line, not drawn at 0.
    assert len(steps) == int(np.isfinite(model.scalars.column("loss")).sum()) == 227
    (x_lo, x_hi), (y_lo, y_hi) = panel.loss_plot.plot.getPlotItem().getViewBox().viewRange()
    assert x_lo == 0 and x_hi == 240
    span = float(loss.max() - loss.min())
    assert y_lo <= loss.min() and loss.max() <= y_hi <= loss.max() + 0.2 * span
    # The loss scale from 2^16 down, one cross per skipped step.
    _, scales = panel.scale_plot.curves.curves[key].getData()
    assert scales[0] == 16 and scales.min() == np.log2(model.scalars.column("scale")).min()
    _, (s_lo, s_hi) = panel.scale_plot.plot.getPlotItem().getViewBox().viewRange()
    assert s_lo >= scales.min() - 3 and s_hi <= 16 + 3  # a binade and padding each side
    assert len(panel.scale_plot.skips.getData()[0]) == model.skipped_count == 13
    assert panel.scale_plot.growth_label.text() == "skipped: 13 · growth tracker:"


def test_the_screenshot_names_where_the_overflow_began(shot) -> None:  # type: ignore[no-untyped-def]
    panel = shot.training_panel
    text = panel.layer_table.first_label.text()
    assert text == (
        "First non-finite layer: 2 (step 14, skipped at scale 2^16; first in backward "
        "order); the overflow began in the forward pass at 0.wi."
    )
    markers = [(line.value(), line.label.toPlainText()) for line in panel.loss_plot.markers.lines]
    assert markers == [
        (14, "first NaN loss"),
        (14, "first inf/NaN: layer 2"),
    ]  # "2" alone read as a step
    table = panel.layer_table.table
    header = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert header == ["layer", "‖g‖ unscaled", "max |g| scaled", "headroom in FP16",
                      "< 2^-24 (FP16)", "inf/NaN"]  # fmt: skip
    assert table.item(0, 0).text() == "0.wi"
    stats = panel.current_run.model.latest_stats
    assert table.rowCount() == len(stats.layers)


def test_the_screenshot_histogram_and_heatmap(shot) -> None:  # type: ignore[no-untyped-def]
    panel = shot.training_panel
    stats = panel.current_run.model.latest_stats
    hist = stats.grad_hist
    assert panel.hist_plot.counts_label.text() == (
        f"step {stats.step}: {hist.total:,} values · zero {hist.zero:,} · inf {hist.inf:,} "
        f"· NaN {hist.nan:,}"
    )
    heights = panel.hist_plot.bars.opts["height"]
    assert np.array_equal(heights, np.log10(1.0 + np.asarray(hist.counts, dtype=np.float64)))
    # The rulers are the engine's ranges: FP16 from 2^-24 to log2(65504).
    thin, thick, _label = panel.hist_plot._rulers["float16"]
    assert list(thin.getData()[0]) == [-24.0, -14.0]
    assert list(thick.getData()[0]) == [-14.0, np.log2(65504.0)]
    assert panel.heatmap.note.text().startswith("dashed: FP16's smallest subnormal")
    assert panel.memory.throughput.text().endswith("step 240 of 240")


@pytest.mark.slow  # renders the whole window: about half a second
def test_the_window_fits_1024x640_without_scaling(qtbot, run_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.commands.screenshot import render
    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    window = MainWindow(SettingsStore(persistent=False), restore=False)
    qtbot.addWidget(window)
    window.tabs.setCurrentIndex(1)
    window.training_panel.load_run(RECORDED_RUN)
    render(window, 1024, 640)
    try:
        # Drawn at its own size (the render scales a window that cannot be that small).
        assert (window.width(), window.height()) == (1024, 640)
        panel = window.training_panel
        assert not panel.start_button.visibleRegion().isEmpty()
        assert panel.loss_plot.plot.height() >= 80
    finally:
        window.training_panel.shutdown()
        window.close()
