"""The `local` executor: one proxy in this process and at most `--parallel` agents at once, started
in plan order (runner/executors.py has the interface it implements)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import no_space
from faultproxy.formats.rundir import FLOWS_DIR, EpisodeLog
from faultproxy.proxy.server import ProxyServer
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.executors import Executor, Finished, proxy_for
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_options import RunOptions


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


def disk_full(error: BaseException, out: Path) -> DiskFull | None:
    """The full disk behind an episode's failure, if that is what it was (named by the file, or
    else by the run directory)."""
    if isinstance(error, DiskFull):
        return error
    found = no_space(error, error.filename or out) if isinstance(error, OSError) else None
    return found if isinstance(found, DiskFull) else None
