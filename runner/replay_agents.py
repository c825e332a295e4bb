"""Replaying frozen episodes: the agent runs as in `faultproxy run` (same environment, same
episode key, so the same URLs) behind a replay-mode proxy (replay_store.replay_proxy), as a process or
as a Python function in this process.

    with Replayer(ReplayOptions(env={"SHOP_ROOT": ...}), entries) as replayer:
        result = replayer.replay(entry, ["python", "agent.py"])
        result.meets_expectation, result.verdict["status"], result.diverged
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from faultproxy.evaluator.judging import judge_episode
from faultproxy.evaluator.sweeps import level_text
from faultproxy.evaluator.traces import Turn, parse_turns
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import refuse_links_out, relative_file
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.formats.rundir import FUNCTION_PREFIX
from faultproxy.formats.trace import USER_TO_AGENT, read_trace, trace_path
from faultproxy.otel import OtelExport
from faultproxy.otel import names as otel_names
from faultproxy.proxy.auth import new_token
from faultproxy.proxy.server import ProxyServer
from faultproxy.replay_store.har import EPISODE_FILE, Entry, StoreError, read_entries
from faultproxy.replay_store.replay_matching import Pool
from faultproxy.replay_store.replay_proxy import (
    DEFAULT_WALL_S,
    NO_END_STATE,
    EpisodeReplay,
    NoUpstream,
    ReplayInjector,
    ReplayOptions,
    ReplayResult,
)
from faultproxy.runner.agent import (
    AgentEnvironment,
    AgentResult,
    Usage,
    fill_placeholders,
    run_agent,
)
from faultproxy.runner.chat import (
    Conversation,
    OpenChannel,
    channel_for,
    check_chat_mode,
    episode_conversation,
    recorded,
    user_divergence,
)
from faultproxy.runner.inprocess import (
    AgentFunction,
    ChatFunction,
    Episode,
    call_agent,
    call_conversation,
    function_channel,
)
from faultproxy.runner.secrets import redact_output_file
from faultproxy.scenarios import Scenario, ScenarioError, load_scenario
from faultproxy.tasks.task_model import Budgets
from faultproxy.tasks.request_class import Declared
from faultproxy.tasks.templates import TemplateError, UnsetVariable, expand


class MissingVariable(UsageError):
    """An entry's task needs a variable that neither the entry, the environment nor --env gives."""


def recorded_user_turns(entry: Entry) -> list[str]:
    """What the user said in the recorded conversation, in order."""
    said = sorted((r for r in entry.exchanges if r.direction == USER_TO_AGENT), key=lambda r: r.seq)
    return [(r.request_body or b"").decode("utf-8", "replace") for r in said]


def user_turns(trace: Iterable[dict]) -> list[Turn]:
    return [turn for turn in parse_turns(trace) if turn.speaker == "user"]


def function_episode(entry: Entry, environment: AgentEnvironment) -> Episode:
    """What a function agent is given: the recorded episode, behind the replay proxy."""
    episode = entry.episode
    return Episode(
        key=entry.key, task_id=entry.task.id, variant=episode.get("variant", 0), prompt=episode["prompt"],
        state=episode.get("state"), seed=episode.get("seed") or 0, proxy_url=environment.proxy_url,
        ca_bundle=environment.ca_bundle, task=episode["task"], env=dict(environment.extra or {}),
    )


def replay_function(agent: AgentFunction | ChatFunction, store: Path | Iterable[Entry],
                    options: ReplayOptions | None = None) -> list[ReplayResult]:
    """Replay every entry of a store with a function agent, in this process (no start-up per entry);
    a conversation's entry calls it once per user turn, as run_function(..., chat=True) does."""
    entries = list(read_entries(Path(store))) if isinstance(store, (str, Path)) else list(store)
    with Replayer(options, entries) as replayer:
        return replayer.replay_all(entries, agent=agent)


def replay(store: Path | Iterable[Entry], command: Sequence[str] | None = None,
           options: ReplayOptions | None = None) -> list[ReplayResult]:
    """Replay every entry of a store with the agent `command` (default: each entry's own), with
    no network; each result says whether the entry showed what it expects."""
    entries = list(read_entries(Path(store))) if isinstance(store, (str, Path)) else list(store)
    with Replayer(options, entries) as replayer:
        return replayer.replay_all(entries, command)


