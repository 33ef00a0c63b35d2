"""`fpexplorer selftest`: prove that this installation (source or bundle) works end to end.

Builds the main window offscreen, renders both panels, converts values through the format
engine, runs a short training job through the very path the Training panel uses (a child
process started by `TrainingJob`; in a bundle that re-invokes the bundled executable) and
checks its run log. One line per check; exit status 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HELP = "check this installation end to end (window, panels, engine, a training job)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps", type=int, default=3, help="steps of the training job (default: 3)"
    )
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds the job may take (default: 180)"
    )
    parser.add_argument(
        "--keep", metavar="FOLDER", default=None, help="write the run file and PNGs here"
    )
    parser.add_argument(
        "--on-screen",
        action="store_true",
        help="use the real display (X11/Wayland) instead of offscreen rendering",
    )


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    passed: bool
    detail: str


class CheckFailed(Exception):
    """A check's reason for failing, as one line."""


def _image_detail(image: object, what: str) -> str:
    """Fail unless the rendered image has real content (not one flat colour)."""
    from PySide6.QtGui import QImage

    assert isinstance(image, QImage)
    if image.isNull() or image.width() < 100 or image.height() < 100:
        raise CheckFailed(f"{what}: empty image")
    sample = image.scaled(64, 40)
    colours = {sample.pixel(x, y) for x in range(sample.width()) for y in range(sample.height())}
    if len(colours) < 8:
        raise CheckFailed(f"{what}: only {len(colours)} colours, the picture looks blank")
    return f"{image.width()}x{image.height()}, {len(colours)} colours in a 64x40 sample"


def run(args: argparse.Namespace) -> int:
    from fpexplorer.cli import UsageError

    if args.steps < 1:
        raise UsageError("--steps must be at least 1")
    if not args.timeout > 0:  # also NaN: the job would fail every time, as a failed check
        raise UsageError(f"--timeout must be more than 0 seconds, not {args.timeout:g}")
    if args.on_screen:
        from fpexplorer.gui.app import display_problem

        problem = display_problem()
        if problem:
            raise UsageError(f"--on-screen: {problem}")
    else:
        # By default a self-test needs no screen: it must pass on a headless machine too.
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        if keep.exists() and not keep.is_dir():
            raise UsageError(f"--keep {args.keep!r}: a file, not a folder")
        try:
            keep.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"--keep {args.keep!r}: {error.strerror or error}") from None
    with tempfile.TemporaryDirectory(prefix="fpexplorer-selftest-") as scratch:
        folder = keep or Path(scratch)
        results = _run_checks(folder, args.steps, args.timeout)
    failed = [r for r in results if not r.passed]
    summary = f"{len(results) - len(failed)} passed, {len(failed)} failed"
    print(f"selftest: {summary}")
    return 1 if failed else 0


def _interrupted() -> bool:
    if "fpexplorer.gui.app" not in sys.modules:  # no application yet: Python's own Ctrl+C
        return False
    from fpexplorer.gui.app import was_interrupted

    return was_interrupted()


