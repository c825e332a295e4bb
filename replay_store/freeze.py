"""`faultproxy freeze`: turn episodes of a run directory into replay store entries.

    frozen = freeze(Path("runs/response_lost"), Path("replay_store"), failing=True)

For each chosen episode (judged pass or fail; incomplete ones cannot be expected to replay):
the task, variant and prompt from the run's plan and log; the scenario's YAML text and
effective params, reloaded and checked against the run's digest; the fault decisions, recomputed
from the trace (every rule that matched each request, the index of that call, whether it
fired — cross-checked against the decision value the trace recorded); the checks it failed; and
the expectation. The replay of an entry is judged without an end state, so the expectation is
the verdict and, for a failure, the failed checks that can be judged from the trace alone
(`expect_failed`). A WebSocket session is kept whole with its upgrade (har.py); the faults that
fired on its messages are decisions of the upgrade's exchange; a server message the replay
cannot send again (binary, or cut by the trace body limit) is a warning.

With `representatives`, one entry per failure cause (evaluator.aggregate.causes): the cluster's
representative episode, in a folder named after the cause (`cause-<slug>--<scenario>`), its
episode.json labelled with the cause ({"id", "slug", "line", "episodes", "tasks"}). A cause the
store already holds (an entry with the same cause id) is not frozen again, so freezing after
every run adds only new causes. Causes of incomplete episodes cannot be frozen and are skipped.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.redact import Redactor
from faultproxy.formats.paths import refuse_links_out
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.formats.rundir import read_run, trace_file
from faultproxy.formats.secret_names import is_secret_name
from faultproxy.formats.trace import decode_body, read_trace
from faultproxy.proxy import decide
from faultproxy.proxy.injector import FORCE_HEADER
from faultproxy.scenarios.selection import parse_json_body, request_matches
from faultproxy.replay_store import entry_writer, har
from faultproxy.replay_store.har import StoreError
from faultproxy.replay_store.replay_proxy import NO_END_STATE, UNJUDGEABLE
from faultproxy.replay_store.ws_replay import unreplayable, upstream_script
from faultproxy.scenarios import Scenario, ScenarioError, load_scenario
from faultproxy.tasks.task_model import Task
from faultproxy.tasks.templates import template_variables

_BASE_URL_NAME = re.compile(r"[A-Z0-9_]+_BASE_URL")  # OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Frozen:
    path: Path
    key: str
    expect: str
    expect_failed: list[str]
    warnings: list[str]
    cause: Mapping[str, Any] | None = None  # with representatives: the cause this entry stands for
    new: bool = True  # False: the store already had an entry for this cause (nothing written)


def freeze(run_dir: Path, store: Path, *, failing: bool = False, representatives: bool = False,
           episodes: Sequence[str] = (), expect: str | None = None, env: Mapping[str, str | None] | None = None,
           secret_env: Sequence[str] = ()) -> list[Frozen]:
    """Write the chosen episodes of `run_dir` into `store`; returns what was written (with
    `representatives`, also the causes the store already had, as Frozen(new=False)).

    `env`: variables the agent needs at replay time, stored in the entry; NAME -> value, or
    NAME -> None to take the value from this environment. Variables the task's env templates
    use are taken from this environment when set. Secret-looking names given are refused
    (refuse_secret_env); others are left out.
    """
    refuse_secret_env(env or {})
    run = read_run(Path(run_dir))
    if Path(store).exists() and not Path(store).is_dir():
        raise StoreError(str(store), None, None, "is a file, not a store folder")
    refuse_links_out(Path(store), "replay store")
    plan = run.plan
    tasks = {item["id"]: item for item in plan["tasks"]["items"]}
    # Lines of tasks the plan lacks (or with no task id) are ignored, as reports ignore them.
    chosen = [e for e in run.episodes if e.get("type", "episode") == "episode" and e.get("task_id") in tasks]
    if episodes:
        unknown = sorted(set(episodes) - {e["key"] for e in chosen})
        if unknown:
            raise StoreError(str(run_dir), None, None, f"no episode {', '.join(unknown)} in the log")
        chosen = [e for e in chosen if e["key"] in episodes]
    judged = [e for e in chosen if (e.get("verdict") or {}).get("status") in ("pass", "fail")]
    if episodes and len(judged) < len(chosen):
        skipped = [e["key"] for e in chosen if e not in judged]
        raise StoreError(str(run_dir), None, None, f"incomplete episodes cannot be frozen: {', '.join(skipped)}")
    if failing:
        judged = [e for e in judged if e["verdict"]["status"] == "fail"]
    causes: dict[str, Mapping[str, Any]] = {}
    known: list[Frozen] = []
    if representatives:
        judged, causes, known = _representatives(Path(run_dir), Path(store), judged)
    secret_names = sorted(set(secret_env) | {n for t in tasks.values() for n in t.get("secrets") or ()})
    secret_values = [os.environ[n] for n in secret_names if os.environ.get(n)]
    redactor = Redactor(secret_values)
    source_text, base_scenario = _scenario_source(plan)
    frozen = []
    for record in judged:
        task = Task.from_json(tasks[record["task_id"]])
        scenario = _episode_scenario(plan, record, base_scenario)
        trace = list(read_trace(trace_file(Path(run_dir), record)))
        decisions, warnings = compute_decisions(scenario, record["key"], trace)
        warnings += unreplayable_messages(trace)
        status = record["verdict"]["status"]
        rejudged = judge_episode(task, {**record, "end_state": None, "state_error": NO_END_STATE}, trace,
                                 plan["tasks"].get("severity") or {})
        judgeable = [c["name"] for c in rejudged["failed"] if c["name"] not in UNJUDGEABLE]
        wanted = expect or status
        if wanted == "fail" and not judgeable:
            warnings.append("it failed only checks replay cannot judge (end_state); its replay will pass")
        source = {"run": str(Path(run_dir).resolve()), "created": plan.get("created"),
                  "frozen": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        document = {
            "episode": record["key"], "task": task.to_json(), "variant": record.get("variant", 0),
            "prompt": record["prompt"], "state": record.get("state"), "seed": record.get("seed"),
            "trial": record.get("trial", 0), "shape": record.get("shape"), "grid_label": record.get("grid_label", ""),
            "params": record.get("params") or {}, "model": record.get("model"),
            "scenario": {"name": scenario.name, "digest": scenario.digest, "path": plan["scenario"].get("path"),
                         "params": dict(scenario.params), "source": source_text},
            "decisions": decisions,
            "failed": record["verdict"]["failed"],
            "expect": wanted,
            "expect_failed": judgeable if wanted == "fail" else [],
            "command": list(plan.get("command") or []),
            "upstreams": dict(plan.get("upstreams") or {}),
            **({"base_url_env": dict(plan["base_url_env"])} if plan.get("base_url_env") else {}),
            **({"chat": plan["chat"]} if plan.get("chat") else {}),
            "rewrites": dict(record.get("rewrites") or {}),  # read_run upgraded a line from before --rewrite
            "env": agent_env(task, env or {}, plan.get("base_urls") or {}),
            "severity_defaults": plan["tasks"].get("severity") or {},
            "secret_env": secret_names,
            "source": source,
            "live": {"duration_s": record.get("duration_s"), "exchanges": len(trace),
                     "faults": sum(1 for d in decisions if d["fired"])},
            "minimal_faults": None,
        }
        cause = causes.get(record["key"])
        if cause:
            document["cause"] = cause
            directory = Path(store) / entry_writer.entry_name(f"cause-{cause['slug']}", scenario.name)
        else:
            directory = entry_writer.choose_entry_dir(Path(store), record["key"], scenario.name, source)
        entry_writer.write_entry(directory, document, trace, redactor, secret_values)
        frozen.append(Frozen(directory, record["key"], wanted, document["expect_failed"], warnings, cause))
    return frozen + known


def _representatives(run_dir: Path, store: Path, judged: Sequence[EpisodeRecord]
                     ) -> tuple[list[EpisodeRecord], dict[str, Mapping[str, Any]], list[Frozen]]:
    """Each failure cause's representative among `judged` that the store does not hold yet
    (with its cause label, by episode key), and the causes it already holds."""
    clusters = (build_report(run_dir, drilldown_limit=0).get("causes") or {}).get("clusters") or []
    stored = _stored_causes(store)
    by_key = {record["key"]: record for record in judged}
    chosen: list[EpisodeRecord] = []
    labels: dict[str, Mapping[str, Any]] = {}
    known = []
    for cluster in clusters:
        key = cluster["representative"]["key"]
        label = {name: cluster[name] for name in ("id", "slug", "line", "episodes", "tasks")}
        if cluster["id"] in stored:
            known.append(Frozen(stored[cluster["id"]], key, "fail", [], [], label, new=False))
        elif key in by_key:  # incomplete representatives cannot be frozen
            chosen.append(by_key[key])
            labels[key] = label
    return chosen, labels, known


def _stored_causes(store: Path) -> dict[str, Path]:
    """{cause id: entry folder} of the store's entries frozen as representatives."""
    if not store.is_dir():
        return {}
    causes = {}
    for entry in har.read_entries(store):  # a corrupt entry could hide a cause: refused, not skipped
        cause = entry.episode.get("cause")
        if isinstance(cause, dict) and isinstance(cause.get("id"), str):
            causes.setdefault(cause["id"], entry.path)
    return causes


