"""sweep.html: the sweep's charts as inline SVG, readable offline.

    write_sweep_html(run_dir / "sweep.html", analysis)     # a page of its own
    fragment = sweep_section(analysis)                      # the same content, to embed in report.html

The analysis is evaluator.sweeps.sweep_analysis's. Charts: per param, mean success (solid, with its Wilson band)
and pass^k (dashed, with its interval over tasks) against the level, one colour per series (the
other params' levels and the model); with two params, the surface as heat maps; with several
models, each model's mean and pass^k beside pass@M and pass^M, and the tasks the models disagree
on. Plain strings and html.escape; no script and nothing fetched from anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.rendering.html import CSS
from faultproxy.evaluator.rendering.render import Html, esc, html_table, interval, pct
from faultproxy.evaluator.sweeps import level_text, point_order
from faultproxy.formats.rundir import write_atomic

PALETTE = ["#0969da", "#8250df", "#bf3989", "#1a7f37", "#bc4c00", "#57606a", "#0a7ea4", "#9a6700"]
FLAG = "#d4a72c"
SERIES_LIMIT = 12  # series drawn per chart; the table below has every point
BAND_LIMIT = 3  # with more series, Wilson intervals are bars, not overlapping bands
DISAGREEMENT_BARS = 20


# --- charts ---------------------------------------------------------------------------------------


def _y_axis(parts: list[str], left: float, top: float, plot_w: float, plot_h: float) -> None:
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - v)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e9ec"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#66707a">'
                     f"{v:.2f}</text>")


def curve_svg(param: str, series_list: Sequence[Mapping[str, Any]], k: int, flagged: set[str] = frozenset(),
              width: int = 660, height: int = 300) -> str:
    """Mean success (solid, Wilson band) and pass^k (dashed, interval bars) against the param's level."""
    left, right, top, bottom = 48, 220, 14, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    levels = list(dict.fromkeys(p["level"] for s in series_list for p in s["points"]))
    words = any(isinstance(v, str) for v in levels)  # a categorical param: its levels evenly spaced, in order
    position = {v: i if words else v for i, v in enumerate(levels if words else sorted(levels))}
    lo, hi = (min(position.values()), max(position.values())) if levels else (0.0, 1.0)

    def x(level: float | str) -> float:
        return left + plot_w / 2 if hi == lo else left + plot_w * (position[level] - lo) / (hi - lo)

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="mean success and pass^{k} against {esc(param)}">']
    _y_axis(parts, left, top, plot_w, plot_h)
    for level in levels:
        parts.append(f'<line x1="{x(level):.1f}" x2="{x(level):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
                     f'stroke="#66707a"/><text x="{x(level):.1f}" y="{top + plot_h + 16}" font-size="11" '
                     f'text-anchor="middle" fill="#66707a">{esc(level_text(level))}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" font-size="12" text-anchor="middle" '
                 f'fill="#1d232a">{esc(param)}</text>')
    bands = len(series_list) <= BAND_LIMIT
    for i, series in enumerate(series_list[:SERIES_LIMIT]):
        colour = PALETTE[i % len(PALETTE)]
        points = series["points"]
        band = [p for p in points if p["wilson"]] if bands else []
        if len(band) > 1:
            upper = " ".join(f"{x(p['level']):.1f},{y(p['wilson'][1]):.1f}" for p in band)
            lower = " ".join(f"{x(p['level']):.1f},{y(p['wilson'][0]):.1f}" for p in reversed(band))
            parts.append(f'<polygon points="{upper} {lower}" fill="{colour}" fill-opacity="0.10" stroke="none"/>')
        for key, dash in (("mean", ""), ("pass_hat_k", ' stroke-dasharray="5 4"')):
            drawn = [p for p in points if p[key] is not None]
            if len(drawn) > 1:
                line = " ".join(f"{x(p['level']):.1f},{y(p[key]):.1f}" for p in drawn)
                parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            for p in drawn:
                cx, cy = x(p["level"]), y(p[key])
                if key == "mean" and len(band) <= 1 and p["wilson"]:
                    parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(p["wilson"][0]):.1f}" '
                                 f'y2="{y(p["wilson"][1]):.1f}" stroke="{colour}" stroke-opacity="0.5"/>')
                if key == "pass_hat_k" and p["pass_hat_k_interval"]:
                    a, b = p["pass_hat_k_interval"]
                    parts.append(f'<line x1="{cx + 3:.1f}" x2="{cx + 3:.1f}" y1="{y(a):.1f}" y2="{y(b):.1f}" '
                                 f'stroke="{colour}" stroke-opacity="0.45" stroke-dasharray="2 2"/>')
                shape = (f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{colour}"/>' if key == "mean" else
                         f'<rect x="{cx - 3:.1f}" y="{cy - 3:.1f}" width="6" height="6" fill="#fff" '
                         f'stroke="{colour}" stroke-width="1.5"/>')
                parts.append(shape)
                if key == "pass_hat_k" and p["label"] in flagged:
                    parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="8" fill="none" stroke="{FLAG}" '
                                 f'stroke-width="2"><title>mean up, pass^k down</title></circle>')
        ly = top + 10 + 18 * i
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 30}" y1="{ly}" y2="{ly}" '
                     f'stroke="{colour}" stroke-width="2"/><text x="{left + plot_w + 34}" y="{ly + 4}" '
                     f'font-size="11" fill="#1d232a">{esc(_short(series["series"]))}</text>')
    ly = top + 10 + 18 * min(len(series_list), SERIES_LIMIT) + 8
    key_x = left + plot_w + 12
    for offset, text in ((4, f"solid ●: mean, {'band' if bands else 'bars'} 95% Wilson"),
                         (20, f"dashed ■: pass^{k}, bars 95%"), (34, "over tasks")):
        parts.append(f'<text x="{key_x}" y="{ly + offset}" font-size="11" fill="#66707a">{esc(text)}</text>')
    if len(series_list) > SERIES_LIMIT:
        parts.append(f'<text x="{left + plot_w + 12}" y="{ly + 52}" font-size="11" fill="#66707a">'
                     f"+{len(series_list) - SERIES_LIMIT} more series in the table</text>")
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _heat(value: float | None) -> str:
    """0 red, 0.5 amber, 1 green; missing grey."""
    if value is None:
        return "#eaeef2"
    v = min(1.0, max(0.0, value))
    stops = [(0.0, (207, 34, 46)), (0.5, (212, 167, 44)), (1.0, (26, 127, 55))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if v <= b:
            t = (v - a) / (b - a)
            r, g, bl = (round(ca[i] + t * (cb[i] - ca[i])) for i in range(3))
            return f"#{r:02x}{g:02x}{bl:02x}"
    return "#1a7f37"


def surface_svg(surface: Mapping[str, Any], grid: Sequence[Sequence[float | None]], title: str,
                cell_w: int = 64, cell_h: int = 34) -> str:
    """A heat map of one metric on the two params' levels (y down, x across)."""
    xs, ys = surface["x_levels"], surface["y_levels"]
    left, top = 70, 42
    width, height = left + cell_w * len(xs) + 10, top + cell_h * len(ys) + 40
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{esc(title)}">',
             f'<text x="{left}" y="14" font-size="12" fill="#1d232a">{esc(title)}</text>']
    for j, xv in enumerate(xs):
        parts.append(f'<text x="{left + cell_w * j + cell_w / 2:.1f}" y="{top - 6}" font-size="11" '
                     f'text-anchor="middle" fill="#66707a">{esc(level_text(xv))}</text>')
    for i, yv in enumerate(ys):
        parts.append(f'<text x="{left - 8}" y="{top + cell_h * i + cell_h / 2 + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#66707a">{esc(level_text(yv))}</text>')
        for j in range(len(xs)):
            value = grid[i][j]
            fill = _heat(value)
            ink = "#1d232a" if value is None or 0.3 < value < 0.7 else "#fff"
            parts.append(f'<rect x="{left + cell_w * j}" y="{top + cell_h * i}" width="{cell_w - 2}" '
                         f'height="{cell_h - 2}" fill="{fill}"/><text x="{left + cell_w * j + cell_w / 2 - 1:.1f}" '
                         f'y="{top + cell_h * i + cell_h / 2 + 3:.1f}" font-size="11" text-anchor="middle" '
                         f'fill="{ink}">{pct(value, 0)}</text>')
    parts.append(f'<text x="{left + cell_w * len(xs) / 2:.1f}" y="{height - 8}" font-size="12" '
                 f'text-anchor="middle" fill="#1d232a">{esc(surface["x"])} →</text>')
    parts.append(f'<text x="12" y="{top + cell_h * len(ys) / 2:.1f}" font-size="12" fill="#1d232a" '
                 f'transform="rotate(-90 12 {top + cell_h * len(ys) / 2:.1f})" text-anchor="middle">'
                 f'{esc(surface["y"])} ↓</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bars(rows: Sequence[tuple[str, float | None, str, str]], width: int = 560, scale_max: float = 1.0,
          fmt=lambda v: pct(v, 0)) -> str:
    """Horizontal bars: (label, value, colour, note)."""
    left, bar_h, gap, top = 170, 16, 6, 8
    plot_w = width - left - 70
    height = top + len(rows) * (bar_h + gap) + 18
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for v in (0, 0.5, 1.0):
        gx = left + plot_w * v
        parts.append(f'<line x1="{gx:.1f}" x2="{gx:.1f}" y1="{top - 4}" y2="{height - 16}" stroke="#e6e9ec"/>'
                     f'<text x="{gx:.1f}" y="{height - 4}" font-size="10" text-anchor="middle" fill="#66707a">'
                     f"{fmt(v * scale_max)}</text>")
    for i, (label, value, colour, note) in enumerate(rows):
        y = top + i * (bar_h + gap)
        parts.append(f'<text x="{left - 8}" y="{y + bar_h - 4}" font-size="11" text-anchor="end" fill="#1d232a">'
                     f"{esc(_short(label, 28))}</text>")
        if value is not None:
            w = plot_w * min(1.0, max(0.0, value / scale_max))
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                         f"<title>{esc(note)}</title></rect>")
        parts.append(f'<text x="{left + plot_w + 6}" y="{y + bar_h - 4}" font-size="11" fill="#1d232a">'
                     f"{fmt(value)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def matrix_svg(matrix: Mapping[str, Any], k: int) -> str:
    """Bars: each model's mean and pass^k, then pass@M and pass^M."""
    rows: list[tuple[str, float | None, str, str]] = []
    for i, model in enumerate(matrix["models"]):
        s = matrix["per_model"][model]
        colour = PALETTE[i % len(PALETTE)]
        rows.append((f"{model} · mean", s["mean"], colour, f"{model}: mean success"))
        rows.append((f"{model} · pass^{k}", s["pass_hat_k"], colour + "99", f"{model}: pass^{k}"))
    rows.append(("pass@M (some model)", matrix["pass_at_M"], "#1a7f37", "some model succeeds"))
    rows.append(("pass^M (every model)", matrix["pass_hat_M"], "#cf222e", "every model succeeds"))
    return _bars(rows)


def disagreement_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    """Bars: the tasks the models disagree on most, in bits."""
    bars = [(r["task_id"], r["score"], "#8250df", ", ".join(f"{m} {pct(v, 0)}" for m, v in r["rates"].items()))
            for r in rows[:DISAGREEMENT_BARS]]
    return _bars(bars, fmt=lambda v: "–" if v is None else f"{v:.2f}")


# --- the section and the page -------------------------------------------------------------------


def sweep_section(analysis: Mapping[str, Any]) -> str:
    """The sweep as an HTML fragment (headings, charts, tables), for sweep.html or report.html."""
    k = analysis["k"]
    params, models = analysis["params"], analysis["models"]
    flagged = {f["label"] for f in analysis["flags"]}
    parts = ["<h2>Sweep</h2>"]
    roles = analysis.get("param_roles") or {}
    notes = {"fault": "fault intensity (rule probabilities)", "perturbation": "semantics-preserving perturbation",
             "agent": "handed to the agent only"}
    described = ", ".join(f"<b>{esc(n)}</b> ({len(v)} levels{'; ' + notes[roles[n]] if n in roles else ''})"
                          for n, v in params.items())
    parts.append(f'<p class="muted">{described or "no params"}'
                 f'{" · models " + esc(", ".join(models)) if models else ""} · k = {k} · '
                 f'{len(analysis["tasks"])} tasks · {analysis["logged"]}/{analysis["planned"]} episodes</p>')
    if not analysis["complete"]:
        parts.append(f'<p class="incomplete">{analysis["planned"] - analysis["logged"]} planned episode(s) not run: '
                     f"pass^{k} is null where they are missing. Rerun the sweep to resume.</p>")
    parts.append(_acceptance(analysis.get("acceptance")))
    charts = [f"<div><h3>{esc(name)}</h3>{curve_svg(name, analysis['curves'][name], k, flagged)}</div>"
              for name in params]
    if charts:
        parts.append(f'<h3>Curves</h3><div class="charts">{"".join(charts)}</div>')
    for flag in analysis["flags"]:
        where = f" ({esc(flag['series'])})" if flag["series"] != "all" else ""
        parts.append(f'<p class="incomplete">⚑ {esc(flag["param"])}={esc(level_text(flag["level"]))}{where}: the mean rises '
                     f'{pct(flag["previous_mean"])} → {pct(flag["mean"])} while pass^{k} falls '
                     f'{pct(flag["previous_pass_hat_k"])} → {pct(flag["pass_hat_k"])}.</p>')
    surface = analysis.get("surface")
    if surface:
        maps = []
        for model, grids in surface["by_model"].items():
            suffix = f" · {model}" if model else ""
            maps.append(f"<div>{surface_svg(surface, grids['mean'], 'mean success' + suffix)}</div>")
            maps.append(f"<div>{surface_svg(surface, grids['pass_hat_k'], f'pass^{k}' + suffix)}</div>")
        parts.append(f'<h3>Surface</h3><div class="charts">{"".join(maps)}</div>')
    parts.append(_points_table(analysis, flagged))
    parts.append(_causes(analysis))
    if analysis.get("matrix"):
        parts.append(_matrix(analysis["matrix"], k))
    return "".join(parts)


def _causes(analysis: Mapping[str, Any]) -> str:
    """Failure causes by grid point: which appear as the params rise."""
    rows = analysis.get("causes") or []
    if not rows:
        return ""
    labels = [p["label"] for p in analysis["points"]]
    return ("<h3>Failure causes by grid point</h3>"
            + html_table(["cause", "severity", *labels],
                         [(r["line"], r["severity"] or "–", *r["episodes"]) for r in rows],
                         numeric=tuple(range(2, 2 + len(labels)))))


def _acceptance(acceptance: Mapping[str, Any] | None) -> str:
    if not acceptance or acceptance["status"] == "none":
        return ""
    status = acceptance["status"]
    badge = {"met": "b-pass", "violated": "b-fail", "pending": "b-incomplete"}[status]
    rows = []
    for r in acceptance["results"]:
        verdict = ("pending" if r["ok"] is None else "ok" if r["ok"] else "violated")
        rows.append((f"{r['param']}={r['at']:g}", r["series"], pct(r["baseline_mean"]), pct(r["at_mean"]),
                     "–" if r["fall"] is None else f"{100 * r['fall']:.1f}", f"{100 * r['drop']:.1f}",
                     verdict + (f" ({r['note']})" if r["note"] else "")))
    return (f'<h3>Acceptance <span class="badge {badge}">{esc(status)}</span></h3>'
            + html_table(["max_drop at", "series", "mean at 0", "mean at level", "fall (points)", "allowed",
                          "verdict"], rows, numeric=(2, 3, 4, 5)))


def _points_table(analysis: Mapping[str, Any], flagged: set[str]) -> str:
    k = analysis["k"]
    params, models = list(analysis["params"]), analysis["models"]
    rows = []
    for p in sorted(analysis["points"], key=point_order(analysis)):
        row = [level_text(p["params"][n]) if n in p["params"] else "–" for n in params]
        if models:
            row.append(p["model"])
        row += [f"{p['logged']}/{p['planned']}", pct(p["mean"]), interval(p["wilson"]),
                pct(p["pass_hat_k"]) if p["pass_hat_k"] is not None else "null", interval(p["pass_hat_k_interval"]),
                "⚑ mean ↑ pass^k ↓" if p["label"] in flagged else p["note"] or ""]
        rows.append(row)
    headers = [*params, *(["model"] if models else []), "logged", "mean", "95% (episodes)", f"pass^{k}",
               "95% (tasks)", ""]
    first = len(params) + (1 if models else 0)
    return "<h3>Per grid point</h3>" + html_table(headers, rows, numeric=tuple(range(first, first + 5)))


def _matrix(matrix: Mapping[str, Any], k: int) -> str:
    models = matrix["models"]
    parts = ["<h2>Model matrix</h2>",
             f'<p class="muted">pass@M: some model succeeds; pass^M: every model succeeds — on '
             f'{matrix["aligned"]} aligned task-trials (same task, trial and params, logged for every model)'
             f'{"; " + str(matrix["unaligned"]) + " not logged for every model" if matrix["unaligned"] else ""}.</p>',
             '<div class="charts">', f"<div><h3>Models and their joint success</h3>{matrix_svg(matrix, k)}</div>"]
    disagree = [r for r in matrix["disagreement"] if r["score"] > 0]
    if disagree:
        parts.append(f"<div><h3>Disagreement per task (bits)</h3>{disagreement_svg(disagree)}</div>")
    parts.append("</div>")
    parts.append(html_table(["model", "logged", "mean", "95% (episodes)", f"pass^{k}", "95% (tasks)"],
                            [(m, f"{s['logged']}/{s['planned']}", pct(s["mean"]), interval(s["wilson"]),
                              pct(s["pass_hat_k"]) if s["pass_hat_k"] is not None else "null",
                              interval(s["pass_hat_k_interval"])) for m, s in matrix["per_model"].items()],
                            numeric=(1, 2, 3, 4, 5)))
    if len(matrix["cells"]) > 1:
        parts.append(html_table(["params", "aligned", "pass@M", "pass^M"],
                                [(c["cell"], str(c["aligned"]), pct(c["pass_at_M"]), pct(c["pass_hat_M"]))
                                 for c in matrix["cells"]], numeric=(1, 2, 3)))
    if matrix["disagreement"]:
        parts.append("<h3>Tasks by disagreement</h3>" + html_table(
            ["task", "disagreement (bits)", *models],
            [(r["task_id"], f"{r['score']:.3f}", *(pct(r["rates"][m]) for m in models))
             for r in matrix["disagreement"]], numeric=tuple(range(1, 2 + len(models)))))
    if matrix["selection"]:
        parts.append(f'<h3>Diagnostic selection</h3><p class="muted">One task per pattern of model outcomes '
                     f'({esc(matrix["selection_rule"])}); unanimous success and failure kept as anchors.</p>')
        marks = {True: Html('<span class="pass">✓</span>'), False: Html('<span class="fail">✗</span>')}
        parts.append(html_table(["task", "params", "pattern", *models],
                                [(s["task_id"], s["cell"] or "", s["kind"], *(marks[bool(s["pattern"][m])] for m in models))
                                 for s in matrix["selection"]]))
    return "".join(parts)


def render_page(analysis: Mapping[str, Any]) -> str:
    """sweep.html's text: the sweep section on a page of its own."""
    scenario = (analysis.get("scenario") or {}).get("name")
    run_dir = analysis.get("run_dir") or ""
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>faultproxy sweep · {esc(Path(run_dir).name)}</title><style>{CSS}</style></head><body>"
            f"<h1>faultproxy sweep</h1><div class=\"muted\">{esc(run_dir)} · scenario <b>{esc(scenario)}</b> · "
            f"created {esc(analysis.get('created'))}</div>" + sweep_section(analysis) + "</body></html>\n")


def write_sweep_html(path: Path, analysis: Mapping[str, Any]) -> None:
    """sweep.html, whole or not at all."""
    write_atomic(path, render_page(analysis))
