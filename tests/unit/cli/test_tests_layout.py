"""The tests follow their layout (docs/layout.md, Tests): unit tests in tests/unit/<layer>/, one
folder per import layer of pyproject.toml's contract, starting no proxy and no agent; tests that
start proxies or agents in tests/e2e/<feature>/; shared code in tests/support/, which holds no
tests, and no test module imports another (what two share lives in support). A change to one layer
then runs its tests first (`make unit LAYER=<layer>`)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.support.layout import ROOT

# What only an end-to-end test uses: a proxy (the fixtures or the server itself) or an agent script.
E2E_FIXTURES = {"make_proxy", "upstream", "https_upstream", "entry_dir"}
E2E_NAMES = {"ProxyServer", "AGENTS"}
E2E_MODULES = ("tests.support.agents", "tests.support.agent_commands", "tests.support.mcp_clients",
               "tests.support.monitor", "tests.support.demo_world")
TEST_PACKAGES = ("tests.unit", "tests.e2e")


def layers(root: Path) -> set[str]:
    """The layer folders: the packages of the import-linter layers contract, without `faultproxy.`."""
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers" and "containers" not in c]  # not one package's
    return {name.strip().removeprefix("faultproxy.") for layer in contract["layers"] for name in layer.split("|")}


def starts_processes(source: str) -> list[str]:
    """The proxy or agent uses in a test module's source (empty for a unit test)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            found += [f"fixture {a.arg}" for a in node.args.args if a.arg in E2E_FIXTURES]
        elif isinstance(node, ast.Name) and node.id in E2E_NAMES and not isinstance(node.ctx, ast.Store):
            found.append(node.id)
        elif isinstance(node, ast.ImportFrom):
            found += [f"import {node.module}"] if (node.module or "").startswith(E2E_MODULES) else []
            found += [alias.name for alias in node.names if alias.name in E2E_NAMES]
    return found


def imported_tests(source: str, relative_too: bool) -> list[str]:
    """The test modules a module imports (tests.unit.*, tests.e2e.*; `relative_too`: any relative
    import, which inside a test folder can only reach a test module)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(TEST_PACKAGES)]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found += ["." * node.level + (node.module or "")] if relative_too else []
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [f"{module}.{alias.name}" for alias in node.names] if module == "tests" else [module]
            found += [name for name in names if name.startswith(TEST_PACKAGES)]
    return found


def misplaced(root: Path) -> list[str]:
    """One line per test file outside the layout, unit test that starts a proxy or an agent, or
    folder of tests that is not a package (basenames repeat across folders, so each must be one)."""
    tests, allowed = root / "tests", layers(root)
    problems = set()
    for path in [*tests.rglob("test_*.py"), *tests.rglob("*_test.py")]:
        parts = path.relative_to(tests).parts
        where = "/".join(parts)
        if len(parts) == 3 and parts[0] == "unit" and parts[1] in allowed:
            uses = starts_processes(path.read_text())
            if uses:
                problems.add(f"{where}: a unit test that uses {', '.join(sorted(set(uses)))} belongs in e2e/")
        elif parts[0] != "e2e" or len(parts) > 3:
            problems.add(f"{where}: not in tests/unit/<layer>/ ({', '.join(sorted(allowed))}) or tests/e2e/[<feature>/]")
        problems.update(f"tests/{folder}: holds tests but has no __init__.py"
                        for folder in path.relative_to(tests).parents if not (tests / folder / "__init__.py").exists())
    for path in tests.rglob("*.py"):
        where = "/".join(path.relative_to(tests).parts)
        for module in imported_tests(path.read_text(), relative_too=not where.startswith("support/")):
            problems.add(f"{where}: imports the test module {module}; what tests share belongs in tests/support/")
    return sorted(problems)


def test_every_test_file_follows_the_layout():
    assert misplaced(ROOT) == []


def laid_out(root: Path) -> Path:
    """A tests/ tree under `root` that follows the layout: a unit test and an end-to-end test; returns it."""
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for folder in ("unit/proxy", "unit/widgets", "e2e/mcp", "support"):
        (root / "tests" / folder).mkdir(parents=True)
    for init in ("", "unit", "unit/proxy", "unit/widgets", "e2e", "e2e/mcp", "support"):
        (root / "tests" / init / "__init__.py").write_text("")
    (root / "tests" / "unit" / "proxy" / "test_pure.py").write_text("def test_pure():\n    assert 1\n")
    (root / "tests" / "e2e" / "mcp" / "test_flow.py").write_text("def test_flow(make_proxy):\n    pass\n")
    return root / "tests"


def test_a_test_outside_the_layout_is_named(tmp_path):
    laid_out(tmp_path)
    assert misplaced(tmp_path) == []
    (tmp_path / "tests" / "test_loose.py").write_text("")
    (tmp_path / "tests" / "unit" / "widgets" / "test_widgets.py").write_text("")
    (tmp_path / "tests" / "support" / "test_helper.py").write_text("")
    (tmp_path / "tests" / "unit" / "proxy" / "test_proxied.py").write_text(
        "from tests.support.layout import AGENTS\n\ndef test_proxied(make_proxy):\n    pass\n")
    (tmp_path / "tests" / "e2e" / "mcp" / "__init__.py").unlink()
    problems = {line.split(": ")[0]: line for line in misplaced(tmp_path)}
    assert sorted(problems) == ["support/test_helper.py", "test_loose.py", "tests/e2e/mcp",
                                "unit/proxy/test_proxied.py", "unit/widgets/test_widgets.py"]
    assert "uses AGENTS, fixture make_proxy" in problems["unit/proxy/test_proxied.py"]


def test_a_module_that_imports_a_test_module_is_named(tmp_path):
    tests = laid_out(tmp_path)
    (tests / "support" / "shared.py").write_text("from tests.support.layout import ROOT\n")
    (tests / "e2e" / "mcp" / "test_shared.py").write_text("from tests.support.shared import ROOT\n")
    assert misplaced(tmp_path) == []
    (tests / "unit" / "proxy" / "test_borrowing.py").write_text("from tests.e2e.mcp.test_flow import helper\n")
    (tests / "e2e" / "mcp" / "test_sibling.py").write_text("from .test_flow import helper\n")
    (tests / "e2e" / "mcp" / "test_whole.py").write_text("import tests.unit.proxy.test_pure\n")
    (tests / "e2e" / "mcp" / "test_package.py").write_text("from tests import unit\n")
    (tests / "support" / "borrowed.py").write_text("from tests.unit.proxy.test_pure import helper\n")
    problems = {line.split(": ")[0]: line for line in misplaced(tmp_path)}
    assert sorted(problems) == ["e2e/mcp/test_package.py", "e2e/mcp/test_sibling.py", "e2e/mcp/test_whole.py",
                                "support/borrowed.py", "unit/proxy/test_borrowing.py"]
    assert "imports the test module tests.e2e.mcp.test_flow;" in problems["unit/proxy/test_borrowing.py"]
    assert "imports the test module .test_flow;" in problems["e2e/mcp/test_sibling.py"]
    assert "imports the test module tests.unit;" in problems["e2e/mcp/test_package.py"]
