"""Node agent projects for tests: npm packages installed once into a cached, git-ignored folder.

    project = node_project(tmp_path / "agent", "node_openai_agent.mjs", "openai", "undici")

Node 20 is what the project's machines have; the versions below are the newest that support
it (undici 8 and openai 7 need Node 22). The install runs on a clean machine too (the npm
registry is reachable): the first test that needs it pays for it, later runs reuse it.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from tests.support.layout import AGENTS, ROOT

PACKAGES = {"undici": "7.30.2", "openai": "6.49.0"}
CACHE = ROOT / ".cache" / ("node-" + "-".join(f"{name}{version}" for name, version in sorted(PACKAGES.items())))
INSTALL_TIMEOUT_S = 240


def installed_packages() -> Path:
    """The cached node_modules with PACKAGES, installed with npm when missing."""
    modules = CACHE / "node_modules"
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / ".node-install.lock", "w") as lock:  # one install at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((modules / name / "package.json").exists() for name in PACKAGES):
            scratch = CACHE.with_name(CACHE.name + ".partial")
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            subprocess.run(["npm", "install", "--prefix", str(scratch), "--no-audit", "--no-fund", "--no-save",
                            *(f"{name}@{version}" for name, version in PACKAGES.items())],
                           check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S)
            shutil.rmtree(CACHE, ignore_errors=True)
            scratch.rename(CACHE)
    return modules


def node_project(folder: Path, agent: str, *packages: str) -> Path:
    """A project folder holding the agent script (from tests/support/agents) and, in its node_modules,
    exactly `packages` (links into the cache); returns the script's path."""
    modules = installed_packages()
    (folder / "node_modules").mkdir(parents=True)
    for name in packages:
        (folder / "node_modules" / name).symlink_to(modules / name, target_is_directory=True)
    script = folder / agent
    shutil.copy(AGENTS / agent, script)
    return script
