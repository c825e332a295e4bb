"""`faultproxy run`: the plan's episodes, each an agent process behind the proxy, one log.

Per episode: reset the world (directly, never through the proxy), start the episode in the
proxy, run the agent with the episode's environment, close the episode's trace, read the end
state (directly), judge, and append one line to the log. Episodes already in the log are
skipped, so a rerun resumes; an interrupted episode was never logged and runs again.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from evaluator.judge import judge_episode
from evaluator.rundir import FLOWS_DIR, EpisodeLog, write_plan
from proxy import __version__
from proxy.runner.agent import AgentEnvironment, AgentResult, Usage, fill_placeholders, run_agent
from proxy.runner.plan import GridPoint, PlannedEpisode, plan_episodes
from proxy.runner.progress import RunProgress
from proxy.runner.tasks import Budgets, TaskSet, expand
from proxy.runner.variants import make_variant
from proxy.server import ProxyServer
from proxy.trace import read_trace, trace_path
from scenarios import Scenario, load_scenario

if TYPE_CHECKING:
    from proxy.runner.executors import Executor

log = structlog.get_logger("faultproxy.run")
DIRECT_TIMEOUT_S = 10.0


@dataclass
class RunOptions:
    scenario: Scenario
    tasks: TaskSet
    command: list[str]
    out: Path
    k: int = 1
    grid: list[GridPoint] = field(default_factory=lambda: [GridPoint()])
    parallel: int = 1
    budget_s: float | None = None
    upstreams: dict[str, str] = field(default_factory=dict)
    no_proxy: list[str] = field(default_factory=list)
    variant_function: Any = None
    secret_env: list[str] = field(default_factory=list)
    insecure_upstream: bool = False
    upstream_ca: Path | None = None
    rewrite_model: bool = False  # the proxy sets model API requests' `model` to the grid point's model
    show_progress: bool = True
    executor: str = "local"  # "local" (a pool of agent processes here) or "dask" (see executors.py)
    scheduler: str | None = None  # the Dask scheduler's address, tcp://HOST:PORT


@dataclass
class RunResult:
    planned: int
    logged: int
    ran: int
    interrupted: bool
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # episodes the harness could not run (not logged)

    @property
    def complete(self) -> bool:
        return self.logged == self.planned


def plan_document(options: RunOptions) -> tuple[dict, dict]:
    """plan.json's content and the log header that names it."""
    grid = [point.to_json() for point in options.grid]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    plan = {
        "faultproxy_version": __version__,
        "scenario": {"name": options.scenario.name, "digest": options.scenario.digest,
                     "path": options.scenario.path, "params": dict(options.scenario.params)},
        "tasks": {"path": options.tasks.path, "digest": options.tasks.digest, "severity": dict(options.tasks.severity),
                  "prices": {m: dict(p) for m, p in options.tasks.prices.items()},
                  "items": [task.to_json() for task in options.tasks.tasks]},
        "k": options.k, "grid": grid, "command": options.command, "created": created,
        "upstreams": dict(options.upstreams), "rewrite_model": options.rewrite_model,
    }
    header = {"faultproxy_version": __version__, "scenario_digest": options.scenario.digest,
              "tasks_digest": options.tasks.digest, "k": options.k, "grid": grid,
              "command": options.command, "created": created}
    return plan, header


def run(options: RunOptions, runner_class: type[EpisodeRunner] | None = None) -> RunResult:
    """Run every planned episode not yet logged; `runner_class` chooses how agents are launched,
    `options.executor` where (this machine, or a Dask cluster)."""
    from proxy.runner.executors import make_executor  # it imports this module

    runner_class = runner_class or EpisodeRunner
    plan, header = plan_document(options)
    episode_log = EpisodeLog(options.out, header)  # refuses a log of another plan before anything runs
    try:
        if not (options.out / "plan.json").exists() or not episode_log.done:
            write_plan(options.out, plan)
        variants = lambda task, trial: make_variant(task, trial, options.variant_function)  # noqa: E731
        planned = plan_episodes(options.tasks.tasks, options.k, options.grid, variants)
        todo = [e for e in planned if e.key not in episode_log.done]  # trial-major, as planned
        counts = Counter(e["verdict"]["status"] for e in episode_log.done.values() if e.get("verdict"))
        executor = make_executor(options, runner_class, episode_log, counts)
        ran, interrupted, errors = asyncio.run(drive(options, executor, todo, len(planned), episode_log, counts))
    finally:
        episode_log.close()
    return RunResult(len(planned), len(episode_log.done), ran, interrupted, counts, errors)


