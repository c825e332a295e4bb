"""report.html's inline SVG charts: the pass^k curve, the failing set by shape and an episode's
request timeline, with how the page names an exchange (host_path, method_cell)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.checks import clip
from faultproxy.evaluator.rendering.render import Html, esc
from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.trace import SERVER_TO_CLIENT, is_turn

COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "incomplete": "#d4a72c", "not_run": "#afb8c1"}
SERVER_COLOUR = "#8250df"
TURN_COLOUR = "#1a7f37"  # a conversation's turn


def curve_svg(series: Mapping[str, Mapping[str, Sequence[float]]], width: int = 560, height: int = 280) -> str:
    """pass^k (solid) and pass@k (dashed) against k, one colour per series (run or grid label)."""
    left, right, top, bottom = 48, 150, 14, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    k_max = max((max(s["k"]) for s in series.values() if s.get("k")), default=1)
    log_x = k_max > 100

    def x(k: float) -> float:
        if k_max <= 1:
            return left + plot_w / 2
        if log_x:
            return left + plot_w * math.log(k) / math.log(k_max)
        return left + plot_w * (k - 1) / (k_max - 1)

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="pass^k and pass@k against k">']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e6e9ec"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end" fill="#66707a">'
                     f"{v:.2f}</text>")
    ticks = _ticks(k_max, log_x)
    for k in ticks:
        parts.append(f'<text x="{x(k):.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle" '
                     f'fill="#66707a">{k}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" font-size="12" text-anchor="middle" '
                 f'fill="#1d232a">k{" (log scale)" if log_x else ""}</text>')
    palette = ["#0969da", "#8250df", "#bf3989", "#1a7f37", "#bc4c00", "#57606a"]
    for i, (name, s) in enumerate(series.items()):
        colour = palette[i % len(palette)]
        for key, dash in (("pass_hat_k", ""), ("pass_at_k", ' stroke-dasharray="5 4"')):
            points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in zip(s["k"], s[key]))
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            if len(s["k"]) == 1:
                parts.append(f'<circle cx="{x(s["k"][0]):.1f}" cy="{y(s[key][0]):.1f}" r="3" fill="{colour}"/>')
        ly = top + 14 + 34 * i
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" y1="{ly}" y2="{ly}" '
                     f'stroke="{colour}" stroke-width="2"/><text x="{left + plot_w + 36}" y="{ly + 4}" '
                     f'font-size="11">{esc(name or "run")} pass^k</text>')
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" y1="{ly + 14}" y2="{ly + 14}" '
                     f'stroke="{colour}" stroke-width="2" stroke-dasharray="5 4"/><text x="{left + plot_w + 36}" '
                     f'y="{ly + 18}" font-size="11">pass@k</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(k_max: int, log_x: bool) -> list[int]:
    if k_max <= 12:
        return list(range(1, k_max + 1))
    if log_x:
        ticks = [1]
        while ticks[-1] * 10 <= k_max:
            ticks.append(ticks[-1] * 10)
        return ticks + ([k_max] if ticks[-1] != k_max else [])
    step = max(1, round(k_max / 8))
    return sorted({1, *range(step, k_max + 1, step), k_max})


def shape_svg(by_shape: Mapping[str, Mapping[str, Any]], width: int = 560) -> str:
    """One stacked bar per shape: passed, failed, incomplete and not run episodes."""
    row, left, label_w = 26, 8, 130
    height = 40 + row * len(by_shape)
    plot_w = width - label_w - left - 60
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="episodes by shape">']
    for i, (shape, s) in enumerate(by_shape.items()):
        total = s["pass"] + s["fail"] + s["incomplete"] + s["not_run"]
        y0 = 8 + i * row
        parts.append(f'<text x="{left}" y="{y0 + 14}" font-size="12">{esc(shape)}</text>')
        x0 = left + label_w
        for key in ("pass", "fail", "incomplete", "not_run"):
            if not total or not s[key]:
                continue
            w = plot_w * s[key] / total
            parts.append(f'<rect x="{x0:.1f}" y="{y0}" width="{w:.1f}" height="18" fill="{COLOURS[key]}">'
                         f"<title>{esc(shape)}: {s[key]} {key.replace('_', ' ')}</title></rect>")
            x0 += w
        failing = s["fail"] + s["incomplete"]
        parts.append(f'<text x="{left + label_w + plot_w + 6}" y="{y0 + 14}" font-size="11" fill="#66707a">'
                     f"{failing}/{total}</text>")
    ly = 8 + len(by_shape) * row + 8
    x0 = left + label_w
    for key in ("pass", "fail", "incomplete", "not_run"):
        parts.append(f'<rect x="{x0}" y="{ly}" width="10" height="10" fill="{COLOURS[key]}"/>'
                     f'<text x="{x0 + 14}" y="{ly + 9}" font-size="11">{key.replace("_", " ")}</text>')
        x0 += 90
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(exchanges: Sequence[Mapping[str, Any]], width: int = 760) -> str:
    """A bar per exchange from its start to its end; red where a fault was delivered, amber
    where one was injected but not delivered, grey for model calls, blue for tools, purple with
    a leftward arrow for an MCP server's own request or notification (server to client)."""
    if not exchanges:
        return ""
    t0 = min(float(x.get("started") or 0) for x in exchanges)
    end = max(float(x.get("started") or 0) + float(x.get("duration_s") or 0) for x in exchanges)
    span = max(end - t0, 1e-3)
    row, left = 12, 40
    plot_w = width - left - 10
    height = 20 + row * len(exchanges)
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="request timeline">',
             f'<text x="{left}" y="10" font-size="10" fill="#66707a">0 s</text>',
             f'<text x="{width - 10}" y="10" font-size="10" fill="#66707a" text-anchor="end">{span:.2f} s</text>']
    for i, x in enumerate(exchanges):
        start = (float(x.get("started") or 0) - t0) / span * plot_w
        w = max(1.5, float(x.get("duration_s") or 0) / span * plot_w)
        fault = x.get("fault")
        path = urlsplit((x.get("request") or {}).get("url") or "").path
        model = is_model_call(path)
        from_server = x.get("direction") == SERVER_TO_CLIENT
        colour = "#cf222e" if fault and fault.get("delivered") else "#d4a72c" if fault else \
            SERVER_COLOUR if from_server else TURN_COLOUR if is_turn(x) else "#8c959f" if model else "#0969da"
        y0 = 16 + i * row
        parts.append(f'<text x="{left - 4}" y="{y0 + 8}" font-size="9" text-anchor="end" fill="#66707a">'
                     f'{esc(x.get("seq"))}</text><rect x="{left + start:.1f}" y="{y0}" width="{w:.1f}" height="9" '
                     f'fill="{colour}"><title>{esc(_describe(x))}</title></rect>')
        if from_server:  # an arrow pointing back at the client, just left of the bar
            parts.append(f'<path class="s2c" d="M{left + start - 6:.1f} {y0 + 4.5} l5 -4.5 v9 z" fill="{SERVER_COLOUR}"/>')
    parts.append("</svg>")
    return "".join(parts)


