"""A stdio JSON-RPC server that misbehaves as real ones do, written by hand so the bytes are
exact: tools/call `noisy` prints a line that is not JSON-RPC on stdout and a warning on stderr
before answering; `big` answers with N MB of text (arguments.mb); `die` exits with status 3
without answering; `hang` is never answered. Everything else gets an empty result."""

from __future__ import annotations

import json
import sys


def answer(rpc_id, result) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue  # a notification, or the client's answer to us
    params = message.get("params") or {}
    tool = params.get("name")
    if tool == "noisy":
        print("loading the noisy tool... done", flush=True)  # the classic stdout corruption
        print("warning: noisy tool is deprecated", file=sys.stderr, flush=True)
        answer(message["id"], {"content": [{"type": "text", "text": "quiet now"}]})
    elif tool == "big":
        text = "x" * int(params["arguments"]["mb"] * 1024 * 1024)
        answer(message["id"], {"content": [{"type": "text", "text": text}]})
    elif tool == "die":
        sys.exit(3)
    elif tool == "hang":
        continue
    else:
        answer(message["id"], {})