def entry_secret_env(entries: Iterable[Entry]) -> list[str]:
    names: set[str] = set()
    for entry in entries:
        names.update(entry.episode.get("secret_env") or ())
        names.update(entry.episode["task"].get("secrets") or ())
    return sorted(names)


def entry_upstreams(entries: Iterable[Entry]) -> dict[str, str]:
    """The reverse-mode upstreams the entries were recorded with; one proxy serves them all, so a
    name must lead to the same URL in every entry."""
    upstreams: dict[str, tuple[str, Entry]] = {}
    for entry in entries:
        for name, url in entry.upstreams.items():
            known, first = upstreams.setdefault(name, (url, entry))
            if known != url:
                raise StoreError(str(entry.path / "episode.json"), None, f"upstreams.{name}",
                                 f"is {url}, but {first.name} has {known}: replay them apart, or give "
                                 f"--upstream {name}=URL")
    return {name: url for name, (url, _) in upstreams.items()}


class Replayer:
    """One replay-mode proxy, for replaying any number of entries (one at a time or side by side)."""

    def __init__(self, options: ReplayOptions | None = None, entries: Iterable[Entry] = (),
                 export: OtelExport | None = None) -> None:
        """`export`, when given, gets each replayed episode as OpenTelemetry spans (the caller closes it)."""
        self.options = options or ReplayOptions()
        self.export = export
        self._own_out = self.options.out is None
        self.out = Path(tempfile.mkdtemp(prefix="faultproxy-replay-")) if self._own_out else Path(self.options.out)
        self.out.mkdir(parents=True, exist_ok=True)
        refuse_links_out(self.out, "replay's --out folder")
        self.injector = ReplayInjector()
        self.guard = NoUpstream(self.injector.relay, self.injector.sessions)
        entries = list(entries)
        secret_env = sorted(set(self.options.secret_env) | set(entry_secret_env(entries)))
        self.upstreams = entry_upstreams(entries) | self.options.upstreams
        # As a run's proxy: a token of this replay's own, and only the episode being replayed, so
        # another local process can neither take a recording nor change a replayed verdict.
        self.proxy = ProxyServer(None, trace_dir=self.out / "flows", upstreams=self.upstreams,
                                 secret_env=secret_env, injector=self.injector, addons=[self.guard],
                                 token=new_token(), only_begun=True)
        self._counter = itertools.count(1)
        self._scenarios: dict[tuple[str, str], Scenario] = {}

    def __enter__(self) -> Replayer:
        self.proxy.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.proxy.stop()
        if self._own_out:
            shutil.rmtree(self.out, ignore_errors=True)

    # -- public ----------------------------------------------------------------------------

    def replay(self, entry: Entry, command: Sequence[str] | None = None,
               forced: Iterable[tuple[str, int]] | None = None,
               agent: AgentFunction | ChatFunction | None = None) -> ReplayResult:
        """Replay one entry with `command` (default: the options', else the entry's own), or with
        `agent`, a Python function run in this process as `run_function` runs it."""
        return asyncio.run(self.replay_async(entry, command, forced, agent))

    def replay_all(self, entries: Sequence[Entry], command: Sequence[str] | None = None,
                   repeat: int = 1, agent: AgentFunction | ChatFunction | None = None) -> list[ReplayResult]:
        """Each entry `repeat` times, `options.parallel` at once; results in entry order."""
        async def all_of() -> list[ReplayResult]:
            slots = asyncio.Semaphore(max(1, self.options.parallel))

            async def one(entry: Entry) -> ReplayResult:
                async with slots:
                    return await self.replay_async(entry, command, agent=agent)

            return await asyncio.gather(*(one(e) for e in entries for _ in range(repeat)))

        for entry in entries:  # before any replay starts: an entry that cannot run stops them all
            self.task_env(entry)
        return asyncio.run(all_of())

    def scenario(self, entry: Entry) -> Scenario:
        """The entry's scenario, reloaded from its stored YAML and checked against its digest."""
        spec = entry.scenario
        cache_key = (str(entry.path), spec.get("digest") or "")
        if cache_key not in self._scenarios:
            folder = self.out / "scenarios"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{entry.name}.yaml"
            path.write_text(spec["source"], encoding="utf-8")
            where = str(entry.path / "episode.json")
            try:
                scenario = load_scenario(path, {k: float(v) for k, v in (spec.get("params") or {}).items()})
            except ScenarioError as error:
                raise StoreError(where, None, "scenario.source", f"does not load: {error}") from None
            if spec.get("digest") and scenario.digest != spec["digest"]:
                raise StoreError(where, None, "scenario.digest", "differs from the stored scenario's content")
            self._scenarios[cache_key] = scenario
        return self._scenarios[cache_key]

    async def replay_async(self, entry: Entry, command: Sequence[str] | None = None,
                           forced: Iterable[tuple[str, int]] | None = None,
                           agent: AgentFunction | ChatFunction | None = None) -> ReplayResult:
        scenario = self.scenario(entry)
        task = entry.task
        episode = entry.episode
        attribution = f"{entry.key}.r{next(self._counter)}"
        replay = EpisodeReplay(entry.key, Pool(list(entry.exchanges)),
                               frozenset(forced) if forced is not None else None)
        files = relative_file(self.out / "episodes", attribution, str(entry.path / EPISODE_FILE), "episode")
        files.mkdir(parents=True, exist_ok=True)
        task_file, output_file = files / "task.json", files / "output.json"
        task_file.write_text(json.dumps({"task": episode["task"], "variant": episode.get("variant", 0),
                                         "prompt": episode["prompt"], "state": episode.get("state"),
                                         "seed": episode.get("seed")}))
        command = list(command or self.options.command or entry.command)
        if not command and agent is None:
            raise StoreError(str(entry.path / "episode.json"), None, "command",
                             "the entry has no agent command (faultproxy monitor recorded live traffic): "
                             "give the agent's command after --")
        base_env = self._base_env(entry)
        task_env = self.task_env(entry)
        blocked_before = len(self.guard.attempts)
        self.injector.stage(attribution, replay)
        await asyncio.to_thread(self.proxy.begin_episode, attribution, scenario, entry.rewrites, Declared.of(task))
        started = time.time()
        environment = AgentEnvironment(
            proxy_url=self.proxy.proxy_url(attribution), ca_bundle=self.proxy.ca_bundle, episode=entry.key,
            task_file=task_file, output_file=output_file, prompt=episode["prompt"],
            seed=episode.get("seed") or 0, model=episode.get("model"), params=episode.get("params") or {},
            base_urls={name: self.proxy.reverse_url(attribution, name) for name in self.upstreams},
            base_url_env=entry.base_url_env, extra=task_env,
        )
        if agent is not None:
            given, wall_s = function_episode(entry, environment), self._budgets(task.budgets).wall_s
            if entry.chat:  # called once per user turn, with the conversation so far
                talk = self._conversation(entry, function_channel(agent, given), attribution, scenario)
                result = await call_conversation(talk, wall_s)
            else:
                result = await call_agent(agent, given, wall_s)
        elif command[0].startswith(FUNCTION_PREFIX):
            result = AgentResult(None, "harness_error", 0.0, f"{entry.name} was recorded from the Python "
                                 f"function {command[0].removeprefix(FUNCTION_PREFIX)}: replay it with "
                                 "faultproxy.replay_function(agent, store), or give a command", None, None)
        else:
            command = fill_placeholders(command, {
                "prompt": episode["prompt"], "task_id": task.id, "variant": episode.get("variant", 0),
                "seed": episode.get("seed") or 0, "model": episode.get("model") or "",
                **{name: level_text(value) for name, value in (episode.get("params") or {}).items()},
            })
            env = environment.build(base_env)
            talk = self._conversation(entry, self._channel(entry, env), attribution, scenario) if entry.chat else None
            result = await run_agent(command, env, self._budgets(task.budgets), lambda: self._usage(attribution),
                                     output_file, talk=talk)
        redact_output_file(output_file, self.injector.redactor)
        stats = await asyncio.to_thread(self.proxy.end_episode, attribution)
        trace = trace_path(self.out / "flows", attribution)
        scripted_user = entry.task.user is None or entry.task.user.played_by is None  # a model's turns are served
        if entry.chat and scripted_user and (said := user_divergence(recorded_user_turns(entry),
                                                                     user_turns(read_trace(trace)))):
            replay.diverged.append(said)  # the script answered another reply than the recording's
        cause = "diverged" if replay.diverged else result.cause
        record: EpisodeRecord = {
            "key": entry.key, "task_id": task.id, "trial": episode.get("trial", 0),
            "variant": episode.get("variant", 0), "seed": episode.get("seed"), "prompt": episode["prompt"],
            "state": episode.get("state"), "shape": task.shape, "grid_label": episode.get("grid_label", ""),
            "params": episode.get("params") or {}, "model": episode.get("model"),
            "completed": cause is None, "cause": cause, "exit_code": result.exit_code,
            "started": round(started, 3), "duration_s": round(result.duration_s, 3),
            "output": result.output, "output_error": result.output_error,
            "end_state": None, "state_error": NO_END_STATE,
            "stats": {"exchanges": stats.exchanges if stats else 0, "tokens": stats.tokens if stats else 0,
                      "faults": stats.faults if stats else 0},
            "trace": str(trace), "log_tail": self.injector.redactor.text(result.log_tail),
            "replay_of": str(entry.path),
        }
        verdict = judge_episode(task, record, read_trace(trace), episode.get("severity_defaults") or {})
        record = self.injector.redactor.document(record)
        if self.export is not None:
            await asyncio.to_thread(self.export.export_trace, {**record, "verdict": verdict}, trace,
                                    {otel_names.SCENARIO: scenario.name, otel_names.COMMAND: shlex.join(command)})
        return ReplayResult(entry, record, verdict, replay.diverged, replay.served,
                            sorted(r.seq for r in (*replay.pool.unserved(), *replay.server_pool.unserved())), self.guard.attempts[blocked_before:], trace,
                            sorted(replay.forced) if replay.forced is not None else None)

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _channel(entry: Entry, env: dict[str, str]) -> tuple[OpenChannel, bool]:
        """How the replayed agent process hears its user: the entry's --chat mode (a service's PORT into `env`)."""
        try:
            check_chat_mode(entry.chat)
        except UsageError as error:
            raise StoreError(str(entry.path / EPISODE_FILE), None, "chat", str(error)) from None
        return channel_for(entry.chat, env, entry.key, entry.episode.get("model"))

    def _conversation(self, entry: Entry, channel: tuple[OpenChannel, bool], attribution: str,
                      scenario: Scenario) -> Conversation:
        """The entry's conversation over `channel`, replayed: the task's scripted user answers again,
        live; a model-played user's turns are served from the recording."""
        user = entry.task.user
        return episode_conversation(channel, entry.task,
                                    entry.episode["prompt"], self.proxy, attribution, entry.key, scenario,
                                    entry.episode.get("seed") or 0, entry.episode.get("variant", 0),
                                    recorded(recorded_user_turns(entry)) if user and user.played_by else None)

    def _base_env(self, entry: Entry) -> dict[str, str]:
        return {**os.environ, **entry.env, **self.options.env, "FAULTPROXY_REPLAY": "1"}

    def task_env(self, entry: Entry) -> dict[str, str]:
        """The entry's task env, expanded as its agent will get it; MissingVariable names what is unset."""
        env = {**self._base_env(entry), "FAULTPROXY_EPISODE": entry.key}
        try:
            return {name: expand(value, env) for name, value in entry.task.env.items()}
        except UnsetVariable as error:
            raise MissingVariable(f"{entry.path / 'episode.json'}: task.env: {error}; the entry does not store it: "
                                  f"give it with --env {error.name}=VALUE") from None
        except TemplateError as error:
            raise StoreError(str(entry.path / "episode.json"), None, "task.env", str(error)) from None

    def _budgets(self, budgets: Budgets) -> Budgets:
        wall = self.options.budget_s or budgets.wall_s or DEFAULT_WALL_S
        return replace(budgets, wall_s=wall)

    def _usage(self, attribution: str) -> Usage | None:
        stats = self.proxy.episode_stats(attribution)
        return Usage(stats.requests, stats.tokens) if stats else None
