"""The verdict's layout in an episode line, and the report's fast reader of it.

A report over a million episodes must not decode each whole line (the prompt, output and end
state are most of it), so formats.rundir's EpisodeLog writes every line through episode_line in
one layout: json.dumps with its default separators, the line's version ("v") after its type, the
verdict as the record's last key, the verdict's keys in VERDICT_KEYS order up to REPORT_CUT_KEY
and its `checks` (the bulk) last. read_verdict then reads the fields a report needs straight
from the line's bytes with one compiled pattern. A line of any other shape (no verdict, a
hand-edited log, a verdict older than this layout) gets None: parse it whole and upgrade it
(formats.run_records). This module alone knows that layout; whoever builds a verdict only names
its keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from faultproxy.formats.run_records import EPISODE_FIELDS, RECORD_VERSION, VERDICT_VERSION, EpisodeRecord

# A report reads each verdict only up to this key: everything it needs comes before it.
REPORT_CUT_KEY: Final = "escalated"
# A verdict's leading keys, in the order a log line carries them; the rest follow, `checks` last.
VERDICT_KEYS = ("v", "status", "cause", "episode", "confidence", "violations", "failed", "faults", "endpoints",
                "tokens", "requests", "turns", "usage", REPORT_CUT_KEY)  # turns: conversations only
STATUSES = ("pass", "fail", "incomplete")  # VerdictFields.status indexes this
# Verdicts of version 1 that are in this layout carry every field the fast reader reads.
FAST_VERSIONS = (1, VERDICT_VERSION)


def episode_line(record: EpisodeRecord | Mapping[str, Any]) -> str:
    """One episode's log line, in the layout read_verdict reads (see the module docstring),
    stamped with the current RECORD_VERSION."""
    rest = {name: value for name, value in record.items() if name not in ("type", "v", "verdict")}
    verdict = record.get("verdict")
    tail = {} if verdict is None else {"verdict": _laid_out(verdict) if isinstance(verdict, Mapping) else verdict}
    return json.dumps({"type": "episode", "v": RECORD_VERSION, **rest, **tail}, ensure_ascii=False) + "\n"


def _laid_out(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict with VERDICT_KEYS first in order and `checks` last; within the episode and the
    failed checks and faults, the keys the reader's pattern expects where it expects them."""
    laid = {key: verdict[key] for key in VERDICT_KEYS if key in verdict}
    laid.update((key, value) for key, value in verdict.items() if key not in laid and key != "checks")
    if "checks" in verdict:
        laid["checks"] = verdict["checks"]
    if isinstance(laid.get("episode"), Mapping):
        laid["episode"] = _keys_first(laid["episode"], EPISODE_FIELDS)
    for name, first, last in (("failed", ("name", "severity"), ()), ("faults", (), ("type", "delivered"))):
        if isinstance(laid.get(name), list):
            laid[name] = [_keys_first(item, first, last) if isinstance(item, Mapping) else item
                          for item in laid[name]]
    return laid


def _keys_first(item: Mapping[str, Any], first: tuple[str, ...], last: tuple[str, ...] = ()) -> dict[str, Any]:
    """item with the `first` keys it has leading and the `last` ones ending it, the rest between."""
    ordered = {key: item[key] for key in first if key in item}
    ordered.update((key, value) for key, value in item.items() if key not in first and key not in last)
    ordered.update((key, item[key]) for key in last if key in item)
    return ordered


@dataclass(slots=True)
class VerdictFields:
    """What a report reads of one episode's verdict.

    From read_verdict, the names (cause, key, task_id, grid_label) are JSON text as bytes
    (b'"crash"', b"null") and failed, faults, endpoints and usage are the lists' and object's
    JSON text: a report keys its counters on them and decodes each distinct value once (decode_name,
    failed_pairs, fault_pairs, usage_items). Built from a parsed verdict, names are str or
    None and failed and faults tuples of (name, severity) and (type, delivered) pairs.
    """

    status: int  # index into STATUSES
    cause: bytes | str | None
    key: bytes | str | None
    task_id: bytes | str | None
    grid_label: bytes | str
    trial: Any  # an int, unless the log was edited by hand
    duration_s: float | None
    confidence: float | None
    failed: bytes | tuple[tuple[Any, Any], ...]
    faults: bytes | tuple[tuple[Any, bool], ...]
    endpoints: bytes  # JSON text of the endpoint list
    tokens: int
    requests: int
    usage: bytes  # JSON text of {model: {"input", "output"}}
    turns: int = 0  # a conversation's turns (the user's and the agent's); 0 without one
    # The verdict lists side-channel errors or unclassified MCP tools: decode the line for them.
    lists_more: bool = False


