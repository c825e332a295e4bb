"""A small aiohttp upstream for proxy tests: tools, an OpenAI-like and an Anthropic-like API.

It runs in a thread with its own loop so that synchronous clients (requests, the sync SDKs)
and async ones can both talk to it through the proxy. It counts what it committed, which is
what the fault tests assert on.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import json
import ssl
import threading
from collections import Counter
from pathlib import Path

import brotli
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

try:  # the standard library's from Python 3.14; the backport (a test dependency) below it
    from compression import zstd
except ImportError:
    from backports import zstd

CHAT_WORDS = ["Hello", " from", " the", " scripted", " model", "."]


class Upstream:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.commits: Counter[str] = Counter()
        self.versions: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.middlewares.append(self._count)
        app.router.add_get("/items/{id}", self.get_item)
        app.router.add_post("/items/{id}/refund", self.refund)
        app.router.add_get("/encoded/{encoding}", self.encoded)
        app.router.add_get("/text/{size}", self.text)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/mcp", self.mcp)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler):
        self.hits[f"{request.method} {request.path}"] += 1
        return await handler(request)

    async def get_item(self, request: web.Request) -> web.Response:
        item = request.match_info["id"]
        return web.json_response({"id": item, "status": "open", "version": self.versions[item], "amount": 1250})

    async def refund(self, request: web.Request) -> web.Response:
        item = request.match_info["id"]
        self.commits[f"refund {item}"] += 1
        self.versions[item] += 1
        return web.json_response({"id": item, "refunded": True, "count": self.commits[f"refund {item}"]})

    async def encoded(self, request: web.Request) -> web.Response:
        encoding = request.match_info["encoding"]
        body = json.dumps({"status": "open", "total": 42}).encode()
        compress = {"gzip": gzip.compress, "br": brotli.compress, "zstd": zstd.compress}[encoding]
        return web.Response(body=compress(body), headers={"content-type": "application/json", "content-encoding": encoding})

    async def text(self, request: web.Request) -> web.Response:
        return web.Response(body=b"x" * int(request.match_info["size"]), content_type="text/plain")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        completion_id = f"chatcmpl-{self.hits['POST /v1/chat/completions']}"
        usage = {"prompt_tokens": 10, "completion_tokens": len(CHAT_WORDS), "total_tokens": 10 + len(CHAT_WORDS)}
        headers = {"x-request-id": f"req-{completion_id}"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(CHAT_WORDS)}
            if body.get("tools"):  # a request that offers tools gets a call of the first
                name = body["tools"][0]["function"]["name"]
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": name, "arguments": '{"id": "1"}'}}]}
            return web.json_response({
                "id": completion_id, "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage,
            }, headers=headers)
        response = web.StreamResponse(headers={"content-type": "text/event-stream", **headers})
        await response.prepare(request)
        for word in CHAT_WORDS:
            chunk = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        stop = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}  # as OpenAI ends a choice
        await response.write(f"data: {json.dumps(stop)}\n\n".encode())
        final = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                 "choices": [], "usage": usage}
        await response.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    async def messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "".join(CHAT_WORDS)}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 6},
        })

    async def mcp(self, request: web.Request) -> web.Response:
        call = await request.json()
        if call.get("method") == "tools/list":
            tools = [{"name": "refund", "description": "Refund an item.", "inputSchema": {"type": "object"}}]
            return web.json_response({"jsonrpc": "2.0", "id": call.get("id"), "result": {"tools": tools}})
        self.commits[f"mcp {call.get('params', {}).get('name')}"] += 1
        result = {"content": [{"type": "text", "text": json.dumps({"ok": True})}], "isError": False}
        return web.json_response({"jsonrpc": "2.0", "id": call.get("id"), "result": result})


class ServerThread:
    """Run an aiohttp app on 127.0.0.1 (an ephemeral port) in a thread of its own."""

    def __init__(self, app: web.Application, ssl_context: ssl.SSLContext | None = None) -> None:
        self.app, self.ssl_context = app, ssl_context
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost; returns (cert, key) paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "faultproxy test upstream")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "upstream-cert.pem", folder / "upstream-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
