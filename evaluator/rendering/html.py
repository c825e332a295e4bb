"""report.html: one self-contained page, readable offline.

Plain string templates and html.escape; inline CSS and inline SVG charts (the pass^k curve and
the failing set by shape: evaluator.rendering.svg_charts); no script, no font, image or style
sheet from anywhere else. Each drilled-down episode is a <details> with its checks, the faults
injected and a request timeline read from its trace; an MCP server's own requests and
notifications (direction "server to client": elicitation, sampling, roots, progress) are marked
apart there, with an arrow and a badge, since they are not the agent's calls. URLs are shown as
host/path: the scheme adds nothing there, and leaving it out keeps the page free of anything that
looks like an external reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.rendering.render import Html, esc, html_table, num, pct
from faultproxy.evaluator.rendering.svg_charts import curve_svg, host_path, method_cell, shape_svg, timeline_svg
from faultproxy.formats.rundir import trace_file, write_atomic
from faultproxy.formats.trace import read_trace

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
        rows.append((x.get("seq"), f"+{float(x.get('started') or 0) - t0:.3f}", method_cell(x),
                     host_path(request.get("url") or ""), upstream.get("status") if upstream else "—",
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
