"""The `dask` executor, the driver's side: episodes as Dask tasks on a cluster whose workers each run
them behind a proxy of their own (runner/dask_worker.py), checked before the first episode; the
records and traces come back to the driver, which alone writes the run directory."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import structlog
from faultproxy.formats import __version__
from faultproxy.runner.dask_worker import check_worker, file_digest, run_on_worker
from faultproxy.runner.episode import EpisodeRunner, unfinished_record
from faultproxy.runner.executors import Executor, ExecutorError, Finished
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_options import RunOptions, task_secret_names

log = structlog.get_logger("faultproxy.executors")

CONNECT_TIMEOUT_S = 20.0
WORKERS_TIMEOUT_S = 30.0  # how long to wait for a scheduler's first worker
TASK_RETRIES = 2  # a task that raises runs again (a dead worker is the scheduler's allowed-failures)


class DaskExecutor(Executor):
    """Episodes as Dask tasks; each worker process runs them behind its own proxy."""

    name = "dask"

    def __init__(self, options: RunOptions, runner_class: type[EpisodeRunner] = EpisodeRunner,
                 scheduler: str | None = None) -> None:
        self.options, self.runner_class, self.scheduler = options, runner_class, scheduler
        self.client: Any = None
        self.session = uuid.uuid4().hex[:8]

    async def __aenter__(self) -> DaskExecutor:
        try:
            import dask
            from distributed import Client
        except ImportError:
            raise ExecutorError("--executor dask needs Dask: pip install 'faultproxy[distributed]'") from None
        address = self.scheduler or dask.config.get("scheduler-address", None)
        if not address:
            raise ExecutorError("--executor dask needs --scheduler tcp://HOST:PORT (or DASK_SCHEDULER_ADDRESS)")
        try:
            from distributed.comm.addressing import parse_address, parse_host_port

            parse_host_port(parse_address(address)[1])
        except ValueError as error:
            raise ExecutorError(f"--scheduler {address}: {one_line(error)}; give tcp://HOST:PORT") from None
        try:
            self.client = await Client(address, asynchronous=True, timeout=CONNECT_TIMEOUT_S,
                                       set_as_default=False, name=f"faultproxy-{self.session}")
        except (OSError, TimeoutError, ValueError) as error:
            raise ExecutorError(f"cannot reach the Dask scheduler at {address}: {one_line(error)}") from None
        try:
            await self._check_workers(address)
        except BaseException:
            await self.client.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()

    async def _check_workers(self, address: str) -> None:
        try:
            await self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except TimeoutError:
            raise ExecutorError(f"no Dask worker joined the scheduler at {address} within "
                                f"{WORKERS_TIMEOUT_S:g} s; start one: dask worker {address}") from None
        needs = worker_needs(self.options, launches_command=self.runner_class.launch is EpisodeRunner.launch)
        answers = await self.client.run(check_worker, needs)
        problems = [f"worker {worker}: {problem}" for worker, found in sorted(answers.items()) for problem in found]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ExecutorError(problems[0] + more)
        log.info("dask_workers_checked", scheduler=address, workers=len(answers))

    async def run(self, episodes: Sequence[PlannedEpisode]) -> AsyncIterator[Finished]:
        from distributed import KilledWorker

        payload = worker_payload(self.options, self.runner_class)
        token = hashlib.sha256(payload).hexdigest()[:16]
        queue = collections.deque(enumerate(episodes))
        running: dict[asyncio.Task, PlannedEpisode] = {}

        async def outcome(future: Any, episode: PlannedEpisode) -> Finished:
            try:
                returned = await future
            except KilledWorker as error:
                # Every worker that tried it died (the scheduler's allowed-failures): logged once, incomplete.
                record = unfinished_record(self.options, episode, "worker_lost", one_line(error))
                return Finished(episode, record, trace="")
            except Exception as error:  # noqa: BLE001 — not logged: it runs on resume
                return Finished(episode, None, error=f"{type(error).__name__}: {one_line(error)}")
            finally:
                future.release()
            return Finished(episode, returned["record"], trace=returned["trace"])

        async def top_up() -> None:
            # One episode per worker thread, no more: each goes to a thread that is free (none waits
            # behind a busy worker while another idles), the cluster may grow or shrink meanwhile,
            # and episodes start in plan order, so a stopped run has run a trial-major prefix.
            window = max(sum((await self.client.nthreads()).values()), 1)
            while queue and len(running) < window:
                index, episode = queue.popleft()
                future = self.client.submit(
                    run_on_worker, token, payload, episode, key=f"faultproxy-{self.session}-{episode.key}",
                    retries=TASK_RETRIES, priority=-index, pure=False,
                )
                running[asyncio.ensure_future(outcome(future, episode))] = episode

        try:
            await top_up()
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.pop(task)
                await top_up()
                for task in done:
                    yield task.result()
        finally:  # closed early: cancel on the cluster what still runs (workers stop those agents)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)


def worker_payload(options: RunOptions, runner_class: type[EpisodeRunner]) -> bytes:
    """What a worker needs to host this run's episodes, pickled once per run."""
    import cloudpickle

    # Episodes carry their own task and variant; the worker needs the file-level settings only,
    # and its own scratch folder for `out`. So a rerun (or another run with the same settings)
    # pickles the same bytes and reuses the workers' proxies.
    tasks = dataclasses.replace(options.tasks, tasks=(), path="", digest="")
    worker_options = dataclasses.replace(
        options, tasks=tasks, out=Path(), secret_env=options.secret_env + task_secret_names(options.tasks),
        variant_function=None, show_progress=False, executor="local", scheduler=None,
    )
    return cloudpickle.dumps((worker_options, runner_class))


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def worker_needs(options: RunOptions, launches_command: bool = True) -> dict[str, Any]:
    """What must be the same on every worker: the files, by path and content, and the executable."""
    files: dict[str, tuple[str, str]] = {}
    if options.scenario.path and Path(options.scenario.path).is_file():
        files[f"scenario file {options.scenario.path}"] = (str(options.scenario.path),
                                                           file_digest(options.scenario.path))
    if options.tasks.path and Path(options.tasks.path).is_file():
        files[f"tasks file {options.tasks.path}"] = (str(options.tasks.path), file_digest(options.tasks.path))
    executable = None
    if launches_command and options.command:
        executable = options.command[0]
        for arg in options.command[1:]:  # e.g. the agent's script: the worker runs what the driver has
            if "{" not in arg and os.path.isfile(arg):
                files[f"agent file {arg}"] = (arg, file_digest(arg))
    return {"version": __version__, "executable": executable, "files": files}
