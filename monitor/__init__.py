"""The monitor of live traffic (`faultproxy monitor`): a proxy in front of agents in staging or
production that puts their requests into episodes, judges each as it ends and logs it in a run
directory, so `report`, `freeze` and `replay` work on what it saw.

It is a mode beside the runner, not inside it: it owns a proxy and writes a run directory as a run
does, but starts no agent; the two never import each other. It feeds the OpenTelemetry export.

What others import: `Monitor` (serve until SIGTERM or SIGINT) and `MonitorOptions`, from here.
The rest is its own: live_traffic (sessions into episodes, judging, the log), terminal_view (the
live view on a terminal).
"""

from faultproxy.monitor.live_traffic import Monitor, MonitorOptions

__all__ = ["Monitor", "MonitorOptions"]
