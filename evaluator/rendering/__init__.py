"""Rendering: report.html (html, its SVG charts in svg_charts), terminal tables (terminal), junit.xml
(junit), Markdown summaries (markdown), the sweep's and the sequential gate's HTML sections (sweep_html,
sequential_html), and the helpers they share (render).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.rendering.html import write_html
    from faultproxy.evaluator.rendering.junit import JUnitWriter
    from faultproxy.evaluator.rendering.markdown import (bounded, gate_markdown, replay_markdown, report_markdown,
                                                         write_markdown)
    from faultproxy.evaluator.rendering.sequential_html import sequential_section
    from faultproxy.evaluator.rendering.sweep_html import sweep_section, write_sweep_html
    from faultproxy.evaluator.rendering.terminal import print_summary, print_sweep

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
