"""A rich progress bar with live pass, fail and incomplete counts."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


class RunProgress:
    def __init__(self, planned: int, already: int, counts: Counter, enabled: bool = True) -> None:
        self.counts = counts
        self._progress = Progress(
            TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(),
            TextColumn("[green]{task.fields[passed]} pass [red]{task.fields[failed]} fail "
                       "[yellow]{task.fields[incomplete]} incomplete"),
            TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled, transient=False,
        )
        self._task = self._progress.add_task("run", total=planned, completed=already, **self._fields())

    def _fields(self) -> dict[str, int]:
        return {"passed": self.counts["pass"], "failed": self.counts["fail"], "incomplete": self.counts["incomplete"]}

    def advance(self) -> None:
        self._progress.update(self._task, advance=1, **self._fields())

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
