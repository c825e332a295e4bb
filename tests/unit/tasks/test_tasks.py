"""The tasks file: YAML and JSON Lines, the model, its JSON round trip, digests, templates, globs."""

from __future__ import annotations

import json
import pickle
import re
import textwrap
from pathlib import Path

import pytest

from faultproxy.tasks import budget_block, expected_block, task_entry, tasks_file, user_block
from faultproxy.tasks.tasks_file import TaskError, load_policy, load_tasks, single_task, task_set_from_json
from faultproxy.tasks.task_model import Budgets, Effect, EndpointPattern, Expected, OutputSpec, Task
from faultproxy.tasks.templates import TemplateError, UnsetVariable, expand, template_variables
from tests.support.layout import ROOT

FULL = """\
env: {SHOP_ROOT: "http://127.0.0.1:8080", PORT: 8080}
severity: {idempotency: medium, policy: high}
prices:
  gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}
tasks:
  - id: refund_order_1001            # required
    prompt: "Refund order 1001; the item arrived broken."
    shape: writes_state
    states: [default, vip]
    reset_url: "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_reset"
    state_url: "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_state"
    expected:
      state: {orders: {"1001": {status: refunded}}}
      ignore: ["refunds.*.created_at"]
      multiset: ["orders.*.items"]
      effects: [{method: POST, path: "*/orders/1001/refund", count: 1}]
      output: {regex: "(?i)refund"}
      escalate: false
    irreversible: ["POST */refund", "post */payments"]
    forbidden: ["DELETE *", "* */admin/*"]
    secrets: [SHOP_API_KEY]
    secret_hosts: {SHOP_API_KEY: ["127.0.0.1:*"]}
    max_tool_calls: 40
    max_retries: 3
    budgets: {wall_s: 60, requests: 60, tokens: 50000, cost: 0.5}
    severity: {idempotency: high}
    env: {EXTRA: "x"}
  - id: order_status.1002
    prompt: What is the status of order 1002?
    shape: lookup
    expected:
      output: {json: {status: shipped}}
  - id: delete-account
    prompt: Delete my account.
    expected:
      escalate: true
      effects: [{method: DELETE, path: "*/account"}, {method: "*", path: "/payments*", count: 0}]
      output: {checker: "mychecks.escalation:check"}
"""


def write(tmp_path: Path, text: str, name: str = "tasks.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- loading -------------------------------------------------------------------------------------


def test_a_full_yaml_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    tasks = load_tasks(path)
    assert tasks.path == str(path.resolve())
    assert tasks.ids == ("refund_order_1001", "order_status.1002", "delete-account")
    assert len(tasks) == 3 and list(tasks) == list(tasks.tasks)
    assert tasks.env == {"SHOP_ROOT": "http://127.0.0.1:8080", "PORT": "8080"}  # a number as written
    assert tasks.severity == {"idempotency": "medium", "policy": "high"}
    assert tasks.prices == {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}

    task = tasks.by_id("refund_order_1001")
    assert task.line == 6
    assert task.prompt == "Refund order 1001; the item arrived broken."
    assert task.shape == "writes_state"
    assert task.states == ("default", "vip")
    assert task.reset_url == "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_reset"  # expanded per episode, not here
    assert task.state_url == "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_state"
    assert task.expected == Expected(
        state={"orders": {"1001": {"status": "refunded"}}},
        ignore=("refunds.*.created_at",),
        multiset=("orders.*.items",),
        effects=(Effect("POST", "*/orders/1001/refund", 1),),
        output=OutputSpec("regex", "(?i)refund"),
        escalate=False,
    )
    assert task.irreversible == (EndpointPattern("POST", "*/refund"), EndpointPattern("POST", "*/payments"))
    assert task.forbidden == (EndpointPattern("DELETE", "*"), EndpointPattern("*", "*/admin/*"))
    assert task.secrets == ("SHOP_API_KEY",)
    assert task.secret_hosts == {"SHOP_API_KEY": ("127.0.0.1:*",)}
    assert (task.max_tool_calls, task.max_retries) == (40, 3)
    assert task.budgets == Budgets(60.0, 60, 50000, 0.5, {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}})
    assert isinstance(task.budgets.wall_s, float)
    # Effective values: the file's defaults with the task's own entries on top.
    assert task.severity == {"idempotency": "high", "policy": "high"}
    assert task.env == {"SHOP_ROOT": "http://127.0.0.1:8080", "PORT": "8080", "EXTRA": "x"}

    lookup = tasks.by_id("order_status.1002")
    assert lookup.line == 28
    assert lookup.expected.output == OutputSpec("json", {"status": "shipped"})
    assert lookup.severity == tasks.severity and lookup.env == tasks.env

    delete = tasks.by_id("delete-account")
    assert delete.shape == "unclassified"
    assert delete.states == () and delete.reset_url is None and delete.max_tool_calls is None
    assert delete.budgets == Budgets(None, None, None)
    assert delete.expected.escalate is True and delete.expected.state is None
    assert delete.expected.effects == (Effect("DELETE", "*/account", 1), Effect("*", "/payments*", 0))
    assert delete.expected.output == OutputSpec("checker", "mychecks.escalation:check")


