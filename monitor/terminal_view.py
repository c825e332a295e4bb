"""The monitor's live terminal view (rich): episodes open and judged, failures by severity, the
newest causes and requests per second. Off when stderr is not a terminal or --quiet is given."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

REFRESH_S = 1.0


class MonitorView:
    def __init__(self, monitor: Any, enabled: bool) -> None:
        self.monitor = monitor
        console = Console(stderr=True)
        self._live = Live(console=console, auto_refresh=False, transient=False) \
            if enabled and console.is_terminal else None
        self._last = (time.monotonic(), 0)
        self._rate = 0.0

    def __enter__(self) -> MonitorView:
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self.refresh(force=True)
            self._live.stop()

    def refresh(self, force: bool = False) -> None:
        if self._live is None:
            return
        now, seen = time.monotonic(), self.monitor.sessions.requests
        then, before = self._last
        if now - then < REFRESH_S and not force:
            return
        self._rate, self._last = (seen - before) / max(now - then, 1e-9), (now, seen)
        self._live.update(self.render(), refresh=True)

    def render(self) -> Group:
        m = self.monitor
        counts, severities = m.counts, m.severities
        table = Table.grid(padding=(0, 2))
        table.add_row("episodes open", str(m.open_episodes), "requests/s", f"{self._rate:.1f}")
        table.add_row("judged", f"[green]{counts['pass']} pass[/] [red]{counts['fail']} fail[/] "
                                f"[yellow]{counts['incomplete']} incomplete[/]",
                      "passed through", str(m.sessions.passed_through))
        table.add_row("failed checks", " ".join(f"{s} {severities[s]}" for s in ("high", "medium", "low")), "", "")
        newest = [Text(f"  {cause}", overflow="ellipsis", no_wrap=True) for cause in m.newest]
        return Group(Text("faultproxy monitor", style="bold"), table, *([Text("newest failures:")] + newest
                                                                       if newest else []))
