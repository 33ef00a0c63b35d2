"""Time for a typed value to show in a wide custom format (e16m47), per view on top.

Values far outside every format (1e99999, -1e-99999) are exact Fractions of about 330,000
bits; reducing one such fraction is a gcd of two of them (15 ms) and a keystroke once made
dozens (0.4-0.8 s, the window frozen). Builds the Formats panel offscreen with e16m47 and
FP16 stacked, types each value as Enter in the entry field does, and measures until the
event loop has handled the repaints. Prints the median in milliseconds and its ratio to
typing "1.5" in the same run (aim: the huge values within a few times that).

    python benchmarks/bench_wide_entry.py [--repeats 5]
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

VALUES = ("1.5", "1e99999", "-1e-99999", "1e9000", "3e-9870")
VIEWS = ("number-line", "table", "range")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from fpexplorer.formats import get_format
    from fpexplorer.gui.app import create_application
    from fpexplorer.gui.formats.panel import FormatsPanel
    from fpexplorer.gui.formats.state import FormatsSession

    app = create_application()
    session = FormatsSession([get_format("e16m47"), get_format("fp16")])
    panel = FormatsPanel(session)
    panel.resize(1280, 800)
    panel.show()
    app.processEvents()

    print(f"{'view':<12} {'value':<10} {'median ms':>9} {'x 1.5':>7}")
    for view in VIEWS:
        panel.show_view(view)
        app.processEvents()
        medians: dict[str, float] = {}
        for value in VALUES:
            times = []
            for _ in range(args.repeats):
                session.enter_text("2")  # a change each time: the same text twice is one too
                app.processEvents()
                start = time.perf_counter()
                if not session.enter_text(value):
                    print(f"{value}: {session.entry_error}", file=sys.stderr)
                    return 1
                app.processEvents()
                times.append((time.perf_counter() - start) * 1000)
            medians[value] = statistics.median(times)
            ratio = medians[value] / medians[VALUES[0]]
            print(f"{view:<12} {value:<10} {medians[value]:>9.1f} {ratio:>7.1f}")
    panel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
