"""Summaries a CI page shows well (GitHub's step summary, a pull-request comment): Markdown, no HTML.

    report_markdown(report)                         # evaluator.aggregate.report's report
    gate_markdown(result, run_dir, baseline, code)  # evaluator.gate's GateResult
    replay_markdown(results)                        # replay results as `faultproxy replay --json` writes them
    write_markdown(target, text)                    # "-" for stdout; redacted, at most LIMIT bytes

Values from the data are escaped (a task id holding `|` or `<script>` stays text in a table), and
everything passes through the redactor before it is written, like every other writer's output.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.gate import GateResult
from faultproxy.evaluator.rendering.render import interval, pct
from faultproxy.formats.files import write_whole
from faultproxy.formats.redact import Redactor

LIMIT = 64 * 1024  # GitHub refuses a step summary above 1 MiB; a page shows a small one whole
CAUSE_ROWS = 5
TASK_ROWS = 10
GATE_ROWS = 20
TRUNCATED = "\n_… summary truncated at {limit} KiB: the full report is in report.json / the command's output._\n"
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")  # what is special mid-line (a value never starts a line)
GATE_ORDER = {"ERROR": 0, "BLOCK": 1, "INCONCLUSIVE": 2, "ok": 3, "note": 4}


def text(value: Any) -> str:
    """A value from the data as Markdown text: special characters escaped, one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str("" if value is None else value).split()))


def code_span(value: Any) -> str:
    """A value (a path) as a code span: nothing inside is escaped, so it holds no backtick."""
    return "`" + " ".join(str(value).replace("`", "'").split()) + "`"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table; cells are escaped here."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(text(cell) for cell in row) + " |" for row in rows]
    return lines


def report_markdown(report: Mapping[str, Any]) -> str:
    """The headline (mean, pass^k, incomplete by cause), the worst tasks, the top failure causes with their advice."""
    run = report["run"]
    head = run["headline"]
    scenario = (report.get("scenario") or {}).get("name")
    k = head["k"]
    lines = [f"## faultproxy report: {text(scenario)}", "",
             f"{code_span(report['run_dir'])} · k = {k} · {run['logged']}/{run['planned']} episodes", ""]
    hat = f"{pct(head['pass_hat_k'])}" if head["pass_hat_k"] is not None else "null"
    lines += table(("mean pass rate", "95% interval", f"pass^{k}", f"pass@{k}", "incomplete by cause", "not run"),
                   [(pct(head["mean_pass_rate"]), interval(head.get("wilson")), hat, pct(head["pass_at_k"]),
                     _counts(run["incomplete_by_cause"]) or "none", run["status"]["not_run"])])
    for note in ([head["note"]] if head.get("note") else []) + list(head.get("alerts") or ()):
        lines += ["", f"> **{text(note)}**"]
    tasks = sorted(run["tasks"], key=lambda t: (t["pass_rate"] if t["pass_rate"] is not None else -1, t["task_id"]))
    failing = [t for t in tasks if t["c"] < t["n"] or t["incomplete"] or t["not_run"]]
    if failing:
        lines += ["", "### Tasks that did not always pass (worst first)", ""]
        lines += table(("task", "shape", "passed", "incomplete", f"pass^{k}", "failed checks"),
                       [(t["task_id"], t["shape"], f"{t['c']}/{t['n']}", t["incomplete"],
                         pct((t.get("pass_hat_k") or {}).get(str(k))),
                         ", ".join(f"{n}×{c}" for n, c in (t.get("failed_checks") or {}).items()) or "-")
                        for t in failing[:TASK_ROWS]])
        if len(failing) > TASK_ROWS:
            lines.append(f"\n_… {len(failing) - TASK_ROWS} more in report.json_")
    lines += _causes(report.get("causes"))
    return "\n".join(lines) + "\n"


