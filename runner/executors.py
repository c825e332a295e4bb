"""Where episodes run: here (`local`) or on a Dask cluster (`dask`), behind one small interface.

The driver (`runner.run_loop.drive`) hands an executor the episodes still to run, in plan
order (trial-major), and logs each `Finished` the executor yields. Only the driver writes the
run directory, so the log's rules (append-only, resume, refusal of another plan, NotRun) are the
same whatever runs the episodes; the driver picks one by name (`run_loop.make_executor`). Another
engine is one more `Executor` subclass:

    class Executor:
        async def __aenter__(self)            # start: a proxy, or a cluster connection and its checks;
                                              # ExecutorError (one line, exit 2) when it cannot
        def run(self, episodes) -> AsyncIterator[Finished]
                                              # start them in the given order, yield each as it ends;
                                              # closing the iterator stops what is still running
        async def __aexit__(self, *exc)       # release everything

`local` (runner/local_executor.py): one proxy in this process and `--parallel` agent processes
at once (EpisodeRunner).

`dask` (runner/dask_executor.py, the driver's side; runner/dask_worker.py, the worker's): each
worker process hosts one proxy (a `WorkerHost`, created by the first episode that reaches the
worker and reused by the rest of the run) and runs episodes there with the same
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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from faultproxy.formats.errors import DiskFull, UsageError
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.proxy.auth import new_token
from faultproxy.proxy.server import ProxyServer
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_options import RunOptions, task_secret_names

EXECUTORS = ("local", "dask")


class ExecutorError(UsageError):
    """The executor cannot run this plan (no scheduler, a worker missing a file, ...): one line, exit 2."""


@dataclass(frozen=True)
class Finished:
    """An episode handed back to the driver: its record, or why the harness could not run it."""

    episode: PlannedEpisode
    record: EpisodeRecord | None  # the episode line, verdict included; None: not run (error says why)
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


def proxy_for(options: RunOptions, trace_dir: Path) -> ProxyServer:
    """The run's proxy: a random token of its own, and only the episodes it began are let in."""
    return ProxyServer(
        options.scenario, trace_dir=trace_dir, upstreams=options.upstreams,
        secret_env=options.secret_env + task_secret_names(options.tasks), ssl_insecure=options.insecure_upstream,
        upstream_ca=options.upstream_ca, token=new_token(), only_begun=True,
    )
