"""Writing run files so that a full disk is an answer, not a traceback or a torn file.

- A log line (episodes.jsonl, a trace, faultproxy.log) is appended whole or not at all: the
  file is unbuffered, and a write that fails is cut back to where the line began (the last
  newline), so a reader and a resumed run never meet a torn line.
- A whole file (plan.json, report.json, report.html, a trace that travelled from a worker, a
  task copy) is written to a temporary file beside it and renamed over it: the old file or the
  new one, never half of one; the temporary file is removed when the write fails.
- A write that finds no space (ENOSPC, EDQUOT) raises DiskFull naming the file, which the
  command line prints as one line with exit status 1.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import IO

from faultproxy.formats.errors import DiskFull

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def no_space(error: OSError, path: Path | str) -> OSError | DiskFull:
    """DiskFull for `path` when `error` says the disk is full; the error itself otherwise."""
    return DiskFull(path) if error.errno in NO_SPACE else error


def open_lines(path: Path) -> IO[bytes]:
    """`path` opened for append_line: binary, unbuffered, appending."""
    return path.open("ab", buffering=0)


def cut_torn_tail(path: Path) -> None:
    """Cut a line a crash left half-written off the end of `path` (a file of lines), so the next
    line appended does not join it: that line was never written (readers drop it too)."""
    try:
        with path.open("rb") as file:
            keep = end = file.seek(0, os.SEEK_END)
            while keep > 0:  # back to just after the last newline
                start = max(0, keep - 65536)
                file.seek(start)
                newline = file.read(keep - start).rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
    except FileNotFoundError:
        return
    if keep < end:
        os.truncate(path, keep)


def append_line(file: IO[bytes], line: str, path: Path | str) -> None:
    """Append one line (ending in a newline) to a file from open_lines, whole or not at all."""
    data = line.encode("utf-8")
    fd = file.fileno()
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as error:
        try:
            os.ftruncate(fd, start)  # back to the last newline: the line was never written
        except OSError:
            pass
        raise no_space(error, path) from None


def write_whole(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temporary file beside it, renamed over it)."""
    scratch = path.with_name(path.name + ".tmp")
    try:
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, path)
    except OSError as error:
        scratch.unlink(missing_ok=True)
        raise no_space(error, path) from None


class LineFile:
    """A text file for a logger (structlog's PrintLogger writes a line in pieces): each line is
    appended whole; a line that finds the disk full is dropped, not raised into whatever was
    logging (the run's own files report the full disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_lines(path)
        self._pending: list[str] = []

    def write(self, text: str) -> int:
        self._pending.append(text)
        if text.endswith("\n"):
            line, self._pending = "".join(self._pending), []
            try:
                append_line(self._file, line, self.path)
            except DiskFull:
                pass
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: every line went out whole as it ended."""

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self._file.close()


def write_new(path: Path, text: str) -> bool:
    """Create `path` holding `text`; False, and nothing written, when something is there already
    (a file, a folder, a symbolic link even to nowhere: O_EXCL never follows one)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as error:
        path.unlink(missing_ok=True)
        raise no_space(error, path) from None
    return True
