"""What the model-answer faults (truncated, malformed_tool_call, refusal, empty_response) share
on the scenario side: which model APIs, streamed or not, a rule's match block can reach.

A mode that no reachable API can carry is refused by `faultproxy check` (the rule would fire
and change nothing); a mode some reachable API cannot carry is recorded, where it fires there,
as not delivered with the reason.
"""

from __future__ import annotations

from faultproxy.formats.model_apis import EXAMPLE_PATHS, ModelApi
from faultproxy.scenarios.scenario_model import MatchSpec


def reachable(match: MatchSpec) -> set[tuple[ModelApi, bool]]:
    """The (API, streamed) pairs of model calls the match block can select, judged by its `api`
    and `stream` predicates, its path pattern against each API's request paths, and a `stream`
    body predicate."""
    found = set()
    for api, paths in EXAMPLE_PATHS.items():
        if match.apis is not None and api not in match.apis:
            continue
        for path in paths:
            if match.path is not None and not match.path.matches(path):
                continue
            if api is ModelApi.GEMINI:
                found.add((api, ":streamGenerateContent" in path))
            else:
                found |= {(api, streamed) for streamed in (False, True) if _admits_stream(match, streamed)}
    return {(api, streamed) for api, streamed in found if match.stream is None or match.stream == streamed}


def _admits_stream(match: MatchSpec, streamed: bool) -> bool:
    bodies = ({"stream": True},) if streamed else ({}, {"stream": False})
    predicates = [p for p in match.body if p.path == ("stream",)]
    return any(all(p.matches(body) for p in predicates) for body in bodies)


def describe(pairs: set[tuple[ModelApi, bool]]) -> str:
    return ", ".join(sorted(f"{api.value} ({'streamed' if streamed else 'JSON'})" for api, streamed in pairs))