def host_path(url: str) -> str:
    """A URL as the page shows it: host/path?query, no scheme, no credentials."""
    parts = urlsplit(url or "")
    return parts.netloc.rsplit("@", 1)[-1] + parts.path + (f"?{parts.query}" if parts.query else "")


def _describe(x: Mapping[str, Any]) -> str:
    request = x.get("request") or {}
    client = x.get("client") or {}
    upstream = x.get("upstream")
    fault = x.get("fault")
    if is_turn(x):
        return f"#{x.get('seq')} {x['direction']}: {clip(request.get('body') or '', 200)}"
    text = f"#{x.get('seq')} {request.get('method')} {host_path(request.get('url') or '')}"
    if x.get("direction") == SERVER_TO_CLIENT:
        method = _rpc_method(x) or "a message"
        text += f" ← server to client: {method}" + ("" if method.startswith("notifications/") else ", answered by the client")
    text += f" → upstream {upstream.get('status') if upstream else '—'}, client {client.get('outcome')}"
    text += f" {client.get('status') or ''}".rstrip()
    if fault:
        text += f"; fault {fault.get('type')} ({'delivered' if fault.get('delivered') else 'not delivered'})"
    if x.get("body_not_evaluated"):
        text += f"; body not evaluated: {x['body_not_evaluated']}"
    return text


def _rpc_method(x: Mapping[str, Any]) -> str | None:
    """The JSON-RPC method of a trace line's request (an MCP message), else None."""
    try:
        body = json.loads((x.get("request") or {}).get("body") or "")
    except (ValueError, TypeError, RecursionError):
        return None
    method = body.get("method") if isinstance(body, dict) else None
    return method if isinstance(method, str) else None


def method_cell(x: Mapping[str, Any]) -> Any:
    """The method column: the HTTP method; for an MCP server's own message, a badge saying so."""
    method = (x.get("request") or {}).get("method")
    if is_turn(x):
        return Html(f'<span class="badge b-turn" title="{esc(clip((x.get("request") or {}).get("body") or "", 200))}">'
                    f'{esc(x["direction"])}</span>')
    if x.get("direction") != SERVER_TO_CLIENT:
        return method
    return Html(f'<span class="badge b-s2c" title="sent by the MCP server to the client; not an agent call">'
                f'← server to client</span> {esc(_rpc_method(x) or method)}')
