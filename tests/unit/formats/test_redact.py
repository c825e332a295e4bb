"""The redaction module: names, shapes, bodies of every structure, values split across SSE
events — property tests (hypothesis) over documents, splits and names."""

from __future__ import annotations

import json
from urllib.parse import quote_plus, unquote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultproxy.formats.errors import UserError
from faultproxy.formats.redact import _CANDIDATE, _STEMS, MASK, Redactor, SecretTooShort, _has_secret_field
from faultproxy.formats.secret_names import is_secret_name

SECRET_NAMES = ["api_key", "apiKey", "x-goog-api-key", "X-Auth-Token", "Private-Token", "password", "pin_password",
                "client_secret", "access_token", "refresh_token", "Authorization", "session_id", "X-Amz-Signature",
                "credentials", "Set-Cookie", "sig", "key", "accesstoken", "clientSecret", "CSRF-Token"]
LOOKALIKES = ["max_tokens", "prompt_tokens", "completion_tokens", "total_tokens", "token_count", "input_tokens",
              "cache_read_input_tokens", "x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-limit",
              "Idempotency-Key", "idempotency_key", "keyword", "author", "monkey", "tokenizer", "usage", "id",
              "request_id", "x-request-id", "content-type", "max_completion_tokens", "reasoning_tokens", "progressToken"]
values = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ23456789-_", min_size=10, max_size=40)
plain = st.text(alphabet="abcdefghij klmnop", max_size=30)
plain_names = plain.filter(lambda name: not is_secret_name(name))  # "pin", "key", ... are secret names themselves
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | plain,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_names, inner, max_size=3),
                           max_leaves=8)


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", LOOKALIKES)
def test_names_that_only_look_secret_are_not(name):
    assert not is_secret_name(name)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(SECRET_NAMES), secret=values | st.integers(10**7, 10**12) | st.lists(values, min_size=1),
       other=st.dictionaries(st.sampled_from(LOOKALIKES), json_values, max_size=4), depth=st.integers(0, 3))
def test_any_value_under_a_secret_key_is_masked_and_the_rest_kept(name, secret, other, depth):
    document = {**other, name: secret}
    for _ in range(depth):
        document = {"wrapper": [document]}
    redacted = json.loads(Redactor().body(json.dumps(document)))
    inner = redacted
    for _ in range(depth):
        inner = inner["wrapper"][0]
    assert inner[name] == MASK
    assert {k: v for k, v in inner.items() if k != name} == other


@settings(max_examples=100)
@given(secret=values, cuts=st.lists(st.integers(1, 9), min_size=1, max_size=6), before=plain, after=plain)
def test_a_configured_value_split_across_sse_events_is_masked(secret, cuts, before, after):
    pieces, rest = [before], secret
    for cut in cuts:
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces += [rest, after]
    events = [f"data: {json.dumps({'id': 'c1', 'choices': [{'delta': {'content': p}}]})}\n\n" for p in pieces]
    out = Redactor([secret]).events(events + ["data: [DONE]\n\n"])
    joined = "".join(json.loads(e[5:])["choices"][0]["delta"]["content"] for e in out[:-1])
    assert joined == before + MASK + after
    assert all(json.loads(e[5:])["id"] == "c1" for e in out[:-1]) and out[-1] == "data: [DONE]\n\n"
    assert Redactor([secret]).body("".join(events)).count(MASK) == 1  # the same as one body


