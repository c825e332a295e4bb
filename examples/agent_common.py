"""Plumbing both demo agents share: the task, the shop's tools, one model turn, the chat loop, the output.

What makes an agent naive or careful (retries, idempotency keys, re-reads, validation) is not here:
it lives in naive_agent.py and careful_agent.py, so the two can be read side by side.

Environment: FAULTPROXY_TASK (a JSON file with "prompt") or FAULTPROXY_PROMPT or --prompt;
OPENAI_BASE_URL and OPENAI_API_KEY (read by the SDK); FAULTPROXY_MODEL (default demo-large);
FAULTPROXY_SEED; SHOP_URL; FAULTPROXY_OUTPUT (where to write the final answer as JSON).
Clients are the SDK's and httpx's defaults, so HTTP(S)_PROXY and SSL_CERT_FILE apply.

--chat (for `faultproxy run --chat stdio`): the task is the user's first line on stdin, the agent
asks the user on stdout (ask_user) and reads the answer on the next line, and its answer is its
last turn, {"role": "assistant", "content": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import httpx
import yaml
from openai import OpenAI

SYSTEM = (
    "You are a customer-support agent for a small online shop. Use the tools to look things up and to act. "
    'When you are done, reply with only a JSON object: {"answer": string, "confidence": number from 0 to 1, '
    '"escalate": boolean, "reason": string}. Escalate when the request cannot or should not be carried out.'
)
SPECS = {t["name"]: t for t in yaml.load(  # the C loader, where there is one, saves each run ~25 ms
    Path(__file__).with_name("shop_api.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["tools"]}
MAX_TURNS = 40
RPC_CALLER_ERRORS = {-32700, -32600, -32601, -32602}  # parse error, invalid request, no such method, bad params


@dataclass
class Config:
    prompt: str
    model: str
    seed: int | None
    shop_url: str
    mcp: bool
    stream: bool
    chat: bool = False


def configure(description: str) -> Config:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", help="the task, when neither FAULTPROXY_TASK nor FAULTPROXY_PROMPT is set")
    parser.add_argument("--mcp", action="store_true", help="call the shop's tools over MCP (SHOP_URL/mcp), not REST")
    parser.add_argument("--stream", action="store_true", help="use streaming chat completions")
    parser.add_argument("--chat", action="store_true", help="talk with the user over stdin and stdout")
    args = parser.parse_args()
    if args.chat:
        prompt = sys.stdin.readline().strip()  # the user's first turn
    elif os.environ.get("FAULTPROXY_TASK"):
        episode = json.loads(Path(os.environ["FAULTPROXY_TASK"]).read_text())
        prompt = episode.get("prompt") or episode["task"]["prompt"]  # the variant's wording, else the original
    else:
        prompt = os.environ.get("FAULTPROXY_PROMPT") or args.prompt
    if not prompt:
        parser.error("no task: set FAULTPROXY_TASK or FAULTPROXY_PROMPT, or pass --prompt")
    if not os.environ.get("SHOP_URL"):
        parser.error("set SHOP_URL to the shop (python -m examples.world prints it)")
    seed = os.environ.get("FAULTPROXY_SEED")
    return Config(prompt=prompt, model=os.environ.get("FAULTPROXY_MODEL", "demo-large"),
                  seed=int(seed) if seed else None, shop_url=os.environ["SHOP_URL"],
                  mcp=args.mcp, stream=args.stream, chat=args.chat)


def openai_client(max_retries: int) -> OpenAI:
    # The demo model ignores the key; a real endpoint will say what it thinks of this one.
    return OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "no-key", max_retries=max_retries, timeout=30)


# ---------------------------------------------------------------- the shop


@dataclass
class Reply:
    status: int  # 0: no response at all
    body: Any
    headers: dict[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class Shop:
    """One attempt at one shop operation, over REST or MCP. Retry policy is the agent's business."""

    def __init__(self, url: str, mcp: bool):
        self.url, self.mcp = url.rstrip("/"), mcp
        self.http = httpx.Client(timeout=15)
        self.rpc_id = 0
        if mcp:
            self._rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "faultproxy-demo-agent", "version": "1.0"}})
            self.http.post(self.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def tools(self) -> list[dict]:
        """OpenAI tool definitions. The idempotency key is the agent's to set, so the model never sees it."""
        if self.mcp:
            listed = [(t["name"], t["description"], t["inputSchema"]) for t in self._rpc("tools/list", {})["tools"]]
        else:
            listed = [(s["name"], s["description"], {"type": "object", "properties": s.get("params", {}),
                                                      "required": s.get("required", [])}) for s in SPECS.values()]
        tools = []
        for name, description, schema in listed:
            props = {k: v for k, v in schema.get("properties", {}).items() if k != "idempotency_key"}
            parameters = {"type": "object", "properties": props, "required": schema.get("required", [])}
            tools.append({"type": "function",
                          "function": {"name": name, "description": description, "parameters": parameters}})
        return tools

    def send(self, name: str, args: dict, idempotency_key: str | None = None) -> Reply:
        """Raises httpx.TransportError when no response arrives."""
        if name not in SPECS:
            return Reply(404, {"error": {"code": "unknown_tool", "message": f"There is no tool {name!r}."}}, {})
        if self.mcp:
            return self._mcp_call(name, args, idempotency_key)
        spec, rest = SPECS[name], dict(args)
        path = re.sub(r"\{(\w+)\}", lambda m: quote(str(rest.pop(m.group(1), "")), safe=""), spec["path"])
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"json": rest} if spec["method"] in ("POST", "PATCH") else {"params": rest}
        r = self.http.request(spec["method"], self.url + path, headers=headers, **body)
        return Reply(r.status_code, _parse(r.text), _headers(r))

    def _mcp_call(self, name: str, args: dict, idempotency_key: str | None) -> Reply:
        arguments = args | ({"idempotency_key": idempotency_key} if idempotency_key else {})
        r = self.http.post(self.url + "/mcp", json=self._request("tools/call", {"name": name, "arguments": arguments}),
                           headers={"Accept": "application/json, text/event-stream"})
        msg = _parse(r.text)
        if r.status_code != 200:
            return Reply(r.status_code, msg, _headers(r))
        if not isinstance(msg, dict) or not isinstance(msg.get("result"), dict):
            # JSON-RPC's codes for a malformed call are the caller's fault; any other failure, the server's
            error = msg.get("error") if isinstance(msg, dict) else None
            status = 400 if isinstance(error, dict) and error.get("code") in RPC_CALLER_ERRORS else 502
            return Reply(status, error or msg, _headers(r))
        result = msg["result"]
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"]
        body = _parse("".join(texts))
        if result.get("isError"):  # the demo shop says which HTTP status it means; without one, a server failure
            status = body.pop("http_status", 502) if isinstance(body, dict) else 502
            return Reply(status, body, _headers(r))
        return Reply(200, body, _headers(r))

    def _request(self, method: str, params: dict) -> dict:
        self.rpc_id += 1
        return {"jsonrpc": "2.0", "id": self.rpc_id, "method": method, "params": params}

    def _rpc(self, method: str, params: dict) -> Any:
        r = self.http.post(self.url + "/mcp", json=self._request(method, params))
        r.raise_for_status()
        return r.json()["result"]


