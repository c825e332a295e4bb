"""A sweep's inputs: a scenario whose refund fails at rate lambda with an expectation on the curve,
and two tasks the probe agent answers."""

from __future__ import annotations

SCENARIO = """\
name: refund_flaky
description: the refund fails with 503 at rate lambda
seed: 11
params: {lambda: 0.5}
rules:
  - name: refund-503
    match: {method: POST, path: "*/refund"}
    fault: {type: server_error, status: 503}
    when: {probability: lambda}
expect:
  max_drop: {at: 0.5, drop: 0.25}
"""
TASKS = [
    {"id": "refund", "prompt": "ok", "shape": "writes_state", "expected": {"output": {"regex": "refunded: 200"}}},
    {"id": "env", "prompt": "env", "shape": "lookup"},
]
