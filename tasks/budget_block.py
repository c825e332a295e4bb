"""A task's `budgets:` block and the `prices:` a cost budget is judged with (the file's, or
the task's own), read from their nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from faultproxy.formats.yaml_input import YamlReader, join_field
from faultproxy.tasks.task_model import Budgets
from yaml.nodes import Node

BUDGET_FIELDS = ("wall_s", "requests", "tokens", "cost", "prices")
MAX_WALL_S = 86_400.0  # a day per episode, as --budget-s
PRICE_FIELDS = ("input_per_mtok", "output_per_mtok")


def read_budgets(r: YamlReader, node: Node, field: str, prices: Mapping[str, Mapping[str, float]]) -> Budgets:
    present = r.mapping(node, field, BUDGET_FIELDS)
    wall_s = float(r.positive(present["wall_s"], f"{field}.wall_s")) if r.given(present, "wall_s") else None
    if wall_s is not None and wall_s > MAX_WALL_S:
        raise r.error(present["wall_s"], f"{field}.wall_s", f"must be at most {MAX_WALL_S:,g} seconds (a day), "
                                                            f"got {wall_s:g}")
    requests = int(r.positive(present["requests"], f"{field}.requests", integer=True)) \
        if r.given(present, "requests") else None
    tokens = int(r.positive(present["tokens"], f"{field}.tokens", integer=True)) if r.given(present, "tokens") else None
    # The task's own prices (a task written by Task.to_json carries them); else the file's.
    own = read_prices(r, present["prices"], f"{field}.prices") if r.given(present, "prices") else None
    if not r.given(present, "cost"):
        if own is not None:
            raise r.error(present["prices"], f"{field}.prices", "prices here price a cost budget: give budgets.cost "
                                                                "too, or move them to the file's top-level `prices:`")
        return Budgets(wall_s, requests, tokens)
    cost = float(r.positive(present["cost"], f"{field}.cost"))
    prices = own if own is not None else prices
    if not prices:
        raise r.error(present["cost"], f"{field}.cost", "a cost budget needs prices: add a top-level `prices:` with "
                                                        "input_per_mtok and output_per_mtok for each model called")
    return Budgets(wall_s, requests, tokens, cost, prices)


def read_prices(r: YamlReader, node: Node, field: str = "prices") -> dict[str, dict[str, float]]:
    result = {}
    for model, value in r.fields(node, field).items():
        model_field = join_field(field, model)
        present = r.mapping(value, model_field, PRICE_FIELDS, required=PRICE_FIELDS)
        result[model] = {key: float(r.number(present[key], f"{model_field}.{key}", minimum=0)) for key in PRICE_FIELDS}
    return result
