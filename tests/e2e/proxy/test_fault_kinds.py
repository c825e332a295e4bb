"""Each fault in one place: every kind (scenarios.faults) has exactly one behaviour class
(proxy.faults) and back, and the trace's `forwarded` says what the upstream really saw."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.proxy.faults import FAULT_CLASSES, FaultRegistryError, pair_kinds
from faultproxy.replay_store import entry_writer, har
from faultproxy.scenarios import FAULT_KINDS, FaultKind, trace_forwarded
from faultproxy.scenarios import faults as kinds_package
from tests.support.fixtures import scenario
from tests.support.layout import ROOT, copy_layout, package_dirs


def test_every_kind_has_exactly_one_class_and_every_class_a_kind() -> None:
    assert list(FAULT_CLASSES) == list(FAULT_KINDS)
    for name, cls in FAULT_CLASSES.items():
        assert cls.kind is FAULT_KINDS[name]
        assert cls.__name__.endswith("Fault")
        assert cls.__module__ == f"faultproxy.proxy.faults.{name}"  # one module per fault


def test_every_kind_module_is_in_the_catalogue() -> None:
    folder = Path(kinds_package.__file__).parent
    defined = {path.stem for path in folder.glob("*.py") if "\nKIND = " in path.read_text()}
    assert defined == set(FAULT_KINDS)


def test_pairing_names_a_kind_without_a_class_a_kind_with_two_and_a_stray_class() -> None:
    extra = FaultKind(name="disk_full", params={}, forwards=False, description="the disk fills up")
    with pytest.raises(FaultRegistryError, match=r"fault kind 'disk_full' needs exactly one class .* found none"):
        pair_kinds({**FAULT_KINDS, "disk_full": extra}, FAULT_CLASSES.values())
    twice = type("ResetAgainFault", (FAULT_CLASSES["reset"],), {})
    with pytest.raises(FaultRegistryError, match=r"'reset' needs exactly one class .* found ResetFault, ResetAgainFault"):
        pair_kinds(FAULT_KINDS, [*FAULT_CLASSES.values(), twice])
    stray = type("ExitFault", (FAULT_CLASSES["reset"],), {"kind": extra})
    with pytest.raises(FaultRegistryError, match=r"ExitFault points at kind 'disk_full', which is not in"):
        pair_kinds(FAULT_KINDS, [*FAULT_CLASSES.values(), stray])
    swapped = [*FAULT_CLASSES.values()]
    swapped[0], swapped[1] = swapped[1], swapped[0]
    with pytest.raises(FaultRegistryError, match=r"not listed in the catalogue's order: server_error, rate_limit, "):
        pair_kinds(FAULT_KINDS, swapped)


SPEC_MODULE = '''
from faultproxy.scenarios.faults.base import FaultKind
KIND = FaultKind(name="disk_full", params={}, forwards=False, description="the disk fills up")
'''
CLASS_MODULE = '''
from faultproxy.proxy.faults.base import Fault
from faultproxy.scenarios.faults import disk_full
class DiskFullFault(Fault):
    kind = disk_full.KIND
'''


def test_adding_a_fault_is_its_two_modules_and_their_two_lists_and_a_spec_alone_refuses_to_load(tmp_path: Path) -> None:
    root = copy_layout(tmp_path)
    kinds = root / "faultproxy" / "scenarios" / "faults"
    (kinds / "disk_full.py").write_text(SPEC_MODULE)
    catalogue = (kinds / "__init__.py").read_text()
    catalogue = catalogue.replace("    delay,\n", "    delay,\n    disk_full,\n", 1)
    (kinds / "__init__.py").write_text(catalogue.replace("server_exit.KIND,\n", "server_exit.KIND, disk_full.KIND,\n"))

    def load() -> subprocess.CompletedProcess:
        probe = ("from faultproxy.proxy.faults import FAULT_CLASSES; from faultproxy.scenarios import FAULT_TYPES; "
                 "print(FAULT_CLASSES['disk_full'].__name__, 'disk_full' in FAULT_TYPES)")
        return subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})

    spec_only = load()
    assert spec_only.returncode != 0
    assert "FaultRegistryError: fault kind 'disk_full' needs exactly one class in proxy/faults/, found none" \
        in spec_only.stderr
    behaviour = root / "faultproxy" / "proxy" / "faults"
    (behaviour / "disk_full.py").write_text(CLASS_MODULE)
    registry = (behaviour / "__init__.py").read_text()
    registry = registry.replace("\nfrom faultproxy.proxy.faults.duplicate_delivery",
                                "\nfrom faultproxy.proxy.faults.disk_full import DiskFullFault"
                                "\nfrom faultproxy.proxy.faults.duplicate_delivery", 1)
    (behaviour / "__init__.py").write_text(registry.replace("ServerExitFault,\n", "ServerExitFault, DiskFullFault,\n", 1))
    both = load()
    assert both.returncode == 0, both.stderr
    assert both.stdout.split() == ["DiskFullFault", "True"]



FAULTY_SUBJECT = re.compile(r"fault|kind|spec", re.IGNORECASE)  # a fault type, read from a fault, kind or spec


def _fault_name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of each comparison (==, !=, in, match-case) of a fault, kind or spec value
    with a literal fault name. The subject decides: an API's part type or a client outcome share
    words with fault types ("refusal", "reset"), and comparing those is not naming a fault."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = [item for side in sides
                        for item in (side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side])]
            subjects = [side for side in sides if not isinstance(side, (ast.Constant, ast.Tuple, ast.List, ast.Set))]
        elif isinstance(node, ast.Match):
            literals = [value for case in node.cases for value in ast.walk(case.pattern)]
            subjects = [node.subject]
        else:
            continue
        if any(FAULTY_SUBJECT.search(ast.get_source_segment(source, subject) or "") for subject in subjects):
            found += [(item.lineno, item.value) for item in literals
                      if isinstance(item, ast.Constant) and item.value in FAULT_KINDS]
    return sorted(found)


def test_no_module_outside_the_fault_packages_compares_with_a_fault_name() -> None:
    # What other layers need from a fault is data on its kind (went_on, plants_instructions,
    # forwards, ...): a comparison with its name would be a second place to edit for a new fault.
    folders = package_dirs()
    fault_packages = [folders["faultproxy.scenarios"] / "faults", folders["faultproxy.proxy"] / "faults"]
    modules = {path.resolve() for folder in folders.values() for path in folder.rglob("*.py")}
    offenders, scanned = [], 0
    for path in sorted(modules):
        if any(path.is_relative_to(folder) for folder in fault_packages) or "__pycache__" in path.parts:
            continue
        scanned += 1
        offenders += [f"{path.relative_to(ROOT)}:{line}: {name!r}"
                      for line, name in _fault_name_comparisons(path.read_text(encoding="utf-8"))]
    assert scanned > 100  # the product was walked
    assert offenders == []


def test_the_name_scan_finds_each_form_of_comparison() -> None:
    source = ('if kind == "schema_drift": pass\nif "reset" != fault["type"]: pass\n'
              'ok = rule.fault.type in ("stale_state", "x")\nmatch spec.name:\n    case "partial_response": pass\n'
              'if ex.outcome not in ("reset",): pass\nif part.get("type") == "refusal": pass\n')
    assert _fault_name_comparisons(source) == [(1, "schema_drift"), (2, "reset"), (3, "stale_state"),
                                               (5, "partial_response")]

# --- forwarded: recorded by the injector, read by the evaluator and the replay store -------------

# For every fault type: a rule, and the requests (method, path, JSON body) of which the last is the
# one the rule fires on. A new fault type adds its probe here.
PROBES: dict[str, tuple[str, list[tuple[str, str, dict | None]]]] = {
    "rate_limit": ("{type: rate_limit}", [("GET", "/items/1", None)]),
    "server_error": ("{type: server_error, status: 503}", [("GET", "/items/1", None)]),
    "auth_failure": ("{type: auth_failure}", [("GET", "/items/1", None)]),
    "delay": ("{type: delay, ms: 10}", [("GET", "/items/1", None)]),
    "duplicate_delivery": ("{type: duplicate_delivery}", [("POST", "/items/1/refund", {})]),
    "timeout": ('{type: timeout, hold_s: 0, then: "504"}', [("GET", "/items/1", None)]),
    "reset": ("{type: reset}", [("GET", "/items/1", None)]),
    "response_lost": ('{type: response_lost, mode: "504"}', [("POST", "/items/1/refund", {})]),
    "partial_response": ("{type: partial_response, bytes: 10}", [("GET", "/text/100", None)]),
    "slow_stream": ("{type: slow_stream, between_events_ms: 1}",
                    [("POST", "/v1/chat/completions", {"model": "m", "stream": True, "messages": []})]),
    "schema_drift": ("{type: schema_drift, ops: [{op: rename, path: status, to: state}]}",
                     [("GET", "/items/1", None)]),
    "stream_cut": ("{type: stream_cut, events: 1}",
                   [("POST", "/v1/chat/completions", {"model": "m", "stream": True, "messages": []})]),
    "stale_state": ("{type: stale_state}", [("GET", "/items/1", None), ("GET", "/items/1", None)]),
    "jsonrpc_error": ("{type: jsonrpc_error}",
                      [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                         "params": {"name": "refund", "arguments": {}}})]),
    "elicitation_declined": ("{type: elicitation_declined}",
                             [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create",
                                                "params": {"message": "Refund?", "requestedSchema": {}}})]),
    "server_exit": ("{type: server_exit}",  # when: after — the server executed the call, then died
                    [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                       "params": {"name": "refund", "arguments": {}}})]),
    "server_restart": ("{type: server_restart}",  # when: after — the call ran, then the session was gone
                       [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {"name": "refund", "arguments": {}}})]),
    "session_expired": ("{type: session_expired}",
                        [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                           "params": {"name": "refund", "arguments": {}}})]),
    "token_expired": ("{type: token_expired}", [("GET", "/items/1", None)]),
    "tool_poisoning": ("{type: tool_poisoning}", [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})]),
    "tools_changed": ("{type: tools_changed}", [("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                                  "params": {"name": "refund", "arguments": {}}})]),
    "truncated": ("{type: truncated}", [("POST", "/v1/chat/completions", {"model": "m", "messages": []})]),
    "malformed_tool_call": ("{type: malformed_tool_call}",
                            [("POST", "/v1/chat/completions", {"model": "m", "messages": [], "tools": [
                                {"type": "function", "function": {"name": "refund"}}]})]),
    "refusal": ("{type: refusal}", [("POST", "/v1/chat/completions", {"model": "m", "messages": []})]),
    "empty_response": ("{type: empty_response}", [("POST", "/v1/chat/completions", {"model": "m", "messages": []})]),
    "prompt_injection": ("{type: prompt_injection}", [("GET", "/items/1", None)]),
}


def test_every_fault_type_has_a_forwarding_probe() -> None:
    # Faults on WebSocket messages have no request to forward: tests/e2e/proxy/test_websocket.py shows each.
    assert set(PROBES) == {name for name, kind in FAULT_KINDS.items() if not kind.on_messages}


def _trace_lines(proxy, tmp_path: Path, episode: str, count: int) -> list[dict]:
    """The episode's trace once it holds `count` lines (a killed flow's line is written by the
    proxy's error hook, which may run after the client already saw the connection close)."""
    path = trace_path(tmp_path / "flows", episode)
    deadline = time.monotonic() + 30
    while len(lines := list(read_trace(path))) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    proxy.end_episode(episode)
    return lines


