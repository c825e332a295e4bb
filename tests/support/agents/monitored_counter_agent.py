"""An agent run as in production, not by faultproxy: its stdio MCP servers
(tests/support/agents/counter_mcp_server.py, one per STATE file, open side by side) sit behind
`faultproxy mcp --monitor URL`, started by the official SDK's stdio client. On each it reads the
counter, then bumps it BUMPS times (more than once: a naive agent repeating a write).

    python tests/support/agents/monitored_counter_agent.py [--monitor URL [--auth]] [--bumps N] [--episode-by RULE]
        [--go FILE] STATE [STATE ...]

Without --monitor the shim is plain `faultproxy mcp --`, which finds a proxy by itself when the
agent's environment names an episode and a proxy (proxy/stdio/locate.py).

`--go FILE`: after the reads, wait until FILE exists (the test says when to go on).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.mcp_clients import counter_server, session, shim_parameters  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    flags = [*(["--monitor", args.monitor] if args.monitor else []), *(["--auth"] if args.auth else []),
             *(["--episode-by", args.episode_by] if args.episode_by else [])]
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(session(shim_parameters(
            counter_server(state), *flags, "--name", f"counter-{n}"))) for n, state in enumerate(args.states)]
        for client in clients:
            await client.call_tool("read_counter", {})
        while args.go and not args.go.exists():
            await asyncio.sleep(0.02)
        for client in clients:
            for _ in range(args.bumps):
                result = await client.call_tool("bump", {"by": 1})
    print(f"counter: {result.content[0].text}" if args.bumps else "read")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--monitor", default="")
    parser.add_argument("--auth", action="store_true")
    parser.add_argument("--bumps", type=int, default=1)
    parser.add_argument("--episode-by")
    parser.add_argument("--go", type=Path)
    parser.add_argument("states", nargs="+", type=Path)
    asyncio.run(main(parser.parse_args()))
