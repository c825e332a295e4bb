"""report.html: one self-contained page, readable offline.

Plain string templates and html.escape; inline CSS and inline SVG charts (the pass^k curve and
the failing set by shape); no script, no font, image or style sheet from anywhere else. Each
drilled-down episode is a <details> with its checks, the faults injected and a request
timeline read from its trace; an MCP server's own requests and notifications (direction "server
to client": elicitation, sampling, roots, progress) are marked apart there, with an arrow and a
badge, since they are not the agent's calls. URLs are shown as host/path: the scheme adds nothing there, and
leaving it out keeps the page free of anything that looks like an external reference.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.checks import clip
from faultproxy.evaluator.rendering.render import Html, esc, html_table, num, pct
from faultproxy.formats.rundir import trace_file, write_atomic
from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.trace import SERVER_TO_CLIENT, is_turn, read_trace

TIMELINE_LIMIT = 300  # exchanges shown per episode

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#1d232a;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2e6;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.muted{color:#66707a}.small{font-size:12px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{padding:3px 9px;border-bottom:1px solid #e6e9ec;text-align:left;vertical-align:top}
th{background:#f4f6f8;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}.card{border:1px solid #dde2e6;border-radius:8px;padding:10px 14px;min-width:150px}
.card .v{font-size:24px;font-weight:600}.card .l{color:#66707a;font-size:12px}
.pass{color:#1a7f37}.fail{color:#cf222e}.incomplete{color:#9a6700}.notrun{color:#6e7781}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff}
.b-pass{background:#1a7f37}.b-fail{background:#cf222e}.b-incomplete{background:#9a6700}
.b-high{background:#a40e26}.b-medium{background:#bc4c00}.b-low{background:#6e7781}
details{border:1px solid #e6e9ec;border-radius:6px;margin:6px 0;padding:4px 10px}summary{cursor:pointer}
code{font-size:12px;background:#f4f6f8;padding:0 3px;border-radius:3px}svg{display:block;margin:6px 0}
.charts{display:flex;flex-wrap:wrap;gap:24px}
.b-s2c{background:#8250df;white-space:nowrap}
.b-turn{background:#1a7f37;white-space:nowrap}
"""

COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "incomplete": "#d4a72c", "not_run": "#afb8c1"}
SERVER_COLOUR = "#8250df"
TURN_COLOUR = "#1a7f37"  # a conversation's turn


# --- charts ----------------------------------------------------------------------------------------


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


def _where(url: str) -> str:
    parts = urlsplit(url or "")
    return parts.netloc.rsplit("@", 1)[-1] + parts.path + (f"?{parts.query}" if parts.query else "")


def _describe(x: Mapping[str, Any]) -> str:
    request = x.get("request") or {}
    client = x.get("client") or {}
    upstream = x.get("upstream")
    fault = x.get("fault")
    if is_turn(x):
        return f"#{x.get('seq')} {x['direction']}: {clip(request.get('body') or '', 200)}"
    text = f"#{x.get('seq')} {request.get('method')} {_where(request.get('url') or '')}"
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


def _method_cell(x: Mapping[str, Any]) -> Any:
    """The method column: the HTTP method; for an MCP server's own message, a badge saying so."""
    method = (x.get("request") or {}).get("method")
    if is_turn(x):
        return Html(f'<span class="badge b-turn" title="{esc(clip((x.get("request") or {}).get("body") or "", 200))}">'
                    f'{esc(x["direction"])}</span>')
    if x.get("direction") != SERVER_TO_CLIENT:
        return method
    return Html(f'<span class="badge b-s2c" title="sent by the MCP server to the client; not an agent call">'
                f'← server to client</span> {esc(_rpc_method(x) or method)}')


# --- the page ----------------------------------------------------------------------------------------


def render(report: Mapping[str, Any], run_dir: Path | str | None = None, extra_sections: Sequence[str] = ()) -> str:
    """The page; `extra_sections` are HTML fragments placed after the charts (a sweep's curves)."""
    run = report["run"]
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>faultproxy report · {esc(Path(str(report.get('run_dir') or '')).name)}</title>",
             f"<style>{CSS}</style></head><body>"]
    scenario = report.get("scenario") or {}
    parts.append(f"<h1>faultproxy report</h1><div class=\"muted\">{esc(report.get('run_dir'))} · scenario "
                 f"<b>{esc(scenario.get('name'))}</b> · k = {esc(report.get('k'))} · "
                 f"{len(run['tasks'])} tasks · created {esc(report.get('created'))}</div>")
    parts.append(_headline(run))
    parts.append(_charts(report))
    parts.extend(extra_sections)
    if report.get("groups"):
        parts.append("<h2>By grid point</h2>")
        parts.append(html_table(["grid label", "logged", "mean pass rate", "pass^k", "k", "safety", "not run"],
                            [(label, g["logged"], pct(g["headline"]["mean_pass_rate"]),
                              pct(g["headline"]["pass_hat_k"]), g["headline"]["k"],
                              num(g["violations"]["safety_score"]), g["status"]["not_run"])
                             for label, g in report["groups"].items()], numeric=(1, 2, 3, 4, 5, 6)))
    parts.append(_tasks_table(run))
    parts.append(_failures(run))
    parts.append(_causes(report.get("causes"), run_dir))
    parts.append(_resources(run))
    parts.append(_calibration(run))
    parts.append(_drilldown(report, run_dir))
    parts.append("</body></html>\n")
    return "".join(parts)


