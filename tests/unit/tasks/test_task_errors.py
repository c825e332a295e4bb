"""Every malformed tasks file gets exactly one TaskError naming its file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from faultproxy.tasks.tasks_file import TaskError, load_tasks

# Each case: id, file name, text, expected line (1-based, None if none), field (None if none), and
# a phrase the message must contain.
CASES = [
    # --- YAML syntax and the top level
    ("yaml_syntax", "t.yaml", """\
        tasks:
          - id: a
            prompt: "unterminated
        """, 4, None, "invalid YAML"),
    ("empty_file", "t.yaml", "# nothing but a comment\n", 1, None, "the file is empty"),
    ("top_not_mapping", "t.yaml", """\
        - id: a
          prompt: Do a.
        """, 1, None, "must be a mapping with a 'tasks' list"),
    ("missing_tasks", "t.yaml", """\
        env: {A: b}
        """, 1, "tasks", "missing required field 'tasks'"),
    ("unknown_top_field", "t.yaml", """\
        env: {A: b}
        task:
          - {id: a, prompt: Do a.}
        """, 2, "task", "unknown field 'task'; expected one of env, tasks, severity, prices, side_channels (did you mean 'tasks'?)"),
    ("side_channel_no_host", "t.yaml", """\
        side_channels: ["POST /v1/traces"]
        tasks:
          - {id: a, prompt: Do a.}
        """, 1, "side_channels[0]", "bad side channel 'POST /v1/traces'; expected [METHOD ]HOST[:PORT][/PATH]"),
    ("side_channels_not_a_list", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            side_channels: api.openai.com
        """, 4, "tasks[0].side_channels", "expected a list"),
    ("tasks_empty", "t.yaml", """\
        tasks: []
        """, 1, "tasks", "the list of tasks is empty"),
    ("duplicate_yaml_key", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            id: b
        """, 4, "tasks[0].id", "duplicate key 'id' (first on line 2)"),
    ("task_not_mapping", "t.yaml", """\
        tasks:
          - {id: a, prompt: Do a.}
          - just a string
        """, 3, "tasks[1]", "each task must be a mapping with id and prompt"),
    # --- required and unknown fields
    ("missing_prompt", "t.yaml", """\
        tasks:
          - id: a
            shape: lookup
        """, 2, "tasks[0].prompt", "missing required field 'prompt'"),
    ("unknown_task_field", "t.yaml", """\
        tasks:
          - id: a
            promt: Do a.
        """, 3, "tasks[0].promt", "unknown field 'promt'; expected one of id, prompt, shape, states, "),
    ("unknown_task_field_suggests", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            max_tool_call: 4
        """, 4, "tasks[0].max_tool_call", "(did you mean 'max_tool_calls'?)"),
    ("unknown_expected_field", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              stat: {x: 1}
        """, 5, "tasks[0].expected.stat", "unknown field 'stat'; expected one of state, ignore"),
    # --- ids
    ("duplicate_task_id", "t.yaml", """\
        tasks:
          - id: refund
            prompt: Do a.
          - id: lookup
            prompt: Do b.
          - id: refund
            prompt: Do c.
        """, 6, "tasks[2].id", "duplicate task id 'refund' (first on line 2)"),
    ("id_with_space", "t.yaml", """\
        tasks:
          - id: refund order
            prompt: Do a.
        """, 2, "tasks[0].id", "invalid task id 'refund order': use only letters, digits, '_', '.' and '-'"),
    ("id_with_slash", "t.yaml", """\
        tasks:
          - {id: "a/b", prompt: Do a.}
        """, 2, "tasks[0].id", "invalid task id 'a/b'"),
    ("id_an_integer", "t.yaml", """\
        tasks:
          - id: 1001
            prompt: Do a.
        """, 2, "tasks[0].id", 'expected a string, got integer 1001 (quote it: "1001")'),
    # --- wrong types
    ("prompt_empty", "t.yaml", """\
        tasks:
          - id: a
            prompt: "  "
        """, 3, "tasks[0].prompt", "must not be empty"),
    ("max_tool_calls_string", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            max_tool_calls: forty
        """, 4, "tasks[0].max_tool_calls", "expected an integer, got string 'forty'"),
    ("max_retries_negative", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            max_retries: -1
        """, 4, "tasks[0].max_retries", "must be at least 0, got -1"),
    ("escalate_not_boolean", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              escalate: maybe
        """, 5, "tasks[0].expected.escalate", "expected a boolean (true or false), got string 'maybe'"),
    ("states_not_a_list", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            states: default
        """, 4, "tasks[0].states", "expected a list of states, got string 'default'"),
    ("states_duplicate", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            states: [default, vip,
                     default]
        """, 5, "tasks[0].states[2]", "'default' is listed twice (first as tasks[0].states[0])"),
    ("env_boolean", "t.yaml", """\
        env:
          DEBUG: true
        tasks:
          - {id: a, prompt: Do a.}
        """, 2, "env.DEBUG", "expected a string (quote it), got boolean true"),
    ("env_bad_name", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            env: {"MY-VAR": x}
        """, 4, "tasks[0].env.MY-VAR", "invalid environment variable name 'MY-VAR'"),
    ("env_bad_template", "t.yaml", """\
        env:
          SHOP_ROOT: "http://127.0.0.1:${SHOP_PORT"
        tasks:
          - {id: a, prompt: Do a.}
        """, 2, "env.SHOP_ROOT", "unterminated '${'"),
    # --- shapes
    ("shape_not_a_string", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            shape: [lookup]
        """, 4, "tasks[0].shape", "expected a string, got a list"),
    ("shape_two_words", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            shape: writes state
        """, 4, "tasks[0].shape", "a shape is one word"),
    # --- budgets
    ("budget_zero_wall", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets:
              wall_s: 0
        """, 5, "tasks[0].budgets.wall_s", "must be positive, got 0"),
    ("budget_negative_tokens", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets: {wall_s: 1.5, tokens: -5}
        """, 4, "tasks[0].budgets.tokens", "must be positive, got -5"),
    ("budget_fractional_requests", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets: {requests: 2.5}
        """, 4, "tasks[0].budgets.requests", "expected an integer, got number 2.5"),
    ("budget_unknown", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets: {wall: 3}
        """, 4, "tasks[0].budgets.wall", "unknown field 'wall'; expected one of wall_s, requests, tokens, cost, prices "
                                         "(did you mean 'wall_s'?)"),
    ("budget_cost_without_prices", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets:
              cost: 0.25
        """, 5, "tasks[0].budgets.cost", "a cost budget needs prices: add a top-level `prices:`"),
    ("budget_prices_without_cost", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            budgets: {requests: 3, prices: {m: {input_per_mtok: 1, output_per_mtok: 2}}}
        """, 4, "tasks[0].budgets.prices", "prices here price a cost budget: give budgets.cost too"),
    # --- severity
    ("severity_bad_value", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            severity:
              idempotency: critical
        """, 5, "tasks[0].severity.idempotency", "severity must be one of low, medium, high, got string 'critical'"),
    ("severity_default_bad_value", "t.yaml", """\
        severity: {policy: 3}
        tasks:
          - {id: a, prompt: Do a.}
        """, 1, "severity.policy", "severity must be one of low, medium, high, got integer 3"),
    # --- endpoint patterns
    ("irreversible_no_glob", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            irreversible:
              - POST */refund
              - POST
        """, 6, "tasks[0].irreversible[1]", "bad endpoint pattern 'POST'; expected \"METHOD GLOB\""),
    ("irreversible_id_not_a_path", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            irreversible:
              - {pattern: "POST */cancel", id: "cancellation id"}
        """, 5, "tasks[0].irreversible[0].id",
     "expected a dotted path to the resource id in the answer (e.g. cancellation_id or data.refund.id), "
     "got 'cancellation id'"),
    ("irreversible_mapping_without_pattern", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            irreversible:
              - {id: cancellation_id}
        """, 5, "tasks[0].irreversible[0].pattern", "missing required field 'pattern'"),
    ("forbidden_bad_method", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            forbidden: ["DEL-ETE *"]
        """, 4, "tasks[0].forbidden[0]", "bad method 'DEL-ETE' in 'DEL-ETE *'; expected an HTTP method (a word) or *"),
    ("forbidden_not_a_string", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            forbidden:
              - {method: DELETE, path: "*"}
        """, 5, "tasks[0].forbidden[0]", "expected a string, got a mapping"),
    ("effect_bad_count", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              effects:
                - {method: POST, path: "*/refund", count: -1}
        """, 6, "tasks[0].expected.effects[0].count", "must be at least 0, got -1"),
    ("effect_missing_path", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              effects:
                - method: POST
        """, 6, "tasks[0].expected.effects[0].path", "missing required field 'path'"),
    # --- expected output
    ("bad_regex", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              output:
                regex: "refund("
        """, 6, "tasks[0].expected.output.regex", "invalid regex 'refund(': missing ), unterminated subpattern"),
    ("bad_checker", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              output: {checker: mychecks.check}
        """, 5, "tasks[0].expected.output.checker", 'expected "module:function"'),
    ("two_output_kinds", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              output:
                regex: ok
                json: {ok: true}
        """, 7, "tasks[0].expected.output.json", "give exactly one of regex, json, checker, got regex and json"),
    ("no_output_kind", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              output: {}
        """, 5, "tasks[0].expected.output", "give exactly one of regex, json, checker, got none"),
    ("ignore_empty_segment", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            expected:
              ignore: ["refunds..created_at"]
        """, 5, "tasks[0].expected.ignore[0]", "invalid path 'refunds..created_at': empty segment"),
    # --- secrets, templates, prices
    ("secret_host_for_unknown_secret", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            secrets: [SHOP_API_KEY]
            secret_hosts:
              SHOP_API_KY: ["127.0.0.1:*"]
        """, 6, "tasks[0].secret_hosts.SHOP_API_KY",
     "'SHOP_API_KY' is not one of the task's secrets; secrets lists SHOP_API_KEY (did you mean 'SHOP_API_KEY'?)"),
    ("secret_bad_name", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            secrets: [shop api key]
        """, 4, "tasks[0].secrets[0]", "invalid name 'shop api key'"),
    ("reset_url_unterminated", "t.yaml", """\
        tasks:
          - id: a
            prompt: Do a.
            reset_url: "${SHOP_ROOT/_reset"
        """, 4, "tasks[0].reset_url", "unterminated '${'"),
    ("price_missing_output", "t.yaml", """\
        prices:
          gpt-4o:
            input_per_mtok: 2.5
        tasks:
          - {id: a, prompt: Do a.}
        """, 3, "prices.gpt-4o.output_per_mtok", "missing required field 'output_per_mtok'"),
    ("price_negative", "t.yaml", """\
        prices:
          gpt-4o: {input_per_mtok: -1, output_per_mtok: 10}
        tasks:
          - {id: a, prompt: Do a.}
        """, 2, "prices.gpt-4o.input_per_mtok", "must be at least 0, got -1"),
    # --- JSON Lines
    ("jsonl_bad_json", "t.jsonl", """\
        {"id": "a", "prompt": "Do a."}

        {"id": "b", "prompt": "Do b.",}
        """, 3, None, "invalid JSON: Expecting property name enclosed in double quotes (column 31)"),
    ("jsonl_missing_prompt", "t.jsonl", """\
        {"id": "a", "prompt": "Do a."}
        {"id": "b", "shape": "lookup"}
        """, 2, "prompt", "missing required field 'prompt'"),
    ("jsonl_duplicate_id", "t.jsonl", """\
        {"id": "a", "prompt": "Do a."}
        {"id": "b", "prompt": "Do b."}
        {"id": "a", "prompt": "Do a again."}
        """, 3, "id", "duplicate task id 'a' (first on line 1)"),
    ("jsonl_not_an_object", "t.jsonl", """\
        ["a", "Do a."]
        """, 1, None, "each line must be a JSON object (one task), got a list"),
    ("jsonl_duplicate_key", "t.jsonl", """\
        {"id": "a", "prompt": "Do a.", "id": "b"}
        """, 1, "id", "duplicate key 'id' (twice on this line)"),
    ("jsonl_nested_field", "t.jsonl", """\
        {"id": "a", "prompt": "Do a."}
        {"id": "b", "prompt": "Do b.", "expected": {"output": {"regex": "[unclosed"}}}
        """, 2, "expected.output.regex", "invalid regex '[unclosed'"),
    ("jsonl_nan", "t.jsonl", """\
        {"id": "a", "prompt": "Do a.", "budgets": {"wall_s": NaN}}
        """, 1, None, "invalid JSON: NaN is not valid JSON"),
    ("jsonl_empty", "t.jsonl", "\n\n", 1, None, "the file has no tasks"),
    ("jsonl_wrong_type", "t.jsonl", """\
        {"id": "a", "prompt": "Do a.", "max_tool_calls": true}
        """, 1, "max_tool_calls", "expected an integer, got boolean true"),
]


@pytest.mark.parametrize("name, text, line, field, phrase", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_malformed_tasks_file(tmp_path: Path, name: str, text: str, line: int | None, field: str | None,
                              phrase: str) -> None:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(TaskError) as caught:
        load_tasks(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), line, field), str(error)
    assert phrase in error.message, str(error)
    where = str(path) if line is None else f"{path}:{line}"
    assert str(error) == ": ".join(part for part in (where, field, error.message) if part is not None)


def test_case_ids_are_unique() -> None:
    assert len({case[0] for case in CASES}) == len(CASES) >= 16


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(TaskError, match="cannot read the file") as caught:
        load_tasks(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), None, None)


def test_unsupported_extension(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('{"tasks": []}')
    with pytest.raises(TaskError, match=r"unsupported tasks file type '\.json'; use \.yaml or \.yml"):
        load_tasks(path)


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_bytes(b"tasks:\n  - {id: a, prompt: \xff}\n")
    with pytest.raises(TaskError, match="cannot read the file"):
        load_tasks(path)
