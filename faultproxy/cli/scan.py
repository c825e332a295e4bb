"""`faultproxy scan PATH...`: is any secret left in a run directory or a replay store?

    faultproxy scan runs/response_lost --secret-env OPENAI_API_KEY --secret "$PLANTED"

Reads every file under each PATH and reports each place that holds a planted secret (a value given
with --secret, or the value of a --secret-env variable) or a well-known credential shape
(`Bearer ...`, `sk-...`, `AIza...`, ...): in the text as written, inside base64 (a whole body, a
string field, a HAR body stored as `encoding: base64`, binary included) and inside gzip (a gzip
file, gzip in base64), as formats/encoded.py opens them; in what those hold, also a value for a
secret-named assignment (`api_key=...`), as the redactor masks them there. It never prints the secret itself.
Exit 0: clean; 1: found; 2: bad input, including a --secret-env variable that is not set (a scan
that cannot look must not say clean). Run it before uploading run directories or stores as CI
artifacts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from faultproxy.formats.encoded import base64_forms, gunzip, openings
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import MASK, Redactor
from faultproxy.formats.secret_names import SHAPES, secret_assignments

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
    unset = [name for name in args.secret_env if not os.environ.get(name)]
    if unset:  # a scan that cannot look must not say clean
        raise UsageError(f"--secret-env {unset[0]}: no such variable is set here, so there is nothing to look for")
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
    """`FILE:LINE: what` for each secret left under `path` (a folder, walked, or one file); a gzip
    file is read as its content (`FILE (gzip):LINE: what`)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    encoded = [base64_forms(value) for value in secrets]
    for file in files:
        data, name = file.read_bytes(), str(file)
        opened = gunzip(data)
        if opened is not None:
            data, name = opened[0], f"{file} (gzip)"
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            for what in dict.fromkeys(_secrets_in(line, secrets, encoded)):
                yield f"{name}:{number}: {what}"


def _secrets_in(line: str, secrets: list[str], encoded: list[set[str]]) -> Iterator[str]:
    for index, value in enumerate(secrets, 1):
        if value in line:
            yield f"planted secret #{index} (of {len(secrets)})"
        elif any(form in line for form in encoded[index - 1]):
            yield f"planted secret #{index} (of {len(secrets)}), base64-encoded"
    for match in SHAPES.finditer(line):
        yield f"a credential shaped like {match.group(0)[:6]}..."
    for run, data in openings(line):
        how = "base64-encoded and gzipped" if run.gzipped else "base64-encoded"
        for index, value in enumerate(secrets, 1):
            if value.encode("utf-8") in data:
                yield f"planted secret #{index} (of {len(secrets)}), {how}"
        text = data.decode("utf-8", "replace")
        for match in SHAPES.finditer(text):
            yield f"a credential shaped like {match.group(0)[:6]}..., {how}"
        for name, _, _ in secret_assignments(text, MASK):
            yield f"a value for the secret-named {name!r}, {how}"
