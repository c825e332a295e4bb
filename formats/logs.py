"""structlog set-up: one structured event per line on stderr (JSON, or readable for a terminal).

Every event passes the run's Redactor before it is rendered: a log file is a file on disk too.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

from faultproxy.formats.redact import Redactor


def configure_logging(json_lines: bool = False, file: TextIO = sys.stderr, redactor: Redactor | None = None) -> None:
    """Log events to `file`, redacted by `redactor` (by default: secret-named fields and
    well-known key shapes; a run passes its own, which knows the run's secret values)."""
    # Imported here, not at the top: structlog brings rich's traceback and pretty-printer
    # (about 170 ms), which `faultproxy report --help` would otherwise pay before it prints.
    import structlog

    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=file.isatty())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            Redacting(redactor or Redactor()),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=False,  # the runner re-points logging at its run directory
    )


class Redacting:
    """A structlog processor: the event's fields through a Redactor."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        return self.redactor.document(dict(event))
