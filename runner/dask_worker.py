"""The `dask` executor, the worker's side: the checks every worker passes before the first episode
(same faultproxy, same files, the agent's executable), and the proxy, event loop and EpisodeRunner
that one run keeps in each worker process for its episodes (runner/dask_executor.py submits them)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from faultproxy.formats import __version__
from faultproxy.formats.rundir import FLOWS_DIR
from faultproxy.formats.trace import trace_path
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.executors import proxy_for
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_options import RunOptions

log = structlog.get_logger("faultproxy.executors")

CANCEL_POLL_S = 0.5
MAX_HOSTS = 4  # proxies kept per worker process (one per run; idle ones beyond this are stopped)


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_worker(needs: dict[str, Any]) -> list[str]:
    """Run on every worker (client.run): what this worker lacks, one phrase each."""
    problems = []
    if needs["version"] != __version__:
        problems.append(f"runs faultproxy {__version__}, the driver {needs['version']}")
    executable = needs.get("executable")
    if executable:
        if os.sep in executable:
            if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
                problems.append(f"the agent command {executable} is not an executable file here")
        elif shutil.which(executable) is None:
            problems.append(f"the agent command {executable} is not on PATH here")
    for label, (path, digest) in needs["files"].items():
        try:
            found = file_digest(path)
        except OSError as error:
            problems.append(f"{label} is not readable here ({error.strerror or error}); "
                            "share it (same path) or build it into the workers' image")
            continue
        if found != digest:
            problems.append(f"{label} differs from the driver's copy")
    return problems


def run_on_worker(token: str, payload: bytes, episode: PlannedEpisode) -> dict[str, Any]:
    """The Dask task: run one episode behind this worker's proxy; return its record and trace."""
    from distributed import get_worker

    worker = get_worker()
    task_key = worker.get_current_task()

    def wanted() -> bool:  # released by the scheduler (driver gone, or cancelled): stop the agent
        state = worker.state.tasks.get(task_key)
        return state is not None and state.state not in ("cancelled", "released", "forgotten")

    return WorkerHost.get(token, payload, worker.local_directory).run(episode, wanted)


class WorkerHost:
    """One run's proxy, event loop and EpisodeRunner in one worker process, shared by its threads."""

    _hosts: collections.OrderedDict[str, WorkerHost] = collections.OrderedDict()
    _lock = threading.Lock()

    @classmethod
    def get(cls, token: str, payload: bytes, directory: str | None = None) -> WorkerHost:
        with cls._lock:
            host = cls._hosts.get(token)
            if host is None:
                import cloudpickle

                options, runner_class = cloudpickle.loads(payload)
                host = cls._hosts[token] = WorkerHost(options, runner_class, directory)
                idle = [t for t, h in cls._hosts.items() if t != token and not h.busy]  # oldest first
                for old in idle[: max(len(cls._hosts) - MAX_HOSTS, 0)]:
                    cls._hosts.pop(old).stop()
            cls._hosts.move_to_end(token)
            host.busy += 1
        return host

    def __init__(self, options: RunOptions, runner_class: type[EpisodeRunner], directory: str | None) -> None:
        self.busy = 0
        self.scratch = Path(tempfile.mkdtemp(prefix="faultproxy-", dir=directory))
        self.options = dataclasses.replace(options, out=self.scratch)
        self.proxy = proxy_for(self.options, self.scratch / FLOWS_DIR).start()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="faultproxy-episodes", daemon=True)
        self.thread.start()
        self.runner = runner_class(self.options, self.proxy, None, collections.Counter())
        self.keys: dict[str, asyncio.Lock] = {}
        log.info("worker_proxy_started", port=self.proxy.port, scratch=str(self.scratch), pid=os.getpid())

    def run(self, episode: PlannedEpisode, wanted: Callable[[], bool]) -> dict[str, Any]:
        try:
            future = asyncio.run_coroutine_threadsafe(self._guarded(episode, wanted), self.loop)
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                raise RuntimeError(f"episode {episode.key} was cancelled on this worker") from None
        finally:
            with WorkerHost._lock:
                self.busy -= 1

    async def _guarded(self, episode: PlannedEpisode, wanted: Callable[[], bool]) -> dict[str, Any]:
        # One attempt at a key at a time in this proxy (an earlier driver's may still be stopping).
        async with self.keys.setdefault(episode.key, asyncio.Lock()):
            task = asyncio.ensure_future(self._run(episode))
            while not task.done():
                await asyncio.wait({task}, timeout=CANCEL_POLL_S)
                if not task.done() and not wanted():
                    task.cancel()  # run_agent kills the agent's process group on the way out
                    log.info("episode_cancelled", episode=episode.key)
            return task.result()

    async def _run(self, episode: PlannedEpisode) -> dict[str, Any]:
        trace = self.scratch / FLOWS_DIR / trace_path(Path(), episode.key).name
        try:
            record = await self.runner.run_episode(episode)
            text = trace.read_text(encoding="utf-8") if trace.exists() else ""
            return {"record": record, "trace": text[: text.rfind("\n") + 1]}
        finally:
            await asyncio.to_thread(self.proxy.end_episode, episode.key)  # no-op when it ended normally
            trace.unlink(missing_ok=True)
            shutil.rmtree(self.scratch / "episodes" / episode.key, ignore_errors=True)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.runner.aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.proxy.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)
