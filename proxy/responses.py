"""Error responses shaped like the providers' own, so SDKs raise what they raise in production:
whole error answers, and the events that end a stream that fails midway."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes.answer import event as sse_event
from faultproxy.proxy.sse import data_payloads

_REASONS = {
    401: "Unauthorized",
    403: "Forbidden",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_OPENAI_CODES = {401: "invalid_api_key", 403: "permission_denied", 429: "rate_limit_exceeded"}
_OPENAI_TYPES = {401: "invalid_request_error", 403: "invalid_request_error", 429: "requests"}
_DEFAULT_MESSAGES = {
    401: "Incorrect API key provided.",
    403: "You are not allowed to perform this request.",
    429: "Rate limit reached. Please try again later.",
    529: "Overloaded.",
}
# Google's errors carry a canonical status name beside the HTTP code (google.rpc.Code).
_GEMINI_STATUSES = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",
}
_GEMINI_MESSAGES = {
    401: "Request had invalid authentication credentials.",
    403: "The caller does not have permission",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred.",
    503: "The model is overloaded. Please try again later.",
    504: "Deadline expired before operation could complete.",
}


@dataclass(frozen=True)
class ErrorResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def error_response(
    provider: str,
    status: int,
    request_id: str,
    message: str | None = None,
    retry_after_s: float | None = None,
    retry_after_ms: int | None = None,
    limit: str = "requests",
) -> ErrorResponse:
    """The error `provider` answers with: openai (Chat Completions and Responses alike),
    anthropic, gemini or generic."""
    if provider == "gemini":
        return _gemini_error(status, message, retry_after_s)
    message = message or _DEFAULT_MESSAGES.get(status, "The server had an error while processing your request.")
    headers = {"content-type": "application/json"}
    if retry_after_s is not None:
        headers["retry-after"] = _seconds(retry_after_s)
        headers["retry-after-ms"] = str(retry_after_ms if retry_after_ms is not None else round(retry_after_s * 1000))
    if provider == "anthropic":
        body = {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}, "request_id": request_id}
        headers["request-id"] = request_id
        if status == 429:
            reset = datetime.now(UTC) + timedelta(seconds=retry_after_s or 1)
            headers |= {
                f"anthropic-ratelimit-{limit}-limit": "50",
                f"anthropic-ratelimit-{limit}-remaining": "0",
                f"anthropic-ratelimit-{limit}-reset": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
    elif provider == "openai":
        error_type = _OPENAI_TYPES.get(status, "server_error")
        if status == 429:
            error_type = limit
        body = {"error": {"message": message, "type": error_type, "param": None, "code": _OPENAI_CODES.get(status)}}
        headers["x-request-id"] = request_id
        if status == 429:
            headers |= {
                f"x-ratelimit-limit-{limit}": "60",
                f"x-ratelimit-remaining-{limit}": "0",
                f"x-ratelimit-reset-{limit}": _seconds(retry_after_s or 1) + "s",
            }
    else:
        body = {"error": _REASONS.get(status, "error").lower().replace(" ", "_"), "message": message, "status": status}
        headers["x-request-id"] = request_id
    return ErrorResponse(status, headers, json.dumps(body).encode())


def _gemini_error(status: int, message: str | None, retry_after_s: float | None) -> ErrorResponse:
    """Google's error shape. The wait goes where Google puts it, a RetryInfo detail in the body;
    Google sends no Retry-After and no rate-limit headers."""
    error: dict = {"code": status, "message": message or _GEMINI_MESSAGES.get(status, _GEMINI_MESSAGES[500]),
                   "status": _GEMINI_STATUSES.get(status, "UNKNOWN")}
    if retry_after_s is not None:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{_seconds(retry_after_s)}s"}]
    return ErrorResponse(status, {"content-type": "application/json; charset=UTF-8"}, json.dumps({"error": error}).encode())


def jsonrpc_error(request_id: object, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}).encode()


def jsonrpc_tool_error(request_id: object, message: str) -> bytes:
    return jsonrpc_result(request_id, {"content": [{"type": "text", "text": message}], "isError": True})


def jsonrpc_result(request_id: object, result: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def reason(status: int) -> str:
    return _REASONS.get(status, "Error")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# --- a stream that fails midway ------------------------------------------------------------------

_STREAM_ERROR_MESSAGES = {
    ModelApi.OPENAI_CHAT: "The server had an error processing your request. Sorry about that!",
    ModelApi.OPENAI_RESPONSES: "An error occurred while processing your request.",
    ModelApi.ANTHROPIC_MESSAGES: "Overloaded",
    ModelApi.GEMINI: _GEMINI_MESSAGES[503],
}


class StreamFailure:
    """Ends an event stream the way its API fails mid-stream, after the events the client got:

    - Chat Completions: a `data:` chunk holding `{"error": {...}}` (the openai SDK raises APIError);
    - Responses: `response.failed` with the response the stream opened with, now `failed` with an
      `error`, or, before any snapshot, an `error` event (the Agents SDK raises on either);
    - Messages: an `error` event, `overloaded_error` (the anthropic SDK raises APIStatusError);
    - Gemini: a chunk holding Google's error, 503 UNAVAILABLE (google-genai raises ServerError);
    - any other stream: an `error` event with `{"error": {"message"}}`.
    """

    def __init__(self, api: ModelApi | None) -> None:
        self.api = api
        self.snapshot: dict | None = None  # Responses: the response the stream opened with
        self.sequence = -1
        self.end = "\n\n"  # how the stream ends its events (Gemini's edge sends CRLF)

    def saw(self, event: bytes) -> None:
        """Note an event the client got: its line ends, and for Responses the snapshot and
        sequence number the failure continues."""
        self.end = "\r\n\r\n" if event.endswith(b"\r\n\r\n") else "\n\n"
        if self.api is not ModelApi.OPENAI_RESPONSES:
            return
        for payload in data_payloads([event]):
            try:
                data = json.loads(payload)
            except ValueError:
                continue
            if isinstance(data, dict):
                if isinstance(data.get("sequence_number"), int):
                    self.sequence = data["sequence_number"]
                if data.get("type") in ("response.created", "response.in_progress") and isinstance(data.get("response"), dict):
                    self.snapshot = data["response"]

    def event(self) -> bytes:
        data, name = self._error()
        return sse_event(data, name, self.end)

    def _error(self) -> tuple[dict, str | None]:
        message = _STREAM_ERROR_MESSAGES.get(self.api, "The upstream failed mid-stream.")
        if self.api is ModelApi.OPENAI_CHAT:
            return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}, None
        if self.api is ModelApi.OPENAI_RESPONSES:
            sequence = self.sequence + 1
            if self.snapshot is None:
                return {"type": "error", "code": "server_error", "message": message, "param": None,
                        "sequence_number": sequence}, "error"
            failed = {**self.snapshot, "status": "failed", "error": {"code": "server_error", "message": message}}
            return {"type": "response.failed", "sequence_number": sequence, "response": failed}, "response.failed"
        if self.api is ModelApi.ANTHROPIC_MESSAGES:
            return {"type": "error", "error": {"type": "overloaded_error", "message": message}}, "error"
        if self.api is ModelApi.GEMINI:
            return {"error": {"code": 503, "message": message, "status": _GEMINI_STATUSES[503]}}, None
        return {"error": {"message": message}}, "error"
