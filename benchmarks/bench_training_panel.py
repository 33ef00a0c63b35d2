"""Training panel figures: memory after long streamed runs, event-loop lateness while streaming.

Everything goes through the real code path: a child process (started by the panel's
TrainingJob through QProcess) writes schema-following records to stdout and a run file as
fast as it can; the panel parses them, fills its RunModel and redraws on its timer.
The child is the synthetic job (`python -m fpexplorer.gui.training.synthetic`), so the
figures measure the panel, not a training loop.

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_training_panel.py [--steps 20000]

Prints:
- RSS of this (GUI) process after 1,000 streamed steps and after --steps, and their ratio
  (bounded buffers: the ratio should stay near 1);
- event-loop lateness while the job streams: a 10 ms timer posts a zero-delay timer and
  records how late it fires (p50/p99/max), against the same probe on an idle panel;
- records per second consumed by the panel.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux /proc; ru_maxrss elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class LatencyProbe:
    """Every `period_ms` posts a zero-delay timer and records how late it fires (ms)."""

    def __init__(self, period_ms: int = 10) -> None:
        from PySide6.QtCore import QTimer

        self.samples: list[float] = []
        self._posted = 0.0
        self._timer = QTimer()
        self._timer.setInterval(period_ms)
        self._timer.timeout.connect(self._on_tick)

    def start(self) -> None:
        self.samples.clear()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _on_tick(self) -> None:
        from PySide6.QtCore import QTimer

        self._posted = time.perf_counter()
        QTimer.singleShot(0, self._on_zero_timer)

    def _on_zero_timer(self) -> None:
        self.samples.append((time.perf_counter() - self._posted) * 1000.0)

    def summary(self) -> str:
        s = self.samples
        if not s:
            # A small run file is read in one go (SYNC_LOAD_BYTES): the loop never turned.
            return "no samples (read in one go, the loop did not turn)"
        return (
            f"p50 {percentile(s, 50):6.2f} ms  p99 {percentile(s, 99):6.2f} ms  "
            f"max {max(s) if s else float('nan'):6.2f} ms  ({len(s)} samples)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--stats-every", type=int, default=1, help="as the real job's default")
    args = parser.parse_args()

    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    from fpexplorer.gui.training.job_state import JobState
    from fpexplorer.gui.training.panel import TrainingPanel
    from fpexplorer.gui.training.run_model import RunModel

    panel = TrainingPanel()
    panel.resize(1600, 1000)
    panel.show()
    probe = LatencyProbe()

    # Reference: the same probe on the idle panel.
    app_exec_for(app, 500)
    probe.start()
    app_exec_for(app, 2000)
    probe.stop()
    idle = probe.summary()

    with tempfile.TemporaryDirectory() as folder:
        run_path = Path(folder) / "bench.jsonl"
        model = RunModel()
        model.source = run_path.name
        entry = panel._add_run(model, run_path, live=True)
        panel._live = entry
        panel._select(entry)
        argv = [
            sys.executable, "-m", "fpexplorer.gui.training.synthetic",
            "--steps", str(args.steps), "--stats-every", str(args.stats_every),
            "--out", str(run_path), "--stream",
        ]  # fmt: skip
        rss_at: dict[str, float] = {"before": rss_mib()}

        def on_records(_records: list) -> None:
            if "1000" not in rss_at and model.steps_seen >= 1000:
                rss_at["1000"] = rss_mib()
                rss_at["1000_buffers"] = model.memory_nbytes() / 2**20

        # After the panel's own slot (connected first), so steps_seen is up to date.
        panel.job.records_received.connect(on_records)
        loop = QEventLoop()
        panel.job.finished.connect(loop.quit)
        started = time.perf_counter()
        probe.start()
        panel.job.start_command(argv, run_path)
        loop.exec()  # the real event loop, as in the app
        elapsed = time.perf_counter() - started
        probe.stop()
        app.processEvents()
        panel.refresh()
        rss_at["end"] = rss_mib()
        streaming = probe.summary()
        streaming_p99 = percentile(probe.samples, 99)
        ok = panel.job.state is JobState.DONE and model.steps_seen == args.steps
        run_bytes = run_path.stat().st_size

        # Replay of the same file (File > Open Run): read in pieces between redraws.
        loaded = QEventLoop()
        panel.run_loaded.connect(loaded.quit)
        probe.start()
        started_replay = time.perf_counter()
        panel.load_run(run_path)
        if panel.loading:
            loaded.exec()
        replay_s = time.perf_counter() - started_replay
        probe.stop()
        replay = probe.summary()
        replayed = panel.current_run.model.steps_seen if panel.current_run else 0
        rss_at["replay"] = rss_mib()

    print(f"training panel benchmark (synthetic job, {args.steps} steps, stats every "
          f"{args.stats_every}, run file {run_bytes / 2**20:.1f} MiB)")  # fmt: skip
    print(f"  job ended: {panel.job.state.value}, steps received {model.steps_seen}"
          + ("" if ok else "  <-- INCOMPLETE"))  # fmt: skip
    print(f"  RSS before the job:        {rss_at['before']:8.1f} MiB")
    print(f"  RSS after  1,000 steps:    {rss_at.get('1000', float('nan')):8.1f} MiB")
    print(f"  RSS after {args.steps:,} steps:   {rss_at['end']:8.1f} MiB   "
          f"ratio {rss_at['end'] / rss_at.get('1000', float('nan')):.3f}")  # fmt: skip
    print(f"  model buffers: {rss_at.get('1000_buffers', 0):.2f} MiB after 1,000 steps, "
          f"{model.memory_nbytes() / 2**20:.2f} MiB at the end (scalars kept: "
          f"{len(model.scalars)}, every {model.scalars.stride} steps)")  # fmt: skip
    print(f"  records consumed: {model.steps_seen / elapsed:,.0f} steps/s "
          f"({elapsed:.1f} s wall)")  # fmt: skip
    print(f"  event-loop lateness, idle panel:      {idle}")
    print(f"  event-loop lateness, while streaming: {streaming}")
    print(f"  p99 target < 50 ms while streaming: {'met' if streaming_p99 < 50 else 'MISSED'}")
    print(f"  replay of the run file: {replayed:,} steps in {replay_s:.1f} s, "
          f"RSS after {rss_at['replay']:.1f} MiB")  # fmt: skip
    print(f"  event-loop lateness, during replay:   {replay}")
    panel.shutdown()
    return 0 if ok else 1


def app_exec_for(app: object, milliseconds: int) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(milliseconds, loop.quit)
    loop.exec()


if __name__ == "__main__":
    sys.exit(main())
