"""Names read from files become paths only through here.

Scenario, task and store files and run directories may come from a pull request, so a name in
them (an episode key, a task id, a scenario name, a trace file) is untrusted: it must be one
plain path component, or a relative path of such components, before it is joined to a folder.
And nothing is written through a symbolic link that leads out of the folder faultproxy writes
(a run directory, a replay store, replay's --out): a planted link would carry the write anywhere.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from faultproxy.formats.errors import InputError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafePath(InputError):
    """A name that would not stay one path component, or a link leading out of the output folder."""


def name_problem(value: Any) -> str | None:
    """Why `value` cannot be one path component (a file or folder name), or None if it can."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if "\x00" in value:
        return "must not hold a NUL character"
    if _CONTROL.search(value):
        return "must not hold control characters"
    if "/" in value or "\\" in value:
        return "must be a plain name, without '/' or '\\' (it becomes a file or folder name)"
    if value in (".", ".."):
        return f"must be a name, not {value!r}"
    return None


def path_component(value: Any, where: str, field: str, line: int | None = None) -> str:
    """`value` as one path component; UnsafePath naming `where` and `field` otherwise."""
    problem = name_problem(value)
    if problem:
        raise UnsafePath(where, line, field, f"{problem}, got {value!r}")
    return value


def relative_file(root: Path, value: Any, where: str, field: str) -> Path:
    """`root / value` for a relative path read from a file (e.g. a trace's "flows/x.jsonl"): each
    part a plain name, nothing absolute, no '..', and not leading out of `root` through a link."""
    parts = PurePosixPath(value).parts if isinstance(value, str) and value else ("",)
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise UnsafePath(where, None, field, f"must be a relative path inside {root}: each part {problem}, "
                                                 f"got {value!r}")
    path = Path(root).joinpath(*parts)
    if not _inside(Path(root), path):
        raise UnsafePath(where, None, field, f"{value!r} leads out of {root} through a symbolic link")
    return path


def refuse_links_out(root: Path, what: str) -> None:
    """Refuse a folder faultproxy is about to write into (`what`: "run directory", "replay store",
    ...) if any symbolic link in it leads out of it: appending or replacing through one would
    write outside. Links that stay inside are fine."""
    root = Path(root)
    if root.is_symlink() or not root.is_dir():
        return  # the folder itself is the user's own choice of where to write
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            link = Path(folder) / name
            if link.is_symlink() and not _inside(root, link):
                raise UnsafePath(str(link), None, None, f"is a symbolic link leading out of the {what} "
                                                        f"(to {os.readlink(link)}); faultproxy never writes "
                                                        "through one: remove it")


def folder_option(text: str) -> Path:
    """argparse `type` for an output folder option: '' would quietly mean the current folder."""
    if not text.strip() or _CONTROL.search(text):
        raise argparse.ArgumentTypeError(f"must name a folder, got {text!r}")
    return Path(text)


def _inside(root: Path, path: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())
