"""The layers of docs/ARCHITECTURE.md, enforced.

Statically by import-linter (the contracts in pyproject.toml, `[tool.importlinter]`): every
import statement counts, also inside functions, and so do indirect imports. Each contract
is shown to fail on a deliberate violation written into a copy of the package. At run time
in a fresh interpreter: formats/ and the CLI parser load neither Qt nor torch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QT_ROOTS = {"PySide6", "PyQt5", "PyQt6", "shiboken6", "pyqtgraph", "qtpy"}
TORCH_ROOTS = {"torch"}
CONTRACT_IDS = {"formats-pure", "training-no-qt", "gui-no-torch", "cli-lazy", "layers"}


def _contract_names(pyproject: Path) -> dict[str, str]:
    """Contract name -> id, read from the `[[tool.importlinter.contracts]]` tables."""
    text = pyproject.read_text(encoding="utf-8")
    pairs = re.findall(r'^id = "([^"]+)"\nname = "([^"]+)"$', text, flags=re.MULTILINE)
    return {name: contract_id for contract_id, name in pairs}


def _lint_imports(project: Path) -> tuple[dict[str, str], str]:
    """Run `lint-imports` on the package under `project`: ({contract id: KEPT|BROKEN}, output)."""
    executable = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert executable, "lint-imports is missing: pip install -e '.[test]' (import-linter)"
    environment = {**os.environ, "PYTHONPATH": str(project)}
    result = subprocess.run(
        [executable, "--no-cache", "--no-logo", str(project / "pyproject.toml")],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    names = _contract_names(project / "pyproject.toml")
    verdicts = {}
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"(.+) (KEPT|BROKEN)", line.strip())
        if match and match.group(1) in names:
            verdicts[names[match.group(1)]] = match.group(2)
    output = result.stdout + result.stderr
    # The exit status and the verdicts must tell the same story.
    assert (result.returncode == 0) == all(v == "KEPT" for v in verdicts.values()), output
    return verdicts, output


def test_the_import_contracts_hold() -> None:
    verdicts, output = _lint_imports(ROOT)
    assert set(verdicts) == CONTRACT_IDS, output
    assert set(verdicts.values()) == {"KEPT"}, output


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pristine copy of the package and its pyproject.toml; each test copies it again."""
    folder = tmp_path_factory.mktemp("layers-pristine")
    skip_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "fpexplorer", folder / "fpexplorer", ignore=skip_caches)
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    return folder


VIOLATIONS = [
    # (what breaks, module to append to, code appended, contracts that must break)
    (
        "formats imports the gui theme, relatively, inside a function",
        "formats/parse.py",
        "def _violation() -> None:\n    from ..gui import theme\n",
        # training/ uses formats/, so through it training reaches Qt too.
        {"formats-pure", "layers", "training-no-qt"},
    ),
    # gui/ uses formats/, so through it the GUI would import torch too.
    (
        "formats imports torch",
        "formats/exact.py",
        "import torch\n",
        {"formats-pure", "gui-no-torch"},
    ),
    (
        "training imports Qt",
        "training/config.py",
        "from PySide6 import QtCore\n",
        {"training-no-qt"},
    ),
    (
        "training imports the command line for UsageError",
        "training/job.py",
        "def _violation() -> None:\n    from fpexplorer.cli import UsageError\n",
        {"training-no-qt"},
    ),
    (
        "training imports gui",
        "training/summary.py",
        "import fpexplorer.gui.theme\n",
        {"training-no-qt", "layers"},
    ),
    (
        "gui imports the monitor (which imports torch)",
        "gui/training/code_snippet.py",
        "def _violation() -> None:\n    from fpexplorer.training import monitor\n",
        {"gui-no-torch"},
    ),
    (
        "gui reaches torch through a torch-free training module it imports",
        "training/config.py",
        "import torch\n",
        {"gui-no-torch"},
    ),
    ("cli.py imports numpy when it is imported", "cli.py", "import numpy\n", {"cli-lazy"}),
    (
        "gui imports a command module",
        "gui/theme.py",
        "def _violation() -> None:\n    from fpexplorer.commands import train\n",
        # The train command runs the job, which imports torch.
        {"layers", "gui-no-torch"},
    ),
]


@pytest.mark.slow  # copies the package and lints it, per case: seconds in all
@pytest.mark.parametrize(
    ("module", "code", "broken"),
    [pytest.param(module, code, broken, id=label) for label, module, code, broken in VIOLATIONS],
)
def test_each_contract_fails_on_a_deliberate_violation(
    package_copy: Path, tmp_path: Path, module: str, code: str, broken: set[str]
) -> None:
    project = tmp_path / "project"
    shutil.copytree(package_copy, project)
    target = project / "fpexplorer" / module
    assert target.is_file(), f"{module} moved: update this test"
    target.write_text(target.read_text(encoding="utf-8") + "\n\n" + code, encoding="utf-8")
    verdicts, output = _lint_imports(project)
    assert set(verdicts) == CONTRACT_IDS, output
    assert {name for name, verdict in verdicts.items() if verdict == "BROKEN"} == broken, output


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    return set(out.stdout.split())


def test_formats_runtime_imports_no_qt_no_torch() -> None:
    loaded = _modules_after("import fpexplorer.formats")
    assert not {m.split(".")[0] for m in loaded} & (QT_ROOTS | TORCH_ROOTS)


def test_cli_parser_imports_no_qt_no_torch() -> None:
    """Module-level imports of every command module (which cli.py imports by name, out of
    import-linter's sight) stay cheap: building the whole parser loads neither Qt nor torch."""
    loaded = _modules_after("from fpexplorer.cli import build_parser\nbuild_parser()")
    assert not {m.split(".")[0] for m in loaded} & (QT_ROOTS | TORCH_ROOTS)
