"""Time from process start to the first window shown: fpexplorer vs a bare window.

Each repetition starts a fresh Python process and measures, from just before the process
is spawned until the child reports that its window is shown and the event loop runs:

  fpexplorer   the real `fpexplorer gui` command path (cli -> gui command -> MainWindow)
  bare         PySide6 + pyqtgraph: a QMainWindow holding one PlotWidget

Both run with QT_QPA_PLATFORM=offscreen unless a display is set, interleaved, several
repetitions each; the script prints the medians and their ratio (aim: within 1.3x).

    python benchmarks/bench_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Patches QApplication.exec so that, once the event loop runs with the window shown, the
# child prints "shown" and quits. Everything else is the real command path.
FPEXPLORER_CHILD = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
_exec = QApplication.exec
def _exec_and_report(*args):
    def report():
        shown = [w for w in QApplication.topLevelWidgets() if w.isVisible()]
        print("shown" if shown else "nothing-shown", flush=True)
        QApplication.quit()
    QTimer.singleShot(0, report)
    return _exec()
QApplication.exec = _exec_and_report
from fpexplorer.cli import main
sys.exit(main(["gui", "--fresh"]))
"""

BARE_CHILD = """
import sys
import pyqtgraph as pg
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMainWindow
app = QApplication(sys.argv)
window = QMainWindow()
window.setCentralWidget(pg.PlotWidget())
window.resize(1280, 800)
window.show()
def report():
    print("shown" if window.isVisible() else "nothing-shown", flush=True)
    app.quit()
QTimer.singleShot(0, report)
sys.exit(app.exec())
"""


def time_child(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    elapsed = time.perf_counter() - start
    _, stderr = process.communicate(timeout=60)
    if line != "shown":
        raise RuntimeError(f"child did not show a window: {line!r}\n{stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    env = dict(os.environ)
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory() as settings_dir:
        env["FPEXPLORER_SETTINGS_DIR"] = settings_dir  # never the user's settings
        # One warm-up each so that both read their files from the page cache.
        time_child(FPEXPLORER_CHILD, env)
        time_child(BARE_CHILD, env)
        ours: list[float] = []
        bare: list[float] = []
        for _ in range(args.repeat):
            ours.append(time_child(FPEXPLORER_CHILD, env))
            bare.append(time_child(BARE_CHILD, env))
    ours_median, bare_median = statistics.median(ours), statistics.median(bare)
    print(f"platform: {env.get('QT_QPA_PLATFORM', 'native')}, repetitions: {args.repeat}")
    print(
        f"fpexplorer gui   first window: median {ours_median * 1000:7.1f} ms "
        f"(min {min(ours) * 1000:.1f}, max {max(ours) * 1000:.1f})"
    )
    print(
        f"bare PySide6+pg  first window: median {bare_median * 1000:7.1f} ms "
        f"(min {min(bare) * 1000:.1f}, max {max(bare) * 1000:.1f})"
    )
    print(f"ratio fpexplorer / bare: {ours_median / bare_median:.2f}x (aim: <= 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