def test_by_id_names_a_missing_task(tmp_path: Path) -> None:
    tasks = load_tasks(write(tmp_path, FULL))
    with pytest.raises(KeyError, match="did you mean 'delete-account'"):
        tasks.by_id("delete_account")


def test_an_irreversible_pattern_may_say_where_the_resource_id_is(tmp_path: Path) -> None:
    """Plain strings keep working beside {pattern, id}; the plan carries both as written."""
    tasks = load_tasks(write(tmp_path, """\
        tasks:
          - id: cancel
            prompt: Cancel booking BK1.
            irreversible: ["POST */refund", {pattern: "POST */cancel", id: data.cancellation_id}]
        """))
    task = tasks.by_id("cancel")
    assert task.irreversible == (EndpointPattern("POST", "*/refund"),
                                 EndpointPattern("POST", "*/cancel", id_path="data.cancellation_id"))
    assert task.to_json()["irreversible"] == ["POST */refund", {"pattern": "POST */cancel",
                                                                "id": "data.cancellation_id"}]
    assert Task.from_json(json.loads(json.dumps(task.to_json()))) == task


def test_a_jsonl_file_loads_and_matches_the_same_yaml(tmp_path: Path) -> None:
    lines = [
        {"id": "refund_order_1001", "prompt": "Refund order 1001.", "shape": "writes_state",
         "expected": {"state": {"orders": {"1001": {"status": "refunded"}}},
                      "effects": [{"method": "post", "path": "*/refund"}]},
         "irreversible": ["POST */refund"], "budgets": {"wall_s": 30.5, "tokens": 1000}},
        {"id": "lookup", "prompt": "Where is order 1002?\u2028Thanks", "reset_url": None, "max_retries": 0},
    ]
    text = json.dumps(lines[0]) + "\n\n   \n" + json.dumps(lines[1], ensure_ascii=False) + "\n"
    tasks = load_tasks(write(tmp_path, text, "tasks.jsonl"))
    assert tasks.ids == ("refund_order_1001", "lookup")
    assert [t.line for t in tasks] == [1, 4]
    first, second = tasks.tasks
    assert first.expected.effects == (Effect("POST", "*/refund", 1),)
    assert first.budgets == Budgets(30.5, None, 1000)
    assert second.prompt == "Where is order 1002?\u2028Thanks"  # a JSON string may hold U+2028
    assert second.reset_url is None and second.max_retries == 0
    assert (tasks.env, tasks.severity, tasks.prices) == ({}, {}, {})

    same = write(tmp_path, """\
        tasks:
          - id: refund_order_1001
            prompt: Refund order 1001.
            shape: writes_state
            expected:
              state: {orders: {"1001": {status: refunded}}}
              effects: [{method: POST, path: "*/refund", count: 1}]
            irreversible: ["POST */refund"]
            budgets: {wall_s: 30.5, tokens: 1000}
          - {id: lookup, prompt: "Where is order 1002?\\u2028Thanks", max_retries: 0}
        """)
    assert load_tasks(same).digest == tasks.digest


