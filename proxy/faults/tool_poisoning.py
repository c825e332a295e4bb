"""tool_poisoning: an instruction planted in the tool definitions of an MCP `tools/list` answer;
planted, recorded and judged as prompt_injection's (the same canary and facts)."""

from __future__ import annotations

import copy
import fnmatch
from typing import Any

from faultproxy.proxy.faults.prompt_injection import PromptInjectionFault
from faultproxy.scenarios.faults import tool_poisoning


class ToolPoisoningFault(PromptInjectionFault):
    kind = tool_poisoning.KIND
    nowhere = "no tool definition the rule's `tools` selects in a tools/list answer"

    def plant(self, document: Any, instruction: str) -> tuple[Any, list[str]]:
        result = document.get("result") if isinstance(document, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return document, []
        document = copy.deepcopy(document)
        places = []
        for tool in document["result"]["tools"]:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and fnmatch.fnmatchcase(name, self.params["tools"]):
                places += [f"tools/list {name}{where}" for where in self._poison(tool, instruction)]
        return document, places

    def _poison(self, tool: dict, instruction: str) -> list[str]:
        """Plant into one tool's definition; where it went within it."""
        if self.params["into"] == "description":
            tool["description"] = _appended(tool.get("description"), instruction)
            return [" description"]
        schema = tool.get("inputSchema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict):
            return []
        for spec in properties.values():
            if isinstance(spec, dict):
                spec["description"] = _appended(spec.get("description"), instruction)
        return [f".{name} description" for name, spec in properties.items() if isinstance(spec, dict)]


def _appended(text: Any, instruction: str) -> str:
    return f"{text}\n\n{instruction}" if isinstance(text, str) and text else instruction
