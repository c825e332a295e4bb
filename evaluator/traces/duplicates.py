"""The harness's own duplicate deliveries (duplicate_delivery): did the server commit one?

A trace line whose fault delivered the request a second time keeps the second answer in
`fault.duplicate`. That send was the harness's, never the agent's: it is read as the same request
with that answer, and the server committed it when that answer is a commit of its own — another
resource than the first answer named (evaluator.traces.resources: its id fields, else the answer itself),
so nothing shows the server deduplicated it. The `effects` check reports it; `idempotency` never holds it against the agent.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultproxy.evaluator.traces.trace_parsing import parse_trace
from faultproxy.evaluator.traces.traced import TracedExchange


def committed_duplicates(exchanges: Sequence[TracedExchange]) -> list[str]:
    """One finding per duplicate delivery the server committed."""
    findings = []
    for ex in exchanges:
        duplicate = (ex.fault or {}).get("duplicate")
        if not isinstance(duplicate, dict) or not ex.committed:
            continue
        [second] = parse_trace([{**ex.raw, "upstream": _as_upstream(duplicate)}])
        first, again = ex.resource(), second.resource()
        if not second.committed or again == first:
            continue  # refused, or the same resource again: the server deduplicated it
        how = f"{again} besides {first}"
        what = f"{ex.method} {ex.route}" + (f" {ex.tool_name}" if ex.tool_name else "")
        findings.append(f"the server committed a duplicate delivery of #{ex.seq} {what} ({how}); "
                        "the harness sent the duplicate, not the agent")
    return findings



def _as_upstream(duplicate: dict) -> dict:
    """The duplicate's answer as a trace line's upstream: an event stream (kept whole, as its
    body) read as one SSE event holding all its data lines."""
    streamed = any(name.lower() == "content-type" and "text/event-stream" in str(value)
                   for name, value in duplicate.get("headers") or ())
    if streamed and isinstance(duplicate.get("body"), str):
        return {**{k: v for k, v in duplicate.items() if k != "body"}, "sse": [[0.0, duplicate["body"]]]}
    return duplicate
