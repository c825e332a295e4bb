"""`faultproxy run`: the plan's episodes, each an agent process behind the proxy, one log.

Per episode: reset the world (directly, never through the proxy), start the episode in the
proxy, run the agent with the episode's environment, close the episode's trace, read the end
state (directly), judge, and append one line to the log. Episodes already in the log are
skipped, so a rerun resumes; an interrupted episode was never logged and runs again.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from faultproxy.evaluator.gate import PLAN_KEY, Design
from faultproxy.formats import __version__
from faultproxy.formats.errors import UsageError
from faultproxy.formats.files import write_whole
from faultproxy.formats.redact import Redactor
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.formats.rundir import EpisodeLog, read_plan, write_plan
from faultproxy.otel import OtelExport
from faultproxy.replay_store.freeze import base_url_variables
from faultproxy.runner.agent_guard import end_leftover_agents
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.dask_executor import DaskExecutor
from faultproxy.runner.executors import EXECUTORS, Executor, ExecutorError
from faultproxy.runner.local_executor import LocalExecutor
from faultproxy.runner.plan import PlannedEpisode, plan_episodes
from faultproxy.runner.preflight import check_can_start
from faultproxy.runner.progress import RunProgress
from faultproxy.runner.run_options import RunOptions, RunResult
from faultproxy.runner.secrets import run_redactor
from faultproxy.runner.variants import make_variant

log = structlog.get_logger("faultproxy.run")


def plan_document(options: RunOptions, redactor: Redactor | None = None) -> tuple[dict, dict]:
    """plan.json's content and the log header that names it, both redacted (a task's env may
    hold a secret's value, the agent command a key)."""
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
        "upstreams": dict(options.upstreams), "rewrites": dict(options.rewrites),
        **({"base_url_env": dict(options.base_url_env)} if options.base_url_env else {}),
        "faults_possible": options.faults_possible(),
        "rules_possible": options.rules_possible(),
        "base_urls": base_url_variables(os.environ),  # what a frozen episode's agent needs to reach the same URLs
        **({PLAN_KEY: options.sequential} if options.sequential else {}),
        **({"chat": options.chat} if options.chat else {}),  # how the agent heard its tasks' users (runner.chat)
    }
    header = {"faultproxy_version": __version__, "scenario_digest": options.scenario.digest,
              "tasks_digest": options.tasks.digest, "k": options.k, "grid": grid,
              "command": options.command, "created": created, **({"chat": options.chat} if options.chat else {})}
    redactor = redactor or run_redactor(options)
    return redactor.document(plan), redactor.document(header)


def run(options: RunOptions, runner_class: type[EpisodeRunner] | None = None,
        export: OtelExport | None = None, upto: int | None = None) -> RunResult:
    """Run every planned episode not yet logged; `runner_class` chooses how agents are launched,
    `options.executor` where (this machine, or a Dask cluster); `export`, when given, gets each
    episode as it is logged (OpenTelemetry spans; the caller closes it). With `upto`, only the
    trials below it (a round of a sequential run: runner.sequential_runs); the result counts those alone."""
    runner_class = runner_class or EpisodeRunner
    check_can_start(options, runner_class)  # nothing is written for a run that could judge nothing
    redactor = run_redactor(options)  # refuses a too-short secret before anything runs
    plan, header = plan_document(options, redactor)
    episode_log = EpisodeLog(options.out, header)  # refuses a log of another plan before anything runs
    end_leftover_agents(options.out)  # an earlier run's agents, if its watchdog died with it
    try:
        if not (options.out / "plan.json").exists() or not episode_log.done:
            write_plan(options.out, plan)
        else:
            check_sealed_design(options.out, plan)
        variants = lambda task, trial: make_variant(task, trial, options.variant_function)  # noqa: E731
        planned = [e for e in plan_episodes(options.tasks.tasks, options.k, options.grid, variants)
                   if upto is None or e.trial < upto]
        todo = [e for e in planned if e.key not in episode_log.done]  # trial-major, as planned
        # Only planned keys count: a line the plan does not name is ignored, as reports ignore it.
        counts = Counter(episode_log.done[e.key]["verdict"]["status"] for e in planned
                         if e.key in episode_log.done and episode_log.done[e.key].get("verdict"))
        ran, interrupted, errors = 0, False, []
        if todo:  # a finished round or run starts no proxy
            executor = make_executor(options, runner_class, episode_log, counts)
            ran, interrupted, errors = asyncio.run(drive(options, executor, todo, len(planned), episode_log, counts,
                                                         redactor, export))
    finally:
        episode_log.close()
    return RunResult(len(planned), sum(1 for e in planned if e.key in episode_log.done), ran, interrupted, counts,
                     errors)