def _scenario_source(plan: Mapping[str, Any]) -> tuple[str, Scenario]:
    spec = plan["scenario"]
    path = Path(spec.get("path") or "")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise StoreError(str(path), None, None, f"the run's scenario file cannot be read: {error}") from None
    try:
        scenario = load_scenario(path, {k: float(v) for k, v in (spec.get("params") or {}).items()})
    except ScenarioError as error:
        raise StoreError(str(path), None, None, f"the run's scenario no longer loads: {error}") from None
    if spec.get("digest") and scenario.digest != spec["digest"]:
        raise StoreError(str(path), None, None, "the scenario file changed since the run (its digest differs); "
                                                "freeze needs the scenario the episodes ran under")
    return text, scenario


def _episode_scenario(plan: Mapping[str, Any], record: EpisodeRecord, base: Scenario) -> Scenario:
    """A sweep level's episode ran under the file with its grid point's params, else the run's own
    (a categorical level, a word, was the agent's alone)."""
    params = {k: float(v) for k, v in (record.get("params") or {}).items() if not isinstance(v, str)}
    return load_scenario(base.path, params) if params else base


def base_url_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The `*_BASE_URL` variables of a run's environment (where SDKs look for their API, e.g.
    OPENAI_BASE_URL): the plan records them, so a frozen episode's agent reaches the same URLs at
    replay whatever the environment then. Never FAULTPROXY_*, secret-looking names or URLs with
    credentials."""
    return {name: value for name, value in sorted(environ.items())
            if _BASE_URL_NAME.fullmatch(name) and not name.startswith("FAULTPROXY_")
            and not is_secret_name(name) and "@" not in urlsplit(value).netloc}


def refuse_secret_env(given: Mapping[str, str | None]) -> None:
    """A secret-named variable (with a value or to take from here) would be written into the
    store: refused, before anything is read or written, with the way to give it instead."""
    for name in given:
        if is_secret_name(name):
            raise StoreError("--env", None, name, "looks like a secret, and secrets are never written into a store: "
                                                  f"pass it at replay time instead (faultproxy replay --env {name}=...)")


def agent_env(task: Task, given: Mapping[str, str | None],
              recorded: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to store: the base URLs the run recorded, those the task's env templates use
    (from this environment, when set) and those given; never FAULTPROXY_* and never
    secret-looking names."""
    wanted: dict[str, str | None] = dict(recorded or {})
    for template in task.env.values():
        for name in template_variables(template):
            if not name.startswith("FAULTPROXY_") and not is_secret_name(name):
                wanted[name] = None
    wanted.update(given)
    env = {}
    for name, value in wanted.items():
        if is_secret_name(name):
            continue  # never stored: refuse_secret_env refused any the user gave
        value = os.environ.get(name) if value is None else value
        if value is not None:
            env[name] = value
    return env


