"""What the log scan (evaluator.aggregate.log_scan) hands to those who want every episode: the
EpisodeSink protocol. The causes, junit.xml, a sweep's outcomes and the sequential gate's trials
are sinks, fed by the one streaming pass the report makes."""

from __future__ import annotations

from typing import TypedDict

from faultproxy.formats.run_records import EpisodeRef, FailedCheck, Status
from faultproxy.formats.verdict_layout import VerdictFields


class SinkVerdict(TypedDict):
    """What a sink's episode() gets of a verdict: on the fast path these fields alone, else the
    whole Verdict (which has them too)."""

    status: Status
    cause: str | None
    failed: list[FailedCheck]
    episode: EpisodeRef


class EpisodeSink:
    """Receives every logged episode's verdict (in log order) and every NotRun slot.

    A sink that can work in parallel returns from shard(i) a picklable sink for the i-th chunk
    of the log; each shard sees that chunk's episodes in order and is closed in its worker,
    then absorb() takes the shards back in chunk order, before not_run() and close(). A sink
    whose shard() returns None makes the report read the log in one process.
    """

    wants_fields = False  # True: fields() gets each episode's VerdictFields instead of episode() a dict

    def episode(self, verdict: SinkVerdict) -> None:
        """One logged episode: its verdict, or (fast path) its status, cause, failed checks and episode."""

    def fields(self, v: VerdictFields, task_id: str) -> None:
        """One logged episode as the fast reader gives it (failed, faults, endpoints as JSON text):
        for sinks that keep little per episode and must not cost a dict each."""

    def not_run(self, label: str, task_id: str, trial: int) -> None:
        """A planned trial that is not in the log."""

    def close(self) -> None:
        """The log is read: finish the output."""

    def shard(self, index: int) -> EpisodeSink | None:
        """A sink for the index-th chunk of the log, or None to read the log in one process."""
        return None

    def absorb(self, shard: EpisodeSink) -> None:
        """Take back a shard from a worker (shards come back in chunk order)."""

    def abort(self) -> None:
        """The report failed: drop anything half-written."""
