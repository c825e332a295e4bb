"""One episode: reset the world, start the episode in the proxy, run the agent, close the trace,
read the end state, judge, and build the episode's log line.

A reset that fails means the world is not in the state the task assumes: the agent is not
launched, and the episode is incomplete with cause `reset_failed` (and the status or error)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import certifi
import httpx
from faultproxy.evaluator.judging import judge_episode, task_hosts
from faultproxy.evaluator.sweeps import level_text
from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import write_whole
from faultproxy.formats.run_records import EpisodeIdentity, EpisodeRecord
from faultproxy.formats.rundir import FLOWS_DIR, EpisodeLog
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.proxy.server import ProxyServer
from faultproxy.runner.agent import (
    AgentEnvironment,
    AgentResult,
    Usage,
    fill_placeholders,
    run_agent,
)
from faultproxy.runner.chat import Conversation, channel_for, episode_conversation
from faultproxy.runner.plan import GridPoint, PlannedEpisode
from faultproxy.runner.rewrites import resolve
from faultproxy.runner.run_options import RunOptions
from faultproxy.runner.secrets import redact_output_file
from faultproxy.scenarios import Scenario, load_scenario
from faultproxy.tasks.task_model import Budgets
from faultproxy.tasks.request_class import Declared
from faultproxy.tasks.secret_values import task_secrets
from faultproxy.tasks.templates import expand

DIRECT_TIMEOUT_S = 10.0
RESET_FAILED = "reset_failed"


class EpisodeRunner:
    # An agent process is judged by what the proxy saw of it: when some rule could fire, an empty
    # trace says its traffic went around the proxy (no_traffic). A function agent's returned
    # outcome is its own (runner.inprocess), so it sets this False.
    rules_expect_traffic = True

    def __init__(self, options: RunOptions, proxy: ProxyServer, episode_log: EpisodeLog, counts: Counter) -> None:
        self.options, self.proxy, self.log, self.counts = options, proxy, episode_log, counts
        self.faults_possible = options.faults_possible() if self.rules_expect_traffic else {}
        self.scenarios: dict[str, Scenario] = {}
        # never through the proxy; trusting upstreams as the proxy does (--upstream-ca, --insecure-upstream)
        self.direct = httpx.AsyncClient(trust_env=False, timeout=DIRECT_TIMEOUT_S, verify=direct_verify(options))

    async def aclose(self) -> None:
        await self.direct.aclose()

    async def run_episode(self, episode: PlannedEpisode) -> EpisodeRecord:
        task, variant, point = episode.task, episode.variant, episode.point
        harness_env = {**os.environ, "FAULTPROXY_EPISODE": episode.key}
        task_env = {name: expand(value, harness_env) for name, value in {**self.options.tasks.env, **task.env}.items()}
        url_env = {**harness_env, **task_env}
        # The proxy's redactor learns this task's secret values before the agent can send them.
        injector = self.proxy.injector
        injector.redactor = redactor = task_secrets(task, harness_env, injector.redactor, self.options.tasks.path)
        files = self.options.out / "episodes" / episode.key
        files.mkdir(parents=True, exist_ok=True)
        task_file, output_file = files / "task.json", files / "output.json"
        output_file.unlink(missing_ok=True)
        write_whole(task_file, json.dumps(redactor.document({
            "task": task.to_json(), "variant": variant.index, "prompt": variant.prompt, "state": variant.state,
            "seed": variant.seed})))
        reset_error = await self._reset(task, variant.state, url_env)
        if reset_error is not None:
            return redactor.document(unfinished_record(self.options, episode, RESET_FAILED, reset_error))
        rewrites = resolve(self.options.rewrites, point)
        await asyncio.to_thread(self.proxy.begin_episode, episode.key, self._scenario_for(point), rewrites,
                                Declared.of(task))
        environment = AgentEnvironment(
            proxy_url=self.proxy.proxy_url(episode.key), ca_bundle=self.proxy.ca_bundle, episode=episode.key,
            task_file=task_file, output_file=output_file, prompt=variant.prompt, seed=variant.seed,
            model=point.model, params=dict(point.params), no_proxy=self.options.no_proxy,
            base_urls={name: self.proxy.reverse_url(episode.key, name) for name in self.options.upstreams},
            base_url_env=self.options.base_url_env, extra=task_env,
        )
        started = time.time()
        result = await self.launch(episode, environment)
        redact_output_file(output_file, redactor)
        stats = await asyncio.to_thread(self.proxy.end_episode, episode.key)
        if stats and stats.trace_disk_full:  # a trace with lines missing cannot be judged: stop, resume later
            raise DiskFull(stats.trace_disk_full)
        end_state, state_error = await self._fetch_state(task, url_env)
        record: EpisodeRecord = {
            **episode_identity(episode),
            "completed": result.cause is None, "cause": result.cause,
            **({"cause_detail": result.detail} if result.detail else {}),
            "exit_code": result.exit_code, "started": round(started, 3), "duration_s": round(result.duration_s, 3),
            "output": result.output, "output_error": result.output_error,
            "end_state": end_state, "state_error": state_error,
            "stats": {"exchanges": stats.exchanges if stats else 0, "tokens": stats.tokens if stats else 0,
                      "faults": stats.faults if stats else 0, **({"turns": stats.turns} if stats and stats.turns else {})},
            "trace": f"{FLOWS_DIR}/{trace_path(Path(), episode.key).name}",
            "log_tail": result.log_tail, "rewrites": rewrites,
            "faults_possible": self.faults_possible.get(point.label, False),
            "task_hosts": task_hosts([*task_env.values(), *(expand(url, url_env) for url in (task.reset_url,
                                                                                          task.state_url) if url)]),
            **({"side_channels": self.options.side_channels} if self.options.side_channels else {}),
        }
        trace = read_trace(self.options.out / record["trace"])
        record["verdict"] = judge_episode(task, record, trace, self.options.tasks.severity)
        return redactor.document(record)  # judged on what the agent said, logged without its secrets

    async def launch(self, episode: PlannedEpisode, environment: AgentEnvironment) -> AgentResult:
        """Run the agent command as a process of its own."""
        variant, point = episode.variant, episode.point
        command = fill_placeholders(self.options.command, {
            "prompt": variant.prompt, "task_id": episode.task.id, "variant": variant.index, "seed": variant.seed,
            **{name: level_text(value) for name, value in point.params}, "model": point.model or "",
        })
        env = environment.build(os.environ)
        talk = self._conversation(episode, env) if self.options.chat else None  # before the agent starts: PORT
        return await run_agent(
            command, env, self._budgets(episode.task.budgets), lambda: self._usage(episode.key),
            environment.output_file, talk=talk,
        )

    def _conversation(self, episode: PlannedEpisode, env: dict[str, str]) -> Conversation:
        """The episode's conversation (runner.chat) over the --chat channel."""
        scenario = self._scenario_for(episode.point) or self.options.scenario  # a sweep level's params
        return episode_conversation(channel_for(self.options.chat, env, episode.key, episode.point.model),
                                    episode.task, episode.variant.prompt, self.proxy, episode.key, episode.key,
                                    scenario, episode.variant.seed, episode.variant.index)

    def _scenario_for(self, point: GridPoint) -> Scenario | None:
        params = point.numeric_params  # a categorical level is the agent's alone
        if not params:
            return None
        label = ",".join(f"{name}={value!r}" for name, value in params.items())
        if label not in self.scenarios:
            self.scenarios[label] = load_scenario(self.options.scenario.path, params)
        return self.scenarios[label]

    def _budgets(self, budgets: Budgets) -> Budgets:
        if self.options.budget_s is None:
            return budgets
        return replace(budgets, wall_s=self.options.budget_s)

    def _usage(self, key: str) -> Usage | None:
        stats = self.proxy.episode_stats(key)
        return Usage(stats.requests, stats.tokens) if stats else None

    async def _reset(self, task, state: str | None, env: dict[str, str]) -> str | None:
        if not task.reset_url:
            return None
        url = expand(task.reset_url, env)
        try:
            response = await self.direct.post(url, json={"state": state} if state else None)
            response.raise_for_status()
        except httpx.HTTPError as error:
            return f"reset {url} failed: {error}"
        return None

    async def _fetch_state(self, task, env: dict[str, str]) -> tuple[Any, str | None]:
        if not task.state_url:
            return None, None
        url = expand(task.state_url, env)
        try:
            response = await self.direct.get(url)
            response.raise_for_status()
            return response.json(), None
        except (httpx.HTTPError, ValueError) as error:
            return None, f"state {url} unavailable: {error}"


