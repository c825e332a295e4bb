"""`--rewrite FIELD=TEMPLATE`: what the proxy sets in each episode's model API requests.

A template is text with placeholders, filled per grid point:
  {model}                          the episode's model (--model, --models)
  {NAME}                           the level of the swept param NAME (a number as its grid label
                                   writes it, 0.1; a word as given, high)
  {NAME:LEVEL=VALUE,LEVEL=VALUE}   the VALUE given for NAME's level (a mapping: every level of
                                   NAME must have one), e.g. {effort:low=1024,high=16384}
so `--rewrite reasoning.effort={effort}` or `--rewrite thinking.budget_tokens={effort:low=1024,
medium=4096,high=16384}`. The fields, and which API each belongs to, are proxy.models.FIELDS.

Every template is resolved at every grid point before anything runs (RunOptions checks it), so a
template naming a param the grid does not have, a level a mapping leaves out or a value of the
wrong kind is one line and exit status 2, never an episode the harness cannot run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from faultproxy.evaluator.sweeps import level_text
from faultproxy.formats.errors import UsageError
from faultproxy.proxy.models import field_value, rewrite_field
from faultproxy.runner.plan import GridPoint

MODEL_TEMPLATE = "{model}"  # --rewrite-model is --rewrite model={model}
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class RewriteError(UsageError):
    """A --rewrite that cannot be applied at some grid point; the message names it and why."""


def check_syntax(rewrites: Mapping[str, str]) -> None:
    """RewriteError for an unknown field or a template that is not well formed (the values each
    template gives are checked at each grid point, by resolve)."""
    for name, template in rewrites.items():
        try:
            rewrite_field(name)
        except ValueError as error:
            raise RewriteError(f"--rewrite {name}={template}: {error}") from None
        _check_template(name, template)


def _check_template(name: str, template: str) -> None:
    shown = f"--rewrite {name}={template}"
    outside = _PLACEHOLDER.sub("", template)
    if "{" in outside or "}" in outside:
        raise RewriteError(f"{shown}: an unmatched {{ or }}; placeholders are {{NAME}} or {{NAME:LEVEL=VALUE,...}}")
    for inside in _PLACEHOLDER.findall(template):
        param, _, mapping = inside.partition(":")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", param):
            raise RewriteError(f"{shown}: {{{inside}}} does not name a param or model")
        if ":" in inside:
            _mapping(shown, param, mapping)


def _mapping(shown: str, param: str, text: str) -> dict[str, str]:
    table = {}
    for item in text.split(","):
        level, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not level:
            raise RewriteError(f"{shown}: {item.strip()!r} in {{{param}:...}} is not LEVEL=VALUE")
        table[_normal_level(level)] = value
    return table


def _normal_level(level: str) -> str:
    """A number as grid labels write it (0.10 -> 0.1), so a mapping's levels match the grid's."""
    try:
        return level_text(float(level))
    except ValueError:
        return level


def resolve(rewrites: Mapping[str, str], point: GridPoint) -> dict[str, str | int]:
    """Each field's value at this grid point; RewriteError when a template cannot be filled there."""
    values = {name: level_text(value) for name, value in point.params}
    if point.model:
        values["model"] = point.model
    resolved: dict[str, str | int] = {}
    for name, template in rewrites.items():
        shown = f"--rewrite {name}={template}"
        text = _PLACEHOLDER.sub(lambda match: _fill(shown, match.group(1), values), template)
        try:
            resolved[name] = field_value(name, text)
        except ValueError as error:
            where = f" at {point.label}" if point.label else ""
            raise RewriteError(f"{shown}{where}: {error}") from None
    return resolved


def _fill(shown: str, inside: str, values: Mapping[str, str]) -> str:
    param, sep, mapping = inside.partition(":")
    if param not in values:
        if param == "model":
            raise RewriteError(f"{shown}: {{model}} needs a model to ask for: --model (run) or --models (sweep)")
        named = ", ".join(sorted(values)) or "none"
        raise RewriteError(f"{shown}: {{{param}}} is not a swept param or the model (this run has: {named})")
    if not sep:
        return values[param]
    table = _mapping(shown, param, mapping)
    if values[param] not in table:
        raise RewriteError(f"{shown}: the mapping gives no value for {param}={values[param]}")
    return table[values[param]]


def check_rewrites(rewrites: Mapping[str, str], grid: Sequence[GridPoint]) -> None:
    """Resolve every template at every grid point, so what cannot run fails before anything runs."""
    check_syntax(rewrites)
    for point in grid:
        resolve(rewrites, point)
