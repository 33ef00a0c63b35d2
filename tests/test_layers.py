"""The layer rules of DESIGN.md, enforced.

formats/ imports neither Qt nor torch; training/ imports no Qt; the GUI does not import
torch at start-up. Checked statically (every import statement, also inside functions)
and at run time in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fpexplorer"
QT_ROOTS = {"PySide6", "PyQt5", "PyQt6", "shiboken6", "pyqtgraph", "qtpy"}
TORCH_ROOTS = {"torch"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant):
                roots.add(str(node.args[0].value).split(".")[0])
    return roots


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [("formats", QT_ROOTS | TORCH_ROOTS | {"fpexplorer"}), ("training", QT_ROOTS)],
)
def test_layer_imports_nothing_forbidden(layer: str, forbidden: set[str]) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files, f"no modules found under {layer}/"
    offenders = {}
    for path in files:
        bad = _imported_roots(path) & forbidden
        # formats/ may import itself (fpexplorer.formats.*) but nothing else of the package.
        if "fpexplorer" in bad and layer == "formats":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            outside = [
                n.module
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom)
                and n.level == 0
                and n.module
                and n.module.startswith("fpexplorer")
                and not n.module.startswith("fpexplorer.formats")
            ]
            if not outside:
                bad.discard("fpexplorer")
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not offenders, f"{layer}/ imports what its layer forbids: {offenders}"


def test_gui_never_imports_training_heavy_modules_statically() -> None:
    """GUI modules may import torch-free parts of training/ but never torch itself."""
    offenders = {}
    for path in sorted((PACKAGE / "gui").rglob("*.py")):
        bad = _imported_roots(path) & TORCH_ROOTS
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not offenders, f"gui/ imports torch: {offenders}"


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    return set(out.stdout.split())


def test_formats_runtime_imports_no_qt_no_torch() -> None:
    loaded = _modules_after("import fpexplorer.formats")
    assert not {m.split(".")[0] for m in loaded} & (QT_ROOTS | TORCH_ROOTS)


def test_cli_parser_imports_no_qt_no_torch() -> None:
    loaded = _modules_after("from fpexplorer.cli import build_parser\nbuild_parser()")
    assert not {m.split(".")[0] for m in loaded} & (QT_ROOTS | TORCH_ROOTS)