@pytest.mark.parametrize("fault_type", list(PROBES))
def test_trace_says_forwarded_exactly_when_the_upstream_saw_the_request(make_proxy, upstream, tmp_path,
                                                                      fault_type: str) -> None:
    state, server = upstream
    fault, requests = PROBES[fault_type]
    method, path, _ = requests[-1]
    proxy = make_proxy(scenario(f"""
        - name: probe
          match: {{method: {method}, path: "{path}"}}
          fault: {fault}
          when: {{calls: [{len(requests)}]}}
    """))
    session = {"mcp-session-id": "s1"}  # every request in an MCP session, which session_expired needs
    with httpx.Client(proxy=proxy.proxy_url("ep"), headers=session, timeout=10) as client:
        for i, (method, path, body) in enumerate(requests):
            before = state.hits[f"{method} {path}"]
            try:
                client.request(method, server.url + path, json=body).read()
            except httpx.TransportError:
                pass  # reset, response_lost: the client gets no answer
    reached_upstream = state.hits[f"{method} {path}"] > before
    line = _trace_lines(proxy, tmp_path, "ep", len(requests))[-1]
    assert line["fault"]["type"] == fault_type and line["fault"]["delivered"] is True
    assert line["forwarded"] is reached_upstream is FAULT_KINDS[fault_type].forwards
    older = {key: value for key, value in line.items() if key != "forwarded"}
    assert trace_forwarded(older) is reached_upstream  # a trace written before the field is read the same
    assert parse_trace([line])[0].forwarded is reached_upstream


