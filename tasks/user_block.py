"""A task's `user:` block read from its node: the scripted replies (or the model that plays the
user), the limits of the conversation and its yes/no patterns (tasks.task_user holds what it
means).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from faultproxy.formats.yaml_input import YamlReader
from faultproxy.tasks.budget_block import MAX_WALL_S
from faultproxy.tasks.task_user import Reply, User, UserModel
from faultproxy.tasks.templates import VARIABLE_NAME
from yaml.nodes import Node, ScalarNode

USER_FIELDS = ("replies", "max_turns", "reply_timeout_s", "yes", "no", "rephrase", "model", "persona",
               "base_url_env", "api_key_env")
USER_MODEL_FIELDS = ("model", "persona", "base_url_env", "api_key_env")
REPLY_FIELDS = ("say", "when", "end", "after", "silent", "probability")

_PARAM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # a scenario param a reply's probability names


def read_user(r: YamlReader, node: Node, field: str) -> User:
    """A task's `user:` block (tasks.task_user): scripted replies, limits, yes/no patterns."""
    present = r.mapping(node, field, USER_FIELDS)
    defaults = User()
    replies: list[Reply] = []
    if r.given(present, "replies"):
        items = r.sequence(present["replies"], f"{field}.replies", "replies", allow_empty=True)
        for i, item in enumerate(items):
            if replies and replies[-1].answers_anything:
                raise r.error(item, f"{field}.replies[{i}]", f"{field}.replies[{i - 1}] has no `when`, `after` or "
                                                             "`probability`, so it answers everything: the fallback "
                                                             "reply must be the last")
            replies.append(_read_reply(r, item, f"{field}.replies[{i}]"))
    max_turns = r.integer(present["max_turns"], f"{field}.max_turns", minimum=1) \
        if r.given(present, "max_turns") else defaults.max_turns
    timeout = float(r.positive(present["reply_timeout_s"], f"{field}.reply_timeout_s")) \
        if r.given(present, "reply_timeout_s") else defaults.reply_timeout_s
    if timeout > MAX_WALL_S:
        raise r.error(present["reply_timeout_s"], f"{field}.reply_timeout_s",
                      f"must be at most {MAX_WALL_S:,g} seconds (a day), got {timeout:g}")
    yes, no = (r.regex(present[key], f"{field}.{key}") if r.given(present, key) else getattr(defaults, key)
               for key in ("yes", "no"))
    rephrase = r.boolean(present["rephrase"], f"{field}.rephrase") if r.given(present, "rephrase") else False
    return User(tuple(replies), max_turns, timeout, yes, no, _read_user_model(r, node, present, field), rephrase)


def _read_user_model(r: YamlReader, node: Node, present: Mapping[str, Node], field: str) -> UserModel | None:
    """A model-played user's fields: model and base_url_env (variable names), persona; None if not given."""
    given = [key for key in USER_MODEL_FIELDS if r.given(present, key)]
    if not given:
        return None
    if "model" not in given or "base_url_env" not in given:
        missing = "model" if "model" not in given else "base_url_env"
        raise r.error(node, f"{field}.{missing}", f"a model-played user needs {missing} (with model, persona, "
                                                  "base_url_env: the variable holding an OpenAI-compatible base URL)")
    if r.given(present, "replies"):
        raise r.error(present["replies"], f"{field}.replies", "a user is scripted (replies) or played by a model "
                                                              "(model), not both")
    names = {}
    for key in ("base_url_env", "api_key_env"):
        if key in given:
            names[key] = r.string(present[key], f"{field}.{key}", nonempty=True)
            if not VARIABLE_NAME.fullmatch(names[key]):
                raise r.error(present[key], f"{field}.{key}", f"invalid environment variable name {names[key]!r}")
    persona = r.string(present["persona"], f"{field}.persona", nonempty=True) if "persona" in given else ""
    return UserModel(r.string(present["model"], f"{field}.model", nonempty=True), persona, names["base_url_env"],
                     names.get("api_key_env"))


def _read_reply(r: YamlReader, node: Node, field: str) -> Reply:
    present = r.mapping(node, field, REPLY_FIELDS)

    def given(key: str) -> bool:
        return r.given(present, key)

    silent = r.boolean(present["silent"], f"{field}.silent") if given("silent") else False
    if silent == given("say"):
        raise r.error(present.get("say", node), f"{field}.say", "a silent reply says nothing: give say or silent: true"
                      if silent else "missing required field 'say' (or silent: true, for a user who does not answer)")
    when = r.regex(present["when"], f"{field}.when") if given("when") else None
    end = r.boolean(present["end"], f"{field}.end") if given("end") else False
    after = r.integer(present["after"], f"{field}.after", minimum=1) if given("after") else None
    probability = _read_probability(r, present["probability"], f"{field}.probability") if given("probability") else None
    say = "" if silent else r.string(present["say"], f"{field}.say", nonempty=True)
    return Reply(say, when, end, after, silent, probability)


def _read_probability(r: YamlReader, node: Node, field: str) -> float | str:
    """A number in [0, 1], or the name of a scenario param (e.g. lambda) that the runner resolves."""
    value = r.value(node, field) if isinstance(node, ScalarNode) else None
    if isinstance(value, str) and _PARAM_NAME.fullmatch(value):
        return value
    return float(r.number(node, field, minimum=0, maximum=1))
