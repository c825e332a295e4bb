"""Every malformed scenario gets exactly one ScenarioError naming its file, line and field."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from faultproxy.scenarios import ScenarioError, load_scenario

# Each case: id, YAML text, expected line (1-based, None if none), field (None if none),
# a phrase the message must contain, and param overrides passed to load_scenario.
CASES = [
    ("yaml_syntax", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: reset
        """, 6, None, "invalid YAML", None),
    ("yaml_two_documents", """\
        name: t
        ---
        name: u
        """, 2, None, "expected a single document", None),
    ("empty_file", "", 1, None, "the file is empty", None),
    ("top_not_mapping", """\
        - name: t
        - description: d
        """, 1, None, "must be a mapping", None),
    ("duplicate_key", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: reset}
            name: s
        """, 6, "rules[0].name", "duplicate key 'name' (first on line 4)", None),
    ("missing_top_field", """\
        # a comment before the mapping
        name: t
        rules:
          - name: r
            fault: {type: reset}
        """, 2, "description", "missing required field 'description'", None),
    ("missing_rule_fault", """\
        name: t
        description: d
        rules:
          - name: r
            match: {path: "*/x"}
        """, 4, "rules[0].fault", "missing required field 'fault'", None),
    ("missing_fault_type", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              hold_s: 3
        """, 6, "rules[0].fault.type", "missing required field 'type'", None),
    ("unknown_top_field", """\
        name: t
        description: d
        rulez: []
        rules:
          - {name: r, fault: {type: reset}}
        """, 3, "rulez", "unknown field 'rulez'; expected one of name, description, seed, params, rules, expect",
     None),
    ("unknown_when_field", """\
        name: t
        description: d
        rules:
          - name: r
            when:
              probabilty: 0.5
            fault: {type: reset}
        """, 6, "rules[0].when.probabilty", "did you mean 'probability'?", None),
    ("unknown_fault_field", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: rate_limit
              retry_afer: 2
        """, 7, "rules[0].fault.retry_afer", "unknown field 'retry_afer'", None),
    ("unknown_match_field", """\
        name: t
        description: d
        rules:
          - name: r
            match: {path: "*/x", methd: POST}
            fault: {type: reset}
        """, 5, "rules[0].match.methd", "did you mean 'method'?", None),
    ("unknown_fault_type", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: rate_limt}
        """, 5, "rules[0].fault.type", "unknown fault type 'rate_limt'; expected one of rate_limit, server_error",
     None),
    ("wrong_type_number", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: rate_limit
              retry_after: abc
        """, 7, "rules[0].fault.retry_after", "expected a number, got string 'abc'", None),
    ("boolean_is_not_a_probability", """\
        name: t
        description: d
        rules:
          - name: r
            when: {probability: true}
            fault: {type: reset}
        """, 5, "rules[0].when.probability", "got boolean true", None),
    ("probability_above_one", """\
        name: t
        description: d
        rules:
          - name: r
            when:
              probability: 1.5
            fault: {type: reset}
        """, 6, "rules[0].when.probability", "must be between 0 and 1, got 1.5", None),
    ("param_not_defined", """\
        name: t
        description: d
        params: {lambda: 0.3}
        rules:
          - name: r
            when: {probability: lamda}
            fault: {type: reset}
        """, 6, "rules[0].when.probability", "param 'lamda' is not defined; defined: lambda", None),
    ("param_out_of_range_after_override", """\
        name: t
        description: d
        params: {lambda: 0.3}
        rules:
          - name: r
            fault: {type: reset}
          - name: s
            when: {probability: lambda}
            fault: {type: reset}
        """, 8, "rules[1].when.probability", "param 'lambda' is 2.0", {"lambda": 2}),
    ("override_not_a_number", """\
        name: t
        description: d
        rules:
          - {name: r, fault: {type: reset}}
        """, None, "params.lambda", "override must be a finite number, got string 'x'", {"lambda": "x"}),
    ("param_not_a_number", """\
        name: t
        description: d
        params:
          lambda: high
        rules:
          - {name: r, fault: {type: reset}}
        """, 4, "params.lambda", "expected a number, got string 'high'", None),
    ("param_bad_name", """\
        name: t
        description: d
        params:
          2x: 0.5
        rules:
          - {name: r, fault: {type: reset}}
        """, 4, "params.2x", "invalid param name '2x'", None),
    ("path_regex_does_not_compile", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              path: "re:/orders/[0-9+"
            fault: {type: reset}
        """, 6, "rules[0].match.path", "invalid regex '/orders/[0-9+': unterminated character set", None),
    ("header_regex_does_not_compile", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              headers:
                X-Tenant: "re:(a"
            fault: {type: reset}
        """, 7, "rules[0].match.headers.X-Tenant", "missing ), unterminated subpattern", None),
    ("duplicate_rule_name", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: reset}
          - name: r
            fault: {type: reset}
        """, 6, "rules[1].name", "duplicate rule name 'r' (first on line 4)", None),
    ("calls_zero", """\
        name: t
        description: d
        rules:
          - name: r
            when:
              calls: [1, 0]
            fault: {type: reset}
        """, 6, "rules[0].when.calls[1]", "must be at least 1, got 0", None),
    ("calls_not_a_list", """\
        name: t
        description: d
        rules:
          - name: r
            when: {calls: 2}
            fault: {type: reset}
        """, 5, "rules[0].when.calls", "expected a list of call numbers, got integer 2", None),
    ("every_zero", """\
        name: t
        description: d
        rules:
          - name: r
            when: {every: 0}
            fault: {type: reset}
        """, 5, "rules[0].when.every", "must be at least 1, got 0", None),
    ("after_negative", """\
        name: t
        description: d
        rules:
          - name: r
            when: {after: -1}
            fault: {type: reset}
        """, 5, "rules[0].when.after", "must be at least 0, got -1", None),
    ("max_not_integer", """\
        name: t
        description: d
        rules:
          - name: r
            when: {max: 1.5}
            fault: {type: reset}
        """, 5, "rules[0].when.max", "expected an integer, got number 1.5", None),
    ("bad_enum_provider", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: rate_limit, provider: azure}
        """, 5, "rules[0].fault.provider", "must be one of auto, openai, anthropic, gemini, generic, got string 'azure'",
     None),
    ("bad_enum_status", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: server_error
              status: 418
        """, 7, "rules[0].fault.status", "must be one of 500, 502, 503, 504, 529, got integer 418", None),
    ("partial_two_cut_points", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: partial_response
              bytes: 100
              fraction: 0.5
        """, 8, "rules[0].fault.fraction", "give only one of bytes, fraction, events (got bytes and fraction)",
     None),
    ("fraction_above_one", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: partial_response, fraction: 2}
        """, 5, "rules[0].fault.fraction", "must be between 0 and 1, got 2", None),
    ("delay_min_above_max", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: delay
              distribution: uniform
              min_ms: 2000
        """, 8, "rules[0].fault.min_ms", "min_ms (2000) is greater than max_ms (1000)", None),
    ("empty_rules", """\
        name: t
        description: d
        rules: []
        """, 3, "rules", "the list of rules is empty", None),
    ("rules_missing_value", """\
        name: t
        description: d
        rules:
        """, 3, "rules", "expected a list of rules, got null", None),
    ("drift_op_missing_to", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - {op: rename, path: status}
        """, 8, "rules[0].fault.ops[0].to", "missing required field 'to'", None),
    ("drift_ops_missing", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: schema_drift}
        """, 5, "rules[0].fault.ops", "missing required field 'ops'", None),
    ("drift_unknown_op", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - op: delete
                  path: status
        """, 8, "rules[0].fault.ops[0].op", "must be one of rename, remove, add, retype, wrap, reorder", None),
    ("drift_retype_bad_target", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - op: retype
                  path: total
                  to: float
        """, 10, "rules[0].fault.ops[0].to", "must be one of string, number, integer", None),
    ("drift_rename_wildcard_end", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops: [{op: rename, path: "choices.*", to: x}]
        """, 7, "rules[0].fault.ops[0].path", "needs a path ending in a field name", None),
    ("drift_field_for_other_op", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - op: remove
                  path: usage
                  to: x
        """, 10, "rules[0].fault.ops[0].to", "unknown field 'to'; expected one of op, path", None),
    ("drift_first_on_add", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops: [{op: add, path: x, value: 1, first: string}]
        """, 7, "rules[0].fault.ops[0].first", "unknown field 'first'; expected one of op, path, value", None),
    ("drift_first_bad_type", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - {op: rename, first: text, to: x}
        """, 8, "rules[0].fault.ops[0].first", "must be one of string, number, integer", None),
    ("drift_rename_names_no_field", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: schema_drift
              ops:
                - {op: rename, to: x}
        """, 8, "rules[0].fault.ops[0].path", "missing required field 'path'", None),
    ("seed_float", """\
        name: t
        description: d
        seed: 1.5
        rules:
          - {name: r, fault: {type: reset}}
        """, 3, "seed", "expected an integer or a string, got number 1.5", None),
    ("name_wrong_type", """\
        name: [t]
        description: d
        rules:
          - {name: r, fault: {type: reset}}
        """, 1, "name", "expected a string, got a list", None),
    ("expect_not_mapping", """\
        name: t
        description: d
        rules:
          - {name: r, fault: {type: reset}}
        expect: [pass]
        """, 5, "expect", "expected a mapping, got a list", None),
    ("expect_max_drop_missing_drop", """\
        name: t
        description: d
        rules:
          - {name: r, fault: {type: reset}}
        expect:
          max_drop:
            at: 0.3
        """, 7, "expect.max_drop.drop", "missing required field 'drop'", None),
    ("body_exists_not_boolean", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              body:
                messages: {exists: yes please}
            fault: {type: reset}
        """, 7, "rules[0].match.body.messages.exists", "expected a boolean (true or false)", None),
    ("body_bad_path", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              body: {"params..name": x}
            fault: {type: reset}
        """, 6, "rules[0].match.body.params..name", "empty segment", None),
    ("bad_method", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              method: [GET, "PO ST"]
            fault: {type: reset}
        """, 6, "rules[0].match.method[1]", "not an HTTP method", None),
    ("unknown_api", """\
        name: t
        description: d
        rules:
          - name: r
            match: {api: openai_response}
            fault: {type: reset}
        """, 5, "rules[0].match.api", "unknown model API 'openai_response'; expected one of model, openai_chat,",
     None),
    ("unknown_kind", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              kind: [read, writes]
            fault: {type: reset}
        """, 6, "rules[0].match.kind[1]", "unknown request kind 'writes'; expected one of model, read, write, "
                                          "irreversible, mcp_tool (did you mean 'write'?)", None),
    ("unknown_api_in_list", """\
        name: t
        description: d
        rules:
          - name: r
            match:
              api: [gemini, mcp]
            fault: {type: reset}
        """, 6, "rules[0].match.api[1]", "unknown model API 'mcp'", None),
    ("empty_api_list", """\
        name: t
        description: d
        rules:
          - name: r
            match: {api: []}
            fault: {type: reset}
        """, 5, "rules[0].match.api", "the list of model APIs is empty", None),
    ("stream_without_api", """\
        name: t
        description: d
        rules:
          - name: r
            match: {path: "*/chat/completions", stream: true}
            fault: {type: reset}
        """, 5, "rules[0].match.stream", "stream needs api beside it", None),
    ("stream_not_boolean", """\
        name: t
        description: d
        rules:
          - name: r
            match: {api: model, stream: "yes please"}
            fault: {type: reset}
        """, 5, "rules[0].match.stream", "expected a boolean", None),
    ("non_string_key", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: reset}
            1: x
        """, 6, "rules[0]", "field names must be strings, got integer 1", None),
    ("tools_changed_schema_without_ops", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: tools_changed, change: schema}
        """, 5, "rules[0].fault.ops", "change: schema needs `ops`", None),
    ("tools_changed_ops_without_schema", """\
        name: t
        description: d
        rules:
          - name: r
            fault: {type: tools_changed, change: rename, ops: [{op: remove, path: properties.x}]}
        """, 5, "rules[0].fault.ops", "ops applies to change: schema, not rename", None),
    ("tools_changed_bad_op", """\
        name: t
        description: d
        rules:
          - name: r
            fault:
              type: tools_changed
              change: schema
              ops:
                - {op: retype, path: properties.cents.type, to: text}
        """, 9, "rules[0].fault.ops[0].to", "text", None),
    ("unknown_yaml_tag", """\
        name: t
        description: !!python/name:os.system d
        rules:
          - {name: r, fault: {type: reset}}
        """, 2, "description", "could not determine a constructor", None),
]


