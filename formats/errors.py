"""Errors a user can act on.

Every error caused by the user's input (a scenario, tasks file, run directory, replay store
entry or command-line value) is a UserError: the CLI prints it in one line and exits with
status 2, with no traceback. Library callers catch UserError once.
"""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """Bad input the user can fix; str(error) is the one line to show."""


class UsageError(UserError):
    """A bad command-line value or option combination."""


class InputError(UserError):
    """A bad input file: str(e) is "FILE:LINE: FIELD: message", leaving out parts that are None."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        where = path if line is None else f"{path}:{line}"
        super().__init__(": ".join(part for part in (where, field, message) if part is not None))

    def __reduce__(self) -> tuple[Any, ...]:  # keep it picklable for process and Dask executors
        return type(self), (self.path, self.line, self.field, self.message)


class DiskFull(Exception):
    """A file that could not be written for want of space: one line naming it, exit status 1
    (not bad input: free some space and run the same command again)."""

    def __init__(self, path: object) -> None:
        self.path = str(path)
        super().__init__(f"{path}: no space left on device")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path,)