def _run_checks(folder: Path, steps: int, timeout_s: float) -> list[CheckResult]:
    state: dict[str, object] = {}
    results: list[CheckResult] = []

    def check(name: str, body: Callable[[], str]) -> None:
        started = time.perf_counter()
        try:
            detail = body()
            passed = True
        except CheckFailed as failure:
            detail, passed = str(failure), False
        except Exception as error:  # a self-test reports every failure and goes on
            detail, passed = f"{type(error).__name__}: {error}", False
        if _interrupted():
            # Ctrl+C ends the self-test (the command line says "interrupted", status 130);
            # the check it cut short has no result.
            raise KeyboardInterrupt
        elapsed = time.perf_counter() - started
        result = CheckResult(name, passed, f"{detail} ({elapsed:.2f} s)")
        results.append(result)
        print(f"{'PASS' if passed else 'FAIL'} {name}: {result.detail}", flush=True)

    def formats_engine() -> str:
        from fpexplorer.formats import exact_decimal, get_format

        fp16 = get_format("fp16")
        if fp16.from_value("65504") != 0x7BFF or fp16.round("65520").code != 0x7C00:
            raise CheckFailed("FP16 65504 / 65520 did not encode as 0x7bff / inf")
        bf16 = get_format("bf16")
        code = bf16.from_value("0.1")
        if code != 0x3DCD:
            raise CheckFailed(f"BF16 0.1 encoded as {code:#06x}, expected 0x3dcd")
        e4m3 = get_format("float8_e4m3fn")
        if e4m3.to_fraction(0x7E) != 448:
            raise CheckFailed("E4M3 0x7e is not 448")
        tiny = exact_decimal(fp16.min_subnormal)
        return f"fp16 65504 -> 0x7bff, bf16 0.1 -> 0x3dcd, fp16 min subnormal {tiny}"

    def application() -> str:
        from fpexplorer.gui.app import create_application

        app = create_application(theme="light")
        state["app"] = app
        name = f"{app.applicationDisplayName()} {app.applicationVersion()}"
        return f"{name}, QApplication on platform {app.platformName()!r}"

    def main_window() -> str:
        from fpexplorer.gui.main_window import MainWindow
        from fpexplorer.gui.settings import SettingsStore

        window = MainWindow(SettingsStore(persistent=False), restore=False)
        state["window"] = window
        if getattr(window, "training_problem", None):
            raise CheckFailed(f"training panel unavailable: {window.training_problem}")
        return f"{window.windowTitle()!r} with tabs {[window.tabs.tabText(i) for i in range(2)]}"

    def render_panel(index: int, name: str) -> Callable[[], str]:
        def body() -> str:
            from fpexplorer.commands.screenshot import render

            window = state["window"]
            window.tabs.setCurrentIndex(index)  # type: ignore[attr-defined]
            image = render(window, 1280, 800)
            if not image.save(str(folder / f"selftest-{name}.png"), "PNG"):  # type: ignore[attr-defined]
                raise CheckFailed(f"could not write {folder / f'selftest-{name}.png'}")
            return _image_detail(image, name)

        return body

    def formats_read_outs() -> str:
        from fpexplorer.gui.main_window import MainWindow

        window = state["window"]
        assert isinstance(window, MainWindow)
        panel = window.formats_panel
        if not window.session.enter_text("0.1"):
            raise CheckFailed(f"typing 0.1 failed: {window.session.entry_error}")
        shown = {
            "exact": panel.readouts.exact.toPlainText(),
            "shortest round-trip": panel.readouts.shortest.text(),
        }
        wanted = {
            "exact": "0.100000001490116119384765625",  # float32 0.1, every digit
            "shortest round-trip": "0.1",
        }
        if shown != wanted:
            raise CheckFailed(f"float32 0.1 read-outs say {shown}, expected {wanted}")
        return "float32 0.1: exact 0.100000001490116119384765625, shortest round-trip 0.1"

    def settings() -> str:
        from fpexplorer.gui.settings import SettingsStore

        # A settings location that cannot be written is reported, never fatal: the check
        # passes either way and says which it is.
        store = SettingsStore()
        store.set_value("selftest/last_run", time.strftime("%Y-%m-%dT%H:%M:%S"))
        problem = store.sync()
        return problem or f"settings kept in {store.location}"

    def run_directory() -> str:
        from fpexplorer.paths import run_directory as choose

        chosen = choose()
        return chosen.problem or f"runs are saved in {chosen.path}"

    def training_job() -> str:
        from PySide6.QtCore import QEventLoop, QTimer

        from fpexplorer.gui.training.job import TrainingJob, job_argv
        from fpexplorer.training.config import TrainConfig
        from fpexplorer.training.records import EndRecord

        run_path = folder / "selftest-run.jsonl"
        state["run_path"] = run_path
        config = TrainConfig(task="mlp", precision="bf16", device="cpu", steps=steps)
        job = TrainingJob()
        received: list[object] = []  # typed records
        endings: list[str] = []
        job.records_received.connect(received.extend)
        loop = QEventLoop()
        job.finished.connect(endings.append)
        job.finished.connect(loop.quit)
        QTimer.singleShot(int(timeout_s * 1000), loop.quit)
        job.start(config, run_path)
        loop.exec()
        if _interrupted():
            job.shutdown()  # Ctrl+C ended the loop: the job stops, no process is left
            raise KeyboardInterrupt
        if not endings:
            job.kill()
            raise CheckFailed(f"no end within {timeout_s:.0f} s")
        kinds = [getattr(r, "kind", None) for r in received]
        end = next((r for r in received if isinstance(r, EndRecord)), None)
        if end is None or end.status != "completed":
            tail = " | ".join(list(job.stderr_tail)[-3:])
            raise CheckFailed(f"job ended: {endings[0]}; end record {end}; stderr: {tail}")
        command = " ".join(Path(part).name for part in job_argv(config, run_path)[:3])
        return f"`{command} ...` streamed {kinds.count('step')} steps and an end record"

    def run_log() -> str:
        from fpexplorer.training.runlog import load_run

        run = load_run(state["run_path"])  # type: ignore[arg-type]
        if run.header is None or run.status != "completed" or len(run.steps) != steps:
            raise CheckFailed(
                f"header={run.header is not None}, status={run.status}, "
                f"steps={len(run.steps)}/{steps}, problems={list(run.problems)}"
            )
        if run.problems:
            raise CheckFailed(f"problems: {list(run.problems)}")
        last = run.steps[-1]
        from fpexplorer.training.summary import loss_text

        return f"{len(run.steps)} steps, last loss {loss_text(last.loss)}, status {run.status}"

    def training_replay() -> str:
        window = state["window"]
        window.training_panel.load_run(state["run_path"])  # type: ignore[attr-defined]
        return render_panel(1, "training")()

    def no_torch_in_gui_process() -> str:
        if "torch" in sys.modules:
            raise CheckFailed("the GUI process imported torch")
        return "torch was never imported by this process"

    check("formats engine", formats_engine)
    check("application", application)
    if "app" in state:
        check("main window", main_window)
    if "window" in state:
        check("formats read-outs", formats_read_outs)
        check("render formats panel", render_panel(0, "formats"))
    if "app" in state:
        check("settings", settings)
    check("run directory", run_directory)
    if "app" in state:
        check("training job (child process)", training_job)
    if "run_path" in state:
        check("run log", run_log)
        if "window" in state:
            check("render training panel with the run", training_replay)
    check("GUI process without torch", no_torch_in_gui_process)
    window = state.get("window")
    if window is not None:
        window.close()  # type: ignore[attr-defined]
    return results
