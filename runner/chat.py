"""A conversation between a task's user (tasks.task_user) and the agent, turn by turn.

`converse` plays the user: the task's prompt is the first turn, each later one what the user's
Respond says to the conversation so far: the script's reply (`scripted`), a model's answer
(runner.user_model), or in a replay of a model-played user its recorded turn (`recorded`). Every turn is written to the episode's trace as it is said (the proxy
numbers it in order with the agent's requests: formats.trace.turn_record). How the agent hears
the user is a Channel: its stdin and stdout (`--chat stdio`, runner.chat_stdio), or an HTTP
service (runner.chat_http).

The conversation ends when the user leaves (a reply marked `end`, `max_turns`, or no reply that
fits), or when the agent has nothing more to say (it exited, or closed the conversation). After
the user's last turn the agent still answers; what it says then is recorded until it is done or
silent for `reply_timeout_s`. An agent silent that long while the user waits for an answer
overran its reply budget (`budget_reply`: the agent's finding, not the harness's).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from faultproxy.evaluator.checks import clip
from faultproxy.evaluator.traces import Turn
from faultproxy.formats.episode_causes import BUDGET_REPLY, USER_FAILED
from faultproxy.formats.errors import UsageError
from faultproxy.formats.trace import AGENT_TO_USER, TURN_METHOD, TURN_URLS, USER_TO_AGENT
from faultproxy.proxy.decide import decision_value, fires
from faultproxy.proxy.server import ProxyServer, free_port
from faultproxy.runner.chat_http import ServiceChannel, check_service_url
from faultproxy.runner.chat_stdio import StdioChannel
from faultproxy.runner.user_model import ModelUser, UserFailed, check_user_models
from faultproxy.runner.variants import user_variant
from faultproxy.scenarios import Scenario
from faultproxy.tasks.task_user import Reply, User
from faultproxy.tasks.task_model import Task, TaskSet

STDIO = "stdio"
CHAT_MODES = (STDIO, "http://127.0.0.1:{port}/PATH", "openai:http://127.0.0.1:{port}/v1")  # --chat
CHAT_HELP = ("Run each task as a conversation with its `user:` (docs/conversations.md): stdio (each turn a line "
             "on the agent's stdin; its stdout lines are its turns), http://127.0.0.1:{port}/PATH (CMD is an HTTP "
             "service started with PORT: POST {session, message}, read reply), or openai:http://127.0.0.1:{port}/v1 "
             "(a Chat Completions service).")

# (direction, text, started, reply index, the user's last turn, a silent turn) -> written to the trace
TurnRecorder = Callable[[str, str, float, "int | None", bool, bool], Awaitable[None]]
# (reply index, reply, user turns said) -> may the user say it now
Chance = Callable[[int, "Reply", int], bool]
# (what was said so far as (speaker, text), user turns said) -> the user's next (reply index, reply), or None: leave
Respond = Callable[[Sequence[tuple[str, str]], int], Awaitable["tuple[int | None, Reply] | None"]]


class Channel(Protocol):
    """How the agent hears the user and answers."""

    async def say(self, text: str) -> None:
        """Hand the agent one user turn."""

    async def hear(self) -> str | None:
        """The agent's next turn; None once it has nothing more to say."""

    async def leave(self) -> None:
        """The user has said their last turn."""


# the agent process (None: a function agent) -> the channel to it
OpenChannel = Callable[["asyncio.subprocess.Process | None"], Channel]


@dataclass
class ChatResult:
    """How a conversation ended: `cause` budget_reply if the agent fell silent on the user, else
    None; `output` the agent's last turn as FAULTPROXY_OUTPUT would hold it; `lingering` when the
    conversation was over and the agent had not exited (the runner stops it: no fault of its own)."""

    cause: str | None = None
    output: dict[str, Any] | None = None
    lingering: bool = False
    escalated: bool = False
    detail: str | None = None  # what went wrong, with a harness cause (user_failed)


def chat_mode(mode: str | None, tasks: TaskSet) -> str | None:
    """--chat's mode, checked; a tasks file with a `user:` needs one (UsageError, exit 2)."""
    if mode is None:
        talking = [task.id for task in tasks if task.user is not None]
        if talking:
            raise UsageError(f"task {talking[0]} has a `user:` block (a conversation): give --chat "
                             f"{' or '.join(CHAT_MODES)} to say how the agent hears its user")
        return None
    check_chat_mode(mode)
    return mode


