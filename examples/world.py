"""Start and stop the demo world (the shop and the scripted model) on free loopback ports.

    async with running_world(latency_ms=0) as world:
        world.shop_url, world.model_url, world.env("episode-1")

In-process by default (cheapest, for tests); `subprocesses=True` runs each server as its own
script, as a user would. `python -m examples.world` starts both and prints how to run an agent.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import shlex
import sys
import threading
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

from examples.model_server import ModelServer, add_arguments
from examples.shop import Shop, serve

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class World:
    shop_url: str  # the shop's root: the "default" tenant; tenant T lives under shop_url/t/T
    model_url: str  # the OpenAI base URL, ending in /v1

    def tenant_url(self, tenant: str) -> str:
        return f"{self.shop_url}/t/{tenant}"

    def env(self, tenant: str | None = None) -> dict[str, str]:
        """The environment an agent needs to run in this world (on one tenant, if given)."""
        return {"SHOP_ROOT": self.shop_url, "SHOP_URL": self.tenant_url(tenant) if tenant else self.shop_url,
                "OPENAI_BASE_URL": self.model_url, "OPENAI_API_KEY": "demo",
                "GOOGLE_GEMINI_BASE_URL": self.model_url.removesuffix("/v1"), "GEMINI_API_KEY": "demo"}


@asynccontextmanager
async def running_world(*, seed: int = 0, latency_ms: float = 0, chunk_latency_ms: float = 0,
                        error_rate: float | None = None, temperature_default: float = 1.0,
                        drop_first_refund_response: bool = False, subprocesses: bool = False) -> AsyncIterator[World]:
    """Both servers on 127.0.0.1, ephemeral ports; stopped on exit."""
    if subprocesses:
        model_args = ["--seed", str(seed), "--latency-ms", str(latency_ms), "--chunk-latency-ms", str(chunk_latency_ms),
                      "--temperature-default", str(temperature_default)]
        model_args += ["--error-rate", str(error_rate)] if error_rate is not None else []
        shop_args = ["--drop-first-refund-response"] if drop_first_refund_response else []
        async with _server_process("shop.py", shop_args) as shop_url, \
                _server_process("model_server.py", model_args) as model_url:
            yield World(shop_url, model_url)
        return
    model = ModelServer(latency_ms=latency_ms, chunk_latency_ms=chunk_latency_ms, error_rate=error_rate,
                        temperature_default=temperature_default, seed=seed)
    shop_runner, shop_port = await serve(Shop(drop_first_refund_response).app(), 0)
    model_runner, model_port = await serve(model.app(), 0)
    try:
        yield World(f"http://127.0.0.1:{shop_port}", f"http://127.0.0.1:{model_port}/v1")
    finally:
        await model_runner.cleanup()
        await shop_runner.cleanup()


@contextmanager
def world_in_thread(**options) -> Iterator[World]:
    """The world in a background thread, for synchronous callers (the runner, the demo)."""
    started: queue.Queue = queue.Queue()
    stop = threading.Event()

    async def serve() -> None:
        try:
            async with running_world(**options) as world:
                started.put(world)
                while not stop.is_set():
                    await asyncio.sleep(0.05)
        except Exception as error:  # handed to the caller, who raises it
            started.put(error)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True, name="demo-world")
    thread.start()
    world = started.get(timeout=30)
    if isinstance(world, Exception):
        raise world
    try:
        yield world
    finally:
        stop.set()
        thread.join(10)


@asynccontextmanager
async def _server_process(script: str, args: list[str]) -> AsyncIterator[str]:
    """Run examples/<script> --port 0; yields the URL it prints on its first line."""
    proc = await asyncio.create_subprocess_exec(sys.executable, str(HERE / script), "--port", "0", *args,
                                                stdout=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        if not line:
            raise RuntimeError(f"{script} exited (status {await proc.wait()}) before printing its URL")
        yield line.decode().strip()
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def _main(args: argparse.Namespace) -> None:
    async with running_world(seed=args.seed, latency_ms=args.latency_ms, chunk_latency_ms=args.chunk_latency_ms,
                             error_rate=args.error_rate, temperature_default=args.temperature_default) as world:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in world.env().items())
        print(f"shop:  {world.shop_url}\nmodel: {world.model_url}\n\nIn another shell:\n  export {exports}\n"
              f"  python examples/careful_agent.py --prompt 'Refund order 1001; the item arrived broken.'\n"
              f"  curl -s $SHOP_URL/_log\n\nCtrl-C stops the world.", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description="Run the demo shop and the scripted model server on 127.0.0.1.")
    add_arguments(cli)
    try:
        asyncio.run(_main(cli.parse_args()))
    except KeyboardInterrupt:
        pass