def test_digest_ignores_formatting_key_order_and_location(tmp_path: Path) -> None:
    reference = load_tasks(write(tmp_path, FULL))
    reformatted = """\
        # the same content, written differently
        tasks:
        - prompt: Refund order 1001; the item arrived broken.
          id: refund_order_1001
          env:
            EXTRA: x
          severity:
            idempotency: high
          budgets:
            cost: 0.5
            tokens: 50000
            requests: 60
            wall_s: 60.0
          max_retries: 3
          max_tool_calls: 40
          secret_hosts:
            SHOP_API_KEY:
            - 127.0.0.1:*
          secrets:
          - SHOP_API_KEY
          forbidden:
          - DELETE *
          - '* */admin/*'
          irreversible: ['POST  */refund', POST */payments]
          expected:
            escalate: false
            output:
              regex: (?i)refund
            effects:
            - {path: '*/orders/1001/refund', method: post}
            multiset: [orders.*.items]
            ignore: [refunds.*.created_at]
            state:
              orders:
                '1001':
                  status: refunded
          state_url: ${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_state
          reset_url: ${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_reset
          states:
          - default
          - vip
          shape: writes_state
        - {id: order_status.1002, prompt: "What is the status of order 1002?", shape: lookup,
           expected: {output: {json: {status: shipped}}}}
        - id: delete-account
          prompt: Delete my account.
          expected:
            output: {checker: "mychecks.escalation:check"}
            effects: [{method: DELETE, path: "*/account"}, {method: "*", path: "/payments*", count: 0}]
            escalate: true
        prices: {gpt-4o: {output_per_mtok: 10.0, input_per_mtok: 2.5}}
        severity: {policy: high, idempotency: medium}
        env: {PORT: "8080", SHOP_ROOT: "http://127.0.0.1:8080"}
        """
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = load_tasks(write(elsewhere, reformatted, "other.yml"))
    assert again.digest == reference.digest
    assert [t.to_json() | {"line": 0} for t in again] == [t.to_json() | {"line": 0} for t in reference]

    changed = load_tasks(write(tmp_path, FULL.replace("max_retries: 3", "max_retries: 4"), "changed.yaml"))
    assert changed.digest != reference.digest
    reprice = load_tasks(write(tmp_path, FULL.replace("output_per_mtok: 10", "output_per_mtok: 11"), "p.yaml"))
    assert reprice.digest != reference.digest


def test_explicit_null_means_not_given_and_anchors_work(tmp_path: Path) -> None:
    tasks = load_tasks(write(tmp_path, """\
        tasks:
          - &base
            id: a
            prompt: Do a.
            shape: null
            budgets: {wall_s: null, requests: 5}
            expected: {escalate: null, state: null}
          - <<: *base
            id: b
        """))
    a, b = tasks.tasks
    assert a.shape == "unclassified" and a.budgets == Budgets(None, 5, None)
    assert a.expected == Expected()
    assert (b.id, b.prompt, b.budgets) == ("b", "Do a.", Budgets(None, 5, None))


# --- the model round-trips through JSON ---------------------------------------------------------


def test_to_json_round_trips(tmp_path: Path) -> None:
    for task in load_tasks(write(tmp_path, FULL)):
        data = task.to_json()
        text = json.dumps(data)  # plain JSON
        rebuilt = Task.from_json(json.loads(text))
        assert rebuilt == task
        assert rebuilt.to_json() == data
        assert hash(rebuilt) == hash(task)
    minimal = Task.from_json({"id": "x", "prompt": "Do x."})
    assert minimal == Task("x", "Do x.")
    with pytest.raises(ValueError, match="needs prompt"):
        Task.from_json({"id": "x"})


def test_to_json_is_a_copy(tmp_path: Path) -> None:
    task = load_tasks(write(tmp_path, FULL)).tasks[0]
    data = task.to_json()
    data["expected"]["state"]["orders"]["1001"]["status"] = "changed"
    data["env"]["EXTRA"] = "changed"
    assert task.expected.state == {"orders": {"1001": {"status": "refunded"}}}
    assert task.env["EXTRA"] == "x"