_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a JSON string, the unrolled-loop way (no per-character backtracking)
_NUM = rb"-?[0-9][0-9.eE+-]*"
_FLAT = rb'\{[^{}"\[\]]*(?:' + _STR + rb'[^{}"\[\]]*)*\}'  # an object of strings, numbers, booleans
_FAST = re.compile(
    rb'"verdict": \{"v": (?:' + "|".join(map(str, FAST_VERSIONS)).encode() + rb'), "status": "(pass|fail|incomplete)", '
    rb'"cause": (null|' + _STR + rb'), '
    rb'"episode": \{"key": (' + _STR + rb'|null), "task_id": (' + _STR + rb'), "trial": (-?[0-9]+|null), '
    rb'"grid_label": (' + _STR + rb'|null), "duration_s": (' + _NUM + rb'|null)\}, '
    rb'"confidence": (' + _NUM + rb'|null), "violations": \[[^\]]*\], '
    rb'"failed": (\[(?:' + _FLAT + rb'(?:, )?)*\]), "faults": (\[(?:' + _FLAT + rb'(?:, )?)*\]), '
    rb'"endpoints": (\[(?:' + _STR + rb'(?:, )?)*\]), "tokens": ([0-9]+), "requests": ([0-9]+), '
    rb'(?:"turns": ([0-9]+), )?"usage": (\{(?:' + _STR + rb': ' + _FLAT + rb'(?:, )?)*\}), "' + REPORT_CUT_KEY.encode() + rb'": ')
_USAGE_ITEM = re.compile(rb'(' + _STR + rb'): \{"input": ([0-9]+), "output": ([0-9]+)\}')
_FAULT_ITEM = re.compile(rb'"type": (null|' + _STR + rb'), "delivered": (true|false)\}')
_FAILED_ITEM = re.compile(rb'"name": (null|' + _STR + rb'), "severity": (null|' + _STR + rb')')
_FAST_MARK = b'"verdict": {"v": '
# After REPORT_CUT_KEY in a verdict that lists side-channel errors, or unclassified MCP tools.
_SIDE_CHANNEL_MARK = b'"side_channel_errors": [{'
_UNCLASSIFIED_MARK = b'"unclassified_tools": ["'
_NEITHER = b'"side_channel_errors": [], "unclassified_tools": [], '  # as the judge writes both empty
_TAIL = b"]}}\n"  # ...the checks list, the verdict, the record
_STATUS = {b"pass": 0, b"fail": 1, b"incomplete": 2}


def read_verdict(line: bytes) -> VerdictFields | None:
    """The report's fields of a log line's verdict, read from its bytes without decoding the line;
    None when the line is not in the layout EpisodeLog writes (parse it whole then)."""
    if not line.endswith(_TAIL):
        return None
    at = line.rfind(_FAST_MARK)
    m = _FAST.match(line, at) if at >= 0 else None
    if m is None:
        return None
    (status, cause, key, task_id, trial, label, duration, confidence, failed, faults, endpoints, tokens,
     requests, turns, usage) = m.groups()
    return VerdictFields(_STATUS[status], None if cause == b"null" else cause, key, task_id, label,
                         None if trial == b"null" else int(trial), None if duration == b"null" else float(duration),
                         None if confidence == b"null" else float(confidence), failed, faults, endpoints,
                         int(tokens), int(requests), usage, int(turns or 0), _lists_more(line, m.end()))


def _lists_more(line: bytes, rest: int) -> bool:
    """Does the verdict, from `rest` (its part after REPORT_CUT_KEY) on, list side-channel errors
    or unclassified tools? Only the verdict's rest is searched: the prompt, output and end state
    are most of the line. Most verdicts list neither, as the judge lays them out side by side:
    found near the cut, that ends the search; else both marks are looked for to the line's end."""
    if line.find(_NEITHER, rest) >= 0:
        return False
    return line.find(_SIDE_CHANNEL_MARK, rest) >= 0 or line.find(_UNCLASSIFIED_MARK, rest) >= 0


def decode_name(value: bytes | str | None) -> str | None:
    """A name from VerdictFields as text: JSON text (bytes) decoded, str and None as they are."""
    if not isinstance(value, bytes):
        return value
    if value == b"null":
        return None
    if b"\\" in value:
        return json.loads(value)
    return value[1:-1].decode("utf-8")


def failed_pairs(failed: bytes) -> list[tuple[str | None, str | None]]:
    """(name, severity) of each failed check in read_verdict's `failed`."""
    return [(decode_name(name), decode_name(severity)) for name, severity in _FAILED_ITEM.findall(failed)]


def fault_pairs(faults: bytes) -> list[tuple[str | None, bool]]:
    """(type, delivered) of each fault in read_verdict's `faults`."""
    return [(decode_name(kind), delivered == b"true") for kind, delivered in _FAULT_ITEM.findall(faults)]


def usage_items(usage: bytes) -> list[tuple[str | None, int, int]]:
    """(model, input tokens, output tokens) in read_verdict's `usage`; models counted otherwise
    than {"input", "output"} are left out (decode the JSON for those)."""
    return [(decode_name(model), int(tokens_in), int(tokens_out))
            for model, tokens_in, tokens_out in _USAGE_ITEM.findall(usage)]
