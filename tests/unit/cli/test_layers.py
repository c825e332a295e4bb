"""The layering contract (pyproject.toml's [tool.importlinter]) holds, and no import of another
subpackage hides inside a function (where it would dodge the contract's cycle check at import
time)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layout import ROOT, copy_layout, package_dirs

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


def lint_with_import(tmp_path: Path, module: str, imported: str) -> subprocess.CompletedProcess[str]:
    """lint-imports over a copy of the package in which `module` (a dotted name) imports `imported`."""
    copy_layout(tmp_path)
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    source = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    source.write_text(f"import {imported}\n" + source.read_text())
    # wide enough that no "importer -> imported" line is wrapped (rich wraps at 80 columns)
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}, timeout=120)


@pytest.mark.parametrize("module, imported", [
    # an evaluator module importing the proxy: the two are siblings
    ("faultproxy.evaluator.checks.registry", "faultproxy.proxy.injector"),
    # the OpenTelemetry export sits below the runner and beside the replay store
    ("faultproxy.otel.spans", "faultproxy.runner.run_loop"),
    ("faultproxy.otel.export", "faultproxy.replay_store.har"),
    # ... and only its front door is for others
    ("faultproxy.runner.run_loop", "faultproxy.otel.spans"),
    # the monitor is a mode beside the runner: neither imports the other, and the CLI its front door
    ("faultproxy.monitor.live_traffic", "faultproxy.runner.episode"),
    ("faultproxy.runner.episode", "faultproxy.monitor"),
    ("faultproxy.otel.export", "faultproxy.monitor"),
    ("faultproxy.cli.monitor", "faultproxy.monitor.live_traffic"),
    # the runner's modules are its own: the CLI, the public API and the pytest plugins import its front door
    ("faultproxy.cli.run", "faultproxy.runner.run_loop"),
    ("faultproxy.pytest_plugin.replay_collection", "faultproxy.runner.replay_agents"),
    # the pytest plugins are a front end beside the CLI: nothing of faultproxy imports them
    ("faultproxy.pytest_plugin.replay_collection", "faultproxy.cli.options"),
    ("faultproxy.cli.replay", "faultproxy.pytest_plugin.replay_collection"),
    ("faultproxy.runner.replay_agents", "faultproxy.pytest_plugin.proxy_fixtures"),
    # the evaluator's packages are layers (its pipeline): no package imports one above it, and the
    # two pairs that share a layer import neither way
    ("faultproxy.evaluator.traces.traced", "faultproxy.evaluator.checks"),
    ("faultproxy.evaluator.gate.regression_gate", "faultproxy.evaluator.sweeps"),
    ("faultproxy.evaluator.proposals.starter", "faultproxy.evaluator.rendering"),
    # ... and each package's modules are its own: others import its front door
    ("faultproxy.evaluator.traces.traced", "faultproxy.evaluator.statistics.metrics"),
    ("faultproxy.evaluator.checks.check_effects", "faultproxy.evaluator.traces.traced"),
    ("faultproxy.evaluator.judging.judge", "faultproxy.evaluator.checks.registry"),
    ("faultproxy.evaluator.aggregate.log_scan", "faultproxy.evaluator.judging.judge"),
    ("faultproxy.evaluator.sweeps.sweep_analysis", "faultproxy.evaluator.aggregate.report"),
    ("faultproxy.runner.run_loop", "faultproxy.evaluator.gate.sequential_looks"),
    ("faultproxy.evaluator.rendering.terminal", "faultproxy.evaluator.sweeps.sweep_grid"),
    ("faultproxy.cli.evaluate_commands", "faultproxy.evaluator.rendering.html"),
    ("faultproxy.cli.init_commands", "faultproxy.evaluator.proposals.starter"),
])
def test_the_contracts_catch_a_forbidden_import(tmp_path: Path, module: str, imported: str) -> None:
    """The contracts are not vacuous: each of these imports breaks one."""
    done = lint_with_import(tmp_path, module, imported)
    assert done.returncode != 0
    assert f"{module} -> {imported}" in done.stdout