def check_chat_mode(mode: str) -> None:
    """UsageError unless `mode` is one of CHAT_MODES."""
    if mode != STDIO:
        check_service_url(mode)


def user_divergence(recorded: Sequence[str], replayed: Sequence[Turn]) -> dict[str, Any] | None:
    """Where a replayed conversation's user said other than the recording's (the script chose
    another reply for what the agent said now), as replay reports a divergence; None if nowhere."""
    for n, turn in enumerate(replayed):
        if n >= len(recorded) or turn.text != recorded[n]:
            was = f"{clip(recorded[n], 60)!r}" if n < len(recorded) else "nothing more"
            return {"seq": turn.seq, "method": TURN_METHOD, "url": TURN_URLS[0],
                    "why": f"the user's turn {n + 1} is now {clip(turn.text, 60)!r}; the recording has {was}"}
    if len(recorded) > len(replayed):
        return {"seq": None, "method": TURN_METHOD, "url": TURN_URLS[0],
                "why": f"the user left after {len(replayed)} turns; the recording has {len(recorded)}"}
    return None


def check_user_params(tasks: TaskSet, params: Mapping[str, Any], scenario: str) -> None:
    """Every reply `probability` that names a param names one of the scenario's, and every
    model-played user's base URL variable is set (UsageError, exit 2)."""
    for problem in check_user_models(tasks.tasks, os.environ):
        raise UsageError(problem)
    for task in tasks:
        for i, reply in enumerate(task.user.replies if task.user else ()):
            if isinstance(reply.probability, str) and reply.probability not in params:
                known = ", ".join(sorted(params)) or "none"
                raise UsageError(f"task {task.id}: user.replies[{i}].probability names param "
                                 f"{reply.probability!r}, which scenario {scenario} does not define (its params: "
                                 f"{known})")


def episode_conversation(channel: tuple[OpenChannel, bool], task: Task, prompt: str, proxy: ProxyServer,
                         attribution: str, episode: str, scenario: Scenario, seed: int, variant: int,
                         respond: Respond | None = None) -> Conversation:
    """An episode's conversation over `channel` (channel_for's, or a function agent's; run or
    replay): its turns go to the trace of `attribution` in `proxy`; `episode` (the recorded key,
    in a replay) keys the user's chances, so a replay meets the same user. The user answers from
    its script (reworded for `variant` if it asks: runner.variants.user_variant), or its model
    (asked with the variant's `seed`), unless `respond` is given (replay)."""
    async def record(direction: str, text: str, started: float, reply: int | None, end: bool, silent: bool) -> None:
        await asyncio.to_thread(proxy.record_turn, attribution, direction, text, started, 0.0, reply, end, silent)

    user = user_variant(task.user or User(), task.id, variant)
    if respond is None:
        respond = (ModelUser(user.played_by, seed, os.environ) if user.played_by
                   else scripted(user, user_chance(scenario.seed, episode, scenario.params)))
    open_channel, stdio = channel
    return Conversation(user, prompt, record, open_channel, stdio, respond)


def channel_for(mode: str, env: dict[str, str], session: str, model: str | None) -> tuple[OpenChannel, bool]:
    """How an episode reaches its agent under --chat `mode`, and whether over its stdio; a
    service's port is chosen here and given to it as PORT in `env`."""
    if mode == STDIO:
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python agent's turns reach the pipe as it prints them
        return StdioChannel, True
    port = free_port("127.0.0.1")
    env["PORT"] = str(port)
    return lambda process: ServiceChannel(process, mode, port, session, model), False


def agent_turn(line: str) -> dict[str, Any]:
    """An agent's turn as FAULTPROXY_OUTPUT would hold it: a JSON line {"role", "content", ...}
    gives `answer` (its content) and its other fields (escalate, confidence, ...); any other line
    is the answer as text."""
    try:
        document = json.loads(line)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("content"), str):
        rest = {key: value for key, value in document.items() if key not in ("role", "content")}
        return {**rest, "answer": document["content"]}
    return {"answer": line}


@dataclass(frozen=True)
class Conversation:
    """One episode's conversation, as runner.agent.run_agent runs it beside the agent process:
    `open_channel` reaches the process (its pipes, or its port); `stdio` when over its pipes."""

    user: User
    prompt: str
    record: TurnRecorder
    open_channel: OpenChannel
    stdio: bool
    respond: Respond

    async def __call__(self, process: asyncio.subprocess.Process | None) -> ChatResult:
        result = await converse(self.user, self.prompt, self.open_channel(process), self.record, self.respond)
        if not self.stdio:
            result.lingering = True  # a service stays up for more: its conversation's end is the episode's
        return result


