"""`faultproxy scan PATH...`: is any secret left in a run directory or a replay store?

    faultproxy scan runs/response_lost --secret-env OPENAI_API_KEY --secret "$PLANTED"

Reads every file under each PATH and reports each place that holds a planted secret (a value given
with --secret, or the value of a --secret-env variable) or a well-known credential shape
(`Bearer ...`, `sk-...`, `AIza...`, ...). It never prints the secret itself. Exit 0: clean;
1: found; 2: bad input. Run it before uploading run directories or stores as CI artifacts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.secret_names import SHAPES

EXIT_CLEAN, EXIT_FOUND = 0, 1


def register(subparsers: Any) -> None:
    scan = subparsers.add_parser(
        "scan", help="Exit 1 if a run directory or replay store still holds a secret.",
        description="Report every planted (--secret, --secret-env) or well-known-shaped secret left in the files "
                    "under PATH. Exit 0: clean; 1: found; 2: bad input.")
    scan.add_argument("paths", type=Path, nargs="+", metavar="PATH", help="Run directories, replay stores, files.")
    scan.add_argument("--secret", action="append", default=[], metavar="VALUE", help="A secret value to look for.")
    scan.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                      help="An environment variable whose value is a secret to look for.")
    scan.set_defaults(handler=cmd_scan)


def cmd_scan(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        raise UsageError(f"{', '.join(missing)}: no such file or directory")
    planted = Redactor(args.secret, source="--secret").with_values(Redactor.from_env(args.secret_env).secrets)
    count = 0
    for path in args.paths:
        for finding in scan(path, sorted(planted.secrets)):
            print(finding)
            count += 1
    where = ", ".join(str(p) for p in args.paths)
    print(f"{where}: {'clean' if not count else f'{count} secret(s) found'}", file=sys.stderr)
    return EXIT_FOUND if count else EXIT_CLEAN


def scan(path: Path, secrets: list[str]) -> Iterator[str]:
    """`FILE:LINE: what` for each secret left under `path` (a folder, walked, or one file)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        text = file.read_bytes().decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            for what in _secrets_in(line, secrets):
                yield f"{file}:{number}: {what}"


def _secrets_in(line: str, secrets: list[str]) -> Iterator[str]:
    for index, value in enumerate(secrets, 1):
        if value in line:
            yield f"planted secret #{index} (of {len(secrets)})"
    for match in SHAPES.finditer(line):
        yield f"a credential shaped like {match.group(0)[:6]}..."
