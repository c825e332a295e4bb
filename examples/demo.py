"""`make demo`: faultproxy on the demo world, start to finish, with no API key.

Starts the shop and the scripted model on free loopback ports, runs the naive and the careful
agent through `faultproxy run` under scenarios that matter and in a conversation where the user
must agree before an order is cancelled, prints each report summary, and stops everything it
started. Every command it runs is printed, so you can run it yourself.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from examples.world import world_in_thread

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "demo"
AGENTS = ("naive", "careful")
# (scenario, tasks, k): small enough to finish in about two minutes on 2 cores.
SECTIONS = [
    ("response_lost", "refund_order_1001,pay_order_1004", 8,
     "The shop commits the first refund or payment, but the response is lost."),
    ("rate_limit", "order_status_1002", 4, "The model API answers 429 now and then."),
    ("stale_state", "refund_order_1001", 2, "Order reads come back as they were earlier in the episode."),
    ("examples/orders_schema_drift.yaml", "order_status_1002", 4, "Order reads rename the fields the agent reads."),
]

console = Console(width=120)


def faultproxy(*args: str) -> int:
    console.print(f"[dim]$ faultproxy {shlex.join(args)}[/]")
    return subprocess.call([sys.executable, "-m", "faultproxy", *args], cwd=ROOT)


def run_section(scenario: str, tasks: str, k: int, what: str, summary: Table) -> None:
    """`scenario`: a bundled name, or the path of one of the demo's own (its name: the file's stem)."""
    name = Path(scenario).stem
    console.print(Rule(f"{name}: {what}"))
    for agent in AGENTS:
        out = (RUNS / f"{name}-{agent}").relative_to(ROOT)
        faultproxy("run", "--scenario", scenario, "--tasks", "examples/tasks.yaml", "--only", tasks, "--k", str(k),
                   "--parallel", "4", "--out", str(out), "--", "python", f"examples/{agent}_agent.py")
        faultproxy("report", "--quiet", str(out))
        summary.add_row(name, agent, *headline(ROOT / out / "report.json"))


def chat_section(summary: Table) -> None:
    """A conversation: the user is asked before an order is cancelled, and says yes, or no."""
    console.print(Rule("conversation: cancelling an order needs the user's yes first (--chat stdio)"))
    for agent in AGENTS:
        out = f"runs/demo/chat-{agent}"
        faultproxy("run", "--scenario", "observe", "--tasks", "examples/tasks_chat.yaml", "--chat", "stdio",
                   "--parallel", "2", "--out", out, "--", "python", f"examples/{agent}_agent.py", "--chat")
        faultproxy("report", "--quiet", out)
        summary.add_row("conversation", agent, *headline(ROOT / out / "report.json"))


def sweep_section() -> None:
    """How fast each agent degrades as lost responses become more likely: a small lambda sweep."""
    console.print(Rule("sweep: response_lost at lambda = 0, 0.5, 1"))
    for agent in AGENTS:
        faultproxy("sweep", "--scenario", "response_lost", "--param", "lambda=0,0.5,1", "--tasks", "examples/tasks.yaml",
                   "--only", "refund_order_1001,pay_order_1004", "--k", "2", "--parallel", "4",
                   "--out", f"runs/demo/sweep-{agent}", "--", "python", f"examples/{agent}_agent.py")


STORE = RUNS / "replay_store"


def freeze_section() -> None:
    console.print(Rule("freeze: one regression test per cause of the naive agent's failures"))
    faultproxy("freeze", str((RUNS / "response_lost-naive").relative_to(ROOT)), "--representatives",
               "--to", str(STORE.relative_to(ROOT)))


def replay_section() -> None:
    entry = sorted(p for p in STORE.iterdir() if p.is_dir())[0].relative_to(ROOT)
    console.print(Rule(f"replay {entry.name} with every demo server stopped"))
    console.print("The naive agent fails the same way, from the recording alone:")
    faultproxy("replay", str(entry), "--", "python", "examples/naive_agent.py")
    console.print("The careful agent, against the naive agent's frozen failure, passes "
                  "(so replay reports that the entry's expected failure did not happen):")
    faultproxy("replay", str(entry), "--", "python", "examples/careful_agent.py")


def headline(report_file: Path) -> list[str]:
    """What a user needs first: the mean against pass^k, and the irreversible damage done."""
    run = json.loads(report_file.read_text())["run"]
    numbers = run["headline"]
    high = run["violations"]["total_by_severity"].get("high", 0)
    failed = ", ".join(f"{name} {entry['episodes']}" for name, entry in run["by_check"].items()) or "-"
    return [f"{numbers['mean_pass_rate']:.0%}", f"{numbers['pass_hat_k']:.0%} (k={numbers['k']})",
            f"[red]{high}[/]" if high else "0", failed]


def main() -> int:
    started = time.monotonic()
    shutil.rmtree(RUNS, ignore_errors=True)  # a fresh world each time: resuming old runs would show nothing new
    with world_in_thread(latency_ms=5) as world:
        os.environ |= {name: value for name, value in world.env().items() if name != "SHOP_URL"}
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        console.print(f"demo world: shop {world.shop_url}, model {world.model_url}")
        summary = Table(title="naive against careful: the mean hides what pass^k shows")
        for column in ("scenario", "agent", "mean pass rate", "pass^k", "high-severity violations", "failed checks"):
            summary.add_column(column)
        for section in SECTIONS:
            run_section(*section, summary)
        chat_section(summary)
        console.print(Rule())
        console.print(summary)
        sweep_section()
        freeze_section()
    replay_section()  # the world is stopped now: replay needs no shop and no model
    console.print(Rule())
    console.print(f"Reports are in {RUNS.relative_to(ROOT)}/*/report.html and sweep-*/sweep.html; "
                  f"the demo took {time.monotonic() - started:.0f} s and stopped everything it started.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
