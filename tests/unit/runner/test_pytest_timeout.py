"""A test that hangs fails alone (pytest-timeout), instead of stalling the whole suite."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.layout import ROOT


def test_the_suite_has_a_per_test_timeout():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert config["timeout"] == 300


def test_a_hanging_test_fails_and_the_next_one_still_runs(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(600)\n\ndef test_runs_after():\n    assert True\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "2",
                             str(tmp_path / "test_hang.py")], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "Timeout" in result.stdout and "1 failed, 1 passed" in result.stdout
