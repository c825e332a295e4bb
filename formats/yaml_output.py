"""YAML written for people to read and edit (`faultproxy init`'s tasks file and scenarios): every
value faultproxy writes into such a file goes through here, so what it writes reads back as
written (formats.yaml_input, the loaders).

    flow(value)        # one value on one line: 'POST /orders/*/refund', [a, b], {op: rename, ...}
    comment(text, indent)  # a `#` comment, wrapped (not wrap=False: YAML to uncomment)
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

WIDTH = 100


def flow(value: Any) -> str:
    """`value` as YAML in flow style on one line (strings quoted only where YAML needs it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def comment(text: str, indent: int = 0, wrap: bool = True) -> str:
    """`text` as comment lines at `indent`, wrapped at WIDTH unless it is YAML to uncomment
    (`wrap=False`); a newline in it starts a new comment line."""
    prefix = " " * indent + "# "
    lines = [line for paragraph in text.split("\n")
             for line in ((textwrap.wrap(paragraph, WIDTH - len(prefix)) if wrap else [paragraph]) or [""])]
    return "\n".join((prefix + line).rstrip() for line in lines)