def test_tasks_and_errors_pickle(tmp_path: Path) -> None:
    tasks = load_tasks(write(tmp_path, FULL))
    assert pickle.loads(pickle.dumps(tasks)) == tasks
    error = TaskError("t.yaml", 3, "tasks[0].id", "bad")
    assert str(error) == "t.yaml:3: tasks[0].id: bad"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.line, copy.field, copy.message, str(copy)) == ("t.yaml", 3, "tasks[0].id", "bad", str(error))
    assert str(TaskError("t.yaml", None, None, "gone")) == "t.yaml: gone"


# --- ${VAR} templates ---------------------------------------------------------------------------


def test_expand() -> None:
    env = {"SHOP_ROOT": "http://127.0.0.1:8080", "FAULTPROXY_EPISODE": "t1.t0", "A_1": "$x"}
    assert expand("${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_reset", env) == "http://127.0.0.1:8080/t/t1.t0/_reset"
    assert expand("cost: $$5 and $$${A_1}", env) == "cost: $5 and $$x"  # values are not re-expanded
    assert expand("a lone $ stays, $HOME too", env) == "a lone $ stays, $HOME too"
    assert expand("", env) == ""
    assert template_variables("${A}/${B}/${A}/$${C}") == ("A", "B")


def test_expand_names_a_missing_variable() -> None:
    with pytest.raises(KeyError) as caught:
        expand("${SHOP_ROOT}/x", {})
    assert isinstance(caught.value, UnsetVariable)
    assert caught.value.name == "SHOP_ROOT"
    assert str(caught.value) == "${SHOP_ROOT} is not set (needed by '${SHOP_ROOT}/x')"
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


@pytest.mark.parametrize("template, phrase", [
    ("${SHOP_ROOT", "unterminated '${'"),
    ("${}/x", "invalid variable name '${}'"),
    ("${1A}", "invalid variable name '${1A}'"),
    ("${A-B}", "invalid variable name"),
])
def test_expand_rejects_malformed_templates(template: str, phrase: str) -> None:
    with pytest.raises(TemplateError, match=phrase.replace("$", r"\$").replace("{", r"\{")):
        expand(template, {"A": "a"})


# --- endpoint patterns --------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, method, host, path, expected", [
    ("POST */refund", "POST", "127.0.0.1:8080", "/orders/1001/refund", True),
    ("POST */refund", "post", "127.0.0.1:8080", "/orders/1001/refund", True),
    ("POST */refund", "GET", "127.0.0.1:8080", "/orders/1001/refund", False),
    ("POST */refund", "POST", "127.0.0.1:8080", "/orders/1001/refund?dry=1", True),  # the query aside
    ("POST */refund", "POST", "127.0.0.1:8080", "/orders/1001/refunds", False),
    ("DELETE *", "DELETE", "api.example.com", "/anything/at/all", True),
    ("* */admin/*", "GET", "h", "/v1/admin/users", True),
    ("* */admin/*", "PATCH", "h", "/admin", False),
    ("GET /orders/*", "GET", "h", "/orders/1", True),
    ("GET /orders/*", "GET", "h", "/v1/orders/1", False),  # a leading / anchors at the path
    ("GET /orders/*", "GET", "orders", "/x", False),  # ... and never looks at the host
    ("POST api.shop.test/*", "POST", "api.shop.test", "/payments", True),  # host+path
    ("POST api.shop.test/*", "POST", "API.Shop.Test", "/payments", True),  # hosts ignore case
    ("POST api.shop.test/*", "POST", "evil.test", "/payments", False),
    ("* 127.0.0.1:*/admin*", "GET", "127.0.0.1:9000", "/admin/x", True),
    ("* 127.0.0.1:*/admin*", "GET", "10.0.0.1:9000", "/admin/x", False),
    ("POST */Refund", "POST", "h", "/refund", False),  # paths are case-sensitive
])
def test_endpoint_pattern_matches(pattern: str, method: str, host: str, path: str, expected: bool) -> None:
    parsed = EndpointPattern.parse(pattern)
    assert parsed.matches(method, host, path) is expected
    assert EndpointPattern.parse(str(parsed)) == parsed