@settings(max_examples=100)
@given(secret=values, name=st.sampled_from(SECRET_NAMES), keep=plain)
def test_forms_multipart_queries_and_known_values(secret, name, keep):
    redactor = Redactor([secret + "-known"])
    form = f"{quote_plus(name)}={quote_plus(secret)}&user={quote_plus(keep)}&payload=" \
           + quote_plus(json.dumps({name: secret}))
    assert secret not in redactor.body(form) and quote_plus(secret) not in redactor.body(form)
    assert f"user={quote_plus(keep)}" in redactor.body(form)
    multipart = (f'--b0\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{secret}\r\n'
                 f'--b0\r\nContent-Disposition: form-data; name="note"\r\n\r\nkeep{keep}\r\n--b0--\r\n')
    assert secret not in redactor.body(multipart) and f"keep{keep}" in redactor.body(multipart)
    assert secret not in redactor.url(f"http://h/p?{quote_plus(name)}={quote_plus(secret)}&page=2")
    known = f"text {secret}-known and {quote_plus(secret + '-known')} and {json.dumps(secret + '-known')}"
    assert secret + "-known" not in redactor.text(known)


@settings(max_examples=100)
@given(document=st.dictionaries(st.sampled_from(SECRET_NAMES + LOOKALIKES), json_values, max_size=6))
def test_redaction_is_idempotent_and_keeps_json_valid(document):
    redactor = Redactor(["some-known-secret"])
    for text in (json.dumps(document), "\n".join(json.dumps({"n": i, **document}) for i in range(2)),
                 f"event: x\ndata: {json.dumps(document)}\n\n"):
        once = redactor.body(text)
        assert redactor.body(once) == once
    assert json.loads(redactor.body(json.dumps(document))).keys() == document.keys()


def test_ndjson_jsonrpc_and_json_inside_strings():
    redactor = Redactor()
    ndjson = '{"refresh_token": "r-secret-1", "n": 1}\n{"n": 2}\n'
    assert "r-secret-1" not in redactor.body(ndjson) and '{"n": 2}' in redactor.body(ndjson)
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "params": {"arguments": json.dumps({"access_token": "a-secret-1"})}})
    assert "a-secret-1" not in redactor.body(rpc) and '"jsonrpc": "2.0"' in redactor.body(rpc)



def test_a_session_settings_object_is_opened_but_a_session_id_and_other_secret_objects_are_masked():
    redactor = Redactor()
    event = {"type": "session.updated", "session": {"model": "gpt-realtime", "instructions": "Be brief.",
                                                    "client_secret": {"value": "ek_live_1", "expires_at": 9},
                                                    "session_token": "st-secret-2", "tools": []}}
    assert json.loads(redactor.body(json.dumps(event))) == {"type": "session.updated", "session": {
        "model": "gpt-realtime", "instructions": "Be brief.", "client_secret": MASK, "session_token": MASK, "tools": []}}
    assert json.loads(redactor.body('{"session": "sess-cookie-3", "sessions": ["a1", "b2"]}')) == {
        "session": MASK, "sessions": MASK}
    assert json.loads(redactor.body('{"cookies": {"theme": "c-secret-4"}, "credentials": {"user": "u"}}')) == {
        "cookies": MASK, "credentials": MASK}  # a container of secrets under arbitrary names stays masked whole

@pytest.mark.parametrize("leak", [
    "Authorization: Bearer abcDEF123456ghi", "key sk-" + "abcdefghijklmnop1234", "sk-ant-api03-" + "abcdefghijklmnop",
    "AIza" + "SyA1234567890abcdefghijklmnopqrstu", "ghp_" + "a" * 36, "xoxb-" + "1234567890-abcdef", "AKIA" + "ABCDEFGHIJKLMNOP",
])
def test_well_known_shapes_in_free_text(leak):
    out = Redactor().text(f"error: {leak} (retrying)")
    assert MASK in out and out.startswith("error: ") and out.endswith(" (retrying)")
    assert leak.split()[-1] not in out