@pytest.mark.parametrize(("text", "line", "field", "phrase", "overrides"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_malformed_scenario(tmp_path: Path, text: str, line: int | None, field: str | None,
                            phrase: str, overrides: dict | None) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path), overrides)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), line, field)
    assert phrase in error.message
    where = str(path) if line is None else f"{path}:{line}"
    assert str(error) == ": ".join(part for part in (where, field, error.message) if part is not None)


def test_case_ids_are_unique() -> None:
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids)) >= 24


def test_missing_file_names_it_and_lists_bundled(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(tmp_path / "nope.yaml"))
    error = caught.value
    assert error.path == str(tmp_path / "nope.yaml") and error.line is None and error.field is None
    assert "no such scenario file" in error.message and "rate_limit" in error.message


def test_unknown_bare_name_lists_bundled() -> None:
    with pytest.raises(ScenarioError, match=r"^rate_limits: no such scenario file; bundled scenarios: .*rate_limit"):
        load_scenario("rate_limits")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(path)


def test_recursive_alias_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("name: t\ndescription: d\nrules: &r\n  - *r\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.line == 3 and "alias" in caught.value.message


def test_error_pickles_with_its_fields() -> None:
    error = ScenarioError("s.yaml", 3, "rules[0].name", "bad")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.line, copy.field, copy.message, str(copy)) == (
        "s.yaml", 3, "rules[0].name", "bad", "s.yaml:3: rules[0].name: bad")
