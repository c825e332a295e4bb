"""The layering contract (pyproject.toml's [tool.importlinter]) holds, and no import of another
subpackage hides inside a function (where it would dodge the contract's cycle check at import
time)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from tests.layout import ROOT, copy_layout, package_dirs

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_linter_contracts_hold(tmp_path: Path) -> None:
    copy_layout(tmp_path)
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def subpackage_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "faultproxy" or len(parts) < 2:
        return None
    return parts[1]


def test_no_import_of_another_subpackage_inside_a_function() -> None:
    hidden = []
    for name, folder in package_dirs().items():
        own = name.split(".")[1] if "." in name else "cli"
        for source in folder.rglob("*.py"):
            tree = ast.parse(source.read_text(), str(source))
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.ImportFrom) and node.module:
                        modules = [node.module]
                    elif isinstance(node, ast.Import):
                        modules = [alias.name for alias in node.names]
                    else:
                        continue
                    for module in modules:
                        other = subpackage_of(module)
                        if other is not None and other != own:
                            hidden.append(f"{source.relative_to(ROOT)}:{node.lineno} imports {module} "
                                          f"inside {function.name}()")
    assert not hidden, "\n".join(hidden)


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """The contract is not vacuous: an evaluator module importing the proxy breaks it."""
    copy_layout(tmp_path)
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    checks = tmp_path / "faultproxy" / "evaluator" / "checks.py"
    checks.write_text("import faultproxy.proxy.injector\n" + checks.read_text())
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode != 0
    assert "faultproxy.evaluator.checks -> faultproxy.proxy.injector" in done.stdout
