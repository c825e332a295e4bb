"""Agents that are Python functions: `run(episode) -> bool | dict`, repeated k times per task.

    tasks = task_set_from_json([{"id": "refund", "prompt": "Refund order 1001"}])
    result = run_function(my_agent, tasks, k=8, scenario="rate_limit")
    result.pass_hat_k, result.mean_pass_rate  # as report.json's headline names them

The function gets an `Episode` with the proxy URL and CA bundle to route its own clients
through, and the task's `env` (what a subprocess agent would find in its environment, e.g. a
tool's per-episode URL); everything else (the log, traces, judging, resume) is the runner's,
unchanged. A returned bool is the verdict's outcome; a dict is the agent's output, judged like
FAULTPROXY_OUTPUT. `runner.replay_agents.replay_function` replays frozen episodes with the same function.

With `chat=True` the tasks are conversations with their `user:` (docs/conversations.md): the
function is called once per user turn, `agent(episode, messages)`, with the conversation so far
([{"role": "user" | "assistant", "content"}], the user's turn last), and returns its next turn:
text, a dict {"content", "escalate", ...}, or None when it has nothing more to say.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from faultproxy.evaluator.aggregate import build_report
from faultproxy.formats.rundir import FUNCTION_PREFIX, read_run
from faultproxy.otel import OtelExport
from faultproxy.runner.agent import AgentEnvironment, AgentResult
from faultproxy.runner.chat import Conversation, OpenChannel, episode_conversation
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.plan import PlannedEpisode
from faultproxy.runner.run_loop import run
from faultproxy.runner.run_options import RunOptions
from faultproxy.scenarios import Scenario, load_scenario
from faultproxy.tasks.task_model import TaskSet


@dataclass(frozen=True)
class Episode:
    """What a function agent gets for one episode: the task variant it is to do (`prompt`,
    `state`, `seed`), and `proxy_url` and `ca_bundle` to route its own clients through."""

    key: str
    task_id: str
    variant: int
    prompt: str
    state: str | None
    seed: int
    proxy_url: str
    ca_bundle: Path
    task: dict
    env: Mapping[str, str] = field(default_factory=dict)  # the task's env, expanded for this episode


@dataclass(frozen=True)
class FunctionRunResult:
    """The run's headline figures, named and computed as in its report (report.json's `headline`)."""

    run_dir: Path
    k: int  # the k of pass_hat_k and pass_at_k: the run's k, or fewer if fewer trials were logged
    mean_pass_rate: float | None  # passed trials / logged trials; None when nothing was logged
    pass_hat_k: float | None  # pass^k per task, C(c,k)/C(n,k), averaged; None while episodes are not run
    pass_at_k: float | None  # pass@k per task, 1 − C(n−c,k)/C(n,k), averaged; None likewise
    per_task: dict[str, list[str]]  # task id -> episode statuses, in the order they were logged


AgentFunction = Callable[[Episode], "bool | dict"]
ChatFunction = Callable[[Episode, list[dict]], "str | dict | None"]  # (episode, conversation so far) -> next turn
FUNCTION_CHAT = "function"  # the plan's `chat` for a function agent's conversations


class FunctionChannel:
    """A runner.chat.Channel to a function agent: each user turn calls it in a worker thread with
    the conversation so far; what it returns is its turn."""

    def __init__(self, agent: ChatFunction, episode: Episode) -> None:
        self.agent, self.episode = agent, episode
        self.messages: list[dict] = []
        self.pending: asyncio.Task | None = None

    async def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.pending = asyncio.create_task(asyncio.to_thread(self.agent, self.episode, list(self.messages)))

    async def hear(self) -> str | None:
        pending, self.pending = self.pending, None
        turn = None if pending is None else await pending  # the agent's exception is its crash
        if not isinstance(turn, (str, dict)):
            return None
        self.messages.append({"role": "assistant", "content": str(turn if isinstance(turn, str) else turn.get("content"))})
        return turn if isinstance(turn, str) else json.dumps(turn)

    async def leave(self) -> None:
        """Nothing to close: the function is simply not called again."""


def function_channel(agent: ChatFunction, episode: Episode) -> tuple[OpenChannel, bool]:
    """A function agent's channel, as runner.chat.episode_conversation takes it (not over stdio)."""
    return lambda _: FunctionChannel(agent, episode), False


def function_command(agent: AgentFunction) -> list[str]:
    """The command logged for a function agent: its dotted name, which replay checks against."""
    return [f"{FUNCTION_PREFIX}{agent.__module__}.{getattr(agent, '__qualname__', repr(agent))}"]


