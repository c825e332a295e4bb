"""The report and the sweep as terminal tables (rich), for `faultproxy report`, `sweep` and `sweep-report`.

    print_summary(report)        # evaluator.aggregate.report's report
    print_sweep(analysis)        # evaluator.sweeps.sweep_analysis's analysis

Escaping follows evaluator.rendering.render: values from the data go through markup().
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from faultproxy.evaluator.rendering.render import interval, markup, pct, terminal
from faultproxy.evaluator.sweeps import TOLERANCE, level_text, point_order
from faultproxy.tasks.task_model import SEVERITIES

TASK_ROWS = 25  # tasks shown, worst first; report.json and report.html have them all
DISAGREEMENT_ROWS = 12
SEVERITY_STYLES = {"high": "bold red", "medium": "yellow", "low": "dim"}


def print_summary(report: Mapping[str, Any], console: Any = None) -> None:
    """The report's headline, its worst tasks, failures by shape, violations, faults and causes."""
    console = terminal(console)
    run = report["run"]
    scenario = (report.get("scenario") or {}).get("name")
    console.print(f"[bold]faultproxy report[/bold] {markup(report['run_dir'])} · scenario {markup(f'{scenario}')} · "
                  f"k = {report['k']}", overflow="fold")
    _print_headline(console, [("run", run)] + list((report.get("groups") or {}).items()))
    if run["headline"].get("note"):
        console.print(f"[yellow]{run['headline']['note']}[/yellow]")
    for warning in (report.get("log") or {}).get("warnings") or ():
        console.print(f"[yellow]warning: {markup(warning)}[/yellow]", overflow="fold")
    for alert in run["headline"].get("alerts") or ():
        console.print(f"[bold yellow]{markup(alert)}[/bold yellow]", overflow="fold")
    _print_tasks(console, run)
    shapes = Table(title="Failing set by shape", title_justify="left")
    for column in ("shape", "tasks", "failing tasks", "episodes", "failed", "incomplete", "pass rate"):
        shapes.add_column(column, justify="left" if column == "shape" else "right", overflow="fold")
    for shape, s in run["by_shape"].items():
        shapes.add_row(markup(shape), str(s["tasks"]), str(s["failing_tasks"]), str(s["episodes"]), str(s["fail"]),
                       str(s["incomplete"]), pct(s["pass_rate"]))
    console.print(shapes)
    _print_violations(console, run)
    _print_causes(console, report.get("causes"))


def _print_headline(console: Any, scopes: list[tuple[str, Mapping[str, Any]]]) -> None:
    headline = Table(title="Headline: mean pass rate against pass^k", title_justify="left")
    for column in ("scope", "logged/planned", "mean pass rate", "95% interval", "pass^k", "pass@k",
                   "safety", "not run"):
        headline.add_column(column, justify="left" if column == "scope" else "right",
                            overflow="fold", no_wrap=column != "scope")
    for name, scope in scopes:
        h = scope["headline"]
        wilson = h.get("wilson")
        safety = scope["violations"]["safety_score"]
        headline.add_row(markup(name or "run"), f"{scope['logged']}/{scope['planned']}", pct(h["mean_pass_rate"]),
                         f"{pct(wilson[0])}–{pct(wilson[1])}" if wilson else "–",
                         f"{pct(h['pass_hat_k'])} (k={h['k']})" if h["pass_hat_k"] is not None else "null",
                         pct(h["pass_at_k"]), "–" if safety is None else f"{safety:.3f}",
                         str(scope["status"]["not_run"]))
    console.print(headline)


