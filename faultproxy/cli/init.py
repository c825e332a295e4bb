"""`faultproxy init RUN --to DIR`: a starting point (tasks file, scenarios, README) from what an
observe run saw; its options. The proposals are the evaluator's (evaluator.proposals.starter,
evaluator.proposals.init_files); cli/init_commands.py runs them and says what was written, loaded only
when init runs (the handler is named "module:function", as cli/evaluate.py's are).

    faultproxy run --scenario observe --k 1 --out runs/observe -- python my_agent.py
    faultproxy init runs/observe --to faultproxy/

cli/main.py and cli/entry.py call `register(commands)`; it reads files only, so entry.py starts it
without loading the proxy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faultproxy.formats.paths import folder_option


def register(commands: Any) -> None:
    init = commands.add_parser(
        "init", help="Write a tasks file, scenarios and a README from what an observe run saw.",
        description="From a run's traces (typically `faultproxy run --scenario observe --k 1`), write DIR/tasks.yaml "
                    "(one task per task of the run, proposals marked), DIR/scenarios/ (one scenario per fault family "
                    "the traffic can meet, matching the endpoints seen) and DIR/README.md. Never overwrites a file.")
    init.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    init.add_argument("--to", type=folder_option, required=True, metavar="DIR", help="Where to write the files.")
    init.set_defaults(handler="faultproxy.cli.init_commands:cmd_init")
