"""Aggregating a run: one streaming pass over the episode log (log_scan), each verdict in the forms
the report reads (verdict_forms), into per-task tallies (tally) and to the sinks that want every
episode (episode_sink); the report's sections per scope (sections), one episode's failure cause
(failure_cause), the run's clusters (causes) and where a failing trial parted from the passing
ones (parting), the traffic that reached the proxy (traffic) and configuration that never matched
(unmatched), put together as the run report (report).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.aggregate.episode_sink import EpisodeSink, SinkVerdict
    from faultproxy.evaluator.aggregate.report import build_report, write_json

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
