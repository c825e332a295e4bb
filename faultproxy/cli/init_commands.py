"""What `faultproxy init` does (its options are in cli/init.py)."""

from __future__ import annotations

import argparse
import sys

from faultproxy.evaluator.proposals import observe_run, starter_files, write_starter
from faultproxy.formats.episode_causes import NO_TRAFFIC, NO_TRAFFIC_ADVICE

EXIT_NO_TRAFFIC = 1  # nothing to propose from: not bad input, but nothing was done


def cmd_init(args: argparse.Namespace) -> int:
    seen = observe_run(args.run_dir)
    if not seen.total:
        print(f"faultproxy: {args.run_dir}: no traffic reached the proxy in {seen.episodes} episode(s) "
              f"({NO_TRAFFIC}): {NO_TRAFFIC_ADVICE}; nothing written", file=sys.stderr)
        return EXIT_NO_TRAFFIC
    written, kept = write_starter(starter_files(seen, args.to), args.to)
    for path in written:
        print(f"wrote {path}")
    for path in kept:
        print(f"kept {path} (it exists; init never overwrites)")
    print(f"from {seen.total} request(s) in {seen.episodes} episode(s): {len(seen.endpoints)} endpoint(s), "
          f"{len(seen.tools)} MCP tool(s), model APIs {', '.join(map(str, seen.model_apis)) or 'none'}; "
          f"next: {args.to / 'README.md'}")
    return 0
