"""`${VAR}` templates in a tasks file's URLs and env values, expanded per episode by the runner.

`$$` is a literal `$`, and so is a `$` that starts neither `$$` nor `${`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # also what an environment variable may be called


class TemplateError(ValueError):
    """A template that cannot be parsed: an unterminated `${` or a bad variable name."""


class UnsetVariable(KeyError):
    """expand() met `${NAME}` with NAME absent from the environment."""

    def __init__(self, name: str, template: str) -> None:
        super().__init__(name)
        self.name, self.template = name, template

    def __str__(self) -> str:
        return f"${{{self.name}}} is not set (needed by {self.template!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.name, self.template)


def _template_parts(template: str) -> list[tuple[str, str]]:
    """("text", literal) and ("var", NAME) parts; `$$` is a literal `$`, and so is a `$` that
    starts neither `$$` nor `${`."""
    parts: list[tuple[str, str]] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        if template.startswith("$$", i):
            literal.append("$")
            i += 2
        elif template.startswith("${", i):
            end = template.find("}", i + 2)
            if end < 0:
                raise TemplateError(f"unterminated '${{' at character {i + 1} of {template!r}")
            name = template[i + 2:end]
            if not VARIABLE_NAME.fullmatch(name):
                raise TemplateError(f"invalid variable name '${{{name}}}' in {template!r}; "
                                    "use letters, digits and _, not starting with a digit (write $$ for a literal $)")
            if literal:
                parts.append(("text", "".join(literal)))
                literal = []
            parts.append(("var", name))
            i = end + 1
        else:
            literal.append(template[i])
            i += 1
    if literal:
        parts.append(("text", "".join(literal)))
    return parts


def template_variables(template: str) -> tuple[str, ...]:
    """The variable names `template` uses, in order of first use; TemplateError if malformed."""
    return tuple(dict.fromkeys(value for kind, value in _template_parts(template) if kind == "var"))


def expand(template: str, env: Mapping[str, str]) -> str:
    """Replace each `${NAME}` with env[NAME]; `$$` gives `$`. UnsetVariable (a KeyError) names a
    missing variable; TemplateError (a ValueError) a malformed template."""
    out = []
    for kind, value in _template_parts(template):
        if kind == "text":
            out.append(value)
        elif value in env:
            out.append(env[value])
        else:
            raise UnsetVariable(value, template)
    return "".join(out)