def direct_verify(options: RunOptions) -> ssl.SSLContext | bool:
    """How the runner's own fetches (reset_url, state_url) verify TLS: as the proxy does."""
    if options.insecure_upstream:
        return False
    context = ssl.create_default_context(cafile=certifi.where())
    if options.upstream_ca:
        context.load_verify_locations(cafile=str(options.upstream_ca))
    return context


def episode_identity(episode: PlannedEpisode) -> EpisodeIdentity:
    """The fields of an episode line that the plan fixes, before anything runs."""
    task, variant, point = episode.task, episode.variant, episode.point
    return {
        "key": episode.key, "task_id": task.id, "trial": episode.trial, "variant": variant.index,
        "seed": variant.seed, "prompt": variant.prompt, "state": variant.state, "shape": task.shape,
        "grid_label": point.label, "params": dict(point.params), "model": point.model,
    }


def unfinished_record(options: RunOptions, episode: PlannedEpisode, cause: str, detail: str) -> EpisodeRecord:
    """The line for an episode that ended without a result from its agent (e.g. `worker_lost`,
    `reset_failed`): incomplete with `cause` and `detail`, no trace, judged like any other."""
    record: EpisodeRecord = {
        **episode_identity(episode),
        "completed": False, "cause": cause, "cause_detail": detail, "exit_code": None, "started": round(time.time(), 3), "duration_s": 0.0,
        "output": None, "output_error": None, "end_state": None, "state_error": None,
        "stats": {"exchanges": 0, "tokens": 0, "faults": 0},
        "trace": f"{FLOWS_DIR}/{trace_path(Path(), episode.key).name}", "log_tail": detail[-4000:],
    }
    record["verdict"] = judge_episode(episode.task, record, [], options.tasks.severity)
    return record