def _headers(r: httpx.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in r.headers.items()}


def tool_message(reply: Reply) -> str:
    """What the model is told a tool returned: the body, or the error with its HTTP status."""
    if reply.ok:
        return reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
    error = reply.body.get("error", reply.body) if isinstance(reply.body, dict) else reply.body
    return json.dumps({"http_status": reply.status or None, "error": error})


# ---------------------------------------------------------------- the model


def complete(client: OpenAI, cfg: Config, messages: list[dict], tools: list[dict]) -> tuple[dict, str | None]:
    """One model turn: the assistant message (as it goes into the history, with `refusal` when the
    model declined) and its finish_reason.

    A stream that ends early yields what arrived and finish_reason None; the agent decides what that means.
    """
    kwargs: dict[str, Any] = {"model": cfg.model, "messages": messages, "tools": tools, "temperature": 0.7}
    if cfg.seed is not None:
        kwargs["seed"] = cfg.seed
    if not cfg.stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return _assistant(choice.message.content, calls, choice.message.refusal), choice.finish_reason
    content: list[str] = []
    refusal: list[str] = []
    calls_by_index: dict[int, list[str]] = {}
    finish = None
    with client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                content.append(choice.delta.content or "")
                refusal.append(choice.delta.refusal or "")
                for delta in choice.delta.tool_calls or []:
                    slot = calls_by_index.setdefault(delta.index, ["", "", ""])
                    slot[0] = delta.id or slot[0]
                    if delta.function:
                        slot[1] += delta.function.name or ""
                        slot[2] += delta.function.arguments or ""
                finish = choice.finish_reason or finish
    calls = [tuple(calls_by_index[i]) for i in sorted(calls_by_index)]
    return _assistant("".join(content) or None, calls, "".join(refusal) or None), finish


def _assistant(content: str | None, calls: list[tuple], refusal: str | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal:  # the model declined (the Chat API says so apart from the content)
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return message


# ---------------------------------------------------------------- the loop and the output


def run(ask: Callable[[list[dict]], dict], use_tool: Callable[[str, str], str], prompt: str) -> dict:
    """Ask the model, run the tools it calls, until it answers."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    for _ in range(MAX_TURNS):
        message = ask(messages)
        messages.append(message)
        if not message.get("tool_calls"):
            return parse_answer(message.get("content"))
        for call in message["tool_calls"]:
            result = use_tool(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise RuntimeError(f"no answer after {MAX_TURNS} turns")


def parse_answer(content: str | None) -> dict:
    """The model's final JSON, or its plain text as the answer."""
    parsed = _parse(content or "")
    if isinstance(parsed, dict) and "answer" in parsed:
        return {"answer": parsed["answer"], "confidence": float(parsed.get("confidence", 0.5)),
                "escalate": bool(parsed.get("escalate", False)), "reason": str(parsed.get("reason", ""))}
    return {"answer": content, "confidence": 0.5, "escalate": False, "reason": ""}


def ask_user(question: str) -> bool:
    """Ask the user (--chat) and read their answer: did they say yes?"""
    print(json.dumps({"role": "assistant", "content": question}), flush=True)
    return re.match(r"\s*(yes|yeah|sure|ok|okay|go ahead|please do)\b", sys.stdin.readline(), re.I) is not None


def finish(output: dict, code: int = 0, chat: bool = False) -> None:
    if os.environ.get("FAULTPROXY_OUTPUT"):
        Path(os.environ["FAULTPROXY_OUTPUT"]).write_text(json.dumps(output))
    if chat:  # the answer is the agent's last turn
        output = {"role": "assistant", "content": str(output.get("answer")), **output}
    print(json.dumps(output), flush=True)
    sys.exit(code)
