"""The benchmarks start servers and agents from this checkout by path (`REPO / "tests" / ...`);
none of them runs in the test suite, so a moved file would break a benchmark silently. Every
literal path a benchmark builds from the repository's root must exist (issue 38 moved tests/)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.layout import ROOT

# `REPO / "tests" / "support" / "x.py"` (or ROOT): a chain of string literals from the root;
# generated caches (`.cache`, `.venv`) are made by the benchmark itself.
PATH_CHAIN = re.compile(r'\b(?:REPO|ROOT)((?:\s*/\s*"[^"{}]+")+)')
MADE_BY_THE_BENCHMARK = (".cache", ".venv")


def literal_paths(source: str) -> list[Path]:
    return [Path(*re.findall(r'"([^"]+)"', chain)) for chain in PATH_CHAIN.findall(source)]


def missing_paths(bench: Path, root: Path) -> list[str]:
    return [f"{script.name}: {path}" for script in sorted(bench.glob("*.py"))
            for path in literal_paths(script.read_text())
            if path.parts[0] not in MADE_BY_THE_BENCHMARK and not (root / path).exists()]


def test_every_path_a_benchmark_names_exists() -> None:
    missing = missing_paths(ROOT / "bench", ROOT)
    assert not missing, "\n".join(missing)


def test_a_moved_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "server.py").write_text("")
    (tmp_path / "bench" / "b.py").write_text('SERVER = REPO / "tests" / "agents" / "server.py"\n'
                                             'OK = REPO / "tests" / "server.py"\nCACHE = ROOT / ".cache" / "x"\n')
    assert missing_paths(tmp_path / "bench", tmp_path) == ["b.py: tests/agents/server.py"]