def _causes(causes: Mapping[str, Any] | None) -> list[str]:
    if not causes or not causes["clusters"]:
        return []
    clusters = causes["clusters"]
    lines = ["", f"### Top failure causes ({len(clusters)} in all, {causes['failing']} failing episodes)", ""]
    for rank, cause in enumerate(clusters[:CAUSE_ROWS], 1):
        tasks = ", ".join(list(cause["tasks"])[:3]) + (f" +{len(cause['tasks']) - 3} more" if len(cause["tasks"]) > 3
                                                       else "")
        lines.append(f"{rank}. **{cause['episodes']} episode(s)**, {text(cause['severity'] or 'no violation')}, "
                     f"{text(tasks)}: {text(cause['line'])}")
    return lines


def gate_markdown(result: GateResult, run_dir: Path | str, baseline: Path | str, code: int) -> str:
    """The verdict with its reason and exit status, then the lines that decided it (blocking ones first)."""
    reason = ", ".join(result.reasons) if result.verdict == "BLOCK" else (
        result.unjudged_text if result.verdict == "ERROR" else "")
    lines = [f"## faultproxy gate: **{result.verdict}**{' (' + text(reason) + ')' if reason else ''}, exit {code}", "",
             f"{code_span(run_dir)} against baseline {code_span(baseline)}", ""]
    if result.left_out:
        lines += [f"{result.left_out} episode(s) the harness could not judge left out (--allow-incomplete)", ""]
    ordered = sorted(result.lines, key=lambda ln: (GATE_ORDER.get(ln.verdict, 5), ln.scope, ln.task_id))
    lines += table(("verdict", "scope", "task", "why"),
                   [(f"{ln.verdict} ({ln.reason})" if ln.reason else ln.verdict, ln.scope or "run", ln.task_id or "-",
                     ln.message) for ln in ordered[:GATE_ROWS]])
    if len(ordered) > GATE_ROWS:
        lines.append(f"\n_… {len(ordered) - GATE_ROWS} more lines in the command's output_")
    return "\n".join(lines) + "\n"


def replay_markdown(results: Sequence[Mapping[str, Any]]) -> str:
    """One row per replayed entry (expected, shown, result) and why each mismatch is one."""
    ok = sum(r["meets_expectation"] for r in results)
    refused = sum(len(r["blocked_connections"]) for r in results)
    lines = [f"## faultproxy replay: {ok}/{len(results)} as expected", "",
             f"upstream connections attempted: {refused} (none opened)", ""]
    lines += table(("entry", "expect", "replay", "failed checks", "result"),
                   [(r["name"], r["expect"] + (f" ({', '.join(r['expect_failed'])})" if r["expect_failed"] else ""),
                     r["status"], ", ".join(r["failed"]) or "-", "ok" if r["meets_expectation"] else "MISMATCH")
                    for r in results])
    mismatches = [r for r in results if not r["meets_expectation"]]
    if mismatches:
        lines += ["", "### Mismatches", ""]
        lines += [f"- **{text(r['name'])}**: {text(r['why'])}" for r in mismatches]
    return "\n".join(lines) + "\n"


def bounded(markdown: str, limit: int = LIMIT) -> str:
    """`markdown` whole when it fits in `limit` bytes, else cut at a line end with a line saying so."""
    data = markdown.encode("utf-8")
    if len(data) <= limit:
        return markdown
    note = TRUNCATED.format(limit=limit // 1024)
    cut = data[:limit - len(note.encode("utf-8"))].decode("utf-8", errors="ignore")
    return cut[:cut.rfind("\n") + 1] + note


def write_markdown(target: Path | str, markdown: str, redactor: Redactor | None = None) -> None:
    """The summary, redacted and bounded, to `target` ("-": stdout)."""
    safe = bounded((redactor or Redactor()).text(markdown))
    if str(target) == "-":
        sys.stdout.write(safe)
        sys.stdout.flush()
    else:
        write_whole(Path(target), safe)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in counts.items())
