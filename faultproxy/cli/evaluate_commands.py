"""What `faultproxy report` and `faultproxy gate` do (their options are in cli/evaluate.py)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate import build_report, write_json
from faultproxy.evaluator.gate import (Design, GateResult, check_design, evaluate_gate, evaluate_sequential,
                                       report_section, sealed_design)
from faultproxy.evaluator.rendering import (JUnitWriter, gate_markdown, print_summary, report_markdown,
                                            sequential_section, sweep_section, write_html, write_markdown)
from faultproxy.evaluator.sweeps import analyse_sweep, is_sweep
from faultproxy.cli.evaluate import gate_options
from faultproxy.formats.errors import UsageError
from faultproxy.formats.files import no_space
from faultproxy.formats.rundir import PLAN_FILE, read_plan, run_digest

EXIT_OK = 0


def _build(run_dir: Path, **options: Any) -> dict[str, Any]:

    try:
        return build_report(run_dir, **options)
    except OSError as error:
        raise UsageError(f"{run_dir}: {error.strerror or error}") from None


def cmd_report(args: argparse.Namespace) -> int:

    run_dir: Path = args.run_dir
    out: Path = args.out or run_dir
    if not (run_dir / PLAN_FILE).is_file():
        _build(run_dir)  # raises the precise reason (missing, not a directory, no plan)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{out}: cannot create: {error.strerror or error}") from None
    sinks = [] if args.no_junit else [JUnitWriter(out / "junit.xml")]
    try:
        report = _build(run_dir, rejudge=args.rejudge, sinks=sinks, jobs=args.jobs)
    except BaseException as error:
        for sink in sinks:
            sink.abort()
        if isinstance(error, OSError):  # reading errors are _build's; this one is writing junit.xml
            raise no_space(error, out / "junit.xml") from None
        raise
    sequential = report_section(run_dir, jobs=args.jobs)  # a run made with --until-decided
    if sequential:
        report["sequential"] = sequential
    written = [out / "report.json"]
    write_json(out / "report.json", report)
    if not args.no_html:
        sections = _sweep_sections(run_dir) + ([sequential_section(sequential)] if sequential else [])
        write_html(out / "report.html", report, run_dir, sections)
        written.append(out / "report.html")
    if not args.no_junit:
        written.append(out / "junit.xml")
    markdown_only = args.markdown == "-"  # stdout holds the summary alone; the rest goes to stderr
    if args.markdown:
        write_markdown(args.markdown, report_markdown(report) + (f"\n{sequential['line']}\n" if sequential else ""))
        if not markdown_only:
            written.append(Path(args.markdown))
    stream = sys.stderr if markdown_only else sys.stdout
    if not (args.quiet or markdown_only):
        print_summary(report)
    if sequential:
        print(sequential["line"], file=stream)
    print("wrote " + ", ".join(str(p) for p in written), file=stream)
    return EXIT_OK


def _sweep_sections(run_dir: Path) -> list[str]:
    """A sweep's curves, surface and model matrix belong in its report.html too."""

    if not is_sweep(read_plan(run_dir).document):
        return []
    return [sweep_section(analyse_sweep(run_dir))]


def cmd_gate(args: argparse.Namespace) -> int:

    for what, path in (("run", args.run_dir), ("baseline", args.baseline)):
        if not path.exists():
            raise UsageError(f"{what} directory {path} does not exist")
    sealed = sealed_design(args.run_dir)
    if sealed is not None:
        return _gate_sequential(args, sealed)
    run = _build(args.run_dir, jobs=args.jobs)
    base = _build(args.baseline, jobs=args.jobs)
    result = evaluate_gate(run, base, **gate_options(args), min_pass_rate=args.min_pass_rate,
                           min_pass_hat_k=args.min_pass_hat_k, allow_incomplete=args.allow_incomplete,
                           strict_baseline=args.strict_baseline)
    code = result.exit_code(inconclusive_ok=args.inconclusive_ok)
    show_gate(args, result, code)
    return code


def _gate_sequential(args: argparse.Namespace, sealed: Design) -> int:
    """A run made with --until-decided: its looks replayed from the log, under the sealed design only."""
    extra = [option for option, given in (("--min-pass-rate", args.min_pass_rate is not None),
                                          ("--min-pass-hat-k", args.min_pass_hat_k is not None),
                                          ("--allow-incomplete", args.allow_incomplete)) if given]
    if extra:
        raise UsageError(f"{args.run_dir} is a sequential run: {', '.join(extra)} is not part of its sealed design")
    asked = dataclasses.replace(sealed, **gate_options(args, sealed), baseline_digest=run_digest(args.baseline))
    check_design(sealed, asked, str(args.run_dir))
    result = evaluate_sequential(args.run_dir, args.baseline, sealed, jobs=args.jobs).result
    code = result.exit_code(inconclusive_ok=args.inconclusive_ok)
    show_gate(args, result, code)
    return code


# --- printing -------------------------------------------------------------------------------------


def show_gate(args: argparse.Namespace, result: GateResult, code: int) -> None:
    """The gate's lines on stdout, and its Markdown summary where --markdown says (alone on stdout with "-")."""
    if args.markdown:
        write_markdown(args.markdown, gate_markdown(result, args.run_dir, args.baseline, code))
    print_gate(result, args.run_dir, args.baseline, code, sys.stderr if args.markdown == "-" else None)


def print_gate(result: GateResult, run_dir: Path, baseline: Path, code: int, stream: Any = None) -> None:
    """Every line, blocking ones first, then the verdict with its exit status."""
    stream = stream or sys.stdout
    print(f"gate: {run_dir} against baseline {baseline}", file=stream)
    order = {"ERROR": 0, "BLOCK": 1, "INCONCLUSIVE": 2, "ok": 3, "note": 4}
    for line in sorted(result.lines, key=lambda ln: (order.get(ln.verdict, 5), ln.scope, ln.task_id)):
        label = f"{line.verdict} ({line.reason})" if line.reason else line.verdict
        where = " ".join(part for part in (f"[{line.scope}]" if line.scope else "", line.task_id) if part)
        print(f"  {label}{' ' + where if where else ''}: {line.message}", file=stream)
    verdict = result.verdict
    if verdict == "ERROR":
        verdict += (f": the harness could not judge ({result.unjudged_text}); nothing compared"
                    if result.unjudged else ": nothing left to compare")
    elif verdict == "BLOCK":
        verdict += f" ({', '.join(result.reasons)})"
    elif verdict == "INCONCLUSIVE" and code == 0:
        verdict += ": too little data to rule out a drop of the margin (exit 0: --inconclusive-ok)"
    elif verdict == "INCONCLUSIVE":
        verdict += ": too little data to rule out a drop of the margin; more tasks or trials would tell"
    if result.left_out:
        verdict += f" ({result.left_out} episode(s) the harness could not judge left out: --allow-incomplete)"
    print(f"gate: {verdict}, exit {code}", file=stream)
