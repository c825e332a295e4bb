"""A conversation's user played by a model (tasks.task_user.UserModel): the harness asks an
OpenAI-compatible Chat Completions API for each of the user's turns, directly (never through
the proxy, so these calls are never in the agent's trace), at temperature 0 with the variant's
seed. The model sees its persona and the conversation with the roles turned round: its own
turns as `assistant`, the agent's as `user`. An answer holding END_MARK is the user's last turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import httpx

from faultproxy.tasks.task_user import END_MARK, Reply, UserModel

TIMEOUT_S = 60.0
SYSTEM = ("You are playing a user who talks with a support agent. Who you are: {persona}\n"
          "Answer the agent's last message as that user would, in one short message. When you have "
          f"nothing more to say, end your message with {END_MARK}.")


class UserFailed(Exception):
    """The user's model did not answer (the harness's problem, not the agent's)."""


class ModelUser:
    """The runner.chat Respond of a model-played user."""

    def __init__(self, played_by: UserModel, seed: int, environ: Mapping[str, str]) -> None:
        self.played_by, self.seed = played_by, seed
        self.base_url = environ.get(played_by.base_url_env, "").rstrip("/")
        key = environ.get(played_by.api_key_env or "", "")
        self.headers = {"authorization": f"Bearer {key}"} if key else {}

    async def __call__(self, transcript: Sequence[tuple[str, str]], turns: int) -> tuple[None, Reply] | None:
        messages = [{"role": "system", "content": SYSTEM.format(persona=self.played_by.persona or "a customer")}]
        messages += [{"role": "assistant" if speaker == "user" else "user", "content": text}
                     for speaker, text in transcript]
        body = {"model": self.played_by.model, "messages": messages, "temperature": 0, "seed": self.seed}
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=TIMEOUT_S) as client:  # never through the proxy
                response = await client.post(f"{self.base_url}/chat/completions", json=body, headers=self.headers)
                response.raise_for_status()
                content = response.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, LookupError, TypeError) as error:
            raise UserFailed(f"the user's model {self.played_by.model} at ${self.played_by.base_url_env} "
                             f"did not answer: {error}") from None
        if not isinstance(content, str):
            raise UserFailed(f"the user's model {self.played_by.model} answered no text")
        said = content.replace(END_MARK, "").strip()
        if not said:
            return None  # it only said it was done
        return None, Reply(said, end=END_MARK in content)


def check_user_models(tasks: Sequence, environ: Mapping[str, str]) -> list[str]:
    """Problems with the tasks' model-played users here: an unset base URL variable."""
    return [f"task {task.id}: user.base_url_env names {task.user.played_by.base_url_env}, which is not set"
            for task in tasks if task.user and task.user.played_by
            and not environ.get(task.user.played_by.base_url_env)]
