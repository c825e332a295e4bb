"""Synthetic runs in the real formats, for tests that judge, report or gate without running an agent.

Trace lines as the proxy writes them (`exchange`, `model_call`, `fault`, written by `write_trace`),
episode records as the runner logs them (`record`), a few episodes of two demo tasks (`lookup_ok`,
`refund_twice`, ...) and `make_run`, which writes a whole run directory (plan, episode log, traces)
and judges each episode the way the runner does.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.rundir import EpisodeLog, write_plan
from faultproxy.formats.trace import TraceWriter, read_trace, trace_path
from faultproxy.tasks.task_model import Effect, EndpointPattern, Expected, OutputSpec, Task

SHOP = "http://127.0.0.1:8100"
MODEL = "http://127.0.0.1:8200"
T0 = 1_700_000_000.0
_seq = itertools.count(1)


def exchange(method: str, url: str, *, body: Any = None, headers: list | None = None, status: int | None = 200,
             outcome: str = "response", client_status: int | None = None, client_headers: list | None = None,
             fault: dict | None = None, at: float = 0.0, duration: float = 0.05, tokens: int = 0,
             response: Any = None, error: str | None = None, seq: int | None = None) -> dict:
    """One trace line as the proxy writes it. status None: the upstream never answered."""
    text = body if isinstance(body, str) or body is None else json.dumps(body)
    upstream = None
    if status is not None:
        upstream = {"status": status, "headers": [["content-type", "application/json"]],
                    "body": json.dumps(response if response is not None else {"ok": True})}
    client: dict[str, Any] = {"outcome": outcome,
                              "status": client_status if client_status is not None or outcome != "response"
                              else status}
    if client_headers is not None:
        client["headers"] = client_headers
    return {"seq": seq if seq is not None else next(_seq), "episode": "ep", "started": T0 + at,
            "duration_s": duration,
            "request": {"method": method, "url": url, "headers": headers or [], "body": text},
            "upstream": upstream, "client": client, "fault": fault, "tokens": tokens, "error": error}


def fault(type_: str, delivered: bool = True, rule: str | None = None) -> dict:
    return {"rule": rule or type_, "type": type_, "params": {}, "decision": 0.1, "forced": False,
            "delivered": delivered, "detail": ""}


def model_call(at: float = 0.0, tokens: int = 120, **kwargs: Any) -> dict:
    response = {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": tokens - 100,
                                         "total_tokens": tokens}}
    return exchange("POST", f"{MODEL}/v1/chat/completions", body={"model": "demo-1", "messages": []},
                    at=at, tokens=tokens, response=response, **kwargs)


def write_trace(path: Path, lines: list[dict]) -> Path:
    writer = TraceWriter(path)
    for line in lines:
        writer.write(line)
    writer.close()
    return path


def record(**fields: Any) -> dict:
    base = {"key": "t.t0", "task_id": "t", "trial": 0, "variant": 0, "seed": 1, "prompt": "p", "state": None,
            "shape": "writes_state", "grid_label": "", "params": {}, "model": None, "completed": True,
            "cause": None, "exit_code": 0, "started": T0, "duration_s": 1.0,
            "output": {"answer": "done", "confidence": 0.9, "escalate": False, "reason": ""},
            "output_error": None, "end_state": None, "state_error": None,
            "stats": {"exchanges": 0, "tokens": 0, "faults": 0}, "trace": "flows/t.t0.jsonl", "log_tail": ""}
    return base | fields


REFUND_URL = f"{SHOP}/orders/1001/refund"

LOOKUP = Task(id="lookup_a", prompt="What is the status of order 1002?", shape="lookup",
              expected=Expected(output=OutputSpec("regex", "shipped"), effects=(Effect("POST", "*", 0),)),
              irreversible=(EndpointPattern.parse("POST */refund"),))
REFUND = Task(id="refund_b", prompt="Refund order 1001.", shape="writes_state",
              expected=Expected(state={"orders": {"1001": {"status": "refunded"}}},
                                effects=(Effect("POST", "*/refund", 1),)),
              irreversible=(EndpointPattern.parse("POST */refund"),))
CANCEL = Task(id="cancel_c", prompt="Cancel order 1006.", shape="writes_state",
              expected=Expected(output=OutputSpec("regex", "(?i)cancel")))
PRICES = {"demo-1": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}


# --- episodes ------------------------------------------------------------------------------------


def lookup_ok(**kw: Any) -> dict:
    return {"lines": [model_call(at=0), exchange("GET", f"{SHOP}/orders/1002", at=1), model_call(at=2)],
            "output": {"answer": "Order 1002 has shipped.", "confidence": 0.9, "escalate": False}, **kw}


def lookup_wrong(**kw: Any) -> dict:
    return {"lines": [model_call(at=0)], "output": {"answer": "pending", "confidence": 0.3, "escalate": False}, **kw}


def refund_ok(**kw: Any) -> dict:
    lines = [model_call(at=0), exchange("POST", REFUND_URL, body={}, at=1, headers=[["Idempotency-Key", "r1"]]),
             model_call(at=2)]
    return {"lines": lines, "end_state": {"orders": {"1001": {"status": "refunded"}}},
            "output": {"answer": "Refunded.", "confidence": 0.8, "escalate": False}, **kw}


def refund_after_429(**kw: Any) -> dict:
    limited = exchange("POST", REFUND_URL, body={}, at=1, status=None, outcome="injected", client_status=429,
                       client_headers=[["retry-after", "1"]], fault=fault("rate_limit"))
    lines = [model_call(at=0), limited, exchange("POST", REFUND_URL, body={}, at=2.5), model_call(at=3)]
    return {"lines": lines, "end_state": {"orders": {"1001": {"status": "refunded"}}},
            "output": {"answer": "Refunded.", "confidence": 0.9, "escalate": False}, **kw}


def refund_twice(**kw: Any) -> dict:
    lost = exchange("POST", REFUND_URL, body={}, at=1, outcome="reset", fault=fault("response_lost"))
    lines = [model_call(at=0), lost, exchange("POST", REFUND_URL, body={}, at=2), model_call(at=3)]
    return {"lines": lines, "end_state": {"orders": {"1001": {"status": "refunded"}}},
            "output": {"answer": "Refunded.", "confidence": 0.95, "escalate": False}, **kw}


def worker_lost(**kw: Any) -> dict:
    """An episode the harness could not judge (incomplete)."""
    return {"lines": [model_call(at=0)], "completed": False, "cause": "worker_lost", "exit_code": None, "output": None,
            **kw}


def make_run(root: Path, tasks: list[Task], k: int, episodes: dict[tuple[str, str], list[dict | None]],
             labels: tuple[str, ...] = ("",), verdicts: bool = True) -> Path:
    """episodes[(label, task_id)][trial] is an episode spec, or None for a trial never logged."""
    run_dir = root
    log = _planned_log(root, tasks, k, labels)
    by_id = {t.id: t for t in tasks}
    for trial in range(k):  # trial-major, as the runner plans
        for label in labels:
            for task in tasks:
                specs = episodes.get((label, task.id)) or []
                spec = specs[trial] if trial < len(specs) else None
                if spec is None:
                    continue
                spec = dict(spec)
                lines = spec.pop("lines")
                key = f"{task.id}.t{trial}" + (f".{label}" if label else "")
                rel = f"flows/{trace_path(Path(), key).name}"
                write_trace(run_dir / rel, lines)
                rec = record(key=key, task_id=task.id, trial=trial, variant=trial, shape=task.shape,
                             grid_label=label, trace=rel, **spec)
                if verdicts:
                    rec["verdict"] = judge_episode(by_id[task.id], rec, read_trace(run_dir / rel), {})
                log.append(rec)
    log.close()
    return run_dir


def make_large_run(root: Path, tasks: list[Task], k: int, episodes: dict[str, list[dict]],
                   labels: tuple[str, ...] = ("",)) -> Path:
    """A run of k trials per task and grid label, too many to judge one by one: each of a task's
    episode specs (episodes[task_id]) is judged once, and each trial logs one of them (chosen by a
    keyed hash) with its own confidence, duration and tokens, its trace the spec's."""
    log = _planned_log(root, tasks, k, labels)
    judged = {}
    for task in tasks:
        for i, spec in enumerate(episodes[task.id]):
            spec = dict(spec)
            trace = f"flows/{task.id}.spec{i}.jsonl"
            lines = write_trace(root / trace, spec.pop("lines"))
            rec = record(task_id=task.id, shape=task.shape, trace=trace, **spec)
            judged[(task.id, i)] = (rec, judge_episode(task, rec, read_trace(lines), {}))
    for trial in range(k):
        for label in labels:
            for task in tasks:
                unit = _unit(label, task.id, trial)
                rec, verdict = judged[(task.id, int(unit * 1e6) % len(episodes[task.id]))]
                key = f"{task.id}.t{trial}" + (f".{label}" if label else "")
                rec = rec | {"key": key, "trial": trial, "variant": trial, "grid_label": label,
                             "duration_s": round(0.5 + 3 * unit, 3)}
                episode = {name: rec[name] for name in verdict["episode"]}
                confidence = None if verdict["confidence"] is None else round(unit, 2)
                log.append(rec | {"verdict": {**verdict, "episode": episode, "confidence": confidence,
                                              "tokens": verdict["tokens"] + int(400 * unit)}})
    log.close()
    return root


def _planned_log(run_dir: Path, tasks: list[Task], k: int, labels: tuple[str, ...]) -> EpisodeLog:
    """A run directory's plan.json, and its episode log opened with its header."""
    grid = [{"label": label, "params": {}, "model": None} for label in labels]
    plan = {"faultproxy_version": "test", "scenario": {"name": "mixed", "digest": "d", "path": "x", "params": {}},
            "tasks": {"path": "tasks.yaml", "digest": "t", "severity": {}, "prices": PRICES,
                      "items": [t.to_json() for t in tasks]},
            "k": k, "grid": grid, "command": ["agent"], "created": "2025-01-01T00:00:00Z"}
    write_plan(run_dir, plan)
    return EpisodeLog(run_dir, {"faultproxy_version": "test", "scenario_digest": "d", "tasks_digest": "t", "k": k,
                                "grid": grid, "command": ["agent"], "created": plan["created"]})


def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by its parts (a keyed hash, not a shared random generator)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
