"""`fpexplorer screenshot` renders the real window to a PNG of the requested size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run(
        [sys.executable, "-m", "fpexplorer", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
        check=False,
    )


def test_formats_screenshot_has_the_requested_size(tmp_path: Path, qapp: object) -> None:
    out = tmp_path / "formats.png"
    result = run_cli(
        "screenshot",
        "--panel",
        "formats",
        "--out",
        str(out),
        "--size",
        "1000x700",
        "--format",
        "fp16",
        "e6m9",
        "--value",
        "0.1",
        "--view",
        "table",
    )
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 10_000
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1000, 700)
    # Not a blank picture: many different colours.
    colours = {image.pixel(x, y) for x in range(0, 1000, 7) for y in range(0, 700, 7)}
    assert len(colours) > 20


def test_a_size_below_the_windows_minimum_is_scaled_not_cut(tmp_path: Path, qapp: object) -> None:
    out = tmp_path / "small.png"
    result = run_cli("screenshot", "--out", str(out), "--size", "640x480", "--value", "0.1")
    assert result.returncode == 0, result.stderr
    assert "scaled down to 640x480" in result.stderr  # was: the window's top-left corner
    image = QImage(str(out))
    assert (image.width(), image.height()) == (640, 480)


def test_training_screenshot_replays_a_run(tmp_path: Path, qapp: object) -> None:
    from fpexplorer.gui.training.synthetic import synthetic_records
    from fpexplorer.training.runlog import RunWriter

    run = tmp_path / "run.jsonl"
    with RunWriter(run) as writer:
        for record in synthetic_records(60):
            writer.write(record)
    out = tmp_path / "training.png"
    result = run_cli(
        "screenshot",
        "--panel",
        "training",
        "--run",
        str(run),
        "--out",
        str(out),
        "--size",
        "800x600",
    )
    assert result.returncode == 0, result.stderr
    image = QImage(str(out))
    assert (image.width(), image.height()) == (800, 600)


def test_bad_screenshot_arguments_get_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, words in (
        (["--size", "big"], "WIDTHxHEIGHT"),
        (["--format", "fp17"], "fp17"),
        (["--value", "1.2.3"], "--value"),
    ):
        result = run_cli("screenshot", "--out", str(tmp_path / "x.png"), *args)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "x.png").exists()
