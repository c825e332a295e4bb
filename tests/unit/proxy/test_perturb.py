"""ε perturbation: the same JSON value in another text; never a changed value, never a non-JSON body."""

from __future__ import annotations

import json

import pytest

from faultproxy.proxy.decide import decision_value
from faultproxy.proxy.perturb import (KINDS, is_json_content_type, iter_forms, number_form, perturb_json, perturb_json_body,
                           perturb_response)

BODIES = [
    json.dumps({"id": "1001", "status": "open", "version": 0, "amount": 1250, "price": 0.1,
                "items": [{"sku": "hoodie", "qty": 2, "unit": 12.5}, {"sku": "mug", "qty": 1, "unit": 8}],
                "note": "café / crème", "paid": True, "refund": None}).encode(),
    json.dumps({"data": [{"id": i, "total": i * 1250, "ratio": i / 7} for i in range(6)], "next_cursor": None},
               indent=2).encode(),
    b'{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":6,"total_tokens":16}}',
    b"[1, 2.5, -3, 1e-7, 6.02e23, 0, 123456789012345678901234567890]",
    b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "{\\"ok\\": true}"}]}}',
    b'"just a string"',
    b"42",
    b"true",
    b"{}",
    b"[]",
]


def draws(n: int, episode: str = "t.t0") -> list[float]:
    """As the injector draws them: a keyed hash per call, never a random generator."""
    return [decision_value("7", episode, "epsilon", seq, stream="perturb-form") for seq in range(1, n + 1)]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_same_value_different_text(body):
    for value in draws(60):
        out = perturb_json_body(body, value)
        assert out is not None
        assert out != body
        assert json.loads(out) == json.loads(body)  # == on parsed values: 1250 == 1250.0
        assert perturb_json_body(body, value) == out  # a pure function of (body, value)


def test_every_kind_of_change_happens_and_keys_are_really_reordered():
    body = BODIES[0]
    seen: set[str] = set()
    orders = set()
    for value in draws(200):
        result = perturb_json(body, value)
        seen.update(result.changes)
        orders.add(tuple(json.loads(result.body)))
    assert seen == set(KINDS)
    assert len(orders) > 3  # reverse, sorted, rotated, hashed: several orders, not one


def test_number_forms_are_the_same_number():
    assert {"1250.0", "1.25e3", "1.25E+3", "12.5e2"} <= set(iter_forms("1250"))
    assert {"5e-1", "0.50"} <= set(iter_forms("0.5"))
    for text in ("1250", "0.1", "-3", "0", "1e-7", "6.02e23", "123.456", "5e300", "9007199254740992",
                 "0.1000000000000000000001", "-17.25", "100"):
        forms = list(iter_forms(text))
        assert forms, text
        for form in forms:
            assert json.loads(form) == json.loads(text), (text, form)
    # beyond 2**53 an integer written as a float would round: it keeps its digits
    assert list(iter_forms("123456789012345678901234567890")) == []
    assert number_form("-0", "exponent") is None  # -0 stays as it is


def test_big_integers_and_duplicate_keys_survive():
    body = b'{"id": 123456789012345678901234567890, "a": 1, "a": 2, "z": {"y": 1, "x": 2}}'
    for value in draws(40):
        out = perturb_json_body(body, value)
        assert b"123456789012345678901234567890" in out
        assert json.loads(out) == json.loads(body) == {"id": 123456789012345678901234567890, "a": 2,
                                                        "z": {"y": 1, "x": 2}}
        assert out.index(b'"a"') < out.rindex(b'"a"')  # the duplicate pair keeps its order: the last one wins


@pytest.mark.parametrize("body", [b"", b"<html>oops</html>", b"{\"a\": ", b"\xff\xfe{}", b"\xef\xbb\xbf{}",
                                  b"NaN", b'{"x": Infinity}', b"[" * 5000 + b"]" * 5000])
def test_not_json_is_left_alone(body):
    assert perturb_json_body(body, 0.5) is None


def test_only_json_content_types_and_draws_in_range():
    body = BODIES[0]
    assert is_json_content_type("application/json; charset=utf-8")
    assert is_json_content_type("application/problem+json")
    assert not is_json_content_type("text/plain") and not is_json_content_type(None)
    assert perturb_response("text/plain", b"123", 0.3) is None  # "123" as text must stay "123"
    assert perturb_response("text/event-stream", b'data: {"a": 1}\n\n', 0.3) is None
    result = perturb_response("application/json", body, 0.3)
    assert result and json.loads(result.body) == json.loads(body) and result.detail.startswith("perturbed: ")
    for bad in (-0.1, 1.0, 2):
        with pytest.raises(ValueError):
            perturb_json_body(body, bad)