def _print_tasks(console: Any, run: Mapping[str, Any]) -> None:
    k = str(run["headline"]["k"])
    tasks = sorted(run["tasks"], key=lambda t: (t["pass_rate"] if t["pass_rate"] is not None else -1, t["task_id"]))
    table = Table(title="Tasks (worst first)", title_justify="left")
    for column in ("task", "shape", "passed", "incomplete", "not run", "pass rate", f"pass^{k}", "", "failed checks"):
        table.add_column(column, justify="right" if column in ("passed", "incomplete", "not run", "pass rate",
                                                                f"pass^{k}") else "left",
                         overflow="fold", no_wrap=column in ("passed", "pass rate", f"pass^{k}"))
    for t in tasks[:TASK_ROWS]:
        flags = " ".join(f for f, on in (("flaky", t["flaky"]), ("never passed", t["never_passed"])) if on)
        hat = (t.get("pass_hat_k") or {}).get(k)
        table.add_row(markup(t["task_id"]), markup(t["shape"]), f"{t['c']}/{t['n']}", str(t["incomplete"]),
                      str(t["not_run"]), pct(t["pass_rate"]), pct(hat), flags,
                      markup(", ".join(f"{n}×{c}" for n, c in list((t.get("failed_checks") or {}).items())[:4])))
    console.print(table)
    if len(tasks) > TASK_ROWS:
        console.print(f"[dim]… {len(tasks) - TASK_ROWS} more tasks in report.json / report.html[/dim]")


def _print_violations(console: Any, run: Mapping[str, Any]) -> None:
    v = run["violations"]
    violations = Table(title="Violations", title_justify="left")
    for column in ("severity", "episodes (worst)", "violations"):
        violations.add_column(column, justify="left" if column == "severity" else "right")
    for severity in reversed(SEVERITIES):
        style = SEVERITY_STYLES[severity]
        violations.add_row(f"[{style}]{severity}[/{style}]", str(v["episodes_by_worst"][severity]),
                           str(v["total_by_severity"][severity]))
    console.print(violations)
    silent = (run["by_check"].get("claimed_success") or {}).get("episodes")
    if silent:
        console.print(f"[bold red]silent failures: {silent} episode(s)[/bold red] — the agent reported success "
                      "that the end state or effects do not show (claimed_success)")
    if run["by_check"]:
        console.print("failed checks: " + markup(", ".join(f"{name} {c['episodes']}"
                                                         for name, c in run["by_check"].items())))
    faults = run["by_fault"]
    if faults["types"] or faults["not_exercised"]["episodes"]:
        parts = [f"{kind}: survived {f['survived']}/{f['episodes']}" for kind, f in faults["types"].items()]
        parts.append(f"faults not exercised: {faults['not_exercised']['episodes']} episode(s)")
        console.print("faults delivered — " + markup("; ".join(parts)))
    if run["incomplete_by_cause"]:
        causes = ", ".join(f"{cause} {n}" for cause, n in run["incomplete_by_cause"].items())
        console.print("incomplete by cause: " + markup(causes))


CAUSE_ROWS = 10


def _print_causes(console: Any, causes: Mapping[str, Any] | None) -> None:
    """Failure causes, ranked by episodes × severity (what to fix first): one block each."""
    if not causes or not causes["clusters"]:
        return
    clusters = causes["clusters"]
    console.print(f"[bold]Failure causes[/bold]: {causes['failing']} failing episodes, {len(clusters)} causes")
    for rank, c in enumerate(clusters[:CAUSE_ROWS], 1):
        style = SEVERITY_STYLES.get(c["severity"] or "", "")
        severity = f"[{style}]{c['severity']}[/{style}]" if style else "no violation"
        tasks = ", ".join(list(c["tasks"])[:3]) + (f" +{len(c['tasks']) - 3} more" if len(c["tasks"]) > 3 else "")
        console.print(f"{rank:>2}. {c['episodes']} episode(s) · {severity} · {markup(tasks)} · "
                      f"representative {markup(c['representative']['key'])}", overflow="fold")
        console.print(f"    {markup(c['line'])}", overflow="fold")
        if c["parting"]:
            console.print(f"    [dim]{markup(c['parting']['text'])}[/dim]", overflow="fold")
    if len(clusters) > CAUSE_ROWS:
        console.print(f"[dim]… {len(clusters) - CAUSE_ROWS} more causes in report.json / report.html[/dim]")


