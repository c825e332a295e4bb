"""One writer thread per process for append-only line files (episode traces, the rejected log).

A proxy answers its client without waiting on the disk: encoding and writing a line are jobs
this thread runs in the order they were submitted. The queue is bounded, and a full queue makes
the submitter wait (nothing is dropped). `flush()` waits until every job submitted before it has
run: whoever closes a file or reads one this process writes calls it, so a reader in this
process always sees every line submitted before it read. At exit the queue is drained; kill -9
loses only the jobs still queued.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable

QUEUE_SIZE = 4096  # lines waiting for the disk; a full queue makes the request path wait

Job = Callable[[], None]


class _Writer:
    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[Job] = queue.Queue(maxsize=size)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, job: Job) -> None:
        """Run `job` on the writer thread, after every job submitted before it."""
        if self._thread is None:
            self._start()
        self._queue.put(job)

    def flush(self) -> None:
        """Return once every job submitted before this call has run."""
        if self._thread is None or threading.current_thread() is self._thread or not self._queue.unfinished_tasks:
            return
        done = threading.Event()
        self._queue.put(done.set)
        done.wait()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="faultproxy-line-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()  # a job handles its own errors (formats.trace.TraceWriter); this thread must not die
            except Exception as error:  # noqa: BLE001 - reported, never silently lost
                _report(error)
            finally:
                self._queue.task_done()

    def reset_after_fork(self) -> None:
        """A forked child has no writer thread and must not inherit the parent's queue."""
        self.__init__()


def _report(error: BaseException) -> None:
    import structlog  # imported when needed: `faultproxy report --help` must not pay for it

    structlog.get_logger().error("trace_writer_failed", error=f"{type(error).__name__}: {error}")


WRITER = _Writer()
atexit.register(WRITER.flush)
os.register_at_fork(after_in_child=WRITER.reset_after_fork)


def submit(job: Job) -> None:
    WRITER.submit(job)


def flush() -> None:
    WRITER.flush()
