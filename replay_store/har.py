"""The replay store entry: `episode.json` + `flows.har`. This module owns the format and reads
entries; replay_store.entry_writer writes them. Freeze, replay, minimize and the pytest plugin
read and write entries only through the two.

A store is a folder of entries; an entry is a folder:

episode.json — what the episode was and what its replay must show:
  {"format": "faultproxy-replay-entry", "version": VERSION, "name": the entry's folder name,
   "episode": the episode key (fault decisions are keyed hashes of it),
   "task": Task.to_json(), "variant", "prompt", "state", "seed", "trial", "shape", "grid_label",
   "params": the grid point's params, "model",
   "scenario": {"name", "digest", "path" (where it was), "params" (effective), "source" (its YAML
                text, so the entry reloads it without the file)},
   "decisions": [{"seq", "rule", "index", "fired", "type"}]: every rule that matched a request,
                with the index of that call among the rule's matches and whether it fired;
                a rule on WebSocket messages only where it fired, with the upgrade's seq and the
                index of the message among the rule's matches,
   "failed": [{"name", "severity", "detail"}]: the checks the live episode failed,
   "expect": "fail" | "pass": the live verdict; replay must show the same,
   "expect_failed": [check names]: the failed checks replay can judge (not end_state); an entry
                expecting "fail" must fail exactly these,
   "command": the agent command it ran with, "env": {NAME: value} the agent needs (no secrets),
   "upstreams": {name: url}: the run's reverse-mode upstreams (the agent's base URLs lead there),
   "base_url_env": {VAR: upstream name}: variables `--reverse VAR` pointed at an upstream's
                reverse-mode URL; replay points them at its own proxy's (absent: none),
   "rewrites": {field: value} the proxy set in every model API request (`--rewrite`, resolved
                for this episode's grid point; proxy.models.FIELDS),
   "chat": how the agent heard its task's user (`--chat`, runner.chat) in a conversation (absent: none),
   "severity_defaults", "secret_env": names of variables whose values replay redacts,
   "source": {"run", "created", "frozen"},
   "minimal_faults": null | [{"rule", "index", "type", "seq"}] written by `faultproxy minimize`,
   "minimize": null | {"trials", "checks", "at"}}

flows.har — HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/), one entry per exchange
in episode order. `request` is what the agent sent; `response` is what the *upstream* answered
(never the faulted answer the client got), or status 0 with empty content when the upstream
never answered. `content.text` holds the decoded body (base64 with `encoding` when binary).
faultproxy's own data is in custom fields:
  log._faultproxy:              {"version", "episode"}
  entries[]._faultproxy:        {"seq", "forwarded": did the request reach the upstream,
                                 "upstream_error": str | null, "fault": the trace's fault
                                 record (rule, type, params, decision, delivered, detail) | null,
                                 "client": {"outcome", "status"} (what the agent got),
                                 "tokens", "sse": [[offset_s, event], ...] | null (the
                                 upstream's events with their time offsets), "truncated":
                                 {"request"|"response": {"length", "sha256"}} for cut bodies,
                                 "websocket": only on a WebSocket upgrade (response status 101):
                                 the session as the trace holds it (formats.trace: `messages`
                                 both ways with their faults and injected / dropped / held /
                                 resent marks, `close`), redacted again; absent in entries
                                 frozen before sessions were kept (replay then says so),
                                 "direction": MCP only, as in the trace: "server to client"
                                 for a server's request (its `response`: the client's answer)
                                 or notification}
  request.postData._encoding:   "base64" for a binary request body.

Secrets never reach the store: traces are redacted when written, and everything copied into an
entry passes a Redactor again (headers by name, URLs by query name, JSON by key, configured
secret values and well-known key shapes anywhere); the written bytes are then checked for every
configured secret value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.formats.paths import path_component, refuse_links_out
from faultproxy.formats.trace import TURN_DIRECTIONS, TURN_URLS
from faultproxy.formats.yaml_input import is_int
from faultproxy.replay_store.har_checks import (StoreError, absolute_http_url, body_bytes, header_pairs, is_object,
                                                 json_object, optional_value, sse_events, ws_session)
from faultproxy.tasks.task_model import Task

FORMAT = "faultproxy-replay-entry"
# 2: "rewrites" always there. 1: an entry frozen before `--rewrite` had only `rewrite_model`
# (its model, asked in every request); upgrade_entry brings it up to 2 when read.
VERSION = 2
READ_VERSIONS = (1, VERSION)
EPISODE_FILE = "episode.json"
HAR_FILE = "flows.har"
EXPECTATIONS = ("pass", "fail")
HAR_VERSIONS = ("1.2", "1.1")  # what this reader understands; freeze writes 1.2
REQUIRED = ("episode", "task", "prompt", "scenario", "expect", "decisions", "command")


@dataclass(frozen=True)
class Recorded:
    """One exchange of a frozen episode."""

    seq: int
    method: str
    url: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes | None
    forwarded: bool  # the request reached the upstream (it may still not have answered)
    status: int | None  # the upstream's status; None: no upstream response
    reason: str
    response_headers: tuple[tuple[str, str], ...]
    response_body: bytes | None
    sse: tuple[tuple[float, str], ...] | None
    upstream_error: str | None
    fault: Mapping[str, Any] | None
    client: Mapping[str, Any]
    truncated: Mapping[str, Any] = field(default_factory=dict)  # "request"/"response": the trace cut that body
    websocket: Mapping[str, Any] | None = None  # the session a 101 upgrade opened: {"messages", "close"}
    direction: str | None = None  # MCP: "client to server" or "server to client" (who sent the request)


@dataclass(frozen=True)
class Decision:
    seq: int | None
    rule: str
    index: int | None
    fired: bool
    type: str

    @property
    def ident(self) -> tuple[str, int]:
        return (self.rule, self.index)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "rule": self.rule, "index": self.index, "fired": self.fired, "type": self.type}


@dataclass(frozen=True)
class Entry:
    path: Path
    episode: Mapping[str, Any]
    exchanges: tuple[Recorded, ...]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def key(self) -> str:
        return self.episode["episode"]

    @property
    def task(self) -> Task:
        return Task.from_json(self.episode["task"])

    @property
    def scenario(self) -> Mapping[str, Any]:
        return self.episode["scenario"]

    @property
    def expect(self) -> str:
        return self.episode["expect"]

    @property
    def expect_failed(self) -> list[str]:
        return list(self.episode.get("expect_failed") or [])

    @property
    def decisions(self) -> list[Decision]:
        return [Decision(d.get("seq"), d["rule"], d.get("index"), bool(d.get("fired")), d.get("type") or "")
                for d in self.episode["decisions"]]

    @property
    def fired(self) -> list[Decision]:
        return [d for d in self.decisions if d.fired and d.index is not None]

    @property
    def command(self) -> list[str]:
        return list(self.episode["command"])

    @property
    def env(self) -> dict[str, str]:
        return dict(self.episode.get("env") or {})

    @property
    def upstreams(self) -> dict[str, str]:
        return dict(self.episode.get("upstreams") or {})

    @property
    def base_url_env(self) -> dict[str, str]:
        return dict(self.episode.get("base_url_env") or {})

    @property
    def chat(self) -> str | None:
        """How the agent heard its user (--chat), for a conversation; None otherwise."""
        chat = self.episode.get("chat")
        return chat if isinstance(chat, str) else None

    @property
    def rewrites(self) -> dict[str, str | int]:
        """The fields the proxy set in every model API request of the episode (`--rewrite`)."""
        return dict(self.episode.get("rewrites") or {})

    @property
    def title(self) -> str:
        """What the entry is, for people: task, scenario and trial."""
        return f"{self.episode['task']['id']} under {self.scenario['name']} (trial {self.episode.get('trial', 0)})"


# --- writing -------------------------------------------------------------------------------------


def is_entry(path: Path) -> bool:
    return (Path(path) / EPISODE_FILE).is_file()


def find_entries(path: Path) -> list[Path]:
    """An entry folder itself, or every entry folder directly inside a store, sorted by name."""
    path = Path(path)
    if is_entry(path):
        return [path]
    if not path.is_dir():
        raise StoreError(str(path), None, None, "no such store or entry (a folder with episode.json)")
    refuse_links_out(path, "replay store")  # replay --accept and minimize write into its entries
    folders = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    for folder in folders:  # a half-copied entry must not pass unseen as "every entry replayed"
        if not is_entry(folder):
            raise StoreError(str(folder), None, None, f"not a store entry: it has no {EPISODE_FILE}; "
                                                      "restore it or move it out of the store")
    return folders


def read_entry(path: Path) -> Entry:
    path = Path(path)
    episode_path, har_path = path / EPISODE_FILE, path / HAR_FILE
    episode = load_json(episode_path)
    if not isinstance(episode, dict):
        raise StoreError(str(episode_path), None, None, "expected a JSON object")
    if episode.get("format") != FORMAT:
        raise StoreError(str(episode_path), None, "format", f"expected {FORMAT!r}, got {episode.get('format')!r}")
    if episode.get("version") not in READ_VERSIONS:
        versions = " and ".join(map(str, READ_VERSIONS))
        raise StoreError(str(episode_path), None, "version",
                         f"this faultproxy reads versions {versions}, not {episode.get('version')!r}")
    for name in REQUIRED:
        if name not in episode:
            raise StoreError(str(episode_path), None, name, "missing")
    # Replay names its files after the episode key: refuse one that would lead out of --out.
    path_component(episode["episode"], str(episode_path), "episode")
    if isinstance(episode["task"], dict):
        path_component(episode["task"].get("id"), str(episode_path), "task.id")
    if episode["expect"] not in EXPECTATIONS:
        raise StoreError(str(episode_path), None, "expect", f"must be pass or fail, got {episode['expect']!r}")
    if not isinstance(episode["scenario"], dict) or not isinstance(episode["scenario"].get("source"), str):
        raise StoreError(str(episode_path), None, "scenario.source", "missing: the scenario's YAML text")
    try:
        Task.from_json(episode["task"])
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise StoreError(str(episode_path), None, "task", str(error)) from None
    for i, decision in enumerate(episode["decisions"]):
        if not isinstance(decision, dict) or not isinstance(decision.get("rule"), str):
            raise StoreError(str(episode_path), None, f"decisions[{i}]", "expected {rule, index, fired}")
    if not isinstance(episode["command"], list) or not all(isinstance(a, str) for a in episode["command"]):
        raise StoreError(str(episode_path), None, "command", "expected a list of strings")
    har = load_json(har_path)
    log = har.get("log") if isinstance(har, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        raise StoreError(str(har_path), None, "log.entries", "missing: not a HAR file")
    if log.get("version") not in HAR_VERSIONS:
        raise StoreError(str(har_path), None, "log.version", f"expected HAR {' or '.join(HAR_VERSIONS)}, "
                                                             f"got {log.get('version')!r}")
    json_object(har_path, log.get("_faultproxy"), "log._faultproxy", optional=True)
    exchanges = tuple(_recorded(har_path, i, e) for i, e in enumerate(entries))
    return Entry(path, upgrade_entry(episode), exchanges)


def upgrade_entry(episode: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's episode.json as read (a version in READ_VERSIONS), in the current shape."""
    upgraded = dict(episode)
    if upgraded.get("version") == 1 and "rewrites" not in upgraded:
        upgraded["rewrites"] = {"model": upgraded.get("model")} if upgraded.get("rewrite_model") else {}
    upgraded["version"] = VERSION
    return upgraded


