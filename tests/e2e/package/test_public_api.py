"""The names `faultproxy` exports carry docstrings, and the README's Python snippet runs as written."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import faultproxy
from faultproxy.evaluator.aggregate import build_report
from tests.support.layout import ROOT


def _own_doc(obj: object) -> str | None:
    """A docstring written for obj, not the signature a dataclass makes up when there is none."""
    doc = inspect.getdoc(obj) if not isinstance(obj, type) else obj.__dict__.get("__doc__")
    if isinstance(obj, type) and doc and doc.startswith(f"{obj.__name__}("):
        return None
    return doc


def test_every_exported_name_and_its_public_methods_have_docstrings() -> None:
    missing = []
    for name in faultproxy.__all__:
        obj = getattr(faultproxy, name)
        if name == "__version__":
            continue
        if not _own_doc(obj):
            missing.append(name)
        if isinstance(obj, type):
            for member, value in vars(obj).items():
                function = value.fget if isinstance(value, property) else getattr(value, "func", value)
                if not member.startswith("_") and inspect.isfunction(function) and not function.__doc__:
                    missing.append(f"{name}.{member}")
    assert not missing, f"no docstring: {', '.join(missing)}"


def test_the_readme_run_function_snippet_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (snippet,) = [block for block in re.findall(r"```python\n(.*?)```", readme, re.S) if "run_function(" in block]
    agent = textwrap.dedent("""\
        def my_agent(episode):
            return episode.variant % 2 == 0  # every other trial passes
    """)
    (tmp_path / "snippet.py").write_text(agent + snippet)
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [float(value) for value in done.stdout.split()[-2:]]
    headline = build_report(tmp_path / "runs/in-process")["run"]["headline"]
    assert printed == [headline["pass_hat_k"], headline["mean_pass_rate"]] == [0.0, 0.5]
    assert json.loads((tmp_path / "runs/in-process/plan.json").read_text())  # the default out, under the cwd