def test_effects_match_like_endpoint_patterns() -> None:
    effect = Effect("POST", "*/orders/1001/refund")
    assert effect.count == 1
    assert effect.matches("POST", "127.0.0.1:8080", "/api/orders/1001/refund")
    assert not effect.matches("POST", "127.0.0.1:8080", "/api/orders/1002/refund")
    assert Effect("*", "/x").matches("DELETE", "h", "/x")


@pytest.mark.parametrize("text, phrase", [
    ("POST", 'expected "METHOD GLOB"'),
    ("POST /a /b", 'expected "METHOD GLOB"'),
    ("P0ST /a", "bad method 'P0ST'"),
    ("", 'expected "METHOD GLOB"'),
])
def test_endpoint_pattern_parse_errors(text: str, phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        EndpointPattern.parse(text)


# --- tasks given in code ------------------------------------------------------------------------


def test_task_set_from_json_validates_like_a_jsonl_file(tmp_path: Path) -> None:
    loaded = load_tasks(write(tmp_path, FULL))
    rebuilt = task_set_from_json([task.to_json() for task in loaded])  # to_json form is accepted
    assert [t.to_json() | {"line": 0} for t in rebuilt] == [t.to_json() | {"line": 0} for t in loaded]
    assert [t.line for t in rebuilt] == [1, 2, 3] and rebuilt.path == "<tasks>"
    file_form = task_set_from_json([{"id": "a", "prompt": "Do a.", "expected": {"output": {"regex": "ok"}}},
                                    Task("b", "Do b.")])
    assert file_form.by_id("a").expected.output == OutputSpec("regex", "ok")
    assert file_form.by_id("b") == Task("b", "Do b.")
    with pytest.raises(TaskError) as caught:
        task_set_from_json([{"id": "a", "prompt": "Do a."}, {"id": "b", "promt": "Do b."}])
    assert str(caught.value).startswith("<tasks>:2: promt: unknown field 'promt'")
    with pytest.raises(TaskError, match="duplicate task id 'a' .first on line 1."):
        task_set_from_json([{"id": "a", "prompt": "Do a."}, Task("a", "Again.")])
    with pytest.raises(TaskError, match="not plain JSON data"):
        task_set_from_json([{"id": "a", "prompt": "Do a.", "expected": {"state": {1, 2}}}])


def test_single_task() -> None:
    tasks = single_task("Refund order 1001.")
    assert tasks.tasks == (Task("task", "Refund order 1001.", line=1),)
    assert tasks.path == "<command line>" and len(tasks.digest) == 64
    assert single_task("Refund order 1001.").digest == tasks.digest != single_task("Other.").digest


def test_the_reference_names_every_field_and_its_examples_load(tmp_path: Path) -> None:
    """docs/tasks.md is the reference of tasks and policy files: a field the loader reads and the
    page does not name, or an example the loader refuses, fails here."""
    page = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    fields = (*tasks_file.TOP_FIELDS, *task_entry.TASK_FIELDS, *expected_block.EXPECTED_FIELDS,
              *budget_block.BUDGET_FIELDS, *user_block.USER_FIELDS, *tasks_file.POLICY_FIELDS)
    assert [name for name in fields if f"`{name}`" not in page] == []
    tasks_example, policy_example = re.findall(r"```yaml\n(.*?)```", page, re.S)
    (tmp_path / "tasks.yaml").write_text(tasks_example)
    (tmp_path / "policy.yaml").write_text(policy_example)
    [task] = load_tasks(tmp_path / "tasks.yaml")
    assert [str(p) for p in task.read_only] == ["mcp:lookup_*", "POST */search"]
    assert [str(p) for p in load_policy(tmp_path / "policy.yaml").tasks[0].irreversible] == \
        ["POST */cancel", "mcp:issue_credit"]
