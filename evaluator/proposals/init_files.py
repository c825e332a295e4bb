"""The files `faultproxy init` writes from what an observe run saw (evaluator.proposals.starter): a tasks
file, one scenario per fault family the traffic can meet, and a README with the commands.

    files = starter_files(seen, folder)           # {"tasks.yaml": text, "scenarios/writes_lost.yaml": ..., ...}
    written, kept = write_starter(files, folder)  # never overwrites: a file already there is kept

Every proposal is marked as one in a comment. A family the traffic cannot meet (no write seen,
no MCP tool called, ...) gets no file; the README says which and why. Values go into YAML
through formats.yaml_output; every text passes the redactor before it is written.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from faultproxy.evaluator.proposals.starter import Endpoint, Link, Observed, TaskSeen, Tool
from faultproxy.formats.errors import UsageError
from faultproxy.formats.files import write_new
from faultproxy.formats.paths import refuse_links_out
from faultproxy.formats.redact import Redactor
from faultproxy.formats.rundir import FUNCTION_PREFIX
from faultproxy.formats.request_kinds import Access
from faultproxy.formats.yaml_output import comment, flow
from faultproxy.tasks.task_model import DEFAULT_SHAPE, MCP_PREFIX, EndpointPattern, Expected, mcp_tool_path
from faultproxy.tasks.request_class import naming

TASKS_FILE, SCENARIOS_DIR, README = "tasks.yaml", "scenarios", "README.md"
DRIFT_OPS_PER_READ = 2
NOT_WRITTEN = {  # scenario -> why the traffic seen cannot meet it, when it is not written
    "writes_lost": "the run saw no write (no non-GET request, no MCP tool annotated as writing)",
    "reads_stale": "no resource read both before and after a write to it in one episode",
    "reads_drift": "no read answered with a JSON object",
    "model_faults": "no model API call",
    "rate_limit": "no model API call",
    "mcp": "no MCP tool call",
}


def starter_files(seen: Observed, folder: Path) -> dict[str, str]:
    """Relative path -> text, for each file the traffic seen supports (`folder`: where they go,
    for the README's commands)."""
    files = {TASKS_FILE: tasks_text(seen)}
    for name, text in scenario_texts(seen).items():
        files[f"{SCENARIOS_DIR}/{name}.yaml"] = text
    files[README] = readme_text(seen, files, folder)
    return files


def write_starter(files: Mapping[str, str], folder: Path, redactor: Redactor | None = None) -> tuple[list[Path], list[Path]]:
    """Write each file into `folder` unless something is already there; (written, kept)."""
    redactor = redactor or Redactor()
    refuse_links_out(folder, "init folder")
    try:
        (folder / SCENARIOS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{folder / SCENARIOS_DIR}: cannot create: {error.strerror or error}") from None
    refuse_links_out(folder, "init folder")  # scenarios/ itself may be a planted link
    written, kept = [], []
    for name, text in files.items():
        path = folder / name
        (written if write_new(path, redactor.text(text)) else kept).append(path)
    return written, kept


# --- tasks.yaml ------------------------------------------------------------------------------------


def tasks_text(seen: Observed) -> str:
    lines = [comment(f"Tasks proposed by `faultproxy init` from the run {seen.run_dir} ({seen.episodes} episode(s) "
                     f"under {seen.scenario}). Every line after a 'proposal' comment is a guess from the traffic "
                     "seen: keep, change or delete it. Budgets, severities and the other fields the run's tasks "
                     "file may have held are not copied: see docs/agents.md and docs/checks.md."),
             "tasks:"]
    for task in seen.tasks:
        lines += _task_lines(seen, task)
    return "\n".join(lines) + "\n"


def _task_lines(seen: Observed, seen_task: TaskSeen) -> list[str]:
    task = seen_task.task
    lines = [f"  - id: {flow(task.id)}", f"    prompt: {flow(task.prompt)}"]
    lines += [f"    shape: {flow(task.shape)}"] if task.shape != DEFAULT_SHAPE else []
    lines += [f"    states: {flow(list(task.states))}"] if task.states else []
    lines += [f"    {name}: {flow(value)}" for name, value in (("reset_url", task.reset_url),
                                                                 ("state_url", task.state_url)) if value]
    lines += [f"    env: {flow(dict(task.env))}"] if task.env else []
    if seen_task.hosts:
        variables = ", ".join(f"{name}={url}" for name, url in sorted(seen.base_urls.items())) or "none"
        lines.append(comment(f"the hosts this task depended on (task_hosts, from its URLs and env and the agent's "
                             f"base-URL variables, here {variables}): {', '.join(sorted(seen_task.hosts))}. A "
                             "failed request elsewhere is a side channel: docs/agents.md says how to declare one.", 4))
    lines += _patterns("irreversible", task.irreversible, sorted(seen_task.writes),
                       "the writes seen (non-GET requests, MCP tools annotated as writing): a blind repeat of one is a "
                       "finding; drop those that are safe to repeat")
    lines += _patterns("read_only", task.read_only, _read_tools(seen, seen_task),
                       "MCP tools seen only reading (their server annotated them readOnlyHint)")
    unclassified = sorted(name for name in seen_task.tools if seen.tools[name].access is Access.UNCLASSIFIED)
    if unclassified:
        lines.append(comment(f"unclassified MCP tools (their server said nothing, so they are neither reads nor "
                             f"writes until you say): {', '.join(unclassified)}; list each under irreversible or "
                             "read_only as mcp:NAME", 4))
    return lines + _expected_lines(seen_task)


def _read_tools(seen: Observed, seen_task: TaskSeen) -> list[str]:
    return sorted(MCP_PREFIX + name for name in seen_task.tools if seen.tools[name].access is Access.READ)


def _patterns(name: str, declared: Iterable[EndpointPattern], proposed: list[str], why: str) -> list[str]:
    """The task's own patterns, then the proposed ones they do not already cover."""
    declared = list(declared)
    have = [str(p) for p in declared]
    new = [p for p in proposed if not any(_covers(pattern, p) for pattern in declared)]
    if not have and not new:
        return []
    lines = [comment(f"proposal ({', '.join(new)}): {why}", 4)] if new else []
    return lines + [f"    {name}: {flow(have + new)}"]


def _covers(pattern: EndpointPattern, proposed: str) -> bool:
    """Does a declared pattern already name the requests a proposed one names (tried on an example,
    as tasks.request_class names requests: "POST *" names no MCP tool)?"""
    if proposed.startswith(MCP_PREFIX):
        return naming([pattern], "POST", "", "/x", proposed[len(MCP_PREFIX):]) is not None
    method, glob = proposed.split(" ", 1)
    return naming([pattern], method, "", glob.replace("*", "x")) is not None


def _expected_lines(seen_task: TaskSeen) -> list[str]:
    effects = [{"method": "*", "path": mcp_tool_path(key[len(MCP_PREFIX):])} if key.startswith(MCP_PREFIX)
               else dict(zip(("method", "path"), key.split(" ", 1))) for key in sorted(seen_task.effects)]
    for effect, key in zip(effects, sorted(seen_task.effects)):
        effect["count"] = round(seen_task.effects[key] / seen_task.episodes)
    declared = _expected_document(seen_task.task.expected)
    lines = [f"    expected: {flow(declared)}"] if declared else []
    seen_text = "; ".join(f"{k} committed {n} time(s)" for k, n in sorted(seen_task.effects.items())) or "no write"
    lines.append(comment(f"proposal: what a good episode leaves behind. In {seen_task.episodes} episode(s) the "
                         f"run saw {seen_text}. Check that this is right, write the end state, then "
                         # uncommented under a declared `expected`, it would be a duplicate key
                         + ("put it in place of the `expected` above:" if declared else "uncomment:"), 4))
    yaml_lines = ["expected:"] + ([f"  effects: {flow(effects)}"] if effects else []) + [
        "  state: {}   # a subset of what GET state_url shows after a good episode",
        "  output: {regex: \"...\"}   # what the final answer must say"]
    lines.append(comment("\n".join(yaml_lines), 4, wrap=False))
    return lines


def _expected_document(expected: Expected) -> dict[str, Any]:
    """The task's own `expected` as a tasks file writes it (only the fields it set)."""
    data = expected.to_json()
    document = {key: data[key] for key in ("state", "effects", "escalate") if data[key] not in (None, [])}
    document.update({key: data[key] for key in ("ignore", "multiset") if data[key]})
    if data["output"]:
        document["output"] = {data["output"]["kind"]: data["output"]["value"]}
    return document


# --- scenarios -------------------------------------------------------------------------------------


def scenario_texts(seen: Observed) -> dict[str, str]:
    """name -> scenario text, for each family the traffic can meet."""
    families = {
        "writes_lost": _writes_lost(seen),
        "reads_stale": _reads_stale(seen),
        "reads_drift": _reads_drift(seen),
        "model_faults": _model_faults(seen),
        "rate_limit": _rate_limit(seen),
        "mcp": _mcp(seen),
    }
    return {name: text for name, text in families.items() if text}


def _scenario(seen: Observed, name: str, description: str, seed: int, rate: float,
              rules: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]) -> str | None:
    """A scenario file: rules are (name, match, when, fault)."""
    if not rules:
        return None
    names: Counter[str] = Counter()
    lines = [comment(f"Proposed by `faultproxy init` from the run {seen.run_dir}: the rules match the requests "
                     f"that run saw. `faultproxy check` this file after editing it."),
             f"name: {name}", f"description: {flow(description)}", f"seed: {seed}", "params:",
             f"  lambda: {rate}   # the probability of each rule; a sweep varies it", "rules:"]
    for rule, match, when, fault in rules:
        names[rule] += 1
        unique = rule if names[rule] == 1 else f"{rule}_{names[rule]}"
        lines += [f"  - name: {unique}", f"    match: {flow(match)}", f"    when: {flow(when)}",
                  f"    fault: {flow(fault)}"]
    return "\n".join(lines) + "\n"


def _slug(*parts: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", " ".join(parts).lower())).strip("_")[:60] or "rule"


def _http_match(endpoint: Endpoint) -> dict[str, Any]:
    return {"method": endpoint.method, "path": endpoint.match_path}


def _tool_match(tool: Tool) -> dict[str, Any]:
    """A tools/call of this tool, by its JSON-RPC body alone: the same rule matches it over HTTP and stdio."""
    return {"body": {"method": "tools/call", "params.name": tool.name}}


def _writes_lost(seen: Observed) -> str | None:
    rules = [(_slug(e.method, e.glob.replace("*", ""), "lost"), _http_match(e), _first_call(), _lost())
             for e in seen.writes]
    rules += [(_slug(t.name, "lost"), _tool_match(t), _first_call(), _lost())
              for t in seen.tools.values() if t.access is Access.WRITE]
    return _scenario(seen, "writes_lost",
                     "The first call of each write this agent made reaches its server and is committed, but the "
                     "connection is reset before the answer arrives. An agent that simply retries writes twice. A "
                     "robust agent sends an idempotency key, or reads the resource's state before writing again, "
                     "and never reports a write it could not confirm as done.", 5, 1.0, rules)


def _first_call() -> dict[str, Any]:
    return {"probability": "lambda", "calls": [1]}


def _lost() -> dict[str, Any]:
    return {"type": "response_lost", "mode": "reset"}


def _reads_stale(seen: Observed) -> str | None:
    linked: dict[str, list[Link]] = {}
    for link in seen.links:
        linked.setdefault(link.read, []).append(link)
    rules = []
    for read in seen.reads:
        links = linked.get(read.key)
        if not links:
            continue
        fault: dict[str, Any] = {"type": "stale_state", "after_write": True}
        templates = sorted({link.template for link in links if link.template})
        if templates:
            fault["write_resources"] = templates
        rules.append((_slug(read.method, read.glob.replace("*", ""), "stale"), _http_match(read),
                      {"probability": "lambda"}, fault))
    return _scenario(seen, "reads_stale",
                     "After the agent writes, reads of what it wrote still show the state from before the write, as "
                     "a lagging replica or cache would (reads linked to writes by path, or by the write's body "
                     "fields in write_resources). An agent that trusts the stale read repeats the write. A robust "
                     "agent trusts the write's own answer, uses idempotency keys, and reads again before acting "
                     "again.", 10, 0.5, rules)


def _reads_drift(seen: Observed) -> str | None:
    rules = []
    for read in seen.reads:
        ops = _drift_ops(read.fields)
        if ops:
            rules.append((_slug(read.method, read.glob.replace("*", ""), "drift"), _http_match(read),
                          {"probability": "lambda"}, {"type": "schema_drift", "ops": ops}))
    return _scenario(seen, "reads_drift",
                     "Reads come back in a changed shape: a field renamed, a number sent as a string, as when an "
                     "API changes under the agent's feet. A robust agent reads fields defensively, notices when "
                     "what it needs is missing or mistyped instead of assuming a default, and says so rather than "
                     "acting on a guess.", 9, 0.5, rules)


def _drift_ops(fields: Mapping[str, str]) -> list[dict[str, Any]]:
    """A retype of a number field and a rename of a string field (the first of each, `id` left alone)."""
    ops = []
    number = next((name for name, kind in fields.items() if kind == "number" and name != "id"), None)
    if number:
        ops.append({"op": "retype", "path": number, "to": "string"})
    text = next((name for name, kind in fields.items() if kind == "string" and name != "id"), None)
    if text:
        ops.append({"op": "rename", "path": text, "to": f"{text}_v2"})
    return ops[:DRIFT_OPS_PER_READ]


def _model_faults(seen: Observed) -> str | None:
    rules = []
    for api, use in seen.model_apis.items():
        kinds = [("truncated", {"type": "truncated"}), ("refusal", {"type": "refusal"}),
                 ("empty", {"type": "empty_response"})]
        if use.with_tools:
            kinds[1:1] = [("argument_missing", {"type": "malformed_tool_call", "mode": "missing_argument"}),
                          ("unknown_tool", {"type": "malformed_tool_call", "mode": "unknown_tool"})]
        rules += [(_slug(api, name), {"api": str(api)}, {"probability": "lambda"}, fault) for name, fault in kinds]
    return _scenario(seen, "model_faults",
                     "The model misbehaves on its own, in the shape of the API this agent calls: answers cut at the "
                     "token limit, tool calls missing an argument or naming a tool that does not exist, refusals "
                     "and empty answers. A robust agent checks every answer before acting on it (finish reason, "
                     "refusal, empty, the tool's name and arguments), asks again, and never acts on half an "
                     "answer.", 24, 0.05, rules)


def _rate_limit(seen: Observed) -> str | None:
    rules = [(_slug(api, "429"), {"api": str(api)}, {"probability": "lambda"}, {"type": "rate_limit", "retry_after": 1})
             for api in seen.model_apis]
    return _scenario(seen, "rate_limit",
                     "A share of model calls is refused with 429 Too Many Requests and a short wait, in the error "
                     "format of the API this agent calls. A robust agent (or its SDK) waits as told and retries, "
                     "and never repeats a tool write because a model call failed.", 1, 0.3, rules)


def _mcp(seen: Observed) -> str | None:
    rules = [(_slug(t.name, "error"), _tool_match(t), {"probability": "lambda"},
              {"type": "jsonrpc_error", "mode": "tool_error", "message": "upstream unavailable, try again"})
             for t in seen.tools.values()]
    return _scenario(seen, "mcp",
                     "Calls of the MCP tools this agent used answer with a tool result marked isError, as a failing "
                     "tool would. A robust agent reads the error, retries reads, checks before retrying a write, "
                     "and does not report a tool action as done when the tool said it failed.", 11, 0.3, rules)


# --- README.md -------------------------------------------------------------------------------------


def readme_text(seen: Observed, files: Mapping[str, str], folder: Path) -> str:
    function = seen.command[:1] and seen.command[0].startswith(FUNCTION_PREFIX)
    command = "python my_agent.py" if function or not seen.command else shlex.join(seen.command)
    scenarios = sorted(name for name in files if name.startswith(f"{SCENARIOS_DIR}/"))
    tasks = shlex.quote(str(folder / TASKS_FILE))
    missing = [f"`{name}`: {why}" for name, why in NOT_WRITTEN.items() if f"{SCENARIOS_DIR}/{name}.yaml" not in files]
    lines = ["# faultproxy starting point", "",
             f"Written by `faultproxy init` from the run `{seen.run_dir}` ({seen.episodes} episode(s), "
             f"{seen.total} requests). Every proposal in these files is marked as one in a comment: read them, "
             "then edit.", "",
             "## Check, run, report", "", "```sh",
             f"faultproxy check {' '.join(shlex.quote(str(folder / name)) for name in scenarios)}"]
    for name in scenarios:
        lines.append(f"faultproxy run --scenario {shlex.quote(str(folder / name))} --tasks {tasks} --k 4 "
                     f"--out runs/{Path(name).stem} -- {command}")
    lines += ["faultproxy report runs/SCENARIO --markdown report.md", "```", "",
              "## Freeze what failed, replay it in CI, gate on a baseline", "", "```sh",
              "faultproxy freeze runs/SCENARIO --representatives --to replay_store/",
              f"faultproxy replay replay_store/ -- {command}",
              "faultproxy gate runs/SCENARIO --baseline runs/SCENARIO-main", "```", "",
              "docs/ci.md shows both as a GitHub workflow (the faultproxy action)."]
    if function:
        lines += ["", f"The observe run's agent was the function `{seen.command[0].removeprefix(FUNCTION_PREFIX)}`: "
                      "run_function and replay_function run it in Python; the commands above need an agent command."]
    if missing:
        lines += ["", "## Not written", ""] + [f"- {line}" for line in missing]
    return "\n".join(lines) + "\n"
