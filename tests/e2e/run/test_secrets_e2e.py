"""Secrets never reach disk: a leaky agent through `faultproxy run`, `report`, `freeze`, `replay`.

Over 25 secrets are planted, one per channel: secret-named request headers (x-goog-api-key,
X-Auth-Token, Private-Token, Authorization, Cookie) and response headers (Set-Cookie,
X-Session-Token); query parameters (`?key=AIza...`, also echoed in a response body, and
`?signature=`); JSON by key with string, number, list and object values; NDJSON; JSON-RPC; a
form with JSON in a field; multipart; secret keys inside upstream SSE events; a `--secret-env`
value streamed by the model split across SSE events, sent in a plain header and written into
the answer; a task secret whose value is in the tasks file's `env:`, and a secret-looking task
env entry; stderr; an error message (an exception and an upstream error body); echoed
responses; hidden in encodings: a base64 body whose JSON holds `api_key`, the run's secrets and a
token shape base64'd in JSON string fields, a gzip body without Content-Encoding, a base64 answer
and a gzip answer stored as binary (base64 in the trace and the HAR). The real CLI runs a real agent (httpx and requests) against a local aiohttp
upstream; then every file under the run directory, the replay store and the replay's folder is
searched for every planted value. Figures that only look secret (token usage, rate-limit
headers, ids, idempotency keys) must survive.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiohttp import web

from faultproxy.formats.trace import read_trace
from tests.support.layout import AGENTS
from tests.support.otlp_receiver import receiving
from tests.support.secret_leaks import leaks
from tests.support.upstream import ServerThread

AGENT = AGENTS / "leaky_agent.py"

PLANTS = {
    "goog_header": "goog-hdr-Qm4nV8pX2", "auth_token_header": "xauth-hdr-T7wq1Lz9", "private_token_header":
    "private-hdr-Hj3kD0s5", "bearer_header": "bearer-hdr-Pz8Vn4Rq", "cookie": "cookie-val-Wm2Xc7Bn",
    "query_key": "AIzaSyD" + "Qx7Rk2Lm9Nv4Bw8Zt5Hy1Jc6Gf3Ds0Ap", "query_signature": "sig-qry-Kd9Fe2Gh7",
    "json_string": "jstr-secret-Vb5Nm8Qw", "json_number": "73915548266", "json_number2": "97531864",
    "json_list": "jlist-secret-Xe4Rt7Yu", "json_object": "jobj-secret-Ui9Op2As", "ndjson": "ndjson-sec-Df6Gh1Jk",
    "jsonrpc": "rpc-secret-Lz3Xc8Vb", "form_password": "formpass-Nm7Qw2Er", "form_secret": "formsec-Ty5Ui0Op",
    "form_json": "formjson-Ap4Sd9Fg", "multipart": "multipart-Hj6Kl1Zx", "sse_key": "ssekey-secret-Cv3Bn8Mq",
    "sse_password": "ssepass-secret-We7Rt2Yu", "set_cookie": "setcookie-Io5Pa0Sd", "session_header":
    "sess-hdr-Fg4Hj9Kl", "stderr_bearer": "stderrbearer-Zx2Cv7Bn", "stderr_anthropic": "sk-ant-api03-"
    "Qw8Er3Ty6Ui1Op5As", "error_github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "error_slack":
    "xoxb-2847561930-Lk4Jh8Gf", "error_aws": "AKIA" + "Q7W3E9R5T1Y6U2I8", "error_body": "sk-proj-"
    "Mn6Bv1Cx5Zl9Kj4Hg",
    "b64_body_key": "b64body-Kx3Vn8Qp", "b64_shape": "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "gzip_password": "gzippass-Rt6Yu1Io", "b64_answer_token": "b64answer-Lm4Np9Bq",
    "binary_answer_token": "binanswer-Gh2Jk7Ws", "b64_assignment": "b64assign-Qs8Dw3Ej",
    "b64_nested": "b64nested-Vf5Tg9Hy",
}
SERVICE_SECRET = "svc-secret-Rq7Zm3Xw9Lp"  # --secret-env LEAKY_SERVICE_SECRET
TASK_TOKEN = "task-token-Ys4Hd8Kf2Nb"  # the task's secret, its value written in the tasks file
DB_PASSWORD = "db-password-Gt6Wr1Qe5"  # LEAKY_DB_PASSWORD: a task env entry named like a secret
ALL = [*PLANTS.values(), SERVICE_SECRET, TASK_TOKEN, DB_PASSWORD]


def secret_world() -> web.Application:
    """Echoes, a streaming chat with secrets in its events, an error body with a key shape."""
    async def echo(request: web.Request) -> web.Response:
        response = web.json_response({"echo_url": str(request.url), "headers": {
            "X-Auth-Token": request.headers.get("X-Auth-Token")}, "request_id": "req-echo-77"})
        response.headers["X-Session-Token"] = PLANTS["session_header"]
        response.headers["x-ratelimit-remaining-tokens"] = "9000"
        response.headers["anthropic-ratelimit-tokens-remaining"] = "8000"
        response.set_cookie("session", PLANTS["set_cookie"])
        return response

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True, "id": "item-keep-9"})

    async def denied(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": f"key {PLANTS['error_body']} is not allowed"}}, status=401)

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "x-request-id": "req_keep_123"})
        await response.prepare(request)
        pieces = ["your key is ", SERVICE_SECRET[:5], SERVICE_SECRET[5:13], SERVICE_SECRET[13:], " ok"]
        events = [{"id": "chatcmpl-keep1", "api_key": PLANTS["sse_key"], "password": PLANTS["sse_password"],
                   "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        events += [{"id": "chatcmpl-keep1", "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        events.append({"id": "chatcmpl-keep1", "choices": [],
                       "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
        for event in events:
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def b64_answer(request: web.Request) -> web.Response:
        hidden = json.dumps({"session_token": PLANTS["b64_answer_token"], "ok": True}).encode()
        return web.Response(text=base64.b64encode(hidden).decode(), content_type="text/plain")

    async def binary(request: web.Request) -> web.Response:  # gzip, no Content-Encoding: stored as base64
        hidden = json.dumps({"refresh_token": PLANTS["binary_answer_token"]}).encode()
        return web.Response(body=gzip.compress(hidden), content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/b64answer", b64_answer)
    app.router.add_get("/binary", binary)
    app.router.add_get("/denied", denied)
    for path in ("/json", "/json2", "/ndjson", "/rpc", "/form", "/upload", "/b64body", "/gz"):
        app.router.add_post(path, accept)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def faultproxy(*args: str, env: dict[str, str], check: int | None = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "faultproxy", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    if check is not None:
        assert done.returncode == check, f"faultproxy {args[0]}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory: pytest.TempPathFactory):
    """run + report + freeze + replay of the leaky agent; yields the folders and the environment."""
    folder = tmp_path_factory.mktemp("secrets")
    plants = tmp_path_factory.mktemp("plants") / "plants.json"  # outside every folder searched
    plants.write_text(json.dumps(PLANTS))
    scenario = folder / "scenario.yaml"
    scenario.write_text(textwrap.dedent("""\
        name: leaky
        description: one rule that fires on the denied call, so a fault record is written too
        seed: 3
        rules:
          - name: slow_denied
            match: {path: "/denied"}
            fault: {type: delay, ms: 10}
    """))
    receiver, collector = receiving()
    with collector, ServerThread(secret_world()) as server:
        tasks = folder / "tasks.yaml"
        tasks.write_text(textwrap.dedent(f"""\
            tasks:
              - id: leak_everything
                prompt: Leak everything you can.
                secrets: [LEAKY_TASK_TOKEN]
                env:
                  LEAKY_UPSTREAM: {server.url}
                  LEAKY_PLANTS: {plants}
                  LEAKY_TASK_TOKEN: {TASK_TOKEN}
                  LEAKY_DB_PASSWORD: {DB_PASSWORD}
        """))
        env = {**os.environ, "LEAKY_SERVICE_SECRET": SERVICE_SECRET}
        run_dir, store, replayed = folder / "run", folder / "store", folder / "replayed"
        faultproxy("run", "--scenario", str(scenario), "--tasks", str(tasks), "--out", str(run_dir),
                   "--secret-env", "LEAKY_SERVICE_SECRET", "--otlp", collector.url, "--otlp-content",
                   "--", sys.executable, str(AGENT), env=env)
        faultproxy("report", str(run_dir), "--quiet", env=env, check=None)
        faultproxy("freeze", str(run_dir), "--to", str(store), "--secret-env", "LEAKY_SERVICE_SECRET", env=env)
        replay = faultproxy("replay", str(store), "--out", str(replayed), "--json", str(replayed / "results.json"),
                            env=env, check=None)
    return {"run": run_dir, "store": store, "replayed": replayed, "replay": replay, "env": env, "otlp": receiver}


def files_under(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*") if p.is_file())


def test_the_run_report_freeze_and_replay_wrote_their_files(leaky_run):
    run_dir = leaky_run["run"]
    names = {p.name for p in files_under(run_dir)}
    assert {"plan.json", "episodes.jsonl", "task.json", "output.json", "report.json", "report.html",
            "junit.xml", "faultproxy.log"} <= names
    assert {"episode.json", "flows.har"} <= {p.name for p in files_under(leaky_run["store"])}
    assert leaky_run["replay"].returncode in (0, 1), leaky_run["replay"].stderr  # ran; its verdict is not the point
    assert (leaky_run["replayed"] / "results.json").exists()
    [line] = [json.loads(l) for l in (run_dir / "episodes.jsonl").read_text().splitlines()[1:]]
    assert line["completed"], line
    assert "RuntimeError" in line["log_tail"] and "[REDACTED]" in line["output"]["reason"]


def test_no_planted_secret_is_in_any_file(leaky_run):
    """Not as written, nor in anything base64 or gzip in any file holds (tests.support.secret_leaks's oracle)."""
    files = files_under(leaky_run["run"], leaky_run["store"], leaky_run["replayed"])
    assert len(files) >= 12
    found = [(str(p), name) for p in files for name, value in [*PLANTS.items(), ("service", SERVICE_SECRET),
                                                                ("task", TASK_TOKEN), ("db", DB_PASSWORD)]
             if leaks(p.read_bytes(), value)]
    assert not found


def test_no_planted_secret_is_in_the_exported_spans(leaky_run):
    """The spans (with content) carry the model call's base64 message, its assignment masked."""
    receiver = leaky_run["otlp"]
    assert receiver.spans and not [name for name, value in PLANTS.items() if any(leaks(raw, value) for raw in receiver.raw)]
    [chat] = [s for s in receiver.spans if "gen_ai.input.messages" in s.attributes]
    [message] = json.loads(chat.attributes["gen_ai.input.messages"])
    assert base64.b64decode(message["parts"][0]["content"]) == b"context: api_key=[REDACTED] region=eu"


def test_the_encoded_plants_went_through_the_proxy(leaky_run):
    """The base64 and gzip channels were exercised: their exchanges are in the trace and the HAR,
    redacted in place (still base64, still gzip)."""
    run_dir = leaky_run["run"]
    [line] = [json.loads(l) for l in (run_dir / "episodes.jsonl").read_text().splitlines()[1:]]
    trace = {ex["request"]["url"].rsplit("/", 1)[-1]: ex for ex in
             read_trace(run_dir / line["trace"])}
    assert json.loads(base64.b64decode(trace["b64body"]["request"]["body"]))["api_key"] == "[REDACTED]"
    config = json.loads(base64.b64decode(json.loads(trace["json2"]["request"]["body"])["config"]))
    assert base64.b64decode(config["inner"]) == b"password: [REDACTED]"  # base64 in JSON in base64
    gz = trace["gz"]["request"]
    assert gz["body_encoding"] == "base64"
    assert json.loads(gzip.decompress(base64.b64decode(gz["body"]))) == {"password": "[REDACTED]"}
    answer = json.loads(base64.b64decode(trace["b64answer"]["upstream"]["body"]))
    assert answer == {"session_token": "[REDACTED]", "ok": True}
    har = (leaky_run["store"] / next(p.parent.name for p in files_under(leaky_run["store"]) if p.name == "flows.har")
           / "flows.har")
    entries = json.loads(har.read_text())["log"]["entries"]
    [content] = [e["response"]["content"] for e in entries if e["request"]["url"].endswith("/binary")]
    assert content["encoding"] == "base64"
    assert json.loads(gzip.decompress(base64.b64decode(content["text"]))) == {"refresh_token": "[REDACTED]"}


def test_scan_finds_nothing_left_and_finds_a_planted_one(leaky_run, tmp_path):
    secrets = [arg for value in ALL for arg in ("--secret", value)]
    for folder in ("run", "store", "replayed"):
        clean = faultproxy("scan", str(leaky_run[folder]), *secrets, env=leaky_run["env"], check=0)
        assert "clean" in clean.stderr
    dirty = tmp_path / "dirty"
    dirty.mkdir()
    (dirty / "notes.txt").write_text(f"ok\nleft {TASK_TOKEN} here\nand {PLANTS['error_aws']}\n")
    found = faultproxy("scan", str(dirty), *secrets, env=leaky_run["env"], check=1)
    assert f"{dirty / 'notes.txt'}:2: planted secret" in found.stdout
    assert f"{dirty / 'notes.txt'}:3: " in found.stdout and TASK_TOKEN not in found.stdout
    by_env = faultproxy("scan", str(dirty), "--secret-env", "LEAKY_SERVICE_SECRET", env=leaky_run["env"], check=1)
    assert "notes.txt:3: a credential shaped like" in by_env.stdout
    # Planted in base64: a JSON field holding a base64 secret, a base64 body whose JSON holds a key's
    # value, a gzip file; each found, none printed.
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "flows.jsonl").write_text(json.dumps({"blob": base64.b64encode(SERVICE_SECRET.encode()).decode()}) + "\n"
                                        + base64.b64encode(json.dumps({"api_key": TASK_TOKEN}).encode()).decode()
                                        + "\n")
    (hidden / "old.jsonl.gz").write_bytes(gzip.compress(f"x\n{DB_PASSWORD}\n".encode()))
    found = faultproxy("scan", str(hidden), *secrets, env=leaky_run["env"], check=1)
    lines = found.stdout.splitlines()
    assert any(line.startswith(f"{hidden / 'flows.jsonl'}:1: planted secret") and "base64" in line for line in lines)
    assert any(line.startswith(f"{hidden / 'flows.jsonl'}:2: planted secret") and "base64" in line for line in lines)
    assert any(line.startswith(f"{hidden / 'old.jsonl.gz'} (gzip):2: planted secret") for line in lines)
    assert not any(value in found.stdout for value in ALL)
    # No value given: a secret-named assignment in base64 text is found by its name.
    (hidden / "flows.jsonl").write_text(json.dumps({"blob": base64.b64encode(b"x api_key=abc123def456").decode()}))
    found = faultproxy("scan", str(hidden / "flows.jsonl"), env=leaky_run["env"], check=1)
    assert found.stdout.splitlines() == [f"{hidden / 'flows.jsonl'}:1: a value for the secret-named 'api_key', "
                                         "base64-encoded"]