async def drive(options: RunOptions, executor: Executor, todo: list[PlannedEpisode], planned: int,
                episode_log: EpisodeLog, counts: Counter) -> tuple[int, bool, list[str]]:
    """The driver's half, whatever the executor: hand it the episodes in plan order and log what
    comes back, each key at most once. Only this writes the run directory."""
    ran, errors = 0, []
    async with executor:  # starts the proxy, or connects to the cluster and checks its workers
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        try:
            with RunProgress(planned, planned - len(todo), counts, options.show_progress) as progress:

                async def consume() -> None:
                    nonlocal ran
                    async for finished in executor.run(todo):
                        key = finished.episode.key
                        if finished.record is None:  # the harness failed: not logged, so it runs on resume
                            errors.append(f"{key}: {finished.error}")
                            log.warning("episode_not_run", episode=key, error=finished.error)
                            continue
                        if key in episode_log.done:  # e.g. an executor that ran it twice: log it once
                            log.warning("episode_already_logged", episode=key)
                            continue
                        if finished.trace is not None:  # run elsewhere: its trace travelled with it
                            write_trace_text(options.out, finished.record, finished.trace)
                        episode_log.append(finished.record)
                        ran += 1
                        counts[finished.record["verdict"]["status"]] += 1
                        progress.advance()

                consumer = asyncio.create_task(consume())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({consumer, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if not consumer.done():  # interrupted: what is still running is not logged, so it runs on resume
                    consumer.cancel()
                    await asyncio.gather(consumer, return_exceptions=True)
                else:
                    consumer.result()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    return ran, stop.is_set(), errors


def write_trace_text(out: Path, record: dict[str, Any], text: str) -> None:
    """Write a trace that was recorded elsewhere; whole or not at all (a rerun replaces it)."""
    target = out / record["trace"]
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, target)


def _task_secrets(tasks: TaskSet) -> list[str]:
    return sorted({name for task in tasks.tasks for name in task.secrets})


class EpisodeRunner:
    def __init__(self, options: RunOptions, proxy: ProxyServer, episode_log: EpisodeLog, counts: Counter) -> None:
        self.options, self.proxy, self.log, self.counts = options, proxy, episode_log, counts
        self.scenarios: dict[str, Scenario] = {}
        self.direct = httpx.AsyncClient(trust_env=False, timeout=DIRECT_TIMEOUT_S)  # never through the proxy

    async def aclose(self) -> None:
        await self.direct.aclose()

    async def run_episode(self, episode: PlannedEpisode) -> dict[str, Any]:
        task, variant, point = episode.task, episode.variant, episode.point
        harness_env = {**os.environ, "FAULTPROXY_EPISODE": episode.key}
        task_env = {name: expand(value, harness_env) for name, value in {**self.options.tasks.env, **task.env}.items()}
        url_env = {**harness_env, **task_env}
        files = self.options.out / "episodes" / episode.key
        files.mkdir(parents=True, exist_ok=True)
        task_file, output_file = files / "task.json", files / "output.json"
        output_file.unlink(missing_ok=True)
        task_file.write_text(json.dumps({"task": task.to_json(), "variant": variant.index, "prompt": variant.prompt,
                                         "state": variant.state, "seed": variant.seed}))
        reset_error = await self._reset(task, variant.state, url_env)
        await asyncio.to_thread(self.proxy.begin_episode, episode.key, self._scenario_for(point),
                                point.model if self.options.rewrite_model else None)
        environment = AgentEnvironment(
            proxy_url=self.proxy.proxy_url(episode.key), ca_bundle=self.proxy.ca_bundle, episode=episode.key,
            task_file=task_file, output_file=output_file, prompt=variant.prompt, seed=variant.seed,
            model=point.model, params=dict(point.params), no_proxy=self.options.no_proxy,
            base_urls={name: self.proxy.reverse_url(episode.key, name) for name in self.options.upstreams},
            extra=task_env,
        )
        started = time.time()
        result = await self.launch(episode, environment)
        stats = await asyncio.to_thread(self.proxy.end_episode, episode.key)
        end_state, state_error = await self._fetch_state(task, url_env)
        record = {
            **episode_identity(episode),
            "completed": result.cause is None and reset_error is None,
            "cause": result.cause or ("harness_error" if reset_error else None),
            "exit_code": result.exit_code, "started": round(started, 3), "duration_s": round(result.duration_s, 3),
            "output": result.output, "output_error": result.output_error,
            "end_state": end_state, "state_error": state_error or reset_error,
            "stats": {"exchanges": stats.exchanges if stats else 0, "tokens": stats.tokens if stats else 0,
                      "faults": stats.faults if stats else 0},
            "trace": f"{FLOWS_DIR}/{trace_path(Path(), episode.key).name}",
            "log_tail": self.proxy.injector.redactor.text(result.log_tail),
        }
        trace = read_trace(self.options.out / record["trace"])
        record["verdict"] = judge_episode(task, record, trace, self.options.tasks.severity)
        return record

    async def launch(self, episode: PlannedEpisode, environment: AgentEnvironment) -> AgentResult:
        """Run the agent command as a process of its own."""
        variant, point = episode.variant, episode.point
        command = fill_placeholders(self.options.command, {
            "prompt": variant.prompt, "task_id": episode.task.id, "variant": variant.index, "seed": variant.seed,
            **{name: f"{value:g}" for name, value in point.params}, "model": point.model or "",
        })
        return await run_agent(
            command, environment.build(os.environ), self._budgets(episode.task.budgets),
            lambda: self._usage(episode.key), environment.output_file,
        )

    def _scenario_for(self, point: GridPoint) -> Scenario | None:
        if not point.params:
            return None
        label = point.label
        if label not in self.scenarios:
            self.scenarios[label] = load_scenario(self.options.scenario.path, dict(point.params))
        return self.scenarios[label]

    def _budgets(self, budgets: Budgets) -> Budgets:
        if self.options.budget_s is None:
            return budgets
        return Budgets(self.options.budget_s, budgets.requests, budgets.tokens)

    def _usage(self, key: str) -> Usage | None:
        stats = self.proxy.episode_stats(key)
        return Usage(stats.exchanges, stats.tokens) if stats else None

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


def episode_identity(episode: PlannedEpisode) -> dict[str, Any]:
    """The fields of an episode line that the plan fixes, before anything runs."""
    task, variant, point = episode.task, episode.variant, episode.point
    return {
        "key": episode.key, "task_id": task.id, "trial": episode.trial, "variant": variant.index,
        "seed": variant.seed, "prompt": variant.prompt, "state": variant.state, "shape": task.shape,
        "grid_label": point.label, "params": dict(point.params), "model": point.model,
    }


def unfinished_record(options: RunOptions, episode: PlannedEpisode, cause: str, detail: str) -> dict[str, Any]:
    """The line for an episode that ended without a result from its agent (e.g. `worker_lost`):
    incomplete with `cause`, no trace, judged like any other."""
    record = {
        **episode_identity(episode),
        "completed": False, "cause": cause, "exit_code": None, "started": round(time.time(), 3), "duration_s": 0.0,
        "output": None, "output_error": None, "end_state": None, "state_error": None,
        "stats": {"exchanges": 0, "tokens": 0, "faults": 0},
        "trace": f"{FLOWS_DIR}/{trace_path(Path(), episode.key).name}", "log_tail": detail[-4000:],
    }
    record["verdict"] = judge_episode(episode.task, record, [], options.tasks.severity)
    return record


def resume_command(argv: Sequence[str] | None = None) -> str:
    return "faultproxy " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
