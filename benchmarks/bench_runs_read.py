"""Reading speed of run logs: the reader, `fpexplorer runs` and the panel, in MB/s.

Writes one synthetic run log (the GUI's synthetic job through `RunWriter`; statistics
every `--stats-every` steps, skipped steps, ~230 bytes a plain step like a real job's) of
about `--mb` MB in a temporary folder (deleted at the end), then reads it with

- `json.loads` of every line: the reference, the floor for any reader built on json;
- `RecordStream` alone (bytes in, typed records out);
- `fpexplorer runs summarize|check|compare` in this process (output discarded);
- the panel's file reader (`RunFileReplay` into a `RunModel`, what File > Open runs), and
  File > Open in an offscreen Training panel (the reader, the run list, the redraw).

    python benchmarks/bench_runs_read.py                 # 64 MB, statistics every 100
    python benchmarks/bench_runs_read.py --mb 100 --repeat 3

Printed: MB/s of each (best of `--repeat`) and its time as a ratio to the json reference
measured in the same run (1.0 would be as fast as parsing the JSON alone).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

CHUNK_BYTES = 1 << 20


def write_log(path: Path, megabytes: float, stats_every: int) -> int:
    """A synthetic run log of about `megabytes` MB (header, steps, end); its size in bytes."""
    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.runlog import RunWriter

    def write(steps: int) -> int:
        with RunWriter(path) as writer:
            for record in synthetic_records(steps, stats_every=stats_every, overflow_every=997):
                writer.write(record)
        return path.stat().st_size

    sample = 5000
    per_step = write(sample) / sample
    return write(max(sample, int(megabytes * 1e6 / per_step)))


def json_floor(path: Path) -> int:
    """Every line through `json.loads`: what any JSON Lines reader pays at least."""
    count = 0
    pending = b""
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                json.loads(line)
                count += 1
    return count


def record_stream(path: Path) -> int:
    from fpexplorer.training.runlog import RecordStream

    stream = RecordStream()
    count = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(256 * 1024):
            count += len(stream.feed(chunk))
    count += len(stream.finish())
    if stream.problems:
        raise RuntimeError(f"the synthetic log reads with problems: {stream.problems[:3]}")
    return count


def runs_verb(verb: str) -> Callable[[Path], int]:
    def run(path: Path) -> int:
        from fpexplorer.cli import main

        with contextlib.redirect_stdout(io.StringIO()):
            status = main(["runs", verb, str(path)])
        if status != 0:
            raise RuntimeError(f"runs {verb} exited {status}")
        return 0

    return run


def panel_reader(path: Path) -> int:
    """What the panel does to open a file (`TrainingPanel._load_run_file`), without drawing."""
    from fpexplorer.gui.training.replay import RunFileReplay
    from fpexplorer.gui.training.run_model import RunModel

    model = RunModel()
    replay = RunFileReplay(path, model)
    replay.advance(None)
    if model.problems:
        raise RuntimeError(f"the panel read problems: {model.problems[:3]}")
    return model.steps_seen


def panel_window() -> Callable[[Path], int]:
    """File > Open in the Training panel itself (offscreen): the reader above, the run list
    and the redraw at the end."""
    from PySide6.QtWidgets import QApplication

    from fpexplorer.gui.training.panel import TrainingPanel

    application = QApplication.instance() or QApplication([])
    panel = TrainingPanel()
    panel.resize(1280, 800)

    def load(path: Path) -> int:
        panel.load_run(path, in_background=True)
        panel.finish_loading()
        application.processEvents()
        model = panel.runs[-1].model
        if model.problems:
            raise RuntimeError(f"the panel read problems: {model.problems[:3]}")
        return model.steps_seen

    return load


def best_seconds(function: Callable[[Path], int], path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function(path)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=64.0, help="size of the log (MB)")
    parser.add_argument("--stats-every", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1, help="best of this many reads")
    parser.add_argument("--folder", default=None, help="where to write the log (a temp folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as scratch:
        path = Path(scratch) / "bench.jsonl"
        size = write_log(path, args.mb, args.stats_every)
        measures: list[tuple[str, Callable[[Path], int]]] = [
            ("json.loads per line (reference)", json_floor),
            ("RecordStream", record_stream),
            ("runs summarize", runs_verb("summarize")),
            ("runs check", runs_verb("check")),
            ("runs compare", runs_verb("compare")),
            ("panel file reader", panel_reader),
            ("panel window, File > Open", panel_window()),
        ]
        lines = json_floor(path)
        print(
            f"log: {size / 1e6:.1f} MB, {lines} lines, statistics every {args.stats_every} "
            f"steps; best of {args.repeat}"
        )
        reference = 0.0
        for name, function in measures:
            seconds = best_seconds(function, path, args.repeat)
            reference = reference or seconds
            print(
                f"{name:34s} {seconds:7.2f} s  {size / 1e6 / seconds:7.1f} MB/s"
                f"   x{seconds / reference:5.2f} the reference's time"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
