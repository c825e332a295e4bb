"""The installed package's layout, built from pyproject.toml's `package-dir`: the repository keeps
the design card's top-level folders, installed they are subpackages of `faultproxy`."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "tests" / "support" / "agents"  # the agents and servers tests start by path
EXAMPLES = ROOT / "examples"  # the demo: its agents, world, tasks and scenarios


def package_dirs() -> dict[str, Path]:
    """{"faultproxy.proxy": ROOT/"proxy", ...}, as setuptools maps them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in config["package-dir"].items()}


def copy_layout(target: Path) -> Path:
    """Lay the package out under `target` as the wheel would (Python files only); returns target."""
    for name, folder in package_dirs().items():
        destination = target.joinpath(*name.split("."))
        for source in folder.rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            out = destination / source.relative_to(folder)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out)
    return target


def copy_sources(target: Path) -> Path:
    """What a build of the distribution reads, copied to `target` (every file of each package
    folder, pyproject.toml, README.md), so a build leaves no build/ or egg-info in the checkout."""
    for folder in set(package_dirs().values()):
        shutil.copytree(folder, target / folder.relative_to(ROOT), ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, target / name)
    return target
