"""Build the PyInstaller bundle and run it: `selftest`, the CLI, and bad paths.

The build takes about two minutes on two cores; it runs in CI so that the bundle never
rots silently. Build time and size are printed (pytest -s shows them). The build (about
1.1 GB) goes to a temporary folder that is deleted when the tests end, passed or failed:
pytest's own temporary folders would keep the last three builds on disk.

Fast loop without it: `python -m pytest -m "not bundle"` (or `-m "not slow"`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fpexplorer import __version__

ROOT = Path(__file__).resolve().parents[1]


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new temporary folder, deleted when the block ends however it ends."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_scratch_folder_is_deleted_even_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError, match="build failed"), scratch_folder("fpx-test-") as folder:
        (folder / "dist" / "fpexplorer").mkdir(parents=True)
        (folder / "dist" / "fpexplorer" / "libbig.so").write_bytes(bytes(1 << 20))
        raise RuntimeError("build failed")
    assert not folder.exists()
    with scratch_folder("fpx-test-") as folder:
        (folder / "file").write_text("x")
    assert not folder.exists()


@pytest.fixture(scope="module")
def bundle() -> Iterator[Path]:
    with scratch_folder("fpexplorer-bundle-") as work:
        yield _build(work)


def _build(work: Path) -> Path:
    pyinstaller = shutil.which("pyinstaller", path=str(Path(sys.executable).parent))
    command = [pyinstaller or "pyinstaller", str(ROOT / "packaging" / "fpexplorer.spec")]
    command += ["--noconfirm", "--distpath", str(work / "dist"), "--workpath", str(work / "build")]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-4000:]
    executable = work / "dist" / "fpexplorer" / "fpexplorer"
    assert executable.is_file()
    size_mb = _folder_size(executable.parent) / 1e6
    print(f"\nbundle built in {elapsed:.0f} s, {size_mb:.0f} MB: {executable.parent}")
    return executable


def _environment(home: Path, **extra: str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "VIRTUAL_ENV", "FPEXPLORER_"))
    }
    environment.update(QT_QPA_PLATFORM="offscreen", HOME=str(home), XDG_DATA_HOME="")
    environment.pop("XDG_DATA_HOME")
    environment.update(extra)
    return environment


@pytest.mark.slow
@pytest.mark.bundle
def test_bundle_selftest_passes(bundle: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = subprocess.run(
        [str(bundle), "selftest", "--keep", str(tmp_path / "out")],
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("PASS training job") for line in lines)
    # The job really was the bundled executable re-invoked, not a Python interpreter.
    assert "`fpexplorer train" in result.stdout
    assert lines[-1].startswith("selftest: ") and " 0 failed" in lines[-1]
    assert any(line.startswith(f"PASS application: fpexplorer {__version__},") for line in lines)
    assert (tmp_path / "out" / "selftest-run.jsonl").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.bundle
def test_bundle_cli_inspect_and_bad_input(bundle: Path, tmp_path: Path) -> None:
    environment = _environment(tmp_path)
    ok = subprocess.run(
        [str(bundle), "inspect", "65504", "--format", "fp16", "--json"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert '"code_hex"' in ok.stdout and "7bff" in ok.stdout.lower()
    bad = subprocess.run(
        [str(bundle), "inspect", "12abc", "--format", "fp16"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.bundle
def test_bundle_with_no_writable_home_and_broken_run_dir_still_opens(
    bundle: Path, tmp_path: Path
) -> None:
    not_a_home = tmp_path / "home-is-a-file"
    not_a_home.write_text("")
    # /proc refuses new folders even to root: a run directory that cannot be created.
    environment = _environment(not_a_home, FPEXPLORER_RUN_DIR="/proc/fpexplorer-runs")
    result = subprocess.run(
        [str(bundle), "selftest"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    run_dir_line = next(line for line in lines if line.startswith("PASS run directory"))
    assert "/proc/fpexplorer-runs is not writable" in run_dir_line
    settings_line = next(line for line in lines if line.startswith("PASS settings"))
    assert "cannot write" in settings_line


@pytest.mark.slow
@pytest.mark.bundle
def test_bundle_opens_a_real_x11_window_under_xvfb(bundle: Path, tmp_path: Path) -> None:
    """Offscreen rendering does not load the xcb platform plugin and its libraries, the
    usual way a frozen Qt app breaks on a real desktop: run the selftest on an X server."""
    xvfb_run = shutil.which("xvfb-run")
    assert xvfb_run, "xvfb-run is needed (Debian package xvfb; .ci/run installs it)"
    environment = _environment(tmp_path)
    environment.pop("QT_QPA_PLATFORM")
    result = subprocess.run(
        [xvfb_run, "-a", str(bundle), "selftest", "--on-screen"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "on platform 'xcb'" in result.stdout


@pytest.mark.slow
@pytest.mark.bundle
@pytest.mark.parametrize(
    "options", [["--precision", "fp8"], ["--precision", "bf16", "--nproc-per-node", "2"]]
)
def test_bundle_trains_fp8_and_on_two_ranks(
    bundle: Path, tmp_path: Path, options: list[str]
) -> None:
    """Failed before: both died in the bundle only (torch.distributed.elastic was left out):
    "the task failed: ModuleNotFoundError", and for two ranks a traceback."""
    out = tmp_path / "run.jsonl"
    result = subprocess.run(
        [str(bundle), "train", "--steps", "2", *options, "--out", str(out)],
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert '"status":"completed"' in out.read_text(encoding="utf-8").splitlines()[-1]


def _excluded_modules() -> list[str]:
    """EXCLUDED_MODULES of the PyInstaller spec, read without running PyInstaller."""
    import ast

    tree = ast.parse((ROOT / "packaging" / "fpexplorer.spec").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "EXCLUDED_MODULES"
            for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(name) for name in value]
    raise AssertionError("packaging/fpexplorer.spec has no EXCLUDED_MODULES")


def _under(module: str, packages: list[str]) -> list[str]:
    return [name for name in packages if module == name or module.startswith(name + ".")]


def test_the_bundle_excludes_no_module_the_program_imports() -> None:
    """Failed before: the spec left out torch.distributed.elastic, which
    training/distributed.py imports to launch ranks (`train --nproc-per-node 2` died in the
    bundle with a traceback; from source it worked)."""
    import ast

    excluded = _excluded_modules()
    found = []
    for path in sorted((ROOT / "fpexplorer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [
                f"{path.relative_to(ROOT)}: {name}" for name in names if _under(name, excluded)
            ]
    assert found == []


@pytest.mark.slow  # an fp8 training step in a child process: a few seconds
def test_the_bundle_excludes_no_module_an_fp8_run_imports(tmp_path: Path) -> None:
    """Failed before: torchao's float8 training imports torch.distributed.elastic through
    torch.distributed.checkpoint, so `train --precision fp8` failed in the bundle only."""
    argv = ["train", "--steps", "1", "--precision", "fp8", "--out", str(tmp_path / "r.jsonl")]
    code = (
        "import sys\n"
        "from fpexplorer.cli import main\n"
        f"status = main({argv!r})\n"
        "print('STATUS', status)\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert "STATUS 0" in result.stdout, result.stderr[-3000:]
    modules = next(line for line in result.stdout.splitlines() if line.startswith("MODULES "))
    excluded = _excluded_modules()
    assert [name for name in modules.split()[1:] if _under(name, excluded)] == []


def test_the_example_desktop_entry_names_files_the_bundle_has() -> None:
    """Failed before: its Icon= named resources/icon.png, which no build has (the icons are
    icon-16.png ... icon-512.png and icon.svg), so menus showed a blank icon."""
    entry = (ROOT / "packaging" / "fpexplorer.desktop").read_text(encoding="utf-8")
    fields = dict(
        line.split("=", 1) for line in entry.splitlines() if "=" in line and line[0] != "#"
    )
    bundle_root = "/opt/fpexplorer/"
    assert fields["Exec"] == bundle_root + "fpexplorer gui"
    # The spec copies resources/ to _internal/fpexplorer/resources/.
    shipped = bundle_root + "_internal/fpexplorer/resources/"
    assert fields["Icon"].startswith(shipped)
    assert (ROOT / "resources" / fields["Icon"].removeprefix(shipped)).is_file()
