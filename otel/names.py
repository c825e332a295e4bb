"""The OpenTelemetry names faultproxy exports: every span attribute, event and value, in one place.

The GenAI and MCP conventions are still "Development" and move between releases (`gen_ai.system`
became `gen_ai.provider.name`; the GenAI conventions left the main repository for
semantic-conventions-genai). Pinning the names here, with the version they follow, means a
rename is one edit and a reader can check what a span promises against one document.
Followed: OpenTelemetry semantic conventions SEMCONV_VERSION (GenAI spans, MCP, HTTP client
spans); `faultproxy.*` names are faultproxy's own.
"""

from __future__ import annotations

from collections.abc import Mapping

from faultproxy.formats.model_apis import LiveApi, ModelApi

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SERVICE_NAME = "faultproxy"

# --- resource and general ------------------------------------------------------------------------
SERVICE_NAME_KEY = "service.name"
SERVICE_VERSION = "service.version"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
NETWORK_TRANSPORT = "network.transport"  # "tcp", or "pipe" for MCP over stdio
TRANSPORT_TCP, TRANSPORT_PIPE = "tcp", "pipe"

# --- HTTP client spans ---------------------------------------------------------------------------
HTTP_METHOD = "http.request.method"
HTTP_STATUS = "http.response.status_code"
URL_FULL = "url.full"

# --- GenAI inference spans -----------------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_STREAM = "gen_ai.request.stream"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_SEED = "gen_ai.request.seed"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds from the request
USAGE_INPUT = "gen_ai.usage.input_tokens"  # cached input included, as the conventions ask
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING = "gen_ai.usage.reasoning.output_tokens"
# Opt-in content (--otlp-content), as JSON text in the conventions' message shape.
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"

OP_CHAT, OP_GENERATE_CONTENT, OP_EXECUTE_TOOL = "chat", "generate_content", "execute_tool"
OPERATION_OF: Mapping[ModelApi, str] = {
    ModelApi.OPENAI_CHAT: OP_CHAT,
    ModelApi.OPENAI_RESPONSES: OP_CHAT,
    ModelApi.ANTHROPIC_MESSAGES: OP_CHAT,
    ModelApi.GEMINI: OP_GENERATE_CONTENT,
}
# gen_ai.provider.name's well-known values (model_apis names the provider "gemini").
PROVIDER_OF: Mapping[ModelApi, str] = {
    ModelApi.OPENAI_CHAT: "openai",
    ModelApi.OPENAI_RESPONSES: "openai",
    ModelApi.ANTHROPIC_MESSAGES: "anthropic",
    ModelApi.GEMINI: "gcp.gemini",
}
# A live (WebSocket) session's turns are chat spans of its API's provider.
LIVE_PROVIDER_OF: Mapping[LiveApi, str] = {LiveApi.OPENAI_REALTIME: "openai", LiveApi.GEMINI_LIVE: "gcp.gemini"}

# --- MCP client spans ----------------------------------------------------------------------------
MCP_METHOD = "mcp.method.name"
MCP_SESSION_ID = "mcp.session.id"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
RPC_STATUS = "rpc.response.status_code"  # a JSON-RPC error's code
TOOL_ERROR = "tool_error"  # error.type of a tool result flagged isError

# --- faultproxy's own ----------------------------------------------------------------------------
EPISODE = "faultproxy.episode"
TASK = "faultproxy.task"
TRIAL = "faultproxy.trial"
VARIANT = "faultproxy.variant"
SCENARIO = "faultproxy.scenario"
GRID_LABEL = "faultproxy.grid_label"
MODEL = "faultproxy.model"
COMMAND = "faultproxy.command"
MODE = "faultproxy.mode"  # run, replay, export
REPLAY_OF = "faultproxy.replay_of"
VERDICT = "faultproxy.verdict"  # pass, fail, incomplete
SEVERITY = "faultproxy.severity"  # the highest severity among failed checks
FAILED_CHECKS = "faultproxy.failed_checks"
CAUSE = "faultproxy.cause"
CAUSE_DETAIL = "faultproxy.cause_detail"
FAULT_COUNT = "faultproxy.faults"
SEQ = "faultproxy.seq"
OUTCOME = "faultproxy.outcome"  # what the client got: response, reset, cut, injected, ...
FORWARDED = "faultproxy.forwarded"
# A conversation's turn (runner.chat): an INTERNAL span named for its direction ("user to agent").
TURN_DIRECTION = "faultproxy.turn.direction"
TURN_TEXT = "faultproxy.turn.text"  # opt-in content, as the GenAI messages are
TURNS = "faultproxy.turns"  # on the root: how many turns the conversation had

FAULT_EVENT = "faultproxy.fault"
FAULT_TYPE = "faultproxy.fault.type"
FAULT_RULE = "faultproxy.fault.rule"
FAULT_DELIVERED = "faultproxy.fault.delivered"
FAULT_DETAIL = "faultproxy.fault.detail"
FAULT_PARAM_PREFIX = "faultproxy.fault.param."
PERTURBATION_EVENT = "faultproxy.perturbation"
PERTURBATION_KINDS = "faultproxy.perturbation.kinds"

FINDING_EVENT = "faultproxy.finding"
CHECK_NAME = "faultproxy.check.name"
CHECK_SEVERITY = "faultproxy.check.severity"
CHECK_DETAIL = "faultproxy.check.detail"