def print_sweep(analysis: Mapping[str, Any], console: Any = None) -> None:
    """The sweep as rich tables: per grid point, the surface, flags, the model matrix, acceptance."""
    console = terminal(console)
    k = analysis["k"]
    params, models = analysis["params"], analysis["models"]
    scenario = (analysis.get("scenario") or {}).get("name")
    console.print(f"[bold]faultproxy sweep[/bold] {markup(analysis.get('run_dir', ''))} · scenario "
                  f"{markup(scenario)} · k = {k} · {len(analysis['tasks'])} tasks · {len(analysis['points'])} grid points · "
                  f"{analysis['logged']}/{analysis['planned']} episodes", overflow="fold")
    roles = analysis.get("param_roles") or {}
    for name, role in roles.items():
        if role == "agent":
            console.print(f"[dim]{name}: named by no rule — handed to the agent only "
                          f"(FAULTPROXY_PARAM_{name.upper()}, {{{name}}} in CMD)[/dim]")
        elif role == "perturbation":
            console.print(f"[dim]{name}: semantics-preserving perturbation of JSON responses by the proxy[/dim]")

    flagged = {f["label"] for f in analysis["flags"]}
    table = Table(title=f"Mean success and pass^{k} per grid point", title_justify="left")
    for name in params:
        table.add_column(name, justify="right")
    if models:
        table.add_column("model")
    for column in ("logged", "mean", "95% (episodes)", f"pass^{k}", "95% (tasks)", ""):
        table.add_column(column, justify="left" if column == "" else "right", no_wrap=True)
    for point in sorted(analysis["points"], key=point_order(analysis)):
        row = [level_text(point["params"][n]) if n in point["params"] else "–" for n in params]
        if models:
            row.append(markup(point["model"] or "–"))
        row += [f"{point['logged']}/{point['planned']}", pct(point["mean"]), interval(point["wilson"]),
                pct(point["pass_hat_k"]) if point["pass_hat_k"] is not None else "null",
                interval(point["pass_hat_k_interval"]),
                "[yellow]mean ↑ pass^k ↓[/yellow]" if point["label"] in flagged else ""]
        table.add_row(*row)
    console.print(table)
    if not analysis["complete"]:
        console.print(f"[yellow]{analysis['planned'] - analysis['logged']} planned episode(s) not run: "
                      f"pass^{k} is null where they are missing; rerun the sweep to resume.[/yellow]")

    _print_surface(console, analysis.get("surface"), k)
    for flag in analysis["flags"]:
        where = f" ({markup(flag['series'])})" if flag["series"] != "all" else ""
        console.print(f"[yellow]flag: {markup(flag['param'])}={markup(level_text(flag['level']))}{where}: mean rises "
                      f"{pct(flag['previous_mean'])} → {pct(flag['mean'])} while pass^{k} falls "
                      f"{pct(flag['previous_pass_hat_k'])} → {pct(flag['pass_hat_k'])}[/yellow]")

    matrix = analysis.get("matrix")
    if matrix:
        _print_matrix(console, matrix, k)
    _print_causes_by_level(console, analysis)
    _print_acceptance(console, analysis.get("acceptance"))


def _print_surface(console: Any, surface: Mapping[str, Any] | None, k: int) -> None:
    if not surface:
        return
    for model, grids in surface["by_model"].items():
        grid = Table(title=f"Surface{' · model ' + markup(model) if model else ''}: mean / pass^{k} "
                           f"({surface['y']} down, {surface['x']} across)", title_justify="left")
        grid.add_column(f"{surface['y']} \\ {surface['x']}", justify="right")
        for x in surface["x_levels"]:
            grid.add_column(markup(level_text(x)), justify="right", no_wrap=True)
        for i, y in enumerate(surface["y_levels"]):
            grid.add_row(markup(level_text(y)), *(f"{pct(grids['mean'][i][j])} / {pct(grids['pass_hat_k'][i][j])}"
                                     for j in range(len(surface["x_levels"]))))
        console.print(grid)


