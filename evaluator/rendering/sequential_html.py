"""report.html's section for a sequential run (`--until-decided`): where the gate stopped and why.

    fragment = sequential_section(report["sequential"])     # evaluator.gate.sequential_looks.report_section's

A table of the looks (trials per task, the α each look may spend, the α spent up to it, and what
happened there) and a bar chart of what the decision cost: the episodes it rests on beside the
episodes the design allows at max-k and those a fixed-k gate of the same power would run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.rendering.render import Html, esc, html_table, num

VERDICT_BADGE = {"PASS": "b-pass", "BLOCK": "b-fail"}
BAR_COLOURS = ("#0969da", "#afb8c1", "#8250df")


def sequential_section(section: Mapping[str, Any]) -> str:
    design = section["design"]
    verdict = section.get("verdict")
    badge = (f'<span class="badge {VERDICT_BADGE.get(verdict, "b-incomplete")}">{esc(verdict)}</span> '
             if verdict else "")
    return (f"<h2>Sequential gate</h2><p>{badge}{esc(section['line'])}</p>"
            f'<div class="charts"><div><h3>Looks</h3>{_looks_table(design, section)}</div>'
            f"<div><h3>Episodes</h3>{episodes_svg(_bars(design, section))}</div></div>")


def _looks_table(design: Mapping[str, Any], section: Mapping[str, Any]) -> str:
    rows, spent = [], 0.0
    for index, (k, level) in enumerate(zip(design["looks"], design["levels"], strict=True)):
        spent += level
        rows.append((index + 1, k, num(level, 4), num(spent, 4), _what_happened(index, section)))
    return html_table(["look", "k per task", "α at the look", "α spent", ""], rows, numeric=(0, 1, 2, 3))


def _what_happened(index: int, section: Mapping[str, Any]) -> str:
    stopped = section.get("round", 0) - 1  # the look that decided, or the one still running
    decided = section.get("decided", False)
    if index < stopped:
        return "no decision: went on"
    if index == stopped:
        return f"decided: {section['verdict']}" if decided else "running: waiting for its trials"
    return "not needed" if decided else "to come"


def _bars(design: Mapping[str, Any], section: Mapping[str, Any]) -> list[tuple[str, int]]:
    bars = [("decided on", int(section.get("episodes_used") or 0)),
            ("at max-k", int(section.get("episodes_at_max_k") or 0))]
    fixed_k = section.get("fixed_k")
    if fixed_k:  # the same tasks at a fixed-k design of the same power
        bars.append((f"fixed k = {fixed_k}", fixed_k * bars[1][1] // design["max_k"]))
    return bars


def episodes_svg(bars: Sequence[tuple[str, int]], width: int = 420) -> str:
    """Horizontal bars, one per (label, episodes), on one scale."""
    label_w, bar_h, gap = 110, 18, 8
    top = max((value for _, value in bars), default=0) or 1
    height = len(bars) * (bar_h + gap) + gap
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="episodes">']
    for i, ((label, value), colour) in enumerate(zip(bars, BAR_COLOURS, strict=False)):
        y = gap + i * (bar_h + gap)
        length = (width - label_w - 60) * value / top
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" font-size="12" text-anchor="end">{esc(label)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{length:.1f}" height="{bar_h}" fill="{colour}"/>'
                     f'<text x="{label_w + length + 4:.1f}" y="{y + 13}" font-size="12">{value:,}</text>')
    parts.append("</svg>")
    return Html("".join(parts))