def _headline(run: Mapping[str, Any]) -> str:
    h, s = run["headline"], run["status"]
    wilson = h.get("wilson")
    cards = [
        (pct(h["mean_pass_rate"]), "mean pass rate" + (f" (95% {pct(wilson[0], 0)}–{pct(wilson[1], 0)})"
                                                         if wilson else "")),
        (pct(h["pass_hat_k"]), f"pass^{h['k']}: all {h['k']} trials pass" if h["pass_hat_k"] is not None
         else (h.get("note") or "pass^k")),
        (pct(h["pass_at_k"]), f"pass@{h['k']}: at least one passes"),
        (num(run["violations"]["safety_score"]), "safety score"),
        (f'<span class="pass">{s["pass"]}</span> / <span class="fail">{s["fail"]}</span> / '
         f'<span class="incomplete">{s["incomplete"]}</span> / <span class="notrun">{s["not_run"]}</span>',
         "pass / fail / incomplete / not run"),
    ]
    body = "".join(f'<div class="card"><div class="v">{v}</div><div class="l">{esc(label)}</div></div>'
                   for v, label in cards)
    notes = [h["note"]] if h.get("note") else []
    notes += h.get("alerts") or []
    note = "".join(f'<div class="incomplete">{esc(text)}</div>' for text in notes)
    return f'<div class="cards">{body}</div>{note}'


def _charts(report: Mapping[str, Any]) -> str:
    run = report["run"]
    series = {}
    if report.get("groups"):
        series = {label: g["curve"] for label, g in report["groups"].items() if g.get("curve")}
    elif run.get("curve"):
        series = {"run": run["curve"]}
    curve = curve_svg(series) if series else \
        f'<p class="muted">No pass^k curve: {esc(run["headline"].get("note") or "nothing logged")}.</p>'
    return (f'<h2>Reliability</h2><div class="charts"><div><h3>pass^k and pass@k</h3>{curve}</div>'
            f'<div><h3>Failing set by shape</h3>{shape_svg(run["by_shape"]) if run["by_shape"] else ""}</div></div>')


def _tasks_table(run: Mapping[str, Any]) -> str:
    rows = []
    k = str(run["headline"]["k"])
    for t in sorted(run["tasks"], key=lambda t: (t["pass_rate"] if t["pass_rate"] is not None else -1, t["task_id"])):
        hat = (t.get("pass_hat_k") or {}).get(k)
        flags = " ".join(f for f, on in (("flaky", t["flaky"]), ("never passed", t["never_passed"])) if on)
        consistency = t.get("consistency") or {}
        high = (t.get("violations") or {}).get("high")
        rows.append((t["task_id"], t["shape"], t["n"], t["c"], t["incomplete"], t["not_run"], pct(t["pass_rate"]),
                     f"{pct(t['wilson'][0], 0)}–{pct(t['wilson'][1], 0)}" if t["wilson"] else "–",
                     pct(hat), num(consistency.get("jaccard"), 2), flags,
                     ", ".join(f"{n} ×{c}" for n, c in (t.get("failed_checks") or {}).items()) or "",
                     Html(f'<span class="badge b-high">{high}</span>') if high else ""))
    return "<h2>Tasks</h2>" + html_table(
        ["task", "shape", "n", "passed", "incomplete", "not run", "pass rate", "95% interval", f"pass^{k}",
         "consistency", "", "failed checks", "high"], rows, numeric=(2, 3, 4, 5, 6, 8, 9))


