"""Docstrings and comments in product code name only modules that exist.

A module's path (`proxy/stdio/lane.py`) must be a file of the checkout. A dotted name such as
`formats.trace`, `proxy.injector.FaultInjector` or `faultproxy.replay_store.har` is resolved
against the source tree: each part must be a subpackage or a module until a module is reached
(what follows it is an attribute, and the first must be defined there), or a name the package's
`__init__` defines. So a module that moved (`evaluator.rundir`, long since formats.rundir) or
never existed leaves no stale pointer behind.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.support.layout import ROOT, package_dirs

PREFIX = "faultproxy"
FILE_SUFFIXES = frozenset({"yaml", "yml", "json", "jsonl", "md", "py", "html", "xml", "har", "txt", "toml", "cjs",
                           "log"})  # tasks.yaml, faultproxy.log: a file's name, not a module path
# A docstring's example line of code (an assignment, a doctest): its `tasks.severity` or
# `proxy.proxy_url(...)` is a variable named like a package, not a module path.
CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.)|[\w\])]\s=\s")


def packages() -> dict[str, Path]:
    """The names a reference starts with and their folders: {"faultproxy": ROOT/"faultproxy",
    "proxy": ROOT/"proxy", "cli": ROOT/"faultproxy"/"cli", ...}. In the checkout faultproxy/proxy
    and the rest are links to the layers' folders, so `faultproxy.proxy.x` resolves as installed."""
    dirs = package_dirs()
    found = {name.rpartition(".")[2]: folder for name, folder in dirs.items()}
    found.update({d.name: d for d in dirs[PREFIX].iterdir() if (d / "__init__.py").is_file() and d.name not in found})
    return found


def defined_names(source: Path) -> set[str]:
    """The names a module defines: functions, classes, assignments, imports, and the strings it
    lists (`__all__`, the lazy public API's table of names)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    return names


def problem(parts: list[str], roots: dict[str, Path]) -> str | None:
    """Why the dotted name `parts` (a package of `roots` first) names nothing in the tree, or None."""
    folder = roots[parts[0]]
    for depth, part in enumerate(parts[1:], start=1):
        if (folder / part / "__init__.py").is_file():
            folder = folder / part
        elif (module := folder / f"{part}.py").is_file():
            attribute = parts[depth + 1] if depth + 1 < len(parts) else None
            if attribute is not None and attribute not in defined_names(module):
                return f"{attribute!r} is not defined in {module.relative_to(ROOT)}"
            return None
        elif part in defined_names(folder / "__init__.py"):
            return None
        else:
            return f"no module {part!r} in {folder.relative_to(ROOT)}"
    return None


def _alternatives(roots: dict[str, Path]) -> str:
    return "|".join(sorted(map(re.escape, roots), key=len, reverse=True))


def dotted_pattern(roots: dict[str, Path]) -> re.Pattern[str]:
    # Not after a word, a dot, a slash or a dash (`docs/runner.md`, `self.proxy.server`), and at
    # least one part after the package, starting with a letter or _ (so "runner. The" is prose).
    return re.compile(rf"(?<![\w./-])(?:{_alternatives(roots)})(?:\.[A-Za-z_]\w*)+")


def path_pattern(roots: dict[str, Path]) -> re.Pattern[str]:
    """A module's path in the checkout: `proxy/stdio/lane.py`, `faultproxy/cli/main.py`."""
    return re.compile(rf"(?<![\w./-])(?:{_alternatives(roots)})(?:/\w+)+\.py\b")


def docstrings_and_comments(source: Path) -> list[tuple[int, str]]:
    """(line, text) of every line of a docstring that is not example code, and of every comment."""
    text = source.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(text, str(source))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())
                          if not CODE_LINE.search(line)]
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def stale_in(text: str, roots: dict[str, Path]) -> list[str]:
    """Each module path or dotted name in `text` that names nothing, with why."""
    stale = []
    for match in path_pattern(roots).finditer(text):
        first, _, rest = match.group().partition("/")
        if not (roots[first] / rest).is_file():
            stale.append(f"{match.group()}: no such file")
    for match in dotted_pattern(roots).finditer(text):
        parts = match.group().split(".")
        if parts[-1] not in FILE_SUFFIXES and (why := problem(parts, roots)):
            stale.append(f"{match.group()}: {why}")
    return stale


def test_docstrings_and_comments_name_only_modules_that_exist() -> None:
    roots = packages()
    sources = sorted({source for folder in package_dirs().values() for source in folder.rglob("*.py")
                      if "__pycache__" not in source.parts})
    stale = [f"{source.relative_to(ROOT)}:{line}: {what}" for source in sources
             for line, text in docstrings_and_comments(source) for what in stale_in(text, roots)]
    assert not stale, "\n".join(stale)


def test_the_check_finds_moved_modules_and_missing_attributes_and_passes_real_ones(tmp_path: Path) -> None:
    roots = packages()
    text = ("the line (evaluator.rundir), the driver (`proxy.runner.run.drive`), a trace line (proxy.trace), "
            "faultproxy.replay_store.sweep, proxy/trace.py, formats.trace.NoSuchWriter; "
            "real: formats.trace.TraceWriter, faultproxy.replay_store.har, faultproxy.cli.main, "
            "faultproxy.ProxyServer, scenarios.trace_forwarded, proxy/stdio/lane.py, faultproxy/cli/main.py; "
            "not references: docs/runner.md, docs/proxy/x.py, "
            "self.proxy.server, tasks.yaml, runner. The end")
    assert stale_in(text, roots) == [
        "proxy/trace.py: no such file",
        "evaluator.rundir: no module 'rundir' in evaluator",
        "proxy.runner.run.drive: no module 'runner' in proxy",
        "proxy.trace: no module 'trace' in proxy",
        "faultproxy.replay_store.sweep: no module 'sweep' in faultproxy/replay_store",
        "formats.trace.NoSuchWriter: 'NoSuchWriter' is not defined in formats/trace.py",
    ]
    example = '"""Spans of a run.\n\n    verdict = judge(task, tasks.severity)\n"""\n# see proxy.nowhere\n'
    source = tmp_path / "example.py"
    source.write_text(example, encoding="utf-8")
    assert docstrings_and_comments(source) == [(1, "Spans of a run."), (2, ""), (5, "# see proxy.nowhere")]