def run_function(
    agent: AgentFunction,
    tasks: TaskSet,
    k: int = 8,
    scenario: Scenario | str = "rate_limit",
    out: Path = Path("runs/in-process"),
    parallel: int = 1,
    export: OtelExport | None = None,
    chat: bool = False,
) -> FunctionRunResult:
    """Run `agent` k times per task behind a proxy playing `scenario`, in this process, `parallel`
    episodes at once; the run directory `out` is a normal one (report, freeze and resume work).
    `export` gets each episode as OpenTelemetry spans (the caller closes it). `chat`: the tasks
    are conversations and `agent` a ChatFunction (see the module docstring)."""
    scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    options = RunOptions(scenario=scenario, tasks=tasks, command=function_command(agent),
                         out=out, k=k, parallel=parallel, show_progress=False, chat=FUNCTION_CHAT if chat else None)
    run(options, runner_class=_function_runner(agent), export=export)
    return summarize(out)


def _function_runner(agent: AgentFunction | ChatFunction) -> type[EpisodeRunner]:
    class FunctionRunner(EpisodeRunner):
        rules_expect_traffic = False

        async def launch(self, episode: PlannedEpisode, environment: AgentEnvironment) -> AgentResult:
            given = Episode(
                key=episode.key, task_id=episode.task.id, variant=episode.variant.index,
                prompt=episode.variant.prompt, state=episode.variant.state, seed=episode.variant.seed,
                proxy_url=environment.proxy_url, ca_bundle=environment.ca_bundle, task=episode.task.to_json(),
                env=dict(environment.extra or {}),
            )
            wall_s = episode.task.budgets.wall_s or self.options.budget_s
            if self.options.chat:
                scenario = self._scenario_for(episode.point) or self.options.scenario
                conversation = episode_conversation(function_channel(agent, given), episode.task,
                                                    episode.variant.prompt, self.proxy, episode.key, episode.key,
                                                    scenario, episode.variant.seed, episode.variant.index)
                return await call_conversation(conversation, wall_s)
            return await call_agent(agent, given, wall_s)

    return FunctionRunner


async def call_conversation(conversation: Conversation, wall_s: float | None) -> AgentResult:
    """A function agent's conversation within `wall_s`: its end, crash or overrun as a result."""
    started = time.monotonic()
    try:
        chat = await asyncio.wait_for(conversation(None), wall_s)
    except TimeoutError:
        return AgentResult(None, "budget_wall", time.monotonic() - started, "", None, None)
    except Exception:  # the agent's own crash is a result, not the harness's
        return AgentResult(None, "crash", time.monotonic() - started, traceback.format_exc(), None, None)
    return AgentResult(0, chat.cause, time.monotonic() - started, "", chat.output, None)


async def call_agent(agent: AgentFunction, episode: Episode, wall_s: float | None) -> AgentResult:
    """Call the agent in a worker thread within `wall_s`; its return, crash or overrun as a result."""
    started = time.monotonic()
    try:
        returned = await asyncio.wait_for(asyncio.to_thread(agent, episode), wall_s)
    except TimeoutError:
        # A thread cannot be killed; it is left to finish, and the episode is over budget.
        return AgentResult(None, "budget_wall", time.monotonic() - started, "", None, None)
    except Exception:  # the agent's own crash is a result, not the harness's
        return AgentResult(None, "crash", time.monotonic() - started, traceback.format_exc(), None, None)
    output = returned if isinstance(returned, dict) else {"answer": bool(returned), "passed": bool(returned)}
    exit_code = 0 if returned is not False else 1
    return AgentResult(exit_code, None, time.monotonic() - started, "", output, None)


def summarize(run_dir: Path) -> FunctionRunResult:
    """The run's figures from its report, so they cannot differ from what `faultproxy report` says."""
    logged = read_run(run_dir)
    # Every planned task, a never-run one with no statuses; each trial once, as the report reads the log.
    statuses: dict[str, list[str]] = {item["id"]: [] for item in logged.plan["tasks"]["items"]}
    seen: set[str] = set()
    for record in logged.episodes:
        if record["task_id"] in statuses and record["key"] not in seen and record.get("verdict"):
            seen.add(record["key"])
            statuses[record["task_id"]].append(record["verdict"]["status"])
    headline = build_report(run_dir)["run"]["headline"]
    return FunctionRunResult(run_dir, headline["k"], headline["mean_pass_rate"], headline["pass_hat_k"],
                             headline["pass_at_k"], statuses)
