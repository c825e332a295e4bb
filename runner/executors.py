"""Where episodes run: here (`local`) or on a Dask cluster (`dask`), behind one small interface.

The driver (`runner.run_loop.drive`) hands an executor the episodes still to run, in plan
order (trial-major), and logs each `Finished` the executor yields. Only the driver writes the
run directory, so the log's rules (append-only, resume, refusal of another plan, NotRun) are the
same whatever runs the episodes. Another engine is one more `Executor` subclass:

    class Executor:
        async def __aenter__(self)            # start: a proxy, or a cluster connection and its checks;
                                              # ExecutorError (one line, exit 2) when it cannot
        def run(self, episodes) -> AsyncIterator[Finished]
                                              # start them in the given order, yield each as it ends;
                                              # closing the iterator stops what is still running
        async def __aexit__(self, *exc)       # release everything

`local`: one proxy in this process and `--parallel` agent processes at once (EpisodeRunner).

`dask`: each worker process hosts one proxy (a `WorkerHost`, created by the first episode that
reaches the worker and reused by the rest of the run) and runs episodes there with the same
`EpisodeRunner.run_episode` — as many at once as the worker has threads. An episode returns its
record (judged on the worker) with its trace's text, which the driver writes to flows/<episode>.jsonl
before it appends the record. A worker that dies mid-episode: the scheduler runs the episode again
elsewhere (up to its `allowed-failures`, 3 by default), and if it keeps killing workers it is
logged as incomplete with cause `worker_lost`. A key that comes back twice is logged once. If the
driver goes away, workers stop its episodes (their futures are released), and a rerun resumes.

The agent's environment on a worker is the worker's own plus the tasks file's `env`: values the
agent needs travel in the tasks file, not in the driver's environment.
"""

from __future__ import annotations

import abc
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
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from faultproxy.formats import __version__
from faultproxy.formats.errors import DiskFull, UsageError
from faultproxy.formats.files import no_space
from faultproxy.formats.rundir import FLOWS_DIR, EpisodeLog
from faultproxy.formats.trace import trace_path
from faultproxy.proxy.auth import new_token
from faultproxy.proxy.server import ProxyServer
from faultproxy.runner.episode import EpisodeRunner, unfinished_record
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_options import RunOptions, task_secret_names

log = structlog.get_logger("faultproxy.executors")

EXECUTORS = ("local", "dask")
CONNECT_TIMEOUT_S = 20.0
WORKERS_TIMEOUT_S = 30.0  # how long to wait for a scheduler's first worker
TASK_RETRIES = 2  # a task that raises runs again (a dead worker is the scheduler's allowed-failures)
CANCEL_POLL_S = 0.5
MAX_HOSTS = 4  # proxies kept per worker process (one per run; idle ones beyond this are stopped)


class ExecutorError(UsageError):
    """The executor cannot run this plan (no scheduler, a worker missing a file, ...): one line, exit 2."""


@dataclass(frozen=True)
class Finished:
    """An episode handed back to the driver: its record, or why the harness could not run it."""

    episode: PlannedEpisode
    record: dict[str, Any] | None  # the episode line, verdict included; None: not run (error says why)
    trace: str | None = None  # the trace's text when it was recorded elsewhere; None: already in flows/
    error: str | None = None
    disk_full: DiskFull | None = None  # not run because the run directory's disk is full: the run stops


class Executor(abc.ABC):
    name: str = ""

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    @abc.abstractmethod
    def run(self, episodes: Sequence[PlannedEpisode]) -> AsyncIterator[Finished]:
        """Start `episodes` in the given order; yield each as it finishes."""


def make_executor(options: RunOptions, runner_class: type[EpisodeRunner] = EpisodeRunner,
                  episode_log: EpisodeLog | None = None, counts: collections.Counter | None = None) -> Executor:
    if options.executor == "local":
        if options.scheduler:
            raise ExecutorError("--scheduler is for --executor dask")
        return LocalExecutor(options, runner_class, episode_log, counts)
    if options.executor == "dask":
        return DaskExecutor(options, runner_class, options.scheduler)
    raise ExecutorError(f"unknown executor {options.executor!r}; choose one of: {', '.join(EXECUTORS)}")


def proxy_for(options: RunOptions, trace_dir: Path) -> ProxyServer:
    """The run's proxy: a random token of its own, and only the episodes it began are let in."""
    return ProxyServer(
        options.scenario, trace_dir=trace_dir, upstreams=options.upstreams,
        secret_env=options.secret_env + task_secret_names(options.tasks), ssl_insecure=options.insecure_upstream,
        upstream_ca=options.upstream_ca, token=new_token(), only_begun=True,
    )


# --- local ----------------------------------------------------------------------------------------


class LocalExecutor(Executor):
    """One proxy in this process; at most `--parallel` agents at once, started in plan order."""

    name = "local"

    def __init__(self, options: RunOptions, runner_class: type[EpisodeRunner] = EpisodeRunner,
                 episode_log: EpisodeLog | None = None, counts: collections.Counter | None = None) -> None:
        self.options, self.runner_class = options, runner_class
        self.episode_log, self.counts = episode_log, counts if counts is not None else collections.Counter()
        self.proxy: ProxyServer | None = None
        self.runner: EpisodeRunner | None = None

    async def __aenter__(self) -> LocalExecutor:
        self.proxy = proxy_for(self.options, self.options.out / FLOWS_DIR)
        await asyncio.to_thread(self.proxy.start)
        self.runner = self.runner_class(self.options, self.proxy, self.episode_log, self.counts)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.runner:
            await self.runner.aclose()
        if self.proxy:
            await asyncio.to_thread(self.proxy.stop)

    async def run(self, episodes: Sequence[PlannedEpisode]) -> AsyncIterator[Finished]:
        slots = asyncio.Semaphore(self.options.parallel)
        finished: asyncio.Queue[Finished] = asyncio.Queue()

        async def one(episode: PlannedEpisode) -> None:
            try:
                async with slots:
                    record = await self.runner.run_episode(episode)
            except Exception as error:  # noqa: BLE001 — reported by the driver; the episode stays NotRun
                full = disk_full(error, self.options.out)  # then nothing can be recorded: the driver stops
                await finished.put(Finished(episode, None, error=str(full or f"{type(error).__name__}: {error}"),
                                            disk_full=full))
            else:
                await finished.put(Finished(episode, record))

        # Started in plan order; with N slots, at most N run at once.
        tasks = [asyncio.create_task(one(e)) for e in episodes]
        try:
            for _ in episodes:
                yield await finished.get()
        finally:  # closed early (interrupted): what still runs is not logged, so it runs on resume
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# --- dask: the driver's side ----------------------------------------------------------------------


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


def disk_full(error: BaseException, out: Path) -> DiskFull | None:
    """The full disk behind an episode's failure, if that is what it was (named by the file, or
    else by the run directory)."""
    if isinstance(error, DiskFull):
        return error
    found = no_space(error, error.filename or out) if isinstance(error, OSError) else None
    return found if isinstance(found, DiskFull) else None


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


# --- the checks every worker passes before the first episode --------------------------------------


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


# --- dask: the worker's side ----------------------------------------------------------------------


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