def user_chance(seed: str, episode: str, params: Mapping[str, Any]) -> Chance:
    """Whether a reply with a `probability` (a number, or a scenario param) may be said at a turn:
    a keyed hash of (scenario seed, episode, reply, turn), as the proxy decides its faults, so a
    sweep over the param draws a curve over users and the same episode meets the same user."""
    def admits(index: int, reply: Reply, turn: int) -> bool:
        chance = reply.probability
        if chance is None:
            return True
        chance = float(params[chance]) if isinstance(chance, str) else chance
        return fires(chance, decision_value(seed, episode, f"user.replies[{index}]", turn))
    return admits


def scripted(user: User, chance: Chance) -> Respond:
    """The scripted user's answers: the first reply that fits, `chance` lets through and, for a
    change of mind (`after`), was not said before."""
    said_once: set[int] = set()

    async def respond(transcript: Sequence[tuple[str, str]], turns: int) -> tuple[int | None, Reply] | None:
        found = user.reply_to(transcript[-1][1], turns,
                              lambda i, r: (r.after is None or i not in said_once) and chance(i, r, turns))
        if found is not None and found[1].after is not None:
            said_once.add(found[0])
        return found
    return respond


def recorded(said: Sequence[str]) -> Respond:
    """A recorded user's turns, served in order (replay of a model-played user); the last one leaves."""
    async def respond(transcript: Sequence[tuple[str, str]], turns: int) -> tuple[int | None, Reply] | None:
        return (None, Reply(said[turns], end=turns == len(said) - 1)) if turns < len(said) else None
    return respond


async def converse(user: User, prompt: str, channel: Channel, record: TurnRecorder, respond: Respond) -> ChatResult:
    """Play `user` against the agent behind `channel`, from `prompt` on (see the module docstring):
    `respond` gives each of the user's later turns, from what has been said so far."""
    result = ChatResult()
    reply: Reply | None = Reply(prompt)  # what the user says next; None: nothing (more)
    index: int | None = None
    transcript: list[tuple[str, str]] = []  # (speaker, text): what the user and the agent said
    leaving, turns = False, 0
    while True:
        expects_answer = False
        if reply is not None:
            turns += 1
            leaving = leaving or reply.end or turns >= user.max_turns
            transcript.append(("user", reply.say))
            await _tell(record, channel, reply, index, leaving)
            expects_answer = not (leaving or reply.silent)
        try:
            heard = await asyncio.wait_for(channel.hear(), user.reply_timeout_s)
        except TimeoutError:
            if expects_answer:
                result.cause = BUDGET_REPLY
            else:  # the user has left or gone quiet, and the agent stays on: the runner stops it
                result.lingering = True
            return result
        if heard is None:
            return result
        await _heard(result, record, heard)
        transcript.append(("agent", result.output["answer"]))
        try:
            found = None if leaving else await respond(transcript, turns)
        except UserFailed as error:  # the harness's own user could not answer: nothing the agent did
            result.cause, result.detail = USER_FAILED, str(error)
            return result
        if found is None:
            if not leaving:  # nothing in the script fits: the user leaves without a word
                leaving = True
                await channel.leave()
            reply = None
            continue
        index, reply = found


async def _tell(record: TurnRecorder, channel: Channel, reply: Reply, index: int | None, last: bool) -> None:
    await record(USER_TO_AGENT, reply.say, time.time(), index, last, reply.silent)
    if not reply.silent:
        await channel.say(reply.say)
    if last:
        await channel.leave()


async def _heard(result: ChatResult, record: TurnRecorder, line: str) -> None:
    turn = agent_turn(line)
    await record(AGENT_TO_USER, turn["answer"], time.time(), None, False, False)
    result.escalated = result.escalated or turn.get("escalate") is True
    result.output = {**turn, "escalate": True} if result.escalated else turn


__all__ = ["CHAT_HELP", "CHAT_MODES", "Channel", "ChatResult", "Conversation", "TurnRecorder", "agent_turn",
           "channel_for", "chat_mode", "recorded", "scripted", "episode_conversation", "check_chat_mode", "check_user_params", "converse", "user_chance",
           "user_divergence"]