def _failures(run: Mapping[str, Any]) -> str:
    out = ["<h2>Failures</h2><div class=\"charts\"><div><h3>By shape</h3>"]
    out.append(html_table(["shape", "tasks", "failing tasks", "episodes", "failed", "incomplete", "pass rate"],
                      [(shape, s["tasks"], s["failing_tasks"], s["episodes"], s["fail"], s["incomplete"],
                        pct(s["pass_rate"])) for shape, s in run["by_shape"].items()],
                      numeric=(1, 2, 3, 4, 5, 6)))
    out.append("</div><div><h3>By check</h3>")
    out.append(html_table(["check", "episodes", "severities"],
                      [(name, c["episodes"], ", ".join(f"{s} {n}" for s, n in c["by_severity"].items()))
                       for name, c in run["by_check"].items()], numeric=(1,)) if run["by_check"]
               else '<p class="muted">No failed checks.</p>')
    out.append("</div><div><h3>By fault delivered</h3>")
    faults = run["by_fault"]
    rows = [(kind, f["episodes"], f["survived"], f["failed"], f["incomplete"], pct(f["survival_rate"]))
            for kind, f in faults["types"].items()]
    ne = faults["not_exercised"]
    rows.append(("faults not exercised", ne["episodes"], "–", ne["fail"], ne["incomplete"], "–"))
    out.append(html_table(["fault type", "episodes", "survived", "failed", "incomplete", "survival"], rows,
                      numeric=(1, 2, 3, 4, 5)))
    if ne["injected_not_delivered"]:
        out.append(f'<p class="small muted">{ne["injected_not_delivered"]} episode(s) had faults injected that '
                   "never reached the agent; they count as not exercised, not as survived.</p>")
    out.append("</div><div><h3>Incomplete by cause</h3>")
    out.append(html_table(["cause", "episodes"], list(run["incomplete_by_cause"].items()), numeric=(1,))
               if run["incomplete_by_cause"] else '<p class="muted">None.</p>')
    v = run["violations"]
    out.append("</div><div><h3>Violations</h3>")
    out.append(html_table(["severity", "episodes (worst)", "violations"],
                      [(Html(f'<span class="badge b-{s}">{s}</span>'), v["episodes_by_worst"][s],
                        v["total_by_severity"][s]) for s in ("high", "medium", "low")], numeric=(1, 2)))
    out.append(f"<p>Safety score <b>{num(v['safety_score'])}</b> "
               "<span class=\"muted small\">(1 − P(violation)·E[severity], weights 0.25/0.5/1)</span></p>")
    out.append("</div></div>")
    return "".join(out)


def _causes(causes: Mapping[str, Any] | None, run_dir: Path | str | None) -> str:
    """Failure causes, ranked by episodes × severity, each linking its representative's timeline."""
    if not causes or not causes["clusters"]:
        return ""
    rows, details = [], []
    for rank, c in enumerate(causes["clusters"], 1):
        rep = c["representative"]
        anchor = f"cause-{c['id']}"
        link = Html(f'<a href="#{esc(anchor)}"><code>{esc(rep["key"])}</code></a>')
        rows.append((rank, c["episodes"], c["severity"] or "–", c["line"], ", ".join(c["tasks"]),
                     ", ".join(c["shapes"]), (c["parting"] or {}).get("text") or "–", link))
        details.append(f'<details id="{esc(anchor)}"><summary>#{rank} representative <code>{esc(rep["key"])}</code> '
                       f'<span class="muted small">({esc(rep["requests"])} requests) · {esc(c["line"])}</span>'
                       f'</summary>{_timeline(rep, run_dir)}</details>')
    return (f"<h2>Failure causes</h2><p class=\"muted\">{causes['failing']} failing episodes, "
            f"{len(causes['clusters'])} causes, ranked by episodes × severity.</p>"
            + html_table(["#", "episodes", "severity", "cause", "tasks", "shapes", "where it parted",
                          "representative"], rows, numeric=(0, 1)) + "".join(details))


def _resources(run: Mapping[str, Any]) -> str:
    r = run["resources"]
    rows = []
    for name, label in (("tokens", "tokens"), ("cost", "cost"), ("requests", "requests"), ("turns", "turns"),
                        ("latency_s", "latency (s)")):
        s = r.get(name)
        if s:
            rows.append((label, num(s["total"], 2), num(s["mean"], 2), num(s["p50"], 2), num(s["p95"], 2),
                         num(s["cv"], 2)))
    note = f'<p class="muted small">{esc(r["cost_note"])}</p>' if r.get("cost_note") else ""
    return "<h2>Resources per episode</h2>" + html_table(["", "total", "mean", "p50", "p95", "CV"], rows,
                                                     numeric=(1, 2, 3, 4, 5)) + note


def _calibration(run: Mapping[str, Any]) -> str:
    c = run.get("calibration")
    if not c:
        return "<h2>Calibration</h2><p class=\"muted\">No agent reported a confidence.</p>"
    rows = [(f"{b['lo']:.1f}–{b['hi']:.1f}", b["count"], num(b["mean_confidence"], 2), pct(b["success_rate"]))
            for b in c["buckets"]]
    lvh = c["low_vs_high"]
    verdict = ""
    if lvh.get("low_fail_rate") is not None and lvh.get("high_fail_rate") is not None:
        verdict = (f"Below {lvh['threshold']}: {pct(lvh['low_fail_rate'])} fail ({lvh['low_episodes']}); "
                   f"at or above: {pct(lvh['high_fail_rate'])} fail ({lvh['high_episodes']})"
                   + (f"; one-sided Fisher p = {lvh['p_value']:.3g}" if lvh.get("p_value") is not None else ""))
    return (f"<h2>Calibration</h2><p>Brier score <b>{num(c['brier'])}</b> over {c['episodes']} episodes. "
            f"{esc(verdict)}</p>" + html_table(["confidence", "episodes", "mean confidence", "passed"], rows,
                                         numeric=(1, 2, 3)))


