"""prompt_injection: an instruction planted in a tool's answer. An MCP tool result (JSON-RPC
`result.content`, over HTTP as JSON or SSE, or over stdio) gets it as one more text item; any
other JSON answer has it appended to the string fields at `at` (default: every string field at
the top level). The trace line's fault facts carry the episode's canary, where it was planted and
the target, which the evaluator's `injection_followed` check reads."""

from __future__ import annotations

import copy
from typing import Any

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, replace_body, rewritten_documents
from faultproxy.proxy.faults.schema_drift import first_of_type, path_targets
from faultproxy.scenarios.faults import prompt_injection
from faultproxy.scenarios.faults.prompt_injection import CANARY_FIELD, canary
from mitmproxy import http


class PromptInjectionFault(Fault):
    kind = prompt_injection.KIND
    nowhere = "no string field or MCP tool result to plant into"

    def buffers_events(self) -> bool:
        return True

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None or not 200 <= flow.response.status_code < 300:
            ex.detail = "not delivered: the upstream's answer is not a successful one"
            return
        mark = canary(self.seed, ex.episode.key)
        instruction = self.params["text"].replace(CANARY_FIELD, mark)
        places: list[str] = []

        def plant(document: Any) -> Any:
            planted, where = self.plant(document, instruction)
            places.extend(where)
            return planted

        body = rewritten_documents(flow, plant)
        if body is None:
            ex.detail = "not delivered: the answer is not JSON"
            return
        if not places:
            ex.detail = f"not delivered: {self.nowhere}"
            return
        replace_body(flow, body)
        ex.facts = {"canary": mark, "planted_at": places, "target": self.params["target"]}
        ex.deliver(f"instruction planted in {', '.join(places)}")

    def plant(self, document: Any, instruction: str) -> tuple[Any, list[str]]:
        """The answer's document with the instruction planted (on a copy), and where it went."""
        return plant_instruction(document, instruction, self.params["at"])


def plant_instruction(document: Any, instruction: str, at: str | None) -> tuple[Any, list[str]]:
    """The document with the instruction planted (on a copy), and where it went."""
    document = copy.deepcopy(document)
    if isinstance(document, dict) and document.get("jsonrpc") == "2.0":  # MCP: only a tool result takes it
        result = document.get("result")
        if not (isinstance(result, dict) and isinstance(result.get("content"), list)):
            return document, []
        result["content"].append({"type": "text", "text": instruction})
        return document, ["MCP tool result content"]
    if at is None:
        targets = [(document, key) for key, value in document.items() if isinstance(value, str)] \
            if isinstance(document, dict) else []
        if not targets and (first := first_of_type(document, (), "string")) is not None:
            targets = [first]
    else:
        segments = tuple(at.split("."))
        targets = [(parent, key) for parent, key in path_targets(document, segments[:-1], segments[-1])
                   if _holds_string(parent, key)]
    for parent, key in targets:
        parent[key] = f"{parent[key]}\n\n{instruction}"
    return document, [str(key) for _, key in targets]


def _holds_string(parent: Any, key: Any) -> bool:
    if isinstance(parent, dict):
        return isinstance(parent.get(key), str)
    return isinstance(parent, list) and isinstance(key, int) and key < len(parent) and isinstance(parent[key], str)
