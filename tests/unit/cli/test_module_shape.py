"""The product's modules stay small enough to read in one pass and carry one meaning per name
(issue 38): no module over 400 lines, and no two modules with the same file name except the two
halves of one fault (its spec in scenarios/faults, its behaviour in proxy/faults)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from tests.support.layout import ROOT, package_dirs

MAX_LINES = 400
# A fault's spec (below the proxy, so `faultproxy check` runs without mitmproxy) and its behaviour
# (in the proxy) share the fault's name on purpose: one meaning, two layers.
FAULT_HALVES = ("proxy/faults", "scenarios/faults")


def modules_under(root: Path, folders: Iterable[Path]) -> list[Path]:
    """Every Python module of the folders, relative to root, each once (the checkout's symlinks
    into faultproxy/ lead to the same files)."""
    return sorted({source.resolve().relative_to(root) for folder in folders for source in folder.rglob("*.py")
                   if "__pycache__" not in source.parts})


def long_modules(root: Path, modules: list[Path]) -> list[str]:
    return [f"{module}: {count} lines" for module in modules
            if (count := len((root / module).read_text().splitlines())) > MAX_LINES]


def shared_names(modules: list[Path]) -> list[str]:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for module in modules:
        if module.name != "__init__.py":
            by_name[module.name].append(module)
    return [f"{name}: {', '.join(map(str, paths))}" for name, paths in sorted(by_name.items())
            if len(paths) > 1 and sorted(path.parent.as_posix() for path in paths) != list(FAULT_HALVES)]


def product_modules() -> list[Path]:
    return modules_under(ROOT.resolve(), package_dirs().values())


def test_no_module_is_over_400_lines() -> None:
    long = long_modules(ROOT.resolve(), product_modules())
    assert not long, "\n".join(long)


def test_no_two_modules_share_a_name() -> None:
    shared = shared_names(product_modules())
    assert not shared, "\n".join(shared)


def test_the_checks_name_offenders(tmp_path: Path) -> None:
    """Neither check is vacuous: a long module and a repeated name are named; a fault's two
    halves, and a repeated name that is one half plus another module, are told apart."""
    files = {"proxy/sessions.py": 401, "evaluator/sessions.py": 3, "proxy/faults/delay.py": 3,
             "scenarios/faults/delay.py": 3, "scenarios/faults/reset.py": 3, "runner/reset.py": 3}
    for name, lines in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" * lines)
    modules = modules_under(tmp_path, [tmp_path])
    assert long_modules(tmp_path, modules) == ["proxy/sessions.py: 401 lines"]
    assert shared_names(modules) == ["reset.py: runner/reset.py, scenarios/faults/reset.py",
                                     "sessions.py: evaluator/sessions.py, proxy/sessions.py"]
