"""A live model session (OpenAI Realtime, Gemini Live) read as the exchanges the checks know.

The proxy writes a WebSocket session as one trace line: its upgrade request, with every message
(formats.trace, `websocket`). For a session whose upgrade path names a live model API
(formats.model_apis.live_api_of_session), `session_lines` derives trace lines of the ordinary
shape from it, so that every check reads them as it reads HTTP traffic:

- a model call per turn: from the client event that asks for it (`response.create`) to the
  server event that ends it (`response.done`), its server events as the answer's SSE; a turn no
  client event asked for (the server's voice activity detection answered audio) starts at the
  server's own start of a response (`response.created`; Gemini's first `serverContent` or
  `toolCall` after the last turn ended), and has no request body; a turn
  the session closed before its end is a cut answer (client outcome `cut`). The fault that fired
  on a message of the turn (the last delivered one, if several) is the turn's fault, so a close
  mid-answer is a fault of the model call it cut; a message held behind an injection is read once,
  in its `resent` copy (the one the client got), the held one keeping its fault;
- a tool call per function call the model made, `POST <upgrade path>` with the arguments as its
  body: named by tool patterns as an MCP tool is (`POST */tools/refund_order`, tried on
  `<path>/tools/<name>`), and answered (committed) when the client sent its output back, unless
  the output is a JSON object with an `error` field; with no output it may have been carried out.

Derived lines carry `session` ({kind: model_call | function_call, api, model, name, call_id,
failed, faults}): `model` when the session says it (formats.model_apis.live_model), `faults`
every fault that fired on a message of the turn (a dropped one included), or on the messages
that carried the call and its output, each with its time `at`. The upgrade line itself is then
a protocol exchange (neither a model call nor a tool call).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from faultproxy.formats.model_apis import (LiveApi, LiveFunctionCall, live_api_of_session, live_function_calls,
                                           live_function_outputs, live_model, live_server_start,
                                           live_turn_edge)


def session_api(line: Mapping[str, Any]) -> LiveApi | None:
    """The live API of a trace line's WebSocket session, or None (no session, or not a model's)."""
    if not isinstance(line.get("websocket"), dict):
        return None
    return live_api_of_session(str((line.get("request") or {}).get("url") or ""))


def session_lines(line: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model calls and function calls of the line's live session, as trace lines; [] for any
    other line."""
    api = session_api(line)
    if api is None:
        return []
    messages = [m for m in line["websocket"].get("messages") or () if isinstance(m, dict)]
    # as the other side got them; a dropped message never arrived (no event), but its fault belongs to its turn
    events = [(m, None if m.get("dropped") else _json(m.get("sent", m.get("text")))) for m in messages]
    derived = _turns(line, api, events) + _calls(line, api, events)
    model = live_model(api, str((line.get("request") or {}).get("url") or ""), (e for _, e in events))
    for one in derived:
        one["session"] |= {"model": model} if model else {}
    return derived


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _opened(line: Mapping[str, Any]) -> float:
    """When the session started: message offsets count from the upgrade's answer, not its request."""
    return float(line.get("started") or 0) + float(line.get("response_after_s") or 0)


def _faults(line: Mapping[str, Any], messages: list[dict]) -> list[dict[str, Any]]:
    return [m["fault"] | {"at": _opened(line) + m["t"]} for m in messages if isinstance(m.get("fault"), dict)]


def _derived(line: Mapping[str, Any], t: float, kind: str, api: LiveApi, **fields: Any) -> dict[str, Any]:
    request = line.get("request") or {}
    return {"seq": line.get("seq"), "episode": line.get("episode"), "started": _opened(line) + t,
            "forwarded": True, "fault": None, "session": {"kind": kind, "api": str(api)},
            "request": {"method": "POST", "url": request.get("url"), "headers": [], "body": None}} | fields