def test_headers_by_name_with_the_allow_list():
    pairs = [("x-goog-api-key", "g-secret-123"), ("X-Auth-Token", "t"), ("Private-Token", "p"),
             ("x-ratelimit-remaining-tokens", "9000"), ("anthropic-ratelimit-tokens-limit", "80000"),
             ("Idempotency-Key", "idem-1"), ("x-request-id", "req_1"), ("X-Debug", "uses known-secret-value")]
    out = dict(Redactor(["known-secret-value"]).headers(pairs))
    assert out["x-goog-api-key"] == out["X-Auth-Token"] == out["Private-Token"] == MASK
    assert (out["x-ratelimit-remaining-tokens"], out["anthropic-ratelimit-tokens-limit"]) == ("9000", "80000")
    assert (out["Idempotency-Key"], out["x-request-id"], out["X-Debug"]) == ("idem-1", "req_1", f"uses {MASK}")


def test_documents_keep_faultproxys_own_name_fields_and_variable_references():
    task = {"key": "t1.t0", "secrets": ["SHOP_TOKEN"], "env": {"SHOP_TOKEN": "${SHOP_TOKEN}", "API_KEY": "literal-k1"},
            "output": {"answer": "the key is known-secret-value"}}
    out = Redactor(["known-secret-value"]).document(task)
    assert out["key"] == "t1.t0" and out["secrets"] == ["SHOP_TOKEN"]
    assert out["env"] == {"SHOP_TOKEN": "${SHOP_TOKEN}", "API_KEY": MASK}
    assert out["output"]["answer"] == f"the key is {MASK}"


def test_a_short_secret_is_refused():
    with pytest.raises(SecretTooShort, match="at least 8 characters") as caught:
        Redactor.from_env(["PIN"], {"PIN": "1234"})
    assert isinstance(caught.value, UserError) and "--secret-env PIN" in str(caught.value)
    assert "1234" not in str(caught.value)
    assert Redactor.from_env(["UNSET"], {}).secrets == frozenset()


# The gate that says a body may hold a secret-named field: its fast path (ASCII text lowered, a
# first look at the names alone) must answer as the case-insensitive regex it stands for.
_GATE_PIECES = ['"', '\\"', ":", "=", "&", "?", ";", " ", "\n", "{", "}", ",", ".", "-", "[", "]", "é", "K",
                *SECRET_NAMES, *LOOKALIKES, "TOKEN", "Key", "sid", "design", "mapping", "inside", "value", "x"]


def _gate_reference(text: str) -> bool:
    """The gate as it was: a substring test for the stems, then the case-insensitive regex."""
    if "%7B" in text or "%7b" in text:
        text = unquote_plus(text)
    lowered = text.lower()
    if not any(stem in lowered for stem in _STEMS):
        return False
    return any(is_secret_name(m.group(1)) for m in _CANDIDATE.finditer(text))


@pytest.mark.parametrize("text", [
    '"a"token":1', '"token"secret":1', '{"apiKey": "x"}', '{\\"client_secret\\": \\"x\\"}', "a=1&password=2",
    '{"description": "design a mapping inside"}', 'name="session_id"', "APIKEY=1", "café \"api_key\":1",
    "\u212aey=1", 'x%7B%22token%22%3A1%7D', '{"progressToken": 1, "max_tokens": 2}',
])
def test_the_secret_field_gate_answers_as_its_regex(text):
    assert _has_secret_field(text) == _gate_reference(text)


@given(st.lists(st.sampled_from(_GATE_PIECES), max_size=30).map("".join))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_the_secret_field_gate_answers_as_its_regex_on_any_text(text):
    assert _has_secret_field(text) == _gate_reference(text)


def test_a_header_value_seen_before_is_redacted_by_each_redactor_as_its_own():
    """Header values are remembered once redacted (they repeat on every request): per redactor,
    so one that knows a secret value masks it even after another let it pass."""
    headers = [("x-note", "hunter2hunter2"), ("x-auth-hint", "Bearer abcdefghijklmnopqrstuvwxyz012345")]
    plain, knowing = Redactor(), Redactor(["hunter2hunter2"])
    for _ in range(2):
        assert plain.headers(headers) == [("x-note", "hunter2hunter2"), ("x-auth-hint", MASK)]
        assert knowing.headers(headers) == [("x-note", MASK), ("x-auth-hint", MASK)]