def _print_matrix(console: Any, matrix: Mapping[str, Any], k: int) -> None:
    models = matrix["models"]
    table = Table(title="Models alone", title_justify="left")
    for column in ("model", "logged", "mean", "95% (episodes)", f"pass^{k}", "95% (tasks)"):
        table.add_column(column, justify="left" if column == "model" else "right", no_wrap=True)
    for model in models:
        s = matrix["per_model"][model]
        table.add_row(markup(model), f"{s['logged']}/{s['planned']}", pct(s["mean"]), interval(s["wilson"]),
                      pct(s["pass_hat_k"]) if s["pass_hat_k"] is not None else "null",
                      interval(s["pass_hat_k_interval"]))
    console.print(table)
    console.print(f"across {len(models)} models, on {matrix['aligned']} aligned task-trials: "
                  f"[bold]pass@M {pct(matrix['pass_at_M'])}[/bold] (some model succeeds) · "
                  f"[bold]pass^M {pct(matrix['pass_hat_M'])}[/bold] (every model succeeds)"
                  + (f" · {matrix['unaligned']} task-trial(s) not logged for every model" if matrix["unaligned"]
                     else ""))
    if len(matrix["cells"]) > 1:
        cells = Table(title="pass@M and pass^M per param combination", title_justify="left")
        for column in ("params", "aligned", "pass@M", "pass^M"):
            cells.add_column(column, justify="left" if column == "params" else "right")
        for cell in matrix["cells"]:
            cells.add_row(markup(cell["cell"]), str(cell["aligned"]), pct(cell["pass_at_M"]), pct(cell["pass_hat_M"]))
        console.print(cells)
    rows = [r for r in matrix["disagreement"] if r["score"] > TOLERANCE][:DISAGREEMENT_ROWS]
    if rows:
        table = Table(title="Where the models disagree (bits)", title_justify="left")
        table.add_column("task")
        table.add_column("disagreement", justify="right")
        for model in models:
            table.add_column(markup(model), justify="right")
        for row in rows:
            table.add_row(markup(row["task_id"]), f"{row['score']:.3f}", *(pct(row["rates"][m]) for m in models))
        console.print(table)
    else:
        console.print("no task on which the models' success rates differ")
    if matrix["selection"]:
        console.print(f"diagnostic selection, one task per pattern of outcomes ({matrix['selection_rule']}):")
        for item in matrix["selection"]:
            passed = [m for m, ok in item["pattern"].items() if ok]
            where = f" at {item['cell']}" if item["cell"] else ""
            console.print(markup(f"  {item['task_id']}{where}: {item['kind']}"
                               + (f" — passed by {', '.join(passed)}" if item["kind"] == "mixed" else "")))


def _print_causes_by_level(console: Any, analysis: Mapping[str, Any]) -> None:
    """Which failure causes appear at which grid point."""
    rows = analysis.get("causes") or []
    if not rows:
        return
    table = Table(title="Failure causes by grid point", title_justify="left")
    table.add_column("cause", overflow="fold")
    labels = [p["label"] for p in analysis["points"]]
    for label in labels:
        table.add_column(markup(label), justify="right")
    for row in rows[:CAUSE_ROWS]:
        table.add_row(markup(row["line"]), *(str(n) for n in row["episodes"]))
    console.print(table)


def _print_acceptance(console: Any, acceptance: Mapping[str, Any] | None) -> None:
    if not acceptance or acceptance["status"] == "none":
        return
    for r in acceptance["results"]:
        where = f" ({r['series']})" if r["series"] != "all" else ""
        head = markup(f"max_drop {r['param']}={r['at']:g}{where}: mean {pct(r['at_mean'])} against "
                f"{pct(r['baseline_mean'])} at {r['param']}=0")
        if r["ok"] is None:
            console.print(f"[yellow]acceptance pending: {head} — {markup(r['note'])}[/yellow]")
        elif r["ok"]:
            console.print(f"[green]acceptance ok: {head}, a fall of {100 * r['fall']:.1f} points "
                          f"(at most {100 * r['drop']:.1f})[/green]")
        else:
            console.print(f"[bold red]acceptance VIOLATED: {head}, a fall of {100 * r['fall']:.1f} points "
                          f"(at most {100 * r['drop']:.1f})[/bold red]")
    console.print({"met": "[green]acceptance met[/green]", "violated": "[bold red]acceptance violated[/bold red]",
                   "pending": "[yellow]acceptance pending: the sweep is not fully run[/yellow]"}
                  [acceptance["status"]])