def check_sealed_design(out: Path, plan: dict[str, Any]) -> None:
    """A run resumes with the sequential design it was sealed with, or none if it had none: its
    error rates hold for that design only (UsageError, exit 2)."""
    sealed, asked = read_plan(out).document.get(PLAN_KEY), plan.get(PLAN_KEY)
    if sealed is None and asked is None:
        return
    if sealed is None or asked is None:
        was, now = ("a fixed k", "--until-decided") if sealed is None else ("--until-decided", "a fixed k")
        raise UsageError(f"{out} was run with {was}; it cannot be resumed with {now}: start a new --out")
    differ = Design.from_json(sealed, str(out)).differences(Design.from_json(asked, "this run"))
    if differ:
        raise UsageError(f"{out} was sealed with another sequential design ({'; '.join(differ)}); resume it with "
                         "the same --baseline, --alpha, --margin, --max-high, --min-k and --max-k")


def make_executor(options: RunOptions, runner_class: type[EpisodeRunner] = EpisodeRunner,
                  episode_log: EpisodeLog | None = None, counts: Counter | None = None) -> Executor:
    """Where the episodes run: `options.executor` by name (runner/executors.py)."""
    if options.executor == "local":
        if options.scheduler:
            raise ExecutorError("--scheduler is for --executor dask")
        return LocalExecutor(options, runner_class, episode_log, counts)
    if options.executor == "dask":
        return DaskExecutor(options, runner_class, options.scheduler)
    raise ExecutorError(f"unknown executor {options.executor!r}; choose one of: {', '.join(EXECUTORS)}")


async def drive(options: RunOptions, executor: Executor, todo: list[PlannedEpisode], planned: int,
                episode_log: EpisodeLog, counts: Counter, redactor: Redactor,
                export: OtelExport | None = None) -> tuple[int, bool, list[str]]:
    """The driver's half, whatever the executor: hand it the episodes in plan order and log what
    comes back, each key at most once. Only this writes the run directory, through `redactor`
    (whichever executor ran the episode); a logged episode then goes to `export` (off the loop)."""
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
                    episodes = executor.run(todo)
                    try:
                        async for finished in episodes:
                            key = finished.episode.key
                            if finished.disk_full is not None:  # nothing more can be recorded: stop here
                                raise finished.disk_full
                            if finished.record is None:  # the harness failed: not logged, so it runs on resume
                                errors.append(f"{key}: {finished.error}")
                                log.warning("episode_not_run", episode=key, error=finished.error)
                                continue
                            if key in episode_log.done:  # e.g. an executor that ran it twice: log it once
                                log.warning("episode_already_logged", episode=key)
                                continue
                            if finished.trace is not None:  # run elsewhere: its trace travelled with it
                                write_trace_text(options.out, finished.record, redactor.text(finished.trace))
                            logged = redactor.document(finished.record)
                            episode_log.append(logged)
                            if export is not None:
                                await asyncio.to_thread(export.export_logged, options.out, logged)
                            ran += 1
                            counts[finished.record["verdict"]["status"]] += 1
                            progress.advance()
                    finally:  # what still runs ends before the run does (a full disk stops it mid-way)
                        await episodes.aclose()

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


def write_trace_text(out: Path, record: EpisodeRecord, text: str) -> None:
    """Write a trace that was recorded elsewhere; whole or not at all (a rerun replaces it)."""
    target = out / record["trace"]
    target.parent.mkdir(parents=True, exist_ok=True)
    write_whole(target, text)


def resume_command(argv: Sequence[str] | None = None) -> str:
    return "faultproxy " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