def _held_then_abandoned(**extra) -> dict:
    """A trace line: a timeout rule matched, the client gave up before the hold ended (so the fault
    was not delivered), nothing was forwarded and no upstream answered."""
    return {"seq": 1, "episode": "ep", "started": 1_700_000_000.0, "duration_s": 0.5,
            "request": {"method": "POST", "url": "http://127.0.0.1:8100/items/1/refund", "headers": [], "body": "{}"},
            "upstream": None, "client": {"outcome": "error", "status": None},
            "fault": {"rule": "hold", "type": "timeout", "params": {}, "decision": 0.1, "forced": False,
                      "delivered": False, "detail": ""},
            "tokens": 0, "error": "client disconnected", **extra}


def test_evaluator_reads_forwarded_from_the_trace() -> None:
    [recorded] = parse_trace([_held_then_abandoned(forwarded=False)])
    assert not recorded.forwarded and not recorded.maybe_committed  # it never left the proxy
    [older] = parse_trace([_held_then_abandoned()])  # without the field: the fault was not delivered
    assert older.forwarded and older.maybe_committed


def test_har_entry_reads_forwarded_from_the_trace(tmp_path: Path) -> None:
    def entries(line: dict) -> dict:
        folder = entry_writer.write_entry(tmp_path / str(len(list(tmp_path.iterdir()))), {"episode": "ep"}, [line], Redactor())
        return json.loads((folder / har.HAR_FILE).read_text())["log"]["entries"][0]["_faultproxy"]

    recorded = entries(_held_then_abandoned(forwarded=False))
    assert recorded["forwarded"] is False and recorded["upstream_error"] is None
    older = entries(_held_then_abandoned())
    assert older["forwarded"] is True and older["upstream_error"] == "client disconnected"