def read_entries(path: Path) -> list[Entry]:
    return [read_entry(p) for p in find_entries(path)]


def load_json(path: Path) -> Any:
    """A store file's JSON (NaN and Infinity refused), or a StoreError naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except FileNotFoundError:
        raise StoreError(str(path), None, None, "missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise StoreError(str(path), None, None, f"cannot read: {error}") from None
    except ValueError as error:
        raise StoreError(str(path), getattr(error, "lineno", None), None, f"not JSON: {error}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _recorded(path: Path, i: int, entry: Any) -> Recorded:
    """One HAR entry, checked field by field: a field replay cannot use fails with its full name."""
    at = f"log.entries[{i}]"
    entry = json_object(path, entry, at)
    request = json_object(path, entry.get("request"), f"{at}.request")
    response = json_object(path, entry.get("response"), f"{at}.response")
    custom = json_object(path, entry.get("_faultproxy"), f"{at}._faultproxy", optional=True)
    method, url = request.get("method"), request.get("url")
    if not isinstance(method, str) or not method.isalpha():
        raise StoreError(str(path), None, f"{at}.request.method", f"expected an HTTP method, got {method!r}")
    turn = custom.get("direction") in TURN_DIRECTIONS  # a conversation's turn (formats.trace.turn_record)
    if not (url in TURN_URLS if turn else absolute_http_url(url)):
        expected = " or ".join(TURN_URLS) if turn else "an absolute http(s) URL"
        raise StoreError(str(path), None, f"{at}.request.url", f"expected {expected}, got {url!r}")
    status = response.get("status", 0)
    if not is_int(status) or not (status == 0 or 100 <= status <= 599):
        raise StoreError(str(path), None, f"{at}.response.status", f"expected 0 or 100 to 599, got {status!r}")
    post = json_object(path, request.get("postData"), f"{at}.request.postData", optional=True)
    content = json_object(path, response.get("content"), f"{at}.response.content", optional=True)
    return Recorded(
        seq=optional_value(path, custom.get("seq"), f"{at}._faultproxy.seq", is_int, "an integer") or i + 1,
        method=method.upper(),
        url=url,
        request_headers=header_pairs(path, request.get("headers"), f"{at}.request.headers"),
        request_body=body_bytes(path, post, "text", "_encoding", f"{at}.request.postData") if post else None,
        forwarded=optional_value(path, custom.get("forwarded", status != 0), f"{at}._faultproxy.forwarded",
                                 lambda v: isinstance(v, bool), "true or false") is True,
        status=status or None,
        reason=str(response.get("statusText") or ""),
        response_headers=header_pairs(path, response.get("headers"), f"{at}.response.headers"),
        response_body=body_bytes(path, content, "text", "encoding", f"{at}.response.content") if status else None,
        sse=sse_events(path, custom.get("sse"), f"{at}._faultproxy.sse"),
        upstream_error=optional_value(path, custom.get("upstream_error"), f"{at}._faultproxy.upstream_error",
                                 lambda v: isinstance(v, str), "a string"),
        fault=optional_value(path, custom.get("fault"), f"{at}._faultproxy.fault", is_object, "an object"),
        client=optional_value(path, custom.get("client"), f"{at}._faultproxy.client", is_object, "an object") or {},
        truncated=optional_value(path, custom.get("truncated"), f"{at}._faultproxy.truncated", is_object, "an object") or {},
        websocket=ws_session(path, custom.get("websocket"), f"{at}._faultproxy.websocket"),
        direction=optional_value(path, custom.get("direction"), f"{at}._faultproxy.direction",
                                 lambda v: isinstance(v, str), "a string"),
    )