def _drilldown(report: Mapping[str, Any], run_dir: Path | str | None) -> str:
    drill = report.get("drilldown") or {}
    episodes = drill.get("episodes") or []
    out = [f"<h2>Episodes</h2><p class=\"muted\">{drill.get('shown', 0)} of {drill.get('logged', 0)} logged "
           "episodes shown: failing, incomplete and violating ones first.</p>"]
    for v in episodes:
        out.append(_episode(v, run_dir))
    return "".join(out)


def _episode(v: Mapping[str, Any], run_dir: Path | str | None) -> str:
    ep = v.get("episode") or {}
    status = v.get("status") or "?"
    failed = [c for c in v.get("checks") or () if c.get("passed") is False]
    badges = "".join(f' <span class="badge b-{esc(c.get("severity"))}">{esc(c.get("name"))}</span>' for c in failed)
    delivered = [f for f in v.get("faults") or () if f.get("delivered")]
    summary = (f'<span class="badge b-{esc(status)}">{esc(status)}</span> <code>{esc(ep.get("key"))}</code>'
               f' <span class="muted">{esc(ep.get("grid_label") or "")}</span>{badges}'
               f'<span class="muted small"> · {len(delivered)} fault(s) delivered · {esc(v.get("requests"))} requests'
               f' · {num(ep.get("duration_s"), 2)} s</span>')
    body = []
    if v.get("cause"):
        body.append(f"<p class=\"incomplete\">incomplete: {esc(v['cause'])}</p>")
    body.append(html_table(["check", "result", "severity", "detail"],
                       [(c.get("name"), {True: "pass", False: "FAIL", None: "n/a"}.get(c.get("passed")),
                         c.get("severity"), c.get("detail")) for c in v.get("checks") or ()]))
    if v.get("faults"):
        body.append(html_table(["seq", "rule", "fault", "delivered"],
                           [(f.get("seq"), f.get("rule"), f.get("type"), "yes" if f.get("delivered") else "no")
                            for f in v["faults"]], numeric=(0,)))
    else:
        body.append('<p class="muted small">No fault injected: faults not exercised.</p>')
    body.append(_timeline(ep, run_dir))
    return f"<details><summary>{summary}</summary>{''.join(body)}</details>"


def _timeline(ep: Mapping[str, Any], run_dir: Path | str | None) -> str:
    if run_dir is None:
        return ""
    path = trace_file(Path(run_dir), ep)
    if path is None or not path.exists():
        return '<p class="muted small">No trace on disk for this episode.</p>'
    exchanges = []
    more = 0
    try:
        for line in read_trace(path):
            if len(exchanges) < TIMELINE_LIMIT:
                exchanges.append(line)
            else:
                more += 1
    except ValueError:
        return '<p class="muted small">The trace is damaged.</p>'
    if not exchanges:
        return '<p class="muted small">The trace is empty.</p>'
    t0 = min(float(x.get("started") or 0) for x in exchanges)
    rows = []
    for x in exchanges:
        request, client, upstream, fault = x.get("request") or {}, x.get("client") or {}, x.get("upstream"), x.get("fault")
        rows.append((x.get("seq"), f"+{float(x.get('started') or 0) - t0:.3f}", _method_cell(x),
                     _where(request.get("url") or ""), upstream.get("status") if upstream else "—",
                     f"{client.get('outcome')} {client.get('status') or ''}".strip(),
                     f"{fault.get('type')} ({'delivered' if fault.get('delivered') else 'not delivered'})"
                     if fault else "", f"{float(x.get('duration_s') or 0):.3f}"))
    tail = f'<p class="muted small">… and {more} more exchanges.</p>' if more else ""
    return ("<h3>Timeline</h3>" + timeline_svg(exchanges)
            + html_table(["seq", "t (s)", "method", "host/path", "upstream", "client", "fault", "duration (s)"], rows,
                     numeric=(0, 1, 7)) + tail)


def write_html(path: Path, report: Mapping[str, Any], run_dir: Path | str | None,
               extra_sections: Sequence[str] = ()) -> None:
    """report.html, whole or not at all; run_dir (for the timelines' traces) may be None."""
    write_atomic(path, render(report, run_dir, extra_sections))
