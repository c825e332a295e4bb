"""A conversation's turns, read from the trace (formats.trace.turn_record): what the user and the
agent said, in order with the agent's requests. evaluator.traces.trace_parsing leaves turn lines
out of the exchanges (a turn is no request, model call or tool call); the judge hands them to the checks
beside the episode's record (with_turns), where turns_of finds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.formats.trace import USER_TO_AGENT, is_turn


@dataclass(frozen=True)
class Turn:
    seq: int
    started: float
    speaker: str  # "user" or "agent"
    text: str
    reply: int | None  # a user's turn: the index of the scripted reply said (None: the prompt, or not scripted)
    end: bool  # a user's turn: their last


def parse_turns(trace: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """The trace's turns, in the order they were said."""
    turns = []
    for line in trace:
        if not is_turn(line):
            continue
        request, turn = line.get("request") or {}, line.get("turn") or {}
        turns.append(Turn(int(line.get("seq") or 0), float(line.get("started") or 0.0),
                          "user" if line["direction"] == USER_TO_AGENT else "agent", str(request.get("body") or ""),
                          turn.get("reply"), turn.get("end") is True))
    turns.sort(key=lambda t: (t.started, t.seq))
    return turns


class HeardRecord(EpisodeRecord, total=False):
    """The record as the checks see it: with the conversation's turns (in the judge's view of a
    record only; never written)."""

    _turns: tuple[Turn, ...]


def with_turns(record: EpisodeRecord, turns: Sequence[Turn]) -> HeardRecord:
    """The record as the checks see it: with the conversation's turns."""
    return cast(HeardRecord, {**record, "_turns": tuple(turns)} if turns else record)


def turns_of(record: HeardRecord) -> tuple[Turn, ...]:
    """The turns the judge handed the checks with the record (with_turns); () without a conversation."""
    return record.get("_turns") or ()
