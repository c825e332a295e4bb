"""A logged verdict in the forms the report reads: complete, in the current shape whatever judge
version wrote it (complete_verdict), as the accumulators take it (VerdictFields) and as sinks get
it from the fast reader (sink_verdict)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from faultproxy.evaluator.aggregate.episode_sink import SinkVerdict
from faultproxy.formats.run_records import EpisodeRecord, Verdict, upgrade_verdict
from faultproxy.formats.verdict_layout import STATUSES, VerdictFields, decode_name


def complete_verdict(verdict: Mapping[str, Any], record: EpisodeRecord) -> Verdict:
    """A verdict in the current shape (formats.run_records.upgrade_verdict), its episode naming
    the record's trace for the drill-down."""
    upgraded = upgrade_verdict(verdict, record)
    if not record.get("trace"):
        return upgraded
    return {**upgraded, "episode": {**upgraded["episode"], "trace": record["trace"]}}


def verdict_fields(verdict: Verdict) -> VerdictFields:
    """A complete verdict (complete_verdict) as the accumulators take it."""
    episode = verdict["episode"]
    status = verdict["status"]
    return VerdictFields(
        0 if status == "pass" else 1 if status == "fail" else 2, verdict["cause"], episode.get("key"),
        episode.get("task_id"), episode.get("grid_label") or "", episode.get("trial"), episode.get("duration_s"),
        verdict["confidence"], tuple((f.get("name"), f.get("severity")) for f in verdict["failed"]),
        tuple((f.get("type"), bool(f.get("delivered"))) for f in verdict["faults"]),
        json.dumps(verdict["endpoints"], ensure_ascii=False).encode("utf-8"),
        verdict["tokens"] or 0, verdict["requests"] or 0,
        json.dumps(verdict["usage"], ensure_ascii=False).encode("utf-8"), verdict.get("turns") or 0)


def raw_fields(verdict: Verdict) -> VerdictFields:
    """verdict_fields with the failed checks and faults as JSON text, as the fast reader gives them."""
    v = verdict_fields(verdict)
    v.failed = json.dumps(verdict["failed"], ensure_ascii=False).encode("utf-8")
    v.faults = json.dumps(verdict["faults"], ensure_ascii=False).encode("utf-8")
    return v


def sink_verdict(v: VerdictFields, task_id: str) -> SinkVerdict:
    """What sinks get of a verdict read on the fast path."""
    return {"status": STATUSES[v.status], "cause": decode_name(v.cause),
            "failed": json.loads(v.failed) if v.failed != b"[]" else [],
            "episode": {"key": decode_name(v.key), "task_id": task_id, "trial": v.trial,
                        "grid_label": decode_name(v.grid_label) or "", "duration_s": v.duration_s}}
