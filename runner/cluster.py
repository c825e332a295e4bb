"""A Dask cluster of real processes on this machine: a `dask scheduler` and N `dask worker`s
on 127.0.0.1, for trying `--executor dask` on one machine; the tests and bench/dask_throughput
use it too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class ProcessCluster:
    """`dask scheduler` and N `dask worker` processes on 127.0.0.1, ephemeral ports.

        with ProcessCluster(workers=2, nthreads=4) as cluster:
            run(replace(options, executor="dask", scheduler=cluster.address))
    """

    def __init__(self, workers: int = 2, nthreads: int = 4, env: dict[str, str] | None = None,
                 directory: Path | None = None) -> None:
        self.n_workers, self.nthreads = workers, nthreads
        self.env = {**os.environ, **(env or {})}
        self.directory = Path(directory or tempfile.mkdtemp(prefix="faultproxy-cluster-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.scheduler: Any = None
        self.workers: list[Any] = []
        self.address = ""

    def __enter__(self) -> ProcessCluster:
        try:
            scheduler_file = self.directory / "scheduler.json"
            self.scheduler = self._start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                         "--no-dashboard", "--scheduler-file", str(scheduler_file))
            self.address = self._wait_address(scheduler_file)
            for _ in range(self.n_workers):
                self.add_worker()
            self.wait_for_workers(self.n_workers)
        except BaseException:
            self.__exit__()
            raise
        return self

    def add_worker(self) -> None:
        self.workers.append(self._start(
            f"worker{len(self.workers)}", "worker", self.address, "--host", "127.0.0.1", "--nworkers", "1",
            "--nthreads", str(self.nthreads), "--no-dashboard", "--local-directory", str(self.directory),
        ))

    def wait_for_workers(self, n: int, timeout: float = 60) -> None:
        from distributed import Client

        with Client(self.address, timeout=timeout) as client:
            client.wait_for_workers(n, timeout=timeout)

    def __exit__(self, *exc: object) -> None:
        # Workers first: a worker whose scheduler went away first lingers for its nanny's 8 s timeout.
        for group in (self.workers, [self.scheduler]):
            for process in group:
                if process and process.poll() is None:
                    process.terminate()
            for process in group:
                if process:
                    try:
                        process.wait(15)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()

    def _start(self, name: str, *args: str) -> Any:
        """`dask ARGS...` with this interpreter; its log in DIRECTORY/NAME.log."""
        with (self.directory / f"{name}.log").open("ab") as log_file:
            return subprocess.Popen([sys.executable, "-m", "dask", *args], env=self.env, cwd=self.directory,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file)

    def _wait_address(self, scheduler_file: Path, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"dask scheduler exited; see {self.directory / 'scheduler.log'}")
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        raise RuntimeError("dask scheduler did not start")
