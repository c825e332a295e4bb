"""Secrets hidden in base64 and gzip (issue 22): the redactor opens them and scan finds them.

Properties (hypothesis) against an oracle (tests.support.secret_leaks), independent of formats/encoded.py: it
decodes every base64-looking run of the output at every alignment, in both alphabets, and
gunzips whatever is gzip, recursively; no configured secret may be in anything it finds."""

from __future__ import annotations

import base64
import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from faultproxy.cli.scan import scan
from faultproxy.formats.redact import MASK, Redactor
from tests.support.secret_leaks import leaks

values = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789-_", min_size=8, max_size=40)
plain = st.text(alphabet="0123456789 ,.;:()", max_size=60)  # no secret name, shape or base64 run can form


def b64(data: bytes, urlsafe: bool = False, padded: bool = True) -> str:
    text = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()
    return text if padded else text.rstrip("=")


def scan_finds(text: str | bytes, secret: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return list(scan(path, [secret]))


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(secret=values, before=st.binary(max_size=12), after=st.binary(max_size=12), around=plain,
       how=st.sampled_from(["field", "whole", "gzip_field", "json_in_field", "text_in_field"]),
       urlsafe=st.booleans(), padded=st.booleans())
def test_a_configured_value_never_survives_base64_or_gzip_in_a_body(secret, before, after, around, how, urlsafe,
                                                                    padded):
    """Wherever a configured secret sits in base64 (binary around it or not, gzipped or not, text
    in a JSON field or the whole body), the redacted body holds it nowhere, and scan finds it in
    the original and not in the redacted one."""
    assume(secret not in around)
    inner = {"field": before + secret.encode() + after, "whole": before + secret.encode() + after,
             "gzip_field": gzip.compress(before + secret.encode() + after),
             "json_in_field": json.dumps({"note": around, "value": secret}).encode(),
             "text_in_field": f"{around} {secret} {around}".encode()}[how]
    encoded = b64(inner, urlsafe, padded)
    body = encoded if how == "whole" else json.dumps({"note": around, "blob": encoded, "n": 3})
    redactor = Redactor([secret])
    redacted = redactor.body(body)
    assert not leaks(redacted, secret)
    assert scan_finds(body, secret) and not scan_finds(redacted, secret)
    if how != "whole":
        assert json.loads(redacted)["note"] == around  # the body is still the JSON it was


@settings(max_examples=80)
@given(secret=values, prefix=st.binary(max_size=30), suffix=st.binary(max_size=30), gzipped=st.booleans())
def test_a_binary_body_is_redacted_as_bytes(secret, prefix, suffix, gzipped):
    """A body that is not text (gzip sent without Content-Encoding, or raw bytes): its configured
    values are gone, gzip is still gzip."""
    raw = prefix + secret.encode() + suffix
    body = gzip.compress(raw) if gzipped else raw
    redacted = Redactor([secret]).binary(body)
    assert not leaks(redacted, secret)
    if gzipped:
        assert gzip.decompress(redacted) == raw.replace(secret.encode(), MASK.encode())


@settings(max_examples=80)
@given(text=plain, urlsafe=st.booleans(), gzipped=st.booleans(), secret=values)
def test_base64_without_secrets_is_left_exactly_as_it_was(text, urlsafe, gzipped, secret):
    """Opening base64 and gzip changes nothing unless something inside is masked."""
    data = text.encode() * 3
    blob = b64(gzip.compress(data) if gzipped else data, urlsafe)
    body = json.dumps({"attachment": blob, "text": text})
    redactor = Redactor([secret + "@never-in-the-text"])
    assert redactor.body(body) == body and redactor.body(blob) == blob
    packed = gzip.compress(data)  # once: gzip's header holds the time, which may tick between two calls
    assert redactor.binary(packed) == packed


def test_secret_names_and_shapes_inside_base64_are_masked_and_the_rest_kept():
    """No value configured: a secret-named JSON key inside a base64 body, and a credential shape
    inside a base64 field, found by what they are."""
    key = "sk-proj-" + "Mn6Bv1Cx5Zl9Kj4Hg"
    hidden = b64(json.dumps({"api_key": "plain-value-123456", "model": "m-1"}).encode())
    body = json.dumps({"payload": hidden, "attachment": b64(f"use {key} please".encode(), urlsafe=True)})
    redacted = json.loads(Redactor().body(body))
    assert json.loads(base64.b64decode(redacted["payload"])) == {"api_key": MASK, "model": "m-1"}
    assert base64.urlsafe_b64decode(redacted["attachment"]).decode() == f"use {MASK} please"
    assert Redactor().body(hidden) == b64(json.dumps({"api_key": MASK, "model": "m-1"}).encode())


@settings(max_examples=60)
@given(note=plain, urlsafe=st.booleans(), padded=st.booleans())
def test_a_run_encoded_again_decodes_as_the_original_did(note, urlsafe, padded):
    """Padding and alphabet are kept as they were, so whatever decoded the original decodes the
    redacted run (strictly, when it was padded)."""
    blob = b64(json.dumps({"note": note, "password": "hunter2-hunter2"}).encode(), urlsafe, padded)
    redacted = Redactor().body(blob)
    decoded = (base64.urlsafe_b64decode if urlsafe else base64.b64decode)(redacted + "=" * (-len(redacted) % 4))
    assert json.loads(decoded) == {"note": note, "password": MASK}
    assert redacted.endswith("=") or len(redacted) % 4 == 0 or not padded


def test_base64_nested_deeper_than_the_redactor_opens_is_masked_whole():
    secret = "deep-secret-Qw8Er3Ty"
    blob = json.dumps({"password": secret}).encode()
    for _ in range(6):
        blob = base64.b64encode(blob)
    redacted = Redactor().body(blob.decode())
    assert not leaks(redacted, secret)


def test_a_gzip_file_and_base64_in_a_har_body_are_found_by_scan(tmp_path):
    """scan opens a gzip file, and a HAR body stored as `encoding: base64` (binary around the
    secret), without printing the secret."""
    secret = "planted-Zx2Cv7Bn9"
    (tmp_path / "trace.jsonl.gz").write_bytes(gzip.compress(f'{{"ok": 1}}\n{{"note": "{secret}"}}\n'.encode()))
    content = {"mimeType": "application/octet-stream", "encoding": "base64",
               "text": b64(b"\x00\x01\x02" + secret.encode() + b"\xff")}
    (tmp_path / "flows.har").write_text(json.dumps({"log": {"entries": [{"response": {"content": content}}]}}))
    found = list(scan(tmp_path, [secret]))
    assert found == [f"{tmp_path / 'flows.har'}:1: planted secret #1 (of 1), base64-encoded",
                     f"{tmp_path / 'trace.jsonl.gz'} (gzip):2: planted secret #1 (of 1)"]
    assert not any(secret in line for line in found)


names = st.sampled_from(["api_key", "password", "X-Auth-Token", "clientSecret", "session_id", "access_token"])


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(secret=values, name=names, separator=st.sampled_from(["=", ": ", " = "]), before=plain, after=plain,
       nesting=st.sampled_from(["field", "json_in_field", "base64_in_field", "base64_in_json_in_field"]),
       urlsafe=st.booleans())
def test_a_secret_named_assignment_in_base64_text_is_masked_and_scan_sees_it_unmasked(
        secret, name, separator, before, after, nesting, urlsafe):
    """Nobody configured the secret: `{"blob": base64("... api_key=SECRET ...")}` (the text once
    more inside JSON or base64) is found by its name, masked, and encoded again; scan reports
    the unredacted body and finds nothing in the redacted one."""
    assume(secret not in before + after)
    text = f"{before} {name}{separator}{secret}\n{after}".encode()
    if nesting == "json_in_field":
        text = json.dumps({"note": text.decode()}).encode()
    elif nesting == "base64_in_field":
        text = b64(text, urlsafe).encode()
    elif nesting == "base64_in_json_in_field":
        text = json.dumps({"inner": b64(text, urlsafe)}).encode()
    body = json.dumps({"blob": b64(text, urlsafe), "model": "m-1"})
    redacted = Redactor().body(body)
    assert not leaks(redacted, secret)
    assert json.loads(redacted)["model"] == "m-1"
    assert any(f"a value for the secret-named {name!r}" in line for line in scan_finds(body, secret="unused-1234"))
    assert not any("secret-named" in line for line in scan_finds(redacted, secret="unused-1234"))
