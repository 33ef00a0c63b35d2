"""Peak memory of `fpexplorer runs summarize|check|compare` against the size of the log.

Writes two synthetic run logs (statistics on every step), a small one and one
`--ratio` times larger, and runs each verb on each in a fresh process, reading the
process's peak RSS. Streaming means the large log costs what the small one does:

    python benchmarks/bench_runs_memory.py                   # 4 MB vs 200 MB
    python benchmarks/bench_runs_memory.py --small-mb 1 --ratio 20

Printed: peak RSS per verb and size, and the ratio large/small (1.0 is constant memory;
reading whole logs into memory made it ~9x the file size).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = (
    "import resource, sys\n"
    "from fpexplorer.cli import main\n"
    "import io, contextlib\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    status = main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n"
)


def write_log(path: Path, megabytes: float) -> int:
    """A synthetic run log of about `megabytes` MB; returns its size in bytes."""
    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.records import encode_line

    target = int(megabytes * 1024 * 1024)
    steps = 1 << 30
    with open(path, "w", encoding="utf-8") as out:
        for record in synthetic_records(steps, stats_every=1, overflow_every=97):
            out.write(encode_line(record) + "\n")
            if out.tell() >= target:
                break
    return path.stat().st_size


def peak_rss(*argv: str) -> int:
    """Peak resident bytes of `fpexplorer ARGV` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return int(done.stdout.split()[-1])


def measure(folder: Path, small_mb: float, ratio: float) -> dict[str, tuple[int, int]]:
    small, large = folder / "small.jsonl", folder / "large.jsonl"
    write_log(small, small_mb)
    write_log(large, small_mb * ratio)
    return {
        verb: (peak_rss("runs", verb, str(small)), peak_rss("runs", verb, str(large)))
        for verb in ("summarize", "check", "compare")
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small-mb", type=float, default=4.0)
    parser.add_argument("--ratio", type=float, default=50.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        results = measure(folder, args.small_mb, args.ratio)
        sizes = [(folder / name).stat().st_size for name in ("small.jsonl", "large.jsonl")]
    print(f"logs: {sizes[0] / 2**20:.1f} MiB and {sizes[1] / 2**20:.1f} MiB")
    for verb, (small_rss, large_rss) in results.items():
        print(
            f"runs {verb:9s} peak RSS {small_rss / 2**20:6.1f} MiB -> {large_rss / 2**20:6.1f} MiB"
            f"   ratio {large_rss / small_rss:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
