"""OpenTelemetry export: judged episodes as spans (GenAI and MCP conventions) over OTLP/HTTP.

It sits beside the replay store, above the proxy and the evaluator, whose trace lines and
verdicts it reads; the runner, the monitor and the CLI feed it after each episode is judged and
logged, so it never runs on the proxy's hot path.

What others import: `OtelExport` (start, feed, close), `ExportSummary` (what it says when
closed), `resolve_endpoint` (--otlp or the OTEL_* environment) from here, and `names` (every
attribute and value it exports) as `from faultproxy.otel import names`. The rest is its own:
export (the run's side of the pipe), sender (the exporter process), spans (an episode as a span
tree), genai (model calls in GenAI terms).
"""

from faultproxy.otel.export import ExportSummary, OtelExport, resolve_endpoint

__all__ = ["ExportSummary", "OtelExport", "resolve_endpoint"]
