"""Reading one episode's trace: each line as a TracedExchange (traced), request identity (identity),
what a commit made (resources), maybe-committed outcomes (ambiguity), live model sessions (model_sessions),
a conversation's turns (conversation_turns), tokens and their cost (token_usage), the final answer, the
harness's duplicate deliveries and stale tool calls.

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.traces.call_classes import (is_irreversible, matches_any, mcp_tool_hints, seqs,
                                                          unclassified_tools)
    from faultproxy.evaluator.traces.conversation_turns import HeardRecord, Turn, parse_turns, turns_of, with_turns
    from faultproxy.evaluator.traces.duplicates import committed_duplicates
    from faultproxy.evaluator.traces.final_text import final_answer
    from faultproxy.evaluator.traces.identity import (Endpoint, Identity, canonical_body, idempotency_key_of,
                                                      identity_of, rpc_operation)
    from faultproxy.evaluator.traces.stale_tools import stale_tool_calls
    from faultproxy.evaluator.traces.token_usage import episode_cost, model_usage
    from faultproxy.evaluator.traces.trace_parsing import parse_trace
    from faultproxy.evaluator.traces.traced import TracedExchange, documents

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
