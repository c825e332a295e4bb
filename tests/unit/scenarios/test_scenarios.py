"""The scenario registry: bundled files, name resolution, params, digests and match semantics."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from faultproxy.formats.request_kinds import Kind
from faultproxy.scenarios import (
    BUNDLED_DIR,
    FAULT_KINDS,
    FAULT_TYPES,
    BodyPredicate,
    DriftOp,
    MatchSpec,
    Scenario,
    ScenarioError,
    TextPattern,
    When,
    bundled_names,
    load_scenario,
    resolve_scenario_path,
)
from tests.support.layout import EXAMPLES

REQUIRED_BUNDLED = {"rate_limit", "timeout", "response_lost", "partial_response", "schema_drift",
                    "stale_state", "auth_failure", "server_error", "slow_stream", "mixed"}


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def one_rule(tmp_path: Path, rule: str) -> Scenario:
    """A scenario whose single rule is `rule` (YAML, indented as a list item's body)."""
    body = textwrap.indent(textwrap.dedent(rule).strip(), "    ")
    return load_scenario(write(tmp_path, f"name: t\ndescription: d\nrules:\n  - name: r\n{body}\n"))


# --- bundled scenarios --------------------------------------------------------------------------


def test_the_required_scenarios_are_bundled() -> None:
    assert set(bundled_names()) >= REQUIRED_BUNDLED


@pytest.mark.parametrize("name", bundled_names())
def test_bundled_scenario_loads_and_is_sweepable(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert len(scenario.description) > 80  # says what happens and what a robust agent does
    assert scenario.path == str((BUNDLED_DIR / f"{name}.yaml").resolve())
    # Every probability goes through lambda, so a sweep over lambda moves every rule.
    assert "lambda" in scenario.params
    assert all(rule.when.probability == "lambda" for rule in scenario.rules)
    for rule in scenario.rules:
        retry_after = rule.fault.params.get("retry_after")
        assert retry_after is None or retry_after <= 2  # SDKs obey long Retry-After literally


def test_bundled_response_lost_targets_the_first_write_whatever_its_path() -> None:
    scenario = load_scenario("response_lost")
    assert scenario.params["lambda"] == 1.0
    [rule] = scenario.rules
    assert rule.fault.type == "response_lost" and rule.when.calls == {1}
    assert rule.match.kinds == {Kind.WRITE} and rule.match.path is None and not rule.match.methods


def test_bundled_tool_rules_match_classes_not_the_demo_shops_paths() -> None:
    """Bundled scenarios reach whatever the user's agent reads or writes (issue 33 §5): no rule
    names the demo shop's paths, fields or objects (the demo's own injection, a refund of order
    1019, is examples/orders_prompt_injection.yaml)."""
    for name in bundled_names():
        text = (BUNDLED_DIR / f"{name}.yaml").read_text()
        rules = text.split("\nrules:", 1)[1]
        assert not any(word in rules for word in ("orders", "refund", "payments", "path: status", "total_cents",
                                                  "shipping_address", "1019")), name


def test_the_demos_own_scenarios_load_and_name_its_shop() -> None:
    """The demo's sharper versions of the bundled schema_drift and prompt_injection, kept beside it."""
    drift = load_scenario(EXAMPLES / "orders_schema_drift.yaml")
    injection = load_scenario(EXAMPLES / "orders_prompt_injection.yaml")
    assert [op.path for op in drift.rules[0].fault.params["ops"]] == [("status",), ("total_cents",)]
    assert injection.rules[0].fault.params["at"] == "shipping_address"
    assert all(rule.match.path.source == "*/orders/*" for rule in (*drift.rules, *injection.rules))


def test_bundled_scenarios_are_valid_yaml_mappings_with_comments() -> None:
    for path in BUNDLED_DIR.glob("*.yaml"):
        assert path.read_text().startswith("#"), f"{path.name} should open with a comment"


# --- resolution ---------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["rate_limit", "rate_limit.yaml"])
def test_bare_names_resolve_to_bundled(given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path(given) == BUNDLED_DIR / "rate_limit.yaml"
    assert load_scenario(given).name == "rate_limit"


def test_a_file_in_the_cwd_wins_over_a_bundled_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "name: mine\ndescription: d\nrules: [{name: r, fault: {type: reset}}]\n", "rate_limit.yaml")
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path("rate_limit.yaml") == Path("rate_limit.yaml")
    assert load_scenario("rate_limit.yaml").name == "mine"
    assert load_scenario("rate_limit").name == "rate_limit"  # no such file without the suffix


def test_paths_resolve_as_paths(tmp_path: Path) -> None:
    path = write(tmp_path, "name: p\ndescription: d\nrules: [{name: r, fault: {type: reset}}]\n")
    assert resolve_scenario_path(str(path)) == path
    assert load_scenario(path).path == str(path.resolve())
    with pytest.raises(ScenarioError):
        resolve_scenario_path(str(tmp_path / "rate_limit"))  # a path is never looked up as a name


# --- params and digests -------------------------------------------------------------------------


def test_params_override_changes_probability_and_digest() -> None:
    base = load_scenario("rate_limit")
    swept = load_scenario("rate_limit", {"lambda": 0.7})
    assert base.probability(base.rules[0]) == 0.3
    assert swept.probability(swept.rules[0]) == 0.7
    assert swept.params == {"lambda": 0.7}
    assert swept.digest != base.digest
    assert load_scenario("rate_limit", {"lambda": 0.3}).digest == base.digest  # same value, same content


def test_params_override_may_add_params() -> None:
    scenario = load_scenario("rate_limit", {"epsilon": 0.1})
    assert scenario.params == {"lambda": 0.3, "epsilon": 0.1}


def test_numeric_probability_resolves_to_itself(tmp_path: Path) -> None:
    scenario = one_rule(tmp_path, "when: {probability: 0.25}\nfault: {type: reset}")
    assert scenario.probability(scenario.rules[0]) == 0.25
    assert one_rule(tmp_path, "fault: {type: reset}").rules[0].when == When()


def test_digest_ignores_formatting_comments_and_location(tmp_path: Path) -> None:
    block = write(tmp_path, """\
        # comment
        name: t
        description: d
        seed: 7
        params: {lambda: 0.5}
        rules:
          - name: r
            when: {probability: lambda}
            fault:
              type: rate_limit
        """, "a.yaml")
    (tmp_path / "sub").mkdir()
    flow = write(tmp_path, """\
        {rules: [{fault: {type: rate_limit}, when: {probability: lambda}, name: r}],
         params: {lambda: 0.5}, seed: "7", description: d, name: t}
        """, "sub/b.yaml")
    assert load_scenario(block).digest == load_scenario(flow).digest
    assert len(load_scenario(block).digest) == 64
    changed = write(tmp_path, block.read_text().replace("seed: 7", "seed: 8"), "c.yaml")
    assert load_scenario(changed).digest != load_scenario(block).digest


def test_digest_is_stable_across_loads() -> None:
    assert {load_scenario("mixed").digest for _ in range(3)} == {load_scenario("mixed").digest}


def test_seed_defaults_to_zero_and_is_a_string(tmp_path: Path) -> None:
    assert one_rule(tmp_path, "fault: {type: reset}").seed == "0"
    assert load_scenario("rate_limit").seed == "1"


def test_scenarios_pickle() -> None:
    scenario = load_scenario("schema_drift")
    assert pickle.loads(pickle.dumps(scenario)) == scenario


# --- When.admits --------------------------------------------------------------------------------


def test_admits_everything_by_default() -> None:
    assert all(When().admits(i, fired) for i in range(1, 20) for fired in range(5))


def test_admits_calls() -> None:
    when = When(calls=frozenset({1, 3}))
    assert [i for i in range(1, 6) if when.admits(i, 0)] == [1, 3]


def test_admits_every_after_and_max() -> None:
    assert [i for i in range(1, 10) if When(every=3).admits(i, 0)] == [3, 6, 9]
    assert [i for i in range(1, 6) if When(after=2).admits(i, 0)] == [3, 4, 5]
    assert When(max=2).admits(5, 1) and not When(max=2).admits(5, 2)
    both = When(every=2, after=3)
    assert [i for i in range(1, 10) if both.admits(i, 0)] == [4, 6, 8]


# --- TextPattern --------------------------------------------------------------------------------


def test_glob_is_a_full_match_and_star_crosses_slashes() -> None:
    pattern = TextPattern.compile("*/chat/completions")
    assert pattern.matches("/v1/chat/completions")
    assert pattern.matches("/openai/deployments/x/chat/completions")
    assert not pattern.matches("/v1/chat/completions/extra")
    assert TextPattern.compile("/orders/?").matches("/orders/7")
    assert TextPattern.compile("/orders/[0-9]*").matches("/orders/42/items")


def test_glob_is_case_sensitive() -> None:
    assert not TextPattern.compile("*/Refund").matches("/refund")


def test_regex_prefix_is_a_full_match() -> None:
    pattern = TextPattern.compile(r"re:/orders/\d+")
    assert pattern.matches("/orders/12")
    assert not pattern.matches("/orders/12/refund")
    assert not pattern.matches("/v1/orders/12")


# --- BodyPredicate ------------------------------------------------------------------------------


def predicate(path: str, expected: object) -> BodyPredicate:
    compiled = TextPattern.compile(expected) if isinstance(expected, str) else expected
    return BodyPredicate(tuple(path.split(".")), compiled)


BODY = {"model": "gpt-4o-mini", "stream": True, "n": 1, "temperature": 0.5, "user": None,
        "params": {"name": "refund_order"},
        "messages": [{"role": "system"}, {"role": "user", "content": "refund 42"}]}


@pytest.mark.parametrize(("path", "expected", "result"), [
    ("model", "gpt-4o*", True),
    ("model", "re:gpt-4o(-mini)?", True),
    ("model", "gpt-4o", False),
    ("params.name", "refund_*", True),
    ("params.name", "charge_*", False),
    ("n", "1", True),                  # numbers match patterns via their JSON text
    ("temperature", "0.*", True),
    ("stream", "true", True),
    ("stream", True, True),
    ("n", True, False),                # 1 is not true
    ("stream", 1, False),
    ("n", 1, True),
    ("temperature", 0.5, True),
    ("user", None, True),
    ("user", "*", False),              # a glob needs a string or number to match
    ("messages", "*", False),
    ("missing", None, False),
    ("messages.1.content", "refund *", True),
    ("messages.1.role", "user", True),
    ("messages.2.role", "user", False),
    ("messages.x.role", "user", False),
    ("params.name.deeper", "*", False),
])
def test_body_predicate(path: str, expected: object, result: bool) -> None:
    assert predicate(path, expected).matches(BODY) is result


def test_body_any_of_and_exists() -> None:
    any_of = BodyPredicate(("model",), (TextPattern.compile("gpt-4o"), TextPattern.compile("gpt-4o-mini")))
    assert any_of.matches(BODY)
    assert not any_of.matches({"model": "claude"})
    assert BodyPredicate(("messages",), {"exists": True}).matches(BODY)
    assert BodyPredicate(("user",), {"exists": True}).matches(BODY)  # present, though null
    assert BodyPredicate(("tools",), {"exists": False}).matches(BODY)
    assert not BodyPredicate(("tools",), {"exists": True}).matches(BODY)
    assert not predicate("model", "*").matches("not a dict")


# --- what the loader builds ---------------------------------------------------------------------


def test_match_spec_is_compiled(tmp_path: Path) -> None:
    scenario = one_rule(tmp_path, """
        match:
          host: "*.example.com"
          path: "*/refund"
          method: [post, Get]
          headers: {X-Tenant: "re:t-[0-9]+"}
          body:
            params.name: refund_*
            model: [gpt-4o, gpt-4o-mini]
            stream: true
            messages: {exists: true}
        fault: {type: reset}
        """)
    match = scenario.rules[0].match
    assert match.host.matches("api.example.com") and match.path.matches("/v1/orders/1/refund")
    assert match.methods == {"POST", "GET"}
    assert set(match.headers) == {"x-tenant"} and match.headers["x-tenant"].matches("t-12")
    assert [p.path for p in match.body] == [("params", "name"), ("model",), ("stream",), ("messages",)]
    request = {"params": {"name": "refund_x"}, "model": "gpt-4o", "stream": True, "messages": []}
    assert all(p.matches(request) for p in match.body)
    assert not match.body[1].matches({"model": "gpt-4.1"})


def test_a_single_method_may_be_given_bare(tmp_path: Path) -> None:
    assert one_rule(tmp_path, "match: {method: post}\nfault: {type: reset}").rules[0].match.methods == {"POST"}


def test_rule_without_match_matches_everything(tmp_path: Path) -> None:
    assert one_rule(tmp_path, "fault: {type: reset}").rules[0].match == MatchSpec()


@pytest.mark.parametrize("fault_type", [t for t in FAULT_TYPES if t != "schema_drift"])
def test_every_fault_type_fills_its_defaults(fault_type: str, tmp_path: Path) -> None:
    on_messages = FAULT_KINDS[fault_type].on_messages  # its rule needs a websocket: block
    given = ", preset: go_away" if fault_type == "ws_inject" else ""  # it needs a message or a preset
    rule = ("match: {websocket: {}}\n" if on_messages else "") + f"fault: {{type: {fault_type}{given}}}"
    fault = one_rule(tmp_path, rule).rules[0].fault
    assert fault.type == fault_type
    assert set(fault.params) == set(FAULT_TYPES[fault_type])
    defaults = {name: spec.default for name, spec in FAULT_TYPES[fault_type].items()}
    if fault_type == "partial_response":
        defaults["events"] = 1  # the one cut point used when none is given
    if given:
        defaults["preset"] = "go_away"
    assert fault.params == defaults


def test_fault_params_are_read_and_typed(tmp_path: Path) -> None:
    fault = one_rule(tmp_path, "fault: {type: rate_limit, retry_after: 2, retry_after_ms: 1500, limit: tokens}")
    assert fault.rules[0].fault.params == {"provider": "auto", "retry_after": 2, "retry_after_ms": 1500,
                                           "limit": "tokens", "message": None}
    partial = one_rule(tmp_path, "fault: {type: partial_response, fraction: 0.5, end: reset}").rules[0].fault
    assert partial.params == {"bytes": None, "fraction": 0.5, "events": None, "end": "reset"}


@pytest.mark.parametrize("then", ["504", '"504"'])
def test_numeric_choices_may_be_written_as_yaml_numbers(then: str, tmp_path: Path) -> None:
    fault = one_rule(tmp_path, f"fault: {{type: timeout, then: {then}}}").rules[0].fault
    assert fault.params["then"] == "504"


def test_schema_drift_ops(tmp_path: Path) -> None:
    fault = one_rule(tmp_path, """
        fault:
          type: schema_drift
          ops:
            - {op: rename, path: status, to: state}
            - {op: remove, path: "choices.*.message.refusal"}
            - {op: add, path: meta.note, value: {deprecated: true}}
            - {op: retype, path: total, to: string}
            - {op: wrap, path: "choices.*.message.tool_calls"}
            - {op: wrap, path: items, key: data}
            - {op: reorder, path: "$"}
            - {op: reorder, path: "", order: sorted}
        """).rules[0].fault
    assert fault.params["ops"] == (
        DriftOp("rename", ("status",), to="state"),
        DriftOp("remove", ("choices", "*", "message", "refusal")),
        DriftOp("add", ("meta", "note"), value={"deprecated": True}),
        DriftOp("retype", ("total",), to="string"),
        DriftOp("wrap", ("choices", "*", "message", "tool_calls")),
        DriftOp("wrap", ("items",), key="data"),
        DriftOp("reorder", (), order="reverse"),
        DriftOp("reorder", (), order="sorted"),
    )


def test_anchors_and_merge_keys_work(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, """\
        name: t
        description: d
        rules:
          - name: a
            match: &model {method: [POST], path: "*/chat/completions"}
            fault: &limit {type: rate_limit, retry_after: 1}
          - name: b
            match: *model
            fault: {<<: *limit, retry_after: 2}
        """))
    first, second = scenario.rules
    assert first.match == second.match
    assert second.fault.params["retry_after"] == 2


def test_expect_is_kept_as_plain_data(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, """\
        name: t
        description: d
        rules: [{name: r, fault: {type: reset}}]
        expect:
          max_drop: {at: 0.3, drop: 0.2}
          no_duplicate_writes: true
          since: 2024-01-01
        """))
    assert scenario.expect == {"max_drop": {"at": 0.3, "drop": 0.2}, "no_duplicate_writes": True,
                               "since": "2024-01-01"}
