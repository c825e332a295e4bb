"""A request body nested too deeply to parse does not hide the request from a rule with body
predicates: the rule's other predicates decide, and the trace line says the body was not evaluated
(documented in scenarios/selection.py and docs/reliability.md)."""

from __future__ import annotations

import httpx

from faultproxy.evaluator.rendering.svg_charts import timeline_svg
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.scenarios.selection import NO_BODY, UNREADABLE_BODY, parse_json_body
from tests.support.fixtures import scenario

RULES = scenario("""
    - name: refund_for_x
      match: {method: POST, path: "*/refund", body: {reason: x}}
      fault: {type: server_error, status: 503}
""")
DEEP = "[" * 5000 + "]" * 5000


def test_the_parser_tells_an_unreadable_body_from_no_body():
    assert parse_json_body(DEEP.encode()) is UNREADABLE_BODY
    assert parse_json_body(b"not json") is NO_BODY and parse_json_body(b"") is NO_BODY
    assert parse_json_body(b'{"reason": "x"}') == {"reason": "x"}


def test_a_body_nested_5000_deep_still_meets_the_rule(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(RULES)
    bodies = {
        "deep": '{"reason": "x", "deep": ' + DEEP + "}",  # unreadable: the rule's method and path decide
        "other": '{"reason": "y"}',  # readable, and the body predicate says no
        "plain": "reason=x",  # not JSON: body predicates never match it
    }
    with httpx.Client(proxy=proxy.proxy_url("deep-body"), timeout=10) as client:
        statuses = {name: client.post(f"{server.url}/items/1/refund", content=body,
                                      headers={"content-type": "application/json"}).status_code
                    for name, body in bodies.items()}
    proxy.end_episode("deep-body")
    lines = list(read_trace(trace_path(tmp_path / "flows", "deep-body")))
    assert [line["fault"] and line["fault"]["rule"] for line in lines] == ["refund_for_x", None, None]
    assert statuses["deep"] == 503 and statuses["other"] != 503 and statuses["plain"] != 503
    # only the deep body's line says its body went unevaluated; readable bodies' lines say nothing
    assert [line.get("body_not_evaluated") for line in lines] == ["JSON nested too deeply to parse", None, None]
    assert timeline_svg(lines).count("body not evaluated: JSON nested too deeply to parse") == 1
