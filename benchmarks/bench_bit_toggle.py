"""Time for one bit toggle to update every view of the Formats panel.

Builds the real main window offscreen (FP32, FP16, BF16 stacked, FP64 for the wide case),
then toggles fraction bits through the same session call a click makes and measures until
the event loop has handled the repaints the change asked for (what a click would cost):

  visible views   what a user waits for: the editors, read-outs and the view on top
                  (hidden views only mark themselves stale), once per bottom view
  every view      the toggle plus a forced render of all five views, visible or not

Prints the median and 90th percentile in milliseconds (aim: under 10 ms).

    python benchmarks/bench_bit_toggle.py [--toggles 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("FPEXPLORER_SETTINGS_DIR", tempfile.mkdtemp(prefix="fpexplorer-bench-"))


SHORT_NAMES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--toggles", type=int, default=200)
    args = parser.parse_args()

    from fpexplorer.formats import get_format
    from fpexplorer.gui.app import create_application
    from fpexplorer.gui.formats.panel import VIEW_NAMES
    from fpexplorer.gui.formats.state import EditorState
    from fpexplorer.gui.main_window import MainWindow
    from fpexplorer.gui.settings import SettingsStore

    app = create_application()
    window = MainWindow(SettingsStore(persistent=False), restore=False)
    window.resize(1280, 800)
    window.show()
    app.processEvents()
    panel = window.formats_panel
    session = window.session

    def stack(*names: str) -> None:
        session.editors = [EditorState(get_format(name)) for name in names]
        session.editors_changed.emit()
        session.enter_text("0.1")
        app.processEvents()

    def measure(editor_index: int, bits: list[int], every_view: bool) -> list[float]:
        editor = session.editors[editor_index]
        times = []
        for i in range(args.toggles):
            bit = bits[i % len(bits)]
            start = time.perf_counter()
            session.toggle_bit(editor, bit)
            if every_view:
                panel.refresh_all_views()
            app.processEvents()
            times.append((time.perf_counter() - start) * 1000)
        return times

    print(f"{args.toggles} toggles each, window 1280x800, offscreen")
    print(f"{'stack':<22} {'bottom view':<14} {'median ms':>10} {'p90 ms':>8}")
    for names, editor_index, bits in (
        (("float32", "float16", "bfloat16"), 0, [3, 7, 12, 18]),
        (("float64", "float32", "float16"), 0, [5, 20, 33, 47]),
    ):
        stack(*names)
        label = "+".join(SHORT_NAMES.get(name, name) for name in names)
        for view in VIEW_NAMES:
            panel.show_view(view)
            app.processEvents()
            times = measure(editor_index, bits, every_view=False)
            print(
                f"{label:<22} {view:<14} {statistics.median(times):>10.2f} "
                f"{percentile(times, 0.9):>8.2f}"
            )
        times = measure(editor_index, bits, every_view=True)
        print(
            f"{label:<22} {'EVERY view':<14} {statistics.median(times):>10.2f} "
            f"{percentile(times, 0.9):>8.2f}"
        )
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
