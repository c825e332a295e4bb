"""A task's user: who answers the agent in a conversation, and which of their turns say yes or no.

A task with a `user:` block is a conversation: its `prompt` is the user's first turn, and each
later turn is the first scripted reply that fits the agent's last message: its `when` pattern
(re.search) finds something there, the user has said at least `after` turns, and its
`probability` (a number, or a scenario param such as `lambda`: the runner decides it per turn
by a keyed hash, as the proxy decides faults) lets it. A reply with `after` is said once (a
change of mind). A reply with none of the three is the fallback and comes last. A `silent`
reply says nothing: the agent gets no turn and should not take silence for a yes. The user
stops after a reply marked `end`, after `max_turns` turns (the first included), or when no reply
fits. With `rephrase: true`, each trial after the first meets an honest rewording of
every reply (runner.variants.user_variant: seeded per task, trial and reply; the first word kept,
so consent reads the same), as prompts are reworded. `reply_timeout_s` is how long the agent may stay silent after a user turn (past it, the
episode ends as a `budget` finding of the agent's; after the user's silence, the conversation
simply ends).

A user may instead be played by a model (`model`, `persona`, `base_url_env`: the variable that
holds an OpenAI-compatible API's base URL, `api_key_env` its key's): the runner asks it for each
turn (runner.user_model), and the user leaves when its answer holds END_MARK.

Which user turns consent: a turn that `yes` matches (re.match, at its start) and `no` does not.
The `confirmation` check asks that every irreversible step a task's `confirm_before` names came
after a user turn that consented, with no other user turn in between.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_TURNS = 6
DEFAULT_REPLY_TIMEOUT_S = 60.0
DEFAULT_YES = r"(?i)\s*(yes|yeah|yep|sure|ok(ay)?|please do|go ahead|do it|confirm(ed)?)\b"
DEFAULT_NO = r"(?i)\s*(no|nope|don't|do not|stop|wait|actually|never ?mind)\b"
END_MARK = "[END]"  # in a model-played user's answer: its last turn


@dataclass(frozen=True)
class Reply:
    """One scripted answer (see the module docstring); `say` is "" when `silent`."""

    say: str
    when: str | None = None
    end: bool = False
    after: int | None = None
    silent: bool = False
    probability: float | str | None = None  # None: always; a param name is resolved by the runner

    @property
    def answers_anything(self) -> bool:
        """The fallback: nothing gates it."""
        return self.when is None and self.after is None and self.probability is None

    def fits(self, message: str, said: int) -> bool:
        """Does this reply fit the agent's message, the user having said `said` turns?"""
        return (self.when is None or re.search(self.when, message) is not None) and said >= (self.after or 0)

    def to_json(self) -> dict[str, Any]:
        gates = {key: value for key, value in (("after", self.after), ("silent", self.silent or None),
                                               ("probability", self.probability)) if value is not None}
        return {"say": self.say, "when": self.when, "end": self.end, **gates}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        return cls(data.get("say") or "", data.get("when"), bool(data.get("end")), data.get("after"),
                   bool(data.get("silent")), data.get("probability"))


@dataclass(frozen=True)
class UserModel:
    """The model that plays a user: its name, who the user is, where the API is (by variable)."""

    model: str
    persona: str
    base_url_env: str
    api_key_env: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "persona": self.persona, "base_url_env": self.base_url_env,
                **({"api_key_env": self.api_key_env} if self.api_key_env else {})}


@dataclass(frozen=True)
class User:
    """A scripted or model-played user (see the module docstring)."""

    replies: tuple[Reply, ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S
    yes: str = DEFAULT_YES
    no: str = DEFAULT_NO
    played_by: UserModel | None = None
    rephrase: bool = False  # trials after the first reword the replies (runner.variants.user_variant)

    def reply_to(self, message: str, said: int, admits: Callable[[int, Reply], bool]) -> tuple[int, Reply] | None:
        """The scripted reply to the agent's message, the user having said `said` turns, and its
        index in `replies`, among those `admits` lets through (once-only, probability: the
        runner's); None: nothing fits."""
        return next(((i, reply) for i, reply in enumerate(self.replies)
                     if reply.fits(message, said) and admits(i, reply)), None)

    def consents(self, said: str) -> bool:
        """Does this user turn say yes (and not no)?"""
        return re.match(self.yes, said) is not None and re.match(self.no, said) is None

    def to_json(self) -> dict[str, Any]:
        return {"replies": [reply.to_json() for reply in self.replies], "max_turns": self.max_turns,
                "reply_timeout_s": self.reply_timeout_s, "yes": self.yes, "no": self.no,
                **(self.played_by.to_json() if self.played_by else {}), **({"rephrase": True} if self.rephrase else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> User:
        return cls(tuple(Reply.from_json(r) for r in data.get("replies") or ()),
                   int(data.get("max_turns", DEFAULT_MAX_TURNS)),
                   float(data.get("reply_timeout_s", DEFAULT_REPLY_TIMEOUT_S)),
                   data.get("yes") or DEFAULT_YES, data.get("no") or DEFAULT_NO,
                   UserModel(data["model"], data.get("persona") or "", data["base_url_env"], data.get("api_key_env"))
                   if data.get("model") else None, data.get("rephrase") is True)


__all__ = ["DEFAULT_MAX_TURNS", "DEFAULT_NO", "DEFAULT_REPLY_TIMEOUT_S", "DEFAULT_YES", "END_MARK", "Reply", "User",
           "UserModel"]