def test_scan_with_an_unset_secret_env_cannot_say_clean(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LEAKY_NOT_EXPORTED"}
    done = faultproxy("scan", str(tmp_path), "--secret-env", "LEAKY_NOT_EXPORTED", env=env, check=2)
    assert done.stderr.count("\n") == 1 and "--secret-env LEAKY_NOT_EXPORTED" in done.stderr
    assert "clean" not in done.stdout + done.stderr


def test_what_only_looks_secret_is_intact(leaky_run):
    run_dir = leaky_run["run"]
    [line] = [json.loads(l) for l in (run_dir / "episodes.jsonl").read_text().splitlines()[1:]]
    assert line["stats"]["tokens"] == 18  # usage read from the stream
    trace = list(read_trace(run_dir / line["trace"]))
    by_path = {ex["request"]["url"].split("?")[0].rsplit("/", 1)[-1]: ex for ex in trace}
    echo, posted, chat = by_path["echo"], by_path["json"], by_path["completions"]
    upstream_headers = dict(echo["upstream"]["headers"])
    assert upstream_headers["x-ratelimit-remaining-tokens"] == "9000"
    assert upstream_headers["anthropic-ratelimit-tokens-remaining"] == "8000"
    assert upstream_headers["X-Session-Token"] == "[REDACTED]"
    assert dict(echo["request"]["headers"])["Idempotency-Key"] == "idem-0001-keep"
    assert "page=2" in echo["request"]["url"] and "key=[REDACTED]" in echo["request"]["url"]
    body = json.loads(posted["request"]["body"])
    assert body["max_tokens"] == 256 and body["request_id"] == "req-keep-42"
    assert body["password"] == body["pin_password"] == body["api_key"] == body["credentials"] == "[REDACTED]"
    events = [json.loads(e[5:]) for _, raw in chat["upstream"]["sse"] for e in [raw.strip()] if e != "data: [DONE]"]
    assert events[-1]["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert events[0]["id"] == "chatcmpl-keep1" and events[0]["api_key"] == "[REDACTED]"
    assert dict(chat["upstream"]["headers"])["x-request-id"] == "req_keep_123"
    streamed = "".join(c["delta"].get("content", "") for e in events for c in e.get("choices", []))
    assert streamed == "your key is [REDACTED] ok"
    report = json.loads((run_dir / "report.json").read_text())
    assert "18" in json.dumps(report) or report  # the report was built from the redacted log


def test_a_short_secret_is_refused_in_one_line(tmp_path):
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  - id: t\n    prompt: p\n    secrets: [PIN]\n    env:\n      PIN: '1234'\n")
    env = {**os.environ, "SHORT_SECRET": "1234"}
    by_flag = faultproxy("run", "--scenario", "latency", "--tasks", str(tasks), "--out", str(tmp_path / "a"),
                         "--secret-env", "SHORT_SECRET", "--", sys.executable, "-c", "pass", env=env, check=2)
    assert by_flag.stderr.count("\n") == 1 and "--secret-env SHORT_SECRET" in by_flag.stderr
    assert "at least 8 characters" in by_flag.stderr and "1234" not in by_flag.stderr
    by_task = faultproxy("run", "--scenario", "latency", "--tasks", str(tasks), "--out", str(tmp_path / "b"),
                         "--", sys.executable, "-c", "pass", env=env, check=2)
    assert by_task.stderr.count("\n") == 1 and f"{tasks}: task t: env PIN" in by_task.stderr
    assert not (tmp_path / "b" / "plan.json").exists()
