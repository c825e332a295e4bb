"""ws_close: the WebSocket session ends right after the matching message is delivered.

`mode: close` sends both sides a close frame with `code` and `reason`; `mode: abort` drops the
connections without one (the client sees 1006, an abnormal closure)."""

from __future__ import annotations

from typing import Any

from faultproxy.scenarios.faults.base import FaultKind, ParamProblem, ParamSpec

MAX_REASON_BYTES = 123  # a close frame's payload is at most 125 bytes, two of them the code
RESERVED_CODES = frozenset({1004, 1005, 1006, 1015})  # RFC 6455: never sent in a close frame


def _sendable(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    if params["code"] in RESERVED_CODES:
        raise ParamProblem("code", f"code {params['code']} is reserved and never sent in a close frame "
                                   "(for 1006, a connection dropped without one, use mode: abort)")
    if len(params["reason"].encode("utf-8")) > MAX_REASON_BYTES:
        raise ParamProblem("reason", f"reason is longer than {MAX_REASON_BYTES} bytes (UTF-8)")
    return params


KIND = FaultKind(
    name="ws_close",
    description=("the WebSocket session ends right after the matching message: close frames with `code` and "
                 "`reason`, or (abort) dropped connections, which the client sees as 1006"),
    params={
        "mode": ParamSpec("string", "close", "close frame, or a dropped connection", choices=("close", "abort")),
        "code": ParamSpec("integer", 1011, "close code (mode close); not "
                            + ", ".join(map(str, sorted(RESERVED_CODES))) + ", never sent in a close frame",
                            minimum=1000, maximum=4999),
        "reason": ParamSpec("string", "", f"close reason (mode close), at most {MAX_REASON_BYTES} bytes"),
    },
    forwards=True,
    cross_check=_sendable,
    on_messages=True,
)
