"""`faultproxy run` (and `sweep`): turn command-line arguments into a run, and say how it went."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from faultproxy.cli.options import proxy_params, run_options
from faultproxy.formats.errors import UsageError
from faultproxy.formats.logs import configure_logging
from faultproxy.proxy.server import ProxyStartError
from faultproxy.runner.options import RunOptions, RunResult
from faultproxy.runner.plan import GridPoint
from faultproxy.runner.run import resume_command, run
from faultproxy.runner.secrets import run_redactor
from faultproxy.scenarios import load_scenario


def run_and_tell(options: RunOptions) -> RunResult:
    """Run with fault events logged to the run directory (the terminal has the progress bar)."""
    log_file = options.out / "faultproxy.log"
    try:
        options.out.mkdir(parents=True, exist_ok=True)
        configure_logging(json_lines=True, file=log_file.open("a"), redactor=run_redactor(options))
    except OSError as error:
        raise UsageError(f"--out {options.out}: cannot write the run directory there "
                         f"({error.strerror or error})") from None
    try:
        result = run(options)
    except ProxyStartError as error:
        raise proxy_start_problem(error) from None
    if result.errors:
        more = f" (and {len(result.errors) - 1} more; see {log_file})" if len(result.errors) > 1 else ""
        print(f"not run, will run on resume: {result.errors[0]}{more}", file=sys.stderr)
    print(f"{options.out}: {result.logged}/{result.planned} episodes logged "
          f"({result.counts['pass']} pass, {result.counts['fail']} fail, {result.counts['incomplete']} incomplete)")
    if result.interrupted:
        print(f"interrupted; resume with: {resume_command()}")
    return result


def proxy_start_problem(error: ProxyStartError) -> UsageError:
    """The proxy did not start: say why, and suggest another port only when the port was the problem."""
    text = str(error)  # the listening error's text is all the proxy passes on
    port_problem = any(f"[Errno {number}]" in text or os.strerror(number).lower() in text.lower()
                       for number in (errno.EADDRINUSE, errno.EACCES))
    return UsageError(f"{text}; choose another port" if port_problem else text)


def run_command(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, proxy_params(args))
    options = run_options(args, scenario, [GridPoint(model=args.model)], Path("runs") / scenario.name)
    return 130 if run_and_tell(options).interrupted else 0
