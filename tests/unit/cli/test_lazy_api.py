"""The public API loads lazily, so the lower layers stand where mitmproxy cannot be imported and
the commands that only read run directories do not pay for the proxy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import faultproxy
from faultproxy.evaluator.aggregate import build_report
from tests.support.layout import ROOT
from tests.support.run_records import LOOKUP, lookup_ok, lookup_wrong, make_run

# Run first in a child interpreter: any import of mitmproxy (or a submodule) fails loudly.
BLOCK_MITMPROXY = textwrap.dedent("""\
    import sys

    class BlockMitmproxy:
        def find_spec(self, name, path=None, target=None):
            if name == "mitmproxy" or name.startswith("mitmproxy."):
                raise ImportError(f"blocked for this test: {name}")
            return None

    sys.meta_path.insert(0, BlockMitmproxy())
""")


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_MITMPROXY + textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_blocker_does_block_mitmproxy() -> None:
    done = _python("import faultproxy.proxy.server\n")
    assert done.returncode != 0 and "blocked for this test: mitmproxy" in done.stderr


def test_formats_scenarios_tasks_and_evaluator_import_and_build_a_report_without_mitmproxy(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", [LOOKUP], 2, {("", "lookup_a"): [lookup_ok(), lookup_wrong()]})
    done = _python("""
        import importlib, json, pkgutil, sys
        import faultproxy
        for package in ("formats", "scenarios", "tasks", "evaluator"):
            root = importlib.import_module(f"faultproxy.{package}")
            for module in pkgutil.walk_packages(root.__path__, f"faultproxy.{package}."):
                importlib.import_module(module.name)
        scenario = faultproxy.load_scenario("rate_limit")
        report = faultproxy.build_report(sys.argv[1])
        assert not any(name.split(".")[0] == "mitmproxy" for name in sys.modules)
        print(json.dumps({"scenario": scenario.name, "headline": report["run"]["headline"]}))
    """, str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    assert printed["scenario"] == "rate_limit"
    assert printed["headline"] == json.loads(json.dumps(build_report(run_dir)["run"]["headline"]))
    assert printed["headline"]["mean_pass_rate"] == 0.5


def test_the_public_names_are_all_there_and_load_on_first_use() -> None:
    done = _python("""
        import faultproxy, sys
        before = set(sys.modules)
        names = dir(faultproxy)
        assert "faultproxy.runner.run_loop" not in before, "the package imported the runner eagerly"
        print(" ".join(name for name in faultproxy.__all__ if name in names))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == faultproxy.__all__
    for name in faultproxy.__all__:
        assert getattr(faultproxy, name) is not None
    assert faultproxy.ProxyServer.__module__ == "faultproxy.proxy.server"


def test_report_gate_and_scan_start_without_the_proxy(tmp_path: Path) -> None:
    """`faultproxy report` (its --help too), `gate` and `scan` never load mitmproxy, and --help not
    even the evaluator: they start in a fraction of the time and run where mitmproxy cannot be
    imported."""
    run_dir = make_run(tmp_path / "run", [LOOKUP], 2, {("", "lookup_a"): [lookup_ok(), lookup_wrong()]})
    done = _python("""
        import sys
        from faultproxy.cli.entry import main
        for argv in (["report", "--help"], ["gate", "--help"], ["scan", "--help"]):
            try:
                main(argv)
            except SystemExit as exit:
                assert exit.code == 0, argv
        assert "faultproxy.evaluator.aggregate.report" not in sys.modules  # --help parses, it does not judge
        # nor does it set up logging or read package metadata (together about 200 ms of imports)
        assert "structlog" not in sys.modules and "importlib.metadata" not in sys.modules
        assert main(["report", sys.argv[1]]) == 0
        assert main(["scan", sys.argv[1]]) == 0
        assert not any(name.split(".")[0] == "mitmproxy" for name in sys.modules)
        assert "faultproxy.proxy" not in sys.modules and "faultproxy.runner" not in sys.modules
    """, str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage: faultproxy report [-h]" in done.stdout and "usage: faultproxy scan" in done.stdout
    assert (run_dir / "report.json").exists()
    # every other command still has the full command line behind the same entry point
    done = _python("from faultproxy.cli.entry import main\nmain(['check', 'rate_limit'])\n")
    assert done.returncode != 0 and "blocked for this test: mitmproxy" in done.stderr
