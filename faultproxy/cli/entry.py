"""The `faultproxy` command's entry point. The commands that only read files (report, gate,
scan, init; and action, until it runs a command that needs more) start without loading the proxy
(mitmproxy) or the runner, so `faultproxy report` is quick and runs where mitmproxy cannot be
imported; every other command loads the full command line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from faultproxy.cli import action, evaluate, init, scan
from faultproxy.cli.dispatch import dispatch, new_parser

READING_COMMANDS = frozenset({"report", "gate", "scan", "init", "action"})


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] and args[0] in READING_COMMANDS:
        return dispatch(reading_parser(), args)
    return importlib.import_module("faultproxy.cli.main").main(args)


def reading_parser():
    """The parser of the file-reading commands alone (the same registrations as the full one)."""
    parser, commands = new_parser()
    evaluate.register(commands)
    scan.register(commands)
    init.register(commands)
    action.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
