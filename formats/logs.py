"""structlog set-up: one structured event per line on stderr (JSON, or readable for a terminal)."""

from __future__ import annotations

import sys
from typing import TextIO

import structlog


def configure_logging(json_lines: bool = False, file: TextIO = sys.stderr) -> None:
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=file.isatty())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=False,  # the runner re-points logging at its run directory
    )
