"""The evaluator's package front doors (evaluator/front_door.py): every public name loads, and none
is also the name of a module of its package, where the module would shadow the name once a
sibling imported it."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import faultproxy.evaluator
from faultproxy.evaluator.front_door import public_names
from tests.support.layout import ROOT

PACKAGES = [module.name for module in pkgutil.iter_modules(faultproxy.evaluator.__path__, "faultproxy.evaluator.")
            if module.ispkg]


def test_the_evaluator_is_all_packages_behind_front_doors() -> None:
    assert len(PACKAGES) >= 9
    for name in PACKAGES:
        package = importlib.import_module(name)
        assert package.__all__, name
        assert package.__doc__, name


def test_no_public_name_is_also_a_module_of_its_package() -> None:
    clashes = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        modules = {module.name for module in pkgutil.iter_modules(package.__path__)}
        clashes += [f"{name}.{public}" for public in set(package.__all__) & modules]
    assert not clashes, clashes


def test_each_public_name_loads_from_its_module_on_first_use() -> None:
    """In a fresh interpreter: the gate's front door gives ALPHA without loading the report, and
    every name of every front door is the object its module defines."""
    done = subprocess.run([sys.executable, "-c", """
import importlib, sys
from faultproxy.evaluator.gate import ALPHA
assert "faultproxy.evaluator.gate.sequential_looks" not in sys.modules
assert not any(name.startswith("faultproxy.evaluator.aggregate") for name in sys.modules)
from faultproxy.evaluator.front_door import public_names
for package in sys.argv[1:]:
    door = importlib.import_module(package)
    for name, home in public_names(open(door.__file__).read(), package).items():
        assert getattr(door, name) is getattr(importlib.import_module(home), name), (package, name)
print("ok")
""", *PACKAGES], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_public_names_reads_only_the_imports_under_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from pkg.eager import not_public\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.first import a, b as c\n"
        "    from elsewhere import d\n"
    )
    assert public_names(source, "pkg") == {"a": "pkg.first", "c": "pkg.first"}
