"""OpenTelemetry export on the command line: `--otlp URL` / `--otlp-content` for the commands that
run or watch episodes (run, sweep, replay, monitor), and `faultproxy export-otel RUN_DIR` for a
finished run.

    faultproxy run --otlp http://localhost:4318 --scenario S -- CMD
    faultproxy export-otel runs/S --otlp http://localhost:6006/v1/traces

Without --otlp, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT decide (and
OTEL_EXPORTER_OTLP_HEADERS adds headers, e.g. a backend's authorization); the spans and the
module that sends them are otel/export.py's. The export never changes a run's exit status;
export-otel exits 1 when some spans did not reach the collector.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultproxy.cli.options import check_secret_env
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.rundir import read_run
from faultproxy.otel import names as N
from faultproxy.otel import ExportSummary, OtelExport, resolve_endpoint

EXIT_NOT_DELIVERED = 1


def add_otlp_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--otlp", metavar="URL",
                        help="Export episodes, exchanges, faults and verdicts as OpenTelemetry spans to this "
                             "OTLP/HTTP collector (e.g. http://localhost:4318; /v1/traces is added unless given). "
                             "Default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT, if set.")
    parser.add_argument("--otlp-content", action="store_true",
                        help="Also export message content (gen_ai.input.messages, ...), redacted as traces are.")


def open_export(args: argparse.Namespace, redactor: Redactor, attributes: Mapping[str, Any],
                wait_for_room: bool = False) -> OtelExport | None:
    """The export the arguments and environment ask for, or None."""
    endpoint = resolve_endpoint(getattr(args, "otlp", None))
    if endpoint is None:
        if getattr(args, "otlp_content", False):
            raise UsageError("--otlp-content needs a collector: --otlp URL, or OTEL_EXPORTER_OTLP_ENDPOINT")
        return None
    return OtelExport(endpoint, redactor=redactor, content=args.otlp_content, attributes=attributes,
                      wait_for_room=wait_for_room)


def close_export(export: OtelExport | None) -> ExportSummary | None:
    """Flush (bounded), print what arrived (when anything was to be sent); the summary."""
    if export is None:
        return None
    summary = export.close()
    if summary.episodes or summary.unexported or summary.lost:
        print(summary.line(), file=sys.stdout if summary.complete else sys.stderr)
    return summary


def run_attributes(mode: str, scenario: str | None, command: Any) -> dict[str, Any]:
    """The root-span attributes every episode of one run shares."""
    shown = shlex.join(command) if isinstance(command, list) else command
    return {N.MODE: mode, N.SCENARIO: scenario, N.COMMAND: shown}


def register(commands: Any) -> None:
    """Add `export-otel` to the faultproxy command's subparsers."""
    parser = commands.add_parser(
        "export-otel", help="Send a finished run's episodes to an OpenTelemetry collector (OTLP/HTTP).",
        description="Export every logged episode of RUN_DIR as one trace: the verdict on the root span, "
                    "model calls as GenAI spans, tool and MCP calls as client spans, faults as events. "
                    "Exit 1 when some spans did not reach the collector.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    add_otlp_options(parser)
    parser.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                        help="Redact this variable's value from what is sent too.")
    parser.set_defaults(handler=cmd_export_otel)


def cmd_export_otel(args: argparse.Namespace) -> int:
    run = read_run(args.run_dir)  # each line upgraded to the current shape
    redactor = Redactor.from_env(check_secret_env(args.secret_env))
    scenario = (run.plan.get("scenario") or {}).get("name")
    export = open_export(args, redactor, run_attributes("export", scenario, run.plan.get("command")),
                         wait_for_room=True)
    if export is None:
        raise UsageError("export-otel: no collector: give --otlp URL, or set OTEL_EXPORTER_OTLP_ENDPOINT")
    try:
        for record in run.episodes:
            if record.get("type") == "episode":
                export.export_logged(args.run_dir, record)
    finally:
        summary = close_export(export)
    return 0 if summary is not None and summary.complete else EXIT_NOT_DELIVERED
