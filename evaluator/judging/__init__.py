"""Judging one episode: its checks, its faults and what it cost (judge), live traffic's checks
(online), infrastructure errors and side channels (side_channels), tool clients that bypass the
proxy (bypass), stdio MCP servers that could not start (server_start).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.judging.bypass import task_hosts
    from faultproxy.evaluator.judging.judge import judge_episode

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
