"""Parsing and running one `faultproxy` command line, whichever parser holds the command
(the full one in cli/main.py, or entry.py's for the commands that only read files)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from faultproxy.formats.errors import DiskFull, UserError
from faultproxy.formats.logs import configure_logging

EXIT_DISK_FULL, EXIT_BAD_INPUT = 1, 2


def new_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The top-level parser and its subcommands, before any command is registered."""
    parser = argparse.ArgumentParser(prog="faultproxy", description="Chaos proxy and reliability harness for AI agents.")
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv) with `parser` and run the command's handler; bad input is
    one line and exit status 2."""
    options, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(options)
    if command is not None:
        _take_command(parser, args, command)
    configure_logging(json_lines=getattr(args, "log_json", False))
    try:
        return handler_of(args)(args)
    except UserError as error:
        print(f"faultproxy: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DiskFull as error:  # what was written is whole: free space and run the same command again
        print(f"faultproxy: {error}", file=sys.stderr)
        return EXIT_DISK_FULL
    except KeyboardInterrupt:
        return 130


def handler_of(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The command's handler; one named "module:function" (cli/evaluate.py's) is imported only now,
    for the command that runs, so parsing and --help stay light."""
    handler = args.handler
    if isinstance(handler, str):
        module, _, name = handler.partition(":")
        handler = getattr(importlib.import_module(module), name)
    return handler


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """faultproxy's own arguments, and the command after the first `--`, verbatim.

    An agent or server command may hold a `--` of its own (`python agent.py -- server ...`,
    `uv run -- ...`); argparse would read what follows it as faultproxy's options, so every
    command that takes one is cut off here, before argparse sees it."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _take_command(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str]) -> None:
    dest = next((name for name in ("agent", "server") if hasattr(args, name)), None)
    if dest is None:
        parser.error(f"faultproxy {args.command} takes no command after --")
    # argparse's REMAINDER may already hold options that came after a positional (`replay
    # STORE --parallel 2`): they stay in front, for the command to parse again.
    setattr(args, dest, [*getattr(args, dest), "--", *command])