def _turns(line: Mapping[str, Any], api: LiveApi, events: list[tuple[dict, Any]]) -> list[dict[str, Any]]:
    """One model call per turn; messages between turns belong to the turn that follows."""
    turns: list[dict[str, Any]] = []
    pending: list[dict] = []  # messages since the last turn ended
    current: dict[str, Any] | None = None
    for message, event in events:
        client = message.get("from") == "client"
        if current is None:
            # a server that starts an answer no client event asked for (voice activity detection)
            # started the turn even when the proxy withheld that start from the client; a `resent`
            # message is the copy of a held one, whose start was read where it was held
            starts = live_turn_edge(api, event, "client") if client else not message.get("resent") \
                and live_server_start(api, event if event is not None else _json(message.get("text")))
            if not starts:
                pending.append(message)
                continue
            current = {"start": message, "messages": pending, "sse": []}
            pending = []
        current["messages"].append(message)
        if client or message.get("held"):  # a held copy is read where the client got it: its `resent` copy
            continue
        if event is not None:
            current["sse"].append([round(message["t"] - current["start"]["t"], 6), "data: " + json.dumps(event)])
        if live_turn_edge(api, event, "server"):
            turns.append(_turn_line(line, api, current, message))
            current = None
    if current is not None:  # the session ended mid-turn
        current["messages"] += pending
        turns.append(_turn_line(line, api, current, None))
    return turns


def _turn_line(line: Mapping[str, Any], api: LiveApi, turn: dict[str, Any], end: dict | None) -> dict[str, Any]:
    start = turn["start"]
    faults = [m["fault"] for m in turn["messages"] if isinstance(m.get("fault"), dict)]
    fault = next((f for f in reversed(faults) if f.get("delivered")), faults[-1] if faults else None)
    close = line["websocket"].get("close") or {}
    last_t = end["t"] if end else (close.get("t") or turn["messages"][-1]["t"])
    derived = _derived(line, start["t"], "model_call", api, duration_s=round(max(0.0, last_t - start["t"]), 6),
                       fault=fault, upstream={"status": 200, "headers": [], "sse": turn["sse"]})
    # the client's event that asked for the turn; none when the server started it
    derived["request"]["body"] = start.get("text") if start.get("from") == "client" else None
    derived["session"]["faults"] = _faults(line, turn["messages"])
    if end is not None:
        return derived | {"client": {"outcome": "response", "status": 200}}
    why = f"the session closed mid-answer (code {close.get('code')}, by {close.get('by')})" if close \
        else "the episode ended mid-answer"
    return derived | {"client": {"outcome": "cut", "status": 200}, "error": why}


def _calls(line: Mapping[str, Any], api: LiveApi, events: list[tuple[dict, Any]]) -> list[dict[str, Any]]:
    """One tool call per function call (by call id), answered by the client's output for it."""
    calls: dict[str, tuple[dict, LiveFunctionCall]] = {}
    outputs: dict[str, tuple[dict, Any]] = {}
    for message, event in events:
        if message.get("from") == "client":
            outputs.update((call_id, (message, output)) for call_id, output in live_function_outputs(api, event)
                           if call_id in calls and call_id not in outputs)
            continue
        for call in live_function_calls(api, event):
            if call.call_id not in calls:
                calls[call.call_id] = (message, call)
    lines = []
    for call_id, (called, call) in calls.items():
        derived = _derived(line, called["t"], "function_call", api, duration_s=0.0)
        derived["session"] |= {"name": call.name, "call_id": call_id}
        derived["request"]["body"] = call.arguments
        if call_id not in outputs:
            derived["session"]["faults"] = _faults(line, [called])
            lines.append(derived | {"upstream": None, "client": {"outcome": "error", "status": None},
                                    "error": "the client sent no output for this function call"})
            continue
        answered, output = outputs[call_id]
        derived["session"]["faults"] = _faults(line, [called, answered])
        derived["duration_s"] = round(answered["t"] - called["t"], 6)  # from the model's call to the client's output
        text = output if isinstance(output, str) else json.dumps(output)
        parsed = _json(text)
        derived["session"]["failed"] = isinstance(parsed, dict) and "error" in parsed
        lines.append(derived | {"upstream": {"status": 200, "headers": [], "body": text},
                                "client": {"outcome": "response", "status": 200}})
    return lines
