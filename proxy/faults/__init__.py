"""The faults' behaviour, one module per fault type, Toxiproxy-style.

Each module defines one class ending in `Fault` (RateLimitFault, TimeoutFault, ...) whose `kind`
is the fault's FaultKind from `faultproxy.scenarios.faults`: the declarative half (name,
parameters with defaults and ranges, whether the request still reaches the upstream, whether
reads must be remembered, rules across parameters). The split keeps the layers: the scenario
layer validates files for `faultproxy check` and lies below the proxy, so it cannot hold
mitmproxy hooks; the hooks live here and point down at their kind, never the other way.

The classes are found by walking this package, and paired with the kinds when it is imported:
a kind with no class, a kind with two, or a class whose kind is not in the catalogue stops the
import with a message naming them, so a fault type `faultproxy check` accepts always has an
implementation. Helper modules (base, provider_error) define no class with a `kind` of its own.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping

from faultproxy.proxy.faults.base import SUPPLIED_KEY, Fault, answer
from faultproxy.scenarios import FAULT_KINDS, FaultKind


class FaultRegistryError(RuntimeError):
    """The fault kinds and the fault classes do not pair one to one (a programming error)."""


def pair_kinds(kinds: Mapping[str, FaultKind], classes: Iterable[type[Fault]]) -> dict[str, type[Fault]]:
    """Each kind's one class, by fault type; raises FaultRegistryError naming every mismatch."""
    found: dict[str, list[type[Fault]]] = {}
    problems = []
    for cls in classes:
        if kinds.get(cls.kind.name) is not cls.kind:
            problems.append(f"{cls.__qualname__} points at kind {cls.kind.name!r}, which is not in "
                            "scenarios.faults.FAULT_KINDS")
        found.setdefault(cls.kind.name, []).append(cls)
    for name in kinds:
        implementations = found.get(name, [])
        if len(implementations) != 1:
            listed = ", ".join(cls.__qualname__ for cls in implementations) or "none"
            problems.append(f"fault kind {name!r} needs exactly one class in proxy/faults/, found {listed}")
    if problems:
        raise FaultRegistryError("; ".join(problems))
    return {name: found[name][0] for name in kinds}


def _classes_in_package() -> list[type[Fault]]:
    """Every Fault subclass that declares a kind, in the modules of this package."""
    classes = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        classes += [value for value in vars(module).values()
                    if isinstance(value, type) and issubclass(value, Fault)
                    and value.__module__ == module.__name__ and "kind" in vars(value)]
    return classes


FAULT_CLASSES: Mapping[str, type[Fault]] = pair_kinds(FAULT_KINDS, _classes_in_package())

__all__ = ["FAULT_CLASSES", "SUPPLIED_KEY", "Fault", "FaultRegistryError", "answer", "pair_kinds"]
