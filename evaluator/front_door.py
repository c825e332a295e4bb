"""The evaluator's package front doors: what one package lets the others import, loaded on first use.

A package's `__init__.py` names its public names once, as imports under TYPE_CHECKING, and
hands itself to front_door:

    if TYPE_CHECKING:
        from faultproxy.evaluator.gate.regression_gate import ALPHA, MARGIN, evaluate_gate
    __all__, __getattr__, __dir__ = front_door(__name__, __file__)

Type checkers and import-linter read those imports as the package's re-exports (pyproject.toml's
contracts forbid importing a package's modules from outside it); at run time each name is
imported from its module on first use (PEP 562), as `faultproxy`'s own names are. So `faultproxy
gate --help`, which needs the gate's defaults, does not load the report machinery that the
sequential gate beside them imports.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def front_door(package: str, init_file: str) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__all__`, module `__getattr__` and `__dir__`, from the imports its
    `__init__.py` makes under TYPE_CHECKING."""
    homes = public_names(Path(init_file).read_text(), package)

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:  # not a public name: Python goes on to look for a submodule of that name
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return sorted(homes), __getattr__, __dir__


def public_names(source: str, package: str) -> dict[str, str]:
    """{name: module} for each `from <package>.<module> import name` under `if TYPE_CHECKING:`."""
    homes: dict[str, str] = {}
    for block in ast.parse(source).body:
        if not (isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"):
            continue
        for node in block.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
                homes.update((alias.asname or alias.name, node.module) for alias in node.names)
    return homes
