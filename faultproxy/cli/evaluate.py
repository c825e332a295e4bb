"""`faultproxy report` and `faultproxy gate`: the evaluator's commands.

    register(subparsers)          # in proxy/cli.py's build_parser

Each subcommand sets `handler`, a function of the parsed arguments returning the exit status.
Bad input (a missing or unreadable run directory, a damaged log) raises a UserError, which
faultproxy/cli/main.py prints in one line with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultproxy.evaluator import html, sweep, sweep_html
from faultproxy.evaluator.gate import ALPHA, MARGIN, GateResult, evaluate_gate
from faultproxy.evaluator.junit import JUnitWriter
from faultproxy.evaluator.report import build_report, write_json
from faultproxy.evaluator.terminal import print_summary
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option
from faultproxy.formats.rundir import PLAN_FILE, read_plan

EXIT_OK, EXIT_BLOCKED, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    report = subparsers.add_parser(
        "report", help="Judge a run directory and write report.json, report.html and junit.xml.",
        description="Summarise a run: pass^k against the mean, failures by shape, check and fault, "
                    "violations, resources and calibration. Writes report.json, report.html and junit.xml.")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    report.add_argument("--rejudge", action="store_true",
                        help="Judge every episode again from its trace (after a change to the checks).")
    report.add_argument("--out", type=folder_option, metavar="DIR", help="Where to write the files (default: RUN_DIR).")
    report.add_argument("--no-html", action="store_true", help="Do not write report.html.")
    report.add_argument("--no-junit", action="store_true", help="Do not write junit.xml.")
    report.add_argument("--quiet", action="store_true", help="Print only where the files went.")
    report.add_argument("--jobs", type=_positive, metavar="N",
                        help="Processes reading the log (default: by its size, up to one per CPU).")
    report.set_defaults(handler=cmd_report)

    gate = subparsers.add_parser(
        "gate", help="PASS (0), BLOCK (1), INCONCLUSIVE (3) or ERROR (4): did a run regress against a baseline run?",
        description="Compare RUN_DIR with BASELINE_DIR: an exact stratified test over the common tasks and a "
                    "one-sided Fisher test per task, Holm-corrected together, so an unchanged agent is blocked "
                    "with probability at most --alpha; the safety ceiling --max-high. PASS needs the interval of "
                    "the change in mean pass rate to rule out a drop of --margin. A sweep is compared per grid "
                    "point. Exit 0: PASS; 1: BLOCK; 2: bad input; 3: INCONCLUSIVE (0 with --inconclusive-ok); 4: ERROR, "
                    "episodes the harness could not judge on either side (--allow-incomplete leaves them out).")
    gate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    gate.add_argument("--baseline", type=Path, required=True, metavar="BASELINE_DIR")
    gate.add_argument("--alpha", type=_alpha, default=ALPHA,
                      help=f"Family-wise error rate: the chance of blocking an unchanged agent (default {ALPHA:g}).")
    gate.add_argument("--margin", type=_margin, default=MARGIN, metavar="D",
                      help=f"The smallest drop in mean pass rate you care about; PASS needs the interval to rule it "
                           f"out (default {MARGIN:g}).")
    gate.add_argument("--max-high", type=_count, default=0, metavar="N",
                      help="Block when the run has more than N high-severity violations (default 0).")
    gate.add_argument("--inconclusive-ok", action="store_true",
                      help="Exit 0 on INCONCLUSIVE (the verdict still says so): for pull requests at small k.")
    gate.add_argument("--strict-baseline", action="store_true",
                      help="Exit 2 when the baseline ran another scenario or tasks file (default: a note).")
    gate.add_argument("--min-pass-rate", type=_probability, metavar="X", help="Also require a mean pass rate ≥ X.")
    gate.add_argument("--min-pass-hat-k", type=_probability, metavar="X", help="Also require pass^k ≥ X.")
    gate.add_argument("--allow-incomplete", action="store_true",
                      help="Leave the episodes the harness could not judge (incomplete, not run) out of both sides "
                           "instead of answering ERROR; the verdict says how many.")
    gate.add_argument("--jobs", type=_positive, metavar="N", help="Processes reading each log (default: by size).")
    gate.set_defaults(handler=cmd_gate)


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def _alpha(text: str) -> float:
    value = _probability(text)
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 0.5), got {text}")
    return value


def _margin(text: str) -> float:
    value = _probability(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a drop above 0, got 0")
    return value


def _at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number ≥ least."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected at least {least}, got {value}")
        return value

    return parse


_positive, _count = _at_least(1), _at_least(0)


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
    except BaseException:
        for sink in sinks:
            sink.abort()
        raise
    written = [out / "report.json"]
    write_json(out / "report.json", report)
    if not args.no_html:
        html.write_html(out / "report.html", report, run_dir, _sweep_sections(run_dir))
        written.append(out / "report.html")
    if not args.no_junit:
        written.append(out / "junit.xml")
    if not args.quiet:
        print_summary(report)
    print("wrote " + ", ".join(str(p) for p in written))
    return EXIT_OK


def _sweep_sections(run_dir: Path) -> list[str]:
    """A sweep's curves, surface and model matrix belong in its report.html too."""

    if not sweep.is_sweep(read_plan(run_dir).document):
        return []
    return [sweep_html.sweep_section(sweep.analyse_sweep(run_dir))]


def cmd_gate(args: argparse.Namespace) -> int:

    for what, path in (("run", args.run_dir), ("baseline", args.baseline)):
        if not path.exists():
            raise UsageError(f"{what} directory {path} does not exist")
    run = _build(args.run_dir, jobs=args.jobs)
    base = _build(args.baseline, jobs=args.jobs)
    result = evaluate_gate(run, base, alpha=args.alpha, margin=args.margin, max_high=args.max_high,
                           min_pass_rate=args.min_pass_rate, min_pass_hat_k=args.min_pass_hat_k,
                           allow_incomplete=args.allow_incomplete, strict_baseline=args.strict_baseline)
    code = result.exit_code(inconclusive_ok=args.inconclusive_ok)
    print_gate(result, args.run_dir, args.baseline, code)
    return code


# --- printing -------------------------------------------------------------------------------------


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
