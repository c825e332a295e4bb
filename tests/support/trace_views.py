"""Views of a trace: the one trace a folder holds, and for comparing runs, what the agent got per
exchange and which fault did it."""

from __future__ import annotations

from pathlib import Path

from faultproxy.formats.trace import read_trace


def trace_lines(flows: Path) -> list[dict]:
    """The lines of the one trace in `flows`, as written (a second trace fails the unpacking)."""
    [path] = flows.iterdir()
    return list(read_trace(path))


def client_view(trace: Path) -> list[tuple]:
    """What the agent got per exchange, and which fault did it: must be equal live and replayed."""
    view = []
    for line in read_trace(trace):
        client, fault = line["client"], line["fault"] or {}
        events = [e for _, e in client.get("sse") or ()]
        view.append((line["seq"], line["request"]["method"], line["request"]["url"].split("?")[0],
                     client["outcome"], client["status"], client.get("body"), events,
                     fault.get("rule"), fault.get("delivered"), (line["upstream"] or {}).get("status")))
    return view