class _Headers(dict):
    def get(self, name: str, default: Any = None) -> Any:  # case-insensitive, like mitmproxy's
        return super().get(name.lower(), default)


def compute_decisions(scenario: Scenario, key: str, trace: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """Every (rule, call index) the injector saw in this episode and whether it fired, recomputed
    by matching the trace's requests against the scenario's rules in order (as the injector did).
    A fired decision is checked against the decision value the trace recorded."""
    calls: Counter[str] = Counter()
    decisions, warnings = [], []
    for line in sorted(trace, key=lambda l: l.get("seq") or 0):
        request = line.get("request") or {}
        parts = urlsplit(request.get("url") or "")
        headers = _Headers((str(k).lower(), str(v)) for k, v in request.get("headers") or ())
        forced = headers.get(FORCE_HEADER)
        body = functools.cache(functools.partial(parse_json_body, decode_body(request)))
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        fault = line.get("fault")
        applied = fault.get("rule") if fault else None
        seen_applied = False
        for rule in scenario.rules:
            if rule.name != forced and not request_matches(rule.match, str(request.get("method") or "GET"),
                                                           parts.hostname or "", port, path, headers, body):
                continue
            if rule.match.websocket is not None:  # a rule on the session's messages: _message_decisions
                continue
            calls[rule.name] += 1
            index = calls[rule.name]
            fired = rule.name == applied
            if fired:
                seen_applied = True
                index = _checked_index(scenario, key, rule.name, index, fault, warnings, line.get("seq"))
            decisions.append({"seq": line.get("seq"), "rule": rule.name, "index": index, "fired": fired,
                              "type": rule.fault.type})
        if applied and not seen_applied:
            rule = next((r for r in scenario.rules if r.name == applied), None)
            index = _checked_index(scenario, key, applied, None, fault, warnings, line.get("seq"))
            decisions.append({"seq": line.get("seq"), "rule": applied, "index": index, "fired": True,
                              "type": rule.fault.type if rule else fault.get("type")})
        decisions += _message_decisions(scenario, key, line, warnings)
    return decisions, warnings


def _message_decisions(scenario: Scenario, key: str, line: Mapping[str, Any], warnings: list[str]) -> list[dict]:
    """The faults that fired on a WebSocket session's messages, as decisions of its upgrade (so
    minimize can leave them out); the index is found from the recorded decision value."""
    decisions = []
    for message in (line.get("websocket") or {}).get("messages") or ():
        fault = message.get("fault")
        if fault:
            index = _checked_index(scenario, key, fault["rule"], None, fault, warnings, line.get("seq"))
            decisions.append({"seq": line.get("seq"), "rule": fault["rule"], "index": index, "fired": True,
                              "type": fault.get("type")})
    return decisions


def unreplayable_messages(trace: Iterable[Mapping[str, Any]]) -> list[str]:
    """Warnings for recorded server messages a replay cannot send again (ws_replay.unreplayable):
    replaying their session ends it there, reported as diverged."""
    warnings = []
    for line in trace:
        for step, message in upstream_script(line.get("websocket") or {}):
            why = unreplayable(message) if step == "send" else None
            if why:
                warnings.append(f"exchange {line.get('seq')}: a WebSocket server message cannot be replayed ({why})")
                break
    return warnings


def _checked_index(scenario: Scenario, key: str, rule: str, index: int | None, fault: Mapping[str, Any],
                   warnings: list[str], seq: Any) -> int | None:
    recorded = fault.get("decision")
    if recorded is None or fault.get("forced"):
        return index
    if index is not None and decide.decision_value(scenario.seed, key, rule, index) == recorded:
        return index
    for candidate in range(1, 10_000):  # the rule matched on something the trace redacted: find the call
        if decide.decision_value(scenario.seed, key, rule, candidate) == recorded:
            return candidate
    warnings.append(f"exchange {seq}: cannot tell which call of rule {rule} fired")
    return index
