"""The tests run on every Python the package supports (requires-python >= 3.12)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.layout import ROOT

# An interpreter with compression.zstd in its standard library (3.14+) and no backport: the backport
# stands in for the standard module (it is a copy of it), and importing the backport itself fails.
AS_ON_PYTHON_314 = """
import sys, types
from backports import zstd as standard
compression = types.ModuleType("compression")
compression.zstd = standard
sys.modules.update({"compression": compression, "compression.zstd": standard, "backports.zstd": None})
from tests.support import upstream
assert upstream.zstd is standard
assert upstream.zstd.decompress(upstream.zstd.compress(b"x" * 100)) == b"x" * 100
print("ok")
"""


def test_the_test_servers_use_the_standard_zstd_where_python_has_it():
    result = subprocess.run([sys.executable, "-c", AS_ON_PYTHON_314], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


def test_the_zstd_backport_is_installed_only_below_python_3_14():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    [backport] = [d for d in extra if d.startswith("backports.zstd")]
    assert backport.endswith("; python_version < '3.14'")
