"""`faultproxy report` and `faultproxy gate`: the evaluator's commands, their options.

    register(subparsers)          # in cli/main.py's build_parser and cli/entry.py's

Each subcommand's `handler` names its function in cli/evaluate_commands.py ("module:function"),
which cli/dispatch.py loads only for the command that runs: `faultproxy report --help` does not
load the evaluator. Bad input (a missing or unreadable run directory, a damaged log) raises a
UserError, which cli/dispatch.py prints in one line with exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultproxy.evaluator.gate import ALPHA, MARGIN
from faultproxy.formats.paths import folder_option

if TYPE_CHECKING:  # the evaluator's report machinery loads only when a command runs
    from faultproxy.evaluator.gate import Design

COMMANDS = "faultproxy.cli.evaluate_commands"


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
    add_markdown_option(report)
    report.set_defaults(handler=f"{COMMANDS}:cmd_report")

    gate = subparsers.add_parser(
        "gate", help="PASS (0), BLOCK (1), INCONCLUSIVE (3) or ERROR (4): did a run regress against a baseline run?",
        description="Compare RUN_DIR with BASELINE_DIR: an exact stratified test over the common tasks and a "
                    "one-sided Fisher test per task, Holm-corrected together, so an unchanged agent is blocked "
                    "with probability at most --alpha; the safety ceiling --max-high. PASS needs the interval of "
                    "the change in mean pass rate to rule out a drop of --margin. A run made with --until-decided "
                    "is gated by replaying its looks under its sealed design. A sweep is compared per grid "
                    "point. Exit 0: PASS; 1: BLOCK; 2: bad input; 3: INCONCLUSIVE (0 with --inconclusive-ok); 4: ERROR, "
                    "episodes the harness could not judge on either side (--allow-incomplete leaves them out).")
    gate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    gate.add_argument("--baseline", type=Path, required=True, metavar="BASELINE_DIR")
    add_design_options(gate)
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
    add_markdown_option(gate)
    gate.set_defaults(handler=f"{COMMANDS}:cmd_gate")


def add_markdown_option(parser: Any) -> None:
    """--markdown [FILE]: the summary a CI page shows (e.g. $GITHUB_STEP_SUMMARY), for report, gate and replay."""
    parser.add_argument("--markdown", nargs="?", const="-", metavar="FILE",
                        help="Also write a Markdown summary (under 64 KiB, redacted) to FILE; alone, print it "
                             "instead of the terminal text.")


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


def add_design_options(parser: Any) -> None:
    """--alpha, --margin and --max-high, for `gate` and for `run`/`sweep --until-decided`. Unset,
    they are a sequential run's sealed values, else ALPHA, MARGIN and 0 (gate_options)."""
    parser.add_argument("--alpha", type=_alpha,
                        help=f"Family-wise error rate: the chance of blocking an unchanged agent (default {ALPHA:g}).")
    parser.add_argument("--margin", type=_margin, metavar="D",
                        help=f"The smallest drop in mean pass rate you care about; PASS needs the interval to rule it "
                             f"out (default {MARGIN:g}).")
    parser.add_argument("--max-high", type=_count, metavar="N",
                        help="Block when the run has more than N high-severity violations (default 0).")


def gate_options(args: argparse.Namespace, sealed: Design | None = None) -> dict[str, Any]:
    """alpha, margin and max_high as given, else the sealed design's, else the defaults."""
    defaults = {"alpha": ALPHA, "margin": MARGIN, "max_high": 0}
    return {name: value if (value := getattr(args, name)) is not None
            else getattr(sealed, name) if sealed else defaults[name] for name in defaults}
