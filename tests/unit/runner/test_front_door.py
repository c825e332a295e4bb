"""The runner's front door (runner/__init__.py): each name the layers above import loads from its
module on first use, so a command that needs only the plan's GridPoint does not load the run loop
(and mitmproxy behind it); no name is also a module of the runner, which would shadow it."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import faultproxy.runner
from tests.support.layout import ROOT


def test_no_public_name_is_also_a_module_of_the_runner() -> None:
    modules = {module.name for module in pkgutil.iter_modules(faultproxy.runner.__path__)}
    assert faultproxy.runner.__all__ and not set(faultproxy.runner.__all__) & modules


def test_each_name_loads_from_its_module_on_first_use() -> None:
    done = subprocess.run([sys.executable, "-c", """
import importlib, sys
import faultproxy.runner
assert not any(name.startswith("faultproxy.runner.") for name in sys.modules), "the front door loaded a module"
from faultproxy.runner import GridPoint
assert "faultproxy.runner.plan" in sys.modules and "faultproxy.runner.run_loop" not in sys.modules
assert not any(name.split(".")[0] == "mitmproxy" for name in sys.modules)
from faultproxy.evaluator.front_door import public_names
for name, home in public_names(open(faultproxy.runner.__file__).read(), "faultproxy.runner").items():
    assert getattr(faultproxy.runner, name) is getattr(importlib.import_module(home), name), name
print(len(faultproxy.runner.__all__))
"""], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) == len(faultproxy.runner.__all__)
